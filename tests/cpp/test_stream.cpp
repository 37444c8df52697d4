// The stream executor: async and synchronize mode agree, back-pressure bounds the queue, deferred kernel
// errors poison their outputs and are raised once at the next sync point, small Tasks run inline on an idle
// stream with the same results (docs/stream.md, docs/async-errors.md). The async tests run twice, with
// inline execution of small Tasks on ("Stream/StreamModes.*/inline") and off (".../queued").
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dygrad/ops/dispatch.h"
#include "dygrad/runtime/op_sink.h"
#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {

// --- a test-only op -----------------------------------------------------------------------------------
// test_checked_copy: out[N] = in[N] (contiguous), but its kernel first checks a data-dependent condition
// the way an indexing kernel checks an index range: bad_index != 0 is "index out of range" and throws
// dg::Error inside the kernel. The kernel also waits on a gate, so a test can hold the worker and prove
// that the call returned before the kernel ran. `queued` declares the Task expensive (its cost model
// says 1 Gflop), so it is always queued: a gated Task must never run inline on the host.
struct CheckedCopyAttrs {
  static constexpr const char* kName = "CheckedCopyAttrs";
  int64_t bad_index = 0;
  bool queued = false;
  DG_ATTRS_FIELDS(bad_index, queued);
};
std::atomic<bool> g_gate_open{true};
std::atomic<int> g_checked_copy_runs{0};
constexpr bool kQueued = true;

void checked_copy_kernel(Task& task) {
  while (!g_gate_open.load(std::memory_order_acquire)) std::this_thread::yield();
  g_checked_copy_runs.fetch_add(1, std::memory_order_relaxed);
  const Tensor& in = task.inputs[0];
  const Tensor& out = task.outputs[0];
  const int64_t bad_index = task.attrs.get<CheckedCopyAttrs>().bad_index;
  DG_CHECK(bad_index == 0, Index, "[test_checked_copy] index ", bad_index,
           " is out of bounds for dimension 0 with size ", in.numel());
  std::memcpy(out.raw_data(), in.raw_data(), static_cast<size_t>(in.numel()) * in.itemsize());
}
OpCost checked_copy_cost(const Task& task) {
  const double bytes = 2.0 * double(task.inputs[0].numel()) * double(task.inputs[0].itemsize());
  return {task.attrs.get<CheckedCopyAttrs>().queued ? 1e9 : 0.0, bytes};
}
const OpDef op_test_checked_copy("test_checked_copy", attrs_type<CheckedCopyAttrs>(), {.cost = checked_copy_cost});
DG_REGISTER_KERNEL(test_checked_copy, Device::Type::CPU, checked_copy_kernel);

Tensor checked_copy(const Tensor& a, int64_t bad_index = 0, bool queued = false) {
  DG_CHECK(a.is_contiguous(), Value, "[test_checked_copy] expects a contiguous input");
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  enqueue(op_test_checked_copy, {a}, {out}, CheckedCopyAttrs{bad_index, queued});
  return out;
}

// test_probe: out[N] = in[N] + 1 (float32, contiguous), a cheap Task that records the thread running it.
std::mutex g_probe_mutex;
std::thread::id g_probe_thread;

void probe_kernel(Task& task) {
  {
    std::lock_guard<std::mutex> lock(g_probe_mutex);
    g_probe_thread = std::this_thread::get_id();
  }
  const float* in = task.inputs[0].data<float>();
  float* out = task.outputs[0].data<float>();
  for (int64_t i = 0; i < task.inputs[0].numel(); ++i) out[i] = in[i] + 1.0f;
}
const OpDef op_test_probe("test_probe", nullptr, {.fusion = FusionClass::Elementwise});
DG_REGISTER_KERNEL(test_probe, Device::Type::CPU, probe_kernel);

Tensor probe(const Tensor& a) {
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  enqueue(op_test_probe, {a}, {out});
  return out;
}
std::thread::id probe_thread() {
  std::lock_guard<std::mutex> lock(g_probe_mutex);
  return g_probe_thread;
}

// Closes the gate for its lifetime (opens it again even when an assertion returns early).
// The run-ahead bound is off while the gate holds the worker: a host that waited for the held Tasks would never
// open the gate (a program never holds the stream; a held device launcher is exempt, Stream::set_paused).
struct GateClosed {
  uint64_t saved_bound = Stream::cpu().run_ahead_limit_ns();
  GateClosed() {
    Stream::cpu().set_run_ahead_limit_ns(0);
    g_gate_open.store(false, std::memory_order_release);
  }
  ~GateClosed() {
    g_gate_open.store(true, std::memory_order_release);
    Stream::cpu().set_run_ahead_limit_ns(saved_bound);
  }
};

// Opens the gate after `ms` on another thread.
struct GateOpener {
  std::atomic<bool> opened{false};
  std::thread thread;
  explicit GateOpener(int ms) : thread([this, ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    opened.store(true);
    g_gate_open.store(true, std::memory_order_release);
  }) {}
  ~GateOpener() { thread.join(); }
};

// Leaves the stream idle and without a pending error (a failed earlier test must not leak into this one).
void drain() {
  g_gate_open.store(true);
  for (int i = 0; i < 2; ++i) {
    try {
      Stream::cpu().synchronize();
    } catch (const Error&) {
    }
  }
}

struct SynchronizeMode {
  explicit SynchronizeMode(bool on) : saved_(synchronize_enabled()) { set_synchronize(on); }
  ~SynchronizeMode() { set_synchronize(saved_); }
  bool saved_;
};

struct InlineSmallOps {
  explicit InlineSmallOps(bool on) : saved_(inline_small_ops_enabled()) { set_inline_small_ops(on); }
  ~InlineSmallOps() { set_inline_small_ops(saved_); }
  bool saved_;
};

// The async tests, with inline execution of small Tasks on (param true) and off.
class StreamModes : public ::testing::TestWithParam<bool> {
 protected:
  StreamModes() : mode_(GetParam()) {}
  InlineSmallOps mode_;
};

// Records what the worker runs and checks the queue bound at every enqueue (as a process op sink, told each Task the
// stream numbers).
struct RecordingObserver : StreamObserver, OpSink {
  std::mutex mutex;
  std::vector<std::string> begun;  // op names in the order their kernels began
  std::vector<uint64_t> begun_seq;
  std::atomic<uint64_t> max_in_flight{0};
  std::atomic<uint64_t> enqueues{0};
  std::atomic<int> failed{0};

  void on_enqueued(const Task& task) override {
    // The Task is in its slot but not yet published: it and every unfinished earlier Task are in flight.
    uint64_t in_flight = task.seq - Stream::cpu().completed();
    uint64_t m = max_in_flight.load();
    while (in_flight > m && !max_in_flight.compare_exchange_weak(m, in_flight)) {
    }
    enqueues.fetch_add(1);
  }
  void on_task_begin(const Task& task) override {
    std::lock_guard<std::mutex> lock(mutex);
    begun.push_back(task.op->name);
    begun_seq.push_back(task.seq);
  }
  void on_task_end(const Task&, bool task_failed) override {
    if (task_failed) failed.fetch_add(1);
  }
  int count(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex);
    int n = 0;
    for (const auto& b : begun) n += b == name;
    return n;
  }
};

// Installs an observer for its lifetime; the stream is drained before it is removed.
struct ObserverScope {
  RecordingObserver* observer;
  explicit ObserverScope(RecordingObserver* o) : observer(o) {
    Stream::cpu().set_observer(o);
    op_sinks::add_process_sink(*o);
  }
  ~ObserverScope() {
    drain();
    op_sinks::remove_process_sink(*observer);
    Stream::cpu().set_observer(nullptr);
  }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A chain of ops covering binary, scalar, broadcast, strided-view, in-place and reduction paths.
std::vector<std::vector<double>> op_chain(DType dtype) {
  Tensor a = random_tensor({37, 53}, dtype, 11);
  Tensor b = random_tensor({53}, dtype, 12);
  Tensor c = random_tensor({53, 37}, dtype, 13);
  Tensor x = mul(add(a, b), a);
  Tensor y = sub(x, div(b, add(mul(a, a), 2.0)));
  Tensor z = add(y, transpose(c, 0, 1), 0.5);  // a strided view operand
  Tensor w = neg(rdiv(add(mul(z, z), 1.0), 3.0));
  add_(w, b);
  mul_(w, 1.25);
  Tensor s0 = sum(w, Shape{0});
  Tensor s1 = mean(w, Shape{1}, true);
  Tensor total = sum(w);
  return {w.to_vector<double>(), s0.to_vector<double>(), s1.to_vector<double>(), total.to_vector<double>()};
}

}  // namespace

TEST_P(StreamModes, AsyncAndSynchronizeModeAgreeBitwise) {
  drain();
  for (DType dtype : {DType::Float32, DType::Float64}) {
    auto async_result = op_chain(dtype);
    std::vector<std::vector<double>> sync_result;
    {
      SynchronizeMode mode(true);
      sync_result = op_chain(dtype);
    }
    ASSERT_EQ(async_result.size(), sync_result.size());
    for (size_t k = 0; k < async_result.size(); ++k) {
      ASSERT_EQ(async_result[k].size(), sync_result[k].size());
      EXPECT_EQ(0, std::memcmp(async_result[k].data(), sync_result[k].data(), async_result[k].size() * sizeof(double)))
          << "output " << k << " differs between async and synchronize mode (" << dtype_name(dtype) << ")";
    }
  }
}

TEST(Stream, SynchronizeModeRunsEachTaskBeforeTheCallReturns) {
  drain();
  SynchronizeMode mode(true);
  // Flip modes several times right after async work: the worker is still spinning when inline Tasks run.
  for (int round = 0; round < 200; ++round) {
    set_synchronize(false);
    Tensor a = full(Shape{4}, round);
    Tensor b = add(a, 1.0);
    set_synchronize(true);
    Tensor c = mul(b, 2.0);
    EXPECT_EQ(Stream::cpu().completed(), Stream::cpu().enqueued());
    EXPECT_EQ(c.storage().last_write_seq(), Stream::cpu().completed());
    ASSERT_EQ(c.to_vector<float>(), std::vector<float>(4, 2.0f * (round + 1)));
  }
}

TEST_P(StreamModes, CallReturnsBeforeTheKernelRunsAndSyncWaits) {
  drain();
  Tensor a = from_vector<float>({1, 2, 3}, Shape{3});
  a.wait_readable();
  const int64_t allocated_before = CachingAllocator::cpu().stats().allocated;
  Tensor out;
  uint64_t seq = 0;
  {
    GateClosed gate;
    out = checked_copy(a, 0, kQueued);
    seq = out.storage().last_write_seq();
    // The kernel is held at the gate: the call has returned, its output is allocated on the host already.
    EXPECT_LT(Stream::cpu().completed(), seq);
    EXPECT_EQ(CachingAllocator::cpu().stats().allocated, allocated_before + 3 * 4);
  }
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 3}));  // a sync point: waits for the producer
  EXPECT_GE(Stream::cpu().completed(), seq);
}

TEST_P(StreamModes, TasksRunInEnqueueOrder) {
  drain();
  RecordingObserver observer;
  {
    ObserverScope scope(&observer);
    Tensor x = zeros(Shape{8});
    for (int i = 0; i < 500; ++i) x = add(x, 1.0);
    EXPECT_EQ(x.to_vector<float>(), std::vector<float>(8, 500.0f));
  }
  std::lock_guard<std::mutex> lock(observer.mutex);
  ASSERT_EQ(observer.begun_seq.size(), 501u);
  for (size_t i = 1; i < observer.begun_seq.size(); ++i) EXPECT_EQ(observer.begun_seq[i], observer.begun_seq[i - 1] + 1);
}

TEST_P(StreamModes, ManyTinyOpsWithoutSyncStayWithinTheQueueBound) {
  drain();
  constexpr int kOps = 100000;
  RecordingObserver observer;
  std::vector<Tensor> kept;
  Tensor x;
  int64_t allocated_start = 0, peak_delta = 0;
  {
    ObserverScope scope(&observer);
    x = zeros(Shape{1});
    x.wait_readable();
    allocated_start = CachingAllocator::cpu().stats().allocated;
    CachingAllocator::cpu().reset_peak();
    for (int i = 1; i <= kOps; ++i) {
      x = add(x, 1.0);
      if (i % 1000 == 0) kept.push_back(x);
    }
    Stream::cpu().synchronize();
    peak_delta = CachingAllocator::cpu().stats().peak_allocated - allocated_start;
  }
  EXPECT_EQ(observer.enqueues.load(), static_cast<uint64_t>(kOps) + 1);  // and zeros()
  EXPECT_LE(observer.max_in_flight.load(), Stream::kCapacity);
  EXPECT_GE(observer.max_in_flight.load(), 1u);
  EXPECT_EQ(x.item<float>(), static_cast<float>(kOps));
  for (size_t k = 0; k < kept.size(); ++k) ASSERT_EQ(kept[k].item<float>(), 1000.0f * static_cast<float>(k + 1));
  // Outputs are allocated at enqueue and freed when their Task and the host drop them: the queue bound
  // also bounds memory (each value is 4 bytes; the kept ones, the queue and a few in hand).
  EXPECT_LE(peak_delta, static_cast<int64_t>((Stream::kCapacity + kept.size() + 8) * 4));
}

// The in-flight allocation window: with a limit, a host that allocates faster than the (held) worker runs
// waits at enqueue; without one it runs ahead up to the queue bound. Results are the same either way.
TEST_P(StreamModes, InflightAllocationWindowMakesTheHostWait) {
  drain();
  Stream& stream = Stream::cpu();
  const uint64_t saved = stream.inflight_allocation_limit();
  const Tensor src = zeros(Shape{256 * 1024});  // 1 MiB
  stream.synchronize();
  constexpr int kCopies = 6;
  // No limit: every copy is enqueued while the worker is held.
  {
    stream.set_inflight_allocation_limit(0);
    std::vector<Tensor> outs;
    GateClosed gate;
    const uint64_t done_before = stream.completed();
    for (int i = 0; i < kCopies; ++i) outs.push_back(checked_copy(src, 0, kQueued));
    EXPECT_EQ(stream.completed(), done_before);
  }
  stream.synchronize();
  // A 2.5 MiB window: the host cannot enqueue the fourth copy before the first ones ran, so the gate
  // (opened by another thread after a while) must have opened before the loop ends.
  {
    stream.set_inflight_allocation_limit(5 * (uint64_t{1} << 19));
    g_gate_open.store(false);
    GateOpener opener(100);
    std::vector<Tensor> outs;
    for (int i = 0; i < kCopies; ++i) outs.push_back(checked_copy(src, 0, kQueued));
    EXPECT_TRUE(opener.opened.load());
    stream.synchronize();
    for (const Tensor& t : outs) EXPECT_EQ(sum(t).item<float>(), 0.0f);
  }
  stream.set_inflight_allocation_limit(saved);
  drain();
}

// The run-ahead bound: with a bound below one Task's estimate, the host waits at each enqueue until the queue is
// empty, so with the worker held it cannot enqueue the second copy before the gate (opened by another thread after
// a while) has opened; without a bound it enqueues them all while the worker is held. Results are the same.
TEST_P(StreamModes, RunAheadBoundMakesTheHostWait) {
  drain();
  Stream& stream = Stream::cpu();
  const uint64_t saved = stream.run_ahead_limit_ns();
  const Tensor src = zeros(Shape{256 * 1024});
  stream.synchronize();
  constexpr int kCopies = 4;
  {
    GateClosed gate;  // the bound off
    std::vector<Tensor> outs;
    const uint64_t done_before = stream.completed();
    for (int i = 0; i < kCopies; ++i) outs.push_back(checked_copy(src, 0, kQueued));
    EXPECT_EQ(stream.completed(), done_before);
  }
  stream.synchronize();
  stream.set_run_ahead_limit_ns(1);
  stream.reset_run_ahead_stats();
  {
    g_gate_open.store(false);
    GateOpener opener(100);
    std::vector<Tensor> outs;
    for (int i = 0; i < kCopies; ++i) outs.push_back(checked_copy(src, 0, kQueued));
    EXPECT_TRUE(opener.opened.load());
    stream.synchronize();
    EXPECT_GE(stream.run_ahead_stats().waits, uint64_t{1});
    EXPECT_EQ(stream.run_ahead_stats().max_queued_ns, uint64_t{0});  // never a Task queued behind another
    for (const Tensor& t : outs) EXPECT_EQ(sum(t).item<float>(), 0.0f);
  }
  stream.set_run_ahead_limit_ns(saved);
  drain();
}

TEST_P(StreamModes, WorkerWakesAfterSleeping) {
  drain();
  // The worker sleeps after ~100us without work; an enqueue must wake it (no lost wake-up), whatever the gap.
  // x is too large to run inline; the small ops before it may run inline (the worker sleeps meanwhile).
  const int gaps_us[] = {0, 1, 20, 90, 110, 150, 400, 2000, 5000};
  Tensor x = zeros(Shape{4096});
  Tensor small = zeros(Shape{2});
  float expected = 0;
  for (int round = 0; round < 3; ++round)
    for (int gap : gaps_us) {
      std::this_thread::sleep_for(std::chrono::microseconds(gap));
      for (int i = 0; i < 50; ++i) small = add(small, 1.0);
      x = add(x, 1.0);
      expected += 1;
      ASSERT_EQ(x.to_vector<float>(), std::vector<float>(4096, expected)) << "gap " << gap << "us";
      ASSERT_EQ(small.to_vector<float>(), std::vector<float>(2, 50 * expected)) << "gap " << gap << "us";
    }
}

TEST_P(StreamModes, SeveralHostThreadsEnqueue) {
  drain();
  constexpr int kThreads = 3, kOps = 2000;
  std::vector<float> results(kThreads, -1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &results] {
      Tensor x = full(Shape{16}, t);
      for (int i = 0; i < kOps; ++i) x = add(x, 1.0);
      results[t] = sum(x).item<float>();
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(results[t], 16.0f * (t + kOps)) << "thread " << t;
}

TEST_P(StreamModes, DeferredErrorIsRaisedOnceAtTheNextSyncPoint) {
  drain();
  RecordingObserver observer;
  ObserverScope scope(&observer);
  Tensor a = from_vector<float>({1, 2, 3}, Shape{3});
  const int runs_before = g_checked_copy_runs.load();
  const uint32_t line = __LINE__ + 5;
  Tensor bad, dependent, dependent_twice, independent;
  {
    GateClosed gate;  // the failing kernel cannot have run when the call returns
    CallSiteScope site(CallSite{__FILE__, "DeferredErrorTest", line});
    bad = checked_copy(a, 7, kQueued);  // returns at once: the index is checked in the kernel
    EXPECT_LT(Stream::cpu().completed(), bad.storage().last_write_seq());
    dependent = add(bad, 1.0);                 // reads the poisoned buffer: skipped
    dependent_twice = checked_copy(dependent);  // skipped too: the poison propagates
    independent = mul(a, 2.0);                 // does not depend on the failure: runs
  }
  try {
    Stream::cpu().synchronize();
    FAIL() << "the deferred error was not raised at synchronize()";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Index);
    EXPECT_TRUE(contains(message, "[test_checked_copy] index 7 is out of bounds")) << message;
    EXPECT_TRUE(contains(message, std::string(__FILE__) + ":" + std::to_string(line))) << message;
    EXPECT_TRUE(contains(message, "DeferredErrorTest")) << message;
  }
  // Raised exactly once: later sync points are clean, and the stream is usable.
  EXPECT_NO_THROW(Stream::cpu().synchronize());
  EXPECT_EQ(independent.to_vector<float>(), (std::vector<float>{2, 4, 6}));
  Tensor later = add(a, a);
  EXPECT_EQ(later.to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(g_checked_copy_runs.load() - runs_before, 1);  // only the failing Task's kernel ran
  EXPECT_EQ(observer.count("add_scalar"), 0);              // `dependent` was skipped
  EXPECT_EQ(observer.count("add"), 1);                     // `later`
  EXPECT_EQ(observer.failed.load(), 1);
  // Reading a poisoned tensor later raises a clear error naming the failed op.
  for (const Tensor* t : {&bad, &dependent, &dependent_twice}) {
    try {
      t->to_vector<float>();
      FAIL() << "reading a poisoned tensor did not raise";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Runtime);
      EXPECT_TRUE(contains(e.what(), "tensor data is invalid")) << e.what();
      EXPECT_TRUE(contains(e.what(), "[test_checked_copy] index 7")) << e.what();
    }
  }
  // An op that reads the poisoned tensor now is skipped as well; it raises nothing new at sync.
  Tensor again = add(dependent, 1.0);
  EXPECT_NO_THROW(Stream::cpu().synchronize());
  EXPECT_THROW(again.item_scalar(), Error);
}

TEST_P(StreamModes, DeferredErrorRaisedByReadingADependentTensor) {
  drain();
  Tensor a = from_vector<float>({1, 2}, Shape{2});
  Tensor bad = checked_copy(a, 3);
  Tensor dependent = mul(bad, bad);
  // The first sync point is a read: it raises the kernel's own error ...
  try {
    dependent.to_vector<float>();
    FAIL() << "expected the deferred error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Index);
    EXPECT_TRUE(contains(e.what(), "[test_checked_copy] index 3")) << e.what();
  }
  // ... and later reads say the data is invalid; synchronize() has nothing left to raise.
  EXPECT_THROW(dependent.to_vector<float>(), Error);
  EXPECT_NO_THROW(Stream::cpu().synchronize());
  EXPECT_EQ(add(a, 1.0).to_vector<float>(), (std::vector<float>{2, 3}));
}

TEST_P(StreamModes, OnlyTheFirstOfSeveralFailuresIsPending) {
  drain();
  Tensor a = from_vector<float>({1}, Shape{1});
  Tensor first = checked_copy(a, 1);
  Tensor second = checked_copy(a, 2);
  try {
    Stream::cpu().synchronize();
    FAIL() << "expected the deferred error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "index 1 ")) << e.what();
  }
  EXPECT_NO_THROW(Stream::cpu().synchronize());
  // Each poisoned tensor names its own failure.
  try {
    second.item<float>();
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "index 2 ")) << e.what();
  }
}

TEST(Stream, SynchronizeModeRaisesKernelErrorsAtTheCall) {
  drain();
  SynchronizeMode mode(true);
  Tensor a = from_vector<float>({1, 2, 3}, Shape{3});
  const uint32_t line = __LINE__ + 3;
  try {
    CallSiteScope site(CallSite{__FILE__, "SyncModeTest", line});
    checked_copy(a, 5);
    FAIL() << "synchronize mode did not raise at the call";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Index);
    EXPECT_TRUE(contains(e.what(), "[test_checked_copy] index 5")) << e.what();
    EXPECT_TRUE(contains(e.what(), std::string(__FILE__) + ":" + std::to_string(line))) << e.what();
  }
  EXPECT_NO_THROW(Stream::cpu().synchronize());  // raised once, at the call
  EXPECT_EQ(checked_copy(a).to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST_P(StreamModes, MetadataErrorsAreRaisedAtTheCallAndEnqueueNothing) {
  drain();
  Tensor a = zeros(Shape{2, 3});
  Tensor b = zeros(Shape{4});
  const uint64_t enqueued = Stream::cpu().enqueued();
  EXPECT_THROW(add(a, b), Error);
  EXPECT_EQ(Stream::cpu().enqueued(), enqueued);
  EXPECT_NO_THROW(Stream::cpu().synchronize());
}

INSTANTIATE_TEST_SUITE_P(Stream, StreamModes, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& mode) { return mode.param ? "inline" : "queued"; });

// --- inline execution of small Tasks (docs/stream.md, "Inline execution") ---------------------------------

TEST(StreamInline, SmallTaskOnAnIdleStreamRunsOnTheCallingThread) {
  drain();
  Tensor a = from_vector<float>({1, 2, 3}, Shape{3});
  a.wait_readable();
  {
    InlineSmallOps mode(true);
    const uint64_t before = Stream::cpu().enqueued();
    Tensor out = probe(a);
    // Ran before the call returned, on this thread, and counted as published and completed.
    EXPECT_EQ(probe_thread(), std::this_thread::get_id());
    EXPECT_EQ(Stream::cpu().enqueued(), before + 1);
    EXPECT_EQ(Stream::cpu().completed(), before + 1);
    EXPECT_EQ(out.storage().last_write_seq(), before + 1);
    EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{2, 3, 4}));
  }
  {
    InlineSmallOps mode(false);
    Tensor out = probe(a);
    EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{2, 3, 4}));
    EXPECT_NE(probe_thread(), std::this_thread::get_id());  // the worker ran it
  }
}

TEST(StreamInline, ExpensiveTaskOnAnIdleStreamIsQueued) {
  drain();
  InlineSmallOps mode(true);
  Tensor a = from_vector<float>({1, 2, 3}, Shape{3});
  a.wait_readable();
  GateClosed gate;
  Tensor out = checked_copy(a, 0, kQueued);
  EXPECT_LT(Stream::cpu().completed(), out.storage().last_write_seq());  // held at the gate on the worker
  g_gate_open.store(true, std::memory_order_release);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(StreamInline, SmallTaskBehindQueuedWorkIsQueuedAndSeesItsResult) {
  drain();
  InlineSmallOps mode(true);
  Tensor a = from_vector<float>({1, 2, 3}, Shape{3});
  a.wait_readable();
  Tensor copied, probed;
  {
    GateClosed gate;
    copied = checked_copy(a, 0, kQueued);  // held at the gate on the worker
    probed = probe(copied);                // cheap, but the stream is busy: queued behind it
    EXPECT_LT(Stream::cpu().completed(), probed.storage().last_write_seq());
  }
  EXPECT_EQ(probed.to_vector<float>(), (std::vector<float>{2, 3, 4}));  // read the copy, after it was written
  EXPECT_NE(probe_thread(), std::this_thread::get_id());
}

TEST(StreamInline, KernelErrorInAnInlineTaskIsDeferred) {
  drain();
  InlineSmallOps mode(true);
  Tensor a = from_vector<float>({1, 2, 3}, Shape{3});
  a.wait_readable();
  const int runs_before = g_checked_copy_runs.load();
  const uint32_t line = __LINE__ + 4;
  Tensor bad;
  {
    CallSiteScope site(CallSite{__FILE__, "InlineErrorTest", line});
    EXPECT_NO_THROW(bad = checked_copy(a, 9));  // not raised at the call, as in async mode
  }
  EXPECT_EQ(g_checked_copy_runs.load() - runs_before, 1);  // it ran inline, before the call returned
  EXPECT_EQ(Stream::cpu().completed(), bad.storage().last_write_seq());
  EXPECT_EQ(bad.storage().poisoned_by(), bad.storage().last_write_seq());
  Tensor dependent = probe(bad);  // skipped: reads a poisoned buffer
  try {
    Stream::cpu().synchronize();
    FAIL() << "the deferred error was not raised at synchronize()";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Index);
    EXPECT_TRUE(contains(e.what(), "[test_checked_copy] index 9 is out of bounds")) << e.what();
    EXPECT_TRUE(contains(e.what(), std::string(__FILE__) + ":" + std::to_string(line))) << e.what();
    EXPECT_TRUE(contains(e.what(), "InlineErrorTest")) << e.what();
  }
  EXPECT_NO_THROW(Stream::cpu().synchronize());  // raised once
  EXPECT_THROW(dependent.to_vector<float>(), Error);
  EXPECT_EQ(probe(a).to_vector<float>(), (std::vector<float>{2, 3, 4}));  // the stream goes on
}

TEST(StreamInline, SeveralHostThreadsMixCheapAndExpensiveOps) {
  drain();
  InlineSmallOps mode(true);
  // Each thread chains small ops (inline whenever the stream happens to be idle) on the results of large
  // ones (always queued: 16 KiB and more), with reads in between that leave the stream idle now and then.
  constexpr int kThreads = 4, kRounds = 300;
  std::vector<std::vector<float>> small_results(kThreads), big_results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &small_results, &big_results] {
      Tensor small = full(Shape{16}, t);
      Tensor big = full(Shape{4096}, t);
      for (int i = 0; i < kRounds; ++i) {
        big = add(big, 1.0);          // queued
        Tensor m = mean(big);         // queued: reads 16 KiB; its output is one element
        small = add(small, m);        // small: inline when nothing is queued
        small = sub(small, m);
        small = add(small, 1.0);
        if (i % 25 == 0) {
          EXPECT_EQ(small.to_vector<float>(), std::vector<float>(16, float(t + i + 1))) << "thread " << t;
        }
      }
      small_results[t] = small.to_vector<float>();
      big_results[t] = big.to_vector<float>();
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(small_results[t], std::vector<float>(16, float(t + kRounds))) << "thread " << t;
    EXPECT_EQ(big_results[t], std::vector<float>(4096, float(t + kRounds))) << "thread " << t;
  }
}

TEST(StreamInline, OffWhileAnObserverIsInstalled) {
  drain();
  InlineSmallOps mode(true);
  RecordingObserver observer;
  Tensor a = from_vector<float>({1, 2, 3}, Shape{3});
  a.wait_readable();
  {
    ObserverScope scope(&observer);
    Tensor out = probe(a);
    EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{2, 3, 4}));
    EXPECT_NE(probe_thread(), std::this_thread::get_id());  // the profiler sees the worker run it
  }
  EXPECT_EQ(observer.count("test_probe"), 1);
}

// docs/async-errors.md, "The poisoned-input rule": a Task skipped because an input is poisoned writes
// nothing; an output that held data from before the failure keeps it and stays readable, one first written
// after it is poisoned; the skip is covered by the original error (raised once).
TEST(StreamPoisonedInputs, SkippedTaskKeepsStateFromBeforeTheFailure) {
  drain();
  Tensor state = from_vector<float>({1, 2, 3}, Shape{3});
  Tensor accumulated = mul(state, 10.0);  // made before the failure
  Tensor bad = checked_copy(state, 7, kQueued);
  Tensor temporary = mul(state, 2.0);     // made after the failure
  add_(state, bad);
  add_(accumulated, bad);
  add_(temporary, bad);
  EXPECT_THROW(Stream::cpu().synchronize(), Error);  // the original failure, once
  EXPECT_NO_THROW(Stream::cpu().synchronize());     // the skips were issued before it was raised
  EXPECT_EQ(state.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(accumulated.to_vector<float>(), (std::vector<float>{10, 20, 30}));
  EXPECT_EQ(temporary.storage().poisoned_by(), bad.storage().poisoned_by());
  // Issued after the failure was raised: skipped again, and that is a new error, never a silent no-op.
  add_(state, bad);
  EXPECT_THROW(Stream::cpu().synchronize(), Error);
  EXPECT_EQ(state.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  // A full overwrite makes a poisoned buffer valid again.
  fill_(temporary, 5.0);
  EXPECT_EQ(temporary.to_vector<float>(), (std::vector<float>{5, 5, 5}));
}

TEST(StreamOverlap, InPlaceWriteIntoExpandedMemoryRaisesAtTheCall) {
  Tensor one = from_vector<float>({1}, Shape{1});
  Tensor wide = expand(one, Shape{3});
  EXPECT_THROW(add_(wide, 1.0), Error);
  EXPECT_EQ(one.to_vector<float>(), (std::vector<float>{1}));
}

// --- stream-ordered reuse (docs/memory.md) ---------------------------------------------------------------------
// A buffer the host drops goes back to the allocator at once, even while queued Tasks still read or write it
// (they keep only the Storage object); a later Task may reuse the memory, since the stream runs it after them.
// Host-written allocations take only memory no queued Task uses, and a host thread touching a reused buffer
// waits for those Tasks first.
namespace {
constexpr int64_t kMiB = 1 << 20;
const Shape kOneMiB{kMiB / 4};  // float32
// 40 MiB + 512 bytes: a segment of its own, and no other free block of the cache fits it better.
constexpr int64_t kBigElements = 10 * kMiB + 128;
const Shape kBig{kBigElements};
bool all_equal(const Tensor& t, float value) {
  const std::vector<float> v = t.to_vector<float>();
  return std::all_of(v.begin(), v.end(), [&](float x) { return x == value; });
}
// With the gate closed: queues tmp = copy(src) and *kept = copy(tmp), then drops tmp, which only the two held Tasks
// use now. Returns tmp's address.
const void* queue_copies_and_drop_the_first(const Tensor& src, Tensor* kept) {
  Tensor tmp = checked_copy(src, 0, kQueued);
  *kept = checked_copy(tmp, 0, kQueued);
  return tmp.storage().address();
}
}  // namespace

TEST(StreamOrderedReuse, ABufferTheHostDropsIsFreeAtOnceAndReusedByALaterTask) {
  drain();
  CachingAllocator& allocator = CachingAllocator::cpu();
  const Tensor src = ones(kOneMiB);
  Stream::cpu().synchronize();
  Tensor kept, reused;
  {
    GateClosed gate;
    const int64_t before = allocator.stats().allocated;
    {
      Tensor tmp = checked_copy(src, 0, kQueued);  // held at the gate: tmp is not written yet
      kept = checked_copy(tmp, 0, kQueued);        // reads tmp later
      EXPECT_EQ(allocator.stats().allocated, before + 2 * kMiB);
    }  // only the two queued Tasks hold tmp now
    EXPECT_EQ(allocator.stats().allocated, before + kMiB);  // tmp's bytes are free already
    reused = checked_copy(mul(src, 2.0), 0, kQueued);  // the multiply's output takes tmp's memory
    EXPECT_EQ(Stream::cpu().completed() + 4, Stream::cpu().enqueued());  // nothing ran meanwhile
  }
  Stream::cpu().synchronize();
  EXPECT_EQ(sum(kept).item<float>(), float(kMiB / 4));  // read tmp before the multiply overwrote it
  EXPECT_EQ(sum(reused).item<float>(), float(kMiB / 2));
}

TEST(StreamOrderedReuse, TheReusedMemoryIsTheDroppedBuffers) {
  drain();
  const Tensor src = ones(kBig);
  Stream::cpu().synchronize();
  CachingAllocator::cpu().empty_cache();
  GateClosed gate;
  Tensor kept;
  const void* address = queue_copies_and_drop_the_first(src, &kept);
  Tensor next = checked_copy(src, 0, kQueued);  // the best fit: tmp's block
  EXPECT_EQ(next.storage().address(), address);
  g_gate_open.store(true);
  Stream::cpu().synchronize();
  EXPECT_TRUE(all_equal(kept, 1.0f));
}

TEST(StreamOrderedReuse, HostWrittenBuffersNeverTakeMemoryQueuedTasksStillUse) {
  drain();
  const Tensor src = ones(kBig);
  Stream::cpu().synchronize();
  CachingAllocator::cpu().empty_cache();
  Tensor kept, written;
  {
    GateClosed gate;
    const void* address = queue_copies_and_drop_the_first(src, &kept);
    // from_vector's staging buffer is written by the host now: it must not be tmp's memory, which the held
    // Tasks have yet to write and read.
    written = from_vector<float>(std::vector<float>(kBigElements, 7.0f), kBig);
    EXPECT_NE(written.storage().address(), address);
    EXPECT_EQ(Stream::cpu().completed() + 2, Stream::cpu().enqueued());  // the host did not wait for the gate
  }
  Stream::cpu().synchronize();
  EXPECT_TRUE(all_equal(kept, 1.0f));
  EXPECT_TRUE(all_equal(written, 7.0f));
}

TEST(StreamOrderedReuse, AHostThreadTouchingAReusedBufferWaitsForTheTasksThatUsedIt) {
  drain();
  const Tensor src = ones(kBig);
  Stream::cpu().synchronize();
  CachingAllocator::cpu().empty_cache();
  GateClosed gate;  // opened by a GateOpener below
  Tensor kept;
  queue_copies_and_drop_the_first(src, &kept);
  Tensor raw = Tensor::empty(kBig);  // a C++ caller's buffer: tmp's memory, still in use
  GateOpener opener(100);
  float* p = raw.data<float>();  // waits until the held Tasks have run
  EXPECT_TRUE(opener.opened.load());
  for (int64_t i = 0; i < kBigElements; ++i) p[i] = 3.0f;
  Stream::cpu().synchronize();
  EXPECT_TRUE(all_equal(kept, 1.0f));
  EXPECT_TRUE(all_equal(raw, 3.0f));
}

TEST(StreamOrderedReuse, AViewKeepsTheBufferUntilItIsDroppedToo) {
  drain();
  CachingAllocator& allocator = CachingAllocator::cpu();
  const Tensor src = ones(kOneMiB);
  Stream::cpu().synchronize();
  GateClosed gate;
  const int64_t before = allocator.stats().allocated;
  Tensor tmp = checked_copy(src, 0, kQueued);
  Tensor view = reshape(tmp, Shape{2, kMiB / 8});
  Tensor kept = checked_copy(tmp, 0, kQueued);
  tmp = Tensor();
  EXPECT_EQ(allocator.stats().allocated, before + 2 * kMiB);  // the view still holds the buffer
  view = Tensor();
  EXPECT_EQ(allocator.stats().allocated, before + kMiB);
  g_gate_open.store(true);
  EXPECT_EQ(sum(kept).item<float>(), float(kMiB / 4));
}

TEST(StreamOrderedReuse, EmptyCacheWaitsForTheTasksThatStillUseAFreeSegment) {
  drain();
  CachingAllocator& allocator = CachingAllocator::cpu();
  const Tensor src = ones(Shape{8 * kMiB});  // 32 MiB: a segment of its own
  Stream::cpu().synchronize();
  allocator.empty_cache();
  const int64_t reserved = allocator.stats().reserved;
  GateClosed gate;  // opened by a GateOpener below
  Tensor kept;
  {
    Tensor tmp = checked_copy(src, 0, kQueued);
    kept = sum(tmp);
  }
  const int64_t held = allocator.stats().reserved;
  EXPECT_GE(held, reserved + 32 * kMiB);  // tmp's segment, free but in use by the held Tasks
  allocator.empty_cache(/*wait_for_stream=*/false);
  EXPECT_EQ(allocator.stats().reserved, held);  // kept mapped: the Tasks will still write and read it
  GateOpener opener(100);
  allocator.empty_cache();  // returns it once the held Tasks have run
  EXPECT_TRUE(opener.opened.load());
  EXPECT_LE(allocator.stats().reserved, held - 32 * kMiB);
  EXPECT_EQ(kept.item<float>(), float(8 * kMiB));
}

TEST(StreamOrderedReuse, TaskReferencesAreCountedApart) {
  drain();
  Tensor a = ones(kOneMiB);
  Stream::cpu().synchronize();
  TensorImpl* impl = a.impl();
  {
    GateClosed gate;
    Tensor out = checked_copy(a, 0, kQueued);
    EXPECT_EQ(impl->use_count(), 2);
    EXPECT_EQ(impl->task_use_count(), 1);
    EXPECT_FALSE(impl->only_task_refs());
    Tensor copy = a;  // an ordinary reference more
    EXPECT_EQ(impl->use_count(), 3);
    EXPECT_EQ(impl->task_use_count(), 1);
  }
  Stream::cpu().synchronize();
  EXPECT_EQ(impl->use_count(), 1);  // the slot's reference was reclaimed
  EXPECT_EQ(impl->task_use_count(), 0);
}

TEST(StreamOrderedReuse, ReleaseOnAMissNeverUnmapsMemoryAQueuedTaskStillUses) {
  drain();
  CachingAllocator& allocator = CachingAllocator::cpu();
  const bool expandable = allocator.expandable_segments();
  const double fraction = allocator.release_fraction();
  allocator.set_expandable_segments(true);
  allocator.set_release_fraction(0.0);  // unmap at every miss beyond the minimum margin
  const Tensor src = ones(Shape{8 * kMiB});  // 32 MiB
  Stream::cpu().synchronize();
  allocator.empty_cache();
  Tensor kept;
  {
    GateClosed gate;
    {
      Tensor tmp = checked_copy(src, 0, kQueued);
      kept = checked_copy(tmp, 0, kQueued);
    }  // tmp's 32 MiB are free, and in use by the held Tasks
    const int64_t unmapped = allocator.stats().unmapped_total;
    ASSERT_GE(allocator.stats().reserved - allocator.stats().active, 32 * kMiB);
    // Reused (stream-ordered) and freed by an owner that no Task used, whose free carries no Task number of its
    // own: the block stays in use by the held Tasks (it was unmapped at the next miss, under the reading Task:
    // a segfault in a recomputed LLaMA block's backward).
    { Tensor reused = Tensor::empty(Shape{8 * kMiB}); }
    // A miss with 32 MiB free beyond the margin: the only candidate is tmp's block, which must stay mapped.
    Tensor big = Tensor::empty(Shape{12 * kMiB});
    EXPECT_EQ(allocator.stats().unmapped_total, unmapped);
    allocator.empty_cache(/*wait_for_stream=*/false);
    EXPECT_EQ(allocator.stats().unmapped_total, unmapped);
  }
  Stream::cpu().synchronize();
  EXPECT_TRUE(all_equal(kept, 1.0f));
  const int64_t before = allocator.stats().unmapped_total;
  allocator.empty_cache();  // idle now: unmapped
  EXPECT_GE(allocator.stats().unmapped_total, before + 32 * kMiB);
  allocator.set_expandable_segments(expandable);
  allocator.set_release_fraction(fraction);
}
