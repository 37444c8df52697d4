// The profiler's recording side: one active Profiler at a time, per-thread event buffers appended without
// locks, host op scopes and user ranges. Zero cost when off: the stream and allocator observers are null
// and HostOpScope / RecordFunction test one global flag. See docs/profiler.md.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dygrad/profiler/events.h"

namespace dg::profiler {

namespace detail {
// True while a Profiler is active: the one flag the host-side scopes read when profiling is off.
extern std::atomic<bool> g_recording;
inline bool recording() { return g_recording.load(std::memory_order_relaxed); }
// begin_ns < 0: now. A binding passes the instant its Python entry point was entered.
void open_host_op(const char* name, int64_t begin_ns = -1);
void close_host_op();
void open_user_range(std::string_view name);
void close_user_range();
}  // namespace detail

class Profiler {
 public:
  explicit Profiler(ProfilerOptions options = {});
  ~Profiler();  // stops the session if still active
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Installs the hooks. Raises RuntimeError when another Profiler is active.
  void start();
  // A sync point: waits for every Task enqueued so far (a deferred kernel error is raised here, after the
  // session is closed), removes the hooks and merges the buffers into data(). Other threads must not be
  // issuing ops while it runs.
  void stop();
  bool active() const { return active_; }
  // Marks a step boundary now; steps are the intervals between consecutive markers.
  void step();

  // What the session recorded (complete after stop()).
  const ProfileData& data() const { return data_; }
  const ProfilerOptions& options() const { return data_.options; }

  // The active Profiler, or null.
  static Profiler* current();

  struct Session;  // profiler.cpp

 private:
  ProfileData data_;
  std::unique_ptr<Session> session_;
  bool active_ = false;
};

// Opened by a public op function (or its binding) on entry: the host span of the Task it enqueues begins
// here instead of at the enqueue instant. A scope that issues no Task, or several, is recorded as a
// HostOp range. Cost when off: one relaxed load and a branch.
class HostOpScope {
 public:
  explicit HostOpScope(const char* name) : engaged_(detail::recording()) {
    if (engaged_) detail::open_host_op(name);
  }
  ~HostOpScope() {
    if (engaged_) detail::close_host_op();
  }
  HostOpScope(const HostOpScope&) = delete;
  HostOpScope& operator=(const HostOpScope&) = delete;

 private:
  bool engaged_;
};

// A named user range on the host track (torch.profiler.record_function); ranges nest.
class RecordFunction {
 public:
  explicit RecordFunction(std::string_view name) : engaged_(detail::recording()) {
    if (engaged_) detail::open_user_range(name);
  }
  ~RecordFunction() {
    if (engaged_) detail::close_user_range();
  }
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

 private:
  bool engaged_;
};

// Explicit ranges for the active Profiler (no-ops when none is active), recorded on the calling thread.
// The training loop waited for the data loader from begin to end.
void record_data_wait(int64_t begin_ns, int64_t end_ns);
// A collective or transfer. async: it ran on a communication stream beside compute (its exposed part is
// what compute did not hide); false: it blocked the issuing thread.
void record_comm(std::string_view name, int64_t begin_ns, int64_t end_ns, bool async);
// One sub-op of a Task that runs several (dygrad.jit's jit_graph and jit_segment), on the calling (device) thread,
// named with the line that issued it.
void record_sub_op(const char* op, const CallSite& site, int64_t begin_ns, int64_t end_ns);
inline bool recording() { return detail::recording(); }
// Marks a step boundary on the active Profiler.
void step();

// The call stack of the calling host thread, for with_stack (the Python bindings install one that walks the
// interpreter's frames). Called on the host thread at every enqueue while a with_stack session records.
using StackProvider = std::string (*)();
void set_stack_provider(StackProvider provider);

}  // namespace dg::profiler
