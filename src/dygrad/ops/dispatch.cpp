// Task construction and enqueue.
#include "dygrad/ops/dispatch.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"

#include <deque>
#include <mutex>

#include "dygrad/core/error.h"
#include "dygrad/ops/meta_eval.h"

namespace dg {

// --- meta evaluation (ops/meta_eval.h) ----------------------------------------------------------------------
namespace meta {
namespace {
struct Queued {
  Task task;                  // holds the operands, as a queued Task does
  int64_t allocated_total;    // meta bytes allocated when it was enqueued
};
std::mutex g_queue_mutex;
std::deque<Queued> g_queue;
uint64_t g_inflight_limit = 0;
size_t g_capacity = 0;
}  // namespace

void begin(uint64_t inflight_limit, size_t capacity) {
  DG_CHECK(!active(), Runtime, "[memory.estimate] a meta evaluation is already running");
  {
    std::lock_guard<std::mutex> lock(g_queue_mutex);
    g_queue.clear();
    g_inflight_limit = inflight_limit;
    g_capacity = capacity;
  }
  set_active(true);
}

void drain() {
  std::deque<Queued> done;
  {
    std::lock_guard<std::mutex> lock(g_queue_mutex);
    done.swap(g_queue);
  }
  // `done` drops the operands here, outside the lock (frees re-enter the meta counters).
}

Stats end() {
  drain();
  Stats s = current();
  set_active(false);
  return s;
}

void enqueue(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Attrs& attrs) {
  Queued q;
  q.task.op = &op;
  for (const Tensor& t : inputs) q.task.inputs.push_back(t);
  for (const Tensor& t : outputs) q.task.outputs.push_back(t);
  q.task.attrs = attrs;
  const int64_t scratch = op.scratch ? static_cast<int64_t>(op.scratch(q.task)) : 0;
  note_task(scratch);
  std::deque<Queued> done;
  {
    const int64_t total = current().allocated_total;
    std::lock_guard<std::mutex> lock(g_queue_mutex);
    // The stream's back-pressure: the host waits while it has allocated more than the window since the oldest
    // queued Task (which then has run), or while the queue is full.
    while (!g_queue.empty() && ((g_inflight_limit > 0 && total - g_queue.front().allocated_total >
                                                                static_cast<int64_t>(g_inflight_limit)) ||
                                (g_capacity > 0 && g_queue.size() >= g_capacity))) {
      done.push_back(std::move(g_queue.front()));
      g_queue.pop_front();
    }
    if (g_inflight_limit > 0) {
      q.allocated_total = total;
      g_queue.push_back(std::move(q));
    }
  }
}
}  // namespace meta

namespace {
thread_local OpObserver* tls_op_observer = nullptr;
thread_local bool tls_in_op_observer = false;

// Runs the observer with itself switched off; true when it gave the outputs their values.
bool observe(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  struct Reentry {
    Reentry() { tls_in_op_observer = true; }
    ~Reentry() { tls_in_op_observer = false; }
  } reentry;
  return (*tls_op_observer)(op, inputs, outputs);
}
}  // namespace

void set_op_observer(OpObserver observer) {
  delete tls_op_observer;
  tls_op_observer = observer ? new OpObserver(std::move(observer)) : nullptr;
}
bool has_op_observer() { return tls_op_observer != nullptr; }

uint64_t enqueue(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Attrs& attrs) {
  if (tls_op_observer && !tls_in_op_observer) [[unlikely]] {
    if (observe(op, inputs, outputs)) return outputs.empty() ? 0 : outputs[0].storage().last_write_seq();
  }
  if (meta::active()) [[unlikely]] {
    meta::enqueue(op, inputs, outputs, attrs);
    return 0;
  }
  uint64_t seq = Stream::cpu().submit(op, inputs, outputs, attrs, current_call_site());
  for (const Tensor& t : outputs)
    if (t.defined() && t.storage().shared_with_host()) finish_write_if_external(t, seq);
  return seq;
}

uint64_t enqueue(const OpDef& op, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
                 const Attrs& attrs) {
  return enqueue(op, std::span<const Tensor>(inputs.begin(), inputs.size()),
                 std::span<const Tensor>(outputs.begin(), outputs.size()), attrs);
}

namespace {
thread_local const char* tls_api_name = nullptr;
}
const char* api_name(const char* own_name) { return tls_api_name ? tls_api_name : own_name; }
ApiNameScope::ApiNameScope(const char* name) : saved_(tls_api_name) { tls_api_name = name; }
ApiNameScope::~ApiNameScope() { tls_api_name = saved_; }

void check_defined(const char* op, const Tensor& t, const char* argument) {
  DG_CHECK(t.defined(), Value, "[", op, "] argument '", argument, "' is an undefined tensor");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  DG_CHECK(a.device() == b.device(), Runtime, "[", op, "] expected all tensors to be on the same device, but found ",
           a.device().str(), " and ", b.device().str());
}

void check_floating(const char* op, const Tensor& t) {
  DG_CHECK(is_floating(t.dtype()), Type, "[", op, "] expected a floating point tensor, got ", dtype_name(t.dtype()));
}

void finish_write_if_external(const Tensor& dst, uint64_t seq) {
  if (dst.storage().shared_with_host()) Stream::cpu().wait_for(seq);
}

}  // namespace dg
