// core/dtype: the dtype table, torch's promotion lattice, the float8 conversions, and the storage-only dtypes'
// refusal at enqueue (docs/dtypes.md). The Python suite (tests/python/test_dtypes.py) checks all of it against torch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "dygrad/dygrad.h"

using namespace dg;

namespace {
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
}  // namespace

TEST(CoreDType, TableNamesSizesAndCategories) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = static_cast<DType>(i);
    EXPECT_EQ(is_floating(t), std::string(dtype_name(t)).rfind("float", 0) == 0 || t == DType::BFloat16) << i;
    EXPECT_EQ(is_integral(t, true), !is_floating(t) && !is_complex(t)) << i;
    EXPECT_EQ(is_complex(t), std::string(dtype_name(t)).rfind("complex", 0) == 0) << i;
    EXPECT_EQ(is_signed(t), std::string(dtype_name(t)).find("uint") == std::string::npos && t != DType::Bool) << i;
  }
  EXPECT_EQ(itemsize(DType::Int8), 1u);
  EXPECT_EQ(itemsize(DType::Int16), 2u);
  EXPECT_EQ(itemsize(DType::UInt32), 4u);
  EXPECT_EQ(itemsize(DType::UInt64), 8u);
  EXPECT_EQ(itemsize(DType::Float8_e4m3fn), 1u);
  EXPECT_STREQ(dtype_name(DType::Float8_e5m2), "float8_e5m2");
  EXPECT_STREQ(dtype_torch_name(DType::Int8), "Char");
  EXPECT_TRUE(is_storage_only(DType::UInt32) && is_storage_only(DType::Float8_e5m2));
  EXPECT_FALSE(is_storage_only(DType::Int16) || is_storage_only(DType::Float64));
}

TEST(CoreDType, ComplexPromotionIsTorchs) {
  EXPECT_EQ(itemsize(DType::Complex64), 8u);
  EXPECT_EQ(itemsize(DType::Complex128), 16u);
  EXPECT_STREQ(dtype_torch_name(DType::Complex64), "ComplexFloat");
  EXPECT_TRUE(is_storage_only(DType::Complex128) && is_differentiable(DType::Complex64));
  EXPECT_EQ(to_real_dtype(DType::Complex128), DType::Float64);
  EXPECT_EQ(to_complex_dtype(DType::Float32), DType::Complex64);
  EXPECT_EQ(promote_types(DType::Complex64, DType::Float64), DType::Complex128);  // both parts need float64
  EXPECT_EQ(promote_types(DType::Int64, DType::Complex64), DType::Complex64);
  EXPECT_EQ(promote_types(DType::Bool, DType::Complex128), DType::Complex128);
  EXPECT_EQ(promote_types(DType::Complex64, DType::Complex128), DType::Complex128);
  EXPECT_EQ(promote_types(DType::BFloat16, DType::Complex64), DType::Complex64);
  EXPECT_FALSE(promotes(DType::UInt16, DType::Complex64));
  EXPECT_FALSE(promotes(DType::Float8_e4m3fn, DType::Complex128));
  // The tiers: a complex zero-dim tensor over a float32 tensor with dims gives float32's complex type.
  ResultType r;
  r.add_tensor(DType::Float32, 1);
  r.add_tensor(DType::Complex128, 0);
  EXPECT_EQ(r.result(), DType::Complex64);
  ResultType integral;
  integral.add_tensor(DType::Int32, 1);
  integral.add_tensor(DType::Complex128, 0);
  EXPECT_EQ(integral.result(), DType::Complex128);
}

TEST(CoreDType, PromotionIsTorchsTable) {
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int8), DType::Int16);  // no 8-bit type holds both
  EXPECT_EQ(promote_types(DType::Int8, DType::UInt8), DType::Int16);
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int16), DType::Int16);
  EXPECT_EQ(promote_types(DType::Int8, DType::Int32), DType::Int32);
  EXPECT_EQ(promote_types(DType::Bool, DType::Int8), DType::Int8);
  EXPECT_EQ(promote_types(DType::Int16, DType::Float16), DType::Float16);
  EXPECT_EQ(promote_types(DType::UInt32, DType::BFloat16), DType::BFloat16);
  EXPECT_EQ(promote_types(DType::UInt64, DType::UInt64), DType::UInt64);
  EXPECT_EQ(promote_types(DType::Float8_e4m3fn, DType::Float8_e4m3fn), DType::Float8_e4m3fn);
  EXPECT_FALSE(promotes(DType::UInt16, DType::Int32));  // torch 2.13 refuses; dygrad promoted by width before
  EXPECT_FALSE(promotes(DType::UInt64, DType::Int64));
  EXPECT_FALSE(promotes(DType::UInt32, DType::Bool));
  EXPECT_FALSE(promotes(DType::Float8_e5m2, DType::Float32));
  EXPECT_FALSE(promotes(DType::Float8_e5m2, DType::Float8_e4m3fn));
  try {
    promote_types(DType::UInt16, DType::Int64);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Runtime);
    EXPECT_NE(std::string(e.what()).find("attempted to promote UInt16 and Long"), std::string::npos) << e.what();
  }
  ResultType r;  // a uint8 tensor with an int8 zero-dim tensor: the dims tier decides, as in torch
  r.add_tensor(DType::UInt8, 1);
  r.add_tensor(DType::Int8, 0);
  EXPECT_EQ(r.result(), DType::UInt8);
}

TEST(CoreDType, ScalarRangesOfTheNewIntegers) {
  EXPECT_TRUE(scalar_fits(Scalar(int64_t{-128}), DType::Int8));
  EXPECT_FALSE(scalar_fits(Scalar(int64_t{128}), DType::Int8));
  EXPECT_FALSE(scalar_fits(Scalar(int64_t{-32769}), DType::Int16));
  EXPECT_TRUE(scalar_fits(Scalar(int64_t{-4294967295}), DType::UInt32));
  EXPECT_FALSE(scalar_fits(Scalar(int64_t{4294967296}), DType::UInt32));
  EXPECT_TRUE(scalar_fits(Scalar(int64_t{-1}), DType::UInt64));
  EXPECT_FALSE(scalar_fits(Scalar(1e30), DType::UInt64));
}

// An int in [2**63, 2**64) is a UInt Scalar (torch's Scalar holds it as uint64): integral, uint64 by default, exact
// as a double, wrapping as an integral cast, fitting uint64 only, and a distinct JIT attribute from the int64 of its
// bits (docs/dtypes.md, "Python ints beyond int64").
TEST(CoreDType, UIntScalarsBeyondInt64) {
  const uint64_t top = uint64_t{1} << 63, max = ~uint64_t{0};
  const Scalar u(top), m(max), small(uint64_t{5});
  EXPECT_EQ(u.kind, Scalar::Kind::UInt);
  EXPECT_EQ(small.kind, Scalar::Kind::Int);  // one representation per integer: below 2**63 an Int
  EXPECT_EQ(small.to_int(), 5);
  EXPECT_TRUE(u.is_integral() && u.is_uint() && !u.is_floating() && !u.is_bool());
  EXPECT_EQ(u.default_dtype(), DType::UInt64);
  EXPECT_EQ(u.to_double(), 9223372036854775808.0);
  EXPECT_EQ(m.to_double(), 18446744073709551616.0);
  EXPECT_EQ(u.to_int(), std::numeric_limits<int64_t>::min());  // wraps, as torch's cast
  EXPECT_EQ(m.to<int64_t>(), -1);
  EXPECT_EQ(m.to<uint8_t>(), 255);
  EXPECT_EQ(m.to<uint64_t>(), max);
  EXPECT_EQ(u.to<int32_t>(), 0);
  EXPECT_EQ(u.to<float>(), 9223372036854775808.0f);
  EXPECT_TRUE(u.to<bool>());
  EXPECT_EQ(u.to_string(), "9223372036854775808");
  EXPECT_EQ(m.to_string(), "18446744073709551615");
  EXPECT_TRUE(scalar_fits(m, DType::UInt64));
  EXPECT_TRUE(scalar_fits(m, DType::Float16) && scalar_fits(m, DType::Bool));
  for (DType t : {DType::Int64, DType::Int32, DType::UInt8, DType::UInt32})
    EXPECT_FALSE(scalar_fits(u, t)) << dtype_name(t);
  try {
    check_scalar_fits("fill_", u, DType::Int64);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[fill_] value 9223372036854775808 cannot be converted to type int64 without overflow");
  }
  // Negation: -(-2**63) is the UInt 2**63 and back; above 2**63 the negation mod 2**64 (an Int).
  const Scalar int_min(std::numeric_limits<int64_t>::min());
  EXPECT_EQ(int_min.negated().kind, Scalar::Kind::UInt);
  EXPECT_EQ(int_min.negated().to_double(), 9223372036854775808.0);
  EXPECT_EQ(u.negated().kind, Scalar::Kind::Int);
  EXPECT_EQ(u.negated().to_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(m.negated().to_int(), 1);
  // torch.result_type: an integral scalar, so an integral tensor keeps its dtype; bool and int64 refuse uint64.
  ResultType r;
  r.add_tensor(DType::UInt8, 1);
  r.add_scalar(u);
  EXPECT_EQ(r.result(), DType::UInt8);
  ResultType f;
  f.add_tensor(DType::Float16, 1);
  f.add_scalar(u);
  EXPECT_EQ(f.result(), DType::Float16);
  ResultType b;
  b.add_tensor(DType::Bool, 1);
  b.add_scalar(u);
  EXPECT_THROW(b.result(), Error);
  ResultType two;
  two.add_scalar(u);
  EXPECT_THROW(two.add_scalar(Scalar(1)), Error);
  // The JIT's attribute equality and hash tell the UInt 2**63 from the Int -2**63 (the same bits).
  const Attrs a = ScalarAttrs{u}, same = ScalarAttrs{Scalar(top)}, bits = ScalarAttrs{int_min};
  EXPECT_TRUE(a == same);
  EXPECT_EQ(a.hash(), same.hash());
  EXPECT_FALSE(a == bits);
  static_assert(sizeof(Scalar) == 16, "Scalar stays a kind and an 8-byte value");
}

TEST(CoreDType, Float8RoundTripsEveryFiniteCode) {
  for (int b = 0; b < 256; ++b) {
    const auto code = static_cast<uint8_t>(b);
    const float e4m3 = Float8_e4m3fn::to_float(code);
    if ((code & 0x7f) == 0x7f) EXPECT_TRUE(std::isnan(e4m3)) << b;
    else EXPECT_EQ(Float8_e4m3fn::from_float(e4m3), code) << b;
    Float8_e5m2 e5m2;
    e5m2.bits = code;
    const float wide = e5m2;
    if ((code & 0x7f) > 0x7c) EXPECT_TRUE(std::isnan(wide)) << b;
    else EXPECT_EQ(Float8_e5m2::from_float(wide), code) << b;
  }
  EXPECT_EQ(Float8_e4m3fn::to_float(0x7e), 448.0f);
  EXPECT_EQ(Float8_e4m3fn::to_float(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(bits_of(Float8_e4m3fn::to_float(0x80)), 0x80000000u);   // -0
}

TEST(CoreDType, Float8RoundsToNearestEvenSaturatesE4m3AndOverflowsE5m2) {
  EXPECT_EQ(Float8_e4m3fn::from_float(1.0625f), 0x38);   // halfway between 1 and 1.125: even (1)
  EXPECT_EQ(Float8_e4m3fn::from_float(1.1875f), 0x3a);   // halfway between 1.125 and 1.25: even (1.25)
  EXPECT_EQ(Float8_e4m3fn::from_float(464.0f), 0x7e);    // the tie above 448 saturates, never NaN
  EXPECT_EQ(Float8_e4m3fn::from_float(-INFINITY), 0xfe);
  EXPECT_EQ(Float8_e4m3fn::from_float(-NAN), 0xff);
  EXPECT_EQ(Float8_e4m3fn::from_float(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: even (0)
  EXPECT_EQ(Float8_e5m2::from_float(61440.0f), 0x7c);    // the tie above 57344 rounds to inf
  EXPECT_EQ(Float8_e5m2::from_float(60000.0f), 0x7b);
  EXPECT_EQ(Float8_e5m2::from_float(NAN), 0x7f);
  EXPECT_EQ(Float8_e5m2::from_float(std::ldexp(3.0f, -17)), 0x02);  // 1.5 subnormal steps: even (2)
}

TEST(CoreDType, SmallIntegersComputeAndPromoteAsTorch) {
  Tensor a = to(from_vector<int64_t>({100, -100, 127}, std::vector<int64_t>{3}), DType::Int8);
  Tensor b = to(from_vector<int64_t>({200, 255, 0}, std::vector<int64_t>{3}), DType::UInt8);
  Tensor sum = add(a, b);
  EXPECT_EQ(sum.dtype(), DType::Int16);
  EXPECT_EQ(sum.to_vector<int64_t>(), (std::vector<int64_t>{300, 155, 127}));
  Tensor wrapped = add(a, a);  // int8 + int8 stays int8 and wraps
  EXPECT_EQ(wrapped.dtype(), DType::Int8);
  EXPECT_EQ(wrapped.to_vector<int64_t>(), (std::vector<int64_t>{-56, 56, -2}));
}

TEST(CoreDType, StorageOnlyDTypesAreRefusedAtEnqueueNamingTheOp) {
  Tensor x = to(from_vector<int64_t>({1, 2, 3}, std::vector<int64_t>{3}), DType::UInt32);
  EXPECT_EQ(to(x, DType::Float32).to_vector<float>(), (std::vector<float>{1, 2, 3}));  // copy: every dtype
  try {
    add(x, x);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotImplemented);
    EXPECT_STREQ(e.what(), "[add] not implemented for 'UInt32'");
  }
  Tensor f8 = to(from_vector<float>({1.5f, -2.0f}, std::vector<int64_t>{2}), DType::Float8_e4m3fn);
  EXPECT_EQ(to(f8, DType::Float32).to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_THROW(add(f8, f8), Error);  // (mul is composed for float8: ops/storage_only.cpp)
  EXPECT_EQ(eq(f8, f8).to_vector<bool>(), (std::vector<bool>{true, true}));  // eq runs on every dtype
}
