// The intra-op thread pool: parallel_for and parallel_chunks cover every index exactly once, nested calls
// run serially, chunk exceptions propagate, resize works, and several threads may use it (docs/threading.md).
#include <atomic>
#include <bit>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "harness.h"
#include "dygrad/runtime/thread_pool.h"

using namespace dg;

namespace {

// Sets the pool size for a test and restores it afterwards (through the context, which drains the stream).
struct PoolSize {
  explicit PoolSize(int n) : saved_(ThreadPool::instance().num_threads()) { set_num_threads(n); }
  ~PoolSize() { set_num_threads(saved_); }
  int saved_;
};

// Runs parallel_for over [begin, end) and checks that every index was visited exactly once.
void expect_exact_cover(int64_t begin, int64_t end, int64_t grain) {
  const int64_t n = std::max<int64_t>(end - begin, 0);
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int64_t> calls{0};
  parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    calls.fetch_add(1);
    ASSERT_LE(begin, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, end);
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i - begin)].fetch_add(1, std::memory_order_relaxed);
  });
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << begin + i << " of [" << begin << ", " << end
                                                      << ") grain " << grain;
  EXPECT_LE(calls.load(), ThreadPool::instance().num_threads());
  if (n > 0) {
    EXPECT_GE(calls.load(), 1);
  }
  if (grain > 0) {
    EXPECT_LE(calls.load(), std::max<int64_t>((n + grain - 1) / grain, n > 0 ? 1 : 0));
  }
}

}  // namespace

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    PoolSize size(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 4097, 100003})
      for (int64_t grain : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{100}, int64_t{4096}, int64_t{1} << 20}) {
        expect_exact_cover(0, n, grain);
        expect_exact_cover(17, 17 + n, grain);  // a range that does not start at zero
      }
    expect_exact_cover(10, 5, 1);  // an empty (reversed) range calls nothing
  }
}

TEST(ThreadPool, RunCoversEveryChunkOnce) {
  PoolSize size(2);
  for (int64_t chunks : {1, 2, 3, 5, 64, 1001}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(chunks));
    ThreadPool::instance().run(chunks, [&](int64_t c) { hits[static_cast<size_t>(c)].fetch_add(1); });
    for (int64_t c = 0; c < chunks; ++c) ASSERT_EQ(hits[static_cast<size_t>(c)].load(), 1) << c << "/" << chunks;
  }
  ThreadPool::instance().run(0, [&](int64_t) { FAIL() << "no chunk should run"; });
}

TEST(ThreadPool, ParallelChunksGivesTheSameCombinationForAnyThreadCount) {
  // Partial sums over chunks fixed by the length, combined in chunk order: bitwise equal for 1, 2, 3 threads.
  std::vector<float> values(100000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 1.0f / static_cast<float>(i + 1);
  auto chunked_sum = [&] {
    const int64_t chunk = 4096, n = static_cast<int64_t>(values.size());
    const int64_t chunks = (n + chunk - 1) / chunk;
    std::vector<float> partial(static_cast<size_t>(chunks));
    parallel_chunks(chunks, [&](int64_t c) {
      float acc = 0;
      for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) acc += values[static_cast<size_t>(i)];
      partial[static_cast<size_t>(c)] = acc;
    });
    float total = 0;
    for (float p : partial) total += p;
    return total;
  };
  float reference;
  {
    PoolSize size(1);
    reference = chunked_sum();
  }
  for (int threads : {2, 3}) {
    PoolSize size(threads);
    EXPECT_EQ(std::bit_cast<uint32_t>(chunked_sum()), std::bit_cast<uint32_t>(reference)) << threads << " threads";
  }
}

TEST(ThreadPool, NestedParallelForRunsSerially) {
  PoolSize size(2);
  std::atomic<int> inner_calls{0}, outer_calls{0};
  std::atomic<bool> wrong_thread{false}, not_in_region{false};
  parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
    outer_calls.fetch_add(1);
    if (!ThreadPool::in_parallel_region()) not_in_region = true;
    const auto outer_thread = std::this_thread::get_id();
    // The nested loop is one call covering its whole range, on this thread.
    parallel_for(0, e - b, 1, [&](int64_t ib, int64_t ie) {
      inner_calls.fetch_add(1);
      if (std::this_thread::get_id() != outer_thread) wrong_thread = true;
      EXPECT_EQ(ib, 0);
      EXPECT_EQ(ie, e - b);
    });
    parallel_chunks(4, [&](int64_t) {
      if (std::this_thread::get_id() != outer_thread) wrong_thread = true;
    });
  });
  EXPECT_EQ(inner_calls.load(), outer_calls.load());
  EXPECT_EQ(outer_calls.load(), 2);
  EXPECT_FALSE(wrong_thread.load());
  EXPECT_FALSE(not_in_region.load());
  EXPECT_FALSE(ThreadPool::in_parallel_region());
}

TEST(ThreadPool, ChunkExceptionsPropagate) {
  PoolSize size(2);
  for (int64_t failing_chunk : {0, 1, 5}) {
    try {
      ThreadPool::instance().run(8, [&](int64_t c) {
        if (c == failing_chunk) fail(ErrorKind::Value, "[pool_test] chunk ", c, " failed");
      });
      FAIL() << "the chunk's exception was lost";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Value);
      EXPECT_EQ(std::string(e.what()), "[pool_test] chunk " + std::to_string(failing_chunk) + " failed");
    }
    EXPECT_FALSE(ThreadPool::in_parallel_region());
  }
  // Every chunk throwing: one of them is rethrown, the others are dropped.
  EXPECT_THROW(parallel_for(0, 100, 1, [](int64_t, int64_t) { throw std::runtime_error("all"); }), std::runtime_error);
  // Serial path (one chunk) too, and the pool is usable afterwards.
  EXPECT_THROW(parallel_for(0, 10, 100, [](int64_t, int64_t) { fail(ErrorKind::Index, "[pool_test] serial"); }), Error);
  EXPECT_FALSE(ThreadPool::in_parallel_region());
  expect_exact_cover(0, 5000, 1);
}

TEST(ThreadPool, ResizeChangesTheThreadsUsed) {
  for (int threads : {1, 2, 4, 1, 3}) {
    PoolSize size(threads);
    EXPECT_EQ(ThreadPool::instance().num_threads(), threads);
    EXPECT_EQ(get_context().num_threads, threads);
    std::mutex mutex;
    std::set<std::thread::id> ids;
    ThreadPool::instance().run(256, [&](int64_t) {
      std::lock_guard<std::mutex> lock(mutex);
      ids.insert(std::this_thread::get_id());
    });
    EXPECT_LE(static_cast<int>(ids.size()), threads);
    EXPECT_GE(ids.size(), 1u);
    expect_exact_cover(0, 77777, 10);
  }
  PoolSize restore(ThreadPool::instance().num_threads());
  set_num_threads(0);  // below one means one
  EXPECT_EQ(ThreadPool::instance().num_threads(), 1);
}

TEST(ThreadPool, TwoThreadsUseThePoolConcurrently) {
  PoolSize size(2);
  constexpr int kRounds = 300;
  std::atomic<int> errors{0};
  auto worker = [&](int seed) {
    for (int r = 0; r < kRounds; ++r) {
      const int64_t n = 1000 + (seed * 7919 + r * 104729) % 20000;
      std::vector<int> hits(static_cast<size_t>(n), 0);  // disjoint ranges: plain ints are race-free
      parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
      });
      for (int h : hits)
        if (h != 1) errors.fetch_add(1);
    }
  };
  std::thread a(worker, 1), b(worker, 2);
  a.join();
  b.join();
  EXPECT_EQ(errors.load(), 0);
}

TEST(ThreadPool, KernelsGiveTheSameResultsForAnyThreadCount) {
  // The stream worker is pool thread 0: elementwise and reduction kernels through the pool.
  Tensor a = test::random_tensor({300, 500}, DType::Float32, 3);
  Tensor b = test::random_tensor({500}, DType::Float32, 4);
  auto run = [&] { return std::make_pair(add(mul(a, b), 1.5).to_vector<float>(), sum(a).item<float>()); };
  std::pair<std::vector<float>, float> reference;
  {
    PoolSize size(1);
    reference = run();
  }
  for (int threads : {2, 3}) {
    PoolSize size(threads);
    auto r = run();
    EXPECT_EQ(r.first, reference.first);
    EXPECT_EQ(std::bit_cast<uint32_t>(r.second), std::bit_cast<uint32_t>(reference.second));
  }
}
