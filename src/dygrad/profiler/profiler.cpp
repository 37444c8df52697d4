// Recording: the stream and allocator observers, the per-thread buffers they append to without locks,
// host op scopes and user ranges, and the merge into ProfileData at stop(). See docs/profiler.md.
#include "dygrad/profiler/profiler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>

#include <unordered_map>

#include "dygrad/core/error.h"
#include "dygrad/core/storage_hooks.h"
#include "dygrad/profiler/extras.h"
#include "dygrad/runtime/op_sink.h"
#include "dygrad/runtime/stream.h"

namespace dg::profiler {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace detail {
std::atomic<bool> g_recording{false};
}

namespace {

// A device span as the worker records it; joined with the host's OpRecord by seq at stop().
struct DeviceSpan {
  uint64_t seq;
  const OpDef* op;
  int thread;
  int64_t begin_ns, end_ns;
  bool failed;
  double flops, bytes;  // only for Tasks enqueued before the session began (no OpRecord carries them)
};

// One thread's events in one session. Only the owning thread appends; stop() reads after the threads
// are quiet (the stream is drained, the hooks are removed).
struct ThreadBuffer {
  int index = 0;
  uint64_t os_tid = 0;
  std::vector<OpRecord> ops;
  std::vector<DeviceSpan> device;
  std::vector<RangeRecord> ranges;
  std::vector<MemorySample> memory;
  std::vector<MemoryEvent> memory_events;
  std::vector<std::pair<uint64_t, uint32_t>> op_modules;  // (seq, module scope)
  std::vector<StorageEvent> storage;
  int64_t task_begin_ns = 0;  // the running Task's begin (worker)
};

// Host-side state of the calling thread: open HostOpScopes and RecordFunctions (LIFO), and the last
// host event instant, where the next Task's host span begins while a scope is open.
constexpr int kMaxScopeDepth = 32;
struct ScopeFrame {
  const char* name;
  uint64_t session;
  int64_t begin_ns;
  int direct_tasks;  // Tasks enqueued while this was the innermost scope
  bool has_children;
};
struct UserFrame {
  std::string name;
  uint64_t session;
  int64_t begin_ns;
};
struct HostThreadState {
  ScopeFrame scopes[kMaxScopeDepth];
  int scope_depth = 0;    // may exceed kMaxScopeDepth: deeper frames are not kept
  int64_t last_mark_ns = 0;
  uint64_t last_seq = 0;
  int64_t sync_begin_ns = 0;
  int sync_depth = 0;  // sync points do not nest today; only the outermost is recorded
  // One blocking call may wait several times (item() waits for the value, then for pending releases):
  // consecutive syncs inside one op scope are one range. The scope of the last sync range and its index.
  int64_t last_sync_scope_begin = -1;
  uint64_t last_sync_session = 0;
  size_t last_sync_index = 0;
  std::vector<UserFrame> user;
};

// dygrad uses initial-exec TLS, whose static space is small when Python dlopens the library: the
// profiler keeps three pointers there and its per-thread state on the heap.
thread_local ThreadBuffer* tls_buffer = nullptr;
thread_local uint64_t tls_buffer_session = 0;
thread_local std::unique_ptr<HostThreadState> tls_host;

HostThreadState& host_state() {
  if (!tls_host) tls_host = std::make_unique<HostThreadState>();
  return *tls_host;
}

std::atomic<uint64_t> g_next_session_id{1};
std::atomic<StackProvider> g_stack_provider{nullptr};
std::atomic<Profiler*> g_current{nullptr};

}  // namespace

struct Profiler::Session final : OpSink, StreamObserver, AllocatorObserver, StorageObserver {
  Session(uint64_t id_, const ProfilerOptions& options_) : id(id_), options(options_) {}

  const uint64_t id;
  const ProfilerOptions options;
  uint64_t first_seq[kMaxStreams] = {};  // per stream: Tasks before this were enqueued before start()
  bool before_start(uint64_t event) const { return event_seq(event) < first_seq[event_stream(event)]; }
  std::mutex buffers_mutex;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers;
  std::mutex steps_mutex;
  std::vector<int64_t> steps;
  // The allocator's counters as of its last event, read by the worker at task begin and end.
  std::atomic<int64_t> allocated{0}, reserved{0};
  std::array<std::atomic<int64_t>, kNumMemoryCategories> by_category{};

  // The calling thread's buffer; registering it is the only locked step (once per thread and session).
  ThreadBuffer& buffer() {
    if (tls_buffer_session == id) return *tls_buffer;
    std::lock_guard<std::mutex> lock(buffers_mutex);
    auto b = std::make_unique<ThreadBuffer>();
    b->index = static_cast<int>(buffers.size());
    b->os_tid = static_cast<uint64_t>(::gettid());
    b->ops.reserve(1024);
    b->device.reserve(1024);
    tls_buffer = b.get();
    tls_buffer_session = id;
    buffers.push_back(std::move(b));
    return *tls_buffer;
  }

  void mirror(const MemoryStats& s) {
    allocated.store(s.allocated, std::memory_order_relaxed);
    reserved.store(s.reserved, std::memory_order_relaxed);
    for (int c = 0; c < kNumMemoryCategories; ++c)
      by_category[c].store(s.allocated_by_category[c], std::memory_order_relaxed);
  }

  void sample_memory(ThreadBuffer& b, int64_t ts) {
    MemorySample m;
    m.ts_ns = ts;
    m.allocated = allocated.load(std::memory_order_relaxed);
    m.reserved = reserved.load(std::memory_order_relaxed);
    for (int c = 0; c < kNumMemoryCategories; ++c) m.by_category[c] = by_category[c].load(std::memory_order_relaxed);
    b.memory.push_back(m);
  }

  // The op recording, a process op sink (runtime/op_sink.h): on the host thread, inside Stream::submit, after the
  // Task is built and numbered.
  void on_enqueued(const Task& task) override {
    const int64_t t = now_ns();
    ThreadBuffer& b = buffer();
    HostThreadState& h = host_state();
    OpRecord& r = b.ops.emplace_back();
    const uint64_t key = make_event(task.stream, task.seq);
    r.seq = key;
    r.device = device_of_stream(task.stream);
    r.op = task.op;
    r.name = task.op->name;
    r.host_thread = b.index;
    r.enqueue_ns = t;
    r.host_begin_ns = t;
    if (h.scope_depth > 0 && h.scope_depth <= kMaxScopeDepth) {
      ScopeFrame& f = h.scopes[h.scope_depth - 1];
      if (f.session == id) {
        r.host_begin_ns = std::max(f.begin_ns, h.last_mark_ns);
        ++f.direct_tasks;
      }
    }
    h.last_mark_ns = t;
    h.last_seq = key;
    if (const uint32_t scope = dg::module_scope::current()) b.op_modules.emplace_back(key, scope);
    const OpCost cost = task.cost();
    r.flops = cost.flops;
    r.bytes = cost.bytes;
    r.site = task.site;
    if (options.with_stack)
      if (StackProvider provider = g_stack_provider.load(std::memory_order_acquire)) r.stack = provider();
    if (options.record_shapes) {
      for (const Tensor& in : task.inputs) {
        r.input_shapes.emplace_back(in.defined() ? Dims(in.shape()) : Dims());
        r.input_dtypes.push_back(in.defined() ? in.dtype() : DType::Float32);
      }
      for (const Tensor& out : task.outputs) r.output_shapes.emplace_back(out.defined() ? Dims(out.shape()) : Dims());
    }
  }

  // The thread running the kernel (the stream worker; the host in synchronize mode).
  void on_task_begin(const Task&) override {
    ThreadBuffer& b = buffer();
    b.task_begin_ns = now_ns();
    if (options.profile_memory) sample_memory(b, b.task_begin_ns);
  }

  void on_task_end(const Task& task, bool failed) override {
    const int64_t t = now_ns();
    ThreadBuffer& b = buffer();
    const uint64_t key = make_event(task.stream, task.seq);
    DeviceSpan d{key, task.op, b.index, b.task_begin_ns, t, failed, 0, 0};
    if (before_start(key)) {
      const OpCost cost = task.cost();
      d.flops = cost.flops;
      d.bytes = cost.bytes;
    }
    b.device.push_back(d);
    if (options.profile_memory) sample_memory(b, t);
  }

  // Host thread: a sync point. Recorded as a Sync range named after the innermost open op scope (the API
  // that blocked: "item", "numpy", ...), else "synchronize". Both ends are host events, so the range nests.
  void on_sync_begin() override {
    HostThreadState& h = host_state();
    if (h.sync_depth++ > 0) return;
    h.sync_begin_ns = now_ns();
    if (h.scope_depth > 0 && h.scope_depth <= kMaxScopeDepth) h.scopes[h.scope_depth - 1].has_children = true;
    h.last_mark_ns = h.sync_begin_ns;
  }
  void on_sync_end() override {
    HostThreadState& h = host_state();
    if (h.sync_depth == 0 || --h.sync_depth > 0) return;
    const int64_t t = now_ns();
    h.last_mark_ns = t;
    const char* name = "synchronize";
    int64_t scope_begin = -1;
    if (h.scope_depth > 0 && h.scope_depth <= kMaxScopeDepth && h.scopes[h.scope_depth - 1].session == id) {
      const ScopeFrame& f = h.scopes[h.scope_depth - 1];
      if (f.name) name = f.name;
      scope_begin = f.begin_ns;
    }
    ThreadBuffer& b = buffer();
    if (scope_begin >= 0 && scope_begin == h.last_sync_scope_begin && h.last_sync_session == id &&
        h.last_sync_index + 1 == b.ranges.size() && b.ranges.back().kind == RangeKind::Sync) {
      b.ranges.back().end_ns = t;  // the same call waiting again
      return;
    }
    add_range(RangeKind::Sync, name, h.sync_begin_ns, t, false);
    h.last_sync_scope_begin = scope_begin;
    h.last_sync_session = id;
    h.last_sync_index = b.ranges.size() - 1;
  }

  // Host thread, inside enqueue: the wait ends a host event, so the op's host span starts after it.
  void on_backpressure(const char* reason, int64_t begin_ns, int64_t end_ns) override {
    HostThreadState& h = host_state();
    if (h.scope_depth > 0 && h.scope_depth <= kMaxScopeDepth) h.scopes[h.scope_depth - 1].has_children = true;
    h.last_mark_ns = std::max(h.last_mark_ns, end_ns);
    add_range(RangeKind::Backpressure, reason, begin_ns, end_ns, false);
  }

  // Under the allocator's lock, on the thread that allocated or freed.
  void on_memory_event(MemoryEventKind kind, int64_t nbytes, MemoryCategory category,
                       const MemoryStats& stats) override {
    mirror(stats);
    const int64_t t = now_ns();
    ThreadBuffer& b = buffer();
    b.memory_events.push_back({t, kind, category, nbytes, b.index, tls_host ? tls_host->last_seq : 0});
    MemorySample m;
    m.ts_ns = t;
    m.allocated = stats.allocated;
    m.reserved = stats.reserved;
    m.by_category = stats.allocated_by_category;
    b.memory.push_back(m);
  }

  // Storage lifetimes (core/storage_hooks.h), with profile_memory: on the thread that made the change.
  void add_storage_event(StorageEventKind kind, const void* id, size_t nbytes, MemoryCategory category) {
    ThreadBuffer& b = buffer();
    StorageEvent& e = b.storage.emplace_back();
    e.ts_ns = now_ns();
    e.kind = kind;
    e.id = reinterpret_cast<uint64_t>(id);
    e.nbytes = static_cast<int64_t>(nbytes);
    e.category = category;
    e.thread = b.index;
    e.module = dg::module_scope::current();
    if (kind == StorageEventKind::Allocate) e.site = current_call_site();
  }
  void on_storage_allocate(const void* id, size_t nbytes, MemoryCategory category) override {
    add_storage_event(StorageEventKind::Allocate, id, nbytes, category);
  }
  void on_storage_free(const void* id, size_t nbytes, MemoryCategory category) override {
    add_storage_event(StorageEventKind::Free, id, nbytes, category);
  }
  void on_storage_retag(const void* id, size_t nbytes, MemoryCategory to) override {
    add_storage_event(StorageEventKind::Retag, id, nbytes, to);
  }

  void add_range(RangeKind kind, std::string name, int64_t begin_ns, int64_t end_ns, bool async) {
    ThreadBuffer& b = buffer();
    b.ranges.push_back({kind, std::move(name), b.index, begin_ns, end_ns, async});
  }
};

namespace {
std::atomic<Profiler::Session*> g_session{nullptr};

// extras.h: the extras of stopped sessions.
std::mutex g_extras_mutex;
std::unordered_map<const Profiler*, SessionExtras> g_extras;
}  // namespace

const SessionExtras& extras_of(const Profiler& profiler) {
  static const SessionExtras empty;
  std::lock_guard<std::mutex> lock(g_extras_mutex);
  auto it = g_extras.find(&profiler);
  return it == g_extras.end() ? empty : it->second;
}

// --- host scopes and ranges -------------------------------------------------------------------------------
namespace detail {

void open_host_op(const char* name, int64_t begin_ns) {
  HostThreadState& h = host_state();
  const int64_t t = begin_ns >= 0 ? std::max(begin_ns, h.last_mark_ns) : now_ns();
  Profiler::Session* s = g_session.load(std::memory_order_acquire);
  if (h.scope_depth > 0 && h.scope_depth <= kMaxScopeDepth) h.scopes[h.scope_depth - 1].has_children = true;
  if (h.scope_depth < kMaxScopeDepth) h.scopes[h.scope_depth] = {name, s ? s->id : 0, t, 0, false};
  ++h.scope_depth;
  h.last_mark_ns = t;
}

void close_host_op() {
  HostThreadState& h = host_state();
  if (h.scope_depth <= 0) return;
  --h.scope_depth;
  if (h.scope_depth < kMaxScopeDepth) {
    const ScopeFrame& f = h.scopes[h.scope_depth];
    // One Task and no nested scope: the Task's host span stands for the op, and no range is kept. The last
    // host event stays the enqueue (no clock read): nothing recorded ends here, so nesting still holds.
    if (f.direct_tasks == 1 && !f.has_children) return;
  }
  const int64_t t = now_ns();
  h.last_mark_ns = t;
  if (h.scope_depth >= kMaxScopeDepth) return;
  const ScopeFrame& f = h.scopes[h.scope_depth];
  Profiler::Session* s = g_session.load(std::memory_order_acquire);
  if (s && s->id == f.session) s->add_range(RangeKind::HostOp, f.name ? f.name : "", f.begin_ns, t, false);
}

void open_user_range(std::string_view name) {
  HostThreadState& h = host_state();
  const int64_t t = now_ns();
  Profiler::Session* s = g_session.load(std::memory_order_acquire);
  h.user.push_back({std::string(name), s ? s->id : 0, t});
  if (h.scope_depth > 0 && h.scope_depth <= kMaxScopeDepth) h.scopes[h.scope_depth - 1].has_children = true;
  h.last_mark_ns = t;
}

void close_user_range() {
  HostThreadState& h = host_state();
  if (h.user.empty()) return;
  const int64_t t = now_ns();
  h.last_mark_ns = t;
  UserFrame f = std::move(h.user.back());
  h.user.pop_back();
  Profiler::Session* s = g_session.load(std::memory_order_acquire);
  if (s && s->id == f.session) s->add_range(RangeKind::User, std::move(f.name), f.begin_ns, t, false);
}

}  // namespace detail

void record_data_wait(int64_t begin_ns, int64_t end_ns) {
  if (Profiler::Session* s = g_session.load(std::memory_order_acquire))
    s->add_range(RangeKind::DataWait, "data wait", begin_ns, std::max(begin_ns, end_ns), false);
}

void record_comm(std::string_view name, int64_t begin_ns, int64_t end_ns, bool async) {
  if (Profiler::Session* s = g_session.load(std::memory_order_acquire))
    s->add_range(RangeKind::Comm, std::string(name), begin_ns, std::max(begin_ns, end_ns), async);
}

void record_sub_op(const char* op, const CallSite& site, int64_t begin_ns, int64_t end_ns) {
  if (Profiler::Session* s = g_session.load(std::memory_order_acquire)) {
    std::string name = op;
    if (site.file) name += std::string(" (") + site.file + ":" + std::to_string(site.line) + ")";
    s->add_range(RangeKind::SubOp, std::move(name), begin_ns, std::max(begin_ns, end_ns), false);
  }
}

void step() {
  if (Profiler* p = Profiler::current()) p->step();
}

void set_stack_provider(StackProvider provider) { g_stack_provider.store(provider, std::memory_order_release); }

// --- the session ------------------------------------------------------------------------------------------
Profiler::Profiler(ProfilerOptions options) { data_.options = options; }

Profiler::~Profiler() {
  {
    std::lock_guard<std::mutex> lock(g_extras_mutex);
    g_extras.erase(this);
  }
  if (!active_) return;
  try {
    stop();
  } catch (...) {
    // A deferred kernel error raised by the final sync: the session is closed; a destructor cannot throw.
  }
}

Profiler* Profiler::current() { return g_current.load(std::memory_order_acquire); }

void Profiler::start() {
  DG_CHECK(!active_, Runtime, "[profiler] start() called on a profiler that is already active");
  Profiler* expected = nullptr;
  DG_CHECK(g_current.compare_exchange_strong(expected, this), Runtime,
           "[profiler] another profiler is already active; stop it first");
  const ProfilerOptions options = data_.options;
  data_ = ProfileData();
  data_.options = options;
  session_ = std::make_unique<Session>(g_next_session_id.fetch_add(1), options);
  Stream::cpu();  // made now if no op ran yet, so the loops below see it
  for (int id = 0; id < kMaxStreams; ++id)
    if (Stream* s = Stream::by_id(id)) session_->first_seq[id] = s->enqueued() + 1;
  data_.memory_at_start = CachingAllocator::cpu().stats();
  data_.start_ns = now_ns();
  dg::module_scope::set_tagging(true);  // clears the tags of an earlier session
  if (options.profile_memory) {
    session_->mirror(data_.memory_at_start);
    CachingAllocator::cpu().set_observer(session_.get());
    set_storage_observer(session_.get());
  }
  g_session.store(session_.get(), std::memory_order_release);
  detail::g_recording.store(true, std::memory_order_release);
  // Every device's stream: its worker's (launcher's) kernel spans are the device track (docs/devices.md).
  for (int id = 0; id < kMaxStreams; ++id)
    if (Stream* s = Stream::by_id(id)) s->set_observer(session_.get());
  op_sinks::add_process_sink(*session_);
  active_ = true;
}

void Profiler::step() {
  if (!active_) return;
  const int64_t t = now_ns();
  std::lock_guard<std::mutex> lock(session_->steps_mutex);
  session_->steps.push_back(t);
}

namespace {
// Merges the buffers of a finished session into `data` (every thread is quiet).
void merge_buffers(std::vector<std::unique_ptr<ThreadBuffer>>& buffers, const uint64_t (&first_seq)[kMaxStreams],
                   ProfileData& data) {
  auto before_session = [&](uint64_t event) { return event_seq(event) < first_seq[event_stream(event)]; };
  std::vector<DeviceSpan> device;
  for (auto& b : buffers) {
    ThreadInfo info;
    info.index = b->index;
    info.os_tid = b->os_tid;
    info.host = !b->ops.empty() || !b->ranges.empty();
    info.device = !b->device.empty();
    data.threads.push_back(info);
    for (OpRecord& r : b->ops) data.ops.push_back(std::move(r));
    device.insert(device.end(), b->device.begin(), b->device.end());
    for (RangeRecord& r : b->ranges) data.ranges.push_back(std::move(r));
    // Each thread's samples are in time order: merge the runs instead of sorting.
    const size_t samples = data.memory.size(), events = data.memory_events.size();
    data.memory.insert(data.memory.end(), b->memory.begin(), b->memory.end());
    std::inplace_merge(data.memory.begin(), data.memory.begin() + static_cast<ptrdiff_t>(samples), data.memory.end(),
                       [](const MemorySample& x, const MemorySample& y) { return x.ts_ns < y.ts_ns; });
    data.memory_events.insert(data.memory_events.end(), b->memory_events.begin(), b->memory_events.end());
    std::inplace_merge(data.memory_events.begin(), data.memory_events.begin() + static_cast<ptrdiff_t>(events),
                       data.memory_events.end(), [](const MemoryEvent& x, const MemoryEvent& y) { return x.ts_ns < y.ts_ns; });
  }
  // Join device spans to their OpRecords by seq; a Task enqueued before start() gets a record of its own.
  auto span_by_seq = [](const DeviceSpan& a, const DeviceSpan& b) { return a.seq < b.seq; };
  if (!std::is_sorted(device.begin(), device.end(), span_by_seq)) std::sort(device.begin(), device.end(), span_by_seq);
  auto by_seq = [](const OpRecord& a, const OpRecord& b) { return a.seq < b.seq; };
  // One host thread's records are in seq order already: sorting 100k records is most of stop()'s time.
  if (!std::is_sorted(data.ops.begin(), data.ops.end(), by_seq)) std::sort(data.ops.begin(), data.ops.end(), by_seq);
  size_t op_index = 0;
  std::vector<OpRecord> before_start;
  for (const DeviceSpan& d : device) {
    while (op_index < data.ops.size() && data.ops[op_index].seq < d.seq) ++op_index;
    OpRecord* r = nullptr;
    if (op_index < data.ops.size() && data.ops[op_index].seq == d.seq) {
      r = &data.ops[op_index];
    } else if (before_session(d.seq)) {
      OpRecord& o = before_start.emplace_back();
      o.seq = d.seq;
      o.device = device_of_stream(event_stream(d.seq));
      o.op = d.op;
      o.name = d.op ? d.op->name : "";
      o.host_begin_ns = o.enqueue_ns = d.begin_ns;  // unknown: enqueued before the session
      o.flops = d.flops;
      o.bytes = d.bytes;
      r = &o;
    } else {
      continue;  // enqueued by a thread the session did not see (it cannot happen with the hooks in place)
    }
    r->device_thread = d.thread;
    r->device_begin_ns = d.begin_ns;
    r->device_end_ns = d.end_ns;
    r->failed = d.failed;
  }
  if (!before_start.empty()) {
    for (OpRecord& o : before_start) data.ops.push_back(std::move(o));
    std::sort(data.ops.begin(), data.ops.end(), by_seq);
  }
  std::sort(data.ranges.begin(), data.ranges.end(), [](const RangeRecord& a, const RangeRecord& b) {
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
  });
}
}  // namespace

void Profiler::stop() {
  if (!active_) return;
  std::exception_ptr error;
  // Drain first so every Task of the session has its device span, then remove the hooks, then drain again
  // so no kernel still holds the observer.
  ++host_state().sync_depth;  // the profiler's own drain is not one of the program's sync points
  try {
    Stream::synchronize_all();
  } catch (...) {
    error = std::current_exception();
  }
  --host_state().sync_depth;
  data_.stop_ns = now_ns();
  detail::g_recording.store(false, std::memory_order_release);
  op_sinks::remove_process_sink(*session_);
  for (int id = 0; id < kMaxStreams; ++id)
    if (Stream* s = Stream::by_id(id)) s->set_observer(nullptr);
  if (data_.options.profile_memory) {
    CachingAllocator::cpu().set_observer(nullptr);
    set_storage_observer(nullptr);
  }
  try {
    Stream::synchronize_all();
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  dg::module_scope::set_tagging(false);
  g_session.store(nullptr, std::memory_order_release);
  g_current.store(nullptr, std::memory_order_release);
  active_ = false;
  {
    std::lock_guard<std::mutex> lock(session_->buffers_mutex);
    SessionExtras extras;
    for (auto& b : session_->buffers) {
      extras.op_modules.insert(extras.op_modules.end(), b->op_modules.begin(), b->op_modules.end());
      extras.storage.insert(extras.storage.end(), b->storage.begin(), b->storage.end());
    }
    std::sort(extras.op_modules.begin(), extras.op_modules.end());
    std::stable_sort(extras.storage.begin(), extras.storage.end(),
                     [](const StorageEvent& x, const StorageEvent& y) { return x.ts_ns < y.ts_ns; });
    {
      std::lock_guard<std::mutex> extras_lock(g_extras_mutex);
      g_extras[this] = std::move(extras);
    }
    merge_buffers(session_->buffers, session_->first_seq, data_);
    session_->buffers.clear();
  }
  {
    std::lock_guard<std::mutex> lock(session_->steps_mutex);
    data_.step_markers = session_->steps;
    std::sort(data_.step_markers.begin(), data_.step_markers.end());
  }
  data_.memory_at_stop = CachingAllocator::cpu().stats();
  if (data_.options.profile_memory) {
    // The counters at both ends of the session, so the memory tracks span it.
    auto sample = [](int64_t ts, const MemoryStats& stats) {
      MemorySample m;
      m.ts_ns = ts;
      m.allocated = stats.allocated;
      m.reserved = stats.reserved;
      m.by_category = stats.allocated_by_category;
      return m;
    };
    data_.memory.insert(data_.memory.begin(), sample(data_.start_ns, data_.memory_at_start));
    data_.memory.push_back(sample(std::max(data_.stop_ns, data_.memory.back().ts_ns), data_.memory_at_stop));
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace dg::profiler
