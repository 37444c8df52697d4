// The CPU caching allocator: 64-byte aligned blocks in size bins (four per power of two), cached on free
// and handed to any later Task of the same stream (in-order execution makes reuse safe). Statistics are
// exact: `allocated` is the sum of the requested bytes of live blocks. See docs/memory.md.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "dygrad/core/allocator.h"

namespace dg {

struct MemoryStats {
  int64_t allocated = 0;       // requested bytes of live blocks
  int64_t reserved = 0;        // bytes held from the system: live blocks plus the cache, in bin sizes
  int64_t peak_allocated = 0;  // since the last reset_peak()
  int64_t peak_reserved = 0;
  int64_t num_allocs = 0;      // allocate() calls since start
  int64_t num_frees = 0;
  int64_t cache_hits = 0;
  std::array<int64_t, kNumMemoryCategories> allocated_by_category{};
  std::array<int64_t, kNumMemoryCategories> peak_by_category{};
};

// What changed the statistics, for an AllocatorObserver.
enum class MemoryEventKind : uint8_t { Allocate, Free, Retag, ReleaseCache };

// The profiler's hook (null when off: one branch per allocation). Called on the thread that changed the
// statistics, under the allocator's lock, after the change: it must not call back into the allocator.
// For Retag, `category` is the new category and `nbytes` the bytes moved; for ReleaseCache, nbytes is 0.
struct AllocatorObserver {
  virtual ~AllocatorObserver() = default;
  virtual void on_memory_event(MemoryEventKind kind, int64_t nbytes, MemoryCategory category,
                               const MemoryStats& stats) = 0;
};

class CachingAllocator final : public Allocator {
 public:
  // The CPU's; registered as Device::Type::CPU's allocator (core/allocator.h) when the library loads.
  static CachingAllocator& cpu();

  using Block = MemoryBlock;
  Block allocate(size_t nbytes, MemoryCategory category) override;
  void free(Block block, size_t nbytes, MemoryCategory category) override;
  void retag(size_t nbytes, MemoryCategory from, MemoryCategory to) override;

  MemoryStats stats() const;
  // Bytes handed out by allocate() since start (never decreases): the stream bounds how many of them the
  // host may allocate while the device lags (docs/memory.md, "In-flight allocation window").
  uint64_t bytes_allocated_total() const { return total_allocated_.load(std::memory_order_relaxed); }
  void reset_peak();
  void empty_cache();  // returns every cached block to the system
  static size_t bin_size(size_t nbytes);
  static constexpr size_t kAlignment = 64;
  // Installs the hook; once this returns, no call to the previous observer is in flight.
  void set_observer(AllocatorObserver* observer);
  AllocatorObserver* observer() const { return observer_.load(std::memory_order_acquire); }

 private:
  CachingAllocator() = default;
  ~CachingAllocator();
  static int bin_index(size_t bin_bytes);
  void release_cached_locked();

  mutable std::mutex mutex_;
  std::vector<std::vector<void*>> free_lists_ = std::vector<std::vector<void*>>(256);
  MemoryStats stats_;
  std::atomic<uint64_t> total_allocated_{0};
  std::atomic<AllocatorObserver*> observer_{nullptr};
};

}  // namespace dg
