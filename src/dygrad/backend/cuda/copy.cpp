// The byte copy between devices (ops/device.cpp, copy_device) on a GPU's stream: host to device on the destination's,
// device to host or between GPUs on the source's (docs/devices.md). Both buffers contiguous, of one dtype and size;
// host memory is pinned (the caller stages pageable memory), so the copy is asynchronous to the host. UVA names
// the direction (cudaMemcpyDefault).
#include "dygrad/backend/cuda/cuda_check.h"
#include "dygrad/backend/cuda/cuda_device.h"

namespace dg::cuda {
namespace {
void copy_device_kernel(Task& task) {
  const Tensor& src = task.inputs[0];
  Tensor& dst = task.outputs[0];
  const size_t bytes = static_cast<size_t>(dst.numel()) * dst.itemsize();
  if (!bytes) return;
  const LaunchContext ctx = launch_context(task);
  DG_CUDA_CHECK("[copy_device] cudaMemcpyAsync",
                cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes, cudaMemcpyDefault, ctx.stream));
}
}  // namespace
DG_REGISTER_KERNEL(copy_device, Device::Type::CUDA, copy_device_kernel);
}  // namespace dg::cuda
