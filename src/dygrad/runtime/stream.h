// A device's stream: Tasks run in enqueue order on one worker thread (the CPU's is thread 0 of the intra-op pool; a
// device's is its launcher). The host gets its outputs at once; sync points wait for producers. A kernel error is
// kept, poisons the failed Task's outputs, and is raised once at the next sync point. Each device has one stream
// with its own sequence numbers; a Task waits for another stream's event before it runs (Task::wait_event). See
// docs/stream.md, docs/devices.md and docs/async-errors.md.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dygrad/runtime/op_def.h"
#include "dygrad/core/device.h"
#include "dygrad/core/error.h"

namespace dg {

// Hooks the profiler installs (null when off: one branch per Task). Its op recording, at enqueue, is an op sink
// (runtime/op_sink.h): the stream tells the sinks each Task it numbers.
struct StreamObserver {
  virtual ~StreamObserver() = default;
  virtual void on_task_begin(const Task& task) = 0;         // the thread running the kernel
  virtual void on_task_end(const Task& task, bool failed) = 0;
  // The host thread blocks at a sync point (synchronize, wait_for) from begin to end, raising or not.
  virtual void on_sync_begin() {}
  virtual void on_sync_end() {}
  // The host waited at enqueue for the device to catch up (back-pressure): `reason` is "queue full",
  // "allocation window" or "run-ahead bound"; begin/end on profiler::now_ns()'s clock (steady_clock).
  virtual void on_backpressure(const char* reason, int64_t begin_ns, int64_t end_ns) {
    (void)reason, (void)begin_ns, (void)end_ns;
  }
};

class CachingAllocator;

// A data error a device's kernel found (an index out of range): it cannot throw, so it writes the device's error word,
// which the stream reads when the Task's device work has run (docs/stream.md, "Device completion").
struct DeviceFault {
  uint64_t seq = 0;  // the Task whose kernel wrote the word first
  ErrorKind kind = ErrorKind::Index;
  std::string message;  // what went wrong; the stream adds "[op] " and the call site
};

// A device whose kernels run after their launch returns (CUDA). Its stream's worker, the launcher, launches each
// Task's kernel and tells this; a second thread, the completer, waits here for each Task's device work in order and
// only then counts the Task completed, so `completed()`, events, stream-ordered reuse and the host's waits follow the
// device, not the launches (docs/stream.md, "Device completion"). The CPU and the test device have none: a Task has
// run when its kernel returns.
class DeviceCompletion {
 public:
  virtual ~DeviceCompletion() = default;
  // The launcher, after Task `task`'s kernel returned (its work queued on the device): marks where it ends.
  virtual void launched(const Task& task) = 0;
  // The completer: blocks until the device work of Task `seq` (launched) has run; true when the device's error word is
  // set then, with the fault it holds (the first since the word was last cleared; its Task is at most `seq`).
  virtual bool wait_completed(uint64_t seq, DeviceFault& fault) = 0;
  // The launcher, before its next launch after a fault was seen: clears the word in stream order. Kernels launched
  // while it was set did nothing (they check it first); those launched from here on run again.
  virtual void clear_fault() = 0;
};

class Stream {
 public:
  static Stream& cpu();
  // The stream of a device: the CPU's, or one a backend made (create); raises naming the device when it has none.
  static Stream& of(Device device);
  // By number (core/device.h, stream_id); null when that device has no stream.
  static Stream* by_id(int id) { return streams_[id].load(std::memory_order_acquire); }
  // A backend makes its device's stream once, with the allocator its Tasks' scratch comes from. Never destroyed.
  // `completion`: the device's (CUDA's), which lives for the process; null for a device whose kernels have run when
  // they return.
  static Stream& create(Device device, CachingAllocator& allocator, DeviceCompletion* completion = nullptr);
  // Events (core/device.h): whether Task event_seq(e) of stream event_stream(e) has run; a wait for it (raises
  // nothing).
  static bool event_done(uint64_t event) {
    return event == 0 || by_id(event_stream(event))->completed() >= event_seq(event);
  }
  static void wait_event(uint64_t event) {
    if (!event_done(event)) by_id(event_stream(event))->wait_until_run(event_seq(event));
  }
  // Waits for every stream; raises the first deferred error found (dygrad.synchronize()).
  static void synchronize_all();
  // Every stream (shutdown at exit).
  static void shutdown_all();
  Device device() const { return device_; }
  int id() const { return id_; }
  uint64_t event_of(uint64_t seq) const { return make_event(id_, seq); }
  // A device stream's worker can be held (tests: the launcher does not start Tasks while paused, so a race a
  // missing wait would lose shows every time). The CPU stream is never paused.
  void set_paused(bool paused);
  static constexpr size_t kCapacity = 1024;  // queued Tasks; enqueue blocks (sleeps) when full

  // Runs op on the operands (synchronize mode: inline, errors thrown here; async: built in its queue slot, or run
  // inline on the calling thread when it is tiny and nothing is queued, errors still deferred). Returns the Task's
  // sequence number. The one way in: ops/dispatch.cpp's enqueue, after the op sinks (runtime/op_sink.h).
  uint64_t submit(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Attrs& attrs,
                  const CallSite& site);
  // A Task without operands that runs a batch of sub-ops (dygrad.jit's replay and segment Tasks, jit/graph.h) after
  // another stream's event `wait` (0: none), which the caller folded from the sub-ops' operands with fold_wait. Its
  // kernel is the op's for this stream's device. The one way in: ops/dispatch.cpp's enqueue_batch.
  uint64_t submit_batch(const OpDef& op, const Attrs& attrs, const CallSite& site, uint64_t wait);
  // The event a Task of this stream waits for, given the one found so far (`wait`) and another operand's `event`: an
  // event of this stream or one that has run adds nothing; of two streams' events the host waits here for the
  // earlier found one (cross_stream_wait's rule, docs/devices.md).
  uint64_t fold_wait(uint64_t wait, uint64_t event) const;
  // Waits until every Task enqueued so far has run; raises a deferred error.
  void synchronize();
  // Waits until Task `seq` has run; raises a deferred error.
  void wait_for(uint64_t seq);
  // Waits until Task `seq` has run, raising nothing and reclaiming nothing (the allocator, before it returns
  // memory that queued Tasks still use; a host thread touching a reused buffer, docs/memory.md).
  void wait_until_run(uint64_t seq) {
    if (completed_.load(std::memory_order_acquire) < seq) wait_until_completed(seq);
  }
  uint64_t enqueued() const { return published_.load(std::memory_order_acquire); }
  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }
  // The message of the Task whose failure poisoned a buffer (for errors raised when reading it).
  std::string failure_message(uint64_t seq) const;
  // The same for a poison mark, an event of any stream (Storage::poisoned_by).
  static std::string failure_message_of(uint64_t event) {
    Stream* s = by_id(event_stream(event));
    return s ? s->failure_message(event_seq(event)) : "an earlier op failed";
  }
  void set_observer(StreamObserver* observer) { observer_.store(observer, std::memory_order_release); }
  // The in-flight allocation window: at each enqueue the host waits while it has allocated more than this
  // many bytes since the oldest Task still queued was enqueued (0: no limit, the default). It bounds how far ahead
  // the host runs, not memory: queued Tasks keep none alive since stream-ordered reuse (docs/memory.md,
  // "In-flight allocation window").
  static constexpr uint64_t kDefaultInflightLimit = 0;
  void set_inflight_allocation_limit(uint64_t bytes) { inflight_limit_.store(bytes, std::memory_order_relaxed); }
  uint64_t inflight_allocation_limit() const { return inflight_limit_.load(std::memory_order_relaxed); }
  // The run-ahead bound (runtime/run_ahead.h; docs/stream.md, "Run-ahead bound"): at each enqueue the host waits
  // while the estimated run time of the queued Tasks, the new one included, would exceed this many nanoseconds
  // (unless nothing else is queued), or a tenth of the work enqueued between the last two sync points when that is
  // smaller (at least run_ahead::kMinLimitNs). 0: no bound.
  void set_run_ahead_limit_ns(uint64_t ns) { run_ahead_limit_ns_.store(ns, std::memory_order_relaxed); }
  uint64_t run_ahead_limit_ns() const { return run_ahead_limit_ns_.load(std::memory_order_relaxed); }
  // The estimated run time of the Tasks queued now (not yet run).
  uint64_t queued_estimate_ns();
  // Since the last reset: the largest queued estimate an enqueue left behind while other Tasks were queued (at most
  // the bound while one is set), and how many enqueues waited for it.
  struct RunAheadStats {
    uint64_t max_queued_ns = 0;
    uint64_t waits = 0;
    uint64_t bound_ns = 0;  // the bound an enqueue now would have (the set one, or less after frequent syncs)
  };
  RunAheadStats run_ahead_stats();
  void reset_run_ahead_stats();
  // Nanoseconds the stream's worker has spent running Tasks (its busy time; Tasks run inline on a host thread are
  // not counted). Read by a timing mark (ops/timing.h) in stream order.
  uint64_t busy_ns() const { return busy_ns_.load(std::memory_order_acquire); }
  StreamObserver* observer() const { return observer_.load(std::memory_order_acquire); }
  // A thread outside the stream (the communication thread) hands over tensor references it has finished with:
  // the host drops them at its next enqueue or sync, as it drops the operands of Tasks that have run.
  void release_on_host(std::vector<Tensor>&& tensors);
  // Process exit (docs/stream.md, "Exit and fork"): runs every queued Task, then stops the worker, so no
  // dygrad thread runs while libraries are torn down. Tasks enqueued afterwards (another thread still
  // issuing ops) run on the calling thread, as in synchronize mode but with errors deferred. Idempotent;
  // the Python module calls it from an atexit hook. Never raises.
  void shutdown();
  bool is_shut_down() const { return shut_down_.load(std::memory_order_acquire); }

  ~Stream();

 private:
  struct Failure {
    uint64_t seq;
    ErrorKind kind;
    std::string message;  // "[op] what went wrong (issued at file:line)"
    uint64_t raised_after = UINT64_MAX;  // Tasks enqueued when it was raised at a sync point (none: not yet)
  };
  Stream(Device device, CachingAllocator& allocator, DeviceCompletion* completion = nullptr);
  static std::atomic<Stream*> streams_[kMaxStreams];
  // Cross-stream ordering at enqueue (only once a second device exists): the event this Task waits for, and for
  // operands of another device, the use noted on their storage.
  uint64_t cross_stream_wait(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs);
  void note_foreign_operands(const Task& task);
  // submit's rarer paths, kept out of its body (the host path's instructions, bench/enqueue_callgrind.sh): a copy
  // between devices' kernel; a Task of a device's stream or one that waits for another stream (true: submitted).
  [[gnu::noinline]] Kernel cross_device_kernel(const OpDef& op) const;
  [[gnu::noinline]] bool submit_across_streams(const OpDef& op, Kernel kernel, std::span<const Tensor> inputs,
                                               std::span<const Tensor> outputs, const Attrs& attrs,
                                               const CallSite& site, uint64_t& seq);
  [[gnu::always_inline]] inline uint64_t submit_to_ring(const OpDef& op, Kernel kernel, std::span<const Tensor> inputs,
                          std::span<const Tensor> outputs, const Attrs& attrs, const CallSite& site, uint64_t wait);
  ScratchArena* ring_arena(uint64_t slot);  // the ring slot's scratch arena
  void worker_loop();
  // A device with a DeviceCompletion (runtime/stream_device.cpp): the launcher runs each Task's kernel (a launch) in
  // order; the completer counts it completed when its device work has run, raising the device's faults as failures.
  void launcher_loop();
  void completer_loop();
  // A Task launched while the device's error word was set did nothing: its outputs as run_task leaves those of a Task
  // whose input is poisoned (kept when they existed before the failure, else poisoned with it).
  void skipped_after_fault(Task& task, uint64_t failed_seq);
  void stop_completer();
  bool run_task(Task& task);  // true when the kernel failed
  bool run_kernel(Task& task);  // the observer's begin and end around the kernel; errors recorded
  // fork(): the parent drains and holds the producer mutex across the fork; the child, which has no worker
  // thread, resets the ring's bookkeeping and starts a new worker (docs/stream.md, "Exit and fork").
  void before_fork();
  void after_fork_parent();
  void after_fork_child();
  // A device's stream across fork: drained and held by the parent as the CPU's; in the child it is left without its
  // launcher and refuses new work (Stream::of raises), as CUDA refuses a forked child.
  void before_fork_device();
  void after_fork_parent_device();
  void after_fork_child_device();
  void forget_parent_threads();  // the child's part both share
  void start_worker();
  // The error of Task `seq` if it failed, taken out of the pending slot (synchronize mode raises it on the
  // thread that issued it, not on whichever thread syncs first).
  bool take_failure(uint64_t seq, Failure& out);
  // A skipped Task left outputs unchanged: makes that a pending error unless the failure covers it.
  void note_skipped_update(const Task& task, uint64_t bad);
  void record_failure(Task& task, ErrorKind kind, const std::string& message);
  // Raises the pending error if its failed Task is at most `up_to` (a sync point raises the failures of
  // the Tasks it waited for, not of later ones that happened to run meanwhile).
  void raise_deferred_error(uint64_t up_to = UINT64_MAX);
  void wait_until_completed(uint64_t seq);
  // Inline execution of small Tasks on an idle stream (docs/stream.md, "Inline execution").
  static bool runs_inline(const Task& task);       // cheap enough by its cost model
  bool idle_for_inline_locked() const;             // the flag is on, no observer, nothing in flight
  uint64_t run_inline_locked(Task& task);          // runs it on this thread in stream order; its seq
  // Drops the operands of Tasks that have run, on the calling (host) thread; producer_mutex_ held.
  void reclaim_completed_locked();
  // Waits for queue space, reclaims finished slots and returns the index of the next free slot.
  uint64_t acquire_slot_locked();
  // The run-ahead bound for the Task built in slot `index`: its estimate joins the queued work, and the host waits
  // for the oldest queued Tasks while the total exceeds the bound.
  void bound_run_ahead_locked(uint64_t index, const Task& task);
  uint64_t run_ahead_bound_locked() const;  // the bound in force (0: none)
  // A wait for Task `seq` at enqueue (back-pressure, which the observer records).
  void wait_at_enqueue(const char* reason, uint64_t seq);
  // Numbers the Task built in slot `index` and hands it to the worker.
  uint64_t publish_locked(uint64_t index);
  // Synchronize mode: everything before, then `task` on this thread, its error raised here.
  uint64_t run_synchronized(Task& task);

  std::vector<Task> slots_;
  std::mutex handed_over_mutex_;
  std::vector<Tensor> handed_over_;  // release_on_host's references, dropped by reclaim_completed_locked
  std::atomic<bool> any_handed_over_{false};
  std::vector<uint64_t> alloc_marks_;  // per slot: the allocator's bytes_allocated_total() at its enqueue
  std::atomic<uint64_t> inflight_limit_{kDefaultInflightLimit};
  // The run-ahead bound: per slot, the estimated run time of the Tasks enqueued before it (a running total, guarded by
  // producer_mutex_) and its cost units (which the worker's measurement is recorded against).
  std::vector<uint64_t> estimate_marks_;
  std::vector<float> task_units_;
  uint64_t estimate_total_ = 0;
  uint64_t estimate_at_sync_ = 0;          // estimate_total_ at the last sync point (wait_for)
  uint64_t sync_window_ns_ = UINT64_MAX;   // the estimated work enqueued between the last two sync points
  std::atomic<uint64_t> run_ahead_limit_ns_;
  RunAheadStats run_ahead_stats_;  // guarded by producer_mutex_
  alignas(64) std::atomic<uint64_t> busy_ns_{0};  // written by the worker only
  std::mutex producer_mutex_;
  // Slots below this count have been cleared by the host. The worker never destroys operands: the host
  // does, when it next enqueues or syncs, so tensors and buffers are freed on the thread that made them
  // (no cross-thread frees in malloc or the allocator, no refcount traffic on the worker). docs/stream.md
  uint64_t reclaimed_ = 0;
  alignas(64) std::atomic<uint64_t> published_{0};  // Tasks enqueued
  alignas(64) std::atomic<uint64_t> completed_{0};  // Tasks run
  alignas(64) std::atomic<uint32_t> work_signal_{0};   // bumped on enqueue when the worker sleeps
  std::atomic<bool> worker_sleeping_{false};
  alignas(64) std::atomic<uint32_t> done_signal_{0};   // bumped by the worker when a waiter's target is met
  std::atomic<uint64_t> wait_target_{UINT64_MAX};      // smallest completion count a host thread waits for
  std::mutex waiter_mutex_;
  int waiting_hosts_ = 0;  // guarded by waiter_mutex_
  std::atomic<bool> stopping_{false};
  std::atomic<bool> shut_down_{false};
  std::atomic<StreamObserver*> observer_{nullptr};
  const Device device_;
  const int id_;
  CachingAllocator& allocator_;  // the device's: Tasks' scratch, the allocation window
  std::unique_ptr<unsigned char[]> ring_arenas_;  // kCapacity ScratchArenas, one per ring slot
  std::atomic<uint32_t> paused_{0};
  std::atomic<bool> forked_away_{false};  // a device's stream in a forked child (after_fork_child_device)

  mutable std::mutex failure_mutex_;
  std::vector<Failure> failures_;          // recent failures, for poisoned-buffer messages
  std::atomic<bool> has_pending_error_{false};
  Failure pending_error_{};                // the first failure not yet raised
  std::thread worker_;
  // A device with a DeviceCompletion (docs/stream.md, "Device completion"): launched_ counts the Tasks launched;
  // launch_ns_ is each slot's launch time (the completer's run-time estimate); the launcher clears the error word
  // before Task cleared_before_ when the completer asks.
  DeviceCompletion* const completion_;
  std::thread completer_;
  alignas(64) std::atomic<uint64_t> launched_{0};
  std::atomic<uint32_t> launch_signal_{0};
  std::vector<int64_t> launch_ns_;
  std::atomic<bool> clear_fault_requested_{false};
  std::atomic<uint64_t> cleared_before_{UINT64_MAX};
};

// How the host reads a device's tensor (Tensor::to_vector, item): a copy to the CPU, registered by ops/device.cpp.
using HostCopyFn = Tensor (*)(const Tensor&);
void set_host_copy(HostCopyFn f);
// Tests only (docs/devices.md, "A missed sync"): host reads stop waiting for another device's copy into the buffer
// they read, as a runtime that forgot that wait would; the test device then catches the read.
void set_host_waits_skipped(bool on);
bool host_waits_skipped();

}  // namespace dg
