// The caching allocator: exact statistics, peaks, cache reuse, splitting and merging, empty_cache, the memory
// limit, history and snapshots, categories, alignment, external
// storage, and stream-ordered reuse (docs/memory.md).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

// Segments of one kind for a test (new segments only: the cache is emptied first), restored after it.
struct SegmentKind {
  bool saved_expandable;
  double saved_fraction;
  explicit SegmentKind(bool expandable, double release_fraction = CachingAllocator::kReleaseFraction)
      : saved_expandable(allocator().expandable_segments()), saved_fraction(allocator().release_fraction()) {
    settle();
    allocator().empty_cache();
    allocator().set_expandable_segments(expandable);
    allocator().set_release_fraction(release_fraction);
  }
  ~SegmentKind() {
    allocator().set_expandable_segments(saved_expandable);
    allocator().set_release_fraction(saved_fraction);
  }
};

}  // namespace

TEST(Allocator, RoundSizesAndSegmentSizes) {
  EXPECT_EQ(CachingAllocator::round_size(1), 64u);
  EXPECT_EQ(CachingAllocator::round_size(64), 64u);
  EXPECT_EQ(CachingAllocator::round_size(65), 128u);  // every block is a multiple of the 64-byte alignment
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);  // then 512-byte steps
  EXPECT_EQ(CachingAllocator::round_size(4000), 4096u);
  for (size_t n = 1; n < (size_t{1} << 26); n = n * 3 / 2 + 1) {
    size_t r = CachingAllocator::round_size(n);
    EXPECT_GE(r, n);
    EXPECT_EQ(r % CachingAllocator::kAlignment, 0u) << n;
    EXPECT_LT(r - n, 512u) << n;
    EXPECT_EQ(CachingAllocator::round_size(r), r);
  }
  EXPECT_EQ(CachingAllocator::segment_size(1000), CachingAllocator::kSmallSegment);
  EXPECT_EQ(CachingAllocator::segment_size(3 << 20), CachingAllocator::kMediumSegment);
  EXPECT_EQ(CachingAllocator::segment_size((10 << 20) + 512), size_t{12} << 20);  // 2 MiB steps
  EXPECT_EQ(CachingAllocator::parse_size("2GiB"), size_t{2} << 30);
  EXPECT_EQ(CachingAllocator::parse_size("512 MiB"), size_t{512} << 20);
  EXPECT_EQ(CachingAllocator::parse_size("1.5g"), size_t{3} << 29);
  EXPECT_EQ(CachingAllocator::parse_size("3MB"), 3000000u);
  EXPECT_EQ(CachingAllocator::parse_size("12345"), 12345u);
  EXPECT_THROW(CachingAllocator::parse_size("lots"), Error);
  EXPECT_THROW(CachingAllocator::parse_size("3 parsecs"), Error);
}

TEST(Allocator, Alignment64) {
  std::vector<CachingAllocator::Block> blocks;
  for (size_t n : {1, 3, 63, 64, 65, 100, 1000, 4097, 1 << 20}) {
    CachingAllocator::Block b = allocator().allocate(n, MemoryCategory::Temporary);
    ASSERT_NE(b.ptr, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.ptr) % CachingAllocator::kAlignment, 0u) << n;
    EXPECT_EQ(b.bin_bytes, CachingAllocator::round_size(n));
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
  SegmentKind kind(/*expandable=*/false);  // segments of the old kind: separate mappings
  settle();
  allocator().empty_cache();
  const size_t n = size_t{48} << 20;  // a segment of its own (48 MiB)
  MemoryStats s0 = allocator().stats();
  CachingAllocator::Block first = allocator().allocate(n, MemoryCategory::Temporary);
  MemoryStats s1 = allocator().stats();
  EXPECT_EQ(s1.reserved, s0.reserved + static_cast<int64_t>(n));
  EXPECT_EQ(s1.segments, s0.segments + 1);
  allocator().free(first, n, MemoryCategory::Temporary);
  MemoryStats s2 = allocator().stats();
  EXPECT_EQ(s2.reserved, s1.reserved);  // the freed segment stays reserved, in the cache
  EXPECT_EQ(s2.allocated, s0.allocated);
  // The same request reuses the block.
  CachingAllocator::Block second = allocator().allocate(n - 1000, MemoryCategory::Temporary);
  MemoryStats s3 = allocator().stats();
  EXPECT_EQ(second.ptr, first.ptr);
  EXPECT_EQ(s3.cache_hits, s2.cache_hits + 1);
  EXPECT_EQ(s3.reserved, s2.reserved);
  EXPECT_EQ(s3.allocated, s0.allocated + static_cast<int64_t>(n - 1000));
  allocator().free(second, n - 1000, MemoryCategory::Temporary);
  // empty_cache returns every entirely free segment: this one.
  allocator().empty_cache();
  MemoryStats s4 = allocator().stats();
  EXPECT_EQ(s4.reserved, s3.reserved - static_cast<int64_t>(n));
  EXPECT_EQ(s4.num_segment_frees, s3.num_segment_frees + 1);
  EXPECT_GE(s4.reserved, s4.allocated);
  CachingAllocator::Block third = allocator().allocate(n, MemoryCategory::Temporary);
  EXPECT_EQ(allocator().stats().cache_hits, s4.cache_hits);  // nothing cached any more
  EXPECT_EQ(allocator().stats().reserved, s4.reserved + static_cast<int64_t>(n));
  allocator().free(third, n, MemoryCategory::Temporary);
  allocator().empty_cache();
}

TEST(Allocator, SplitsALargeCachedBlockAndMergesNeighboursOnFree) {
  SegmentKind kind(/*expandable=*/false);  // segments of the old kind: separate mappings
  settle();
  allocator().empty_cache();
  constexpr size_t MiB = size_t{1} << 20;
  const MemoryStats s0 = allocator().stats();
  CachingAllocator::Block whole = allocator().allocate(64 * MiB, MemoryCategory::Temporary);
  char* base = static_cast<char*>(whole.ptr);
  allocator().free(whole, 64 * MiB, MemoryCategory::Temporary);
  // A smaller request takes the front of the cached block; the remainder stays cached and serves the next.
  CachingAllocator::Block a = allocator().allocate(40 * MiB, MemoryCategory::Activation);
  CachingAllocator::Block b = allocator().allocate(20 * MiB - 100, MemoryCategory::Gradient);
  EXPECT_EQ(a.ptr, base);
  EXPECT_EQ(b.ptr, base + 40 * MiB);
  EXPECT_EQ(b.bin_bytes, 20 * MiB);
  MemoryStats s1 = allocator().stats();
  EXPECT_EQ(s1.reserved, s0.reserved + static_cast<int64_t>(64 * MiB));  // no new segment
  EXPECT_EQ(s1.cache_hits - s0.cache_hits, 2);
  EXPECT_EQ(s1.allocated, s0.allocated + static_cast<int64_t>(60 * MiB - 100));
  EXPECT_EQ(s1.active, s0.active + static_cast<int64_t>(60 * MiB));
  EXPECT_EQ(s1.inactive_split, s0.inactive_split + static_cast<int64_t>(4 * MiB));  // the 4 MiB tail
  // Freeing the front block leaves it apart (its neighbour is live); freeing the second merges all three.
  allocator().free(a, 40 * MiB, MemoryCategory::Activation);
  EXPECT_EQ(allocator().stats().inactive_split, s0.inactive_split + static_cast<int64_t>(44 * MiB));
  allocator().free(b, 20 * MiB - 100, MemoryCategory::Gradient);
  MemoryStats s2 = allocator().stats();
  EXPECT_EQ(s2.inactive_split, s0.inactive_split);
  EXPECT_EQ(s2.allocated, s0.allocated);
  CachingAllocator::Block again = allocator().allocate(64 * MiB, MemoryCategory::Temporary);  // the merged block
  EXPECT_EQ(again.ptr, base);
  EXPECT_EQ(allocator().stats().reserved, s1.reserved);
  allocator().free(again, 64 * MiB, MemoryCategory::Temporary);
  // Best fit: of two cached blocks the smaller one that fits serves the request.
  CachingAllocator::Block big = allocator().allocate(30 * MiB, MemoryCategory::Temporary);
  CachingAllocator::Block fence = allocator().allocate(2 * MiB, MemoryCategory::Temporary);
  CachingAllocator::Block snug = allocator().allocate(24 * MiB, MemoryCategory::Temporary);
  CachingAllocator::Block fence2 = allocator().allocate(2 * MiB, MemoryCategory::Temporary);  // snug stays apart
  allocator().free(big, 30 * MiB, MemoryCategory::Temporary);
  allocator().free(snug, 24 * MiB, MemoryCategory::Temporary);
  CachingAllocator::Block fit = allocator().allocate(23 * MiB, MemoryCategory::Temporary);
  EXPECT_EQ(fit.ptr, snug.ptr);
  allocator().free(fit, 23 * MiB, MemoryCategory::Temporary);
  allocator().free(fence, 2 * MiB, MemoryCategory::Temporary);
  allocator().free(fence2, 2 * MiB, MemoryCategory::Temporary);
  allocator().empty_cache();
  EXPECT_EQ(allocator().stats().reserved, s0.reserved);
}

TEST(Allocator, AMissReturnsFreeSegmentsThatCannotServeIt) {
  SegmentKind kind(/*expandable=*/false);  // segments of the old kind: separate mappings
  settle();
  allocator().empty_cache();
  constexpr size_t MiB = size_t{1} << 20;
  CachingAllocator::Block a1 = allocator().allocate(16 * MiB, MemoryCategory::Temporary);
  CachingAllocator::Block a2 = allocator().allocate(16 * MiB, MemoryCategory::Temporary);  // two segments
  allocator().free(a1, 16 * MiB, MemoryCategory::Temporary);
  allocator().free(a2, 16 * MiB, MemoryCategory::Temporary);
  const MemoryStats s0 = allocator().stats();
  // 30 MiB fits neither cached 16 MiB segment; together they cover it, so both go before the new one comes.
  CachingAllocator::Block b = allocator().allocate(30 * MiB, MemoryCategory::Temporary);
  MemoryStats s1 = allocator().stats();
  EXPECT_EQ(s1.reserved, s0.reserved - static_cast<int64_t>(32 * MiB) + static_cast<int64_t>(30 * MiB));
  EXPECT_EQ(s1.num_segment_frees, s0.num_segment_frees + 2);
  // Less cached than the request: kept (returning it would not stop reserved from growing).
  CachingAllocator::Block c = allocator().allocate(12 * MiB, MemoryCategory::Temporary);
  allocator().free(c, 12 * MiB, MemoryCategory::Temporary);
  const MemoryStats s2 = allocator().stats();
  CachingAllocator::Block d = allocator().allocate(14 * MiB, MemoryCategory::Temporary);
  EXPECT_EQ(allocator().stats().num_segment_frees, s2.num_segment_frees);
  allocator().free(d, 14 * MiB, MemoryCategory::Temporary);
  allocator().free(b, 30 * MiB, MemoryCategory::Temporary);
  allocator().empty_cache();
}

TEST(Allocator, SmallRequestsShareASegment) {
  SegmentKind kind(/*expandable=*/false);  // segments of the old kind: separate mappings
  settle();
  allocator().empty_cache();
  const MemoryStats s0 = allocator().stats();
  std::vector<CachingAllocator::Block> blocks;
  for (int i = 0; i < 200; ++i) blocks.push_back(allocator().allocate(1000, MemoryCategory::Temporary));
  MemoryStats s1 = allocator().stats();
  EXPECT_LE(s1.segments - s0.segments, 1);  // 200 KiB fits one 2 MiB small segment
  EXPECT_LE(s1.reserved - s0.reserved, static_cast<int64_t>(CachingAllocator::kSmallSegment));
  EXPECT_EQ(s1.allocated - s0.allocated, 200 * 1000);
  for (auto& b : blocks) allocator().free(b, 1000, MemoryCategory::Temporary);
  allocator().empty_cache();
  EXPECT_EQ(allocator().stats().reserved, s0.reserved);
}

TEST(Allocator, MemoryLimitEmptiesTheCacheThenRaisesOutOfMemory) {
  SegmentKind kind(/*expandable=*/false);  // segments of the old kind: separate mappings
  settle();
  allocator().empty_cache();
  constexpr size_t MiB = size_t{1} << 20;
  CachingAllocator::Block cached = allocator().allocate(40 * MiB, MemoryCategory::Temporary);
  allocator().free(cached, 40 * MiB, MemoryCategory::Temporary);
  const MemoryStats s0 = allocator().stats();
  allocator().set_memory_limit(static_cast<size_t>(s0.reserved) + 10 * MiB);
  EXPECT_TRUE(allocation_tracking());
  // 45 MiB does not fit the cached 40 MiB block; a new segment fits only once the cache is returned.
  CachingAllocator::Block a = allocator().allocate(45 * MiB, MemoryCategory::Activation);
  MemoryStats s1 = allocator().stats();
  EXPECT_LE(static_cast<size_t>(s1.reserved), allocator().memory_limit());
  EXPECT_EQ(s1.num_segment_frees, s0.num_segment_frees + 1);
  // Another 45 MiB cannot fit: OutOfMemory, naming the live block, and the state stays sound.
  try {
    allocator().allocate(45 * MiB, MemoryCategory::Activation);
    ADD_FAILURE() << "expected OutOfMemory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
    std::string m = e.what();
    EXPECT_NE(m.find("memory limit"), std::string::npos) << m;
    EXPECT_NE(m.find("45.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("Largest live tensors"), std::string::npos) << m;
    EXPECT_NE(m.find("dg.utils.checkpoint"), std::string::npos) << m;
  }
  MemoryStats s2 = allocator().stats();
  EXPECT_EQ(s2.num_ooms, s1.num_ooms + 1);
  EXPECT_EQ(s2.allocated, s1.allocated);
  EXPECT_EQ(s2.reserved, s1.reserved);
  // Free and retry: it works.
  allocator().free(a, 45 * MiB, MemoryCategory::Activation);
  CachingAllocator::Block retry = allocator().allocate(45 * MiB, MemoryCategory::Activation);
  EXPECT_NE(retry.ptr, nullptr);
  allocator().free(retry, 45 * MiB, MemoryCategory::Activation);
  allocator().set_memory_limit(0);
  EXPECT_FALSE(allocation_tracking());
  allocator().empty_cache();
}

// The other way out of a miss: the system refuses the memory (no limit is set; the request is more than a process's
// address space). Either kind of segment takes the one out-of-memory path: counted, traced, reported, nothing changed.
TEST(Allocator, TheSystemRefusingTheMemoryRaisesOutOfMemory) {
  constexpr size_t kHuge = size_t{1} << 49;  // 512 TiB
  for (const bool expandable : {false, true}) {
    SCOPED_TRACE(expandable ? "expandable segments" : "segments of the old kind");
    SegmentKind kind(expandable);
    HistoryOptions history;
    history.enabled = true;
    history.cpp_stacks = false;
    allocator().record_history(history);
    CachingAllocator::Block live = allocator().allocate(3 << 20, MemoryCategory::Activation);
    const MemoryStats s0 = allocator().stats();
    try {
      allocator().allocate(kHuge, MemoryCategory::Activation);
      ADD_FAILURE() << "expected OutOfMemory";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
      const std::string m = e.what();
      EXPECT_NE(m.find("the system refused a segment of"), std::string::npos) << m;
      EXPECT_NE(m.find("Largest live tensors"), std::string::npos) << m;
    }
    const MemoryStats s1 = allocator().stats();
    EXPECT_EQ(s1.num_ooms, s0.num_ooms + 1);
    EXPECT_EQ(s1.allocated, s0.allocated);
    EXPECT_EQ(s1.reserved, s0.reserved);
    const MemorySnapshot snapshot = allocator().snapshot();
    ASSERT_FALSE(snapshot.trace.empty());
    EXPECT_EQ(snapshot.trace.back().action, TraceAction::Oom);
    EXPECT_EQ(snapshot.trace.back().size, kHuge);
    allocator().record_history(HistoryOptions{});
    allocator().free(live, 3 << 20, MemoryCategory::Activation);
    CachingAllocator::Block retry = allocator().allocate(3 << 20, MemoryCategory::Activation);
    EXPECT_NE(retry.ptr, nullptr);
    allocator().free(retry, 3 << 20, MemoryCategory::Activation);
    allocator().empty_cache();
  }
}

TEST(Allocator, HistoryRecordsEveryActionAndTheSnapshotAddsUp) {
  settle();
  HistoryOptions on;
  on.enabled = true;
  allocator().record_history(on);
  constexpr size_t MiB = size_t{1} << 20;
  CachingAllocator::Block a = allocator().allocate(3 * MiB, MemoryCategory::Activation);
  Tensor t = Tensor::empty(dg::test::Shape{10, 20}, DType::Float32);
  allocator().free(a, 3 * MiB, MemoryCategory::Activation);
  MemorySnapshot snap = allocator().snapshot();
  int64_t reserved = 0, requested = 0;
  bool described = false;
  for (const SnapshotSegment& s : snap.segments) {
    reserved += static_cast<int64_t>(s.size);
    size_t covered = 0;
    for (const SnapshotBlock& b : s.blocks) {
      EXPECT_EQ(b.address, s.address + covered);  // the blocks tile the segment
      covered += b.size;
      if (b.live) requested += static_cast<int64_t>(b.requested);
      if (b.live && b.address == reinterpret_cast<uintptr_t>(t.raw_data())) {
        described = b.description == "[10, 20] float32" && b.context && !b.context->cpp.empty();
      }
    }
    EXPECT_EQ(covered, s.size);
  }
  EXPECT_EQ(reserved, snap.stats.reserved);
  EXPECT_EQ(requested, snap.stats.allocated);
  EXPECT_TRUE(described);
  std::vector<TraceAction> actions;
  for (const TraceEntry& e : snap.trace)
    if (e.addr == reinterpret_cast<uintptr_t>(a.ptr)) actions.push_back(e.action);
  ASSERT_GE(actions.size(), 3u);
  EXPECT_EQ(actions[actions.size() - 3], TraceAction::Alloc);
  EXPECT_EQ(actions[actions.size() - 2], TraceAction::FreeRequested);
  EXPECT_EQ(actions[actions.size() - 1], TraceAction::FreeCompleted);
  EXPECT_STREQ(trace_action_name(TraceAction::SegmentAlloc), "segment_alloc");
  AllocFrame f = CachingAllocator::symbolize(snap.trace.back().context->cpp.front());
  EXPECT_NE(std::string(f.filename), "");
  on.max_entries = 2;
  allocator().record_history(on);
  EXPECT_LE(allocator().snapshot().trace.size(), 2u);
  allocator().record_history(HistoryOptions{});
  EXPECT_TRUE(allocator().snapshot().trace.empty());
  EXPECT_FALSE(allocation_tracking());
}

TEST(AllocatorThreads, ConcurrentSplitMergeKeepsStatisticsExact) {
  settle();
  const MemoryStats s0 = allocator().stats();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(t + 1);
      std::vector<std::pair<CachingAllocator::Block, size_t>> live;
      for (int i = 0; i < 400; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const size_t n = (state >> 33) % 4 == 0 ? ((state >> 20) % (6u << 20)) + 1 : ((state >> 20) % 5000) + 1;
        live.emplace_back(allocator().allocate(n, MemoryCategory::Temporary), n);
        static_cast<char*>(live.back().first.ptr)[0] = 1;
        static_cast<char*>(live.back().first.ptr)[n - 1] = 1;
        if (live.size() > 8 || (state >> 40) % 3 == 0) {
          size_t k = (state >> 45) % live.size();
          allocator().free(live[k].first, live[k].second, MemoryCategory::Temporary);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        }
        if (i % 100 == 99) allocator().empty_cache();
      }
      for (auto& [b, n] : live) allocator().free(b, n, MemoryCategory::Temporary);
    });
  }
  for (auto& th : threads) th.join();
  MemoryStats s1 = allocator().stats();
  EXPECT_EQ(s1.allocated, s0.allocated);
  EXPECT_EQ(s1.active, s0.active);
  EXPECT_GE(s1.inactive_split, 0);
  allocator().empty_cache();
}

TEST(Allocator, EmptyCacheWithLiveTensorsKeepsThem) {
  settle();
  Tensor live = full(dg::test::Shape{1000}, 3.0);
  live.wait_readable();
  allocator().empty_cache();
  MemoryStats s = allocator().stats();
  EXPECT_GE(s.reserved, static_cast<int64_t>(CachingAllocator::round_size(4000)));
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

// --- expandable segments (docs/memory.md, "Expandable segments") -----------------------------------------------
namespace {
constexpr size_t kMiB = size_t{1} << 20;
// Resident bytes of the process (/proc/self/statm).
int64_t resident_bytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident * 4096;
}
void touch(const CachingAllocator::Block& b, size_t n) { std::memset(b.ptr, 1, n); }
// The snapshot agrees with the statistics: blocks tile each segment (a contiguous mapped range), the segments'
// sizes sum to `reserved`, their live blocks' requested bytes to `allocated`, their count to `segments`.
void expect_snapshot_matches_stats() {
  MemorySnapshot snap = allocator().snapshot();
  int64_t reserved = 0, requested = 0, active = 0;
  for (const SnapshotSegment& s : snap.segments) {
    reserved += static_cast<int64_t>(s.size);
    size_t covered = 0;
    for (const SnapshotBlock& b : s.blocks) {
      EXPECT_EQ(b.address, s.address + covered);
      covered += b.size;
      if (b.live) requested += static_cast<int64_t>(b.requested), active += static_cast<int64_t>(b.size);
    }
    EXPECT_EQ(covered, s.size);
    if (s.expandable) {  // braces: EXPECT_EQ is an if/else inside (GCC's -Wdangling-else)
      EXPECT_EQ(s.address % CachingAllocator::kPageSize, 0u);
    }
  }
  EXPECT_EQ(reserved, snap.stats.reserved);
  EXPECT_EQ(requested, snap.stats.allocated);
  EXPECT_EQ(active, snap.stats.active);
  EXPECT_EQ(static_cast<int64_t>(snap.segments.size()), snap.stats.segments);
}
}  // namespace

TEST(ExpandableSegments, FreeSpaceMergesAcrossWhatWereSeparateSegments) {
  SegmentKind kind(/*expandable=*/true, /*release_fraction=*/-1);  // no release on a miss
  const MemoryStats s0 = allocator().stats();
  CachingAllocator::Block a = allocator().allocate(16 * kMiB, MemoryCategory::Temporary);
  CachingAllocator::Block b = allocator().allocate(16 * kMiB, MemoryCategory::Temporary);
  EXPECT_EQ(static_cast<char*>(b.ptr), static_cast<char*>(a.ptr) + 16 * kMiB);  // one range, mapped on demand
  MemoryStats s1 = allocator().stats();
  EXPECT_EQ(s1.reserved, s0.reserved + static_cast<int64_t>(32 * kMiB));  // reserved: the mapped bytes
  EXPECT_EQ(s1.mapped_total, s0.mapped_total + static_cast<int64_t>(32 * kMiB));
  expect_snapshot_matches_stats();
  allocator().free(a, 16 * kMiB, MemoryCategory::Temporary);
  allocator().free(b, 16 * kMiB, MemoryCategory::Temporary);
  // The two 16 MiB blocks merged: a 30 MiB request is a cache hit (with separate segments it is a miss).
  CachingAllocator::Block c = allocator().allocate(30 * kMiB, MemoryCategory::Temporary);
  MemoryStats s2 = allocator().stats();
  EXPECT_EQ(c.ptr, a.ptr);
  EXPECT_EQ(s2.cache_hits, s1.cache_hits + 1);
  EXPECT_EQ(s2.reserved, s1.reserved);
  // A request larger than the free block maps only the missing pages after it.
  CachingAllocator::Block d = allocator().allocate(5 * kMiB, MemoryCategory::Temporary);
  EXPECT_EQ(static_cast<char*>(d.ptr), static_cast<char*>(a.ptr) + 30 * kMiB);
  EXPECT_EQ(allocator().stats().reserved, s1.reserved + static_cast<int64_t>(3 * kMiB));
  expect_snapshot_matches_stats();
  allocator().free(c, 30 * kMiB, MemoryCategory::Temporary);
  allocator().free(d, 5 * kMiB, MemoryCategory::Temporary);
  allocator().empty_cache();
  MemoryStats s3 = allocator().stats();
  EXPECT_EQ(s3.reserved, s0.reserved);
  EXPECT_EQ(s3.allocated, s0.allocated);
  expect_snapshot_matches_stats();
}

TEST(ExpandableSegments, EmptyCacheUnmapsFreeBlocksBesideLiveOnesAndTheRssDrops) {
  SegmentKind kind(/*expandable=*/true, /*release_fraction=*/-1);
  const MemoryStats s0 = allocator().stats();
  CachingAllocator::Block hole = allocator().allocate(64 * kMiB, MemoryCategory::Temporary);
  CachingAllocator::Block live = allocator().allocate(2 * kMiB, MemoryCategory::Temporary);
  touch(hole, 64 * kMiB);
  touch(live, 2 * kMiB);
  allocator().free(hole, 64 * kMiB, MemoryCategory::Temporary);
  MemoryStats s1 = allocator().stats();
  EXPECT_EQ(s1.inactive_split, s0.inactive_split);  // the hole's pages can be returned: not counted as split
  const int64_t rss = resident_bytes();
  allocator().empty_cache();  // with separate segments, the hole would stay (its segment holds a live block)
  MemoryStats s2 = allocator().stats();
  EXPECT_EQ(s2.reserved, s1.reserved - static_cast<int64_t>(64 * kMiB));
  EXPECT_EQ(s2.unmapped_total, s1.unmapped_total + static_cast<int64_t>(64 * kMiB));
  EXPECT_LE(resident_bytes(), rss - static_cast<int64_t>(60 * kMiB));  // the pages went back to the system
  expect_snapshot_matches_stats();
  // The unmapped range is mapped again for the next request that needs it.
  CachingAllocator::Block again = allocator().allocate(64 * kMiB, MemoryCategory::Temporary);
  EXPECT_EQ(again.ptr, hole.ptr);
  touch(again, 64 * kMiB);
  EXPECT_EQ(allocator().stats().reserved, s1.reserved);
  allocator().free(again, 64 * kMiB, MemoryCategory::Temporary);
  allocator().free(live, 2 * kMiB, MemoryCategory::Temporary);
  allocator().empty_cache();
  EXPECT_EQ(allocator().stats().reserved, s0.reserved);
}

TEST(ExpandableSegments, AMissUnmapsIdleFreeBlocksWhenReservedExceedsAllocatedByTheMargin) {
  SegmentKind kind(/*expandable=*/true);
  const MemoryStats s0 = allocator().stats();
  CachingAllocator::Block hole = allocator().allocate(64 * kMiB, MemoryCategory::Temporary);
  CachingAllocator::Block fence = allocator().allocate(2 * kMiB, MemoryCategory::Temporary);
  allocator().free(hole, 64 * kMiB, MemoryCategory::Temporary);
  // 80 MiB does not fit the 64 MiB hole: reserved would exceed allocated by 64 MiB, more than the margin
  // (max(3% of allocated, 8 MiB)), so the hole's pages go back to the system first.
  CachingAllocator::Block big = allocator().allocate(80 * kMiB, MemoryCategory::Temporary);
  MemoryStats s1 = allocator().stats();
  EXPECT_EQ(s1.reserved, s0.reserved + static_cast<int64_t>(82 * kMiB));
  EXPECT_EQ(s1.unmapped_total, s0.unmapped_total + static_cast<int64_t>(64 * kMiB));
  EXPECT_LE(s1.reserved - s1.allocated, static_cast<int64_t>(CachingAllocator::kMinReleaseMargin));
  expect_snapshot_matches_stats();
  // Within the margin nothing is unmapped: a 4 MiB hole stays mapped when a larger request misses.
  CachingAllocator::Block small_hole = allocator().allocate(4 * kMiB, MemoryCategory::Temporary);
  CachingAllocator::Block fence2 = allocator().allocate(2 * kMiB, MemoryCategory::Temporary);
  allocator().free(small_hole, 4 * kMiB, MemoryCategory::Temporary);
  const MemoryStats s2 = allocator().stats();
  CachingAllocator::Block five = allocator().allocate(5 * kMiB, MemoryCategory::Temporary);
  EXPECT_EQ(allocator().stats().unmapped_total, s2.unmapped_total);
  for (auto [blk, n] : {std::pair{fence, 2 * kMiB}, {big, 80 * kMiB}, {fence2, 2 * kMiB}, {five, 5 * kMiB}})
    allocator().free(blk, n, MemoryCategory::Temporary);
  allocator().empty_cache();
  EXPECT_EQ(allocator().stats().reserved, s0.reserved);
}

TEST(ExpandableSegments, MemoryLimitUnmapsTheCacheThenRaisesOutOfMemory) {
  SegmentKind kind(/*expandable=*/true, /*release_fraction=*/-1);
  CachingAllocator::Block cached = allocator().allocate(40 * kMiB, MemoryCategory::Temporary);
  CachingAllocator::Block fence = allocator().allocate(2 * kMiB, MemoryCategory::Temporary);
  allocator().free(cached, 40 * kMiB, MemoryCategory::Temporary);
  const MemoryStats s0 = allocator().stats();
  allocator().set_memory_limit(static_cast<size_t>(s0.reserved) + 10 * kMiB);
  // 45 MiB fits neither the cached 40 MiB block nor the limit, until the block's pages are unmapped.
  CachingAllocator::Block a = allocator().allocate(45 * kMiB, MemoryCategory::Activation);
  MemoryStats s1 = allocator().stats();
  EXPECT_LE(static_cast<size_t>(s1.reserved), allocator().memory_limit());
  EXPECT_EQ(s1.unmapped_total, s0.unmapped_total + static_cast<int64_t>(40 * kMiB));
  EXPECT_THROW(allocator().allocate(45 * kMiB, MemoryCategory::Activation), Error);
  MemoryStats s2 = allocator().stats();
  EXPECT_EQ(s2.num_ooms, s1.num_ooms + 1);
  EXPECT_EQ(s2.reserved, s1.reserved);
  EXPECT_EQ(s2.allocated, s1.allocated);
  expect_snapshot_matches_stats();
  allocator().free(a, 45 * kMiB, MemoryCategory::Activation);
  CachingAllocator::Block retry = allocator().allocate(45 * kMiB, MemoryCategory::Activation);
  EXPECT_NE(retry.ptr, nullptr);
  allocator().free(retry, 45 * kMiB, MemoryCategory::Activation);
  allocator().free(fence, 2 * kMiB, MemoryCategory::Temporary);
  allocator().set_memory_limit(0);
  allocator().empty_cache();
}

TEST(ExpandableSegments, HistoryRecordsMapsAndUnmaps) {
  SegmentKind kind(/*expandable=*/true, /*release_fraction=*/-1);
  HistoryOptions on;
  on.enabled = true;
  on.alloc_stacks = on.free_stacks = false;
  allocator().record_history(on);
  CachingAllocator::Block a = allocator().allocate(8 * kMiB, MemoryCategory::Temporary);
  allocator().free(a, 8 * kMiB, MemoryCategory::Temporary);
  allocator().empty_cache();
  MemorySnapshot snap = allocator().snapshot();
  allocator().record_history(HistoryOptions{});
  bool mapped = false, unmapped = false;
  for (const TraceEntry& e : snap.trace) {
    mapped |= e.action == TraceAction::SegmentMap && e.addr == reinterpret_cast<uintptr_t>(a.ptr) && e.size == 8 * kMiB;
    unmapped |= e.action == TraceAction::SegmentUnmap && e.addr == reinterpret_cast<uintptr_t>(a.ptr) && e.size >= 8 * kMiB;
  }
  EXPECT_TRUE(mapped);
  EXPECT_TRUE(unmapped);
  EXPECT_STREQ(trace_action_name(TraceAction::SegmentMap), "segment_map");
  EXPECT_STREQ(trace_action_name(TraceAction::SegmentUnmap), "segment_unmap");
}

// Random allocations and frees of every size class with a small margin (many maps and unmaps): no two live
// blocks overlap (each holds its own byte pattern), and the statistics and the snapshot agree throughout.
TEST(ExpandableSegments, RandomTrafficKeepsBlocksApartAndStatisticsExact) {
  SegmentKind kind(/*expandable=*/true, /*release_fraction=*/0.0);
  const MemoryStats s0 = allocator().stats();
  struct Live {
    CachingAllocator::Block block;
    size_t n;
    unsigned char tag;
  };
  std::vector<Live> live;
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  auto check_and_free = [&](size_t k) {
    const Live& l = live[k];
    const auto* p = static_cast<const unsigned char*>(l.block.ptr);
    ASSERT_EQ(p[0], l.tag);
    ASSERT_EQ(p[l.n / 2], l.tag);
    ASSERT_EQ(p[l.n - 1], l.tag);
    allocator().free(l.block, l.n, MemoryCategory::Temporary);
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
  };
  int64_t requested = 0;
  for (int i = 0; i < 3000; ++i) {
    const uint64_t r = next();
    const size_t n = r % 7 == 0 ? (r >> 20) % (24 * kMiB) + 1 : r % 7 < 3 ? (r >> 20) % (2 * kMiB) + 1 : (r >> 20) % 3000 + 1;
    Live l{allocator().allocate(n, MemoryCategory::Temporary), n, static_cast<unsigned char>(r >> 56)};
    std::memset(l.block.ptr, l.tag, n);
    live.push_back(l);
    requested += static_cast<int64_t>(n);
    while (live.size() > 40 || (!live.empty() && (next() >> 40) % 2 == 0)) {
      const size_t k = (next() >> 33) % live.size();
      requested -= static_cast<int64_t>(live[k].n);
      check_and_free(k);
    }
    if (i % 500 == 499) {
      allocator().empty_cache();
      expect_snapshot_matches_stats();
    }
    const MemoryStats s = allocator().stats();
    ASSERT_EQ(s.allocated, s0.allocated + requested);
    ASSERT_GE(s.reserved, s.active);
    ASSERT_GE(s.inactive_split, 0);
  }
  expect_snapshot_matches_stats();
  while (!live.empty()) check_and_free(live.size() - 1);
  allocator().empty_cache();
  const MemoryStats s1 = allocator().stats();
  EXPECT_EQ(s1.allocated, s0.allocated);
  EXPECT_EQ(s1.active, s0.active);
  EXPECT_EQ(s1.reserved, s0.reserved);
  EXPECT_GT(s1.unmapped_total - s0.unmapped_total, 0);
}
