// Storage: a refcounted buffer shared by every view of it. It carries what all views share: the version
// counter (bumped on the host at enqueue by in-place ops, docs/autograd.md), the sequence number of the
// last Task that writes it (sync points wait for it, docs/stream.md), and the poison mark of a failed
// producer (docs/async-errors.md).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "dygrad/core/device.h"
#include "dygrad/core/object_pool.h"
#include "dygrad/core/ref.h"
#include "dygrad/core/allocator.h"

namespace dg {

class Storage : public RefCounted {
 public:
  // A buffer from the caching allocator, tagged with the thread's current memory category.
  static Ref<Storage> allocate(size_t nbytes, Device device = Device::cpu());
  // Memory owned elsewhere (a NumPy array; on `device`, a slot of a buffer of that device: dygrad.jit's arena): never
  // returned to the cache; `release(context)` runs when the last view is gone.
  static Ref<Storage> wrap_external(void* data, size_t nbytes, void (*release)(void*), void* context,
                                    Device device = Device::cpu());

  // The memory. A buffer reused from one that queued Tasks may still be using (stream-ordered reuse,
  // docs/memory.md) is first waited for when a thread outside the stream touches it; a Task never waits (every
  // Task that used the memory before runs first).
  [[gnu::always_inline]] void* data() const {
    if ((in_use_until_.load(std::memory_order_relaxed) | foreign_write_.load(std::memory_order_relaxed)) != 0 ||
        device_.type != Device::Type::CPU) [[unlikely]]
      wait_until_unused();
    return data_;
  }
  // The memory's address, for identity only (never waits: Storage::data() is the way to touch it).
  const void* address() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool is_external() const { return external_release_ != nullptr; }
  // Page-locked host memory from the pinned pool (core/allocator.h): made under a PinnedAllocationScope.
  bool is_pinned() const { return pinned_; }
  // Memory a NumPy array also sees (external, or exported by Tensor.numpy()): dygrad's writes into it
  // finish before the op call returns (ops/dispatch.cpp).
  bool shared_with_host() const { return external_release_ != nullptr || exported_.load(std::memory_order_relaxed); }
  void mark_shared_with_host() { exported_.store(true, std::memory_order_relaxed); }
  MemoryCategory category() const { return category_; }
  void set_category(MemoryCategory c);
  // Tells the allocator what the buffer holds (only while allocation_tracking() is on, core/allocator.h).
  void annotate(const char* description) const;

  // Tensor.resize_ past the end: the memory becomes a larger block holding the old bytes first, so every view of
  // this storage sees it (torch's resize_). The caller has waited for every Task of the storage's stream; memory
  // owned elsewhere (external, exported to NumPy), pinned or a device's raises naming `op`.
  void grow(size_t nbytes, const char* op);
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

  // Stream bookkeeping, written on the host at enqueue. Sequence numbers are of the stream of the storage's device
  // (core/device.h, stream_id); an event (make_event) names the stream too.
  uint64_t last_write_event() const { return make_event(stream_id(device_), last_write_seq()); }
  uint64_t last_write_seq() const { return last_write_seq_.load(std::memory_order_acquire); }
  void set_last_write_seq(uint64_t s) { last_write_seq_.store(s, std::memory_order_release); }
  // How many Tasks had been enqueued when this buffer was made: it tells state that existed before a
  // failed op (born before it) from buffers made after it (docs/async-errors.md, "The poisoned-input rule").
  // The stream reports its count with note_tasks_enqueued at every enqueue (core cannot ask it).
  uint64_t birth_seq() const { return birth_seq_; }
  static void note_tasks_enqueued(int stream, uint64_t count) {
    tasks_enqueued_[stream].store(count, std::memory_order_relaxed);
  }
  // A Task of another device's stream reads or writes this buffer (a copy between devices): the event of that
  // Task. A later Task of this storage's own stream that writes it waits for the event first, and the allocator
  // reuses the memory only after it (docs/devices.md, "Memory and streams"). 0: none.
  uint64_t foreign_use() const { return foreign_use_.load(std::memory_order_acquire); }
  // The same, for such a Task that writes it (a copy into it): readers wait for it; a thread that touches the memory
  // before it has run (a missed wait) raises (Storage::data()).
  uint64_t foreign_write() const { return foreign_write_.load(std::memory_order_acquire); }
  void note_foreign_use(uint64_t event, bool written);
  // 0 when valid; otherwise the sequence number of the failed Task whose error invalidated this buffer.
  uint64_t poisoned_by() const { return poisoned_by_.load(std::memory_order_acquire); }
  void poison(uint64_t failed_seq) { poisoned_by_.store(failed_seq, std::memory_order_release); }

  ~Storage() override;
  DG_POOLED_ALLOCATION(Storage)

  // Set by the runtime (runtime/stream.cpp) when the stream starts: how many Tasks have run, and a wait for
  // Task `seq` that raises nothing (core cannot call the stream).
  // Events (core/device.h): whether one has run, and a wait for it that raises nothing.
  using EventDoneFn = bool (*)(uint64_t event);
  using WaitEventFn = void (*)(uint64_t event);
  static void set_stream_hooks(EventDoneFn done, WaitEventFn wait);
  // Device memory (a device other than the CPU) is touched only by that device's kernels: the threads that run them
  // say so (the device's launcher thread, the intra-op pool's helpers). Elsewhere Storage::data() raises: the host
  // reads a device's tensor through a copy (docs/devices.md, "The host never touches device memory").
  static void set_thread_runs_device_kernels(bool on);
  // The stream whose Tasks this thread runs (a stream's worker; -1 elsewhere): its own copy into a buffer is no
  // missed wait.
  static void set_thread_stream(int stream);

 private:
  Storage() = default;
  // Every holder left is a queued Task (core/ref.h): the block goes back to the allocator now, in use until
  // the last Task enqueued so far (docs/memory.md, "Stream-ordered reuse").
  void on_only_task_refs() const override;
  void wait_until_unused() const;
  void allocate_in_scope(size_t nbytes, Device device);
  // The allocator the block came from and goes back to.
  Allocator& owner() const { return pinned_ ? *pinned_allocator() : allocator_of(device_); }
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  MemoryBlock block_;
  void (*external_release_)(void*) = nullptr;
  void* external_context_ = nullptr;
  Device device_;
  MemoryCategory category_ = MemoryCategory::Activation;
  std::atomic<uint32_t> version_{0};
  std::atomic<uint64_t> last_write_seq_{0};
  uint64_t birth_seq_ = 0;
  static inline std::atomic<uint64_t> tasks_enqueued_[kMaxStreams] = {};
  std::atomic<uint64_t> foreign_use_{0};
  mutable std::atomic<uint64_t> foreign_write_{0};  // cleared by the first access after it has run
  std::atomic<uint64_t> poisoned_by_{0};
  std::atomic<bool> exported_{false};
  bool pinned_ = false;
  mutable std::atomic<bool> block_released_{false};  // by on_only_task_refs: the destructor frees nothing
  mutable std::atomic<uint64_t> in_use_until_{0};  // an event of the own stream; 0 once no earlier Task uses it
};

// While one lives, the thread's allocations take only memory that no queued Task still uses: buffers the host
// writes at once (a factory's staging copy, a NumPy copy) or that a thread outside the stream fills (the
// communication thread), which would otherwise wait for the stream in Storage::data().
class HostAllocationScope {
 public:
  HostAllocationScope();
  ~HostAllocationScope();
  HostAllocationScope(const HostAllocationScope&) = delete;
  HostAllocationScope& operator=(const HostAllocationScope&) = delete;

 private:
  bool saved_;
};

// While one lives, the thread's CPU allocations take page-locked memory from the pinned pool (core/allocator.h):
// Tensor.pin_memory(), the factories' pin_memory=True, a device copy's host staging buffer. Raises naming `op` when
// no device backend provides pinned memory (torch: no accelerator). `on` false: no effect.
class PinnedAllocationScope {
 public:
  explicit PinnedAllocationScope(const char* op, bool on = true);
  ~PinnedAllocationScope();
  PinnedAllocationScope(const PinnedAllocationScope&) = delete;
  PinnedAllocationScope& operator=(const PinnedAllocationScope&) = delete;

 private:
  bool on_;
  bool saved_;
};
// Raises "[op] pinned memory needs an accelerator ..." unless a device backend provides pinned memory.
void check_pinned_memory_available(const char* op);

}  // namespace dg
