// Element types, the 16-bit float formats, Scalars (Python/C++ numbers carried as Task attributes) and
// PyTorch's type-promotion rules (torch.result_type). See docs/dtypes.md.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace dg {

enum class DType : uint8_t { Bool, UInt8, UInt16, Int32, Int64, Float16, BFloat16, Float32, Float64 };
inline constexpr int kNumDTypes = 9;

// IEEE binary16, stored as bits; arithmetic happens in float32 (rounded once on store).
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

// bfloat16: the top half of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays a quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
};

size_t itemsize(DType t);
const char* dtype_name(DType t);  // "float32", as torch prints it without the "torch." prefix
inline bool is_floating(DType t) { return t >= DType::Float16; }
inline bool is_integral(DType t, bool include_bool) {
  return (t > DType::Bool && t < DType::Float16) || (include_bool && t == DType::Bool);
}
inline bool is_reduced_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// The C++ type that stores each dtype, and the type a kernel computes in (float for 16-bit floats).
template <typename T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct dtype_of<uint16_t> { static constexpr DType value = DType::UInt16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };

template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<Half> { using type = float; };
template <> struct compute_type<BFloat16> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

// A number: what a Python int/float/bool becomes when passed to an op. Never allocates a tensor.
struct Scalar {
  enum class Kind : uint8_t { Bool, Int, Float };
  Kind kind = Kind::Int;
  union { bool b; int64_t i; double f; } v{.i = 0};

  Scalar() = default;
  Scalar(bool b) : kind(Kind::Bool) { v.b = b; }
  template <typename I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Scalar(I i) : kind(Kind::Int) { v.i = static_cast<int64_t>(i); }
  template <typename F, std::enable_if_t<std::is_floating_point_v<F>, int> = 0>
  Scalar(F f) : kind(Kind::Float) { v.f = static_cast<double>(f); }

  bool is_floating() const { return kind == Kind::Float; }
  bool is_integral() const { return kind == Kind::Int; }
  bool is_bool() const { return kind == Kind::Bool; }
  double to_double() const { return kind == Kind::Float ? v.f : kind == Kind::Int ? double(v.i) : double(v.b); }
  int64_t to_int() const { return kind == Kind::Float ? int64_t(v.f) : kind == Kind::Int ? v.i : int64_t(v.b); }
  // -s without overflow: -INT64_MIN does not fit in int64, so that one becomes the float 2**63 (torch takes
  // an integer beyond int64 as a float too).
  Scalar negated() const {
    if (kind == Kind::Float) return Scalar(-v.f);
    const int64_t i = to_int();
    return i == INT64_MIN ? Scalar(9223372036854775808.0) : Scalar(-i);
  }
  template <typename T> T to() const;
  // The dtype a lone scalar takes: float -> float32 (torch's default dtype), int -> int64, bool -> bool.
  DType default_dtype() const {
    return kind == Kind::Float ? DType::Float32 : kind == Kind::Int ? DType::Int64 : DType::Bool;
  }
  std::string to_string() const;
};

template <typename T>
T Scalar::to() const {
  if constexpr (std::is_same_v<T, bool>) return to_double() != 0.0;
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(float(to_double()));
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(to_double());
  else return static_cast<T>(kind == Kind::Float ? static_cast<int64_t>(v.f) : to_int());
}

// Checked conversion (torch's checked_convert): whether `s` can be stored in `t` without overflow. Integral
// targets take finite values within their range (unsigned ones also wrap negatives down to -max, as torch);
// floating targets and bool take anything (a float16 overflow becomes inf, as torch).
bool scalar_fits(const Scalar& s, DType t);
// Raises RuntimeError "[op] value 4611686018427387904 cannot be converted to type int32 without overflow".
void check_scalar_fits(const char* op, const Scalar& s, DType t);

// torch.promote_types.
DType promote_types(DType a, DType b);

// torch.result_type over operands of three priorities: tensors with dims, zero-dim tensors, and
// scalars. A lower tier only matters when its category (bool < integral < floating) is higher.
class ResultType {
 public:
  void add_tensor(DType t, int64_t ndim);
  void add_scalar(const Scalar& s);
  DType result() const;

 private:
  int dim_ = -1, zero_ = -1, wrapped_ = -1;  // -1: none seen
};

// Dispatch a runtime dtype to a templated lambda: visit_dtype(t, [&]<typename T>() { ... }).
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f.template operator()<bool>();
    case DType::UInt8: return f.template operator()<uint8_t>();
    case DType::UInt16: return f.template operator()<uint16_t>();
    case DType::Int32: return f.template operator()<int32_t>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Float16: return f.template operator()<Half>();
    case DType::BFloat16: return f.template operator()<BFloat16>();
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
  }
  __builtin_unreachable();
}
// Only the floating dtypes; the caller has checked is_floating(t).
template <typename F>
decltype(auto) visit_floating(DType t, F&& f) {
  switch (t) {
    case DType::Float16: return f.template operator()<Half>();
    case DType::BFloat16: return f.template operator()<BFloat16>();
    case DType::Float64: return f.template operator()<double>();
    default: return f.template operator()<float>();
  }
}

}  // namespace dg
