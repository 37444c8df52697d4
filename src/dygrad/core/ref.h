// Intrusive reference counting: Storage, TensorImpl and autograd Nodes are shared between the host thread
// and the stream worker (a Task holds its operands until it has run), so the count is atomic.
//
// A queued Task's references to its operands are counted apart ("task references", docs/memory.md,
// "Stream-ordered reuse"): when the last reference held outside queued Tasks goes, on_only_task_refs() runs
// once, while the object is still alive. TensorImpl passes that on to its Storage, and a Storage whose every
// holder is then a queued Task gives its memory back to the allocator at once: later Tasks may reuse it, since
// the stream runs them after the ones that still read it.
#pragma once
#include <atomic>
#include <cstdint>
#include <utility>

namespace dg {

class RefCounted {
 public:
  RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;
  void retain() const { state_.fetch_add(kOne, std::memory_order_relaxed); }
  // Returns true when this was the last reference.
  bool release() const {
    uint64_t old = state_.load(std::memory_order_relaxed);
    // No task reference: the plain decrement. (A Task's reference is added only by a thread that holds one of its
    // own, so if the last ordinary reference is dropped here, one added meanwhile can only come from a Task moved
    // in under the stream's mutex; missing the hook then only returns the memory later, at reclaim.)
    if ((old & kTaskMask) == 0) [[likely]]
      return (state_.fetch_sub(kOne, std::memory_order_acq_rel) & kCountMask) == 1;
    for (;;) {
      const uint64_t total = old & kCountMask, tasks = (old >> kTaskShift) & kCountMask;
      if (total - 1 == tasks && tasks != 0 && !(old & kOnlyTasks)) [[unlikely]] {
        // The last reference outside queued Tasks: run the hook while this one still keeps the object alive.
        if (!state_.compare_exchange_weak(old, old | kOnlyTasks, std::memory_order_acq_rel, std::memory_order_relaxed))
          continue;
        on_only_task_refs();
        return (state_.fetch_sub(kOne, std::memory_order_acq_rel) & kCountMask) == 1;
      }
      if (state_.compare_exchange_weak(old, old - kOne, std::memory_order_acq_rel, std::memory_order_relaxed))
        return total == 1;
    }
  }
  // A queued Task's reference (the stream's slots, on the enqueuing host thread): taken while the caller holds
  // one of its own, dropped by release_task_ref() when the host reclaims the slot.
  void retain_for_task() const { state_.fetch_add(kOne | kTaskOne, std::memory_order_relaxed); }
  // Makes one reference already held into a Task's (a Task moved into a slot). If no other reference is left,
  // the hook runs here.
  void mark_task_ref() const {
    uint64_t old = state_.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t total = old & kCountMask, tasks = (old >> kTaskShift) & kCountMask;
      const bool last = total == tasks + 1 && !(old & kOnlyTasks);
      if (state_.compare_exchange_weak(old, (old + kTaskOne) | (last ? kOnlyTasks : 0), std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
        if (last) on_only_task_refs();
        return;
      }
    }
  }
  bool release_task_ref() const {
    return (state_.fetch_sub(kOne | kTaskOne, std::memory_order_acq_rel) & kCountMask) == 1;
  }
  int32_t use_count() const { return static_cast<int32_t>(state_.load(std::memory_order_relaxed) & kCountMask); }
  int32_t task_use_count() const {
    return static_cast<int32_t>((state_.load(std::memory_order_relaxed) >> kTaskShift) & kCountMask);
  }
  // True once every reference left is a queued Task's (it stays so: nothing outside a Task can reach it).
  bool only_task_refs() const { return (state_.load(std::memory_order_acquire) & kOnlyTasks) != 0; }

 protected:
  virtual ~RefCounted() = default;
  // The last reference outside queued Tasks is gone; called once, on the thread that dropped it.
  virtual void on_only_task_refs() const {}
  template <typename T> friend class Ref;

 private:
  // Bits 0-30: every reference; bits 32-62: those held by queued Tasks; bit 63: on_only_task_refs() has run.
  static constexpr uint64_t kOne = 1, kTaskShift = 32, kTaskOne = uint64_t{1} << kTaskShift;
  static constexpr uint64_t kCountMask = (uint64_t{1} << 31) - 1, kOnlyTasks = uint64_t{1} << 63;
  static constexpr uint64_t kTaskMask = kCountMask << kTaskShift;
  mutable std::atomic<uint64_t> state_{0};
};

template <typename T>
class Ref {
 public:
  Ref() = default;
  Ref(std::nullptr_t) {}
  explicit Ref(T* p) : p_(p) { if (p_) p_->retain(); }
  Ref(const Ref& o) : p_(o.p_) { if (p_) p_->retain(); }
  Ref(Ref&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U*, T*>>>
  Ref(const Ref<U>& o) : p_(o.get()) { if (p_) p_->retain(); }
  ~Ref() { reset(); }
  Ref& operator=(const Ref& o) { Ref(o).swap(*this); return *this; }
  Ref& operator=(Ref&& o) noexcept { Ref(std::move(o)).swap(*this); return *this; }
  void reset() {
    if (p_ && p_->release()) delete p_;
    p_ = nullptr;
  }
  // Drops a reference taken by retain_for_task()/mark_task_ref().
  void reset_task_ref() {
    if (p_ && p_->release_task_ref()) delete p_;
    p_ = nullptr;
  }
  void swap(Ref& o) noexcept { std::swap(p_, o.p_); }
  T* get() const { return p_; }
  T* operator->() const { return p_; }
  T& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  bool operator==(const Ref& o) const { return p_ == o.p_; }
  // Adopt a pointer whose count was already raised (used by bindings that hand out raw pointers).
  static Ref adopt(T* p) { Ref r; r.p_ = p; return r; }
  T* release_ownership() { T* p = p_; p_ = nullptr; return p; }

 private:
  T* p_ = nullptr;
};

template <typename T, typename... A>
Ref<T> make_ref(A&&... args) { return Ref<T>(new T(std::forward<A>(args)...)); }

}  // namespace dg
