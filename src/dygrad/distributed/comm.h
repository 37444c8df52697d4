// Collectives between processes (docs/distributed.md): process groups over MPI, and the communication thread
// that runs every collective of this process in the order the compute stream started them.
//
// A collective is two Tasks on the compute stream and one Work on the communication thread:
//   comm_start (reads the buffers; its kernel hands the Work to the communication thread and returns),
//   the communication thread runs it (non-blocking MPI, polled without busy-waiting),
//   comm_wait  (writes the result buffer; its kernel waits for the Work): enqueued at once for a synchronous
//              call, by Work::wait_on_stream for async_op=True.
// Compute Tasks enqueued between the two overlap the communication; reading the result waits for comm_wait.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "dygrad/core/tensor.h"

namespace dg::dist {

enum class ReduceOp : uint8_t { Sum, Avg, Product, Min, Max };
const char* reduce_op_name(ReduceOp op);
inline const char* attr_enum_name(ReduceOp op) { return reduce_op_name(op); }  // printed in CommAttrs

enum class CommKind : uint8_t { AllReduce, Broadcast, AllGather, ReduceScatter, Reduce, Barrier, Send, Recv };
const char* comm_kind_name(CommKind kind);  // torch's function name: "all_reduce", "all_gather_into_tensor" ...
inline const char* attr_enum_name(CommKind kind) { return comm_kind_name(kind); }

class ProcessGroup;

// One execution of a collective or point-to-point operation: its arguments, and its completion. The stream Tasks
// carry a description (comm.cpp's CommAttrs: the kind, the group, the reduction, ranks, the launch's key), not a
// Work: comm_start's kernel makes the Work of each execution from it and its operands (an eager call's Work, made
// at the call for the user's handle, is taken instead) and registers it in the group under the key, where
// comm_wait's kernel takes it. A recorded pair of Tasks re-run later therefore runs the operation again.
class Work : public std::enable_shared_from_this<Work> {
 public:
  Work(CommKind kind, std::shared_ptr<ProcessGroup> group) : kind(kind), group(std::move(group)) {}

  const CommKind kind;
  const std::shared_ptr<ProcessGroup> group;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;  // broadcast / reduce: the group rank of the root
  int peer = -1;  // send: the destination, recv: the source (-1: any), group ranks
  int tag = 0;
  Tensor input;   // what is sent (all_reduce, broadcast: the same tensor as output)
  Tensor output;  // what is written (undefined for send and barrier)
  // all_reduce_gathered: the contiguous tensors whose concatenation is the input (the output's old contents are
  // not read). The backend gathers them as it copies its input in (the shared-memory all-reduce copies them
  // straight into its slot) or into the output first (gather_pieces), and drops them once copied.
  std::vector<Tensor> pieces;
  // How many pieces the call had: the description of the call (comm.cpp's CommAttrs) reads this, never `pieces`,
  // which the communication thread drops once copied.
  int32_t piece_count = 0;
  bool check = false;  // a collective checked across ranks before it starts (the group's setting at the call)
  uint64_t key = 0;  // the launch it comes from (the group's count of calls): pairs comm_start with comm_wait
  uint64_t id = 0;   // the group's count of operations started (in stream order), for error messages and checks

  bool completed() const { return state_.load(std::memory_order_acquire) != kPending; }
  bool failed() const { return state_.load(std::memory_order_acquire) == kFailed; }
  std::string error() const;  // "" unless failed
  int source() const { return source_; }  // recv: the rank the message came from (after completion)

  // Blocks this thread until the operation has finished; raises its error. Does not order the stream; the
  // caller must know comm_start has run (the stream is past it).
  void wait_here();
  bool submitted() const { return submitted_.load(std::memory_order_acquire); }  // comm_start's kernel ran
  // Enqueues comm_wait on the compute stream (once; later calls do nothing): Tasks after it see the result.
  void wait_on_stream();
  double seconds_in_flight() const;

  // The communication thread's side.
  void finish(int source = -1);
  void fail(std::string message);
  std::chrono::steady_clock::time_point started;
  int64_t started_ns = 0;   // the profiler's clock at comm_start (the communication range's begin)
  void* request = nullptr;  // the backend's handle while in flight

 private:
  enum : int { kPending, kDone, kFailed };
  std::atomic<int> state_{kPending};
  int source_ = -1;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::string error_;
  bool stream_wait_enqueued_ = false;  // under the group's executions mutex
  std::atomic<bool> submitted_{false};
  friend void mark_submitted(Work& w);
  friend class ProcessGroup;
};

// A communicator: its ranks, and the operations on it. Ranks are group ranks throughout; the Python layer maps
// torch's global ranks.
class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }  // group rank -> world rank
  const char* backend() const { return backend_; }
  double timeout_seconds() const { return timeout_s_; }
  void set_timeout_seconds(double s) { timeout_s_ = s; }

  // Each validates at the call (raising ValueError/RuntimeError naming the function and the shapes), then
  // enqueues comm_start and, unless async_op, comm_wait. The returned Work is completed later.
  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op, bool async_op);
  // output = the all-reduce of the concatenation of pieces (flattened, in order), without a copy into output
  // first: DistributedDataParallel's buckets, whose gradients stay where backward made them until the
  // communication thread copies them in.
  std::shared_ptr<Work> all_reduce_gathered(const Tensor& output, std::vector<Tensor> pieces, ReduceOp op,
                                            bool async_op);
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root, bool async_op);
  std::shared_ptr<Work> reduce(const Tensor& tensor, int root, ReduceOp op, bool async_op);
  std::shared_ptr<Work> all_gather_into_tensor(const Tensor& output, const Tensor& input, bool async_op);
  std::shared_ptr<Work> reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op, bool async_op);
  std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag, bool async_op);
  std::shared_ptr<Work> recv(const Tensor& tensor, int src, int tag, bool async_op);
  // Blocks the host until every rank of the group has reached it (after this rank's earlier operations).
  void barrier();
  // A group of the listed ranks of this one (collective: every rank of this group calls it with the same list);
  // null on the ranks not listed.
  virtual std::shared_ptr<ProcessGroup> split(const std::vector<int>& ranks) = 0;

  // The communication thread's side: start an operation (non-blocking) and test it.
  virtual void start(Work& work) = 0;
  virtual bool test(Work& work) = 0;  // true once finished (work.finish / fail called)

  // A description of a member rank known to have died ("" when none is known): the communication thread asks
  // while an operation waits, and fails it at once rather than at the timeout.
  virtual std::string dead_member() { return ""; }
  // A description of a member rank that has left the group without taking part in `work` (its program ended, or it
  // destroyed the group: the MPI group's leaving notices), "" when none has. Called by the communication thread.
  virtual std::string departed_member(const Work&) { return ""; }
  uint64_t operations_started() const { return started_.load(); }

  // The slot size in bytes of the group's shared-memory all-reduce (mpi.cpp; docs/distributed.md), 0 when its
  // all-reduces all go through MPI (ranks on several machines, DYGRAD_SHM_ALLREDUCE=0, the group of one).
  virtual size_t shared_memory_slot_bytes() const { return 0; }

  // The communication thread's idle wait. An MPI operation progresses only inside MPI calls, so the thread keeps
  // testing it; an operation that another rank's action completes (the shared-memory all-reduce) can instead be
  // slept on: wait_for_peers blocks until that rank acts or `limit` passes, and returns false at once when the
  // operation is not waiting for another rank.
  virtual bool progresses_without_polling(const Work&) const { return false; }
  virtual bool wait_for_peers(Work&, std::chrono::microseconds /*limit*/) { return false; }

  // Whether collectives called from now on are checked across ranks before they start (the MPI group: shapes,
  // dtypes, kind, reduction and root must agree, docs/distributed.md). Collective: every rank sets the same value
  // at the same point of its program.
  bool collective_check() const { return check_.load(std::memory_order_relaxed); }
  void set_collective_check(bool on) { check_.store(on, std::memory_order_relaxed); }

  bool broken() const { return broken_.load(std::memory_order_acquire); }
  void mark_broken(std::string why);
  std::string broken_reason() const;

  // The executions between comm_start and comm_wait, by launch key (comm.cpp). comm_start's kernel: the Work
  // registered under `key` and not yet started (an eager call's), else `make()`'s, registered; it is given its
  // operation number. comm_wait's kernel takes it out (null when comm_start did not run: an input had failed).
  template <typename Make>
  std::shared_ptr<Work> start_execution(uint64_t key, Make&& make);
  std::shared_ptr<Work> take_execution(uint64_t key);
  // The communication thread, when a Work completes: one that no comm_wait is enqueued for yet (an async call not
  // waited for) leaves the registry; its handle registers it again if it is waited for later.
  void retire_execution(const Work& work);
  // The communication thread, when a Work completes and its comm_wait is enqueued (which holds the result buffer as
  // its own operand): the Work's buffers, handed to the host to drop at the stream's next reclaim (so a finished
  // operation's memory goes back at the next op, not at the next collective's launch). Empty when no comm_wait is
  // enqueued yet: the handle may still be waited for, which needs the result buffer.
  std::vector<Tensor> release_buffers(Work& work);
  size_t executions_registered() const;  // tests: nothing stays behind

 protected:
  ProcessGroup(const char* backend, int rank, int size, std::vector<int> world_ranks, double timeout_s)
      : rank_(rank), size_(size), world_ranks_(std::move(world_ranks)), backend_(backend), timeout_s_(timeout_s) {}

 private:
  friend class Work;
  std::shared_ptr<Work> launch(std::shared_ptr<Work> work, bool async_op);
  int rank_, size_;
  std::vector<int> world_ranks_;
  const char* backend_;
  double timeout_s_;
  bool register_for_stream_wait(const std::shared_ptr<Work>& work);  // Work::wait_on_stream: false if done before
  std::atomic<uint64_t> launched_{0}, started_{0};
  mutable std::mutex executions_mutex_;
  std::unordered_map<uint64_t, std::shared_ptr<Work>> executions_;
  std::atomic<bool> check_{false};
  std::atomic<bool> broken_{false};
  mutable std::mutex broken_mutex_;
  std::string broken_reason_;
};

bool mpi_built();          // dygrad was built with MPI (CMake found it)
bool mpi_initialized();    // init_world ran and finalize did not
// Initialises MPI (once per process) and returns the world group. Raises when dygrad was built without MPI.
std::shared_ptr<ProcessGroup> init_world(double timeout_s);
std::shared_ptr<ProcessGroup> world();  // null before init_world / after finalize
// Waits for every operation in flight, stops the communication thread and finalises MPI (skipped after a
// timeout left a collective pending: MPI cannot cancel one).
void finalize();
// Copies a Work's pieces into its output, in order (a piece that is the output's own memory stays), and drops
// them: for the backends that reduce in the output's memory.
void gather_pieces(Work& w);
// Calls f(src, offset, n) for each piece's share of elements [begin, begin + count) of the concatenation of pieces:
// n elements at src, which are elements [begin + offset, begin + offset + n) of the concatenation.
template <typename F>
void for_each_piece(const std::vector<Tensor>& pieces, int64_t begin, int64_t count, F&& f) {
  int64_t at = 0;  // the current piece's first element in the concatenation
  for (const Tensor& t : pieces) {
    const int64_t n = t.numel();
    const int64_t lo = std::max(begin, at), hi = std::min(begin + count, at + n);
    if (lo < hi) {
      const char* src = static_cast<const char*>(t.raw_data()) + (lo - at) * static_cast<int64_t>(t.itemsize());
      f(src, lo - begin, hi - lo);
    }
    at += n;
    if (at >= begin + count) break;
  }
}
// Copies elements [begin, begin + count) of the concatenation of pieces to dst.
void copy_from_pieces(const std::vector<Tensor>& pieces, int64_t begin, int64_t count, void* dst);

// A group of one process that needs no MPI: collectives copy or pass through (tests, and world size 1).
std::shared_ptr<ProcessGroup> single_process_group();

// The communication thread (one per process): runs each Work handed to it, in order of submission.
void submit_to_comm_thread(std::shared_ptr<Work> work);
// Waits until nothing is in flight, then stops the communication thread (the next operation starts it again):
// before a blocking MPI call of the host (MPI_Comm_split, finalisation).
void stop_comm_thread();
// Operations handed to the communication thread and not finished yet (tests, the profiler).
size_t comm_in_flight();

// Totals since the process started (the linearity command): operations finished, their time from comm_start to
// completion, and the time the compute stream spent blocked in comm_wait (the exposed part), in ns.
struct CommStats {
  uint64_t operations = 0;
  int64_t comm_ns = 0;
  int64_t exposed_ns = 0;
};
CommStats comm_stats();

}  // namespace dg::dist
