// dtype tables, binary16 conversion and torch.result_type's promotion lattice.
#include "dygrad/core/dtype.h"
#include "dygrad/core/error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace dg {

size_t itemsize(DType t) {
  static constexpr size_t sizes[kNumDTypes] = {1, 1, 1, 2, 2, 4, 8, 2, 2, 4, 8, 4, 8, 1, 1, 8, 16};
  return sizes[static_cast<int>(t)];
}

const char* dtype_name(DType t) {
  static constexpr const char* names[kNumDTypes] = {
      "bool", "uint8", "int8", "int16", "uint16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
      "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "complex64", "complex128"};
  return names[static_cast<int>(t)];
}

const char* dtype_torch_name(DType t) {
  static constexpr const char* names[kNumDTypes] = {
      "Bool", "Byte", "Char", "Short", "UInt16", "Int", "Long", "Half", "BFloat16", "Float", "Double",
      "UInt32", "UInt64", "Float8_e4m3fn", "Float8_e5m2", "ComplexFloat", "ComplexDouble"};
  return names[static_cast<int>(t)];
}

void raise_storage_only_dtype(DType t) {
  DG_CHECK(false, NotImplemented, "[kernel] not implemented for '", dtype_torch_name(t), "'");
  __builtin_unreachable();
}

uint8_t Float8_e4m3fn::from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7fu;             // NaN
  if (absu >= 0x43e00000u) return sign | 0x7eu;            // >= 448 (inf too): saturates to the largest finite
  if (absu < 0x3c800000u) {                                // below 2**-6: a multiple of 2**-9, or zero
    float a;
    std::memcpy(&a, &absu, 4);
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));  // exact scaling, rounds to nearest even
  }
  // Rebias the exponent (127 -> 7) and round the 23-bit mantissa to 3 bits, to nearest even.
  return sign | static_cast<uint8_t>((absu - (120u << 23) + 0x7ffffu + ((absu >> 20) & 1u)) >> 20);
}

float Float8_e4m3fn::to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu, mant = b & 0x7u;
  float out;
  if ((b & 0x7fu) == 0x7fu) {
    const uint32_t nan = sign | 0x7fc00000u;
    std::memcpy(&out, &nan, 4);
    return out;
  }
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(mant), -9);
    return sign ? -out : out;
  }
  const uint32_t u = sign | ((exp + 120u) << 23) | (mant << 20);
  std::memcpy(&out, &u, 4);
  return out;
}

uint8_t Float8_e5m2::from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7fu;             // NaN
  if (absu >= 0x47800000u) return sign | 0x7cu;            // >= 65536 (inf too): infinity
  if (absu < 0x38800000u) {                                // below 2**-14: a multiple of 2**-16, or zero
    float a;
    std::memcpy(&a, &absu, 4);
    return sign | static_cast<uint8_t>(std::nearbyint(a * 65536.0f));
  }
  // Rebias the exponent (127 -> 15) and round the mantissa to 2 bits, to nearest even (57344's upper half: inf).
  return sign | static_cast<uint8_t>((absu - (112u << 23) + 0xfffffu + ((absu >> 21) & 1u)) >> 21);
}

uint16_t Half::from_float(float f) {
#if defined(__F16C__)
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | (absx > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (absx < 0x38800000u) {                                               // subnormal or zero
    float a;
    std::memcpy(&a, &absx, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t mant = absx + 0xc8000fffu + ((absx >> 13) & 1u);  // rebias exponent, round to nearest even
  return static_cast<uint16_t>(sign | (mant >> 13));
#endif
}

float Half::to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(mant), -24);
    uint32_t u;
    std::memcpy(&u, &out, 4);
    u |= sign;
    std::memcpy(&out, &u, 4);
    return out;
  }
  uint32_t u = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112) << 23) | (mant << 13));
  std::memcpy(&out, &u, 4);
  return out;
#endif
}

std::string Scalar::to_string() const {
  char buf[64];
  if (kind == Kind::Float) std::snprintf(buf, sizeof buf, "%g", v.f);
  else if (kind == Kind::Int) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v.i));
  else if (kind == Kind::UInt) std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(v.u));
  else std::snprintf(buf, sizeof buf, "%s", v.b ? "True" : "False");
  return buf;
}

bool promotes(DType a, DType b) {
  if (a == b) return true;
  if (is_float8(a) || is_float8(b)) return false;  // torch promotes a float8 type with nothing but itself
  // uint16, uint32 and uint64 promote with themselves and the four floating types only (torch 2.13).
  auto wide_unsigned = [](DType t) { return t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64; };
  return !((wide_unsigned(a) && !is_floating(b)) || (wide_unsigned(b) && !is_floating(a)));  // complex too
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  DG_CHECK(promotes(a, b), Runtime, "[promote_types] Promotion for ", is_float8(a) || is_float8(b) ? "Float8 Types" :
           "uint16, uint32, uint64 types", " is not supported, attempted to promote ", dtype_torch_name(a), " and ",
           dtype_torch_name(b));
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  // A complex type with anything that promotes: the complex type wide enough for both parts (complex64 with
  // float64 is complex128).
  if (std::max(int(a), int(b)) >= int(DType::Complex64)) [[unlikely]] {
    const bool wide = a == DType::Complex128 || b == DType::Complex128 || a == DType::Float64 || b == DType::Float64;
    return wide ? DType::Complex128 : DType::Complex64;
  }
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (fa && fb) {
    // float16 with bfloat16 has no common 16-bit type: float32.
    if (is_reduced_float(a) && is_reduced_float(b)) return DType::Float32;
    return itemsize(a) >= itemsize(b) ? a : b;
  }
  // Two of bool's integral neighbours uint8, int8, int16, int32, int64 (the wide unsigned ones were refused): the
  // wider, except that uint8 with int8 needs int16 (torch's table: the smallest signed type holding both).
  if (is_signed(a) == is_signed(b)) return itemsize(a) >= itemsize(b) ? a : b;
  const DType u = is_signed(a) ? b : a, s = is_signed(a) ? a : b;  // u is uint8 here
  return itemsize(s) > itemsize(u) ? s : DType::Int16;
}

namespace {
// Out of line, so that the common cases (the first operand, or one of the same dtype) pay no frame for the
// general rule and its error.
[[gnu::noinline]] int promote_mixed(int acc, DType t) { return int(promote_types(DType(acc), t)); }
int promote_opt(int acc, DType t) { return acc < 0 || acc == int(t) ? int(t) : promote_mixed(acc, t); }
// torch's combine_categories: keep `higher` unless `lower` is of a higher category (bool < integral < floating <
// complex). A complex lower tier over a floating higher one gives the complex type of the floating one's width
// (float32 tensor + complex128 zero-dim tensor: complex64).
int combine(int higher, int lower) {
  if (higher < 0) return lower;
  if (lower < 0) return higher;
  DType h = DType(higher), l = DType(lower);
  // One comparison keeps the real dtypes' path as it was (the complex dtypes are the enum's last).
  if (std::max(higher, lower) >= int(DType::Complex64)) [[unlikely]] {
    if (is_complex(h)) return higher;
    return is_floating(h) ? int(to_complex_dtype(h)) : lower;
  }
  if (is_floating(h)) return higher;
  if (h == DType::Bool || is_floating(l)) return promote_mixed(higher, l);
  return higher;
}
}  // namespace

void ResultType::add_tensor(DType t, int64_t ndim) {
  if (ndim > 0) dim_ = promote_opt(dim_, t);
  else zero_ = promote_opt(zero_, t);
}

void ResultType::add_scalar(const Scalar& s) { wrapped_ = promote_opt(wrapped_, s.default_dtype()); }

DType ResultType::result() const {
  int r = combine(dim_, combine(zero_, wrapped_));
  return r < 0 ? DType::Float32 : DType(r);
}

bool scalar_fits(const Scalar& s, DType t) {
  if (is_floating(t) || is_complex(t) || t == DType::Bool || s.is_bool()) return true;
  if (s.is_uint()) return t == DType::UInt64;  // [2**63, 2**64): beyond every other integral type
  double lo = 0, hi = 0;
  switch (t) {
    case DType::UInt8: lo = -255, hi = 255; break;
    case DType::Int8: lo = -128, hi = 127; break;
    case DType::Int16: lo = -32768, hi = 32767; break;
    case DType::UInt16: lo = -65535, hi = 65535; break;
    case DType::Int32: lo = -2147483648.0, hi = 2147483647; break;
    case DType::UInt32: lo = -4294967295.0, hi = 4294967295.0; break;
    case DType::UInt64: return !s.is_floating() || (std::isfinite(s.v.f) && s.v.f > -0x1p64 && s.v.f < 0x1p64);
    default: return !s.is_floating() || (std::isfinite(s.v.f) && s.v.f >= -0x1p63 && s.v.f < 0x1p63);  // int64
  }
  const double v = s.is_floating() ? s.v.f : static_cast<double>(s.v.i);  // exact for these ranges
  return !std::isnan(v) && v >= lo && v <= hi;
}

void check_scalar_fits(const char* op, const Scalar& s, DType t) {
  DG_CHECK(scalar_fits(s, t), Runtime, "[", op, "] value ", s.to_string(), " cannot be converted to type ",
           dtype_name(t), " without overflow");
}

}  // namespace dg
