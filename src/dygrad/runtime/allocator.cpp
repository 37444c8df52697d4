// Caching allocator implementation (see allocator.h and docs/memory.md).
#include "dygrad/runtime/allocator.h"

#include <bit>
#include <cstdlib>

#include "dygrad/core/error.h"

namespace dg {

CachingAllocator& CachingAllocator::cpu() {
  // Never destroyed: tensors held in static objects may be freed after main returns.
  static CachingAllocator* instance = [] {
    auto* allocator = new CachingAllocator();
    register_allocator(Device::Type::CPU, allocator);
    return allocator;
  }();
  return *instance;
}
namespace {
// Registers the CPU allocator when the library loads, before any Storage is made.
[[maybe_unused]] const bool cpu_allocator_registered = (CachingAllocator::cpu(), true);
}  // namespace

CachingAllocator::~CachingAllocator() { release_cached_locked(); }

// Bins: 64 bytes at least, then four classes per power of two (2^k, 1.25, 1.5, 1.75 x 2^k): at most 25%
// of a block is padding. Every bin is a multiple of the alignment, as aligned_alloc requires (below 256
// bytes that merges some classes: 64, 128, 192, 256).
size_t CachingAllocator::bin_size(size_t nbytes) {
  if (nbytes <= kAlignment) return kAlignment;
  size_t top = std::bit_floor(nbytes);
  size_t quarter = top / 4;
  size_t bin = (nbytes + quarter - 1) / quarter * quarter;
  return (bin + kAlignment - 1) / kAlignment * kAlignment;
}

int CachingAllocator::bin_index(size_t bin_bytes) {
  int k = std::bit_width(bin_bytes) - 1;  // floor(log2)
  size_t quarter = (size_t{1} << k) / 4;
  int sub = quarter ? static_cast<int>((bin_bytes - (size_t{1} << k)) / quarter) : 0;
  return k * 4 + sub;
}

CachingAllocator::Block CachingAllocator::allocate(size_t nbytes, MemoryCategory category) {
  Block block;
  if (nbytes == 0) return block;
  DG_CHECK(nbytes < (size_t{1} << 50), Runtime, "[alloc] cannot allocate ", nbytes, " bytes");
  block.bin_bytes = bin_size(nbytes);
  const int idx = bin_index(block.bin_bytes);
  std::unique_lock<std::mutex> lock(mutex_);
  auto& list = free_lists_[idx];
  if (!list.empty()) {
    block.ptr = list.back();
    list.pop_back();
    ++stats_.cache_hits;
  } else {
    lock.unlock();  // the system allocator may be slow: not under our lock
    block.ptr = std::aligned_alloc(kAlignment, block.bin_bytes);
    if (!block.ptr) {  // give the cache back and try once more
      empty_cache();
      block.ptr = std::aligned_alloc(kAlignment, block.bin_bytes);
    }
    if (!block.ptr) fail(ErrorKind::Runtime, "[alloc] out of memory: could not allocate ", nbytes, " bytes");
    lock.lock();
    stats_.reserved += static_cast<int64_t>(block.bin_bytes);
    if (stats_.reserved > stats_.peak_reserved) stats_.peak_reserved = stats_.reserved;
  }
  ++stats_.num_allocs;
  total_allocated_.fetch_add(nbytes, std::memory_order_relaxed);
  stats_.allocated += static_cast<int64_t>(nbytes);
  const auto c = static_cast<int>(category);
  stats_.allocated_by_category[c] += static_cast<int64_t>(nbytes);
  if (stats_.allocated_by_category[c] > stats_.peak_by_category[c])
    stats_.peak_by_category[c] = stats_.allocated_by_category[c];
  if (stats_.allocated > stats_.peak_allocated) stats_.peak_allocated = stats_.allocated;
  if (AllocatorObserver* obs = observer())
    obs->on_memory_event(MemoryEventKind::Allocate, static_cast<int64_t>(nbytes), category, stats_);
  return block;
}

void CachingAllocator::free(Block block, size_t nbytes, MemoryCategory category) {
  if (!block.ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  free_lists_[bin_index(block.bin_bytes)].push_back(block.ptr);
  ++stats_.num_frees;
  stats_.allocated -= static_cast<int64_t>(nbytes);
  stats_.allocated_by_category[static_cast<int>(category)] -= static_cast<int64_t>(nbytes);
  if (AllocatorObserver* obs = observer())
    obs->on_memory_event(MemoryEventKind::Free, static_cast<int64_t>(nbytes), category, stats_);
}

void CachingAllocator::retag(size_t nbytes, MemoryCategory from, MemoryCategory to) {
  if (from == to || nbytes == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.allocated_by_category[static_cast<int>(from)] -= static_cast<int64_t>(nbytes);
  auto t = static_cast<int>(to);
  stats_.allocated_by_category[t] += static_cast<int64_t>(nbytes);
  if (stats_.allocated_by_category[t] > stats_.peak_by_category[t])
    stats_.peak_by_category[t] = stats_.allocated_by_category[t];
  if (AllocatorObserver* obs = observer())
    obs->on_memory_event(MemoryEventKind::Retag, static_cast<int64_t>(nbytes), to, stats_);
}

void CachingAllocator::set_observer(AllocatorObserver* observer) {
  std::lock_guard<std::mutex> lock(mutex_);  // calls happen under this lock: none is in flight after this
  observer_.store(observer, std::memory_order_release);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
  stats_.peak_by_category = stats_.allocated_by_category;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  for (size_t idx = 0; idx < free_lists_.size(); ++idx) {
    size_t k = idx / 4, sub = idx % 4;
    size_t bytes = (size_t{1} << k) + sub * ((size_t{1} << k) / 4);
    for (void* p : free_lists_[idx]) {
      std::free(p);
      stats_.reserved -= static_cast<int64_t>(bytes);
    }
    free_lists_[idx].clear();
  }
  if (AllocatorObserver* obs = observer())
    obs->on_memory_event(MemoryEventKind::ReleaseCache, 0, MemoryCategory::Other, stats_);
}

}  // namespace dg
