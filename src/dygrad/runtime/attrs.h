// Attrs: the typed attributes of a Task (and of the autograd Node that records it). Each op reads its own
// struct (`task.attrs.get<ReduceAttrs>()`, runtime/op_attrs.h); the struct travels by value inside the Task,
// with no heap allocation, and every read checks that the Task carries that type. docs/ops.md, "Attributes".
//
// Attributes are values: each struct lists its fields once (DG_ATTRS_FIELDS), and equality, hashing, printing and
// a visitor over the fields come from that list, so a recorded graph can be keyed, guarded, deduplicated and
// shown. A struct whose list misses one of its fields does not compile (the list's length is checked against the
// struct's member count). Floating fields compare and hash by their bits (nan equals the same nan, -0 is not 0):
// two Tasks with equal attrs compute the same bits.
#pragma once
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dygrad/core/dtype.h"
#include "dygrad/core/small_vector.h"

// In an attribute struct: its fields, in declaration order, e.g. `DG_ATTRS_FIELDS(dims, keepdim)`.
#define DG_ATTRS_FIELDS(...)                                     \
  auto fields() const { return std::tie(__VA_ARGS__); }          \
  static constexpr const char* kFields = #__VA_ARGS__

namespace dg {

// The seed and the first Philox counter reserved for a random Task (docs/rng.md). Every random op's attribute
// struct holds one, named `rng` (the op's kOpRandom trait; OpTable.RandomOpsAndOnlyThemCarryAnRngCounter), so a
// recorded Task's counter is reached through `Attrs::rng()` without knowing the struct.
struct RngCounter {
  uint64_t seed = 0, offset = 0;
  DG_ATTRS_FIELDS(seed, offset);
};

// One leaf field of an attribute struct, as the type-erased visitor sees it (nested structs are flattened:
// "rng.seed"). Enums come as their integer and their name.
struct AttrField {
  enum class Kind : uint8_t { Bool, Int, Float, Scalar, Ints, Enum, Opaque };
  std::string_view name;
  Kind kind = Kind::Opaque;
  bool b = false;
  int64_t i = 0;      // Int, Enum (the value)
  double f = 0;       // Float
  Scalar scalar;      // Scalar
  IntSpan ints;       // Ints
  const char* text = nullptr;   // Enum: its name; Opaque: the type's description
  const void* opaque = nullptr;  // Opaque: the object (compared by identity)
};
using AttrFieldVisitor = void (*)(void* context, const AttrField& field);

// One descriptor per attribute struct: how to copy and destroy it inside an Attrs, and its value semantics.
struct AttrsType {
  const char* name;
  void (*copy)(void* dst, const void* src);  // null: trivially copyable (memcpy of `size` bytes)
  void (*destroy)(void* p);                  // null: trivially destructible
  size_t size;  // sizeof the struct rounded up to 16 bytes: trivial structs are copied in 16-byte chunks
  const char* fields;                                    // the field list as written, "dims, keepdim"
  bool (*equal)(const void* a, const void* b);           // field by field, floats by their bits
  size_t (*hash)(const void* p);                         // consistent with equal
  void (*print)(const void* p, std::string& out);        // "Name{field=value, ...}"
  void (*visit)(const void* p, void* context, AttrFieldVisitor visitor);  // each leaf field in order
  void (*make_default)(void* dst);                       // a default-constructed struct (tests, tools)
  RngCounter* (*rng)(void* p);                           // its `rng` member; null: the struct has none
};

// The value semantics of one field type. Overload attr_enum_name(E) beside an enum to print its names.
namespace attrs_detail {
template <typename T>
concept HasFields = requires(const T& t) { t.fields(); };

inline size_t mix(size_t seed, uint64_t v) {
  v ^= v >> 33;
  v *= 0xff51afd7ed558ccdULL;
  v ^= v >> 33;
  return seed ^ (static_cast<size_t>(v) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}
inline uint64_t scalar_bits(const Scalar& s) {
  return s.is_floating() ? std::bit_cast<uint64_t>(s.v.f) : s.is_uint() ? s.v.u
       : s.is_integral()  ? static_cast<uint64_t>(s.v.i) : uint64_t(s.v.b);
}
template <typename E>
const char* enum_name(E e) {
  if constexpr (requires { attr_enum_name(e); }) return attr_enum_name(e);
  else return nullptr;
}

template <typename... F>
bool tuple_equal(const std::tuple<const F&...>& a, const std::tuple<const F&...>& b);

template <typename F>
bool field_equal(const F& a, const F& b) {
  if constexpr (HasFields<F>) return tuple_equal(a.fields(), b.fields());
  else if constexpr (std::is_floating_point_v<F>)
    return std::bit_cast<uint64_t>(double(a)) == std::bit_cast<uint64_t>(double(b));
  else if constexpr (std::is_same_v<F, Scalar>) return a.kind == b.kind && scalar_bits(a) == scalar_bits(b);
  else return a == b;  // integers, bool, enums, Dims, pointers (identity)
}
template <typename... F>
bool tuple_equal(const std::tuple<const F&...>& a, const std::tuple<const F&...>& b) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return (field_equal(std::get<I>(a), std::get<I>(b)) && ...);
  }(std::index_sequence_for<F...>{});
}

template <typename F>
size_t field_hash(size_t seed, const F& v) {
  if constexpr (HasFields<F>) {
    std::apply([&](const auto&... f) { ((seed = field_hash(seed, f)), ...); }, v.fields());
    return seed;
  } else if constexpr (std::is_floating_point_v<F>) {
    return mix(seed, std::bit_cast<uint64_t>(double(v)));
  } else if constexpr (std::is_same_v<F, Scalar>) {
    return mix(mix(seed, static_cast<uint64_t>(v.kind)), scalar_bits(v));
  } else if constexpr (std::is_same_v<F, Dims>) {
    seed = mix(seed, v.size());
    for (int64_t d : v) seed = mix(seed, static_cast<uint64_t>(d));
    return seed;
  } else if constexpr (std::is_enum_v<F>) {
    return mix(seed, static_cast<uint64_t>(v));
  } else if constexpr (std::is_integral_v<F>) {
    return mix(seed, static_cast<uint64_t>(v));
  } else {
    return mix(seed, reinterpret_cast<uintptr_t>(std::to_address(v)));  // pointers: identity
  }
}

// The next name of a field list ("a, b, c"), advancing `list`.
inline std::string_view next_name(std::string_view& list) {
  const size_t comma = list.find(',');
  std::string_view name = list.substr(0, comma);
  list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
  while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
  return name;
}

template <typename F>
void visit_field(std::string_view name, const F& v, void* context, AttrFieldVisitor visitor) {
  if constexpr (HasFields<F>) {
    std::string_view list = F::kFields;
    std::string prefix(name);
    std::apply([&](const auto&... f) {
      (([&] {
         const std::string full = prefix + "." + std::string(next_name(list));
         visit_field(std::string_view(full), f, context, visitor);
       }()), ...);
    }, v.fields());
  } else {
    AttrField field;
    field.name = name;
    if constexpr (std::is_same_v<F, bool>) {
      field.kind = AttrField::Kind::Bool;
      field.b = v;
    } else if constexpr (std::is_enum_v<F>) {
      field.kind = AttrField::Kind::Enum;
      field.i = static_cast<int64_t>(v);
      field.text = enum_name(v);
    } else if constexpr (std::is_integral_v<F>) {
      field.kind = AttrField::Kind::Int;
      field.i = static_cast<int64_t>(v);
    } else if constexpr (std::is_floating_point_v<F>) {
      field.kind = AttrField::Kind::Float;
      field.f = static_cast<double>(v);
    } else if constexpr (std::is_same_v<F, Scalar>) {
      field.kind = AttrField::Kind::Scalar;
      field.scalar = v;
    } else if constexpr (std::is_same_v<F, Dims>) {
      field.kind = AttrField::Kind::Ints;
      field.ints = IntSpan(v.data(), v.size());
    } else {
      field.kind = AttrField::Kind::Opaque;
      field.text = "object";
      field.opaque = static_cast<const void*>(std::to_address(v));
    }
    visitor(context, field);
  }
}

// Field values as text: numbers as C++ prints them (floats to 17 significant digits), Dims as [1, 2], enums by name.
std::string field_text(const AttrField& field);

// Counts an aggregate's members: the largest N for which T{x1, ..., xN} compiles, each x converting to anything
// (unevaluated). A nested aggregate counts as one (x converts to it directly, so no brace elision).
struct AnyField {
  template <typename U>
  operator U() const;  // NOLINT: implicit, declared only
};
template <typename T, size_t... I>
constexpr bool brace_constructible(std::index_sequence<I...>) {
  return requires { T{(void(I), AnyField{})...}; };
}
template <typename T, size_t N = 0>
constexpr size_t member_count() {
  if constexpr (N < 32 && brace_constructible<T>(std::make_index_sequence<N + 1>{})) return member_count<T, N + 1>();
  else return N;
}

template <typename T>
void visit_attrs(const void* p, void* context, AttrFieldVisitor visitor) {
  const T& t = *static_cast<const T*>(p);
  std::string_view list = T::kFields;
  std::apply([&](const auto&... f) { (visit_field(next_name(list), f, context, visitor), ...); }, t.fields());
}
void print_attrs(const AttrsType& type, const void* p, std::string& out);
}  // namespace attrs_detail

namespace detail {
template <typename T>
void copy_attrs(void* dst, const void* src) { new (dst) T(*static_cast<const T*>(src)); }
template <typename T>
void destroy_attrs(void* p) { static_cast<T*>(p)->~T(); }
template <typename T>
bool equal_attrs(const void* a, const void* b) {
  return attrs_detail::field_equal(*static_cast<const T*>(a), *static_cast<const T*>(b));
}
template <typename T>
size_t hash_attrs(const void* p) {
  return attrs_detail::field_hash(std::hash<std::string_view>{}(T::kName), *static_cast<const T*>(p));
}
template <typename T>
void make_default_attrs(void* dst) { new (dst) T(); }
template <typename T>
RngCounter* rng_of(void* p) { return &static_cast<T*>(p)->rng; }
template <typename T>
constexpr RngCounter* (*rng_accessor())(void*) {
  if constexpr (requires(T& t) { { t.rng } -> std::same_as<RngCounter&>; }) return &rng_of<T>;
  else return nullptr;
}
template <typename T>
struct AttrsTypeOf {
  static_assert(attrs_detail::HasFields<T>, "an attribute struct declares its fields: DG_ATTRS_FIELDS(...)");
  static_assert(attrs_detail::member_count<T>() == std::tuple_size_v<decltype(std::declval<const T&>().fields())>,
                "DG_ATTRS_FIELDS must list every field of the attribute struct");
  static void print(const void* p, std::string& out);
  static constexpr AttrsType value{T::kName,
                                   std::is_trivially_copyable_v<T> ? nullptr : &copy_attrs<T>,
                                   std::is_trivially_destructible_v<T> ? nullptr : &destroy_attrs<T>,
                                   (sizeof(T) + 15) / 16 * 16,
                                   T::kFields,
                                   &equal_attrs<T>,
                                   &hash_attrs<T>,
                                   &AttrsTypeOf<T>::print,
                                   &attrs_detail::visit_attrs<T>,
                                   &make_default_attrs<T>,
                                   rng_accessor<T>()};
};
template <typename T>
void AttrsTypeOf<T>::print(const void* p, std::string& out) { attrs_detail::print_attrs(value, p, out); }
template <typename T>
inline constexpr const AttrsType& attrs_type_of = AttrsTypeOf<T>::value;
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
  // Value semantics (AttrsType): the same struct with equal fields; a hash consistent with it; "Name{f=v, ...}"
  // ("{}" for none); each leaf field in order.
  bool operator==(const Attrs& other) const;
  size_t hash() const { return type_ ? type_->hash(buffer_) : 0; }
  std::string to_string() const;
  void visit(void* context, AttrFieldVisitor visitor) const {
    if (type_) type_->visit(buffer_, context, visitor);
  }
  // The RNG counter of a random op's attributes (RngCounter above); null for any other struct or none.
  RngCounter* rng() { return type_ && type_->rng ? type_->rng(buffer_) : nullptr; }
  const RngCounter* rng() const { return const_cast<Attrs*>(this)->rng(); }
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
