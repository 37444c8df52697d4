// Attrs: the typed attributes of a Task (and of the autograd Node that records it). Each op reads its own
// struct (`task.attrs.get<ReduceAttrs>()`, runtime/op_attrs.h); the struct travels by value inside the Task,
// with no heap allocation, and every read checks that the Task carries that type. docs/ops.md, "Attributes".
#pragma once
#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>

namespace dg {

// One descriptor per attribute struct: how to copy and destroy it inside an Attrs.
struct AttrsType {
  const char* name;
  void (*copy)(void* dst, const void* src);  // null: trivially copyable (memcpy of `size` bytes)
  void (*destroy)(void* p);                  // null: trivially destructible
  size_t size;  // sizeof the struct rounded up to 16 bytes: trivial structs are copied in 16-byte chunks
};

namespace detail {
template <typename T>
void copy_attrs(void* dst, const void* src) { new (dst) T(*static_cast<const T*>(src)); }
template <typename T>
void destroy_attrs(void* p) { static_cast<T*>(p)->~T(); }
template <typename T>
inline constexpr AttrsType attrs_type_of{T::kName, std::is_trivially_copyable_v<T> ? nullptr : &copy_attrs<T>,
                                        std::is_trivially_destructible_v<T> ? nullptr : &destroy_attrs<T>,
                                        (sizeof(T) + 15) / 16 * 16};
}  // namespace detail

// The descriptor of attribute struct T (each struct names itself: `static constexpr const char* kName`).
template <typename T>
constexpr const AttrsType* attrs_type() { return &detail::attrs_type_of<T>; }

class Attrs {
 public:
  static constexpr size_t kCapacity = 160;  // bytes: the largest struct fits (static_assert in the constructor)

  Attrs() = default;  // no attributes
  template <typename T, typename = std::enable_if_t<!std::is_same_v<std::decay_t<T>, Attrs>>>
  Attrs(const T& value) : type_(attrs_type<T>()) {  // NOLINT: implicit, so `enqueue(op, in, out, ReduceAttrs{...})`
    static_assert(sizeof(T) <= kCapacity && alignof(T) <= alignof(std::max_align_t), "attribute struct too large");
    new (buffer_) T(value);
  }
  Attrs(const Attrs& other) { copy_from(other); }
  Attrs& operator=(const Attrs& other) {
    if (this != &other) {
      reset();
      copy_from(other);
    }
    return *this;
  }
  ~Attrs() { reset(); }

  // The attributes as T; raises (an internal error naming both types) if the Task carries another type.
  template <typename T>
  const T& get() const {
    if (type_ != attrs_type<T>()) [[unlikely]] check_same_type(attrs_type<T>());
    return *std::launder(reinterpret_cast<const T*>(buffer_));
  }
  template <typename T>
  T& get() {
    if (type_ != attrs_type<T>()) [[unlikely]] check_same_type(attrs_type<T>());
    return *std::launder(reinterpret_cast<T*>(buffer_));
  }
  // Replaces the attributes with `value`, constructed in place.
  template <typename T, typename = std::enable_if_t<!std::is_same_v<std::decay_t<T>, Attrs>>>
  void set(const T& value) {
    static_assert(sizeof(T) <= kCapacity && alignof(T) <= alignof(std::max_align_t), "attribute struct too large");
    reset();
    new (buffer_) T(value);
    type_ = attrs_type<T>();
  }
  const AttrsType* type() const { return type_; }  // null: none
  bool empty() const { return type_ == nullptr; }
  void reset() {
    if (type_ && type_->destroy) type_->destroy(buffer_);
    type_ = nullptr;
  }

 private:
  // Descriptors are compared by address; a copy of a descriptor in another shared object (a test binary)
  // has the same name. Raises unless `requested` names the carried type.
  void check_same_type(const AttrsType* requested) const;
  void copy_from(const Attrs& other) {
    type_ = other.type_;
    if (!type_) return;
    if (type_->copy) {
      type_->copy(buffer_, other.buffer_);
    } else {
      for (size_t i = 0; i < type_->size; i += 16) std::memcpy(buffer_ + i, other.buffer_ + i, 16);
    }
  }

  alignas(std::max_align_t) unsigned char buffer_[kCapacity];  // a multiple of 16 bytes
  const AttrsType* type_ = nullptr;
};

}  // namespace dg
