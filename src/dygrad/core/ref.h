// Intrusive reference counting: Storage, TensorImpl and autograd Nodes are shared between the host thread
// and the stream worker (a Task holds its operands until it has run), so the count is atomic.
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
  void retain() const { refcount_.fetch_add(1, std::memory_order_relaxed); }
  // Returns true when this was the last reference.
  bool release() const { return refcount_.fetch_sub(1, std::memory_order_acq_rel) == 1; }
  int32_t use_count() const { return refcount_.load(std::memory_order_relaxed); }

 protected:
  virtual ~RefCounted() = default;
  template <typename T> friend class Ref;

 private:
  mutable std::atomic<int32_t> refcount_{0};
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
