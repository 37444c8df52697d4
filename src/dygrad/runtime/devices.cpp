// The device backends' hooks (runtime/devices.h).
#include "dygrad/runtime/devices.h"

#include <string>

#include "dygrad/core/error.h"
#include "dygrad/runtime/op_def.h"

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

int available_device_count(Device::Type type) {
  const DeviceBackendHooks& h = g_hooks[static_cast<int>(type)];
  return h.available ? h.available() : device_count(type);
}

void check_device_available(const char* op, Device device) {
  if (device.is_cpu() || (device.index >= 0 && device.index < device_count(device.type))) [[likely]] return;
  const DeviceBackendHooks& hooks = g_hooks[static_cast<int>(device.type)];
  if (hooks.available && device.index >= 0 && device.index < hooks.available()) {
    enable_devices(device.type, hooks.available());  // first use: every GPU of the machine comes up
    return;
  }
  std::string has = "only the cpu device";
  for (Device::Type type : {Device::Type::Test, Device::Type::CUDA})
    if (const int n = device_count(type))
      has += std::string(" and ") + device_type_name(type) + ":0.." + std::to_string(n - 1);
  // A backend that is built but finds no device says why (CUDA: torch's "Found no NVIDIA driver on your system...").
  const std::string unavailable = hooks.available ? backend_info(device.type, "unavailable") : "";
  const std::string why = device.type == Device::Type::Test
                              ? " (dygrad.testing.enable_test_device(n) makes test devices)"
                          : !unavailable.empty() ? " (" + unavailable + ")"
                          : device_count(device.type) == 0 && !hooks.enable ? " (dygrad was built without its backend)"
                                                                             : "";
  fail(ErrorKind::Runtime, "[", op, "] device ", device.str(), " is not available: this process has ", has, why);
}

}  // namespace dg
