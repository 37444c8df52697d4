// The devices a process has, by type (docs/devices.md): a backend registers how to bring its devices up and count
// them; the bindings and tests ask here, never the backend itself (the layer rule, docs/ops.md).
#pragma once
#include "dygrad/core/device.h"

namespace dg {

struct DeviceBackendHooks {
  int (*enable)(int count) = nullptr;  // brings devices 0..count-1 up; returns how many there are
  int (*count)() = nullptr;            // how many are up
  // How many the machine has (null: as many as are up). A device below it that is not up yet is brought up on first
  // use (check_device_available), as torch initialises CUDA lazily.
  int (*available)() = nullptr;
};
void register_device_backend(Device::Type type, DeviceBackendHooks hooks);
// Raises NotImplemented naming the type when no backend of it is built.
int enable_devices(Device::Type type, int count);
// 0 when no backend of the type is built; the CPU: 1.
int device_count(Device::Type type);
// How many the machine has (the hook's `available`, else device_count): CUDA's GPUs whether or not they are up yet.
int available_device_count(Device::Type type);
// Raises "[op] device cuda:0 is not available: this process has only the cpu device" (naming the test devices that are
// on) unless the process has `device`.
void check_device_available(const char* op, Device device);

}  // namespace dg
