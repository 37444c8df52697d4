// Elementwise math ops (ops/math.h): unary functions against float64 host references on contiguous,
// non-contiguous, broadcast, zero-size and 0-dim inputs; special values; promotion; pow and
// maximum/minimum; in-place forms; gradients by finite differences; error paths.
#include <limits>

#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
// torch's formula in long double: 1 + tanh(u) cancels for negative x, and the extra bits keep the
// reference accurate to float64 there.
double ref_gelu_tanh(double x) {
  const long double xl = x, u = std::sqrt(2.0L / 3.14159265358979323846264338327950288L) * (xl + 0.044715L * xl * xl * xl);
  return static_cast<double>(0.5L * xl * (1.0L + std::tanh(u)));
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  double (*reference)(double);
  double lo, hi;        // input range for random values
  double float32_rtol;  // float32 results against the float64 reference
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"exp", [](const Tensor& x) { return dg::exp(x); }, [](double x) { return std::exp(x); }, -20, 20, 1e-6},
      {"log", [](const Tensor& x) { return dg::log(x); }, [](double x) { return std::log(x); }, 1e-3, 50, 1e-6},
      {"expm1", [](const Tensor& x) { return dg::expm1(x); }, [](double x) { return std::expm1(x); }, -20, 20, 1e-6},
      {"log1p", [](const Tensor& x) { return dg::log1p(x); }, [](double x) { return std::log1p(x); }, -0.9, 50, 1e-6},
      {"sqrt", [](const Tensor& x) { return dg::sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 50, 1e-6},
      {"rsqrt", [](const Tensor& x) { return dg::rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 1e-3, 50, 1e-6},
      {"abs", [](const Tensor& x) { return dg::abs(x); }, [](double x) { return std::fabs(x); }, -5, 5, 0},
      {"sin", [](const Tensor& x) { return dg::sin(x); }, [](double x) { return std::sin(x); }, -6, 6, 1e-6},
      {"cos", [](const Tensor& x) { return dg::cos(x); }, [](double x) { return std::cos(x); }, -6, 6, 1e-6},
      {"tanh", [](const Tensor& x) { return dg::tanh(x); }, [](double x) { return std::tanh(x); }, -8, 8, 1e-6},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, ref_sigmoid, -30, 30, 1e-6},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x * ref_sigmoid(x); }, -30, 30, 1e-6},
      {"gelu", [](const Tensor& x) { return gelu(x); }, ref_gelu, -8, 8, 1e-6},
      // x^3 inside the tanh form carries float32 rounding that exp(-2u) amplifies by 2|u| (about 10 at |x| = 5).
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, ref_gelu_tanh, -5, 5, 5e-6},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x < 0 ? 0.0 : x; }, -5, 5, 0},
  };
}

std::vector<double> map_values(const std::vector<double>& x, double (*f)(double)) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = f(x[i]);
  return y;
}

struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance_for(DType dtype, const UnaryCase& c) {
  if (dtype == DType::Float64) return {1e-12, 1e-300};
  if (dtype == DType::BFloat16) return {1e-2, 1e-3};
  return {c.float32_rtol, 1e-30};
}
}  // namespace

TEST(Math, UnaryMatchesReferenceOnAllLayouts) {
  const std::vector<Shape> shapes = {{}, {0, 3}, {1}, {7}, {3, 5, 33}};
  for (const UnaryCase& c : unary_cases()) {
    for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
      const Tolerance tol = tolerance_for(dtype, c);
      const std::string what = std::string(c.name) + " " + dtype_name(dtype);
      uint32_t seed = 10;
      for (const Shape& shape : shapes) {
        Tensor x = random_tensor(shape, dtype, seed++, c.lo, c.hi);
        const std::vector<double> expected = map_values(x.to_vector<double>(), c.reference);
        Tensor y = c.op(x);
        EXPECT_EQ(y.dtype(), dtype) << what;
        expect_shape(y, shape);
        expect_close(y, expected, tol.rtol, tol.atol, what + " contiguous");
        if (x.numel() > 1) expect_close(c.op(non_contiguous(x)), expected, tol.rtol, tol.atol, what + " strided");
      }
      // Broadcast input: one row expanded to 4 rows (stride 0).
      Tensor row = random_tensor({1, 19}, dtype, seed++, c.lo, c.hi);
      std::vector<double> row_expected = map_values(row.to_vector<double>(), c.reference), expected;
      for (int r = 0; r < 4; ++r) expected.insert(expected.end(), row_expected.begin(), row_expected.end());
      expect_close(c.op(expand(row, Shape{4, 19})), expected, tol.rtol, tol.atol, what + " broadcast");
    }
  }
}

// float16 computes in float32 and rounds once; inputs in [-4, 4] keep every result in float16's range.
TEST(Math, Float16MatchesReference) {
  for (const UnaryCase& c : unary_cases()) {
    const double lo = std::max(c.lo, -4.0), hi = std::min(c.hi, 4.0);
    Tensor x = random_tensor({5, 13}, DType::Float16, 90, lo, hi);
    const std::vector<double> expected = map_values(x.to_vector<double>(), c.reference);
    Tensor y = c.op(x);
    EXPECT_EQ(y.dtype(), DType::Float16);
    expect_close(y, expected, 2e-3, 1e-4, std::string(c.name) + " float16");
    expect_close(c.op(non_contiguous(x)), expected, 2e-3, 1e-4, std::string(c.name) + " float16 strided");
  }
}

// Large contiguous float32 sweeps: the vectorised paths (and the threaded split) over the whole range.
TEST(Math, VectorisedFloat32SweepsWithinTolerance) {
  struct Sweep {
    UnaryCase c;
    double lo, hi;
  };
  std::vector<Sweep> sweeps;
  for (const UnaryCase& c : unary_cases()) {
    if (std::string(c.name) == "exp") sweeps.push_back({c, -103, 88.7});  // subnormal results to overflow
    else if (std::string(c.name) == "log") sweeps.push_back({c, 1e-44, 3e38});  // subnormal inputs included
    else if (std::string(c.name) == "tanh") sweeps.push_back({c, -10, 10});
    else if (std::string(c.name) == "expm1") sweeps.push_back({c, -30, 88.7});  // the clamp at -20, exp above 20
    else if (std::string(c.name) == "log1p") sweeps.push_back({c, -0.999, 1e4});
    else if (std::string(c.name) == "sigmoid" || std::string(c.name) == "silu") sweeps.push_back({c, -80, 80});
    else if (std::string(c.name) == "gelu") sweeps.push_back({c, -12, 12});
    else if (std::string(c.name) == "gelu_tanh") sweeps.push_back({c, -6, 6});
  }
  ASSERT_EQ(sweeps.size(), 9u);
  const int64_t n = 200003;
  for (const Sweep& s : sweeps) {
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const double t = double(i) / double(n - 1);
      // log: geometric spacing, so every binade is covered
      values[static_cast<size_t>(i)] = std::string(s.c.name) == "log"
                                           ? static_cast<float>(s.lo * std::pow(s.hi / s.lo, t))
                                           : static_cast<float>(s.lo + (s.hi - s.lo) * t);
    }
    Tensor x = from_vector<float>(values, Shape{n});
    const std::vector<double> expected = map_values(x.to_vector<double>(), s.c.reference);
    expect_close(s.c.op(x), expected, s.c.float32_rtol, 1e-37, std::string(s.c.name) + " sweep");
  }
}

TEST(Math, SpecialValues) {
  // inf, nan, signed zeros, negatives (nan for log/sqrt) and subnormals, against the float64 reference
  // applied to the stored input values.
  const std::vector<double> specials = {0.0, -0.0, kInf, -kInf, kNaN, -1.0, 1e-40, -1e-40, 2.0};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor x = tensor_from(specials, {static_cast<int64_t>(specials.size())}, dtype);
    const std::vector<double> stored = x.to_vector<double>();
    for (const UnaryCase& c : unary_cases()) {
      std::vector<double> expected = map_values(stored, c.reference);
      if (dtype == DType::Float32)  // round to float32 first: subnormal results carry absolute error only
        for (double& e : expected) e = static_cast<double>(static_cast<float>(e));
      expect_close(c.op(x), expected, std::max(c.float32_rtol, 1e-12), 1e-45,
                   std::string(c.name) + " special values " + dtype_name(dtype));
    }
    // The values torch documents, spelled out.
    expect_close(dg::log(x), {-kInf, -kInf, kInf, kNaN, kNaN, kNaN, std::log(stored[6]), kNaN, std::log(2.0)}, 1e-6, 0);
    expect_close(dg::sqrt(x), {0, 0, kInf, kNaN, kNaN, kNaN, std::sqrt(stored[6]), kNaN, std::sqrt(2.0)}, 1e-6, 0);
    expect_close(dg::exp(x), {1, 1, kInf, 0, kNaN, std::exp(-1.0), 1, 1, std::exp(2.0)}, 1e-6, 0);
    expect_close(sigmoid(x), {0.5, 0.5, 1, 0, kNaN, ref_sigmoid(-1), 0.5, 0.5, ref_sigmoid(2)}, 1e-6, 0);
    expect_close(relu(x), {0, 0, kInf, 0, kNaN, 0, stored[6], 0, 2}, 0, 0);
  }
  // Sign of zero where torch defines it.
  Tensor z = tensor_from({-0.0}, {1}, DType::Float32);
  EXPECT_TRUE(std::signbit(dg::sqrt(z).item<double>()));
  EXPECT_FALSE(std::signbit(dg::abs(z).item<double>()));
  EXPECT_TRUE(std::signbit(dg::tanh(z).item<double>()));
  EXPECT_TRUE(std::isinf(rsqrt(z).item<double>()) && rsqrt(z).item<double>() < 0);
}

TEST(Math, IntegerInputsPromote) {
  Tensor i = from_vector<int64_t>({-2, 0, 3}, Shape{3});
  Tensor e = dg::exp(i);
  EXPECT_EQ(e.dtype(), DType::Float32);
  expect_close(e, {std::exp(-2.0), 1.0, std::exp(3.0)}, 1e-6, 0);
  EXPECT_EQ(sigmoid(from_vector<int32_t>({1}, Shape{1})).dtype(), DType::Float32);
  EXPECT_EQ(dg::sqrt(from_vector<uint8_t>({1, 0}, Shape{2}, DType::Bool)).dtype(), DType::Float32);
  Tensor a = dg::abs(i);
  EXPECT_EQ(a.dtype(), DType::Int64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 3}));
  // The most negative integer wraps to itself, as in torch.
  EXPECT_EQ(dg::abs(from_vector<int64_t>({std::numeric_limits<int64_t>::min()}, Shape{1})).item<int64_t>(),
            std::numeric_limits<int64_t>::min());
  Tensor r = relu(from_vector<int32_t>({-5, 7}, Shape{2}));
  EXPECT_EQ(r.dtype(), DType::Int32);
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(dg::abs(from_vector<uint8_t>({200, 3}, Shape{2})).to_vector<int64_t>(), (std::vector<int64_t>{200, 3}));
}

TEST(Math, PowTensorScalarFastPathsAndGeneral) {
  Tensor x = random_tensor({4, 9}, DType::Float64, 3, 0.1, 3.0);
  for (double p : {0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 1.7, -2.3}) {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      Tensor xd = to(x, dtype);
      std::vector<double> expected;
      for (double v : xd.to_vector<double>()) expected.push_back(std::pow(v, p));
      const double rtol = dtype == DType::Float64 ? 1e-12 : 2e-6;
      expect_close(pow(xd, p), expected, rtol, 0, "pow " + std::to_string(p));
      expect_close(pow(non_contiguous(xd), p), expected, rtol, 0, "pow strided " + std::to_string(p));
    }
  }
  // bfloat16 (computed in float32, rounded once), zero-size and 0-dim.
  Tensor xb = to(x, DType::BFloat16);
  for (double p : {2.0, 0.5, -1.0, 1.3}) {
    std::vector<double> expected;
    for (double v : xb.to_vector<double>()) expected.push_back(std::pow(v, p));
    Tensor out = pow(xb, p);
    EXPECT_EQ(out.dtype(), DType::BFloat16);
    expect_close(out, expected, 1e-2, 1e-3, "pow bfloat16 " + std::to_string(p));
  }
  expect_shape(pow(random_tensor({0, 4}), 2.0), {0, 4});
  expect_shape(pow(2.0, random_tensor({0})), {0});
  expect_shape(pow(random_tensor({3, 0}), random_tensor({0})), {3, 0});
  expect_shape(maximum(random_tensor({0, 2}), random_tensor({2})), {0, 2});
  EXPECT_DOUBLE_EQ(pow(tensor_from({3.0}, {}), 2.0).item<double>(), 9.0);
  // Integer tensors keep their dtype for integer exponents (wrapping like torch); a float exponent promotes.
  Tensor i = from_vector<int64_t>({-3, 0, 2, 5}, Shape{4});
  EXPECT_EQ(pow(i, 2).dtype(), DType::Int64);
  EXPECT_EQ(pow(i, 2).to_vector<int64_t>(), (std::vector<int64_t>{9, 0, 4, 25}));
  EXPECT_EQ(pow(i, 3).to_vector<int64_t>(), (std::vector<int64_t>{-27, 0, 8, 125}));
  EXPECT_EQ(pow(i, 5).to_vector<int64_t>(), (std::vector<int64_t>{-243, 0, 32, 3125}));
  EXPECT_EQ(pow(from_vector<int32_t>({2}, Shape{1}), 2).dtype(), DType::Int32);
  Tensor h = pow(i, 0.5);
  EXPECT_EQ(h.dtype(), DType::Float32);
  expect_close(h, {kNaN, 0, std::sqrt(2.0), std::sqrt(5.0)}, 1e-6, 0);
  // Special values: x^0 == 1 even for nan; 0^-1 == inf.
  Tensor s = tensor_from({0.0, kNaN, -1.0}, {3}, DType::Float32);
  expect_close(pow(s, 0), {1, 1, 1}, 0, 0);
  expect_close(pow(s, -1), {kInf, kNaN, -1}, 0, 0);
  expect_close(pow(s, 0.5), {0, kNaN, kNaN}, 0, 0);
}

TEST(Math, PowScalarBaseAndTensorExponent) {
  Tensor e = random_tensor({5, 6}, DType::Float64, 4, -2, 2);
  for (double base : {2.0, 0.5, 3.7}) {
    std::vector<double> expected;
    for (double v : e.to_vector<double>()) expected.push_back(std::pow(base, v));
    expect_close(pow(base, e), expected, 1e-12, 0, "scalar ^ tensor");
    expect_close(pow(base, non_contiguous(e)), expected, 1e-12, 0, "scalar ^ strided tensor");
  }
  Tensor i = from_vector<int64_t>({-1, 0, 1, 4}, Shape{4});
  Tensor r = pow(2, i);
  EXPECT_EQ(r.dtype(), DType::Int64);
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 16}));  // integer 2^-1 is 0
  EXPECT_EQ(pow(-1, i).to_vector<int64_t>(), (std::vector<int64_t>{-1, 1, -1, 1}));
  Tensor f = pow(2.0, i);
  EXPECT_EQ(f.dtype(), DType::Float32);
  expect_close(f, {0.5, 1, 2, 16}, 0, 0);
}

TEST(Math, PowTensorTensorBroadcastAndPromotion) {
  Tensor base = random_tensor({3, 1, 4}, DType::Float64, 5, 0.2, 2.0);
  Tensor exponent = random_tensor({5, 1}, DType::Float64, 6, -2, 2);
  Tensor out = pow(base, exponent);
  expect_shape(out, {3, 5, 4});
  std::vector<double> b = base.to_vector<double>(), p = exponent.to_vector<double>(), expected;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 4; ++k) expected.push_back(std::pow(b[size_t(i * 4 + k)], p[size_t(j)]));
  expect_close(out, expected, 1e-12, 0);
  expect_close(pow(non_contiguous(base), non_contiguous(exponent)), expected, 1e-12, 0);
  Tensor ib = from_vector<int64_t>({2, 3}, Shape{2});
  EXPECT_EQ(pow(ib, from_vector<int64_t>({3, -1}, Shape{2})).to_vector<int64_t>(), (std::vector<int64_t>{8, 0}));
  Tensor mixed = pow(ib, tensor_from({2.5}, {1}, DType::Float32));
  EXPECT_EQ(mixed.dtype(), DType::Float32);
  expect_close(mixed, {std::pow(2.0, 2.5), std::pow(3.0, 2.5)}, 1e-6, 0);
}

TEST(Math, MaximumMinimum) {
  Tensor a = random_tensor({4, 1, 6}, DType::Float64, 7);
  Tensor b = random_tensor({3, 6}, DType::Float64, 8);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), emax, emin;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 6; ++k) {
        emax.push_back(std::max(av[size_t(i * 6 + k)], bv[size_t(j * 6 + k)]));
        emin.push_back(std::min(av[size_t(i * 6 + k)], bv[size_t(j * 6 + k)]));
      }
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    Tensor x = to(a, dtype), y = to(b, dtype);
    const double tol = dtype == DType::BFloat16 ? 1e-2 : dtype == DType::Float32 ? 1e-7 : 0;
    expect_close(maximum(x, y), emax, tol, tol, "maximum");
    expect_close(minimum(x, y), emin, tol, tol, "minimum");
    expect_close(maximum(non_contiguous(x), non_contiguous(y)), emax, tol, tol, "maximum strided");
    expect_close(minimum(non_contiguous(x), y), emin, tol, tol, "minimum strided");
  }
  // nan in either operand propagates.
  Tensor p = tensor_from({kNaN, 1.0, 2.0, -kInf}, {4}, DType::Float32);
  Tensor q = tensor_from({0.0, kNaN, 3.0, 0.0}, {4}, DType::Float32);
  expect_close(maximum(p, q), {kNaN, kNaN, 3, 0}, 0, 0);
  expect_close(minimum(p, q), {kNaN, kNaN, 2, -kInf}, 0, 0);
  // Promotion: int32 tensor with a 0-dim float tensor gives float32.
  Tensor m = maximum(from_vector<int32_t>({1, 5}, Shape{2}), tensor_from({2.5}, {}, DType::Float32));
  EXPECT_EQ(m.dtype(), DType::Float32);
  expect_close(m, {2.5, 5}, 0, 0);
  EXPECT_EQ(minimum(from_vector<int64_t>({4, -9}, Shape{2}), from_vector<int64_t>({2, 2}, Shape{2})).to_vector<int64_t>(),
            (std::vector<int64_t>{2, -9}));
}

TEST(Math, Gradients) {
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  struct Case {
    const char* name;
    Fn f;
    std::vector<Tensor> inputs;
  };
  auto r = [](Shape s, uint32_t seed, double lo = -1, double hi = 1) { return random_tensor(s, DType::Float64, seed, lo, hi); };
  const std::vector<Case> cases = {
      {"exp", [](auto& x) { return dg::exp(x[0]); }, {r({2, 3}, 1)}},
      {"log", [](auto& x) { return dg::log(x[0]); }, {r({2, 3}, 2, 0.5, 2)}},
      {"sqrt", [](auto& x) { return dg::sqrt(x[0]); }, {r({2, 3}, 3, 0.5, 2)}},
      {"rsqrt", [](auto& x) { return rsqrt(x[0]); }, {r({2, 3}, 4, 0.5, 2)}},
      {"abs", [](auto& x) { return dg::abs(x[0]); }, {r({2, 3}, 5)}},
      {"sin", [](auto& x) { return dg::sin(x[0]); }, {r({2, 3}, 6, -3, 3)}},
      {"cos", [](auto& x) { return dg::cos(x[0]); }, {r({2, 3}, 7, -3, 3)}},
      {"tanh", [](auto& x) { return dg::tanh(x[0]); }, {r({2, 3}, 8, -2, 2)}},
      {"sigmoid", [](auto& x) { return sigmoid(x[0]); }, {r({2, 3}, 9, -4, 4)}},
      {"silu", [](auto& x) { return silu(x[0]); }, {r({2, 3}, 10, -4, 4)}},
      {"gelu", [](auto& x) { return gelu(x[0]); }, {r({2, 3}, 11, -3, 3)}},
      {"gelu_tanh", [](auto& x) { return gelu(x[0], "tanh"); }, {r({2, 3}, 12, -3, 3)}},
      {"relu", [](auto& x) { return relu(x[0]); }, {r({2, 3}, 13)}},
      {"pow_scalar_2", [](auto& x) { return pow(x[0], 2); }, {r({2, 3}, 14)}},
      {"pow_scalar_3", [](auto& x) { return pow(x[0], 3); }, {r({2, 3}, 15)}},
      {"pow_scalar_frac", [](auto& x) { return pow(x[0], 1.7); }, {r({2, 3}, 16, 0.5, 2)}},
      {"pow_scalar_neg", [](auto& x) { return pow(x[0], -0.5); }, {r({2, 3}, 17, 0.5, 2)}},
      {"pow_scalar_0", [](auto& x) { return pow(x[0], 0); }, {r({2, 3}, 18)}},
      {"pow_scalar_1", [](auto& x) { return pow(x[0], 1); }, {r({2, 3}, 19)}},
      {"rpow", [](auto& x) { return pow(2.5, x[0]); }, {r({2, 3}, 20)}},
      {"pow_tensor", [](auto& x) { return pow(x[0], x[1]); }, {r({2, 3}, 21, 0.5, 2), r({3}, 22, -2, 2)}},
      {"maximum", [](auto& x) { return maximum(x[0], x[1]); }, {r({2, 3}, 23), r({3}, 24)}},
      {"minimum", [](auto& x) { return minimum(x[0], x[1]); }, {r({2, 1}, 25), r({2, 3}, 26)}},
      {"chain", [](auto& x) { return silu(dg::tanh(dg::exp(x[0]))); }, {r({4}, 27)}},
  };
  for (const Case& c : cases) gradcheck(c.f, c.inputs, 1e-6, 1e-6, 1e-5, c.name);
}

TEST(Math, GradientEdgeCases) {
  // pow(x, 0) has gradient 0 even at x == 0; relu passes nothing at x <= 0; maximum splits ties evenly.
  Tensor x = tensor_from({0.0, 1.0, -2.0}, {3});
  x.set_requires_grad(true);
  sum(pow(x, 0)).backward();
  expect_close(x.grad(), {0, 0, 0}, 0, 0);
  Tensor y = tensor_from({0.0, 2.0, -1.0}, {3});
  y.set_requires_grad(true);
  sum(relu(y)).backward();
  expect_close(y.grad(), {0, 1, 0}, 0, 0);
  Tensor a = tensor_from({1.0, 2.0, 3.0}, {3}), b = tensor_from({1.0, 5.0, 0.0}, {3});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  sum(maximum(a, b)).backward();
  expect_close(a.grad(), {0.5, 0, 1}, 0, 0);
  expect_close(b.grad(), {0.5, 1, 0}, 0, 0);
  // d/db a^b at a == 0 is taken as 0 (torch), so no nan leaks from log(0).
  Tensor base = tensor_from({0.0, 2.0}, {2}), exponent = tensor_from({2.0, 3.0}, {2});
  base.set_requires_grad(true);
  exponent.set_requires_grad(true);
  sum(pow(base, exponent)).backward();
  expect_close(base.grad(), {0, 12}, 1e-12, 0);
  expect_close(exponent.grad(), {0, 8 * std::log(2.0)}, 1e-12, 0);
  // The float32 gradient of integer-promoted input does not exist (ints never require grad), but a
  // float32 chain works end to end.
  Tensor f = tensor_from({0.5, -0.5}, {2}, DType::Float32);
  f.set_requires_grad(true);
  sum(gelu(f)).backward();
  const double d0 = 0.5 * std::erfc(-0.5 / std::sqrt(2.0)) + 0.5 * std::exp(-0.125) / std::sqrt(2 * M_PI);
  const double d1 = 0.5 * std::erfc(0.5 / std::sqrt(2.0)) - 0.5 * std::exp(-0.125) / std::sqrt(2 * M_PI);
  expect_close(f.grad(), {d0, d1}, 1e-6, 0);
}

// The fused float32 backward kernels against analytic derivatives in float64.
TEST(Math, Float32BackwardMatchesAnalyticDerivative) {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    double (*derivative)(double);
  };
  const std::vector<Case> cases = {
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return ref_sigmoid(x) * (1 - ref_sigmoid(x)); }},
      {"tanh", [](const Tensor& x) { return dg::tanh(x); }, [](double x) { return 1 - std::tanh(x) * std::tanh(x); }},
      {"silu", [](const Tensor& x) { return silu(x); },
       [](double x) { return ref_sigmoid(x) * (1 + x * (1 - ref_sigmoid(x))); }},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? 1.0 : 0.0; }},
      {"gelu", [](const Tensor& x) { return gelu(x); },
       [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); },
       [](double x) {
         const double k = std::sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x), t = std::tanh(u);
         return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
       }},
  };
  for (const Case& c : cases) {
    Tensor x = random_tensor({67, 3}, DType::Float32, 70, -6, 6);
    Tensor w = random_tensor({3, 67}, DType::Float32, 71);
    x.set_requires_grad(true);
    sum(mul(c.op(transpose(x, 0, 1)), w)).backward();  // a strided input
    std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), expected;
    for (size_t j = 0; j < 67; ++j)
      for (size_t i = 0; i < 3; ++i) expected.push_back(wv[i * 67 + j] * c.derivative(xv[j * 3 + i]));
    EXPECT_EQ(x.grad().dtype(), DType::Float32);
    expect_close(x.grad(), expected, 1e-5, 1e-6, std::string(c.name) + " float32 backward");
  }
}

TEST(Math, InPlaceExpAndRelu) {
  Tensor x = random_tensor({3, 4}, DType::Float64, 30);
  const std::vector<double> xv = x.to_vector<double>();
  Tensor plain = clone(x);
  exp_(plain);
  expect_close(plain, map_values(xv, [](double v) { return std::exp(v); }), 1e-12, 0);
  // Through a strided view: only the viewed elements change.
  Tensor base = clone(x);
  Tensor column = as_strided(base, Shape{3}, Shape{4}, 2);  // base[:, 2]
  relu_(column);
  std::vector<double> expected = xv;
  for (int i = 0; i < 3; ++i) expected[size_t(i * 4 + 2)] = std::max(0.0, expected[size_t(i * 4 + 2)]);
  expect_close(base, expected, 0, 0);
  // Autograd through the in-place forms (on non-leaf tensors): k = exp_(1.5 * relu_(2x)).
  Tensor leaf = clone(x);
  leaf.set_requires_grad(true);
  Tensor h = mul(leaf, 2.0);
  relu_(h);
  Tensor k = mul(h, 1.5);
  exp_(k);
  Tensor w = random_tensor({3, 4}, DType::Float64, 31);
  sum(mul(k, w)).backward();
  std::vector<double> wv = w.to_vector<double>(), g;
  for (size_t i = 0; i < xv.size(); ++i) g.push_back(xv[i] > 0 ? wv[i] * 3 * std::exp(3 * xv[i]) : 0.0);
  expect_close(leaf.grad(), g, 1e-12, 0);
  gradcheck([](const std::vector<Tensor>& v) { Tensor t = mul(v[0], 1.0); return exp_(t); }, {random_tensor({5}, DType::Float64, 32)},
            1e-6, 1e-6, 1e-5, "exp_");
  gradcheck([](const std::vector<Tensor>& v) { Tensor t = mul(v[0], 1.0); return relu_(t); }, {random_tensor({5}, DType::Float64, 33)},
            1e-6, 1e-6, 1e-5, "relu_");
}

namespace {
void expect_error_kind(const std::function<void()>& f, ErrorKind kind, const std::string& op) {
  try {
    f();
    FAIL() << "expected an error from " << op;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(Math, InPlaceErrors) {
  Tensor leaf = random_tensor({3}, DType::Float64, 40);
  leaf.set_requires_grad(true);
  EXPECT_THROW(exp_(leaf), Error);
  Tensor i = from_vector<int64_t>({1, 2}, Shape{2});
  try {
    exp_(i);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Runtime);  // torch: RuntimeError "result type Float can't be cast ..."
    EXPECT_NE(std::string(e.what()).find("[exp_]"), std::string::npos) << e.what();
  }
  // An expanded tensor (stride 0) cannot be written in place.
  Tensor expanded = expand(random_tensor({1, 3}, DType::Float32, 42), Shape{4, 3});
  expect_error_kind([&] { relu_(expanded); }, ErrorKind::Runtime, "[relu_]");
  expect_error_kind([&] { exp_(expanded); }, ErrorKind::Runtime, "[exp_]");
  // A tensor saved for backward and then modified in place: backward raises.
  Tensor x = random_tensor({3}, DType::Float64, 41);
  x.set_requires_grad(true);
  Tensor y = dg::exp(x);  // saves its output y
  exp_(y);
  EXPECT_THROW(sum(y).backward(), Error);
  Tensor z = mul(x, 2.0);  // torch raises here too: exp_ saves its result, which relu_ then overwrites
  exp_(z);
  relu_(z);
  EXPECT_THROW(sum(z).backward(), Error);
}

TEST(Math, Errors) {
  auto expect_error = [](const std::function<void()>& f, ErrorKind kind, const std::string& op) {
    try {
      f();
      FAIL() << "expected an error from " << op;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
    }
  };
  Tensor f = random_tensor({2, 3}, DType::Float32, 50);
  Tensor i = from_vector<int64_t>({1, 2}, Shape{2});
  Tensor b = from_vector<uint8_t>({1, 0}, Shape{2}, DType::Bool);
  expect_error([&] { gelu(f, "fast"); }, ErrorKind::Value, "[gelu]");
  expect_error([&] { relu(b); }, ErrorKind::Type, "[relu]");
  expect_error([&] { dg::abs(b); }, ErrorKind::Type, "[abs]");
  expect_error([&] { pow(i, -1); }, ErrorKind::Value, "[pow]");
  expect_error([&] { maximum(f, random_tensor({4}, DType::Float32)); }, ErrorKind::Value, "[maximum]");
  expect_error([&] { pow(f, random_tensor({2, 2}, DType::Float32)); }, ErrorKind::Value, "[pow]");
  expect_error([&] { dg::exp(Tensor()); }, ErrorKind::Value, "[exp]");
}

// Double backward: the first derivative, computed with create_graph, is itself checked by finite differences.
TEST(Math, SecondOrderGradients) {
  using Op = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, Op>> ops = {
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return dg::tanh(x); }},
      {"exp", [](const Tensor& x) { return dg::exp(x); }},
      {"log", [](const Tensor& x) { return dg::log(add(dg::abs(x), 0.5)); }},
      {"pow", [](const Tensor& x) { return pow(add(dg::abs(x), 0.5), 2.5); }},
      {"sqrt", [](const Tensor& x) { return dg::sqrt(add(dg::abs(x), 0.5)); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(add(dg::abs(x), 0.5)); }},
      {"rpow", [](const Tensor& x) { return pow(1.7, x); }},
      {"pow_tensor", [](const Tensor& x) { return pow(add(dg::abs(x), 0.5), mul(x, 0.3)); }},
      {"exp_", [](const Tensor& x) { Tensor t = mul(x, 0.5); return exp_(t); }},
      {"relu_chain", [](const Tensor& x) { return relu(mul(x, x)); }},
  };
  Tensor w = random_tensor({7}, DType::Float64, 60);
  for (const auto& [name, op] : ops) {
    auto first_derivative = [&](const std::vector<Tensor>& v) {
      EnableGradGuard enable;  // gradcheck evaluates under no_grad; the inner grad needs a graph
      Tensor y = sum(mul(op(v[0]), w));
      const Tensor outputs[1] = {y}, inputs[1] = {v[0]};
      return grad(outputs, inputs, {}, true, true)[0];
    };
    gradcheck(first_derivative, {random_tensor({7}, DType::Float64, 61, -3, 3)}, 1e-6, 1e-6, 1e-5, name);
  }
}

// The exp and log kernels (backend/cpu/unary.cpp, guarded_unary) compute math::exp_normal_range or
// math::log_normal_range on blocks whose elements all lie in their fast range and recompute the others with math::exp
// or math::log. Their results must not depend on which path an element took: a contiguous call (blocks with no,
// some or only out-of-range values: subnormal and infinite results or arguments, zeros, negatives, +-inf, nan, at
// every block offset), an in-place one (exp_) and a strided view (per element, no blocks) give the same bits, each
// within 1 ulp of float64 (the level's own functions: the test binary is compiled for the baseline, the kernels for the
// CPU's level).
TEST(Math, ExpAndLogKernelsAreTheSameFunctionInAndOutOfTheirFastRange) {
  constexpr float kInfF = std::numeric_limits<float>::infinity(), kNaNF = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&);
    Tensor& (*op_)(Tensor&);  // the in-place form, or null
    double (*reference)(double);
    std::vector<float> outliers;
    float lo, hi;  // the in-range runs
  };
  const Case cases[] = {
      {"exp", [](const Tensor& x) { return dg::exp(x); }, [](Tensor& x) -> Tensor& { return dg::exp_(x); },
       [](double x) { return std::exp(x); },
       {-87.4f, -103.f, -104.5f, 88.5f, 88.8f, 1e30f, -1e30f, kInfF, -kInfF, kNaNF, 0.f, -0.f},
       -80.f, 88.f},
      {"log", [](const Tensor& x) { return dg::log(x); }, nullptr,  // no log_ in C++: exp covers the in-place path
       [](double x) { return std::log(x); },
       {0.f, -0.f, -1.f, 1e-40f, 1e-45f, kInfF, -kInfF, kNaNF, 3e38f, 1.17549435e-38f},
       1e-3f, 1e3f},
  };
  for (const Case& c : cases) {
    std::vector<float> values;
    for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 40961)
      values.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
    for (int run = 0; run < 600; ++run)  // runs of in-range values with one outlier each, at every offset
      for (int i = 0; i < 37; ++i)
        values.push_back(i == run % 37 ? c.outliers[size_t(run) % c.outliers.size()]
                                       : c.lo + (c.hi - c.lo) * float((run * 37 + i) % 997) / 997.f);
    const int64_t n = static_cast<int64_t>(values.size());
    std::vector<float> interleaved(size_t(2 * n), 1.5f);
    for (int64_t i = 0; i < n; ++i) interleaved[size_t(2 * i)] = values[size_t(i)];
    const std::vector<float> flat = c.op(from_vector<float>(values, Shape{n})).to_vector<float>();
    Tensor y = from_vector<float>(values, Shape{n});
    if (c.op_) c.op_(y);
    const std::vector<float> in_place = c.op_ ? y.to_vector<float>() : flat;
    const Tensor every_other = dg::select(from_vector<float>(interleaved, Shape{n, 2}), 1, 0);
    const std::vector<float> strided = c.op(every_other).to_vector<float>();
    int64_t failures = 0;
    auto bits = [](float v) { return std::isnan(v) ? 0x7fc00000u : std::bit_cast<uint32_t>(v); };
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = size_t(i);
      const double want = c.reference(double(values[k]));
      const float w32 = float(want);
      const double ulp = std::isfinite(w32) ? std::nextafter(std::fabs(w32), INFINITY) - std::fabs(w32) : 0.0;
      const bool accurate = std::isnan(want) ? std::isnan(flat[k])
                            : std::isinf(w32) ? flat[k] == w32 : std::fabs(double(flat[k]) - want) <= ulp;
      if ((!accurate || bits(flat[k]) != bits(in_place[k]) || bits(flat[k]) != bits(strided[k])) && ++failures <= 5)
        ADD_FAILURE() << c.name << "(" << values[k] << "): contiguous " << flat[k] << ", in place " << in_place[k]
                      << ", strided " << strided[k] << ", float64 " << want;
    }
    EXPECT_EQ(failures, 0) << c.name;
  }
}
