// Memory categories and the per-device allocator slots (core/allocator.h).
#include "dygrad/core/allocator.h"

#include <atomic>

#include "dygrad/core/error.h"

namespace dg {

const char* memory_category_name(MemoryCategory c) {
  static constexpr const char* names[kNumMemoryCategories] = {"activation", "parameter", "gradient",
                                                              "optimizer_state", "temporary", "other", "scratch",
                                                              "communication"};
  return names[static_cast<int>(c)];
}

std::atomic<bool> g_only_cpu{true};

namespace {
thread_local MemoryCategory tls_category = MemoryCategory::Activation;
Allocator* allocators[kNumDeviceTypes] = {};   // a device type's, for every index (register_allocator(type))
std::atomic<Allocator*> device_allocators[kMaxStreams] = {};  // one device's, ahead of its type's
std::atomic<bool> tracking{false};
std::atomic<Allocator*> g_pinned{nullptr};
}  // namespace
bool allocation_tracking() { return tracking.load(std::memory_order_relaxed); }
void set_allocation_tracking(bool on) { tracking.store(on, std::memory_order_relaxed); }
MemoryCategory current_memory_category() { return tls_category; }
MemoryCategoryScope::MemoryCategoryScope(MemoryCategory c) : saved_(tls_category) { tls_category = c; }
MemoryCategoryScope::~MemoryCategoryScope() { tls_category = saved_; }

Allocator* detail::g_cpu_allocator = nullptr;

void register_allocator(Device::Type type, Allocator* allocator) {
  allocators[static_cast<int>(type)] = allocator;
  if (type == Device::Type::CPU) detail::g_cpu_allocator = allocator;
  // Once another device has had memory, its tensors may still exist: the flag never goes back.
  if (type != Device::Type::CPU && allocator) g_only_cpu.store(false, std::memory_order_relaxed);
}
void register_device_allocator(Device device, Allocator* allocator) {
  device_allocators[stream_id(device)].store(allocator, std::memory_order_release);
  if (device.type != Device::Type::CPU && allocator) g_only_cpu.store(false, std::memory_order_relaxed);
}

void register_pinned_allocator(Allocator* allocator) {
  Allocator* none = nullptr;
  g_pinned.compare_exchange_strong(none, allocator, std::memory_order_acq_rel);
}
Allocator* pinned_allocator() { return g_pinned.load(std::memory_order_acquire); }

Allocator& allocator_for(Device device) {
  if (device.type == Device::Type::CPU) [[likely]] {
    Allocator* a = allocators[0];
    DG_CHECK(a != nullptr, NotImplemented, "[alloc] no allocator for the cpu");
    return *a;
  }
  DG_CHECK(device_index_valid(device), Value, "[alloc] invalid device ", device.str());
  Allocator* a = device_allocators[stream_id(device)].load(std::memory_order_acquire);
  if (!a) a = allocators[static_cast<int>(device.type)];
  DG_CHECK(a != nullptr, NotImplemented, "[alloc] no allocator for device ", device.str(), ": dygrad was built "
           "without the ", device_type_name(device.type), " backend");
  return *a;
}

}  // namespace dg
