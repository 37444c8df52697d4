// Copies between devices (ops/device.h, docs/devices.md).
#include "dygrad/ops/device.h"

#include "dygrad/autograd/node.h"
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
                           {.backward = copy_device_backward, .cost = copy_device_cost,
                            .flags = kOpCrossDevice | kOpAnyDType});

namespace {
Tensor to_cpu(const Tensor& a) { return to_device(a, Device::cpu()); }
[[maybe_unused]] const bool g_host_copy_registered = (set_host_copy(&to_cpu), true);
}  // namespace

namespace {
// A pinned host buffer shaped as `a`. `device_writes`: a device's stream fills it, so it is memory no queued CPU Task
// still uses (stream-ordered reuse orders only the CPU's own Tasks, docs/memory.md).
Tensor pinned_empty(const Tensor& a, bool device_writes) {
  PinnedAllocationScope pinned("to");
  if (!device_writes) return Tensor::empty(a.shape(), a.dtype(), Device::cpu(), "to");
  HostAllocationScope host;
  return Tensor::empty(a.shape(), a.dtype(), Device::cpu(), "to");
}
}  // namespace

Tensor to_device(const Tensor& a, Device device, bool non_blocking) {
  check_defined("to", a);
  if (a.device() == device) return a;
  DG_CHECK(device_index_valid(device), Runtime, "[to] invalid device ", device.str());
  check_device_available("to", device);
  // Host memory a device copies from or into is pinned (docs/devices.md, "Pinned host memory"): pageable memory is
  // staged through a pinned buffer by a CPU copy, ordered against the device's copy by events; the staging buffer
  // goes back to the pool when dropped and is reused only after the device's copy has run.
  const bool staging = pinned_allocator() != nullptr;
  Tensor out;
  if (device.is_cpu()) {
    const Tensor src = contiguous(a);  // on a's device
    if (!staging) {
      HostAllocationScope host;
      out = Tensor::empty(a.shape(), a.dtype(), device, "to");
      enqueue(op_copy_device, {src}, {out});
    } else if (non_blocking) {
      out = pinned_empty(a, true);  // torch's non-blocking copy to the host lands in pinned memory
      enqueue(op_copy_device, {src}, {out});
    } else {
      const Tensor staged = pinned_empty(a, true);
      enqueue(op_copy_device, {src}, {staged});
      out = Tensor::empty(a.shape(), a.dtype(), device, "to");
      NoGradGuard no_grad;
      copy_(out, staged);  // a CPU Task that waits for the device's copy (its event)
    }
  } else {
    Tensor src;
    if (a.device().is_cpu() && !a.storage().is_pinned() && staging) {
      src = pinned_empty(a, false);
      NoGradGuard no_grad;
      copy_(src, a);  // any strides: the staging copy also makes it contiguous
    } else {
      src = contiguous(a);
    }
    out = Tensor::empty(a.shape(), a.dtype(), device, "to");
    enqueue(op_copy_device, {src}, {out});
  }
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    record_node(&op_copy_device, inputs, outputs);
  }
  return out;
}

Tensor pin_memory(const Tensor& a) {
  check_defined("pin_memory", a);
  DG_CHECK(a.device().is_cpu(), Runtime, "[pin_memory] cannot pin a ", a.device().str(), " tensor: only dense CPU "
           "tensors can be pinned");
  check_pinned_memory_available("pin_memory");
  if (a.storage().is_pinned()) return a;
  PinnedAllocationScope pinned("pin_memory");
  return clone(a);
}

Tensor& copy_across_devices(Tensor& dst, const Tensor& src) {
  Tensor on_src = src;
  if (src.dtype() != dst.dtype()) on_src = to(on_src, dst.dtype());
  if (!same_shape(on_src.shape(), dst.shape())) on_src = expand(on_src, dst.shape());
  // Into the CPU: the device's copy lands in pinned memory and the CPU's copy_ (any strides) takes it from there.
  const Tensor moved = to_device(on_src, dst.device(), /*non_blocking=*/dst.device().is_cpu());
  return copy_(dst, moved);
}

}  // namespace dg
