// A vector with inline storage for the first N elements: tensor sizes, strides and Task operand lists
// fit inline, so building a tensor or a Task allocates nothing for its metadata.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

namespace dg {

template <typename T, size_t N>
class SmallVector {
 public:
  SmallVector() = default;
  SmallVector(std::initializer_list<T> init) { assign(init.begin(), init.end()); }
  explicit SmallVector(size_t count, const T& value = T()) {
    reserve(count);
    for (size_t i = 0; i < count; ++i) push_back(value);
  }
  template <typename It, typename = decltype(*std::declval<It>())>
  SmallVector(It first, It last) { assign(first, last); }
  SmallVector(std::span<const T> s) { assign(s.begin(), s.end()); }
  SmallVector(const SmallVector& other) { assign(other.begin(), other.end()); }
  SmallVector(SmallVector&& other) noexcept { move_from(std::move(other)); }
  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) { clear(); assign(other.begin(), other.end()); }
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept {
    if (this != &other) { clear(); release_heap(); move_from(std::move(other)); }
    return *this;
  }
  ~SmallVector() { clear(); release_heap(); }

  T* data() { return ptr(); }
  const T* data() const { return ptr(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() { return ptr(); }
  T* end() { return ptr() + size_; }
  const T* begin() const { return ptr(); }
  const T* end() const { return ptr() + size_; }
  T& operator[](size_t i) { return ptr()[i]; }
  const T& operator[](size_t i) const { return ptr()[i]; }
  T& back() { return ptr()[size_ - 1]; }
  const T& back() const { return ptr()[size_ - 1]; }
  operator std::span<const T>() const { return {ptr(), size_}; }

  void push_back(const T& v) { emplace_back(v); }
  void push_back(T&& v) { emplace_back(std::move(v)); }
  template <typename... A>
  T& emplace_back(A&&... args) {
    if (size_ == capacity_) grow(capacity_ * 2);
    T* slot = new (ptr() + size_) T(std::forward<A>(args)...);
    ++size_;
    return *slot;
  }
  void pop_back() { ptr()[--size_].~T(); }
  void insert(size_t pos, const T& v) {
    emplace_back(v);
    std::rotate(begin() + pos, end() - 1, end());
  }
  void erase(size_t pos) {
    std::move(begin() + pos + 1, end(), begin() + pos);
    pop_back();
  }
  void clear() {
    for (size_t i = 0; i < size_; ++i) ptr()[i].~T();
    size_ = 0;
  }
  void reserve(size_t n) { if (n > capacity_) grow(n); }
  void resize(size_t n, const T& value = T()) {
    reserve(n);
    while (size_ > n) pop_back();
    while (size_ < n) push_back(value);
  }
  bool operator==(const SmallVector& o) const { return size_ == o.size_ && std::equal(begin(), end(), o.begin()); }
  bool operator!=(const SmallVector& o) const { return !(*this == o); }

 private:
  T* ptr() { return heap_ ? heap_ : reinterpret_cast<T*>(inline_); }
  const T* ptr() const { return heap_ ? heap_ : reinterpret_cast<const T*>(inline_); }
  template <typename It>
  void assign(It first, It last) {
    reserve(static_cast<size_t>(std::distance(first, last)));
    for (; first != last; ++first) push_back(*first);
  }
  void grow(size_t n) {
    T* fresh = static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
    for (size_t i = 0; i < size_; ++i) {
      new (fresh + i) T(std::move(ptr()[i]));
      ptr()[i].~T();
    }
    release_heap();
    heap_ = fresh;
    capacity_ = n;
  }
  void release_heap() {
    if (heap_) ::operator delete(heap_, std::align_val_t(alignof(T)));
    heap_ = nullptr;
    capacity_ = N;
  }
  void move_from(SmallVector&& other) {
    if (other.heap_) {
      heap_ = other.heap_; size_ = other.size_; capacity_ = other.capacity_;
      other.heap_ = nullptr; other.size_ = 0; other.capacity_ = N;
    } else {
      for (size_t i = 0; i < other.size_; ++i) push_back(std::move(other.ptr()[i]));
      other.clear();
    }
  }

  alignas(T) unsigned char inline_[N * sizeof(T)];
  T* heap_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = N;
};

// Tensor sizes and strides: up to 6 dims inline (B, T, 3, H, D covers every LLM tensor).
using Dims = SmallVector<int64_t, 6>;
using IntSpan = std::span<const int64_t>;

}  // namespace dg
