// The CUDA rotary-embedding kernel's launch interface (rope.cu), in plain types (rope_ops.cpp turns Tasks into calls).
#pragma once
#include <cstdint>

#include "dygrad/backend/cuda/elementwise.h"  // ElemType, LaunchArgs

namespace dg::cuda {

struct RopeLayout {
  int64_t shape[4];       // x's and y's [A0, A1, A2, D]
  int64_t x_strides[4], y_strides[4];
  int64_t cos_strides[2], sin_strides[2];  // [T, D/2]
  int time_dim;           // 1 or 2: the dim of x holding the position
  bool rotate_half;       // pairs (p, p + D/2), else (2p, 2p + 1)
  bool inverse;           // rotate by -angle (the backward)
};

// y = x with every pair of channels rotated by its position's angle (backend/cpu/fused_rope.cpp's formula).
void launch_rope(ElemType type, const RopeLayout& layout, void* y, const void* x, const void* cos, const void* sin,
                 const LaunchArgs& args);

}  // namespace dg::cuda
