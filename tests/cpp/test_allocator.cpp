// The caching allocator: exact statistics, peaks, cache reuse, empty_cache, categories, alignment, external
// storage, and stream-ordered reuse (docs/memory.md).
#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "dygrad/ops/dispatch.h"
#include "harness.h"

using namespace dg;

namespace {

CachingAllocator& allocator() { return CachingAllocator::cpu(); }

// Waits until the stream has run (and released) everything, so that the statistics are settled.
void settle() { Stream::cpu().synchronize(); }

int64_t by_category(const MemoryStats& s, MemoryCategory c) { return s.allocated_by_category[static_cast<int>(c)]; }

}  // namespace

TEST(Allocator, BinSizes) {
  EXPECT_EQ(CachingAllocator::bin_size(1), 64u);
  EXPECT_EQ(CachingAllocator::bin_size(64), 64u);
  EXPECT_EQ(CachingAllocator::bin_size(65), 128u);    // every bin is a multiple of the 64-byte alignment
  EXPECT_EQ(CachingAllocator::bin_size(100), 128u);
  EXPECT_EQ(CachingAllocator::bin_size(129), 192u);
  EXPECT_EQ(CachingAllocator::bin_size(300), 320u);    // 256 + 64: four classes per power of two above 256
  EXPECT_EQ(CachingAllocator::bin_size(1000), 1024u);
  EXPECT_EQ(CachingAllocator::bin_size(1025), 1280u);
  EXPECT_EQ(CachingAllocator::bin_size(3 << 20), size_t{3} << 20);
  for (size_t n = 1; n < (size_t{1} << 22); n = n * 3 / 2 + 1) {
    size_t b = CachingAllocator::bin_size(n);
    EXPECT_GE(b, n);
    EXPECT_EQ(b % CachingAllocator::kAlignment, 0u) << n;
    EXPECT_LE(b - n, std::max<size_t>(n / 4, CachingAllocator::kAlignment - 1)) << "too much padding for " << n;
    EXPECT_EQ(CachingAllocator::bin_size(b), b) << "a bin size is its own bin";
  }
}

TEST(Allocator, Alignment64) {
  std::vector<CachingAllocator::Block> blocks;
  for (size_t n : {1, 3, 63, 64, 65, 100, 1000, 4097, 1 << 20}) {
    CachingAllocator::Block b = allocator().allocate(n, MemoryCategory::Temporary);
    ASSERT_NE(b.ptr, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.ptr) % CachingAllocator::kAlignment, 0u) << n;
    EXPECT_EQ(b.bin_bytes, CachingAllocator::bin_size(n));
    blocks.push_back(b);
    allocator().free(b, n, MemoryCategory::Temporary);
  }
  Tensor t = Tensor::empty(dg::test::Shape{3, 5}, DType::Float64);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  CachingAllocator::Block none = allocator().allocate(0, MemoryCategory::Temporary);
  EXPECT_EQ(none.ptr, nullptr);
  allocator().free(none, 0, MemoryCategory::Temporary);
}

TEST(Allocator, ExactStatisticsReturnToTheStart) {
  settle();
  const MemoryStats start = allocator().stats();
  {
    Tensor a = Tensor::empty(dg::test::Shape{1000}, DType::Float32);  // 4000 bytes, bin 4096
    MemoryStats s = allocator().stats();
    EXPECT_EQ(s.allocated, start.allocated + 4000);
    EXPECT_EQ(s.num_allocs, start.num_allocs + 1);
    EXPECT_GE(s.reserved, s.allocated);
    Tensor b = zeros(dg::test::Shape{7, 3}, {DType::Int64});  // 168 bytes
    Tensor v = transpose(b, 0, 1);                           // a view allocates nothing
    EXPECT_EQ(allocator().stats().allocated, start.allocated + 4000 + 168);
    Tensor c = add(a, 1.0);  // the output is allocated on the host, at the call
    EXPECT_EQ(allocator().stats().allocated, start.allocated + 4000 + 168 + 4000);
    settle();
  }
  settle();  // the Tasks' references to the operands are dropped once they have run
  MemoryStats end = allocator().stats();
  EXPECT_EQ(end.allocated, start.allocated);
  EXPECT_EQ(end.num_allocs - start.num_allocs, end.num_frees - start.num_frees);
  for (int c = 0; c < kNumMemoryCategories; ++c)
    EXPECT_EQ(end.allocated_by_category[c], start.allocated_by_category[c]) << memory_category_name(MemoryCategory(c));
  EXPECT_GE(end.reserved, end.allocated);
}

TEST(Allocator, PeakAndResetPeak) {
  settle();
  allocator().reset_peak();
  MemoryStats s0 = allocator().stats();
  EXPECT_EQ(s0.peak_allocated, s0.allocated);
  EXPECT_EQ(s0.peak_reserved, s0.reserved);
  {
    Tensor big = Tensor::empty(dg::test::Shape{1 << 18}, DType::Float32);  // 1 MiB
    EXPECT_EQ(allocator().stats().peak_allocated, s0.allocated + (1 << 20));
  }
  MemoryStats s1 = allocator().stats();
  EXPECT_EQ(s1.allocated, s0.allocated);
  EXPECT_EQ(s1.peak_allocated, s0.allocated + (1 << 20));  // the peak stays after the free
  EXPECT_GE(s1.peak_reserved, s1.reserved);
  allocator().reset_peak();
  MemoryStats s2 = allocator().stats();
  EXPECT_EQ(s2.peak_allocated, s2.allocated);
  EXPECT_EQ(s2.peak_reserved, s2.reserved);
  EXPECT_EQ(s2.peak_by_category, s2.allocated_by_category);
}

TEST(Allocator, CacheHitsOnReuseAndEmptyCache) {
  settle();
  const size_t n = 123456;  // bin 131072
  MemoryStats s0 = allocator().stats();
  CachingAllocator::Block first = allocator().allocate(n, MemoryCategory::Temporary);
  MemoryStats s1 = allocator().stats();
  allocator().free(first, n, MemoryCategory::Temporary);
  MemoryStats s2 = allocator().stats();
  EXPECT_EQ(s2.reserved, s1.reserved);  // the freed block stays reserved, in the cache
  EXPECT_EQ(s2.allocated, s0.allocated);
  // Another request in the same bin reuses the block.
  CachingAllocator::Block second = allocator().allocate(n + 1000, MemoryCategory::Temporary);
  MemoryStats s3 = allocator().stats();
  EXPECT_EQ(second.ptr, first.ptr);
  EXPECT_EQ(s3.cache_hits, s2.cache_hits + 1);
  EXPECT_EQ(s3.reserved, s2.reserved);
  EXPECT_EQ(s3.allocated, s0.allocated + static_cast<int64_t>(n + 1000));
  allocator().free(second, n + 1000, MemoryCategory::Temporary);
  // empty_cache returns every cached block: at least this one.
  allocator().empty_cache();
  MemoryStats s4 = allocator().stats();
  EXPECT_LE(s4.reserved, s3.reserved - static_cast<int64_t>(CachingAllocator::bin_size(n)));
  EXPECT_GE(s4.reserved, s4.allocated);
  CachingAllocator::Block third = allocator().allocate(n, MemoryCategory::Temporary);
  EXPECT_EQ(allocator().stats().cache_hits, s4.cache_hits);  // nothing cached any more
  EXPECT_EQ(allocator().stats().reserved, s4.reserved + static_cast<int64_t>(CachingAllocator::bin_size(n)));
  allocator().free(third, n, MemoryCategory::Temporary);
}

TEST(Allocator, EmptyCacheWithLiveTensorsKeepsThem) {
  settle();
  Tensor live = full(dg::test::Shape{1000}, 3.0);
  live.wait_readable();
  allocator().empty_cache();
  MemoryStats s = allocator().stats();
  EXPECT_GE(s.reserved, static_cast<int64_t>(CachingAllocator::bin_size(4000)));
  EXPECT_EQ(sum(live).item<float>(), 3000.0f);
}

TEST(Allocator, Categories) {
  settle();
  const MemoryStats s0 = allocator().stats();
  EXPECT_EQ(current_memory_category(), MemoryCategory::Activation);
  Tensor activation = Tensor::empty(dg::test::Shape{10}, DType::Float32);
  Tensor parameter, state;
  {
    MemoryCategoryScope scope(MemoryCategory::Parameter);
    EXPECT_EQ(current_memory_category(), MemoryCategory::Parameter);
    parameter = Tensor::empty(dg::test::Shape{25}, DType::Float32);
    {
      MemoryCategoryScope inner(MemoryCategory::OptimizerState);
      state = Tensor::empty(dg::test::Shape{5}, DType::Float64);
    }
    EXPECT_EQ(current_memory_category(), MemoryCategory::Parameter);  // scopes nest
  }
  EXPECT_EQ(current_memory_category(), MemoryCategory::Activation);
  EXPECT_EQ(parameter.storage().category(), MemoryCategory::Parameter);
  MemoryStats s1 = allocator().stats();
  EXPECT_EQ(by_category(s1, MemoryCategory::Activation), by_category(s0, MemoryCategory::Activation) + 40);
  EXPECT_EQ(by_category(s1, MemoryCategory::Parameter), by_category(s0, MemoryCategory::Parameter) + 100);
  EXPECT_EQ(by_category(s1, MemoryCategory::OptimizerState), by_category(s0, MemoryCategory::OptimizerState) + 40);
  // A tensor becomes a gradient: its bytes move between categories, the total stays.
  activation.storage().set_category(MemoryCategory::Gradient);
  MemoryStats s2 = allocator().stats();
  EXPECT_EQ(by_category(s2, MemoryCategory::Activation), by_category(s0, MemoryCategory::Activation));
  EXPECT_EQ(by_category(s2, MemoryCategory::Gradient), by_category(s0, MemoryCategory::Gradient) + 40);
  EXPECT_EQ(s2.allocated, s1.allocated);
  int64_t total = 0;
  for (int64_t v : s2.allocated_by_category) total += v;
  EXPECT_EQ(total, s2.allocated);  // the categories partition `allocated`
  EXPECT_GE(s2.peak_by_category[static_cast<int>(MemoryCategory::Gradient)], by_category(s2, MemoryCategory::Gradient));
  activation = Tensor();
  parameter = Tensor();
  state = Tensor();
  MemoryStats s3 = allocator().stats();
  for (int c = 0; c < kNumMemoryCategories; ++c) EXPECT_EQ(s3.allocated_by_category[c], s0.allocated_by_category[c]);
  // Scopes also hold on another thread, independently (the category is thread-local).
  std::thread other([] { EXPECT_EQ(current_memory_category(), MemoryCategory::Activation); });
  other.join();
  EXPECT_STREQ(memory_category_name(MemoryCategory::OptimizerState), "optimizer_state");
}

TEST(Allocator, ExternalStorageIsNeverCached) {
  settle();
  const MemoryStats s0 = allocator().stats();
  static int releases = 0;
  releases = 0;
  std::vector<float> owned = {1, 2, 3, 4};
  {
    Ref<Storage> storage = Storage::wrap_external(owned.data(), owned.size() * sizeof(float),
                                                  [](void*) { ++releases; }, nullptr);
    EXPECT_TRUE(storage->is_external());
    EXPECT_EQ(allocator().stats().num_allocs, s0.num_allocs);  // wrapping allocates nothing
    EXPECT_EQ(allocator().stats().allocated, s0.allocated);
    Tensor t(make_ref<TensorImpl>(storage, Dims{4}, Dims{1}, 0, DType::Float32));
    EXPECT_EQ(sum(t).item<float>(), 10.0f);
    Tensor twice = mul(t, 2.0);
    twice.wait_readable();
  }
  settle();
  EXPECT_EQ(releases, 1);  // released to its owner once, when the last view is gone
  MemoryStats s1 = allocator().stats();
  EXPECT_EQ(s1.allocated, s0.allocated);
  EXPECT_EQ(by_category(s1, MemoryCategory::Other), by_category(s0, MemoryCategory::Other));
}

TEST(Allocator, StreamOrderedReuseKeepsOperandsAliveUntilTheirTaskRuns) {
  settle();
  // A buffer dropped on the host while a queued Task still reads it is not reused until the Task ran:
  // the Task holds a reference. Fill many buffers, drop them at once, and allocate the same size.
  const int64_t n = 1 << 16;
  std::vector<Tensor> results;
  for (int round = 0; round < 50; ++round) {
    Tensor a = full(dg::test::Shape{n}, static_cast<double>(round));
    results.push_back(add(a, 1.0));
    // `a` is dropped here; the next full() may get its block only after add() has read it.
  }
  for (int round = 0; round < 50; ++round) {
    std::vector<float> v = results[static_cast<size_t>(round)].to_vector<float>();
    ASSERT_EQ(v.front(), round + 1.0f);
    ASSERT_EQ(v.back(), round + 1.0f);
  }
}
