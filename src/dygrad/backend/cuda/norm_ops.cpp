// The CUDA backend's RMSNorm forward (norm.cu): rms_norm, inputs (x[R..., C], weight[C] when has_weight),
// RmsNormAttrs eps, outputs (y[R..., C] contiguous, rstd[R] in the compute dtype); rms_norm_apply, inputs (x, rstd,
// weight when has_weight), output y (the rematerialized output): as the CPU kernels take them
// (backend/cpu/fused_norm.cpp). Compiles for sm_90; not yet run on a GPU.
#include <vector>

#include "dygrad/backend/cuda/cuda_device.h"
#include "dygrad/backend/cuda/elem_type.h"
#include "dygrad/backend/cuda/norm.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

namespace dg::cuda {
namespace {

// rms_norm: inputs (x, weight?), outputs (y, rstd). rms_norm_apply (apply): inputs (x, rstd, weight?), output y.
void rms_norm_common(Task& task, bool apply) {
  const Tensor& x = task.inputs[0];
  const RmsNormAttrs& attrs = task.attrs.get<RmsNormAttrs>();
  const ElemType type = elem_type(task, x.dtype(), true);
  const Tensor& rstd = apply ? task.inputs[1] : task.outputs[1];
  DG_CHECK(x.dim() >= 1 && task.outputs[0].is_contiguous() && rstd.is_contiguous(), Runtime, "[", task.op->name,
           "] the CUDA kernel takes a contiguous y and rstd");
  const int64_t cols = x.shape()[static_cast<size_t>(x.dim() - 1)];
  std::vector<int64_t> sizes(x.shape().begin(), x.shape().end() - 1), strides(x.strides().begin(), x.strides().end() - 1);
  int64_t num_rows = 1;
  for (int64_t s : sizes) num_rows *= s;
  const OperandLayout layout[1] = {{sizes, strides}};
  OffsetCalculator<1> rows;
  DG_CHECK(make_offset_calculator<1>(sizes, layout, rows), NotImplemented, "[", task.op->name,
           "] the CUDA kernel takes at most ", kMaxOffsetDims, " dims");
  const size_t weight_input = apply ? 2 : 1;
  const void* w = attrs.has_weight ? task.inputs[weight_input].raw_data() : nullptr;
  const int64_t w_stride = attrs.has_weight && cols > 1 ? task.inputs[weight_input].strides()[0] : 1;
  const LaunchContext ctx = launch_context(task);
  launch_rms_norm(type, rows, num_rows, cols, cols == 1 ? 1 : x.strides()[static_cast<size_t>(x.dim() - 1)],
                  x.raw_data(), w, w_stride, attrs.eps, task.outputs[0].raw_data(), rstd.raw_data(), apply,
                  {ctx.stream, ctx.fault});
  check_launch(task);
}

void rms_norm_kernel(Task& task) { rms_norm_common(task, false); }
void rms_norm_apply_kernel(Task& task) { rms_norm_common(task, true); }

}  // namespace

DG_REGISTER_KERNEL(rms_norm, Device::Type::CUDA, rms_norm_kernel);
DG_REGISTER_KERNEL(rms_norm_apply, Device::Type::CUDA, rms_norm_apply_kernel);

}  // namespace dg::cuda
