// The profiler's event model: what one profiling session recorded, merged from the per-thread buffers
// after stop(). Times are nanoseconds on one steady clock (profiler::now_ns). See docs/profiler.md.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dygrad/core/small_vector.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/allocator.h"

namespace dg::profiler {

// Nanoseconds on std::chrono::steady_clock: the one clock every event uses.
int64_t now_ns();

struct ProfilerOptions {
  bool record_shapes = false;   // input/output shapes and dtypes of every op
  bool profile_memory = false;  // allocator events and counters sampled at every task begin/end
  bool with_stack = false;      // the issuing call stack of every op, from the installed stack provider
  // Device idle that ends within this long after the next task was enqueued counts wholly as host-bound
  // (docs/profiler.md, "host-bound rule"): the wake-up and launch latency of a task issued late.
  int64_t host_bound_tolerance_ns = 50'000;
};

// A thread that recorded events: a host thread (ops, ranges) or the stream worker (device spans).
struct ThreadInfo {
  int index = 0;          // 0, 1, ... in order of first event
  uint64_t os_tid = 0;    // the kernel's thread id
  bool host = false;      // issued at least one op or range
  bool device = false;    // ran at least one task
};

// One Task: the host span (op entry to enqueue) and the device span (kernel begin to end) it flows into.
struct OpRecord {
  uint64_t seq = 0;              // the Task's event (core/device.h: the CPU's are its stream's sequence numbers):
                                 // the flow id linking both spans
  Device device;                 // the device whose stream ran it
  const OpDef* op = nullptr;
  const char* name = "";         // op->name (OpDefs are static)
  int host_thread = -1;          // ThreadInfo::index
  int64_t host_begin_ns = 0;     // public op entered (HostOpScope), else the enqueue instant
  int64_t enqueue_ns = 0;        // the Task was published on the stream
  int device_thread = -1;        // -1: never ran (an input was poisoned, or the session ended first)
  int64_t device_begin_ns = 0;
  int64_t device_end_ns = 0;
  bool failed = false;           // the kernel raised
  double flops = 0;              // Task::cost()
  double bytes = 0;
  CallSite site;
  std::string stack;             // with_stack: "file:line(function)" frames, outermost first, joined by "\n"
  std::vector<Dims> input_shapes, output_shapes;  // record_shapes only
  std::vector<DType> input_dtypes;                // record_shapes only

  bool ran() const { return device_thread >= 0; }
  int64_t host_ns() const { return enqueue_ns - host_begin_ns; }
  int64_t device_ns() const { return ran() ? device_end_ns - device_begin_ns : 0; }
};

// A host-side interval that is not one Task.
enum class RangeKind : uint8_t {
  User,      // RecordFunction
  HostOp,    // a HostOpScope that issued no Task or several (a view op, a composite op)
  DataWait,  // record_data_wait: the training loop waited for the data loader
  Comm,      // record_comm: a collective or transfer
  Backpressure,  // the host waited at enqueue for the device ("queue full", "allocation window", "run-ahead bound")
  Sync,      // the host blocked at a sync point (named by the innermost open op scope: "item", "numpy", ...)
  SubOp,     // a sub-op of a Task that runs several (a dygrad.jit replay or segment), on the thread that ran it:
             // "name (file:line)", the line that issued it when it was captured (docs/jit.md)
};
struct RangeRecord {
  RangeKind kind = RangeKind::User;
  std::string name;
  int thread = -1;      // ThreadInfo::index of the thread that recorded it
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  bool async = false;   // Comm only: ran on a communication stream beside compute (false: blocked the host)
};

// The allocator's counters at one instant: at every allocator event (on the thread that made it) and at
// every task begin and end (on the worker), when profile_memory is on.
struct MemorySample {
  int64_t ts_ns = 0;
  int64_t allocated = 0;
  int64_t reserved = 0;
  std::array<int64_t, kNumMemoryCategories> by_category{};
};

// An allocation, free or retag, for memory analysis (who allocated what, when).
struct MemoryEvent {
  int64_t ts_ns = 0;
  MemoryEventKind kind = MemoryEventKind::Allocate;
  MemoryCategory category = MemoryCategory::Activation;
  int64_t nbytes = 0;
  int thread = -1;
  // The last Task this thread had enqueued before the event. An op allocates its outputs before it
  // enqueues its Task, so an output's allocation carries the seq of the Task before its op's.
  uint64_t after_seq = 0;
};

// Everything one session recorded, sorted: ops by seq, ranges by begin, memory by time.
struct ProfileData {
  ProfilerOptions options;
  int64_t start_ns = 0;
  int64_t stop_ns = 0;
  std::vector<ThreadInfo> threads;
  std::vector<OpRecord> ops;
  std::vector<RangeRecord> ranges;
  std::vector<int64_t> step_markers;   // step() instants, increasing
  std::vector<MemorySample> memory;    // profile_memory only
  std::vector<MemoryEvent> memory_events;
  MemoryStats memory_at_start, memory_at_stop;
};

}  // namespace dg::profiler
