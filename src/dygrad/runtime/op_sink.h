// Op sinks: the one interception point of the op path (docs/ops.md, "Op sinks"). Every op a thread issues
// (ops/dispatch.cpp's enqueue) passes through a chain of sinks before it reaches the stream: first this thread's
// sinks, newest first, then the process's sinks in the order they were added. Each sees the op, its operands,
// its typed attributes and the call site, and may consume it (give the outputs their values itself, or leave them
// unwritten): the sinks after it and the stream then never see it. A sink is also told when the host is about to
// read a tensor's values (Tensor::wait_readable: item, tolist, numpy, an op that reads values on the host) and may
// refuse the read by raising; and when the stream numbers a Task it did not consume (on_enqueued).
//
// Today's sinks: selective recompute's cache (thread; autograd/recompute_sink.h), meta evaluation (process;
// ops/meta_eval.h) and the profiler's op recording (process; profiler/profiler.cpp). With none, enqueue pays one
// thread-local and one global load.
//
// Re-entry: what a sink does inside its own callback (issue ops, read tensors) goes to the sinks after it only,
// so a sink never sees itself and a cache that runs ops to fill itself is not asked about them.
#pragma once
#include <atomic>
#include <span>

#include "dygrad/runtime/op_def.h"

namespace dg {

// One op on its way to the stream: what enqueue was given.
struct OpCall {
  const OpDef& op;
  std::span<const Tensor> inputs;
  std::span<const Tensor> outputs;  // allocated; their values are the Task's to write
  const Attrs& attrs;
  CallSite site;  // where it was issued (the Python line, or a C++ CallSiteScope)
};

// The host is about to wait for a tensor and read its values.
struct HostRead {
  const Tensor& tensor;
  const char* reader;  // the API or op that reads ("item", "tolist", "nonzero", "repeat_interleave")
  CallSite site;
};

class OpSink {
 public:
  virtual ~OpSink() = default;
  // True: the sink consumed the op (the outputs have their values, or are left unwritten on purpose); no later sink
  // and no stream sees it. Raising fails the op at its call, as a validation error does.
  virtual bool on_op(const OpCall& call) { return (void)call, false; }
  // The stream numbered a Task no sink consumed (task.seq is set): on the issuing thread, inside the stream's
  // producer lock, so it must not issue ops or wait. The profiler records its op here.
  virtual void on_enqueued(const Task& task) { (void)task; }
  // May raise to refuse the read (the error names the reader and the line).
  virtual void on_host_read(const HostRead& read) { (void)read; }

 private:
  friend struct OpSinkChain;
  OpSink* next_ = nullptr;  // the next of this thread's sinks (older)
  bool linked_ = false;
};

namespace op_sinks {
// This thread's chain: `push` puts a sink in front; `remove` takes it out wherever it is (raises when absent). A
// sink is in at most one chain; the caller keeps it alive while it is in.
void push(OpSink& sink);
void remove(OpSink& sink);
// The process's sinks (at most kMaxProcessSinks): they see every thread's ops after that thread's own sinks.
// Removing one does not wait for calls in flight on other threads: the owner stops those first (the profiler
// drains the stream; meta evaluation allows one issuing thread).
constexpr int kMaxProcessSinks = 4;
void add_process_sink(OpSink& sink);
void remove_process_sink(OpSink& sink);

namespace detail {
extern constinit thread_local OpSink* tls_first;
extern std::atomic<int> g_process_sinks;
}  // namespace detail

// Any sink would see this thread's next op (the enqueue fast path's test).
inline bool engaged() {
  return detail::tls_first != nullptr || detail::g_process_sinks.load(std::memory_order_relaxed) != 0;
}
// Runs the chain; true when a sink consumed the op.
bool on_op(const OpCall& call);
void on_enqueued(const Task& task);
// Tells the chain that the host reads `t` (Tensor::wait_readable); the reader is the innermost HostReadScope's, else
// `fallback`.
void on_host_read(const Tensor& t, const char* fallback);
}  // namespace op_sinks

// A sink in this thread's chain for a scope.
class OpSinkScope {
 public:
  explicit OpSinkScope(OpSink& sink) : sink_(sink) { op_sinks::push(sink_); }
  ~OpSinkScope() { op_sinks::remove(sink_); }
  OpSinkScope(const OpSinkScope&) = delete;
  OpSinkScope& operator=(const OpSinkScope&) = delete;

 private:
  OpSink& sink_;
};

// Names the reader of the host reads inside it: an op that reads values on the host (one_hot without num_classes)
// reads through item() or to_vector(), and the sinks are told the op, not "item"; nested scopes give the outermost
// name (the API the user called: `t[mask]` reads through nonzero). `once`: the scope is one read of one tensor (a
// binding waits, then converts), reported at its first read, whatever scopes open inside it.
class HostReadScope {
 public:
  explicit HostReadScope(const char* reader, bool once = false);
  ~HostReadScope();
  HostReadScope(const HostReadScope&) = delete;
  HostReadScope& operator=(const HostReadScope&) = delete;

 private:
  friend void op_sinks::on_host_read(const Tensor& t, const char* fallback);
  const char* reader_;
  bool once_;
  bool reported_ = false;
  HostReadScope* outer_;
};

}  // namespace dg
