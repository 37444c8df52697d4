// Copies between devices (docs/devices.md): Tensor.to(device), Tensor.cpu(), copy_ across devices.
#pragma once
#include "dygrad/core/tensor.h"

namespace dg {

// `a` on `device`: `a` itself when it is there already, else a contiguous copy, differentiable (the gradient goes
// back to a's device). The copy runs on the device's stream (for a copy between two devices, the source's); it
// waits there for a's producer on its own stream, and a later write into a on its own stream waits for the copy
// (events, docs/devices.md). `non_blocking` is accepted for torch's signature: every dygrad copy is asynchronous,
// and a host read of the result waits for it.
Tensor to_device(const Tensor& a, Device device, bool non_blocking = false);
// dst.copy_(src) with src on another device: src broadcast and cast to dst's dtype on its own device, copied to
// dst's device, then written into dst (any strides) there.
Tensor& copy_across_devices(Tensor& dst, const Tensor& src);

}  // namespace dg
