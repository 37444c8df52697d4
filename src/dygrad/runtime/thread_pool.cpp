// Thread pool implementation: a generation counter announces a job, helpers claim chunks from an atomic
// counter, the caller waits on a completion count. See docs/threading.md for the spin/sleep policy.
#include "dygrad/runtime/thread_pool.h"
#include "dygrad/core/storage.h"

#include <chrono>
#include <new>

#include "dygrad/runtime/spin.h"

namespace dg {

namespace {
thread_local bool tls_in_parallel = false;

// How long a helper keeps spinning for the next job before it sleeps: long enough to cover the gap
// between two kernels of one op sequence, short enough not to steal the host's core for long.
constexpr auto kHelperSpin = std::chrono::microseconds(50);

int default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}
}  // namespace

bool ThreadPool::in_parallel_region() { return tls_in_parallel; }

ThreadPool& ThreadPool::instance() {
  static ThreadPool* pool = new ThreadPool();  // never destroyed: kernels may run during exit
  return *pool;
}

ThreadPool::ThreadPool() { resize(default_threads()); }

void ThreadPool::before_fork() { run_mutex_.lock(); }
void ThreadPool::after_fork_parent() { run_mutex_.unlock(); }
void ThreadPool::after_fork_child() {
  // The helpers' std::thread handles name threads of the parent: they are dropped unjoined (leaked on
  // purpose; a handle is a few words) and the mutex, held by the forking thread, is made anew.
  new std::vector<std::thread>(std::move(helpers_));
  helpers_ = std::vector<std::thread>();
  new (&run_mutex_) std::mutex();
  job_.store(nullptr);
  sleeping_helpers_.store(0);
  active_helpers_.store(0);
  start_helpers(num_threads_ - 1);
}

ThreadPool::~ThreadPool() { stop_helpers(); }

void ThreadPool::resize(int num_threads) {
  if (num_threads < 1) num_threads = 1;
  std::lock_guard<std::mutex> lock(run_mutex_);
  stop_helpers();
  num_threads_ = num_threads;
  start_helpers(num_threads - 1);
}

void ThreadPool::start_helpers(int count) {
  stopping_.store(false);
  // The generation is read here, before the thread exists: a helper whose thread starts late still sees
  // every later bump (stop_helpers' included) as a change.
  const uint32_t start_generation = generation_.load(std::memory_order_seq_cst);
  for (int i = 0; i < count; ++i)
    helpers_.emplace_back([this, i, start_generation] { helper_loop(i + 1, start_generation); });
}

void ThreadPool::stop_helpers() {
  if (helpers_.empty()) return;
  stopping_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& t : helpers_) t.join();
  helpers_.clear();
}

struct ThreadPool::Job {
  FunctionRef<void(int64_t)>* body;
  int64_t num_chunks;
  alignas(64) std::atomic<int64_t> next_chunk{0};
  alignas(64) std::atomic<int64_t> chunks_done{0};
  std::mutex error_mutex;
  std::exception_ptr error;
};

void ThreadPool::work_on_job(Job& job) {
  for (;;) {
    int64_t c = job.next_chunk.fetch_add(1, std::memory_order_relaxed);
    if (c >= job.num_chunks) break;
    try {
      (*job.body)(c);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.error_mutex);
      if (!job.error) job.error = std::current_exception();
    }
    job.chunks_done.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::helper_loop(int, uint32_t seen) {
  tls_in_parallel = true;
  Storage::set_thread_runs_device_kernels(true);  // helpers run chunks of any device's kernels (docs/devices.md)
  for (;;) {
    // Spin for a short while, then sleep until the generation changes.
    auto spin_until = std::chrono::steady_clock::now() + kHelperSpin;
    uint32_t g;
    int polls = 0;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      cpu_relax();
      if (++polls % 64 != 0) continue;
      // While the worker has nothing queued, give the core to a thread waiting for one: the host, woken at a sync
      // point, would otherwise wait for this spin to end (docs/threading.md, "Who spins, who sleeps").
      if (owner_idle_.load(std::memory_order_relaxed)) std::this_thread::yield();
      if (std::chrono::steady_clock::now() > spin_until) {
        sleeping_helpers_.fetch_add(1, std::memory_order_seq_cst);
        generation_.wait(seen, std::memory_order_seq_cst);
        sleeping_helpers_.fetch_sub(1, std::memory_order_seq_cst);
        spin_until = std::chrono::steady_clock::now() + kHelperSpin;
      }
    }
    seen = g;
    if (stopping_.load(std::memory_order_acquire)) return;
    active_helpers_.fetch_add(1, std::memory_order_seq_cst);
    if (Job* job = job_.load(std::memory_order_seq_cst)) work_on_job(*job);
    active_helpers_.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void ThreadPool::run(int64_t num_chunks, FunctionRef<void(int64_t)> body) {
  if (num_chunks <= 0) return;
  if (tls_in_parallel || num_threads_ == 1 || num_chunks == 1) {
    bool outer = tls_in_parallel;
    tls_in_parallel = true;
    try {
      for (int64_t c = 0; c < num_chunks; ++c) body(c);
    } catch (...) {
      tls_in_parallel = outer;
      throw;
    }
    tls_in_parallel = outer;
    return;
  }
  std::lock_guard<std::mutex> lock(run_mutex_);
  Job job{&body, num_chunks};
  job_.store(&job, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_helpers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();

  tls_in_parallel = true;
  work_on_job(job);
  tls_in_parallel = false;
  // The caller is the device thread: it spins until the helpers finish their chunks, then retires the job.
  // A helper that loaded job_ before the store below is counted in active_helpers_, so we wait for it.
  // Spin, but yield the core now and then: when the machine is oversubscribed the helper we wait for may be
  // waiting for this very core (measured with bench/bench_gemm.cpp on a loaded 2-core machine).
  for (int polls = 1; job.chunks_done.load(std::memory_order_acquire) < num_chunks; ++polls) {
    cpu_relax();
    if (polls % 256 == 0) std::this_thread::yield();
  }
  job_.store(nullptr, std::memory_order_seq_cst);
  while (active_helpers_.load(std::memory_order_seq_cst) != 0) cpu_relax();
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace dg
