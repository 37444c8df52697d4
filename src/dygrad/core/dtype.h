// Element types, the 16-bit float formats, Scalars (Python/C++ numbers carried as Task attributes) and
// PyTorch's type-promotion rules (torch.result_type). See docs/dtypes.md.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace dg {

// The compute dtypes come first (kernels are instantiated for them: visit_dtype), then the storage-only ones
// (uint32, uint64, float8, complex: created, converted, copied and compared, as torch allows on the CPU; every other
// op refuses them at enqueue, naming itself: kOpAnyDType in runtime/op_def.h; complex arithmetic is composed of real
// ops on view_as_real, ops/complex.cpp). The ordinals are process-local: files and pickles carry dtype names
// (docs/dtypes.md, "The dtypes").
enum class DType : uint8_t {
  Bool, UInt8, Int8, Int16, UInt16, Int32, Int64, Float16, BFloat16, Float32, Float64,
  UInt32, UInt64, Float8_e4m3fn, Float8_e5m2, Complex64, Complex128
};
inline constexpr int kNumDTypes = 17;

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

// float8_e4m3fn (OCP FP8 E4M3, "fn": finite, no infinity; 0x7f and 0xff are NaN): bias 7, max 448. A float32
// rounds to nearest even and saturates to +-448 (infinities too), as torch 2.13's conversion; NaN keeps its sign.
struct Float8_e4m3fn {
  uint8_t bits = 0;
  Float8_e4m3fn() = default;
  Float8_e4m3fn(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static uint8_t from_float(float f);
  static float to_float(uint8_t b);
};

// float8_e5m2 (OCP FP8 E5M2): the top byte of a float16 (bias 15, max 57344, infinities and NaNs). A float32
// rounds to nearest even, overflowing to infinity, as torch's conversion; NaN becomes 0x7f with its sign.
struct Float8_e5m2 {
  uint8_t bits = 0;
  Float8_e5m2() = default;
  Float8_e5m2(float f) : bits(from_float(f)) {}
  operator float() const { return Half::to_float(static_cast<uint16_t>(bits << 8)); }
  static uint8_t from_float(float f);
};

// complex64 / complex128: a (real, imaginary) pair of float / double, as torch's c10::complex (docs/dtypes.md,
// "Complex"). Storage only: kernels move, convert, fill and compare them; arithmetic runs on the float pairs
// (view_as_real). A conversion to a real type keeps the real part (torch's cast, which warns in Python).
template <typename R>
struct Complex {
  R re = 0, im = 0;
  Complex() = default;
  constexpr Complex(R r, R i) : re(r), im(i) {}
  template <typename U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
  constexpr Complex(U r) : re(static_cast<R>(r)) {}
  template <typename U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
  explicit constexpr operator U() const { return static_cast<U>(re); }
  friend constexpr bool operator==(Complex a, Complex b) { return a.re == b.re && a.im == b.im; }
  friend constexpr bool operator!=(Complex a, Complex b) { return !(a == b); }
};
template <typename T> inline constexpr bool kIsComplex = false;
template <typename R> inline constexpr bool kIsComplex<Complex<R>> = true;

size_t itemsize(DType t);
const char* dtype_name(DType t);  // "float32", as torch prints it without the "torch." prefix
inline constexpr uint32_t dtype_bit(DType t) { return 1u << static_cast<int>(t); }
inline constexpr uint32_t kFloatingDTypes = dtype_bit(DType::Float16) | dtype_bit(DType::BFloat16) |
    dtype_bit(DType::Float32) | dtype_bit(DType::Float64) | dtype_bit(DType::Float8_e4m3fn) |
    dtype_bit(DType::Float8_e5m2);
inline constexpr uint32_t kUnsignedDTypes = dtype_bit(DType::Bool) | dtype_bit(DType::UInt8) |
    dtype_bit(DType::UInt16) | dtype_bit(DType::UInt32) | dtype_bit(DType::UInt64);
inline bool is_floating(DType t) { return (kFloatingDTypes >> static_cast<int>(t)) & 1u; }
inline bool is_complex(DType t) { return t == DType::Complex64 || t == DType::Complex128; }
// The dtypes autograd differentiates (torch: floating and complex tensors can require gradients).
inline bool is_differentiable(DType t) { return is_floating(t) || is_complex(t); }
inline bool is_integral(DType t, bool include_bool) {
  return t == DType::Bool ? include_bool : !is_floating(t) && !is_complex(t);
}
// torch's toRealValueType / toComplexType: complex64 <-> float32, complex128 <-> float64 (float16 and bfloat16
// become complex64: dygrad has no complex32, docs/dtypes.md).
inline DType to_real_dtype(DType t) {
  return t == DType::Complex64 ? DType::Float32 : t == DType::Complex128 ? DType::Float64 : t;
}
inline DType to_complex_dtype(DType t) {
  return t == DType::Float64 || t == DType::Complex128 ? DType::Complex128 : DType::Complex64;
}
inline bool is_signed(DType t) { return !((kUnsignedDTypes >> static_cast<int>(t)) & 1u); }
inline bool is_reduced_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
inline bool is_float8(DType t) { return t == DType::Float8_e4m3fn || t == DType::Float8_e5m2; }
// uint32, uint64, the float8 and the complex types: storage with conversions, copies and few ops (docs/dtypes.md).
inline bool is_storage_only(DType t) { return t >= DType::UInt32; }

// The C++ type that stores each dtype, and the type a kernel computes in (float for 16-bit and 8-bit floats).
template <typename T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::Int8; };
template <> struct dtype_of<int16_t> { static constexpr DType value = DType::Int16; };
template <> struct dtype_of<uint32_t> { static constexpr DType value = DType::UInt32; };
template <> struct dtype_of<uint64_t> { static constexpr DType value = DType::UInt64; };
template <> struct dtype_of<Float8_e4m3fn> { static constexpr DType value = DType::Float8_e4m3fn; };
template <> struct dtype_of<Float8_e5m2> { static constexpr DType value = DType::Float8_e5m2; };
template <> struct dtype_of<uint16_t> { static constexpr DType value = DType::UInt16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<Complex<float>> { static constexpr DType value = DType::Complex64; };
template <> struct dtype_of<Complex<double>> { static constexpr DType value = DType::Complex128; };

template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<Half> { using type = float; };
template <> struct compute_type<BFloat16> { using type = float; };
template <> struct compute_type<Float8_e4m3fn> { using type = float; };
template <> struct compute_type<Float8_e5m2> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

// A number: what a Python int/float/bool becomes when passed to an op. Never allocates a tensor. An integer is
// Int when it fits int64 and UInt in [2**63, 2**64) (torch's Scalar holds those as uint64: docs/dtypes.md,
// "Python ints beyond int64"); nothing else holds UInt, so each integer has one representation (the JIT compares
// attributes by kind and bits). Every integral conversion wraps mod 2**64, as torch's cast of a wrapped number.
struct Scalar {
  enum class Kind : uint8_t { Bool, Int, Float, UInt };
  Kind kind = Kind::Int;
  union { bool b; int64_t i; double f; uint64_t u; } v{.i = 0};

  Scalar() = default;
  Scalar(bool b) : kind(Kind::Bool) { v.b = b; }
  template <typename I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Scalar(I i) : kind(Kind::Int) {
    if constexpr (std::is_unsigned_v<I> && sizeof(I) == 8) {
      if (i > static_cast<I>(INT64_MAX)) [[unlikely]] {
        kind = Kind::UInt;
        v.u = i;
        return;
      }
    }
    v.i = static_cast<int64_t>(i);
  }
  template <typename F, std::enable_if_t<std::is_floating_point_v<F>, int> = 0>
  Scalar(F f) : kind(Kind::Float) { v.f = static_cast<double>(f); }

  bool is_floating() const { return kind == Kind::Float; }
  bool is_integral() const { return kind == Kind::Int || kind == Kind::UInt; }  // an integer, either width
  bool is_uint() const { return kind == Kind::UInt; }  // an integer in [2**63, 2**64)
  bool is_bool() const { return kind == Kind::Bool; }
  double to_double() const {
    return kind == Kind::Float ? v.f : kind == Kind::Int ? double(v.i) : kind == Kind::UInt ? double(v.u) : double(v.b);
  }
  // The integer's bits as int64: a UInt wraps (2**63 -> -2**63), as torch's cast to an integral dtype.
  int64_t to_int() const {
    return kind == Kind::Float ? int64_t(v.f) : kind == Kind::Int ? v.i : kind == Kind::UInt ? int64_t(v.u)
                                                                                            : int64_t(v.b);
  }
  // -s. -(-2**63) is the UInt 2**63. A UInt above 2**63 has no negation among Scalars: it becomes the Int
  // 2**64 - u (the negation mod 2**64, what an integral tensor computes); an op whose result is floating negates
  // to_double() instead (ops/arithmetic.cpp, sub).
  Scalar negated() const {
    if (kind == Kind::Float) return Scalar(-v.f);
    if (kind == Kind::UInt) [[unlikely]] return Scalar(static_cast<int64_t>(0 - v.u));
    const int64_t i = to_int();
    return i == INT64_MIN ? Scalar(uint64_t(1) << 63) : Scalar(-i);
  }
  template <typename T> T to() const;
  // The dtype a lone scalar takes: float -> float32 (torch's default dtype), int -> int64, an int in
  // [2**63, 2**64) -> uint64 (torch.result_type(2**63, 1) refuses uint64 with int64), bool -> bool.
  DType default_dtype() const {
    return kind == Kind::Float ? DType::Float32 : kind == Kind::Int ? DType::Int64
         : kind == Kind::UInt ? DType::UInt64 : DType::Bool;
  }
  std::string to_string() const;
};

template <typename T>
T Scalar::to() const {
  if constexpr (std::is_same_v<T, bool>) return to_double() != 0.0;
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Float8_e4m3fn> ||
                     std::is_same_v<T, Float8_e5m2>)
    return T(float(to_double()));
  else if constexpr (kIsComplex<T>) return T(to_double());
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(to_double());
  else return static_cast<T>(kind == Kind::Float ? static_cast<int64_t>(v.f) : to_int());
}

// Checked conversion (torch's checked_convert): whether `s` can be stored in `t` without overflow. Integral
// targets take finite values within their range (unsigned ones also wrap negatives down to -max, as torch; a UInt
// fits uint64 only); floating targets and bool take anything (a float16 overflow becomes inf, as torch).
bool scalar_fits(const Scalar& s, DType t);
// Raises RuntimeError "[op] value 4611686018427387904 cannot be converted to type int32 without overflow".
void check_scalar_fits(const char* op, const Scalar& s, DType t);

// torch.promote_types; raises RuntimeError where torch refuses (uint16/32/64 with another integral type, float8
// with anything but itself). promotes(a, b): whether it would not.
bool promotes(DType a, DType b);
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

// Raises NotImplemented "[kernel] not implemented for 'UInt32'": a storage-only dtype reached a kernel compiled for
// the compute dtypes only (enqueue refuses it first, naming the op; this is the backstop).
[[noreturn]] void raise_storage_only_dtype(DType t);
// torch's ScalarType name ("UInt32", "Float8_e4m3fn"), for errors that mirror torch's.
const char* dtype_torch_name(DType t);

// Dispatch a runtime dtype to a templated lambda: visit_dtype(t, [&]<typename T>() { ... }). Compute dtypes only:
// the kernels of ops without kOpAnyDType are instantiated for these eleven.
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f.template operator()<bool>();
    case DType::UInt8: return f.template operator()<uint8_t>();
    case DType::Int8: return f.template operator()<int8_t>();
    case DType::Int16: return f.template operator()<int16_t>();
    case DType::UInt16: return f.template operator()<uint16_t>();
    case DType::Int32: return f.template operator()<int32_t>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Float16: return f.template operator()<Half>();
    case DType::BFloat16: return f.template operator()<BFloat16>();
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    default: break;
  }
  raise_storage_only_dtype(t);
}
// Every dtype, the storage-only ones too: conversions, copies, fills, comparisons for equality, host reads.
template <typename F>
decltype(auto) visit_any_dtype(DType t, F&& f) {
  switch (t) {
    case DType::UInt32: return f.template operator()<uint32_t>();
    case DType::UInt64: return f.template operator()<uint64_t>();
    case DType::Float8_e4m3fn: return f.template operator()<Float8_e4m3fn>();
    case DType::Float8_e5m2: return f.template operator()<Float8_e5m2>();
    case DType::Complex64: return f.template operator()<Complex<float>>();
    case DType::Complex128: return f.template operator()<Complex<double>>();
    default: return visit_dtype(t, static_cast<F&&>(f));
  }
}
// visit_any_dtype where kAny, else visit_dtype: a kernel shared by ops of both kinds picks at compile time.
template <bool kAny, typename F>
decltype(auto) visit_dtypes(DType t, F&& f) {
  if constexpr (kAny) return visit_any_dtype(t, static_cast<F&&>(f));
  else return visit_dtype(t, static_cast<F&&>(f));
}
// Only the floating dtypes; the caller has checked is_floating(t).
template <typename F>
decltype(auto) visit_floating(DType t, F&& f) {
  switch (t) {
    case DType::Float16: return f.template operator()<Half>();
    case DType::BFloat16: return f.template operator()<BFloat16>();
    case DType::Float64: return f.template operator()<double>();
    case DType::Float8_e4m3fn: case DType::Float8_e5m2: case DType::Complex64: case DType::Complex128:
      raise_storage_only_dtype(t);
    default: return f.template operator()<float>();
  }
}

}  // namespace dg
