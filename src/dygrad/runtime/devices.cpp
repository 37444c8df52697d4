// The device backends' hooks (runtime/devices.h).
#include "dygrad/runtime/devices.h"

#include "dygrad/core/error.h"

namespace dg {

namespace {
DeviceBackendHooks g_hooks[kNumDeviceTypes];
}

void register_device_backend(Device::Type type, DeviceBackendHooks hooks) { g_hooks[static_cast<int>(type)] = hooks; }

int enable_devices(Device::Type type, int count) {
  if (type == Device::Type::CPU) return 1;
  const DeviceBackendHooks& h = g_hooks[static_cast<int>(type)];
  DG_CHECK(h.enable != nullptr, NotImplemented, "[devices] dygrad was built without the ", device_type_name(type),
           " backend");
  return h.enable(count);
}

int device_count(Device::Type type) {
  if (type == Device::Type::CPU) return 1;
  const DeviceBackendHooks& h = g_hooks[static_cast<int>(type)];
  return h.count ? h.count() : 0;
}

}  // namespace dg
