// Process groups, the two stream Tasks of a collective, the communication thread and the single-process group
// (distributed/comm.h; docs/distributed.md). The MPI group is in distributed/mpi.cpp.
#include "dygrad/distributed/comm.h"

#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "dygrad/core/error.h"
#include "dygrad/core/storage_hooks.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/profiler/profiler.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/stream.h"

namespace dg::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "SUM";
    case ReduceOp::Avg: return "AVG";
    case ReduceOp::Product: return "PRODUCT";
    case ReduceOp::Min: return "MIN";
    case ReduceOp::Max: return "MAX";
  }
  return "?";
}

const char* comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::AllReduce: return "all_reduce";
    case CommKind::Broadcast: return "broadcast";
    case CommKind::AllGather: return "all_gather_into_tensor";
    case CommKind::ReduceScatter: return "reduce_scatter_tensor";
    case CommKind::Reduce: return "reduce";
    case CommKind::Barrier: return "barrier";
    case CommKind::Send: return "send";
    case CommKind::Recv: return "recv";
  }
  return "?";
}

// --- Work ---------------------------------------------------------------------------------------------------------
namespace {
std::string comm_label(const Work& w);
std::atomic<uint64_t> stat_operations{0};
std::atomic<int64_t> stat_comm_ns{0}, stat_exposed_ns{0};
// Threads blocked in Work::wait_here (the stream worker in comm_wait, a host in wait()): while one is, nothing else
// of this process needs a core, so the communication thread polls without sleeping.
std::atomic<int> blocked_waiters{0};
}  // namespace

std::string Work::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

// The profiler's communication track: each operation from comm_start to its completion, beside compute (async;
// what compute did not hide is the step breakdown's exposed communication). Recorded before the Work completes,
// so a comm_wait (and the sync after it) never returns before its range exists.
void record_completion(const Work& w) {
  const int64_t end = profiler::now_ns();
  profiler::record_comm(comm_label(w), w.started_ns, end, /*async=*/true);
  ++stat_operations;
  stat_comm_ns += end - w.started_ns;
}

void Work::finish(int source) {
  record_completion(*this);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    source_ = source;
    state_.store(kDone, std::memory_order_release);
  }
  cv_.notify_all();
}

void Work::fail(std::string message) {
  if (started_ns) record_completion(*this);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(message);
    state_.store(kFailed, std::memory_order_release);
  }
  cv_.notify_all();
}

double Work::seconds_in_flight() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

namespace {

// What the two stream Tasks carry: a description of the operation, a value (equality, hashing, printing); each run
// of comm_start makes the execution's Work from it and the Task's operands (Work's comment, comm.h). comm_start's
// inputs are the pieces, then the input, then the output when it is another buffer than the input.
struct CommAttrs {
  static constexpr const char* kName = "CommAttrs";
  std::shared_ptr<ProcessGroup> group;  // by identity
  CommKind kind = CommKind::AllReduce;
  ReduceOp op = ReduceOp::Sum;
  int32_t root = 0, peer = -1, tag = 0;
  int32_t pieces = 0;  // leading inputs of comm_start that are all_reduce_gathered's pieces
  bool has_input = false, has_output = false, output_is_input = false;
  bool check = false;  // checked across ranks before it starts
  uint64_t key = 0;  // the launch: comm_wait finds the execution comm_start registered under it
  DG_ATTRS_FIELDS(group, kind, op, root, peer, tag, pieces, has_input, has_output, output_is_input, check, key);
};

CommAttrs describe(const Work& w) {
  CommAttrs a;
  a.group = w.group;
  a.kind = w.kind;
  a.op = w.op;
  a.root = w.root, a.peer = w.peer, a.tag = w.tag;
  a.pieces = w.piece_count;
  a.has_input = w.input.defined();
  a.has_output = w.output.defined();
  a.output_is_input = a.has_input && a.has_output && w.output.shares_storage(w.input);
  a.check = w.check;
  a.key = w.key;
  return a;
}

// A re-run of a recorded comm_start: the execution's Work from the description and the Task's operands.
std::shared_ptr<Work> work_from_task(const CommAttrs& a, const Task& task) {
  auto w = std::make_shared<Work>(a.kind, a.group);
  w->op = a.op;
  w->root = a.root, w->peer = a.peer, w->tag = a.tag;
  w->check = a.check;
  w->key = a.key;
  size_t at = 0;
  for (; at < static_cast<size_t>(a.pieces); ++at) w->pieces.push_back(task.inputs[at]);
  w->piece_count = a.pieces;
  if (a.has_input) w->input = task.inputs[at++];
  if (a.output_is_input) w->output = w->input;
  else if (a.has_output) w->output = task.inputs[at++];
  DG_CHECK(at == task.inputs.size(), Runtime, "[comm_start] ", task.inputs.size(), " operands for ", at);
  return w;
}

OpCost comm_cost(const Task& task) {
  double bytes = 0;
  for (const Tensor& t : task.inputs) bytes += static_cast<double>(t.numel() * static_cast<int64_t>(t.itemsize()));
  for (const Tensor& t : task.outputs) bytes += static_cast<double>(t.numel() * static_cast<int64_t>(t.itemsize()));
  return {0, bytes};
}

// The result slot comm_start hands to the communication thread (its last input, where the output is a buffer of its
// own): written there, not read (an all-gather into a fresh buffer).
int comm_result_slot(const Attrs& attrs, size_t num_inputs) {
  const CommAttrs& a = attrs.get<CommAttrs>();
  return a.has_output && !a.output_is_input && num_inputs > 0 ? static_cast<int>(num_inputs - 1) : -1;
}

// Both are side effects: comm_start has no output (it hands the collective to the communication thread), and the
// order of collectives is part of the program (every rank issues them in the same order).
const OpDef op_comm_start("comm_start", attrs_type<CommAttrs>(),
                          {.cost = comm_cost, .flags = kOpSideEffect, .filled_input = comm_result_slot});
// comm_wait writes its output (the result the communication thread put there): no alias, since it does not read
// the old values, and a send or a barrier has no buffer to name.
const OpDef op_comm_wait("comm_wait", attrs_type<CommAttrs>(), {.cost = comm_cost, .flags = kOpSideEffect});

void comm_start_kernel(Task& task) {
  const CommAttrs& a = task.attrs.get<CommAttrs>();
  std::shared_ptr<Work> work = a.group->start_execution(a.key, [&] { return work_from_task(a, task); });
  work->started = std::chrono::steady_clock::now();
  work->started_ns = profiler::now_ns();
  mark_submitted(*work);
  submit_to_comm_thread(std::move(work));
}

void comm_wait_kernel(Task& task) {
  const auto begin = std::chrono::steady_clock::now();
  struct Count {  // counted when the wait ends, raising or not
    std::chrono::steady_clock::time_point begin;
    ~Count() {
      stat_exposed_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - begin)
                             .count();
    }
  } count{begin};
  const CommAttrs& a = task.attrs.get<CommAttrs>();
  std::shared_ptr<Work> work = a.group->take_execution(a.key);
  DG_CHECK(work, Runtime, "[", comm_kind_name(a.kind), "] was not started: an input of it failed in an earlier op (the "
           "other ranks will time out waiting for this one)");
  work->wait_here();
}

DG_REGISTER_KERNEL(comm_start, Device::Type::CPU, comm_start_kernel);
DG_REGISTER_KERNEL(comm_wait, Device::Type::CPU, comm_wait_kernel);

// "all_reduce 12.5 MiB": the name of an operation's range on the profiler's communication track.
std::string comm_label(const Work& w) {
  const Tensor& t = w.input.defined() ? w.input : w.output;
  if (!t.defined()) return comm_kind_name(w.kind);
  char text[96];
  std::snprintf(text, sizeof text, "%s %.2f MiB", comm_kind_name(w.kind),
                static_cast<double>(t.numel()) * static_cast<double>(t.itemsize()) / (1 << 20));
  return text;
}

// --- the communication thread -------------------------------------------------------------------------------------
class CommThread {
 public:
  static CommThread& get() {
    static CommThread* thread = new CommThread();  // lives for the process: finalize stops it, exit never joins it
    return *thread;
  }

  void submit(std::shared_ptr<Work> work) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!running_) start_locked();
      incoming_.push_back(std::move(work));
      ++in_flight_;
    }
    cv_.notify_one();
  }

  size_t in_flight() {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_flight_;
  }

  // Waits until nothing is in flight, then stops and joins the thread (a later submit starts a new one).
  void stop() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!running_) return;
    idle_cv_.wait(lock, [&] { return in_flight_ == 0; });
    stopping_ = true;
    cv_.notify_one();
    lock.unlock();
    thread_.join();
    lock.lock();
    running_ = stopping_ = false;
    retired_.clear();
  }

  // Waits (at most `limit`) until no operation is in flight, then releases the finished ones (a JIT capture's check
  // of which buffers are still referenced: storage_hooks.h, run_release_hooks).
  void settle(std::chrono::milliseconds limit) {
    std::vector<std::shared_ptr<Work>> done;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      idle_cv_.wait_for(lock, limit, [&] { return in_flight_ == 0; });
      done.swap(retired_);
    }
  }

  // Finished Works are released here, on a host thread, so their buffers go back to the allocator there.
  void release_retired() {
    std::vector<std::shared_ptr<Work>> done;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done.swap(retired_);
    }
  }

 private:
  void start_locked() {
    static const bool hooked = (add_release_hook([] { CommThread::get().settle(std::chrono::seconds(10)); }), true);
    (void)hooked;
    running_ = true;
    thread_ = std::thread([this] {
      // Its buffers (the ordered all-reduce's gathered chunks) are written here, outside the stream's order.
      HostAllocationScope host;
      loop();
    });
  }

  void loop() {
    std::vector<std::shared_ptr<Work>> active, fresh;
    int idle_polls = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (active.empty()) cv_.wait(lock, [&] { return stopping_ || !incoming_.empty(); });
        if (stopping_ && incoming_.empty() && active.empty()) return;
        fresh.assign(std::make_move_iterator(incoming_.begin()), std::make_move_iterator(incoming_.end()));
        incoming_.clear();
      }
      for (auto& w : fresh) {
        run_guarded(*w, [&] {
          if (w->group->broken()) {
            w->fail(std::string("[") + comm_kind_name(w->kind) + "] the process group is unusable: " +
                    w->group->broken_reason());
            return;
          }
          w->group->start(*w);
        });
        active.push_back(std::move(w));
      }
      fresh.clear();
      bool progressed = false;
      for (auto& w : active) {
        if (w->completed()) continue;
        run_guarded(*w, [&] {
          if (w->group->test(*w)) return;
          // Waiting for more than a second: is a member dead? (Checked at most every half second.)
          const auto now = std::chrono::steady_clock::now();
          if (w->seconds_in_flight() > 1.0 && now - last_liveness_check_ > std::chrono::milliseconds(500)) {
            last_liveness_check_ = now;
            std::string dead = w->group->dead_member();
            if (dead.empty()) dead = w->group->departed_member(*w);
            if (!dead.empty()) {
              std::string why = std::string("[") + comm_kind_name(w->kind) + "] " + dead + " while rank " +
                                std::to_string(w->group->rank()) + " of " + std::to_string(w->group->size()) +
                                " waited for operation #" + std::to_string(w->id) + " of the group";
              w->group->mark_broken(why);
              w->fail(why);
              return;
            }
          }
          const double limit = w->group->timeout_seconds();
          if (w->seconds_in_flight() > limit) {
            char seconds[32];
            std::snprintf(seconds, sizeof seconds, "%.1f", limit);
            std::string why = std::string("[") + comm_kind_name(w->kind) + "] timed out after " + seconds +
                              " s on rank " + std::to_string(w->group->rank()) + " of " +
                              std::to_string(w->group->size()) + " (operation #" + std::to_string(w->id) +
                              " of the group; the timeout of init_process_group): another rank died, hangs, or "
                              "called a different collective";
            w->group->mark_broken(why);
            w->fail(why);
          }
        });
      }
      size_t finished = 0;
      for (auto& w : active) finished += w->completed();
      if (finished) {
        progressed = true;
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& w : active)
          if (w->completed()) {
            w->group->retire_execution(*w);
            Stream::cpu().release_on_host(w->group->release_buffers(*w));
            retired_.push_back(std::move(w));
          }
        std::erase_if(active, [](const std::shared_ptr<Work>& w) { return !w; });
        in_flight_ -= finished;
        if (in_flight_ == 0) idle_cv_.notify_all();
      }
      // Poll without busy-waiting: yield for the first ~100 polls of a wait, then sleep 20-200 us, so a rank
      // that shares its cores with compute leaves them to the compute threads (MPI progresses only inside
      // MPI calls, so the thread must keep testing). While a thread of ours is blocked waiting for a result
      // (exposed communication) there is no compute to leave the core to: keep polling, yielding only.
      // When every operation in flight waits for another rank to act, sleep until it does (each wait at most
      // 2 ms, so new submissions, timeouts and dead ranks are still seen).
      if (progressed) {
        idle_polls = 0;
      } else if (!active.empty() && !sleep_on_peers(active)) {
        if (++idle_polls < 100 || blocked_waiters.load(std::memory_order_relaxed) > 0) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(std::min(200, 20 * (idle_polls - 99))));
      }
    }
  }

  static bool sleep_on_peers(const std::vector<std::shared_ptr<Work>>& active) {
    Work* oldest = nullptr;
    for (const auto& w : active) {
      if (w->completed()) continue;
      if (!w->group->progresses_without_polling(*w)) return false;
      if (!oldest) oldest = w.get();
    }
    return oldest && oldest->group->wait_for_peers(*oldest, std::chrono::milliseconds(2));
  }

  template <typename F>
  static void run_guarded(Work& w, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      if (!w.completed()) w.fail(e.what());
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<Work>> incoming_;
  std::vector<std::shared_ptr<Work>> retired_;
  size_t in_flight_ = 0;
  bool running_ = false, stopping_ = false;
  std::chrono::steady_clock::time_point last_liveness_check_{};
  std::thread thread_;
};

}  // namespace

void submit_to_comm_thread(std::shared_ptr<Work> work) { CommThread::get().submit(std::move(work)); }
size_t comm_in_flight() { return CommThread::get().in_flight(); }
CommStats comm_stats() { return {stat_operations.load(), stat_comm_ns.load(), stat_exposed_ns.load()}; }

void stop_comm_thread() { CommThread::get().stop(); }

void mark_submitted(Work& w) { w.submitted_.store(true, std::memory_order_release); }

void Work::wait_here() {
  // comm_start runs before anything that waits (stream order); skipped, it never reached the thread.
  DG_CHECK(submitted(), Runtime, "[", comm_kind_name(kind), "] was not started: an input of it failed in an earlier "
           "op (the other ranks will time out waiting for this one)");
  std::unique_lock<std::mutex> lock(mutex_);
  blocked_waiters.fetch_add(1, std::memory_order_relaxed);
  cv_.wait(lock, [&] { return state_.load(std::memory_order_acquire) != kPending; });
  blocked_waiters.fetch_sub(1, std::memory_order_relaxed);
  if (state_.load(std::memory_order_acquire) == kFailed) {
    std::string message = error_;
    lock.unlock();
    throw Error(ErrorKind::Runtime, message);
  }
}

void Work::wait_on_stream() {
  // Read before registering: once registered, the communication thread may hand the buffers over at completion
  // (ProcessGroup::release_buffers), ordered after this by the registry's mutex.
  Attrs attrs(describe(*this));
  Tensor result = output;
  if (!group->register_for_stream_wait(shared_from_this())) return;  // enqueued already
  ApiNameScope api(comm_kind_name(kind));
  // The result buffer is the Task's in-place operand (reads of it wait for this Task); a send writes nothing
  // (the Work keeps its buffer alive).
  if (result.defined()) enqueue(op_comm_wait, {}, {result}, attrs);
  else enqueue(op_comm_wait, {}, {}, attrs);
  // Finished before it was waited for (the communication thread kept its buffers for this wait): they go now, here
  // on the host (the comm_wait Task holds the result buffer itself). A bucket reused at the next step finds no other
  // holder (DDP's _Bucket.claim), whatever the timing.
  if (completed()) std::vector<Tensor> dropped = group->release_buffers(*this);
}

// --- ProcessGroup -------------------------------------------------------------------------------------------------
void ProcessGroup::mark_broken(std::string why) {
  std::lock_guard<std::mutex> lock(broken_mutex_);
  if (!broken_.load()) broken_reason_ = std::move(why);
  broken_.store(true, std::memory_order_release);
}

std::string ProcessGroup::broken_reason() const {
  std::lock_guard<std::mutex> lock(broken_mutex_);
  return broken_reason_;
}

// The registry's rule: an execution stays from comm_start (or the eager call) until comm_wait takes it, unless it
// completes with no comm_wait enqueued for it (an async handle not waited for, whose holder keeps it alive).
template <typename Make>
std::shared_ptr<Work> ProcessGroup::start_execution(uint64_t key, Make&& make) {
  std::lock_guard<std::mutex> lock(executions_mutex_);
  std::shared_ptr<Work>& slot = executions_[key];
  if (!slot || slot->submitted()) {
    slot = make();
    slot->stream_wait_enqueued_ = true;  // a re-run: its comm_wait is the recorded one that follows
  }
  slot->id = ++started_;
  return slot;
}

std::shared_ptr<Work> ProcessGroup::take_execution(uint64_t key) {
  std::lock_guard<std::mutex> lock(executions_mutex_);
  auto it = executions_.find(key);
  if (it == executions_.end()) return nullptr;
  std::shared_ptr<Work> work = std::move(it->second);
  executions_.erase(it);
  return work;
}

std::vector<Tensor> ProcessGroup::release_buffers(Work& work) {
  std::vector<Tensor> out;
  std::lock_guard<std::mutex> lock(executions_mutex_);
  if (!work.stream_wait_enqueued_) return out;
  if (work.input.defined()) out.push_back(std::exchange(work.input, Tensor()));
  if (work.output.defined()) out.push_back(std::exchange(work.output, Tensor()));
  for (Tensor& t : work.pieces) out.push_back(std::exchange(t, Tensor()));
  work.pieces.clear();
  return out;
}

void ProcessGroup::retire_execution(const Work& work) {
  std::lock_guard<std::mutex> lock(executions_mutex_);
  if (work.stream_wait_enqueued_) return;
  auto it = executions_.find(work.key);
  if (it != executions_.end() && it->second.get() == &work) executions_.erase(it);
}

bool ProcessGroup::register_for_stream_wait(const std::shared_ptr<Work>& work) {
  std::lock_guard<std::mutex> lock(executions_mutex_);
  if (work->stream_wait_enqueued_) return false;
  work->stream_wait_enqueued_ = true;
  executions_.try_emplace(work->key, work);  // retired unwaited: registered again for its comm_wait
  return true;
}

size_t ProcessGroup::executions_registered() const {
  std::lock_guard<std::mutex> lock(executions_mutex_);
  return executions_.size();
}

namespace {

// Every operand is checked at the call, before any Task reads it: a device's tensor is refused here (the groups
// communicate host memory; a device's memory is not the host's to read, docs/devices.md).
void check_tensor(const ProcessGroup& g, const char* name, const Tensor& t, const char* argument) {
  DG_CHECK(t.defined(), Value, "[", name, "] ", argument, " is not a tensor");
  DG_CHECK(t.device().is_cpu(), NotImplemented, "[", name, "] the ", g.backend(), " process group takes cpu tensors; "
           "got ", argument, " on ", t.device().str(), " (copy it to the host with .cpu() first)");
  DG_CHECK(t.is_contiguous(), Value, "[", name, "] ", argument, " of shape ", t.shape(), " with strides ",
           t.strides(), ": Tensors must be contiguous");
  DG_CHECK(t.numel() <= INT_MAX, Value, "[", name, "] ", argument, " of shape ", t.shape(), " has more than ", INT_MAX,
           " elements (one MPI message)");
}

void check_reduce_op(const char* name, const Tensor& t, ReduceOp op) {
  if (t.dtype() == DType::Bool)
    DG_CHECK(op != ReduceOp::Avg, Type, "[", name, "] ReduceOp.AVG is not supported for bool tensors");
  if (is_integral(t.dtype(), false))
    DG_CHECK(op != ReduceOp::Avg, Type, "[", name, "] ReduceOp.AVG needs a floating-point tensor, got ",
             dtype_name(t.dtype()));
}

void check_rank(const char* name, const ProcessGroup& g, int r, const char* what, bool allow_any = false) {
  DG_CHECK((allow_any && r == -1) || (r >= 0 && r < g.size()), Value, "[", name, "] invalid ", what, " rank ", r,
           " for a group of size ", g.size());
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::launch(std::shared_ptr<Work> work, bool async_op) {
  CommThread::get().release_retired();
  const char* name = comm_kind_name(work->kind);
  if (broken()) throw Error(ErrorKind::Runtime, std::string("[") + name + "] the process group is unusable: " +
                                                    broken_reason());
  work->key = ++launched_;
  work->check = collective_check();
  {
    std::lock_guard<std::mutex> lock(executions_mutex_);
    executions_[work->key] = work;  // comm_start's kernel takes it (the user's handle is the same Work)
  }
  ApiNameScope api(name);
  Attrs attrs(describe(*work));
  SmallVector<Tensor, 2> operands;
  for (const Tensor& t : work->pieces) operands.push_back(t);
  if (work->input.defined()) operands.push_back(work->input);
  if (work->output.defined() && !(work->input.defined() && work->output.shares_storage(work->input))) operands.push_back(work->output);
  enqueue(op_comm_start, std::span<const Tensor>(operands.data(), operands.size()), {}, attrs);
  if (!async_op) work->wait_on_stream();
  return work;
}

std::shared_ptr<Work> ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op, bool async_op) {
  check_tensor(*this, "all_reduce", tensor, "tensor");
  check_reduce_op("all_reduce", tensor, op);
  auto w = std::make_shared<Work>(CommKind::AllReduce, shared_from_this());
  w->op = op;
  w->input = w->output = tensor;
  return launch(std::move(w), async_op);
}

std::shared_ptr<Work> ProcessGroup::all_reduce_gathered(const Tensor& output, std::vector<Tensor> pieces,
                                                        ReduceOp op, bool async_op) {
  check_tensor(*this, "all_reduce", output, "output");
  check_reduce_op("all_reduce", output, op);
  int64_t total = 0;
  for (const Tensor& t : pieces) {
    check_tensor(*this, "all_reduce", t, "a piece");
    DG_CHECK(t.dtype() == output.dtype(), Type, "[all_reduce] a piece of dtype ", dtype_name(t.dtype()),
             " for an output of dtype ", dtype_name(output.dtype()));
    total += t.numel();
  }
  DG_CHECK(total == output.numel(), Value, "[all_reduce] the pieces have ", total, " elements in all, the output ",
           output.shape(), " has ", output.numel());
  auto w = std::make_shared<Work>(CommKind::AllReduce, shared_from_this());
  w->op = op;
  w->output = output;
  w->pieces = std::move(pieces);
  w->piece_count = static_cast<int32_t>(w->pieces.size());
  return launch(std::move(w), async_op);
}

void copy_from_pieces(const std::vector<Tensor>& pieces, int64_t begin, int64_t count, void* dst) {
  if (pieces.empty()) return;
  const int64_t item = static_cast<int64_t>(pieces.front().itemsize());
  for_each_piece(pieces, begin, count, [&](const char* src, int64_t offset, int64_t n) {
    char* to = static_cast<char*>(dst) + offset * item;
    if (src != to) std::memcpy(to, src, static_cast<size_t>(n * item));
  });
}

void gather_pieces(Work& w) {
  if (w.pieces.empty()) return;
  copy_from_pieces(w.pieces, 0, w.output.numel(), w.output.raw_data());
  Stream::cpu().release_on_host(std::move(w.pieces));
}

std::shared_ptr<Work> ProcessGroup::broadcast(const Tensor& tensor, int root, bool async_op) {
  check_tensor(*this, "broadcast", tensor, "tensor");
  check_rank("broadcast", *this, root, "source");
  auto w = std::make_shared<Work>(CommKind::Broadcast, shared_from_this());
  w->root = root;
  w->input = w->output = tensor;
  return launch(std::move(w), async_op);
}

std::shared_ptr<Work> ProcessGroup::reduce(const Tensor& tensor, int root, ReduceOp op, bool async_op) {
  check_tensor(*this, "reduce", tensor, "tensor");
  check_reduce_op("reduce", tensor, op);
  check_rank("reduce", *this, root, "destination");
  auto w = std::make_shared<Work>(CommKind::Reduce, shared_from_this());
  w->op = op;
  w->root = root;
  w->input = w->output = tensor;
  return launch(std::move(w), async_op);
}

std::shared_ptr<Work> ProcessGroup::all_gather_into_tensor(const Tensor& output, const Tensor& input, bool async_op) {
  const char* name = "all_gather_into_tensor";
  check_tensor(*this, name, output, "output_tensor");
  check_tensor(*this, name, input, "input_tensor");
  DG_CHECK(output.dtype() == input.dtype(), Type, "[", name, "] output tensor must have the same type as input tensor"
           " (", dtype_name(output.dtype()), " vs ", dtype_name(input.dtype()), ")");
  DG_CHECK(output.numel() == input.numel() * size(), Value, "[", name, "] output tensor size must be equal to "
           "world_size times input tensor size: output ", output.shape(), ", input ", input.shape(), ", world size ",
           size());
  DG_CHECK(!output.shares_storage(input) || size() == 1, Value, "[", name, "] output and input share memory");
  auto w = std::make_shared<Work>(CommKind::AllGather, shared_from_this());
  w->input = input;
  w->output = output;
  return launch(std::move(w), async_op);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op,
                                                          bool async_op) {
  const char* name = "reduce_scatter_tensor";
  check_tensor(*this, name, output, "output");
  check_tensor(*this, name, input, "input");
  check_reduce_op(name, input, op);
  DG_CHECK(output.dtype() == input.dtype(), Type, "[", name, "] input tensor must be the same type as the output "
           "tensor (", dtype_name(input.dtype()), " vs ", dtype_name(output.dtype()), ")");
  DG_CHECK(input.numel() == output.numel() * size(), Value, "[", name, "] input tensor must be the same size as "
           "output size times world size: input ", input.shape(), ", output ", output.shape(), ", world size ", size());
  DG_CHECK(!output.shares_storage(input), Value, "[", name, "] output and input share memory");
  auto w = std::make_shared<Work>(CommKind::ReduceScatter, shared_from_this());
  w->op = op;
  w->input = input;
  w->output = output;
  return launch(std::move(w), async_op);
}

std::shared_ptr<Work> ProcessGroup::send(const Tensor& tensor, int dst, int tag, bool async_op) {
  check_tensor(*this, "send", tensor, "tensor");
  check_rank("send", *this, dst, "destination");
  DG_CHECK(dst != rank(), Value, "[send] Invalid destination rank: should not be the same as rank of the current "
           "process (", dst, ")");
  auto w = std::make_shared<Work>(CommKind::Send, shared_from_this());
  w->peer = dst;
  w->tag = tag;
  w->input = tensor;
  return launch(std::move(w), async_op);
}

std::shared_ptr<Work> ProcessGroup::recv(const Tensor& tensor, int src, int tag, bool async_op) {
  check_tensor(*this, "recv", tensor, "tensor");
  check_rank("recv", *this, src, "source", /*allow_any=*/true);
  DG_CHECK(src != rank(), Value, "[recv] Invalid source rank: should not be the same as rank of the current process (",
           src, ")");
  auto w = std::make_shared<Work>(CommKind::Recv, shared_from_this());
  w->peer = src;
  w->tag = tag;
  w->output = tensor;
  return launch(std::move(w), async_op);
}

void ProcessGroup::barrier() {
  auto w = launch(std::make_shared<Work>(CommKind::Barrier, shared_from_this()), /*async_op=*/true);
  // The host waits: its comm_start must run first (the stream order of earlier operations), then the barrier.
  Stream::cpu().synchronize();
  w->wait_here();
}

// --- the single-process group -------------------------------------------------------------------------------------
namespace {

class SingleProcessGroup final : public ProcessGroup {
 public:
  SingleProcessGroup() : ProcessGroup("single", 0, 1, {0}, 1800.0) {}

  std::shared_ptr<ProcessGroup> split(const std::vector<int>& ranks) override {
    DG_CHECK(ranks.size() == 1 && ranks[0] == 0, Value, "[new_group] ranks must name rank 0 of a group of one");
    return std::make_shared<SingleProcessGroup>();
  }

  void start(Work& w) override {
    gather_pieces(w);
    switch (w.kind) {
      case CommKind::AllGather:
      case CommKind::ReduceScatter:
        std::memcpy(w.output.raw_data(), w.input.raw_data(), static_cast<size_t>(w.output.numel()) * w.output.itemsize());
        break;
      case CommKind::Send:
      case CommKind::Recv:
        throw Error(ErrorKind::Runtime, std::string("[") + comm_kind_name(w.kind) + "] a group of one has no peer");
      default:  // all_reduce, broadcast, reduce, barrier of one rank: the buffer already holds the result
        break;
    }
    w.finish();
  }

  bool test(Work&) override { return true; }
};

}  // namespace

std::shared_ptr<ProcessGroup> single_process_group() { return std::make_shared<SingleProcessGroup>(); }

}  // namespace dg::dist
