// Copies between devices (docs/devices.md): Tensor.to(device), Tensor.cpu(), copy_ across devices.
#pragma once
#include "dygrad/core/tensor.h"

namespace dg {

// `a` on `device`: `a` itself when it is there already, else a contiguous copy, differentiable (the gradient goes
// back to a's device). The copy runs on the device's stream (for a copy between two devices, the source's); it
// waits there for a's producer on its own stream, and a later write into a on its own stream waits for the copy
// (events, docs/devices.md). Every copy is asynchronous and a host read of the result waits for it. Host memory the
// device's copy touches is pinned: a pageable source is staged through a pinned buffer (a CPU copy); a copy to the
// CPU lands in pinned memory, returned as it is with `non_blocking` (torch's), else copied on into pageable memory.
Tensor to_device(const Tensor& a, Device device, bool non_blocking = false);
// Tensor.pin_memory(): `a` itself when pinned already, else a contiguous copy in pinned memory,
// differentiable. Raises for a device tensor and when no device backend provides pinned memory.
Tensor pin_memory(const Tensor& a);
// dst.copy_(src) with src on another device: src broadcast and cast to dst's dtype on its own device, copied to
// dst's device, then written into dst (any strides) there.
Tensor& copy_across_devices(Tensor& dst, const Tensor& src);

}  // namespace dg
