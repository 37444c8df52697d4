// Context flags: set/get round trip, deterministic mode giving bitwise-identical results across runs and
// thread counts, and the counter-based RNG's seed and reserved offsets (docs/threading.md, docs/rng.md).
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "dygrad/runtime/thread_pool.h"
#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {

// Restores the whole context (and the generator) when a test ends.
struct ContextGuard {
  ContextGuard() : context_(get_context()), rng_(rng_state()) {}
  ~ContextGuard() {
    set_context(context_);
    set_rng_state(rng_);
  }
  Context context_;
  RngState rng_;
};

// A composite computation over the existing ops: large full and partial reductions (chunked over the
// pool), arithmetic with broadcasting, strided views and in-place updates.
std::vector<std::vector<float>> composite() {
  Tensor x = random_tensor({1536, 1024}, DType::Float32, 21);
  Tensor y = random_tensor({1024}, DType::Float32, 22);
  Tensor z = random_tensor({1536, 1}, DType::Float32, 23);
  Tensor h = mul(add(x, y), sub(z, 0.5));
  Tensor q = div(x, add(mul(y, y), 1.0));
  add_(q, h, 0.25);
  Tensor big = random_tensor({1 << 21}, DType::Float32, 24);
  return {
      sum(x).to_vector<float>(),
      sum(big).to_vector<float>(),
      mean(big).to_vector<float>(),
      sum(h, Shape{0}).to_vector<float>(),
      mean(q, Shape{1}, true).to_vector<float>(),
      sum(transpose(q, 0, 1), Shape{1}).to_vector<float>(),  // a strided reduction
      sum(mul(q, q)).to_vector<float>(),
      q.to_vector<float>(),
  };
}

bool bitwise_equal(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k].size() != b[k].size() || std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) != 0)
      return false;
  return true;
}

}  // namespace

TEST(Context, SetAndGetRoundTrip) {
  ContextGuard guard;
  Context c;
  c.deterministic = true;
  c.synchronize = true;
  c.num_threads = 1;
  set_context(c);
  Context got = get_context();
  EXPECT_TRUE(got.deterministic);
  EXPECT_TRUE(got.synchronize);
  EXPECT_EQ(got.num_threads, 1);
  EXPECT_TRUE(deterministic_enabled());
  EXPECT_TRUE(synchronize_enabled());
  EXPECT_EQ(ThreadPool::instance().num_threads(), 1);
  // Ops still work in this configuration.
  EXPECT_EQ(add(full(Shape{3}, 1.0), 2.0).to_vector<float>(), std::vector<float>(3, 3.0f));

  c.deterministic = false;
  c.synchronize = false;
  c.num_threads = 2;
  set_context(c);
  got = get_context();
  EXPECT_FALSE(got.deterministic);
  EXPECT_FALSE(got.synchronize);
  EXPECT_EQ(got.num_threads, 2);

  // num_threads 0 keeps the current pool size.
  c.num_threads = 0;
  set_context(c);
  EXPECT_EQ(get_context().num_threads, 2);

  set_deterministic(true);
  EXPECT_TRUE(get_context().deterministic);
  set_num_threads(3);
  EXPECT_EQ(get_context().num_threads, 3);
}

TEST(Context, DefaultThreadCountIsTheCoreCount) {
  // The pool starts with one thread per core (hardware_concurrency), the stream worker included. Other
  // tests may have changed it; the guard in each restores the value it found, so this is the start value.
  unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0) {
    EXPECT_EQ(get_context().num_threads, static_cast<int>(cores));
  }
}

TEST(Context, DeterministicModeIsBitwiseAcrossRunsAndThreadCounts) {
  ContextGuard guard;
  set_deterministic(true);
  set_num_threads(1);
  auto reference = composite();
  EXPECT_TRUE(bitwise_equal(composite(), reference)) << "two runs on one thread differ";
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    EXPECT_TRUE(bitwise_equal(composite(), reference)) << threads << " threads differ from 1";
    EXPECT_TRUE(bitwise_equal(composite(), reference)) << "a second run on " << threads << " threads differs";
  }
  // Synchronize mode runs the same kernels on the host thread: the same bits again.
  set_num_threads(2);
  set_synchronize(true);
  EXPECT_TRUE(bitwise_equal(composite(), reference)) << "synchronize mode differs";
}

TEST(Context, ManualSeedAndReservedOffsets) {
  ContextGuard guard;
  manual_seed(1234);
  RngState s = rng_state();
  EXPECT_EQ(s.seed, 1234u);
  EXPECT_EQ(s.offset, 0u);
  // Each random op reserves a range of counters on the host at enqueue; ranges are consecutive.
  RngState first = reserve_rng(10);
  RngState second = reserve_rng(5);
  RngState third = reserve_rng(0);
  EXPECT_EQ(first.seed, 1234u);
  EXPECT_EQ(first.offset, 0u);
  EXPECT_EQ(second.offset, 10u);
  EXPECT_EQ(third.offset, 15u);
  EXPECT_EQ(rng_state().offset, 15u);
  // Restoring a saved state replays the same reservations (what recompute and a JIT replay rely on).
  set_rng_state(first);
  EXPECT_EQ(reserve_rng(10).offset, 0u);
  EXPECT_EQ(reserve_rng(5).offset, 10u);
  // Reseeding starts over.
  manual_seed(99);
  EXPECT_EQ(rng_state().seed, 99u);
  EXPECT_EQ(reserve_rng(1).offset, 0u);
}

TEST(Context, ReservationsFromSeveralThreadsAreDisjoint) {
  ContextGuard guard;
  manual_seed(7);
  constexpr int kThreads = 4, kEach = 500;
  std::vector<std::vector<uint64_t>> offsets(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &offsets] {
      for (int i = 0; i < kEach; ++i) offsets[t].push_back(reserve_rng(3).offset);
    });
  for (auto& th : threads) th.join();
  std::vector<uint64_t> all;
  for (auto& v : offsets) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], 3 * i);
  EXPECT_EQ(rng_state().offset, 3u * kThreads * kEach);
}
