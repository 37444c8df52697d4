// Devices: the CPU, the asynchronous test device (runtime/test_device.h: a second device on every machine, off by
// default) and CUDA; each device has its own stream, allocator and kernels (docs/devices.md).
#pragma once
#include <cstdint>
#include <string>

namespace dg {

struct Device {
  enum class Type : uint8_t { CPU, CUDA, Test };
  Type type = Type::CPU;
  int16_t index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
  static Device cpu() { return {}; }
  bool is_cpu() const { return type == Type::CPU; }
};

// Device types index per-device-type tables (kernels, backends).
inline constexpr int kNumDeviceTypes = 3;
inline const char* device_type_name(Device::Type type) {
  switch (type) {
    case Device::Type::CPU: return "cpu";
    case Device::Type::CUDA: return "cuda";
    case Device::Type::Test: return "test";
  }
  return "?";
}
inline std::string Device::str() const {
  return type == Type::CPU ? std::string("cpu") : std::string(device_type_name(type)) + ":" + std::to_string(index);
}

// Every device has one stream, numbered: the CPU's is 0, then the test devices', then CUDA's. The number indexes the
// per-device tables (streams, allocators, enqueue counts) and tags events (below).
inline constexpr int kMaxTestDevices = 4;
inline constexpr int kMaxCudaDevices = 16;
inline constexpr int kMaxStreams = 1 + kMaxTestDevices + kMaxCudaDevices;
inline int stream_id(Device d) {
  switch (d.type) {
    case Device::Type::CPU: return 0;
    case Device::Type::Test: return 1 + d.index;
    case Device::Type::CUDA: return 1 + kMaxTestDevices + d.index;
  }
  return 0;
}
inline Device device_of_stream(int id) {
  if (id == 0) return Device::cpu();
  if (id <= kMaxTestDevices) return Device{Device::Type::Test, static_cast<int16_t>(id - 1)};
  return Device{Device::Type::CUDA, static_cast<int16_t>(id - 1 - kMaxTestDevices)};
}
inline bool device_index_valid(Device d) {
  if (d.index < 0) return false;
  if (d.type == Device::Type::Test) return d.index < kMaxTestDevices;
  if (d.type == Device::Type::CUDA) return d.index < kMaxCudaDevices;
  return d.index == 0;
}

// An event: "Task `seq` of stream `id` has run", packed in one word (the stream number in the top byte), so a
// storage's last writer or last user fits the atomics it had. The CPU stream's events are its plain sequence
// numbers. 0: no event (nothing to wait for).
inline constexpr int kEventStreamShift = 56;
inline constexpr uint64_t kEventSeqMask = (uint64_t{1} << kEventStreamShift) - 1;
inline uint64_t make_event(int stream, uint64_t seq) {
  return seq == 0 ? 0 : (static_cast<uint64_t>(stream) << kEventStreamShift) | seq;
}
inline int event_stream(uint64_t event) { return static_cast<int>(event >> kEventStreamShift); }
inline uint64_t event_seq(uint64_t event) { return event & kEventSeqMask; }

}  // namespace dg
