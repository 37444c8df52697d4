// Stream implementation: a bounded single-consumer ring of Tasks. Producers take a mutex (uncontended on
// the hot path), publish with a release store, and wake the worker only when it sleeps. See docs/stream.md.
#include "dygrad/runtime/stream.h"
#include "dygrad/runtime/run_ahead.h"
#include "dygrad/runtime/context_flags.h"
#include "dygrad/runtime/poison.h"

#include "dygrad/runtime/allocator.h"

#include <cstring>
#include <new>
#include <type_traits>
#include <pthread.h>

#include <chrono>

#include "dygrad/core/shape.h"
#include "dygrad/runtime/context.h"
#include "dygrad/runtime/op_sink.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/spin.h"
#include "dygrad/runtime/thread_pool.h"

namespace dg {

namespace {
// The worker spins this long for the next Task before sleeping: the host enqueues small ops faster than
// a futex wake-up (several microseconds) would allow.
constexpr auto kWorkerSpin = std::chrono::microseconds(100);
constexpr size_t kKeptFailures = 64;
// A Task at most this cheap runs on the host when the stream is idle (docs/stream.md, "Inline execution"):
// 4096 flops and 2 KiB of operands take ~0.1-0.2 us, well under the ~0.5-1 us the host<->worker hand-off
// costs. A 64-element float32 exp (1280 flops, 512 bytes) is inside; a 1024-element add (12 KiB) is not.
constexpr double kInlineMaxFlops = 4096;
constexpr double kInlineMaxBytes = 2048;

std::string format_site(const CallSite& site) {
  if (!site.file) return "";
  std::string s = " (issued at ";
  s += site.file;
  s += ":" + std::to_string(site.line);
  if (site.function) {
    s += " in ";
    s += site.function;
  }
  return s + ")";
}
}  // namespace

std::atomic<Stream*> Stream::streams_[kMaxStreams] = {};

Stream& Stream::cpu() {
  // Never destroyed: Tensors in static objects outlive main.
  static Stream* stream = new Stream(Device::cpu(), CachingAllocator::cpu());
  return *stream;
}

Stream& Stream::of(Device device) {
  if (device.type == Device::Type::CPU) [[likely]] return cpu();
  Stream* s = device_index_valid(device) ? by_id(stream_id(device)) : nullptr;
  DG_CHECK(s != nullptr, Runtime, "[stream] device ", device.str(), " is not available (",
           device.type == Device::Type::Test ? "the test device is off: dygrad.testing.enable_test_device()"
                                             : "its backend is not built or the device does not exist", ")");
  DG_CHECK(!s->forked_away_.load(std::memory_order_relaxed), Runtime, "[stream] device ", device.str(), " cannot be "
           "used in a forked child process: its launcher thread does not survive fork() (nor does CUDA's). Use "
           "devices in the parent, or start the child with the 'spawn' method");
  return *s;
}

Stream& Stream::create(Device device, CachingAllocator& allocator, DeviceCompletion* completion) {
  DG_CHECK(device.type != Device::Type::CPU && device_index_valid(device), Runtime, "[stream] cannot create a stream "
           "for ", device.str());
  cpu();  // the CPU's stream sets the storage hooks and the fork handlers first
  if (Stream* s = by_id(stream_id(device))) return *s;
  return *new Stream(device, allocator, completion);
}

void Stream::synchronize_all() {
  for (int id = kMaxStreams - 1; id >= 1; --id)  // devices first: their copies may feed CPU Tasks
    if (Stream* s = by_id(id)) s->synchronize();
  cpu().synchronize();
}

void Stream::shutdown_all() {
  for (int id = kMaxStreams - 1; id >= 1; --id)
    if (Stream* s = by_id(id)) s->shutdown();
  cpu().shutdown();
}

ScratchArena* Stream::ring_arena(uint64_t slot) {
  auto base = reinterpret_cast<uintptr_t>(ring_arenas_.get());
  base = (base + alignof(ScratchArena) - 1) & ~(uintptr_t{alignof(ScratchArena)} - 1);
  return reinterpret_cast<ScratchArena*>(base + slot * sizeof(ScratchArena));
}

void Stream::set_paused(bool paused) {
  DG_CHECK(id_ != 0, Runtime, "[stream] the cpu stream cannot be paused");
  paused_.store(paused ? 1 : 0, std::memory_order_seq_cst);
  paused_.notify_all();
}

Stream::Stream(Device device, CachingAllocator& allocator, DeviceCompletion* completion)
    : slots_(kCapacity), alloc_marks_(kCapacity, 0), estimate_marks_(kCapacity, 0), task_units_(kCapacity, 0.0f),
      run_ahead_limit_ns_(run_ahead::kDefaultLimitNs), device_(device), id_(stream_id(device)), allocator_(allocator),
      ring_arenas_(new unsigned char[kCapacity * sizeof(ScratchArena) + alignof(ScratchArena)]),
      completion_(completion), launch_ns_(completion ? kCapacity : 0, 0) {
  ThreadPool::instance();  // the pool exists before the worker uses it
  streams_[id_].store(this, std::memory_order_release);
  if (id_ == 0) {
    // Stream-ordered reuse (docs/memory.md): a thread outside the stream that touches a reused buffer waits for
    // the Tasks that still use it.
    Storage::set_stream_hooks([](uint64_t e) { return Stream::event_done(e); }, [](uint64_t e) { Stream::wait_event(e); });
  }
  start_worker();
  // Registered after the pool's: prepare handlers run in reverse order (the stream drains before the pool
  // is locked), child handlers in order (the pool has helpers again before the worker starts). A device's stream
  // does not survive fork (as CUDA's does not): the child has no launcher thread.
  if (id_ == 0)
    pthread_atfork([] { Stream::cpu().before_fork(); }, [] { Stream::cpu().after_fork_parent(); },
                   [] { Stream::cpu().after_fork_child(); });
}

void Stream::start_worker() {
  stopping_.store(false, std::memory_order_seq_cst);
  worker_ = std::thread([this] {
    if (id_ != 0) Storage::set_thread_runs_device_kernels(true);  // the device's launcher
    Storage::set_thread_stream(id_);
    if (completion_) launcher_loop();
    else worker_loop();
  });
  if (completion_) completer_ = std::thread([this] { completer_loop(); });
}

// --- exit and fork (docs/stream.md, "Exit and fork") ------------------------------------------------------
void Stream::shutdown() {
  if (shut_down_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(producer_mutex_);
  if (shut_down_.load(std::memory_order_relaxed)) return;
  // Under the producer mutex nothing new is published: drain what is queued, then stop the worker. From
  // here on every Task runs inline on the thread that issues it (enqueue/submit check shut_down_).
  const uint64_t last = published_.load(std::memory_order_acquire);
  if (completed_.load(std::memory_order_acquire) < last) wait_until_completed(last);
  reclaim_completed_locked();
  shut_down_.store(true, std::memory_order_release);
  stopping_.store(true, std::memory_order_seq_cst);
  work_signal_.fetch_add(1, std::memory_order_seq_cst);
  work_signal_.notify_all();
  if (worker_.joinable()) worker_.join();
  stop_completer();
}

void Stream::before_fork() {
  // Devices first: a CPU Task may wait for a device's copy, so the devices' queues are empty before the CPU's drains
  // (a device Task waiting for a CPU Task still finds the CPU's worker running).
  for (int id = kMaxStreams - 1; id >= 1; --id)
    if (Stream* s = by_id(id)) s->before_fork_device();
  producer_mutex_.lock();  // no producer publishes across the fork
  const uint64_t last = published_.load(std::memory_order_acquire);
  if (completed_.load(std::memory_order_acquire) < last) wait_until_completed(last);  // the ring is empty
  reclaim_completed_locked();
  failure_mutex_.lock();
  ThreadPool::instance().before_fork();
}

void Stream::after_fork_parent() {
  ThreadPool::instance().after_fork_parent();
  failure_mutex_.unlock();
  producer_mutex_.unlock();
  for (int id = 1; id < kMaxStreams; ++id)
    if (Stream* s = by_id(id)) s->after_fork_parent_device();
}

void Stream::before_fork_device() {
  producer_mutex_.lock();
  const uint64_t last = published_.load(std::memory_order_acquire);
  // Its events all done (a launcher held by a test, Stream::set_paused, is not waited for: the fork would hang).
  if (completed_.load(std::memory_order_acquire) < last && !paused_.load(std::memory_order_acquire))
    wait_until_completed(last);
  reclaim_completed_locked();
  failure_mutex_.lock();
}

void Stream::after_fork_parent_device() {
  failure_mutex_.unlock();
  producer_mutex_.unlock();
}

void Stream::forget_parent_threads() {
  // Only the forking thread exists in the child. The worker's handle names a thread of the parent: it is leaked
  // unjoined, the mutexes (held by this thread, or by host threads that do not exist here) are made anew, and the
  // counters stay: the ring was drained at the fork, so published_ == completed_.
  new std::thread(std::move(worker_));
  worker_ = std::thread();
  if (completer_.joinable()) new std::thread(std::move(completer_));
  completer_ = std::thread();
  new (&producer_mutex_) std::mutex();
  new (&failure_mutex_) std::mutex();
  new (&waiter_mutex_) std::mutex();
  waiting_hosts_ = 0;
  wait_target_.store(UINT64_MAX);
  worker_sleeping_.store(false);
}

void Stream::after_fork_child_device() {
  // No launcher here: every event of the parent reads as done, and its tensors may still be dropped (their memory
  // goes back to the pool); new work is refused (Stream::of).
  forget_parent_threads();
  forked_away_.store(true);
}

void Stream::after_fork_child() {
  ThreadPool::instance().after_fork_child();
  forget_parent_threads();
  if (!shut_down_.load()) start_worker();
  for (int id = 1; id < kMaxStreams; ++id)
    if (Stream* s = by_id(id)) s->after_fork_child_device();
}

Stream::~Stream() {
  stopping_.store(true, std::memory_order_seq_cst);
  work_signal_.fetch_add(1, std::memory_order_seq_cst);
  work_signal_.notify_all();
  worker_.join();
  stop_completer();
}

void Stream::release_on_host(std::vector<Tensor>&& tensors) {
  if (tensors.empty()) return;
  std::lock_guard<std::mutex> lock(handed_over_mutex_);
  for (Tensor& t : tensors) handed_over_.push_back(std::move(t));
  tensors.clear();
  any_handed_over_.store(true, std::memory_order_release);
}

namespace {
// Drops a ring slot's operands (on the host). The slot's references are task references (core/ref.h): dropping the
// last one frees the tensor.
void clear_slot(Task& task) {
  for (Tensor& t : task.inputs) t.reset_task_ref();
  for (Tensor& t : task.outputs) t.reset_task_ref();
  task.inputs.clear();
  task.outputs.clear();
  task.attrs.reset();
  task.op = nullptr;
  task.kernel = nullptr;
}

// A Task's declared scratch (docs/ops.md, "Scratch space is declared"), taken on the host at enqueue from the
// caching allocator, stream-ordered, into `arena`, which Task::scratch points at (an empty arena when the op
// declares 0 bytes for these shapes: a take of nothing succeeds, of more raises). A ring Task's block is given back
// right after the Task is enqueued, with its number: as a temporary the program drops, its memory then serves
// later Tasks only (stream-ordered reuse, docs/memory.md), so the allocator counts it at the enqueue, as the meta
// evaluation does, whatever the worker's lag, and the worker never calls the allocator. Off the ring (synchronize
// mode, inline execution) the Task runs before its block is given back: live while it runs.
struct ScratchBlock {
  MemoryBlock block;
  size_t bytes = 0;
};
ScratchBlock take_scratch(CachingAllocator& allocator, Task& task, ScratchArena* arena) {
  ScratchBlock taken;
  taken.bytes = task.op->scratch(task);
  if (taken.bytes > 0) {
    try {
      taken.block = allocator.allocate(taken.bytes, MemoryCategory::Scratch);
    } catch (const Error& e) {
      throw Error(e.kind(), std::string("[") + task.op->name + "] its scratch of " + std::to_string(taken.bytes) +
                                " bytes: " + e.message());
    }
  }
  task.scratch = new (arena) ScratchArena(task.op->name, taken.block.ptr, taken.bytes);
  return taken;
}
// `seq`: the last Task that uses the block (0: none is queued, it has run).
void give_back_scratch(CachingAllocator& allocator, const ScratchBlock& taken, uint64_t seq) {
  if (taken.block.ptr) allocator.free(taken.block, taken.bytes, MemoryCategory::Scratch, seq);
}
// An arena on the stack (a Task off the ring); a ring slot's Task points at the stream's own (ring_arenas_).
struct alignas(ScratchArena) ArenaStorage {
  unsigned char bytes[sizeof(ScratchArena)];
};
static_assert(std::is_trivially_destructible_v<ScratchArena>, "arenas are rebuilt in place, never destroyed");
}  // namespace

void Stream::reclaim_completed_locked() {
  if (any_handed_over_.load(std::memory_order_acquire)) {
    std::vector<Tensor> dropped;
    {
      std::lock_guard<std::mutex> lock(handed_over_mutex_);
      dropped.swap(handed_over_);
      any_handed_over_.store(false, std::memory_order_relaxed);
    }
  }
  const uint64_t done = completed_.load(std::memory_order_acquire);
  for (; reclaimed_ < done; ++reclaimed_) clear_slot(slots_[reclaimed_ % kCapacity]);
}

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void Stream::wait_at_enqueue(const char* reason, uint64_t seq) {
  // Back-pressure: the profiler records it apart from the op's host span.
  StreamObserver* obs = observer();
  const int64_t begin = obs ? steady_ns() : 0;
  wait_until_completed(seq);
  if (obs) obs->on_backpressure(reason, begin, steady_ns());
}

uint64_t Stream::acquire_slot_locked() {
  const uint64_t index = published_.load(std::memory_order_relaxed);
  auto wait_noted = [this](const char* reason, uint64_t seq) { wait_at_enqueue(reason, seq); };
  if (index - completed_.load(std::memory_order_acquire) >= kCapacity) wait_noted("queue full", index + 1 - kCapacity);
  // The in-flight allocation window: find the oldest queued Task after which the host has allocated at most
  // `limit` bytes and wait for every Task before it. Only allocation-heavy programs that run ahead of the
  // device ever wait here; the device keeps up to `limit` bytes of work queued meanwhile.
  if (const uint64_t limit = inflight_limit_.load(std::memory_order_relaxed)) {
    const uint64_t done = completed_.load(std::memory_order_acquire);
    const uint64_t total = allocator_.bytes_allocated_total();
    if (done < index && total - alloc_marks_[done % kCapacity] > limit) {
      uint64_t oldest = done + 1;
      while (oldest < index && total - alloc_marks_[oldest % kCapacity] > limit) ++oldest;
      wait_noted("allocation window", oldest);
    }
  }
  reclaim_completed_locked();
  return index;
}

void Stream::bound_run_ahead_locked(uint64_t index, const Task& task) {
  // Tasks run inline (on an idle stream) never reach here, so the queued Tasks from completed_ on are all ring Tasks
  // whose marks were set below.
  const size_t slot = index % kCapacity;
  const float units = run_ahead::units_of(task.cost());
  task_units_[slot] = units;
  estimate_marks_[slot] = estimate_total_;
  estimate_total_ += run_ahead::estimate_ns(*task.op, units);
  const uint64_t limit = run_ahead_bound_locked();
  uint64_t done = completed_.load(std::memory_order_acquire);
  // A held launcher (tests, set_paused) runs nothing until released: the host does not wait for it.
  if (limit && done < index && estimate_total_ - estimate_marks_[done % kCapacity] > limit &&
      !paused_.load(std::memory_order_acquire)) {
    // The oldest queued Task after which the queued work, this Task's included, fits half the bound: wait for every
    // Task before it (for all of them when this Task alone exceeds that). Waking at half, the host then enqueues
    // half a bound's worth before it waits again: one wake-up per half bound of work, not one per Task (each wake
    // takes a core from the kernels' threads).
    uint64_t oldest = done + 1;
    while (oldest < index && estimate_total_ - estimate_marks_[oldest % kCapacity] > limit / 2) ++oldest;
    wait_at_enqueue("run-ahead bound", oldest);
    ++run_ahead_stats_.waits;
    done = completed_.load(std::memory_order_acquire);
  }
  if (done < index)
    run_ahead_stats_.max_queued_ns =
        std::max(run_ahead_stats_.max_queued_ns, estimate_total_ - estimate_marks_[done % kCapacity]);
}

uint64_t Stream::run_ahead_bound_locked() const {
  // The set bound, or a share of the work the program enqueues between its sync points when that is smaller (a loop
  // that reads its loss every 20 ms step gets a bound of 2 ms, not 50), never below kMinLimitNs.
  const uint64_t limit = run_ahead_limit_ns_.load(std::memory_order_relaxed);
  return limit ? std::min(limit, std::max(run_ahead::kMinLimitNs, sync_window_ns_ / run_ahead::kSyncWindowShare)) : 0;
}

uint64_t Stream::queued_estimate_ns() {
  std::lock_guard<std::mutex> lock(producer_mutex_);
  const uint64_t done = completed_.load(std::memory_order_acquire);
  return done < published_.load(std::memory_order_relaxed) ? estimate_total_ - estimate_marks_[done % kCapacity] : 0;
}

Stream::RunAheadStats Stream::run_ahead_stats() {
  std::lock_guard<std::mutex> lock(producer_mutex_);
  RunAheadStats stats = run_ahead_stats_;
  stats.bound_ns = run_ahead_bound_locked();
  return stats;
}

void Stream::reset_run_ahead_stats() {
  std::lock_guard<std::mutex> lock(producer_mutex_);
  run_ahead_stats_ = RunAheadStats{};
}

uint64_t Stream::publish_locked(uint64_t index) {
  Task& task = slots_[index % kCapacity];
  const uint64_t seq = index + 1;
  task.seq = seq;
  task.stream = static_cast<uint8_t>(id_);
  alloc_marks_[index % kCapacity] = allocator_.bytes_allocated_total();
  if (cpu_only()) [[likely]] {
    for (Tensor& out : task.outputs) out.storage().set_last_write_seq(seq);
  } else {
    for (Tensor& out : task.outputs)
      if (out.device() == device_) out.storage().set_last_write_seq(seq);
    note_foreign_operands(task);
  }
  Storage::note_tasks_enqueued(id_, seq);
  if (op_sinks::engaged()) op_sinks::on_enqueued(task);
  published_.store(seq, std::memory_order_seq_cst);
  if (worker_sleeping_.load(std::memory_order_seq_cst)) {
    work_signal_.fetch_add(1, std::memory_order_seq_cst);
    work_signal_.notify_one();
  }
  return seq;
}

namespace {
void check_attrs(const OpDef& op, const Attrs& attrs) {
  if (attrs.type() && op.attrs_type && std::strcmp(attrs.type()->name, op.attrs_type->name) == 0) return;
  fail(ErrorKind::Runtime, "[", op.name, "] internal error: the op's Tasks carry ",
       op.attrs_type ? op.attrs_type->name : "no attributes", ", this one ", attrs.type() ? attrs.type()->name : "none");
}
// The aliasing trait: each output the op declares an alias is that input, the same tensor (docs/ops.md).
void check_aliases(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  DG_CHECK(!outputs.empty(), Runtime, "[", op.name, "] internal error: an op updating inputs in place has no output");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const int a = op.output_alias(i, outputs.size());
    DG_CHECK(a < 0 || (static_cast<size_t>(a) < inputs.size() && inputs[static_cast<size_t>(a)].same(outputs[i])),
             Runtime, "[", op.name, "] internal error: output ", i, " must be input ", a, ", the same tensor");
  }
}

// A Task whose operands are borrowed (Tensor::borrow) from spans the caller holds for the whole call;
// the borrow ends when it goes out of scope, whatever the kernel did.
// Fills an empty Task, each operand held as `hold` makes it (a borrow, or a ring slot's task reference).
template <typename Hold>
[[gnu::always_inline]] inline void fill_task(Task& task, const OpDef& op, Kernel kernel, std::span<const Tensor> inputs,
               std::span<const Tensor> outputs, const Attrs& attrs, const CallSite& site, Hold hold) {
  task.op = &op;
  task.kernel = kernel;
  for (const Tensor& t : inputs) task.inputs.push_back(hold(t));
  for (const Tensor& t : outputs) task.outputs.push_back(hold(t));
  task.attrs = attrs;
  task.site = site;
}

struct BorrowedTask {
  Task task;
  [[gnu::always_inline]] BorrowedTask(const OpDef& op, Kernel kernel, std::span<const Tensor> inputs,
                                      std::span<const Tensor> outputs, const Attrs& attrs, const CallSite& site) {
    fill_task(task, op, kernel, inputs, outputs, attrs, site, [](const Tensor& t) { return Tensor::borrow(t); });
  }
  [[gnu::always_inline]] ~BorrowedTask() {
    for (Tensor& t : task.inputs) t.forget_borrowed();
    for (Tensor& t : task.outputs) t.forget_borrowed();
  }
  BorrowedTask(const BorrowedTask&) = delete;
  BorrowedTask& operator=(const BorrowedTask&) = delete;
};
}  // namespace

bool Stream::runs_inline(const Task& task) {
  if (task.op->flags & kOpNeverInline) return false;
  const OpCost cost = task.cost();
  return cost.flops <= kInlineMaxFlops && cost.bytes <= kInlineMaxBytes;
}

bool Stream::idle_for_inline_locked() const {
  // The observer is off: a profile then shows the stream's true asynchronous behaviour. Every published
  // Task has completed (acquire: its writes are visible here), and while the producer mutex is held nothing
  // new can be published, so the worker stays idle until this Task has run.
  return detail::inline_small_ops_enabled_inline() && observer() == nullptr &&
         completed_.load(std::memory_order_acquire) == published_.load(std::memory_order_relaxed);
}

uint64_t Stream::run_inline_locked(Task& task) {
  reclaim_completed_locked();  // as an enqueue does: drops the operands of Tasks that have run
  const uint64_t seq = published_.load(std::memory_order_relaxed) + 1;
  task.seq = seq;
  task.stream = static_cast<uint8_t>(id_);
  for (Tensor& out : task.outputs) out.storage().set_last_write_seq(seq);
  Storage::note_tasks_enqueued(id_, seq);
  if (op_sinks::engaged()) op_sinks::on_enqueued(task);  // synchronize mode with a profiler
  if (id_ != 0) [[unlikely]] {  // a device's stream after shutdown: this thread stands in for its launcher
    Storage::set_thread_runs_device_kernels(true);
    Storage::set_thread_stream(id_);
    run_task(task);
    Storage::set_thread_runs_device_kernels(false);
    Storage::set_thread_stream(-1);
  } else {
    run_task(task);  // a kernel error is recorded (pending), exactly as on the worker
  }
  // completed_ moves before published_: the worker, which may still be spinning after the last queued Task,
  // runs a slot only when published_ passes completed_ and rechecks completed_ when it does, so it never
  // takes this Task for queued work (its ring slot is empty). The worker is not woken: nothing is queued.
  // completed_ is seq_cst against wait_target_ below (the waiters' protocol, docs/stream.md).
  completed_.store(seq, std::memory_order_seq_cst);
  published_.store(seq, std::memory_order_release);
  reclaimed_ = seq;
  if (seq >= wait_target_.load(std::memory_order_seq_cst)) {  // another host thread may wait for it
    done_signal_.fetch_add(1, std::memory_order_seq_cst);
    done_signal_.notify_all();
  }
  return seq;
}

namespace {
// An output that is a view with a size > 1 dimension of stride 0 (expand, broadcast_to): several of its
// elements are one memory location, so an in-place write into it is ill-defined. torch's
// has_internal_overlap (the YES case) and its error.
void check_no_internal_overlap(const OpDef& op, std::span<const Tensor> outputs) {
  for (const Tensor& out : outputs)
    DG_CHECK(!out.is_view() || !has_internal_overlap(out.shape(), out.strides()), Runtime, "[", op.name,
             "] unsupported operation: more than one element of the written-to tensor (shape ", out.shape(),
             ", strides ", out.strides(), ") refers to a single memory location. Please clone() the tensor "
             "before performing the operation.");
}
}  // namespace

uint64_t Stream::run_synchronized(Task& task) {
  // Debug mode: earlier async work first, then this Task inline, its error raised right here, on this thread:
  // another host thread's failure stays pending for that thread's next sync point.
  synchronize();
  Failure failure;
  bool failed = false;
  {
    std::lock_guard<std::mutex> lock(producer_mutex_);
    run_inline_locked(task);
    failed = take_failure(task.seq, failure);
  }
  if (failed) throw Error(failure.kind, failure.message);
  // Skipped (an input was poisoned): the skip's error, if it made one pending, is raised here too.
  if (has_pending_error_.load(std::memory_order_acquire)) raise_deferred_error();
  return task.seq;
}

[[gnu::flatten]] uint64_t Stream::submit(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                        const Attrs& attrs, const CallSite& site) {
  // Checked here, on the calling thread, so a mistake raises where the op is issued (docs/ops.md).
  const Kernel kernel = (op.flags & kOpCrossDevice) ? cross_device_kernel(op) : resolve_kernel(op, inputs, outputs);
  if (attrs.type() != op.attrs_type) [[unlikely]] check_attrs(op, attrs);
  if (op.alias_of) [[unlikely]] check_aliases(op, inputs, outputs);
  // Nothing depends on a Task without outputs: only its declared side effect keeps it (docs/ops.md).
  DG_CHECK(!outputs.empty() || (op.flags & kOpSideEffect), Runtime, "[", op.name, "] internal error: a Task with no "
           "outputs must be declared kOpSideEffect");
  check_no_internal_overlap(op, outputs);
  // Once a second device exists: the event of another stream this Task must wait for (docs/devices.md). A device's
  // stream in synchronize mode, or a Task that waits for another stream, goes through the ring as always (a
  // device's kernels run on its launcher) and the host waits for it here, raising its error here.
  if (!cpu_only()) [[unlikely]] {
    uint64_t seq = 0;
    if (submit_across_streams(op, kernel, inputs, outputs, attrs, site, seq)) return seq;
  }
  // Off the ring (synchronize mode, inline execution, after shutdown) the Task is built on the host's stack and
  // borrows its operands from the caller, whose spans outlive the call: no refcount traffic (docs/stream.md,
  // "Inline execution").
  if (synchronize_enabled()) [[unlikely]] {
    BorrowedTask borrowed(op, kernel, inputs, outputs, attrs, site);
    if (!op.scratch) return run_synchronized(borrowed.task);
    ArenaStorage arena;
    struct GiveBack {  // after the Task ran, also when its error is raised here
      ScratchBlock taken;
      CachingAllocator& allocator;
      ~GiveBack() { give_back_scratch(allocator, taken, 0); }
    } scratch{take_scratch(allocator_, borrowed.task, reinterpret_cast<ScratchArena*>(&arena)), allocator_};
    return run_synchronized(borrowed.task);
  }
  return submit_to_ring(op, kernel, inputs, outputs, attrs, site, 0);
}

Kernel Stream::cross_device_kernel(const OpDef& op) const {
  const Kernel kernel = op.kernel(device_.type);
  if (!kernel) raise_no_kernel(op, device_);
  return kernel;
}

bool Stream::submit_across_streams(const OpDef& op, Kernel kernel, std::span<const Tensor> inputs,
                                   std::span<const Tensor> outputs, const Attrs& attrs, const CallSite& site,
                                   uint64_t& seq) {
  const uint64_t wait = cross_stream_wait(op, inputs, outputs);
  if (id_ == 0 && wait == 0) return false;  // the CPU's own path (inline execution, synchronize mode)
  seq = submit_to_ring(op, kernel, inputs, outputs, attrs, site, wait);
  if (synchronize_enabled()) wait_for(seq);
  return true;
}

uint64_t Stream::submit_to_ring(const OpDef& op, Kernel kernel, std::span<const Tensor> inputs,
                                std::span<const Tensor> outputs, const Attrs& attrs, const CallSite& site,
                                uint64_t wait) {
  std::lock_guard<std::mutex> lock(producer_mutex_);
  // Inline execution is the CPU's (a device's kernels run on its launcher, never on the host).
  if ((id_ == 0 && wait == 0 && idle_for_inline_locked()) || shut_down_.load(std::memory_order_acquire)) [[unlikely]] {
    BorrowedTask borrowed(op, kernel, inputs, outputs, attrs, site);
    if (runs_inline(borrowed.task) || shut_down_.load(std::memory_order_relaxed)) {
      if (wait) wait_event(wait);  // after shutdown: the other stream runs its Tasks inline too
      if (!op.scratch) return run_inline_locked(borrowed.task);
      ArenaStorage arena;
      const ScratchBlock taken = take_scratch(allocator_, borrowed.task, reinterpret_cast<ScratchArena*>(&arena));
      if (wait) wait_event(wait);  // after shutdown
      const uint64_t seq = run_inline_locked(borrowed.task);  // records a kernel error, never throws one
      give_back_scratch(allocator_, taken, 0);
      return seq;
    }
  }
  // In a ring slot the Task holds task references (core/ref.h).
  const uint64_t index = acquire_slot_locked();
  Task& task = slots_[index % kCapacity];
  fill_task(task, op, kernel, inputs, outputs, attrs, site, [](const Tensor& t) { return Tensor::task_ref(t); });
  task.wait_event = wait;
  bound_run_ahead_locked(index, task);
  if (!op.scratch) [[likely]] {
    task.scratch = nullptr;
    return publish_locked(index);
  }
  ScratchBlock taken;
  try {
    taken = take_scratch(allocator_, task, ring_arena(index % kCapacity));
  } catch (...) {
    clear_slot(task);  // never published: the slot stays free
    throw;
  }
  const uint64_t seq = publish_locked(index);
  give_back_scratch(allocator_, taken, seq);  // the worker may be running it already: only the host's copy is read
  return seq;
}

uint64_t Stream::cross_stream_wait(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  // The events to wait for: for an operand of this stream's device, a pending use by another stream's Task (a copy
  // reading it, or writing it); for an operand of another device (only a kOpCrossDevice op has one), its last
  // writer, and for an output, also its pending foreign use. One event is kept per Task; when events of two other
  // streams are due, the host waits for the earlier-found ones here (rare: three devices meet in one Task).
  uint64_t wait = 0;
  auto need = [&](uint64_t event) { wait = fold_wait(wait, event); };
  auto visit = [&](const Tensor& t, bool written) {
    if (!t.defined()) return;
    const Storage& st = t.storage();
    need(written ? st.foreign_use() : st.foreign_write());  // a write waits for every foreign use, a read for writes
    if (t.device() != device_) {
      DG_CHECK(op.flags & kOpCrossDevice, Runtime, "[", op.name, "] expected all tensors to be on the same device, "
               "but found ", device_.str(), " and ", t.device().str());
      need(st.last_write_event());
    }
  };
  for (const Tensor& t : inputs) visit(t, false);
  for (const Tensor& t : outputs) visit(t, true);
  return wait;
}

uint64_t Stream::fold_wait(uint64_t wait, uint64_t event) const {
  if (event == 0 || event_stream(event) == id_ || event_done(event)) return wait;
  if (wait != 0 && event_stream(wait) != event_stream(event)) wait_event(wait);
  else if (wait != 0 && event_seq(wait) > event_seq(event)) return wait;
  return event;
}

uint64_t Stream::submit_batch(const OpDef& op, const Attrs& attrs, const CallSite& site, uint64_t wait) {
  // The CPU's batch that waits for nothing takes submit's own path (inline execution, synchronize mode).
  if (id_ == 0 && wait == 0) return submit(op, {}, {}, attrs, site);
  const Kernel kernel = cross_device_kernel(op);
  if (attrs.type() != op.attrs_type) [[unlikely]] check_attrs(op, attrs);
  const uint64_t seq = submit_to_ring(op, kernel, {}, {}, attrs, site, wait);
  if (synchronize_enabled()) wait_for(seq);
  return seq;
}

void Stream::note_foreign_operands(const Task& task) {
  const uint64_t event = event_of(task.seq);
  for (const Tensor& t : task.inputs)
    if (t.defined() && t.device() != device_) t.storage().note_foreign_use(event, false);
  for (const Tensor& t : task.outputs)
    if (t.defined() && t.device() != device_) t.storage().note_foreign_use(event, true);
}

void Stream::worker_loop() {
  // The spin deadline starts when the worker runs out of queued work, not when inline Tasks (run by the
  // host) move the counters: a host running small ops inline lets the worker go to sleep after kWorkerSpin
  // instead of keeping it polling the counters it writes.
  bool ran_since_spin = true;
  // Whether the pool's helpers were told this thread has nothing queued (ThreadPool::set_owner_idle; the pool starts
  // so): they yield their cores while it is.
  bool marked_idle = true;
  auto spin_until = std::chrono::steady_clock::time_point{};
  for (;;) {
    // Inline Tasks (synchronize mode, small ops) advance both counters from the host: reload them.
    uint64_t done = completed_.load(std::memory_order_seq_cst);
    if (published_.load(std::memory_order_seq_cst) <= done) {
      if (ran_since_spin) {
        spin_until = std::chrono::steady_clock::now() + kWorkerSpin;
        ran_since_spin = false;
      }
      if (!marked_idle) ThreadPool::instance().set_owner_idle(marked_idle = true);
      int polls = 0;
      while (published_.load(std::memory_order_acquire) <= done) {
        if (stopping_.load(std::memory_order_acquire)) return;
        cpu_relax();
        if (++polls % 64 != 0) continue;
        // Give the core to a thread waiting for one (docs/threading.md, "Who spins, who sleeps").
        std::this_thread::yield();
        if (std::chrono::steady_clock::now() > spin_until) {
          uint32_t signal = work_signal_.load(std::memory_order_seq_cst);
          worker_sleeping_.store(true, std::memory_order_seq_cst);
          if (published_.load(std::memory_order_seq_cst) <= done && !stopping_.load()) work_signal_.wait(signal);
          worker_sleeping_.store(false, std::memory_order_seq_cst);
          spin_until = std::chrono::steady_clock::now() + kWorkerSpin;
        }
      }
      continue;  // `done` may be stale: inline Tasks may have run meanwhile
    }
    // An inline Task advanced both counters: there is nothing queued to run.
    if (completed_.load(std::memory_order_acquire) != done) continue;
    if (paused_.load(std::memory_order_acquire)) [[unlikely]] {  // tests hold a device's launcher
      paused_.wait(1, std::memory_order_acquire);
      continue;
    }
    if (marked_idle) ThreadPool::instance().set_owner_idle(marked_idle = false);
    // Each Task timed: its op's measured rate (the run-ahead bound's estimates) and the worker's busy time.
    Task& task = slots_[done % kCapacity];
    const int64_t begin = steady_ns();
    run_task(task);  // the host reclaims the slot's operands later
    const uint64_t took = static_cast<uint64_t>(steady_ns() - begin);
    run_ahead::observe(*task.op, task_units_[done % kCapacity], took);
    busy_ns_.store(busy_ns_.load(std::memory_order_relaxed) + took, std::memory_order_release);
    ran_since_spin = true;
    completed_.store(done + 1, std::memory_order_seq_cst);
    if (done + 1 >= wait_target_.load(std::memory_order_seq_cst)) {
      done_signal_.fetch_add(1, std::memory_order_seq_cst);
      done_signal_.notify_all();
    }
  }
}

namespace {
[[gnu::noinline]] void wait_event_out_of_line(uint64_t event) { Stream::wait_event(event); }
}  // namespace

bool Stream::run_task(Task& task) {
  // Another stream's event first (cudaStreamWaitEvent): the copy that feeds this Task, or the one still reading a
  // buffer it overwrites. It was enqueued before this Task, so the waits never form a cycle.
  if (task.wait_event) [[unlikely]] wait_event_out_of_line(task.wait_event);
  // A Task that reads a poisoned buffer does not run (docs/async-errors.md, "The poisoned-input rule"): it
  // writes nothing. An output whose buffer existed before the failed Task was enqueued (parameters,
  // gradients being accumulated, optimizer states, a copy_ target) keeps its values and stays readable, so
  // a failed batch leaves the model as it was. Other outputs are poisoned: fresh ones, and buffers made
  // after the failure (temporaries of the failed computation, such as buf * momentum before its add_), so
  // nothing downstream uses them.
  for (const Tensor& in : task.inputs) {
    if (uint64_t bad = in.storage().poisoned_by()) {
      // Poison marks are events (the CPU's are its sequence numbers); birth is compared on this stream's numbers, and
      // a failure on another stream (a copy that fed this one) counts as before every buffer here.
      const uint64_t bad_here = event_stream(bad) == id_ ? event_seq(bad) : 0;
      bool kept = false;
      for (Tensor& out : task.outputs) {
        if (out.storage().poisoned_by()) continue;  // keeps the failure it names
        // A buffer of another device (a copy's destination) counts its birth on its own stream: born after.
        if (out.device() == device_ && out.storage().birth_seq() < bad_here) kept = true;
        else out.storage().poison(bad);
      }
      if (kept) note_skipped_update(task, bad_here);
      return false;
    }
  }
  return run_kernel(task);
}

bool Stream::run_kernel(Task& task) {
  StreamObserver* obs = observer();
  if (obs) obs->on_task_begin(task);
  bool failed = false;
  try {
    task.kernel(task);
  } catch (const Error& e) {
    failed = true;
    record_failure(task, e.kind(), e.message());
  } catch (const std::exception& e) {
    failed = true;
    record_failure(task, ErrorKind::Runtime, std::string("[") + task.op->name + "] " + e.what());
  }
  if (!failed) clear_poison_of_overwritten(task);  // runtime/poison.h
  if (obs) obs->on_task_end(task, failed);
  return failed;
}

void Stream::note_skipped_update(const Task& task, uint64_t bad) {
  // Never silent, never twice for one mistake: a Task issued before the failure was raised is covered by
  // that error (still pending, or raised meanwhile); one issued after it (the program went on using the
  // failed op's results) makes a new pending error, unless one is pending already.
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (has_pending_error_.load(std::memory_order_relaxed)) return;
  std::string original = "an earlier op failed (task " + std::to_string(bad) + ")";
  for (const Failure& f : failures_) {
    if (f.seq != bad) continue;
    if (task.seq <= f.raised_after) return;  // issued before the failure was raised: covered by it
    original = f.message;
  }
  pending_error_ = Failure{bad, ErrorKind::Runtime,
                           std::string("[") + task.op->name + "] skipped, its outputs left unchanged: an input was "
                           "produced after a failed op: " + original + format_site(task.site)};
  has_pending_error_.store(true, std::memory_order_release);
}

bool Stream::take_failure(uint64_t seq, Failure& out) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  for (Failure& f : failures_) {
    if (f.seq != seq) continue;
    f.raised_after = published_.load(std::memory_order_acquire);
    out = f;
    if (has_pending_error_.load(std::memory_order_relaxed) && pending_error_.seq == seq)
      has_pending_error_.store(false, std::memory_order_release);
    return true;
  }
  return false;
}

void Stream::record_failure(Task& task, ErrorKind kind, const std::string& message) {
  for (Tensor& out : task.outputs) out.storage().poison(event_of(task.seq));
  Failure f{task.seq, kind, message + format_site(task.site)};
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (failures_.size() >= kKeptFailures) failures_.erase(failures_.begin());
  failures_.push_back(f);
  if (!has_pending_error_.load(std::memory_order_relaxed)) {
    pending_error_ = f;
    has_pending_error_.store(true, std::memory_order_release);
  }
}

std::string Stream::failure_message(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  for (const Failure& f : failures_)
    if (f.seq == seq) return f.message;
  return "an earlier op failed (task " + std::to_string(seq) + ")";
}

void Stream::raise_deferred_error(uint64_t up_to) {
  Failure f;
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (!has_pending_error_.load(std::memory_order_relaxed) || pending_error_.seq > up_to) return;
    f = pending_error_;
    has_pending_error_.store(false, std::memory_order_release);
    // Tasks issued from here on were issued knowing of this failure (note_skipped_update).
    const uint64_t issued = published_.load(std::memory_order_acquire);
    for (Failure& kept : failures_)
      if (kept.seq == f.seq && kept.raised_after == UINT64_MAX) kept.raised_after = issued;
  }
  throw Error(f.kind, f.message);
}

void Stream::wait_until_completed(uint64_t seq) {
  // The host never spins: it sleeps on done_signal_ until the worker reaches the smallest target any
  // waiter asked for. Waiters that remain after an earlier one leaves get extra wake-ups, never a lost one.
  {
    std::lock_guard<std::mutex> lock(waiter_mutex_);
    ++waiting_hosts_;
    if (seq < wait_target_.load(std::memory_order_relaxed)) wait_target_.store(seq, std::memory_order_seq_cst);
  }
  for (;;) {
    uint32_t signal = done_signal_.load(std::memory_order_seq_cst);
    if (completed_.load(std::memory_order_seq_cst) >= seq) break;
    done_signal_.wait(signal, std::memory_order_seq_cst);
  }
  std::lock_guard<std::mutex> lock(waiter_mutex_);
  if (--waiting_hosts_ == 0) wait_target_.store(UINT64_MAX, std::memory_order_seq_cst);
}

void Stream::wait_for(uint64_t seq) {
  // The profiler sees every sync point (a host stall inside a training step is one of its findings).
  struct SyncNotice {
    StreamObserver* observer;
    explicit SyncNotice(StreamObserver* o) : observer(o) {
      if (observer) observer->on_sync_begin();
    }
    ~SyncNotice() {
      if (observer) observer->on_sync_end();
    }
  } notice(observer());
  if (seq > 0 && completed_.load(std::memory_order_acquire) < seq) wait_until_completed(seq);
  {
    std::lock_guard<std::mutex> lock(producer_mutex_);
    reclaim_completed_locked();
    if (seq > 0) {  // a sync point: the work enqueued since the last one sizes the run-ahead bound
      if (estimate_total_ > estimate_at_sync_) sync_window_ns_ = estimate_total_ - estimate_at_sync_;
      estimate_at_sync_ = estimate_total_;
    }
  }
  if (has_pending_error_.load(std::memory_order_acquire)) raise_deferred_error(seq);
}

void Stream::synchronize() { wait_for(published_.load(std::memory_order_acquire)); }

}  // namespace dg
