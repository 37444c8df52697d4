// The MPI process group (distributed/comm.h): non-blocking MPI calls started and tested by the communication
// thread. Every MPI call after MPI_Init_thread is made by one thread at a time (MPI_THREAD_SERIALIZED): the
// communication thread, or the host while the communication thread is idle (split, finalize).
#include "dygrad/distributed/comm.h"

#include "dygrad/core/allocator.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/context.h"
#include "dygrad/runtime/spin.h"
#include "dygrad/runtime/stream.h"

#ifdef DYGRAD_HAVE_MPI
#include <mpi.h>

#include <linux/futex.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <cmath>
#include <deque>
#include <fstream>
#include <functional>
#include <thread>
#endif

namespace dg::dist {

#ifndef DYGRAD_HAVE_MPI

bool mpi_built() { return false; }
bool mpi_initialized() { return false; }
std::shared_ptr<ProcessGroup> init_world(double) {
  throw Error(ErrorKind::NotImplemented, "[init_process_group] dygrad was built without MPI (install openmpi-bin and "
                                         "libopenmpi-dev, then rebuild: 'make deps' installs them)");
}
std::shared_ptr<ProcessGroup> world() { return nullptr; }
void finalize() { stop_comm_thread(); }

#else

namespace {

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

void check_mpi(int code, const char* name, const char* call) {
  if (code != MPI_SUCCESS)
    throw Error(ErrorKind::Runtime, std::string("[") + name + "] " + call + " failed: " + mpi_error(code));
}

// 16-bit floats have no MPI type: a 2-byte contiguous type of our own per format, reduced by user operations.
MPI_Datatype bf16_type = MPI_DATATYPE_NULL, f16_type = MPI_DATATYPE_NULL;
MPI_Op half_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, product, min, max

template <typename H, int Op>
void reduce_halves(void* in, void* inout, int n) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < n; ++i) {
    float x = float(a[i]), y = float(b[i]), r;
    if constexpr (Op == 0) r = x + y;
    else if constexpr (Op == 1) r = x * y;
    else if constexpr (Op == 2) r = (std::isnan(x) || x < y) ? x : y;
    else r = (std::isnan(x) || x > y) ? x : y;
    b[i] = H(r);
  }
}

template <int Op>
void half_op(void* in, void* inout, int* len, MPI_Datatype* type) {
  if (*type == bf16_type) reduce_halves<BFloat16, Op>(in, inout, *len);
  else reduce_halves<Half, Op>(in, inout, *len);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::Bool: return MPI_C_BOOL;
    case DType::UInt8: return MPI_UINT8_T;
    case DType::Int8: return MPI_INT8_T;
    case DType::Int16: return MPI_INT16_T;
    case DType::UInt16: return MPI_UINT16_T;
    case DType::UInt32: return MPI_UINT32_T;
    case DType::UInt64: return MPI_UINT64_T;
    case DType::Float8_e4m3fn: case DType::Float8_e5m2: return MPI_UINT8_T;  // bytes: reductions refuse them
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::Float16: return f16_type;
    case DType::BFloat16: return bf16_type;
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Complex64: return MPI_C_FLOAT_COMPLEX;  // storage-only: moved, not reduced (docs/dtypes.md)
    case DType::Complex128: return MPI_C_DOUBLE_COMPLEX;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::Bool) {  // torch's rules for bool: SUM and MAX are a logical or, PRODUCT and MIN a logical and
    return (op == ReduceOp::Sum || op == ReduceOp::Max) ? MPI_LOR : MPI_LAND;
  }
  const int index = op == ReduceOp::Product ? 1 : op == ReduceOp::Min ? 2 : op == ReduceOp::Max ? 3 : 0;
  if (is_reduced_float(t)) return half_ops[index];
  static const MPI_Op builtin[4] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
  return builtin[index];
}

// AVG: the sum, then each element divided by the group size (floating types only; checked at the call).
// float32 divides in float32: IEEE division is correctly rounded, so this equals dividing in double and rounding
// (the group size is exact in both), and it vectorises.
void divide(const Tensor& t, int size) {
  visit_dtype(t.dtype(), [&]<typename T>() {
    T* p = t.data<T>();
    const int64_t n = t.numel();
    if constexpr (std::is_same_v<T, float>) {
      const float s = static_cast<float>(size);
      for (int64_t i = 0; i < n; ++i) p[i] = p[i] / s;
    } else if constexpr (std::is_same_v<T, double>) {
      const double s = static_cast<double>(size);
      for (int64_t i = 0; i < n; ++i) p[i] = p[i] / s;
    } else if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
      for (int64_t i = 0; i < n; ++i) p[i] = T(static_cast<float>(p[i]) / static_cast<float>(size));
    }
  });
}

struct MpiState {
  bool initialized = false, finalized = false;
  std::shared_ptr<ProcessGroup> world;
  std::vector<MPI_Comm> comms;  // freed at finalize
  std::vector<MPI_Win> windows;  // the shared-memory all-reduce's windows, freed at finalize (before the comms)
  // Each world rank's process id and host (a hash of its name), exchanged at init: a rank on this machine
  // whose process is gone (or a zombie) is known dead.
  std::vector<int64_t> pids, hosts;
  int64_t my_host = 0;
  bool check_default = true;  // the cross-rank check of new groups: on unless DYGRAD_COLLECTIVE_CHECK=0
  // Leaving notices (docs/distributed.md, "A rank that leaves"): a rank whose program ends (or that destroys the
  // world group) sends one to every other rank on `control` before it finalizes; each rank keeps a receive posted
  // for them, tested by the communication thread's liveness check, so a peer waiting for it fails at once.
  MPI_Comm control = MPI_COMM_NULL;
  MPI_Request notice_request = MPI_REQUEST_NULL;
  int64_t notice = 0;  // what a notice carries: the operations its rank started in the world group
  std::mutex left_mutex;
  std::vector<int64_t> left;  // by world rank: -1, or the operations it had started in the world group when it left
  bool recovery = false;   // mpirun --enable-recovery: a rank may leave MPI unfinalized without ending the job
};

bool process_gone(int64_t pid) {
  if (kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}
MpiState& state() {
  static MpiState* s = new MpiState();
  return *s;
}

constexpr int kLeavingTag = 1;

// Records the leaving notices that have arrived (the thread making MPI calls: the communication thread, or the
// host while it is stopped) and posts the receive again.
void receive_notices() {
  MpiState& s = state();
  for (;;) {
    if (s.notice_request == MPI_REQUEST_NULL) return;
    int done = 0;
    MPI_Status status;
    if (MPI_Test(&s.notice_request, &done, &status) != MPI_SUCCESS || !done) return;
    {
      std::lock_guard<std::mutex> lock(s.left_mutex);
      if (status.MPI_SOURCE >= 0 && static_cast<size_t>(status.MPI_SOURCE) < s.left.size())
        s.left[static_cast<size_t>(status.MPI_SOURCE)] = s.notice;
    }
    MPI_Irecv(&s.notice, 1, MPI_INT64_T, MPI_ANY_SOURCE, kLeavingTag, s.control, &s.notice_request);
  }
}

// -1 while world_rank has not left; else the operations it had started in the world group.
int64_t left_after(size_t world_rank) {
  MpiState& s = state();
  std::lock_guard<std::mutex> lock(s.left_mutex);
  return world_rank < s.left.size() ? s.left[world_rank] : -1;
}

// One operation in flight: its MPI request, and for the rank-ordered all-reduce the state between its stages.
struct MpiOperation {
  MPI_Request request = MPI_REQUEST_NULL;
  int stage = 0;  // ordered all-reduce: 1 while the chunks are exchanged, 2 while the results are gathered;
                  // 3: an ordered reduce-scatter's exchange
  std::vector<int> counts, displs, recv_counts, recv_displs;
  Tensor gathered;  // [size x my chunk]: my chunk of every rank's buffer, in rank order
  // The shared-memory all-reduce: the chunk in progress ([begin, begin + length) elements), its phase and the
  // group's sequence number of the chunk.
  bool shm = false;
  int phase = 0;
  int64_t begin = 0, length = 0;
  int behind = -1;  // the rank whose counter the last test waited for (-1: none, or another operation goes first)
  // The cross-rank check: each rank's description of its call (kCallFields each), gathered before the collective
  // starts; `waiting` while the collective has not started (its check, or an older collective's, is pending).
  bool waiting = false, checked = true;
  MPI_Request check_request = MPI_REQUEST_NULL;
  std::vector<int64_t> calls;
};

// A collective as the cross-rank check compares it: kind, reduction, dtype, root, rank and element count of the
// tensor it is defined by, and its first 8 sizes.
constexpr int kCallFields = 14;
void describe_call(const Work& w, int64_t* f) {
  const Tensor& t = w.output.defined() && w.kind != CommKind::AllGather ? w.output : w.input;
  std::fill(f, f + kCallFields, int64_t{-1});
  f[0] = static_cast<int64_t>(w.kind);
  f[1] = static_cast<int64_t>(w.op);
  f[3] = w.root;
  if (!t.defined()) return;
  f[2] = static_cast<int64_t>(t.dtype());
  f[4] = t.dim();
  f[5] = t.numel();
  for (int64_t d = 0; d < std::min<int64_t>(t.dim(), 8); ++d) f[6 + d] = t.shape()[static_cast<size_t>(d)];
}

// "all_reduce float32 (3,) SUM": one rank's call, from its description.
std::string call_text(const int64_t* f) {
  std::string text = comm_kind_name(static_cast<CommKind>(f[0]));
  if (f[2] >= 0) {
    text += std::string(" ") + dtype_name(static_cast<DType>(f[2])) + " (";
    for (int64_t d = 0; d < f[4] && d < 8; ++d) text += (d ? ", " : "") + std::to_string(f[6 + d]);
    text += f[4] > 8 ? ", ...)" : f[4] == 1 ? ",)" : ")";
  }
  const auto kind = static_cast<CommKind>(f[0]);
  if (kind == CommKind::AllReduce || kind == CommKind::Reduce || kind == CommKind::ReduceScatter)
    text += std::string(" ") + reduce_op_name(static_cast<ReduceOp>(f[1]));
  if (kind == CommKind::Broadcast || kind == CommKind::Reduce) text += " root " + std::to_string(f[3]);
  return text;
}

// --- The shared-memory all-reduce ---------------------------------------------------------------------------
// For groups whose ranks all run on this machine (docs/distributed.md, "The shared-memory all-reduce"). Each rank
// owns a slot of an MPI shared-memory window (MPI_Win_allocate_shared, OpenMPI's osc/sm, backed by /dev/shm)
// that every rank of the group maps, and three counters at the head of it. A floating SUM/AVG all-reduce goes
// through the slots a chunk at a time, without any MPI call:
//   1. each rank copies its chunk into its slot and publishes the chunk's sequence number (posted);
//   2. once every rank has posted, each rank reduces its part of the chunk (part r of size parts), folding the
//      slots in rank order (x0 + x1 + ...; AVG then divides), into its output and back into its own slot
//      (reduced);
//   3. once every rank has reduced, each rank copies the other parts from their owners' slots (done); the next
//      chunk starts when every rank is done, so no slot is overwritten while another rank reads it.
// Every phase is one pass over memory the communication thread makes as soon as the counters allow it, where
// OpenMPI's shared-memory transport moves a large message in fragments that each need an MPI call on both sides
// (a communication thread that sleeps between polls while compute holds the core stretches them). The fold is in
// rank order for any group size, so the sum is bitwise that of one process adding the ranks' values in order.
// A rank that waits for another's counter sleeps on that rank's bell (a futex word in the shared header, which
// every counter update rings) instead of polling: a rank whose peer is still computing uses no CPU while it waits
// and wakes as soon as the peer has posted.
constexpr size_t kShmHeader = 4096;  // the counters; the data starts page-aligned after them
constexpr size_t kShmMinBytes = 64 << 10;  // smaller all-reduces stay with MPI (latency, not bandwidth)
constexpr size_t kShmDefaultSlot = 16 << 20;
enum ShmCounter { kPosted = 0, kReduced = 1, kDone = 2 };
constexpr size_t kShmBellOffset = 64 * 3;
// A waiting rank polls the counter this long before sleeping on the bell: most waits in an exposed all-reduce end
// within microseconds, sooner than a futex wake-up.
constexpr std::chrono::microseconds kShmSpin{50};

struct ShmArena {
  MPI_Win window = MPI_WIN_NULL;
  std::vector<char*> bases;  // each rank's segment: kShmHeader bytes of counters, then `slot` bytes of data
  size_t slot = 0;
  uint64_t sequence = 0;  // chunks this rank has started

  std::atomic_ref<uint64_t> counter(int rank, ShmCounter which) const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(bases[static_cast<size_t>(rank)] + 64 * which));
  }
  char* data(int rank) const { return bases[static_cast<size_t>(rank)] + kShmHeader; }
  // The first rank whose counter is below value, -1 when every rank has reached it.
  int behind(ShmCounter which, uint64_t value) const {
    for (size_t r = 0; r < bases.size(); ++r)
      if (counter(static_cast<int>(r), which).load(std::memory_order_seq_cst) < value) return static_cast<int>(r);
    return -1;
  }
  uint32_t* bell_word(int rank) const {
    return reinterpret_cast<uint32_t*>(bases[static_cast<size_t>(rank)] + kShmBellOffset);
  }
  std::atomic_ref<uint32_t> bell(int rank) const { return std::atomic_ref<uint32_t>(*bell_word(rank)); }
  // Publishes this rank's counter and wakes the ranks sleeping on its bell. The bell moves after the counter
  // (both sequentially consistent), so a waiter that read the bell before checking the counter either sees the
  // new counter or finds the bell moved and does not sleep.
  void advance(int me, ShmCounter which, uint64_t value) const {
    counter(me, which).store(value, std::memory_order_seq_cst);
    bell(me).fetch_add(1, std::memory_order_seq_cst);
    syscall(SYS_futex, bell_word(me), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
  // Spins for up to kShmSpin, then sleeps until rank's bell rings or `limit` passes; returns as soon as its counter
  // has reached value.
  void sleep_on(int rank, ShmCounter which, uint64_t value, std::chrono::microseconds limit) const {
    const auto spin_until = std::chrono::steady_clock::now() + kShmSpin;
    for (int i = 0;; ++i) {
      if (counter(rank, which).load(std::memory_order_acquire) >= value) return;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() >= spin_until) break;
      cpu_relax();
    }
    const uint32_t seen = bell(rank).load(std::memory_order_seq_cst);
    if (counter(rank, which).load(std::memory_order_seq_cst) >= value) return;
    timespec t{static_cast<time_t>(limit.count() / 1000000), static_cast<long>(limit.count() % 1000000) * 1000};
    // Not FUTEX_PRIVATE: the word is in memory mapped by several processes.
    syscall(SYS_futex, bell_word(rank), FUTEX_WAIT, seen, &t, nullptr, 0);
  }
};

size_t env_bytes(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  return end != v && x >= 0 ? static_cast<size_t>(x) : fallback;
}

// Collective over comm (made on the host, the communication thread idle). Null when a rank is on another
// machine, DYGRAD_SHM_ALLREDUCE=0, /dev/shm has too little room, or MPI cannot make the window; every rank takes
// the smallest slot any rank offers, so all agree on the path. DYGRAD_SHM_ALLREDUCE_SLOT_BYTES sets the slot size
// (16 MiB; the pages are touched only as far as chunks reach).
std::unique_ptr<ShmArena> make_shm_arena(MPI_Comm comm, int size) {
  if (size < 2) return nullptr;
  uint64_t slot = env_bytes("DYGRAD_SHM_ALLREDUCE", 1) == 0 ? 0 : env_bytes("DYGRAD_SHM_ALLREDUCE_SLOT_BYTES",
                                                                             kShmDefaultSlot);
  slot = slot / 64 * 64;
  MPI_Comm node = MPI_COMM_NULL;
  int node_size = 0;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) slot = 0;
  if (node != MPI_COMM_NULL) {
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
  }
  if (node_size != size) slot = 0;
  struct statvfs fs {};
  // Twice the group's slots must fit: a window's pages are taken from /dev/shm as they are touched, and a full
  // tmpfs would fault the process at the touch, not at the allocation.
  if (slot && statvfs("/dev/shm", &fs) == 0 &&
      static_cast<double>(fs.f_bavail) * fs.f_frsize < 2.0 * size * (slot + kShmHeader))
    slot = 0;
  uint64_t agreed = 0;
  if (MPI_Allreduce(&slot, &agreed, 1, MPI_UINT64_T, MPI_MIN, comm) != MPI_SUCCESS || agreed < 4096) return nullptr;
  auto arena = std::make_unique<ShmArena>();
  arena->slot = agreed;
  char* mine = nullptr;
  int ok = MPI_Win_allocate_shared(static_cast<MPI_Aint>(kShmHeader + agreed), 1, MPI_INFO_NULL, comm, &mine,
                                   &arena->window) == MPI_SUCCESS;
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
  if (!all_ok) {
    if (ok) MPI_Win_free(&arena->window);
    return nullptr;
  }
  MPI_Win_set_errhandler(arena->window, MPI_ERRORS_RETURN);
  arena->bases.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    MPI_Aint bytes = 0;
    int unit = 0;
    MPI_Win_shared_query(arena->window, r, &bytes, &unit, &arena->bases[static_cast<size_t>(r)]);
  }
  std::memset(mine, 0, kShmHeader);
  MPI_Barrier(comm);  // every rank's counters are zero before any rank reads them
  state().windows.push_back(arena->window);
  return arena;
}

bool shm_eligible(const Work& w, const ShmArena* arena) {
  if (!arena || w.kind != CommKind::AllReduce || !is_floating(w.output.dtype())) return false;
  if (w.op != ReduceOp::Sum && w.op != ReduceOp::Avg) return false;
  return static_cast<size_t>(w.output.numel()) * w.output.itemsize() >= kShmMinBytes;
}

// Part `index` of a chunk of `length` elements split among `parts` ranks (multiples of 16 elements).
std::pair<int64_t, int64_t> shm_part(int64_t length, int parts, int index) {
  const int64_t per = ((length + parts - 1) / parts + 15) / 16 * 16;
  const int64_t b = std::min(length, per * index), e = std::min(length, per * (index + 1));
  return {b, e - b};
}

// out[i] = mine[i] = fold of slots[r][i] over r in rank order (then / size for AVG); the rank's own slot pointer may
// be out itself (each element is read before it is written). 16-bit floats add in float32
// and round after each addition, as the MPI user operation does.
template <typename T>
void shm_fold(const std::vector<const T*>& slots, T* out, T* mine, int64_t n, bool average) {
  const size_t p = slots.size();
  if constexpr (std::is_floating_point_v<T>) {
    const T s = static_cast<T>(p);
    if (p == 2) {
      const T* a = slots[0];
      const T* b = slots[1];
      for (int64_t i = 0; i < n; ++i) {
        T v = a[i] + b[i];
        if (average) v = v / s;
        out[i] = v;
        mine[i] = v;
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      T v = slots[0][i];
      for (size_t r = 1; r < p; ++r) v = v + slots[r][i];
      if (average) v = v / s;
      out[i] = v;
      mine[i] = v;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      T v = slots[0][i];
      for (size_t r = 1; r < p; ++r) v = T(static_cast<float>(v) + static_cast<float>(slots[r][i]));
      if (average) v = T(static_cast<float>(v) / static_cast<float>(p));
      out[i] = v;
      mine[i] = v;
    }
  }
}

// The rank-ordered all-reduce (deterministic mode, more than two ranks): each rank receives its chunk of every
// rank's buffer (all-to-all), folds them left to right in rank order, ((x0 + x1) + x2) + ..., and the results are
// gathered back. Every element is then summed exactly as one process accumulating the ranks' values in rank order
// would, whatever the message size, where MPI's algorithms pick an association by size (bitwise results would
// change with the bucket plan). Same traffic as a ring all-reduce: (n - n/size) elements out and in, twice.
bool rank_ordered(const Work& w, int size) {
  return w.kind == CommKind::AllReduce && size > 2 && deterministic_enabled() && is_floating(w.output.dtype()) &&
         (w.op == ReduceOp::Sum || w.op == ReduceOp::Avg || w.op == ReduceOp::Product);
}

// The rank-ordered reduce-scatter (deterministic mode, more than two ranks): stage 1 of the ordered all-reduce alone,
// each rank receiving its block of every rank's input (all-to-all) and folding them in rank order into its output:
// fully_shard's gradients are then summed exactly as DDP's rank-ordered all-reduce sums them.
bool rank_ordered_scatter(const Work& w, int size) {
  return w.kind == CommKind::ReduceScatter && size > 2 && deterministic_enabled() && is_floating(w.output.dtype()) &&
         (w.op == ReduceOp::Sum || w.op == ReduceOp::Avg || w.op == ReduceOp::Product);
}

void fold_in_rank_order(const Tensor& gathered, const Tensor& out, int64_t offset, int64_t chunk, int size,
                        ReduceOp op) {
  visit_dtype(out.dtype(), [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
      const T* g = gathered.data<T>();
      T* o = out.data<T>() + offset;
      for (int64_t i = 0; i < chunk; ++i) {
        T acc = g[i];
        for (int r = 1; r < size; ++r) {
          const T x = g[static_cast<int64_t>(r) * chunk + i];
          if constexpr (std::is_floating_point_v<T>) acc = op == ReduceOp::Product ? acc * x : acc + x;
          else acc = T(op == ReduceOp::Product ? static_cast<float>(acc) * static_cast<float>(x)
                                               : static_cast<float>(acc) + static_cast<float>(x));
        }
        o[i] = acc;
      }
    }
  });
}

class MpiGroup final : public ProcessGroup {
 public:
  // Made on the host while the communication thread is idle (init, split): the duplicate communicator for the
  // second stage of ordered all-reduces is made here, collectively.
  MpiGroup(MPI_Comm comm, int rank, int size, std::vector<int> world_ranks, double timeout_s)
      : ProcessGroup("mpi", rank, size, std::move(world_ranks), timeout_s), comm_(comm) {
    set_collective_check(state().check_default && size > 1);
    if (size > 2) {
      check_mpi(MPI_Comm_dup(comm_, &gather_comm_), "init_process_group", "MPI_Comm_dup");
      MPI_Comm_set_errhandler(gather_comm_, MPI_ERRORS_RETURN);
      state().comms.push_back(gather_comm_);
    }
    check_mpi(MPI_Comm_dup(comm_, &check_comm_), "init_process_group", "MPI_Comm_dup");
    MPI_Comm_set_errhandler(check_comm_, MPI_ERRORS_RETURN);
    state().comms.push_back(check_comm_);
    shm_ = make_shm_arena(comm_, size);
  }

  size_t shared_memory_slot_bytes() const override { return shm_ ? shm_->slot : 0; }

  bool progresses_without_polling(const Work& w) const override {
    const auto* o = static_cast<const MpiOperation*>(w.request);
    return o && o->shm;
  }

  bool wait_for_peers(Work& w, std::chrono::microseconds limit) override {
    const auto* o = static_cast<const MpiOperation*>(w.request);
    if (!o || !o->shm || o->behind < 0) return false;
    shm_->sleep_on(o->behind, o->phase == 0 ? kDone : o->phase == 1 ? kPosted : kReduced, shm_->sequence, limit);
    return true;
  }

  std::shared_ptr<ProcessGroup> split(const std::vector<int>& ranks) override {
    const char* name = "new_group";
    for (int r : ranks)
      DG_CHECK(r >= 0 && r < size(), Value, "[", name, "] rank ", r, " is not in the group of size ", size());
    // MPI_Comm_split is collective and blocking: the communication thread must be idle (nothing of ours in
    // flight), which it is once the stream has run every comm_start and every started operation has finished.
    Stream::cpu().synchronize();
    stop_comm_thread();
    int position = -1;
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == rank()) position = static_cast<int>(i);
    MPI_Comm sub = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, position >= 0 ? 0 : MPI_UNDEFINED, position, &sub), name, "MPI_Comm_split");
    if (sub == MPI_COMM_NULL) return nullptr;
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    state().comms.push_back(sub);
    std::vector<int> world_ranks;
    for (int r : ranks) world_ranks.push_back(this->world_ranks()[static_cast<size_t>(r)]);
    return std::make_shared<MpiGroup>(sub, position, static_cast<int>(ranks.size()), std::move(world_ranks),
                                      timeout_seconds());
  }

  std::string dead_member() override {
    const MpiState& st = state();
    for (size_t r = 0; r < world_ranks().size(); ++r) {
      const size_t w = static_cast<size_t>(world_ranks()[r]);
      if (static_cast<int>(r) == rank() || w >= st.pids.size() || st.hosts[w] != st.my_host) continue;
      if (process_gone(st.pids[w]))
        return "rank " + std::to_string(r) + " (process " + std::to_string(st.pids[w]) + " on this machine) has died";
    }
    return "";
  }

  // A rank that left had finished every operation it started; in the world group, an operation it took part in
  // (numbered up to its count) may still be finishing here, and is not failed.
  std::string departed_member(const Work& w) override {
    receive_notices();
    const bool is_world = this == state().world.get();
    for (size_t r = 0; r < world_ranks().size(); ++r) {
      if (static_cast<int>(r) == rank()) continue;
      const int64_t after = left_after(static_cast<size_t>(world_ranks()[r]));
      if (after >= 0 && !(is_world && static_cast<int64_t>(w.id) <= after))
        return "rank " + std::to_string(r) + " has left (its program ended or it destroyed the process group)";
    }
    return "";
  }

  // Collectives are checked across ranks before they start (docs/distributed.md, "Calls that disagree"): each rank
  // gathers every rank's description of the call on a communicator of its own, and the collective starts only when
  // they all agree; otherwise every rank fails it, naming each rank's call. Collectives start in the order they were
  // started here (MPI requires one order on every rank): one whose check finishes early waits for the older ones.
  void start(Work& w) override {
    auto* operation = new MpiOperation();
    w.request = operation;
    const bool collective = w.kind != CommKind::Send && w.kind != CommKind::Recv;
    if (collective && (w.check || !unstarted_.empty())) {
      operation->waiting = true;
      unstarted_.push_back(w.id);
      if (w.check) {
        operation->checked = false;
        operation->calls.resize(static_cast<size_t>(kCallFields * (size() + 1)));
        int64_t* mine = operation->calls.data() + static_cast<ptrdiff_t>(kCallFields) * size();
        describe_call(w, mine);
        const int code = MPI_Iallgather(mine, kCallFields, MPI_INT64_T, operation->calls.data(), kCallFields,
                                        MPI_INT64_T, check_comm_, &operation->check_request);
        if (code != MPI_SUCCESS) {
          unstarted_.pop_back();
          delete operation;
          w.request = nullptr;
          check_mpi(code, comm_kind_name(w.kind), "the cross-rank check");
        }
      }
      return;
    }
    start_now(w, *operation);
  }

  // Advances a collective waiting to start; true once it has started.
  bool advance_waiting(Work& w, MpiOperation& o) {
    if (!o.checked) {
      int done = 0;
      const int code = MPI_Test(&o.check_request, &done, MPI_STATUS_IGNORE);
      if (code != MPI_SUCCESS || !done) {
        if (code == MPI_SUCCESS) return false;
        drop_waiting(w);
        check_mpi(code, comm_kind_name(w.kind), "the cross-rank check");
      }
      o.checked = true;
      const int64_t* all = o.calls.data();
      bool same = true;
      for (int r = 1; r < size(); ++r)
        same = same && std::equal(all, all + kCallFields, all + static_cast<ptrdiff_t>(r) * kCallFields);
      if (!same) {
        std::string calls;
        for (int r = 0; r < size(); ++r)
          calls += (r ? "; " : "") + std::string("rank ") + std::to_string(r) + ": " +
                   call_text(all + static_cast<ptrdiff_t>(r) * kCallFields);
        drop_waiting(w);
        throw Error(ErrorKind::Runtime, std::string("[") + comm_kind_name(w.kind) + "] the ranks called different "
                    "collectives (operation #" + std::to_string(w.id) + " of the group): " + calls);
      }
    }
    if (unstarted_.front() != w.id) return false;
    unstarted_.pop_front();
    o.waiting = false;
    o.calls = {};
    start_now(w, o);
    return true;
  }

  // A collective that will not start: out of the queue, its operation freed (the caller fails the Work).
  void drop_waiting(Work& w) {
    std::erase(unstarted_, w.id);
    delete static_cast<MpiOperation*>(w.request);
    w.request = nullptr;
  }

  void start_now(Work& w, MpiOperation& o) {
    MpiOperation* operation = &o;
    MPI_Request* req = &operation->request;
    const Tensor& t = w.output.defined() ? w.output : w.input;
    int code = MPI_SUCCESS;
    switch (w.kind) {
      case CommKind::AllReduce:
        if (shm_eligible(w, shm_.get())) {
          operation->shm = true;
          shm_queue_.push_back(w.id);
          break;
        }
        gather_pieces(w);
        if (rank_ordered(w, size())) {
          code = start_ordered(w, *operation);
          break;
        }
        code = MPI_Iallreduce(MPI_IN_PLACE, t.raw_data(), count(t), mpi_type(t.dtype()), mpi_op(w.op, t.dtype()),
                              comm_, req);
        break;
      case CommKind::Broadcast:
        code = MPI_Ibcast(t.raw_data(), count(t), mpi_type(t.dtype()), w.root, comm_, req);
        break;
      case CommKind::Reduce:
        code = rank() == w.root
                   ? MPI_Ireduce(MPI_IN_PLACE, t.raw_data(), count(t), mpi_type(t.dtype()), mpi_op(w.op, t.dtype()),
                                 w.root, comm_, req)
                   : MPI_Ireduce(t.raw_data(), nullptr, count(t), mpi_type(t.dtype()), mpi_op(w.op, t.dtype()),
                                 w.root, comm_, req);
        break;
      case CommKind::AllGather:
        code = MPI_Iallgather(w.input.raw_data(), count(w.input), mpi_type(w.input.dtype()), w.output.raw_data(),
                              count(w.input), mpi_type(w.input.dtype()), comm_, req);
        break;
      case CommKind::ReduceScatter:
        if (rank_ordered_scatter(w, size())) {
          MemoryCategoryScope staging(MemoryCategory::Communication);
          operation->gathered = Tensor::empty(std::vector<int64_t>{static_cast<int64_t>(size()) * count(w.output)},
                                              w.output.dtype());
          operation->stage = 3;
          code = MPI_Ialltoall(w.input.raw_data(), count(w.output), mpi_type(w.input.dtype()),
                               operation->gathered.raw_data(), count(w.output), mpi_type(w.input.dtype()), comm_, req);
          break;
        }
        code = MPI_Ireduce_scatter_block(w.input.raw_data(), w.output.raw_data(), count(w.output),
                                         mpi_type(w.input.dtype()), mpi_op(w.op, w.input.dtype()), comm_, req);
        break;
      case CommKind::Barrier:
        code = MPI_Ibarrier(comm_, req);
        break;
      case CommKind::Send:
        code = MPI_Isend(w.input.raw_data(), count(w.input), mpi_type(w.input.dtype()), w.peer, w.tag, comm_, req);
        break;
      case CommKind::Recv:
        code = MPI_Irecv(w.output.raw_data(), count(w.output), mpi_type(w.output.dtype()),
                         w.peer < 0 ? MPI_ANY_SOURCE : w.peer, w.tag, comm_, req);
        break;
    }
    if (code != MPI_SUCCESS) {
      delete operation;
      w.request = nullptr;
      check_mpi(code, comm_kind_name(w.kind), "starting the operation");
    }
  }

  // Stage 1 of the ordered all-reduce: my chunk of every rank's buffer into `gathered`, in rank order.
  int start_ordered(Work& w, MpiOperation& o) {
    const Tensor& t = w.output;
    const int n = count(t), p = size();
    o.counts.resize(static_cast<size_t>(p));
    o.displs.resize(static_cast<size_t>(p));
    for (int r = 0, at = 0; r < p; ++r) {
      o.counts[static_cast<size_t>(r)] = n / p + (r < n % p ? 1 : 0);
      o.displs[static_cast<size_t>(r)] = at;
      at += o.counts[static_cast<size_t>(r)];
    }
    const int mine = o.counts[static_cast<size_t>(rank())];
    o.recv_counts.assign(static_cast<size_t>(p), mine);
    o.recv_displs.resize(static_cast<size_t>(p));
    for (int r = 0; r < p; ++r) o.recv_displs[static_cast<size_t>(r)] = r * mine;
    MemoryCategoryScope staging(MemoryCategory::Communication);
    o.gathered = Tensor::empty(std::vector<int64_t>{static_cast<int64_t>(p) * mine}, t.dtype());
    o.stage = 1;
    awaiting_gather_.push_back(w.id);
    return MPI_Ialltoallv(t.raw_data(), o.counts.data(), o.displs.data(), mpi_type(t.dtype()), o.gathered.raw_data(),
                          o.recv_counts.data(), o.recv_displs.data(), mpi_type(t.dtype()), comm_, &o.request);
  }

  bool test(Work& w) override {
    auto* operation = static_cast<MpiOperation*>(w.request);
    if (operation->waiting && !advance_waiting(w, *operation)) return false;
    if (operation->shm) {
      if (!test_shm(w, *operation)) return false;
      delete operation;
      w.request = nullptr;
      w.finish();
      return true;
    }
    int done = 0;
    MPI_Status status;
    int code = MPI_Test(&operation->request, &done, &status);
    if (code == MPI_SUCCESS && done && operation->stage == 1) {
      // Ordered all-reduce: fold my chunk, then gather every rank's folded chunk in place. Other collectives
      // may have started on comm_ meanwhile, and ranks see exchanges finish in different orders, so the gathers
      // run on a communicator of their own, in the order the exchanges started (MPI requires every rank to
      // start a communicator's collectives in one order): a finished exchange waits for the older ones.
      if (awaiting_gather_.empty() || awaiting_gather_.front() != w.id) return false;
      awaiting_gather_.pop_front();
      const int mine = operation->counts[static_cast<size_t>(rank())];
      fold_in_rank_order(operation->gathered, w.output, operation->displs[static_cast<size_t>(rank())], mine,
                         size(), w.op);
      operation->gathered = Tensor();
      operation->stage = 2;
      code = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, w.output.raw_data(), operation->counts.data(),
                             operation->displs.data(), mpi_type(w.output.dtype()), gather_comm_,
                             &operation->request);
      done = 0;
    }
    if (code == MPI_SUCCESS && done && operation->stage == 3) {  // ordered reduce-scatter: fold my block
      fold_in_rank_order(operation->gathered, w.output, 0, count(w.output), size(), w.op);
      operation->gathered = Tensor();
    }
    if (code != MPI_SUCCESS) {
      delete operation;
      w.request = nullptr;
      check_mpi(code, comm_kind_name(w.kind), "MPI_Test");
    }
    if (!done) return false;
    delete operation;
    w.request = nullptr;
    if (w.kind == CommKind::Recv) {
      int received = 0;
      MPI_Get_count(&status, mpi_type(w.output.dtype()), &received);
      if (received != count(w.output)) {
        w.fail("[recv] received " + std::to_string(received) + " elements from rank " +
               std::to_string(status.MPI_SOURCE) + " into a tensor of " + std::to_string(w.output.numel()));
        return true;
      }
    }
    if (w.op == ReduceOp::Avg &&
        (w.kind == CommKind::AllReduce || w.kind == CommKind::ReduceScatter || (w.kind == CommKind::Reduce && rank() == w.root)))
      divide(w.output, size());
    w.finish(w.kind == CommKind::Recv ? status.MPI_SOURCE : -1);
    return true;
  }

 private:
  // Advances the shared-memory all-reduce as far as the other ranks allow; true once it has finished. The
  // operations run one at a time, in the order they started (the same on every rank).
  bool test_shm(Work& w, MpiOperation& o) {
    o.behind = -1;
    if (shm_queue_.front() != w.id) return false;
    ShmArena& a = *shm_;
    const Tensor& t = w.output;
    const size_t item = t.itemsize();
    const int64_t n = t.numel(), per_chunk = static_cast<int64_t>(a.slot / item);
    char* base = static_cast<char*>(t.raw_data());
    const int me = rank(), p = size();
    for (;;) {
      if (o.phase == 0) {  // a new chunk: every rank has finished reading the slots for the last one
        if ((o.behind = a.behind(kDone, a.sequence)) >= 0) return false;
        o.length = std::min(per_chunk, n - o.begin);
        // Into my slot go the parts the other ranks fold; my own part is read where it is when I fold it.
        const auto [mb, mlen] = shm_part(o.length, p, me);
        copy_in(w, o.begin, 0, mb, a.data(me), base, item);
        copy_in(w, o.begin, mb + mlen, o.length, a.data(me), base, item);
        ++a.sequence;
        a.advance(me, kPosted, a.sequence);
        o.phase = 1;
      }
      if (o.phase == 1) {  // every rank's chunk is in its slot (mine but my part): fold my part
        if ((o.behind = a.behind(kPosted, a.sequence)) >= 0) return false;
        const auto [b, len] = shm_part(o.length, p, me);
        visit_dtype(t.dtype(), [&]<typename T>() {
          if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
            std::vector<const T*> slots(static_cast<size_t>(p));
            // One fold per stretch of my part that lies in one piece (the whole part when the output is the
            // input): my own values from there, the others' from their slots.
            auto fold = [&](const char* own, int64_t offset, int64_t count) {
              for (int r = 0; r < p; ++r)
                slots[static_cast<size_t>(r)] = reinterpret_cast<const T*>(a.data(r)) + b + offset;
              slots[static_cast<size_t>(me)] = reinterpret_cast<const T*>(own);
              shm_fold<T>(slots, reinterpret_cast<T*>(base) + o.begin + b + offset,
                          reinterpret_cast<T*>(a.data(me)) + b + offset, count, w.op == ReduceOp::Avg);
            };
            if (w.pieces.empty()) fold(base + (o.begin + b) * static_cast<int64_t>(item), 0, len);
            else for_each_piece(w.pieces, o.begin + b, len, fold);
          }
        });
        if (!w.pieces.empty() && o.begin + o.length >= n) Stream::cpu().release_on_host(std::move(w.pieces));
        a.advance(me, kReduced, a.sequence);
        o.phase = 2;
      }
      // every rank has folded its part: copy theirs
      if ((o.behind = a.behind(kReduced, a.sequence)) >= 0) return false;
      for (int r = 0; r < p; ++r) {
        if (r == me) continue;
        const auto [b, len] = shm_part(o.length, p, r);
        std::memcpy(base + (o.begin + b) * static_cast<int64_t>(item), a.data(r) + b * static_cast<int64_t>(item),
                    static_cast<size_t>(len) * item);
      }
      a.advance(me, kDone, a.sequence);
      o.begin += o.length;
      o.phase = 0;
      if (o.begin >= n) {
        shm_queue_.pop_front();
        return true;
      }
    }
  }

  // Elements [lo, hi) of the chunk at `begin` into the slot at dst, from the pieces or from the output.
  static void copy_in(const Work& w, int64_t begin, int64_t lo, int64_t hi, char* dst, const char* base, size_t item) {
    if (lo >= hi) return;
    const int64_t i = static_cast<int64_t>(item);
    if (w.pieces.empty()) std::memcpy(dst + lo * i, base + (begin + lo) * i, static_cast<size_t>(hi - lo) * item);
    else copy_from_pieces(w.pieces, begin + lo, hi - lo, dst + lo * i);
  }

  static int count(const Tensor& t) { return static_cast<int>(t.numel()); }
  MPI_Comm comm_;
  std::unique_ptr<ShmArena> shm_;          // null: every all-reduce goes through MPI
  std::deque<uint64_t> shm_queue_;         // shared-memory all-reduces started and not finished, oldest first
  MPI_Comm gather_comm_ = MPI_COMM_NULL;  // ordered all-reduce's second stage (groups of more than two)
  MPI_Comm check_comm_ = MPI_COMM_NULL;   // the cross-rank check's exchanges
  std::deque<uint64_t> unstarted_;         // collectives waiting to start (their check or an older one's), oldest first
  std::deque<uint64_t> awaiting_gather_;   // ordered all-reduces whose exchange started, oldest first
};

}  // namespace

bool mpi_built() { return true; }
bool mpi_initialized() { return state().initialized && !state().finalized; }

std::shared_ptr<ProcessGroup> init_world(double timeout_s) {
  MpiState& s = state();
  const char* name = "init_process_group";
  DG_CHECK(!s.finalized, Runtime, "[", name, "] MPI was finalized by destroy_process_group and cannot start again in "
           "this process");
  if (s.world) {
    s.world->set_timeout_seconds(timeout_s);
    return s.world;
  }
  int already = 0;
  MPI_Initialized(&already);
  int provided = 0;
  if (!already) check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), name, "MPI_Init_thread");
  else MPI_Query_thread(&provided);
  DG_CHECK(provided >= MPI_THREAD_SERIALIZED, Runtime, "[", name, "] the MPI library provides thread level ", provided,
           "; dygrad's communication thread needs MPI_THREAD_SERIALIZED");
  s.initialized = true;
  // Errors return codes, which become Python exceptions naming the operation, on every communicator and window
  // dygrad makes (set on each) and on MPI_COMM_WORLD, whose default would abort the process inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Type_contiguous(2, MPI_BYTE, &bf16_type);
  MPI_Type_commit(&bf16_type);
  MPI_Type_contiguous(2, MPI_BYTE, &f16_type);
  MPI_Type_commit(&f16_type);
  MPI_Op_create(&half_op<0>, 1, &half_ops[0]);
  MPI_Op_create(&half_op<1>, 1, &half_ops[1]);
  MPI_Op_create(&half_op<2>, 1, &half_ops[2]);
  MPI_Op_create(&half_op<3>, 1, &half_ops[3]);
  MPI_Comm comm;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), name, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  s.comms.push_back(comm);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  int64_t mine[2] = {static_cast<int64_t>(getpid()),
                     static_cast<int64_t>(std::hash<std::string>{}(std::string(host)) & 0x7fffffffffffffff)};
  std::vector<int64_t> all(2 * static_cast<size_t>(size));
  check_mpi(MPI_Allgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, comm), name, "MPI_Allgather");
  s.my_host = mine[1];
  const char* debug = std::getenv("DG_DISTRIBUTED_DEBUG");
  const char* check = std::getenv("DYGRAD_COLLECTIVE_CHECK");
  s.check_default = (check == nullptr || std::string(check) != "0") || (debug && std::string(debug) == "DETAIL");
  for (int i = 0; i < size; ++i) {
    s.pids.push_back(all[2 * static_cast<size_t>(i)]);
    s.hosts.push_back(all[2 * static_cast<size_t>(i) + 1]);
  }
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &s.control), name, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(s.control, MPI_ERRORS_RETURN);
  s.left.assign(static_cast<size_t>(size), -1);
  check_mpi(MPI_Irecv(&s.notice, 1, MPI_INT64_T, MPI_ANY_SOURCE, kLeavingTag, s.control, &s.notice_request), name,
            "MPI_Irecv");
  const char* recovery = std::getenv("OMPI_MCA_orte_enable_recovery");
  s.recovery = recovery && std::string(recovery) == "1";
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) ranks[static_cast<size_t>(i)] = i;
  s.world = std::make_shared<MpiGroup>(comm, rank, size, std::move(ranks), timeout_s);
  return s.world;
}

namespace {

// Tells every other rank that this one leaves (a 4-byte message each, sent eagerly). Bounded: a notice that does
// not complete within a second is abandoned.
void send_notices() {
  MpiState& s = state();
  int me = 0, size = 1;
  MPI_Comm_rank(s.control, &me);
  MPI_Comm_size(s.control, &size);
  const int64_t started = s.world ? static_cast<int64_t>(s.world->operations_started()) : 0;
  std::vector<MPI_Request> sends;
  for (int r = 0; r < size; ++r) {
    if (r == me) continue;
    sends.emplace_back();
    if (MPI_Isend(&started, 1, MPI_INT64_T, r, kLeavingTag, s.control, &sends.back()) != MPI_SUCCESS) sends.pop_back();
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int done = 0;
  while (!sends.empty() && std::chrono::steady_clock::now() < until) {
    if (MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || done)
      return;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// One round of the exit barrier (a non-blocking barrier on the control communicator): whether every rank joined it.
// Under --enable-recovery it waits at most a second: a rank still busy (or blocked waiting for this one, which its
// notice makes fail) is not waited for, and this one leaves MPI unfinalized, which the job survives. Otherwise
// mpirun would end the job over a rank leaving unfinalized, so it waits until the others arrive or one dies.
bool exit_round() {
  MpiState& s = state();
  MPI_Request barrier = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(s.control, &barrier) != MPI_SUCCESS) return false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  auto last_check = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    int done = 0;
    if (MPI_Test(&barrier, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    const auto now = std::chrono::steady_clock::now();
    if (s.recovery && now >= until) return false;
    if (now - last_check > std::chrono::milliseconds(500)) {
      last_check = now;
      if (s.world && !s.world->dead_member().empty()) return false;
    }
    if (polls < 100) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Waits for every rank to reach its own exit and says whether they all did: two rounds. A rank that gave up on the
// first has sent its part of it all the same, so a rank arriving just after (before the first's process ended, so
// not yet known dead) sees its own first round complete; had it then freed the shared-memory windows, a blocking
// barrier, it would have waited forever for the rank that left (a dygrad.train rank 0, after its last evaluation and
// checkpoint: docs/distributed.md). Only ranks whose first round completed join the second, so it completes only
// when none gave up, and the ranks that finalize are all the ranks.
bool everyone_at_exit() { return exit_round() && exit_round(); }

}  // namespace

std::shared_ptr<ProcessGroup> world() { return mpi_initialized() ? state().world : nullptr; }

void finalize() {
  MpiState& s = state();
  if (!s.initialized || s.finalized) {
    stop_comm_thread();
    return;
  }
  // Freeing a shared-memory window is collective (a barrier among its ranks; MPI_Finalize frees those left): with a
  // member of this machine gone it would wait forever, so the process then leaves MPI unfinalized, as after a
  // timeout, and its exit unmaps the windows.
  bool broken = s.world && (s.world->broken() || (!s.windows.empty() && !s.world->dead_member().empty()));
  if (!broken) {
    Stream::cpu().synchronize();
    stop_comm_thread();
    // The communication thread is stopped: the host makes the MPI calls now. Peers waiting for this rank are told
    // it leaves; MPI is finalized only when every rank is at its exit (finalizing is a barrier).
    send_notices();
    broken = !everyone_at_exit();
  }
  if (!broken) {
    if (s.notice_request != MPI_REQUEST_NULL) {
      MPI_Cancel(&s.notice_request);
      MPI_Wait(&s.notice_request, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&s.control);
    for (MPI_Win& w : s.windows) MPI_Win_free(&w);
    s.windows.clear();
    for (MPI_Comm& c : s.comms) MPI_Comm_free(&c);
    s.comms.clear();
    for (MPI_Op& op : half_ops) MPI_Op_free(&op);
    MPI_Type_free(&bf16_type);
    MPI_Type_free(&f16_type);
    MPI_Finalize();
  }
  // After a timeout a collective is still pending in MPI, which cannot cancel it: MPI_Finalize would wait for it
  // forever, so the process leaves MPI unfinalized (mpirun reports the rank as failed, which it has). The same
  // when a member has died (above).
  s.finalized = true;
  s.world.reset();
}

#endif

}  // namespace dg::dist
