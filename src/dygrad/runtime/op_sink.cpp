// The chain of op sinks (runtime/op_sink.h, docs/ops.md "Op sinks").
#include "dygrad/runtime/op_sink.h"

#include <array>
#include <mutex>

#include "dygrad/core/error.h"

namespace dg {

namespace op_sinks::detail {
constinit thread_local OpSink* tls_first = nullptr;
std::atomic<int> g_process_sinks{0};
}  // namespace op_sinks::detail

namespace {
std::array<std::atomic<OpSink*>, op_sinks::kMaxProcessSinks> g_process{};
std::mutex g_process_mutex;

// The next sink a walk visits: one of this thread's (`thread`), else the first process sink at or after `process`.
struct Position {
  OpSink* thread;
  int process;
};
// While a sink's callback runs: where the walks it causes start (the sinks after it).
constinit thread_local const Position* tls_resume = nullptr;
constinit thread_local HostReadScope* tls_read_scope = nullptr;
}  // namespace

// Visits the sinks from the current start until `visit` returns true; each callback runs with the walks it causes
// starting after its sink. True when a visit returned true.
struct OpSinkChain {
  template <typename Visit>
  static bool walk(Visit&& visit) {
    Position at = tls_resume ? *tls_resume : Position{op_sinks::detail::tls_first, 0};
    for (;;) {
      OpSink* sink = nullptr;
      Position after{nullptr, op_sinks::kMaxProcessSinks};
      if (at.thread) {
        sink = at.thread;
        after = {sink->next_, 0};
      } else {
        for (int i = at.process; i < op_sinks::kMaxProcessSinks && !sink; ++i)
          if ((sink = g_process[i].load(std::memory_order_acquire))) after = {nullptr, i + 1};
        if (!sink) return false;
      }
      struct Resume {
        const Position* saved;
        explicit Resume(const Position* p) : saved(tls_resume) { tls_resume = p; }
        ~Resume() { tls_resume = saved; }
      } resume(&after);
      if (visit(*sink)) return true;
      at = after;
    }
  }

  static void push(OpSink& sink) {
    DG_CHECK(!sink.linked_, Runtime, "[op sinks] the sink is already in a chain");
    sink.next_ = op_sinks::detail::tls_first;
    sink.linked_ = true;
    op_sinks::detail::tls_first = &sink;
  }

  static void remove(OpSink& sink) {
    for (OpSink** link = &op_sinks::detail::tls_first; *link; link = &(*link)->next_) {
      if (*link != &sink) continue;
      *link = sink.next_;
      sink.next_ = nullptr;
      sink.linked_ = false;
      return;
    }
    fail(ErrorKind::Runtime, "[op sinks] the sink is not in this thread's chain");
  }
};

namespace op_sinks {
void push(OpSink& sink) { OpSinkChain::push(sink); }
void remove(OpSink& sink) { OpSinkChain::remove(sink); }

void add_process_sink(OpSink& sink) {
  std::lock_guard<std::mutex> lock(g_process_mutex);
  for (auto& slot : g_process)
    DG_CHECK(slot.load(std::memory_order_relaxed) != &sink, Runtime, "[op sinks] the sink is already added");
  for (auto& slot : g_process) {
    if (slot.load(std::memory_order_relaxed)) continue;
    slot.store(&sink, std::memory_order_release);
    detail::g_process_sinks.fetch_add(1, std::memory_order_release);
    return;
  }
  fail(ErrorKind::Runtime, "[op sinks] at most ", kMaxProcessSinks, " process sinks");
}

void remove_process_sink(OpSink& sink) {
  std::lock_guard<std::mutex> lock(g_process_mutex);
  for (auto& slot : g_process) {
    if (slot.load(std::memory_order_relaxed) != &sink) continue;
    slot.store(nullptr, std::memory_order_release);
    detail::g_process_sinks.fetch_sub(1, std::memory_order_release);
    return;
  }
  fail(ErrorKind::Runtime, "[op sinks] the sink is not a process sink");
}

bool on_op(const OpCall& call) {
  return OpSinkChain::walk([&](OpSink& sink) { return sink.on_op(call); });
}

void on_enqueued(const Task& task) {
  OpSinkChain::walk([&](OpSink& sink) { return sink.on_enqueued(task), false; });
}

void on_host_read(const Tensor& t, const char* fallback) {
  HostReadScope* outermost = nullptr;
  HostReadScope* once = nullptr;  // the outermost one-read scope: its first read is the one reported
  for (HostReadScope* s = tls_read_scope; s; s = s->outer_) {
    outermost = s;
    if (s->once_) once = s;
  }
  if (once && once->reported_) return;
  if (once) once->reported_ = true;
  const HostRead read{t, outermost ? outermost->reader_ : fallback, current_call_site()};
  OpSinkChain::walk([&](OpSink& sink) { return sink.on_host_read(read), false; });
}
}  // namespace op_sinks

HostReadScope::HostReadScope(const char* reader, bool once) : reader_(reader), once_(once), outer_(tls_read_scope) {
  tls_read_scope = this;
}
HostReadScope::~HostReadScope() { tls_read_scope = outer_; }

}  // namespace dg
