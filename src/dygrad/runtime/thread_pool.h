// The one intra-op thread pool, shared by every kernel including GEMM (docs/threading.md). The thread that
// calls run() (the stream worker in async mode, the host in synchronize mode) is thread 0 and runs chunks
// itself; helpers spin briefly after a job, then sleep. Nested calls run serially.
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dg {

// A non-owning reference to a callable, cheaper than std::function on the kernel hot path.
template <typename Signature> class FunctionRef;
template <typename R, typename... A>
class FunctionRef<R(A...)> {
 public:
  template <typename F>
  FunctionRef(F&& f) : object_(reinterpret_cast<void*>(&f)),
                       call_([](void* o, A... a) -> R { return (*reinterpret_cast<std::remove_reference_t<F>*>(o))(a...); }) {}
  R operator()(A... a) const { return call_(object_, a...); }

 private:
  void* object_;
  R (*call_)(void*, A...);
};

class ThreadPool {
 public:
  static ThreadPool& instance();
  int num_threads() const { return num_threads_; }  // the calling thread included
  // Changes the pool size; only while no job runs (Context drains the stream first).
  void resize(int num_threads);
  // Runs body(chunk) for every chunk in [0, num_chunks) across the pool and waits; rethrows the first
  // exception a chunk threw.
  void run(int64_t num_chunks, FunctionRef<void(int64_t)> body);
  static bool in_parallel_region();
  // Set by the thread that runs jobs (the stream worker) while it has no work queued: only then do the helpers,
  // spinning for the next job, yield their cores (docs/threading.md, "Who spins, who sleeps").
  void set_owner_idle(bool idle) { owner_idle_.store(idle, std::memory_order_relaxed); }
  // fork() support (docs/threading.md, "fork"): before, the forking thread takes the run mutex (no job in
  // flight); after, the parent releases it and the child, whose helper threads do not exist, gets new ones.
  void before_fork();
  void after_fork_parent();
  void after_fork_child();

  ~ThreadPool();

 private:
  ThreadPool();
  void start_helpers(int count);
  void stop_helpers();
  struct Job;
  void helper_loop(int index, uint32_t start_generation);
  static void work_on_job(Job& job);

  int num_threads_ = 1;
  std::vector<std::thread> helpers_;
  std::mutex run_mutex_;
  // The job being run lives on the caller's stack; helpers reach it through job_ and announce themselves
  // in active_helpers_ first, so the caller can retire it safely (seq_cst handshake in run()).
  alignas(64) std::atomic<Job*> job_{nullptr};
  alignas(64) std::atomic<uint32_t> generation_{0};
  std::atomic<int> sleeping_helpers_{0};
  std::atomic<bool> stopping_{false};
  alignas(64) std::atomic<int> active_helpers_{0};
  std::atomic<bool> owner_idle_{true};
};

// Splits [begin, end) into at most num_threads ranges of at least `grain` elements and runs
// body(range_begin, range_end) on each. For work whose result does not depend on the split.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& body) {
  int64_t n = end - begin;
  if (n <= 0) return;
  ThreadPool& pool = ThreadPool::instance();
  int64_t max_chunks = grain > 0 ? (n + grain - 1) / grain : n;
  int64_t chunks = std::min<int64_t>(pool.num_threads(), max_chunks);
  if (chunks <= 1 || ThreadPool::in_parallel_region()) {
    body(begin, end);
    return;
  }
  auto chunk_body = [&](int64_t c) {
    int64_t b = begin + n * c / chunks, e = begin + n * (c + 1) / chunks;
    if (b < e) body(b, e);
  };
  pool.run(chunks, chunk_body);
}

// Runs body(chunk) for a chunk count fixed by the caller (from the shape alone), so that reductions combine
// partial results in the same order whatever the thread count (docs/threading.md, deterministic mode).
template <typename F>
void parallel_chunks(int64_t num_chunks, F&& body) {
  if (num_chunks <= 0) return;
  if (num_chunks == 1 || ThreadPool::in_parallel_region() || ThreadPool::instance().num_threads() == 1) {
    for (int64_t c = 0; c < num_chunks; ++c) body(c);
    return;
  }
  auto chunk_body = [&](int64_t c) { body(c); };
  ThreadPool::instance().run(num_chunks, chunk_body);
}

}  // namespace dg
