// The CUDA AdamW kernels' launch interface (adamw.cu), in plain types (adamw_ops.cpp turns the Task into calls).
#pragma once
#include <cstdint>

#include "dygrad/backend/cuda/elementwise.h"  // ElemType, LaunchArgs

namespace dg::cuda {

// Tensors per launch: their descriptors travel by value in the kernel's parameters (under the 4 KiB of older GPUs).
inline constexpr int kAdamTensorsPerLaunch = 64;

struct AdamTensors {
  int count = 0;
  void* param[kAdamTensorsPerLaunch];
  void* exp_avg[kAdamTensorsPerLaunch];
  void* exp_avg_sq[kAdamTensorsPerLaunch];
  const void* grad[kAdamTensorsPerLaunch];
  float* step[kAdamTensorsPerLaunch];  // 0-d float32 counts, incremented before the update
  int64_t numel[kAdamTensorsPerLaunch];
};

// One AdamW (decoupled) or Adam step over up to kAdamTensorsPerLaunch tensors of `type` (params, states and
// grads of one dtype), the hyper-parameters read on the device when the step runs: lr (a 0-d float32 or float64
// tensor) and {beta1, beta2, eps, weight_decay} (float64 [4]), as the CPU kernel (backend/cpu/fused_adamw.cpp).
void launch_adamw(ElemType type, const AdamTensors& tensors, const void* lr, bool lr_is_float32, const double* hyper,
                  bool decoupled, const LaunchArgs& args);

}  // namespace dg::cuda
