// The CUDA backend's rotary position embedding (rope.cu): inputs (x[A0, A1, A2, D] any strides, cos[T, D/2],
// sin[T, D/2]), output y of x's shape; RopeAttrs rotate_half, time_dim, inverse (the backward), as the CPU kernel
// takes them (backend/cpu/fused_rope.cpp). Compiles for sm_90; not yet run on a GPU.
#include "dygrad/backend/cuda/cuda_device.h"
#include "dygrad/backend/cuda/elem_type.h"
#include "dygrad/backend/cuda/rope.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

namespace dg::cuda {
namespace {

void rope_kernel(Task& task) {
  const Tensor& x = task.inputs[0];
  const Tensor& cos = task.inputs[1];
  const Tensor& sin = task.inputs[2];
  const Tensor& y = task.outputs[0];
  const RopeAttrs& attrs = task.attrs.get<RopeAttrs>();
  const ElemType type = elem_type(task, x.dtype(), true);
  DG_CHECK(x.dim() == 4 && cos.dim() == 2 && sin.dim() == 2 && cos.dtype() == x.dtype() && sin.dtype() == x.dtype(),
           Runtime, "[", task.op->name, "] the CUDA kernel takes x [A0, A1, A2, D] and cos, sin [T, D/2] of x's dtype");
  RopeLayout layout{};
  for (int d = 0; d < 4; ++d) {
    layout.shape[d] = x.shape()[static_cast<size_t>(d)];
    layout.x_strides[d] = x.strides()[static_cast<size_t>(d)];
    layout.y_strides[d] = y.strides()[static_cast<size_t>(d)];
  }
  for (int d = 0; d < 2; ++d) {
    layout.cos_strides[d] = cos.strides()[static_cast<size_t>(d)];
    layout.sin_strides[d] = sin.strides()[static_cast<size_t>(d)];
  }
  layout.time_dim = static_cast<int>(attrs.time_dim);
  layout.rotate_half = attrs.rotate_half;
  layout.inverse = attrs.inverse;
  const LaunchContext ctx = launch_context(task);
  launch_rope(type, layout, y.raw_data(), x.raw_data(), cos.raw_data(), sin.raw_data(), {ctx.stream, ctx.fault});
  check_launch(task);
}

}  // namespace

DG_REGISTER_KERNEL(rotary_position_embedding, Device::Type::CUDA, rope_kernel);
DG_REGISTER_KERNEL(rotary_position_embedding_backward, Device::Type::CUDA, rope_kernel);

}  // namespace dg::cuda
