// Storage lifetime: cached blocks go back to the allocator, external memory to its owner; the profiler's
// storage observer and meta evaluation (core/storage_hooks.h).
#include "dygrad/core/storage.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_set>
#include <vector>

#include "dygrad/core/error.h"
#include "dygrad/core/storage_hooks.h"

namespace dg {

namespace {
std::atomic<StorageObserver*> g_storage_observer{nullptr};
std::atomic<int> g_observer_calls{0};  // calls in flight, so that set_storage_observer can wait them out

// Calls `f(observer)` if one is installed (the profiler; other threads - a data loader's - allocate too).
template <typename F>
void notify(F&& f) {
  if (!g_storage_observer.load(std::memory_order_acquire)) [[likely]] return;
  g_observer_calls.fetch_add(1);
  if (StorageObserver* o = g_storage_observer.load()) f(o);
  g_observer_calls.fetch_sub(1);
}
std::atomic<bool> g_meta_active{false};
std::atomic<StorageLifeLog*> g_life_log{nullptr};
std::atomic<int> g_life_log_calls{0};  // calls in progress: clearing the log waits for them (another thread's)
template <typename F>
inline void tell_life_log(F&& f) {
  if (!g_life_log.load(std::memory_order_acquire)) [[likely]] return;
  g_life_log_calls.fetch_add(1, std::memory_order_seq_cst);  // seq_cst with the clearing side (Dekker's pattern)
  if (StorageLifeLog* log = g_life_log.load(std::memory_order_seq_cst)) f(log);
  g_life_log_calls.fetch_sub(1, std::memory_order_seq_cst);
}
inline void log_birth(const Storage* s, bool external) {
  tell_life_log([&](StorageLifeLog* log) { log->on_storage_born(s, external); });
}
std::atomic<Storage::EventDoneFn> g_event_done{nullptr};
std::atomic<Storage::WaitEventFn> g_wait_event{nullptr};
thread_local bool tls_runs_device_kernels = false;
thread_local int tls_stream = -1;
thread_local bool tls_host_allocation = false;
thread_local bool tls_pinned_allocation = false;
// Host and pinned scopes alive on any thread: while none is, an allocation need not read the thread-local flag (a TLS access in a
// shared library is a call).
std::atomic<int> g_host_allocation_scopes{0};
std::mutex g_meta_mutex;
meta::Stats g_meta;
// The storages made under meta evaluation and still alive: meta tensors (torch.device("meta"), docs/memory.md
// "Meta tensors"). A set beside Storage rather than a field in it (storage.h is included everywhere); the count
// lets every other storage's destructor skip the lock.
std::unordered_set<const Storage*> g_meta_storages;
std::atomic<int64_t> g_meta_storage_count{0};
}  // namespace

bool meta::is_meta_storage(const Storage* s) {
  if (g_meta_storage_count.load(std::memory_order_relaxed) == 0) [[likely]] return false;
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  return g_meta_storages.count(s) != 0;
}

// Once this returns, no call to the previous observer is in flight.
void set_storage_observer(StorageObserver* observer) {
  g_storage_observer.store(observer);
  while (g_observer_calls.load() != 0) std::this_thread::yield();
}
StorageObserver* storage_observer() { return g_storage_observer.load(std::memory_order_acquire); }

namespace meta {
bool active() { return g_meta_active.load(std::memory_order_relaxed); }
void set_active(bool on) {
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  if (on) {
    // Buffers of an earlier evaluation still alive keep counting: only the peaks restart.
    const int64_t allocated = g_meta.allocated;
    const auto by = g_meta.by_category;
    g_meta = Stats();
    g_meta.allocated = g_meta.peak = g_meta.peak_with_scratch = allocated;
    g_meta.by_category = g_meta.at_peak = by;
  }
  g_meta_active.store(on, std::memory_order_relaxed);
}
Stats current() {
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  return g_meta;
}
void reset_peak() {
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  g_meta.peak = g_meta.peak_with_scratch = g_meta.allocated;
  g_meta.at_peak = g_meta.by_category;
  g_meta.max_scratch = 0;
}
void note_task(int64_t scratch_bytes) {
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  ++g_meta.tasks;
  g_meta.max_scratch = std::max(g_meta.max_scratch, scratch_bytes);
  g_meta.peak_with_scratch = std::max(g_meta.peak_with_scratch, g_meta.allocated + scratch_bytes);
  // The stream takes the Task's scratch from the allocator for the span of its kernel (runtime/scratch.h): allocated
  // bytes, in the scratch category, on top of what is live when it runs.
  if (scratch_bytes > 0 && g_meta.allocated + scratch_bytes > g_meta.peak) {
    g_meta.peak = g_meta.allocated + scratch_bytes;
    g_meta.at_peak = g_meta.by_category;
    g_meta.at_peak[static_cast<int>(MemoryCategory::Scratch)] += scratch_bytes;
  }
}

MemoryBlock allocate(size_t nbytes, MemoryCategory category) {
  // Address space only: an anonymous private mapping uses no memory until a page is written, and no kernel
  // runs under meta evaluation. A host-side write (a small factory filled on the host) touches a page or two.
  void* p = ::mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  g_meta.allocated += static_cast<int64_t>(nbytes);
  g_meta.by_category[static_cast<int>(category)] += static_cast<int64_t>(nbytes);
  ++g_meta.allocations;
  g_meta.allocated_total += static_cast<int64_t>(nbytes);
  if (g_meta.allocated > g_meta.peak) {
    g_meta.peak = g_meta.allocated;
    g_meta.at_peak = g_meta.by_category;
  }
  g_meta.peak_with_scratch = std::max(g_meta.peak_with_scratch, g_meta.allocated);
  return {p, nbytes | kMetaBit};
}
void free(const MemoryBlock& block, size_t nbytes, MemoryCategory category) {
  ::munmap(block.ptr, block.bin_bytes & ~kMetaBit);
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  g_meta.allocated -= static_cast<int64_t>(nbytes);
  g_meta.by_category[static_cast<int>(category)] -= static_cast<int64_t>(nbytes);
}
void retag(size_t nbytes, MemoryCategory from, MemoryCategory to) {
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  g_meta.by_category[static_cast<int>(from)] -= static_cast<int64_t>(nbytes);
  g_meta.by_category[static_cast<int>(to)] += static_cast<int64_t>(nbytes);
}
}  // namespace meta

HostAllocationScope::HostAllocationScope() : saved_(tls_host_allocation) {
  g_host_allocation_scopes.fetch_add(1, std::memory_order_relaxed);
  tls_host_allocation = true;
}
HostAllocationScope::~HostAllocationScope() {
  tls_host_allocation = saved_;
  g_host_allocation_scopes.fetch_sub(1, std::memory_order_relaxed);
}

void check_pinned_memory_available(const char* op) {
  DG_CHECK(pinned_allocator() != nullptr, Runtime, "[", op, "] pinned memory needs an accelerator, and no device "
           "backend is enabled (dygrad.testing.enable_test_device(n) brings up the test device, whose backend "
           "provides it)");
}
PinnedAllocationScope::PinnedAllocationScope(const char* op, bool on) : on_(on), saved_(tls_pinned_allocation) {
  if (!on_) return;
  check_pinned_memory_available(op);
  g_host_allocation_scopes.fetch_add(1, std::memory_order_relaxed);
  tls_pinned_allocation = true;
}
PinnedAllocationScope::~PinnedAllocationScope() {
  if (!on_) return;
  tls_pinned_allocation = saved_;
  g_host_allocation_scopes.fetch_sub(1, std::memory_order_relaxed);
}

void Storage::set_stream_hooks(EventDoneFn done, WaitEventFn wait) {
  g_event_done.store(done, std::memory_order_release);
  g_wait_event.store(wait, std::memory_order_release);
}

void Storage::set_thread_runs_device_kernels(bool on) { tls_runs_device_kernels = on; }
void Storage::set_thread_stream(int stream) { tls_stream = stream; }

void Storage::wait_until_unused() const {
  if (device_.type != Device::Type::CPU && !tls_runs_device_kernels && data_)
    fail(ErrorKind::Runtime, "[", device_.str(), "] the host touched device memory (", nbytes_, " bytes): a device's "
         "tensor is read on the host through a copy (Tensor.cpu(), Tensor.to('cpu')) (docs/devices.md)");
  if (const uint64_t w = foreign_write_.load(std::memory_order_acquire)) {
    // Memory another device's copy writes: every reader waits for its event first (Tensor::wait_readable, a Task's
    // wait_event). Reaching it before is a missed wait; the copy's own thread is the writer.
    if (g_event_done.load(std::memory_order_acquire)(w)) {
      uint64_t expected = w;
      foreign_write_.compare_exchange_strong(expected, 0);
    } else if (event_stream(w) != tls_stream) {
      fail(ErrorKind::Runtime, "[", device_of_stream(event_stream(w)).str(), "] missed sync: a buffer (", nbytes_,
           " bytes) was touched before the device's copy into it had finished (Task ", event_seq(w), " of its "
           "stream); read it after a sync point (Tensor.tolist(), .numpy(), dygrad.synchronize()) (docs/devices.md)");
    }
  }
  const uint64_t until = in_use_until_.load(std::memory_order_acquire);
  if (until == 0) return;
  // A Task's kernel (the worker, a pool thread helping it, a Task run inline) sees every earlier Task done: the
  // first check passes. Only a thread outside the stream can find it still in use, and then waits.
  if (!g_event_done.load(std::memory_order_acquire)(until)) g_wait_event.load(std::memory_order_acquire)(until);
  in_use_until_.store(0, std::memory_order_relaxed);
}

void Storage::note_foreign_use(uint64_t event, bool written) {
  uint64_t old = foreign_use_.load(std::memory_order_acquire);
  // One pending foreign event is kept: a second stream's use waits for the first's (rare: three devices copying
  // through one buffer at once).
  if (old != 0 && event_stream(old) != event_stream(event) && !g_event_done.load()(old)) g_wait_event.load()(old);
  foreign_use_.store(event, std::memory_order_release);
  if (written) foreign_write_.store(event, std::memory_order_release);
}

void Storage::on_only_task_refs() const {
  if (external_release_ || nbytes_ == 0 || !block_.ptr || meta::is_meta(block_) ||
      exported_.load(std::memory_order_relaxed))
    return;
  MemoryBlock block = block_;
  block.foreign_use = foreign_use_.load(std::memory_order_acquire);
  owner().free(block, nbytes_, category_,
               tasks_enqueued_[device_.is_cpu() ? 0 : stream_id(device_)].load(std::memory_order_acquire));
  block_released_.store(true, std::memory_order_release);
  notify([&](StorageObserver* o) { o->on_storage_free(this, nbytes_, category_); });
}

void set_storage_life_log(StorageLifeLog* log) {
  StorageLifeLog* expected = nullptr;
  if (!log) {
    g_life_log.store(nullptr, std::memory_order_seq_cst);
    while (g_life_log_calls.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();  // another thread's call
    return;
  }
  DG_CHECK(g_life_log.compare_exchange_strong(expected, log), Runtime,
           "[jit] another thread is capturing a function or running one's segments: dygrad.jit captures and runs "
           "segments on one thread at a time");
}
StorageLifeLog* storage_life_log() { return g_life_log.load(std::memory_order_acquire); }

namespace {
std::mutex g_release_hooks_mutex;
std::vector<ReleaseHook> g_release_hooks;
}  // namespace
void add_release_hook(ReleaseHook hook) {
  std::lock_guard<std::mutex> lock(g_release_hooks_mutex);
  g_release_hooks.push_back(hook);
}
void run_release_hooks() {
  std::vector<ReleaseHook> hooks;
  {
    std::lock_guard<std::mutex> lock(g_release_hooks_mutex);
    hooks = g_release_hooks;
  }
  for (ReleaseHook h : hooks) h();
}

Ref<Storage> Storage::allocate(size_t nbytes, Device device) {
  Ref<Storage> s(new Storage());
  s->category_ = current_memory_category();
  if (meta::active() && nbytes > 0) [[unlikely]] s->block_ = meta::allocate(nbytes, s->category_);
  else if (g_host_allocation_scopes.load(std::memory_order_relaxed) != 0) [[unlikely]] s->allocate_in_scope(nbytes, device);
  else s->block_ = allocator_of(device).allocate(nbytes, s->category_, /*stream_ordered=*/true);
  const int stream = device.is_cpu() ? 0 : stream_id(device);
  s->in_use_until_.store(make_event(stream, s->block_.in_use_until), std::memory_order_relaxed);
  s->data_ = s->block_.ptr;
  s->nbytes_ = nbytes;
  s->device_ = device;
  s->birth_seq_ = tasks_enqueued_[stream].load(std::memory_order_relaxed);
  if (meta::active()) [[unlikely]] {
    std::lock_guard<std::mutex> lock(g_meta_mutex);
    g_meta_storages.insert(s.get());
    g_meta_storage_count.fetch_add(1, std::memory_order_relaxed);
  }
  if (nbytes > 0 && !meta::is_meta(s->block_))
    notify([&](StorageObserver* o) { o->on_storage_allocate(s.get(), nbytes, s->category_); });
  log_birth(s.get(), false);
  return s;
}

void Storage::allocate_in_scope(size_t nbytes, Device device) {
  const bool stream_ordered = !tls_host_allocation;
  if (tls_pinned_allocation && device.is_cpu()) {
    pinned_ = true;
    block_ = pinned_allocator()->allocate(nbytes, category_, stream_ordered);
  } else {
    block_ = allocator_of(device).allocate(nbytes, category_, stream_ordered);
  }
}

Ref<Storage> Storage::wrap_external(void* data, size_t nbytes, void (*release)(void*), void* context, Device device) {
  Ref<Storage> s(new Storage());
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->external_release_ = release;
  s->external_context_ = context;
  s->category_ = MemoryCategory::Other;
  s->device_ = device;
  s->birth_seq_ = tasks_enqueued_[stream_id(device)].load(std::memory_order_relaxed);
  log_birth(s.get(), true);
  return s;
}

void Storage::grow(size_t nbytes, const char* op) {
  DG_CHECK(!shared_with_host() && !pinned_ && device_.is_cpu() && !meta::is_meta(block_), Runtime, "[", op,
           "] Trying to resize storage that is not resizable");
  if (nbytes <= nbytes_) return;
  // Not stream-ordered: the host writes the new block at once (no queued Task may still use it).
  MemoryBlock fresh = allocator_of(device_).allocate(nbytes, category_, /*stream_ordered=*/false);
  if (nbytes_ > 0) std::memcpy(fresh.ptr, data(), nbytes_);  // data() waits for the old block's last user
  if (!block_released_.load(std::memory_order_acquire)) {
    owner().free(block_, nbytes_, category_);
    if (nbytes_ > 0) notify([&](StorageObserver* o) { o->on_storage_free(this, nbytes_, category_); });
  }
  block_ = fresh;
  data_ = fresh.ptr;
  nbytes_ = nbytes;
  in_use_until_.store(0, std::memory_order_relaxed);
  notify([&](StorageObserver* o) { o->on_storage_allocate(this, nbytes, category_); });
}

void Storage::set_category(MemoryCategory c) {
  if (meta::is_meta(block_)) {
    meta::retag(nbytes_, category_, c);
  } else if (!is_external()) {
    (pinned_ ? *pinned_allocator() : allocator_for(device_)).retag(block_, nbytes_, category_, c);
    if (nbytes_ > 0) notify([&](StorageObserver* o) { o->on_storage_retag(this, nbytes_, c); });
  }
  category_ = c;
}

void Storage::annotate(const char* description) const {
  if (!is_external() && block_.ptr && !meta::is_meta(block_))
    (pinned_ ? *pinned_allocator() : allocator_for(device_)).annotate(block_, description);
}

Storage::~Storage() {
  tell_life_log([&](StorageLifeLog* log) { log->on_storage_died(this); });
  if (g_meta_storage_count.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    std::lock_guard<std::mutex> lock(g_meta_mutex);
    if (g_meta_storages.erase(this) != 0) g_meta_storage_count.fetch_sub(1, std::memory_order_relaxed);
  }
  if (external_release_) {
    external_release_(external_context_);
  } else if (meta::is_meta(block_)) [[unlikely]] {
    meta::free(block_, nbytes_, category_);
  } else if (!block_released_.load(std::memory_order_acquire)) {
    if (const uint64_t foreign = foreign_use_.load(std::memory_order_acquire)) [[unlikely]] {
      MemoryBlock block = block_;
      block.foreign_use = foreign;
      owner().free(block, nbytes_, category_);
    } else {
      owner().free(block_, nbytes_, category_);
    }
    if (nbytes_ > 0) notify([&](StorageObserver* o) { o->on_storage_free(this, nbytes_, category_); });
  }
}

}  // namespace dg
