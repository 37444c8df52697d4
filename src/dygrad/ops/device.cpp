// Copies between devices (ops/device.h, docs/devices.md).
#include "dygrad/ops/device.h"

#include "dygrad/core/storage.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/shape.h"
#include "dygrad/runtime/devices.h"

namespace dg {

namespace {
void copy_device_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (n.needs_grad(0)) gi[0] = to_device(g[0], n.input_meta[0].device);
}
OpCost copy_device_cost(const Task& task) {
  return {0, 2.0 * static_cast<double>(task.outputs[0].numel()) * static_cast<double>(task.outputs[0].itemsize())};
}
}  // namespace

const OpDef op_copy_device("copy_device", nullptr,
                           {.backward = copy_device_backward, .cost = copy_device_cost, .flags = kOpCrossDevice});

namespace {
Tensor to_cpu(const Tensor& a) { return to_device(a, Device::cpu()); }
[[maybe_unused]] const bool g_host_copy_registered = (set_host_copy(&to_cpu), true);
}  // namespace

Tensor to_device(const Tensor& a, Device device, bool non_blocking) {
  (void)non_blocking;
  check_defined("to", a);
  if (a.device() == device) return a;
  DG_CHECK(device_index_valid(device), Runtime, "[to] invalid device ", device.str());
  check_device_available("to", device);
  const Tensor src = contiguous(a);  // on a's device
  Tensor out;
  if (device.is_cpu()) {
    // Written by the device's stream, not the CPU's: memory no queued CPU Task still uses (stream-ordered reuse
    // orders only the CPU's own Tasks, docs/memory.md).
    HostAllocationScope host;
    out = Tensor::empty(a.shape(), a.dtype(), device, "to");
  } else {
    out = Tensor::empty(a.shape(), a.dtype(), device, "to");
  }
  enqueue(op_copy_device, {src}, {out});
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    record_node(&op_copy_device, inputs, outputs);
  }
  return out;
}

Tensor& copy_across_devices(Tensor& dst, const Tensor& src) {
  Tensor on_src = src;
  if (src.dtype() != dst.dtype()) on_src = to(on_src, dst.dtype());
  if (!same_shape(on_src.shape(), dst.shape())) on_src = expand(on_src, dst.shape());
  const Tensor moved = to_device(on_src, dst.device());
  return copy_(dst, moved);
}

}  // namespace dg
