// Context flags and the generator state (host-side only; kernels receive seed and offset as attributes).
#include "dygrad/runtime/context.h"

#include <atomic>
#include <mutex>

#include "dygrad/runtime/stream.h"
#include "dygrad/runtime/context_flags.h"
#include "dygrad/runtime/thread_pool.h"

namespace dg {

namespace {
std::atomic<bool> g_deterministic{false};
std::atomic<bool> g_synchronize{false};
std::mutex g_rng_mutex;
RngState g_rng{};
}  // namespace
std::atomic<bool> detail::g_inline_small_ops{true};

Context get_context() {
  return {g_deterministic.load(), g_synchronize.load(), ThreadPool::instance().num_threads(), detail::g_inline_small_ops.load()};
}

void set_context(const Context& context) {
  set_deterministic(context.deterministic);
  set_synchronize(context.synchronize);
  set_inline_small_ops(context.inline_small_ops);
  if (context.num_threads > 0) set_num_threads(context.num_threads);
}

void set_deterministic(bool on) { g_deterministic.store(on); }
void set_synchronize(bool on) {
  if (on) Stream::synchronize_all();  // queued work runs before inline work starts
  g_synchronize.store(on);
}
void set_num_threads(int n) {
  Stream::synchronize_all();
  ThreadPool::instance().resize(n);
}
// No drain needed either way: a Task runs inline only when nothing is queued (docs/stream.md).
void set_inline_small_ops(bool on) { detail::g_inline_small_ops.store(on); }
bool deterministic_enabled() { return g_deterministic.load(std::memory_order_relaxed); }
bool synchronize_enabled() { return g_synchronize.load(std::memory_order_relaxed); }
bool inline_small_ops_enabled() { return detail::inline_small_ops_enabled_inline(); }

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_rng_mutex);
  g_rng = {seed, 0};
}
RngState rng_state() {
  std::lock_guard<std::mutex> lock(g_rng_mutex);
  return g_rng;
}
void set_rng_state(const RngState& state) {
  std::lock_guard<std::mutex> lock(g_rng_mutex);
  g_rng = state;
}
RngState reserve_rng(uint64_t count) {
  std::lock_guard<std::mutex> lock(g_rng_mutex);
  RngState r = g_rng;
  g_rng.offset += count;
  return r;
}

}  // namespace dg
