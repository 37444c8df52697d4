// The asynchronous test device (test_device.h, docs/devices.md).
#include "dygrad/backend/test/test_device.h"

#include <cstring>
#include <memory>
#include <mutex>

#include "dygrad/core/error.h"
#include "dygrad/runtime/allocator.h"
#include "dygrad/runtime/devices.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/segment_source.h"
#include "dygrad/runtime/stream.h"

namespace dg::testdev {

namespace {
constexpr unsigned char kPoison = 0xFF;  // every float and double made of it is a NaN

// The device's arena: host mappings of its own (never the CPU allocator's), poisoned when they are mapped.
class ArenaSource final : public SegmentSource {
 public:
  void* map_segment(size_t bytes) override {
    void* p = host_.map_segment(bytes);
    if (p) std::memset(p, kPoison, bytes);
    return p;
  }
  void unmap_segment(void* base, size_t bytes) override { host_.unmap_segment(base, bytes); }
  Range reserve_range(size_t at_least) override { return host_.reserve_range(at_least); }
  bool map_pages(void* at, size_t bytes) override {
    if (!host_.map_pages(at, bytes)) return false;
    std::memset(at, kPoison, bytes);
    return true;
  }
  void unmap_pages(void* at, size_t bytes) override { host_.unmap_pages(at, bytes); }

 private:
  HostSegmentSource host_;
};

// The device's allocator as tensors see it: the caching allocator over the arena, with every block handed out that
// no queued Task still uses poisoned again, so that a reused block reads as NaN until a kernel writes it, as fresh
// memory does. A block still in use by earlier Tasks of the device's stream (stream-ordered reuse) is left as it is:
// the host must not write what those Tasks read.
class PoisoningAllocator final : public Allocator {
 public:
  explicit PoisoningAllocator(CachingAllocator& cache) : cache_(cache) {}
  MemoryBlock allocate(size_t nbytes, MemoryCategory category, bool stream_ordered) override {
    MemoryBlock block = cache_.allocate(nbytes, category, stream_ordered);
    if (block.ptr && block.in_use_until == 0) std::memset(block.ptr, kPoison, block.bin_bytes);
    return block;
  }
  void free(MemoryBlock block, size_t nbytes, MemoryCategory category, uint64_t in_use_until) override {
    cache_.free(block, nbytes, category, in_use_until);
  }
  void retag(const MemoryBlock& block, size_t nbytes, MemoryCategory from, MemoryCategory to) override {
    cache_.retag(block, nbytes, from, to);
  }
  void annotate(const MemoryBlock& block, const char* description) override { cache_.annotate(block, description); }

 private:
  CachingAllocator& cache_;
};

std::mutex g_mutex;
int g_count = 0;

}  // namespace

int enable(int count) {
  DG_CHECK(count >= 1 && count <= kMaxTestDevices, Value, "[enable_test_device] count must be in 1..",
           kMaxTestDevices, ", got ", count);
  std::lock_guard<std::mutex> lock(g_mutex);
  register_backend(Device::Type::Test);
  set_backend_info(Device::Type::Test, "kernels", "cpu");
  // Its pinned host memory: mappings of their own, poisoned when mapped, as its arena (CUDA's: cudaHostAlloc).
  CachingAllocator::create_pinned(std::make_unique<ArenaSource>());
  for (int i = g_count; i < count; ++i) {
    const Device device{Device::Type::Test, static_cast<int16_t>(i)};
    CachingAllocator& allocator = CachingAllocator::create(device, std::make_unique<ArenaSource>());
    register_device_allocator(device, new PoisoningAllocator(allocator));  // lives for the process, as the cache
    Stream::create(device, allocator);
  }
  if (count > g_count) g_count = count;
  return g_count;
}

int device_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_count;
}

namespace {
[[maybe_unused]] const bool g_registered =
    (register_device_backend(Device::Type::Test, {.enable = [](int n) { return enable(n); }, .count = device_count}), true);
}

}  // namespace dg::testdev
