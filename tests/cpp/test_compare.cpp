// Comparison and selection ops (ops/math.h): comparisons and logical ops against host references on
// contiguous, non-contiguous and broadcast inputs; where, masked_fill(_) and clamp(_) values, promotion,
// nan handling, gradients by finite differences, and error paths.
#include <limits>

#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Checks that a comparison result is bool, and passes it on.
Tensor bools(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::Bool);
  return t;
}

Tensor bool_tensor(const std::vector<uint8_t>& values, const Shape& shape) {
  return from_vector<uint8_t>(values, shape, DType::Bool);
}

void expect_error(const std::function<void()>& f, ErrorKind kind, const std::string& op) {
  try {
    f();
    FAIL() << "expected an error from " << op;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
  }
}

struct Comparison {
  const char* name;
  Tensor (*tensor_form)(const Tensor&, const Tensor&);
  Tensor (*scalar_form)(const Tensor&, Scalar);
  bool (*reference)(double, double);
};
std::vector<Comparison> comparisons() {
  return {
      {"eq", eq, eq, [](double a, double b) { return a == b; }},
      {"ne", ne, ne, [](double a, double b) { return a != b; }},
      {"lt", lt, lt, [](double a, double b) { return a < b; }},
      {"le", le, le, [](double a, double b) { return a <= b; }},
      {"gt", gt, gt, [](double a, double b) { return a > b; }},
      {"ge", ge, ge, [](double a, double b) { return a >= b; }},
  };
}
}  // namespace

TEST(Compare, ComparisonsMatchReferenceOnAllLayouts) {
  // Values on a coarse grid so that ties occur; a is (4, 1, 6) and b is (3, 6): broadcast to (4, 3, 6).
  auto grid = [](int64_t n, uint32_t seed) {
    std::vector<double> v = random_values(n, seed, -3, 3);
    for (double& x : v) x = std::round(x * 2) / 2;
    return v;
  };
  const std::vector<double> av = grid(24, 1), bv = grid(18, 2);
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64, DType::Int32}) {
    Tensor a = tensor_from(av, {4, 1, 6}, dtype), b = tensor_from(bv, {3, 6}, dtype);
    const std::vector<double> as = a.to_vector<double>(), bs = b.to_vector<double>();
    for (const Comparison& c : comparisons()) {
      std::vector<double> expected, expected_scalar;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 3; ++j)
          for (int k = 0; k < 6; ++k) expected.push_back(c.reference(as[size_t(i * 6 + k)], bs[size_t(j * 6 + k)]));
      for (double x : as) expected_scalar.push_back(c.reference(x, 0.5));
      const std::string what = std::string(c.name) + " " + dtype_name(dtype);
      Tensor out = c.tensor_form(a, b);
      expect_shape(out, {4, 3, 6});
      expect_close(out, expected, 0, 0, what);
      EXPECT_EQ(out.dtype(), DType::Bool);
      expect_close(c.tensor_form(non_contiguous(a), non_contiguous(b)), expected, 0, 0, what + " strided");
      // Scalar 0.5: integer tensors promote to float32 for the comparison (int 0 vs 0.5 are not equal).
      expect_close(bools(c.scalar_form(a, 0.5)), expected_scalar, 0, 0, what + " scalar");
      expect_close(bools(c.scalar_form(non_contiguous(a), 0.5)), expected_scalar, 0, 0, what + " scalar strided");
    }
  }
}

TEST(Compare, NanZeroDimAndEmpty) {
  Tensor a = tensor_from({kNaN, 1.0, kInf, -0.0}, {4}, DType::Float32);
  Tensor b = tensor_from({kNaN, kNaN, kInf, 0.0}, {4}, DType::Float32);
  expect_close(bools(eq(a, b)), {0, 0, 1, 1}, 0, 0);
  expect_close(bools(ne(a, b)), {1, 1, 0, 0}, 0, 0);
  expect_close(bools(lt(a, b)), {0, 0, 0, 0}, 0, 0);
  expect_close(bools(ge(a, b)), {0, 0, 1, 1}, 0, 0);
  expect_close(bools(eq(a, kNaN)), {0, 0, 0, 0}, 0, 0);
  // 0-dim and size-0 operands.
  Tensor s = tensor_from({2.0}, {}, DType::Float64);
  Tensor r = lt(s, tensor_from({1.0, 3.0}, {2}, DType::Float64));
  expect_shape(r, {2});
  expect_close(bools(r), {0, 1}, 0, 0);
  expect_shape(gt(s, 1), {});
  EXPECT_TRUE(gt(s, 1).item<bool>());
  Tensor empty = random_tensor({0, 3}, DType::Float32);
  expect_shape(eq(empty, random_tensor({3}, DType::Float32)), {0, 3});
  expect_shape(le(empty, 0), {0, 3});
}

TEST(Compare, Promotion) {
  // int64 tensor vs float tensor compares in float32; bool vs int scalar compares as int64.
  Tensor i = from_vector<int64_t>({1, 2, 3}, Shape{3});
  expect_close(bools(lt(i, 2.5)), {1, 1, 0}, 0, 0);
  expect_close(bools(eq(i, tensor_from({2.0}, {1}, DType::Float32))), {0, 1, 0}, 0, 0);
  expect_close(bools(eq(bool_tensor({1, 0}, {2}), 1)), {1, 0}, 0, 0);
  // int64 values compared in float32, as torch does: 2^24 + 1 rounds to 2^24.
  Tensor big = from_vector<int64_t>({16777217}, Shape{1});
  EXPECT_TRUE(eq(big, tensor_from({16777216.0}, {1}, DType::Float32)).item<bool>());
  EXPECT_FALSE(eq(big, from_vector<int64_t>({16777216}, Shape{1})).item<bool>());
}

TEST(Compare, LogicalOps) {
  Tensor f = tensor_from({0.0, -0.0, 2.0, kNaN}, {4}, DType::Float32);
  Tensor i = from_vector<int64_t>({0, 5, 0, 7}, Shape{4});
  expect_close(bools(logical_not(f)), {1, 1, 0, 0}, 0, 0);  // nan is true
  expect_close(bools(logical_not(non_contiguous(i))), {1, 0, 1, 0}, 0, 0);
  expect_close(bools(logical_and(f, i)), {0, 0, 0, 1}, 0, 0);
  expect_close(bools(logical_or(f, i)), {0, 1, 1, 1}, 0, 0);
  Tensor m = bool_tensor({1, 0, 1}, {3, 1});
  Tensor n = bool_tensor({1, 0}, {2});
  Tensor and_out = logical_and(m, n);
  expect_shape(and_out, {3, 2});
  expect_close(bools(and_out), {1, 0, 0, 0, 1, 0}, 0, 0);
  expect_close(bools(logical_or(m, n)), {1, 1, 1, 0, 1, 1}, 0, 0);
}

TEST(Compare, WhereValuesBroadcastAndPromotion) {
  Tensor cond = bool_tensor({1, 0, 0, 1, 1, 0}, {2, 3, 1});
  Tensor a = random_tensor({3, 4}, DType::Float64, 3);
  Tensor b = random_tensor({4}, DType::Float64, 4);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), expected;
  const std::vector<int> cv = {1, 0, 0, 1, 1, 0};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) expected.push_back(cv[size_t(i * 3 + j)] ? av[size_t(j * 4 + k)] : bv[size_t(k)]);
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64}) {
    Tensor x = to(a, dtype), y = to(b, dtype);
    std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>(), e;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) e.push_back(cv[size_t(i * 3 + j)] ? xv[size_t(j * 4 + k)] : yv[size_t(k)]);
    Tensor out = where(cond, x, y);
    expect_shape(out, {2, 3, 4});
    EXPECT_EQ(out.dtype(), dtype);
    expect_close(out, e, 0, 0, std::string("where ") + dtype_name(dtype));
    expect_close(where(non_contiguous(cond), non_contiguous(x), y), e, 0, 0, "where strided");
  }
  // Promotion: int64 and float32 give float32; a float scalar with an int tensor gives float32.
  Tensor c2 = bool_tensor({1, 0}, {2});
  Tensor w = where(c2, from_vector<int64_t>({1, 2}, Shape{2}), tensor_from({0.5, 0.5}, {2}, DType::Float32));
  EXPECT_EQ(w.dtype(), DType::Float32);
  expect_close(w, {1, 0.5}, 0, 0);
  Tensor ws = where(c2, from_vector<int64_t>({1, 2}, Shape{2}), 1.5);
  EXPECT_EQ(ws.dtype(), DType::Float32);
  expect_close(ws, {1, 1.5}, 0, 0);
  Tensor wl = where(c2, 7, from_vector<int32_t>({1, 2}, Shape{2}));
  EXPECT_EQ(wl.dtype(), DType::Int32);
  EXPECT_EQ(wl.to_vector<int64_t>(), (std::vector<int64_t>{7, 2}));
  // Zero-size.
  expect_shape(where(bool_tensor({}, {0}), random_tensor({0}), 1.0), {0});
}

TEST(Compare, MaskedFill) {
  Tensor a = random_tensor({3, 4}, DType::Float64, 5);
  Tensor mask = bool_tensor({1, 0, 0, 1}, {4});
  std::vector<double> av = a.to_vector<double>(), expected = av;
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 4; ++k)
      if (k == 0 || k == 3) expected[size_t(i * 4 + k)] = -2.5;
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    Tensor x = to(a, dtype);
    std::vector<double> e = x.to_vector<double>();
    for (int i = 0; i < 3; ++i) e[size_t(i * 4)] = e[size_t(i * 4 + 3)] = -2.5;
    expect_close(masked_fill(x, mask, -2.5), e, 0, 0, "masked_fill");
    expect_close(masked_fill(non_contiguous(x), non_contiguous(mask), -2.5), e, 0, 0, "masked_fill strided");
    Tensor y = clone(x);
    masked_fill_(y, mask, -2.5);
    expect_close(y, e, 0, 0, "masked_fill_");
  }
  // The value is cast to the tensor's dtype; the out-of-place form broadcasts the input to the mask.
  Tensor i = from_vector<int64_t>({1, 2, 3}, Shape{3});
  Tensor filled = masked_fill(i, bool_tensor({1, 0, 1}, {3}), 2.7);
  EXPECT_EQ(filled.dtype(), DType::Int64);
  EXPECT_EQ(filled.to_vector<int64_t>(), (std::vector<int64_t>{2, 2, 2}));
  Tensor wide = masked_fill(i, bool_tensor({1, 0}, {2, 1}), 0);
  expect_shape(wide, {2, 3});
  EXPECT_EQ(wide.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 1, 2, 3}));
  // Special values: nan and inf fills.
  expect_close(masked_fill(tensor_from({1.0, 2.0}, {2}, DType::Float32), bool_tensor({0, 1}, {2}), kNaN), {1, kNaN}, 0, 0);
  expect_close(masked_fill(tensor_from({1.0}, {}, DType::Float32), bool_tensor({1}, {}), -kInf), {-kInf}, 0, 0);
}

TEST(Compare, MaskedFillBroadcastMaskOverLeadingDims) {
  // The attention mask: a [T, T] causal mask over [B, H, T, T] scores (rows contiguous in every operand,
  // the mask repeated along the leading dims), contiguous and strided masks, several dtypes, in place too.
  const int64_t B = 2, H = 3, T = 37;
  std::vector<double> mask_values;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) mask_values.push_back(j > i ? 1 : 0);
  Tensor mask = to(tensor_from(mask_values, {T, T}), DType::Bool);
  Tensor a = random_tensor({B, H, T, T}, DType::Float64, 9, -3, 3);
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64}) {
    Tensor x = to(dtype == DType::Int64 ? mul(a, 100.0) : a, dtype);
    const double fill = dtype == DType::Int64 ? -7 : -kInf;
    std::vector<double> e = x.to_vector<double>();
    for (size_t i = 0; i < e.size(); ++i)
      if (mask_values[i % size_t(T * T)] != 0) e[i] = fill;
    const std::string what = std::string("masked_fill broadcast ") + dtype_name(dtype);
    expect_close(masked_fill(x, mask, fill), e, 0, 0, what);
    expect_close(masked_fill(x, non_contiguous(mask), fill), e, 0, 0, what + " strided mask");
    expect_close(masked_fill(non_contiguous(x), mask, fill), e, 0, 0, what + " strided input");
    Tensor y = clone(x);
    masked_fill_(y, mask, fill);
    expect_close(y, e, 0, 0, what + " in place");
  }
}

TEST(Compare, ClampScalarBounds) {
  Tensor a = random_tensor({5, 7}, DType::Float64, 6, -2, 2);
  auto reference = [](const std::vector<double>& v, std::optional<double> lo, std::optional<double> hi) {
    std::vector<double> out;
    for (double x : v) {
      if (lo) x = std::max(x, *lo);
      if (hi) x = std::min(x, *hi);
      out.push_back(x);
    }
    return out;
  };
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    Tensor x = to(a, dtype);
    const std::vector<double> xv = x.to_vector<double>();
    const double lo = -0.5, hi = 0.75;
    expect_close(clamp(x, lo, hi), reference(xv, lo, hi), 0, 0, "clamp both");
    expect_close(clamp(x, lo, std::nullopt), reference(xv, lo, {}), 0, 0, "clamp min");
    expect_close(clamp(non_contiguous(x), std::nullopt, hi), reference(xv, {}, hi), 0, 0, "clamp max strided");
    expect_close(clamp(as_strided(x, Shape{3, 7}, Shape{0, 1}, x.storage_offset()), lo, hi),
                 [&] { auto r = reference(std::vector<double>(xv.begin(), xv.begin() + 7), lo, hi), out = r;
                       for (int k = 0; k < 2; ++k) out.insert(out.end(), r.begin(), r.end());
                       return out; }(), 0, 0, "clamp broadcast input");
    Tensor y = clone(x);
    clamp_(y, lo, hi);
    expect_close(y, reference(xv, lo, hi), 0, 0, "clamp_");
  }
  // min > max gives max everywhere; nan input stays nan; a nan bound gives nan.
  Tensor s = tensor_from({1.0, 2.0, kNaN, -kInf}, {4}, DType::Float32);
  expect_close(clamp(s, 2.0, 1.0), {1, 1, kNaN, 1}, 0, 0);
  expect_close(clamp(s, -1.0, 1.0), {1, 1, kNaN, -1}, 0, 0);
  expect_close(clamp(s, kNaN, 1.0), {kNaN, kNaN, kNaN, kNaN}, 0, 0);
  // Integers: an int bound keeps int64, a float bound promotes to float32.
  Tensor i = from_vector<int64_t>({-5, 0, 9}, Shape{3});
  Tensor ci = clamp(i, -1, 3);
  EXPECT_EQ(ci.dtype(), DType::Int64);
  EXPECT_EQ(ci.to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 3}));
  Tensor cf = clamp(i, 0.5, std::nullopt);
  EXPECT_EQ(cf.dtype(), DType::Float32);
  expect_close(cf, {0.5, 0.5, 9}, 0, 0);
  clamp_(i, std::nullopt, 2);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{-5, 0, 2}));
  // Zero-size and 0-dim.
  expect_shape(clamp(random_tensor({0, 2}), 0.0, 1.0), {0, 2});
  EXPECT_EQ(clamp(tensor_from({3.0}, {}), 0.0, 1.0).item<double>(), 1.0);
}

TEST(Compare, ClampTensorBounds) {
  Tensor x = random_tensor({4, 5}, DType::Float64, 7, -2, 2);
  Tensor lo = random_tensor({5}, DType::Float64, 8, -1, 0);
  Tensor hi = random_tensor({4, 1}, DType::Float64, 9, 0, 1);
  std::vector<double> xv = x.to_vector<double>(), lv = lo.to_vector<double>(), hv = hi.to_vector<double>(), e, emin, emax;
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 5; ++k) {
      const double v = xv[size_t(i * 5 + k)];
      e.push_back(std::min(std::max(v, lv[size_t(k)]), hv[size_t(i)]));
      emin.push_back(std::max(v, lv[size_t(k)]));
      emax.push_back(std::min(v, hv[size_t(i)]));
    }
  expect_close(clamp(x, lo, hi), e, 0, 0, "clamp tensor");
  expect_close(clamp(non_contiguous(x), non_contiguous(lo), non_contiguous(hi)), e, 0, 0, "clamp tensor strided");
  expect_close(clamp(x, lo, Tensor()), emin, 0, 0, "clamp tensor min only");
  expect_close(clamp(x, Tensor(), hi), emax, 0, 0, "clamp tensor max only");
  Tensor y = clone(x);
  clamp_(y, lo, hi);
  expect_close(y, e, 0, 0, "clamp_ tensor");
  // Bounds broadcast the output; integer inputs with integer bounds stay integral (absent bound: limits).
  Tensor wide = clamp(tensor_from({0.0}, {1}), lo, Tensor());
  expect_shape(wide, {5});
  Tensor i = from_vector<int32_t>({-100, 5, 100}, Shape{3});
  Tensor ci = clamp(i, from_vector<int32_t>({0}, Shape{1}), Tensor());
  EXPECT_EQ(ci.dtype(), DType::Int32);
  EXPECT_EQ(ci.to_vector<int64_t>(), (std::vector<int64_t>{0, 5, 100}));
  EXPECT_EQ(clamp(i, tensor_from({0.5}, {1}, DType::Float32), Tensor()).dtype(), DType::Float32);
  // nan in a bound tensor gives nan.
  expect_close(clamp(tensor_from({1.0, 2.0}, {2}), tensor_from({kNaN, 0.0}, {2}), Tensor()), {kNaN, 2}, 0, 0);
}

TEST(Compare, Gradients) {
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  auto r = [](Shape s, uint32_t seed, double lo = -1, double hi = 1) { return random_tensor(s, DType::Float64, seed, lo, hi); };
  Tensor cond = bool_tensor({1, 0, 1, 1, 0, 0}, {2, 3});
  Tensor mask = bool_tensor({0, 1, 1}, {3});
  const std::vector<std::tuple<const char*, Fn, std::vector<Tensor>>> cases = {
      {"where", [&](auto& v) { return where(cond, v[0], v[1]); }, {r({2, 3}, 1), r({3}, 2)}},
      {"where_scalar", [&](auto& v) { return where(cond, v[0], 0.5); }, {r({1, 3}, 3)}},
      {"where_scalar_first", [&](auto& v) { return where(cond, -2, v[0]); }, {r({2, 1}, 17)}},
      {"masked_fill", [&](auto& v) { return masked_fill(v[0], mask, 4.0); }, {r({2, 3}, 4)}},
      {"clamp", [](auto& v) { return clamp(v[0], -0.5, 0.5); }, {r({3, 4}, 5)}},
      {"clamp_min", [](auto& v) { return clamp(v[0], -0.2, std::nullopt); }, {r({3, 4}, 6)}},
      {"clamp_tensor", [](auto& v) { return clamp(v[0], v[1], v[2]); }, {r({3, 4}, 7), r({4}, 8, -1, 0), r({3, 1}, 9, 0, 1)}},
      {"clamp_tensor_max", [](auto& v) { return clamp(v[0], Tensor(), v[1]); }, {r({3, 4}, 18), r({3, 1}, 19)}},
      {"clamp_tensor_min", [](auto& v) { return clamp(v[0], v[1], Tensor()); }, {r({3, 4}, 20), r({4}, 21)}},
      {"clamp_tensor_crossed", [](auto& v) { return clamp(v[0], v[1], v[2]); }, {r({6}, 10), r({6}, 11, 0.2, 0.6), r({6}, 12, -0.6, 0.1)}},
      {"clamp_", [](auto& v) { Tensor t = mul(v[0], 1.0); return clamp_(t, -0.3, 0.4); }, {r({5}, 13)}},
      {"clamp_tensor_", [](auto& v) { Tensor t = mul(v[0], 1.0); return clamp_(t, v[1], Tensor()); }, {r({2, 3}, 14), r({3}, 15)}},
      {"masked_fill_", [&](auto& v) { Tensor t = mul(v[0], 1.0); return masked_fill_(t, mask, 0.0); }, {r({2, 3}, 16)}},
  };
  for (const auto& [name, f, inputs] : cases) gradcheck(f, inputs, 1e-6, 1e-6, 1e-5, name);
  // Ties pass the gradient to x (torch: min <= x <= max).
  Tensor x = tensor_from({-1.0, 0.0, 1.0, 2.0}, {4});
  x.set_requires_grad(true);
  sum(clamp(x, 0.0, 1.0)).backward();
  expect_close(x.grad(), {0, 1, 1, 0}, 0, 0);
}

TEST(Compare, Errors) {
  Tensor f = random_tensor({2, 3}, DType::Float32);
  Tensor i = from_vector<int64_t>({1, 2, 3}, Shape{3});
  Tensor m = bool_tensor({1, 0, 1}, {3});
  expect_error([&] { eq(f, random_tensor({4})); }, ErrorKind::Value, "[eq]");
  expect_error([&] { logical_and(f, random_tensor({2})); }, ErrorKind::Value, "[logical_and]");
  expect_error([&] { where(f, f, f); }, ErrorKind::Type, "[where]");
  expect_error([&] { where(m, f, random_tensor({4})); }, ErrorKind::Value, "[where]");
  expect_error([&] { masked_fill(f, i, 0); }, ErrorKind::Type, "[masked_fill]");
  // As torch: RuntimeError for a broadcast past self's shape and for a result that does not cast into self.
  Tensor small = random_tensor({3}, DType::Float32);
  expect_error([&] { masked_fill_(small, bool_tensor({1, 0, 1, 1, 0, 1}, {2, 3}), 0); }, ErrorKind::Runtime, "[masked_fill_]");
  expect_error([&] { clamp(f, std::nullopt, std::nullopt); }, ErrorKind::Value, "[clamp]");
  expect_error([&] { clamp(f, Tensor(), Tensor()); }, ErrorKind::Value, "[clamp]");
  expect_error([&] { clamp(m, 0, 1); }, ErrorKind::Type, "[clamp]");
  expect_error([&] { clamp_(i, 0.5, std::nullopt); }, ErrorKind::Runtime, "[clamp_]");
  expect_error([&] { clamp_(small, random_tensor({2, 3}, DType::Float32), Tensor()); }, ErrorKind::Runtime, "[clamp_]");
  Tensor expanded = expand(random_tensor({3}, DType::Float32), Shape{2, 3});
  expect_error([&] { clamp_(expanded, 0.0, 1.0); }, ErrorKind::Runtime, "[clamp_]");
  expect_error([&] { masked_fill_(expanded, m, 0.0); }, ErrorKind::Runtime, "[masked_fill_]");
  Tensor leaf = random_tensor({3}, DType::Float64);
  leaf.set_requires_grad(true);
  expect_error([&] { clamp_(leaf, 0.0, 1.0); }, ErrorKind::Runtime, "[clamp_]");
  expect_error([&] { masked_fill_(leaf, m, 0.0); }, ErrorKind::Runtime, "[masked_fill_]");
}
