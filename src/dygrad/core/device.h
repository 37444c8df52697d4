// Devices: the CPU today; CUDA devices plug in with their own stream, allocator and kernels (ARCHITECTURE.md).
#pragma once
#include <cstdint>
#include <string>

namespace dg {

struct Device {
  enum class Type : uint8_t { CPU, CUDA };
  Type type = Type::CPU;
  int16_t index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return type == Type::CPU ? "cpu" : "cuda:" + std::to_string(index); }
  static Device cpu() { return {}; }
};

// Device types index per-device tables (kernels, allocators).
inline constexpr int kNumDeviceTypes = 2;
inline const char* device_type_name(Device::Type type) { return type == Device::Type::CPU ? "cpu" : "cuda"; }

}  // namespace dg
