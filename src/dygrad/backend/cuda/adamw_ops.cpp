// The CUDA backend's adamw_step (adamw.cu): the CPU kernel's operands (backend/cpu/fused_adamw.cpp) - outputs
// (param_0.., exp_avg_0.., exp_avg_sq_0.., step_0..), the same 4P tensors as inputs, then grad_0.., lr and the float64
// hyper-parameters [4] - in launches of up to kAdamTensorsPerLaunch tensors. Master weights (16-bit model copies,
// 5P outputs, or grads of another dtype than the params) are not provided on CUDA yet and raise naming the op.
// Compiles for sm_90; not yet run on a GPU.
#include "dygrad/backend/cuda/adamw.h"
#include "dygrad/backend/cuda/cuda_device.h"
#include "dygrad/backend/cuda/elem_type.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

namespace dg::cuda {
namespace {

void adamw_kernel(Task& task) {
  const size_t count = task.inputs.size() - task.outputs.size() - 2;
  DG_CHECK(task.outputs.size() == 4 * count, NotImplemented, "[adamw_step] master weights (16-bit copies of float32 "
           "params) have no CUDA kernel yet");
  const Tensor& lr = task.inputs[task.inputs.size() - 2];
  const Tensor& hyper = task.inputs.back();
  DG_CHECK(lr.dtype() == DType::Float32 || lr.dtype() == DType::Float64, Type, "[adamw_step] lr must be a float32 or "
           "float64 tensor on CUDA, got ", dtype_name(lr.dtype()));
  if (count == 0) return;
  const DType dtype = task.outputs[0].dtype();
  const ElemType type = elem_type(task, dtype, true);
  const LaunchContext ctx = launch_context(task);
  const bool decoupled = task.attrs.get<AdamWAttrs>().decoupled;
  for (size_t first = 0; first < count; first += kAdamTensorsPerLaunch) {
    AdamTensors tensors;
    for (size_t t = first; t < count && tensors.count < kAdamTensorsPerLaunch; ++t) {
      const Tensor& grad = task.inputs[task.outputs.size() + t];
      DG_CHECK(grad.dtype() == dtype && task.outputs[t].dtype() == dtype, NotImplemented, "[adamw_step] params, "
               "states and grads of different dtypes have no CUDA kernel yet");
      const int i = tensors.count++;
      tensors.param[i] = task.outputs[t].raw_data();
      tensors.exp_avg[i] = task.outputs[count + t].raw_data();
      tensors.exp_avg_sq[i] = task.outputs[2 * count + t].raw_data();
      tensors.step[i] = task.outputs[3 * count + t].data<float>();
      tensors.grad[i] = grad.raw_data();
      tensors.numel[i] = task.outputs[t].numel();
    }
    launch_adamw(type, tensors, lr.raw_data(), lr.dtype() == DType::Float32, hyper.data<double>(), decoupled,
                 {ctx.stream, ctx.fault});
    check_launch(task);
  }
}

}  // namespace

DG_REGISTER_KERNEL(adamw_step, Device::Type::CUDA, adamw_kernel);

}  // namespace dg::cuda
