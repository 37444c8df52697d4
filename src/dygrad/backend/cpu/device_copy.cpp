// The byte copy between devices (ops/device.cpp): both buffers contiguous, of one dtype and size. The test device's
// launcher runs it (its host-device DMA), reading or writing host memory and the device's arena (docs/devices.md).
#include <cstring>

#include "dygrad/runtime/op_def.h"

namespace dg::cpu {
namespace {
void copy_device_kernel(Task& task) {
  const Tensor& src = task.inputs[0];
  Tensor& dst = task.outputs[0];
  const size_t bytes = static_cast<size_t>(dst.numel()) * dst.itemsize();
  if (bytes) std::memcpy(dst.raw_data(), src.raw_data(), bytes);
}
}  // namespace
DG_REGISTER_KERNEL(copy_device, Device::Type::CPU, copy_device_kernel);
}  // namespace dg::cpu
