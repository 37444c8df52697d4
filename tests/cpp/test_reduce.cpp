// Reductions against float64 host references: every dim combination of a 3-D tensor, keepdim both ways,
// contiguous and non-contiguous inputs, several dtypes, edge cases, gradients, determinism and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "dygrad/backend/cpu/accumulate.h"
#include "dygrad/runtime/scratch.h"
#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {

using Values = std::vector<double>;
using ReduceFn = std::function<double(const Values&)>;

// Reference: applies fn to the reduced elements (row-major order) of every output, outputs row-major.
Values reference_reduce(const Values& x, const Shape& shape, const Shape& dims, const ReduceFn& fn) {
  const size_t nd = shape.size();
  std::vector<bool> reduced(nd, false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
  if (dims.empty()) std::fill(reduced.begin(), reduced.end(), true);
  int64_t num_out = 1;
  for (size_t d = 0; d < nd; ++d)
    if (!reduced[d]) num_out *= shape[d];
  std::vector<Values> groups(static_cast<size_t>(num_out));
  Shape index(nd, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < nd; ++d)
      if (!reduced[d]) o = o * shape[d] + index[d];
    groups[static_cast<size_t>(o)].push_back(x[i]);
    for (size_t d = nd; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  Values out;
  for (const Values& g : groups) out.push_back(fn(g));
  return out;
}

Shape wrap_sorted(const Shape& dims, int64_t nd) {
  Shape out;
  for (int64_t d : dims) out.push_back(d < 0 ? d + nd : d);
  std::sort(out.begin(), out.end());
  return out;
}

Shape output_shape(const Shape& shape, const Shape& dims, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool r = dims.empty() || std::find(dims.begin(), dims.end(), int64_t(d)) != dims.end();
    if (!r) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

double ref_max(const Values& v) {
  double m = -INFINITY;
  for (double x : v) {
    if (std::isnan(x)) return x;
    m = std::max(m, x);
  }
  return m;
}
double ref_min(const Values& v) {
  double m = INFINITY;
  for (double x : v) {
    if (std::isnan(x)) return x;
    m = std::min(m, x);
  }
  return m;
}
double ref_sum(const Values& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double ref_logsumexp(const Values& v) {
  double m = ref_max(v);
  if (!std::isfinite(m)) return m;
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}
ReduceFn ref_var(double correction, bool root) {
  return [=](const Values& v) {
    double mean = ref_sum(v) / double(v.size()), s = 0;
    for (double x : v) s += (x - mean) * (x - mean);
    double r = s / std::max(double(v.size()) - correction, 0.0);
    return root ? std::sqrt(r) : r;
  };
}
// First index of the extremum (first NaN wins).
int64_t ref_arg(const Values& v, bool is_max) {
  int64_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (std::isnan(v[static_cast<size_t>(best)])) break;
    if (std::isnan(v[i]) || (is_max ? v[i] > v[static_cast<size_t>(best)] : v[i] < v[static_cast<size_t>(best)]))
      best = static_cast<int64_t>(i);
  }
  return best;
}

const std::vector<Shape> kDimLists = {{}, {0}, {1}, {2}, {-1}, {0, 1}, {0, 2}, {1, 2}, {-3, -1}, {0, 1, 2}};

struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance(DType t) {
  if (t == DType::BFloat16) return {2e-2, 2e-2};
  if (t == DType::Float32) return {1e-5, 1e-5};
  return {1e-12, 1e-12};
}

// Runs op over every dim list and keepdim on contiguous and non-contiguous inputs of `dtype`.
void check_all_dims(const char* name, const std::function<Tensor(const Tensor&, IntSpan, bool)>& op,
                    const ReduceFn& ref, DType dtype, double lo = -2, double hi = 2, const Shape& shape = {3, 4, 5}) {
  Tensor base = random_tensor(shape, dtype, 11, lo, hi);
  const Values x = base.to_vector<double>();
  Tolerance tol = tolerance(dtype);
  for (bool strided : {false, true}) {
    Tensor input = strided ? non_contiguous(base) : base;
    for (const Shape& dims : kDimLists) {
      Shape wd = wrap_sorted(dims, 3);
      Values expected = reference_reduce(x, shape, wd, ref);
      for (bool keepdim : {false, true}) {
        Tensor out = op(input, dims, keepdim);
        std::string what = std::string(name) + " " + dtype_name(dtype) + (strided ? " strided" : "") + " dims " +
                           std::to_string(dims.size()) + (dims.empty() ? "" : " first " + std::to_string(dims[0])) +
                           (keepdim ? " keepdim" : "");
        expect_shape(out, output_shape(shape, wd, keepdim));
        EXPECT_EQ(out.dtype(), dtype) << what;
        expect_close(out, expected, tol.rtol, tol.atol, what);
      }
    }
  }
}

}  // namespace

TEST(Reduce, SumAllDims) {
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16})
    check_all_dims("sum", [](const Tensor& a, IntSpan d, bool k) { return sum(a, d, k); }, ref_sum, t);
}

// The full sum of a contiguous float32 tensor is the documented order (backend/cpu/accumulate.h): partial sums of
// kFullReduceChunk values, each in the eight-lane order, added in chunk order. The kernel sums four whole chunks at
// once (eight_lane_sums<4>); this holds it bitwise to one chunk at a time, for sizes with and without a partial
// chunk or a group of fewer than four, at whatever kernel level runs (make test-levels runs the others).
TEST(Reduce, FullSumIsTheChunkedEightLaneOrderBitwise) {
  for (const int64_t n : {int64_t{5}, kFullReduceChunk * 4, kFullReduceChunk * 5 + 13, kFullReduceChunk * 7,
                          kFullReduceChunk * 9 + 8, int64_t{100003}}) {
    const Values raw = random_values(n, 7, -3.0, 3.0);
    const Tensor x = tensor_from(raw, {n}, DType::Float32);
    const std::vector<float> values = x.to_vector<float>();
    float want = 0;
    if (n <= kFullReduceChunk) {
      want = cpu::eight_lane_sum<float>(n, [&](int64_t i) { return values[static_cast<size_t>(i)]; });
    } else {
      for (int64_t b = 0; b < n; b += kFullReduceChunk) {
        const int64_t len = std::min(kFullReduceChunk, n - b);
        want += cpu::eight_lane_sum<float>(len, [&](int64_t i) { return values[static_cast<size_t>(b + i)]; });
      }
    }
    const float got = sum(x).to_vector<float>()[0];
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << "n = " << n << ": " << got << " vs "
                                                                          << want;
  }
}

TEST(Reduce, AmaxAminAllDims) {
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64, DType::Int32}) {
    check_all_dims("amax", [](const Tensor& a, IntSpan d, bool k) { return amax(a, d, k); }, ref_max, t, -50, 50);
    check_all_dims("amin", [](const Tensor& a, IntSpan d, bool k) { return amin(a, d, k); }, ref_min, t, -50, 50);
  }
}

TEST(Reduce, LogsumexpAllDims) {
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16})
    check_all_dims("logsumexp", [](const Tensor& a, IntSpan d, bool k) { return logsumexp(a, d, k); }, ref_logsumexp, t,
                   -3, 3);
}

TEST(Reduce, VarStdAllDims) {
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
    check_all_dims("var", [](const Tensor& a, IntSpan d, bool k) { return var(a, d, 1, k); }, ref_var(1, false), t);
    check_all_dims("var0", [](const Tensor& a, IntSpan d, bool k) { return var(a, d, 0, k); }, ref_var(0, false), t);
    check_all_dims("std", [](const Tensor& a, IntSpan d, bool k) { return std_dev(a, d, 1, k); }, ref_var(1, true), t);
  }
}

TEST(Reduce, MaxMinDimValuesAndIndices) {
  const Shape shape = {3, 4, 5};
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64, DType::Int32}) {
    // Small integers: many ties, so first-index semantics are exercised.
    Values raw = random_values(60, 5, 0, 4);
    for (double& v : raw) v = std::floor(v);
    Tensor base = tensor_from(raw, shape, t);
    for (bool strided : {false, true}) {
      Tensor input = strided ? non_contiguous(base) : base;
      for (int64_t dim : {0, 1, 2, -1, -3}) {
        Shape wd = {dim < 0 ? dim + 3 : dim};
        for (bool keepdim : {false, true}) {
          for (bool is_max : {true, false}) {
            ValuesIndices r = is_max ? max(input, dim, keepdim) : min(input, dim, keepdim);
            std::string what = std::string(is_max ? "max" : "min") + " " + dtype_name(t) + " dim " + std::to_string(dim);
            expect_shape(r.values, output_shape(shape, wd, keepdim));
            expect_shape(r.indices, output_shape(shape, wd, keepdim));
            EXPECT_EQ(r.indices.dtype(), DType::Int64);
            EXPECT_EQ(r.values.dtype(), t);
            expect_close(r.values, reference_reduce(raw, shape, wd, is_max ? ReduceFn(ref_max) : ReduceFn(ref_min)), 0, 0, what);
            Values idx = reference_reduce(raw, shape, wd, [&](const Values& v) { return double(ref_arg(v, is_max)); });
            expect_close(r.indices, idx, 0, 0, what + " indices");
            Tensor arg = is_max ? argmax(input, dim, keepdim) : argmin(input, dim, keepdim);
            expect_close(arg, idx, 0, 0, what + " arg");
          }
        }
      }
      // Without a dim: the flat index of the first extremum, a 0-dim tensor (or all-ones shape with keepdim).
      Tensor am = argmax(input);
      expect_shape(am, {});
      EXPECT_EQ(am.item<int64_t>(), ref_arg(raw, true));
      EXPECT_EQ(argmin(input, std::nullopt, true).to_vector<int64_t>()[0], ref_arg(raw, false));
      expect_shape(argmin(input, std::nullopt, true), {1, 1, 1});
      EXPECT_EQ(max(input).item<double>(), ref_max(raw));
      EXPECT_EQ(min(input).item<double>(), ref_min(raw));
    }
  }
}

TEST(Reduce, SizeZeroDimAllDims) {
  // Sum gives 0, logsumexp -inf and var NaN over an empty reduction; other outputs are empty.
  const Shape shape = {2, 0, 3};
  for (DType t : {DType::Float32, DType::Float64}) {
    check_all_dims("sum empty", [](const Tensor& a, IntSpan d, bool k) { return sum(a, d, k); }, ref_sum, t, -2, 2, shape);
    check_all_dims("logsumexp empty", [](const Tensor& a, IntSpan d, bool k) { return logsumexp(a, d, k); }, ref_logsumexp,
                   t, -2, 2, shape);
    check_all_dims("var empty", [](const Tensor& a, IntSpan d, bool k) { return var(a, d, 1, k); }, ref_var(1, false), t, -2,
                   2, shape);
  }
}

TEST(Reduce, IntegerSumsAndHalf) {
  const Shape shape = {3, 4, 5};
  Values raw = random_values(60, 9, -20, 20);
  for (double& v : raw) v = std::floor(v);
  for (DType t : {DType::Int32, DType::Int64, DType::UInt8, DType::Bool}) {
    Values x = tensor_from(raw, shape, t).to_vector<double>();  // as stored (uint8 wraps, bool is 0/1)
    Tensor a = non_contiguous(tensor_from(x, shape, t));
    for (const Shape& dims : kDimLists) {
      Tensor s = sum(a, dims);
      EXPECT_EQ(s.dtype(), DType::Int64);
      expect_close(s, reference_reduce(x, shape, wrap_sorted(dims, 3), ref_sum), 0, 0, std::string("sum ") + dtype_name(t));
    }
  }
  // float16 computes in float32 and rounds once.
  Tensor h = random_tensor(shape, DType::Float16, 12, -2, 2);
  const Values hv = h.to_vector<double>();
  expect_close(amax(h, Shape{1}), reference_reduce(hv, shape, {1}, ref_max), 0, 0, "amax f16");
  expect_close(logsumexp(h, Shape{2}), reference_reduce(hv, shape, {2}, ref_logsumexp), 2e-3, 2e-3, "logsumexp f16");
  expect_close(var(h, Shape{0, 2}), reference_reduce(hv, shape, {0, 2}, ref_var(1, false)), 2e-3, 2e-3, "var f16");
  expect_close(max(h, 2).indices, reference_reduce(hv, shape, {2}, [](const Values& v) { return double(ref_arg(v, true)); }), 0, 0);
}

TEST(Reduce, BoolExtrema) {
  Tensor b = tensor_from({0, 1, 0, 0, 0, 0}, {2, 3}, DType::Bool);
  expect_close(amax(b, Shape{1}), {1, 0}, 0, 0);
  expect_close(argmax(b, 1), {1, 0}, 0, 0);
  expect_close(amin(b), {0}, 0, 0);
}

TEST(Reduce, NaNPropagates) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
    Tensor x = tensor_from({1, nan, 3, nan, 5, 6, 7, 8, 9}, {3, 3}, t);
    expect_close(amax(x, Shape{1}), {nan, nan, 9}, 0, 0, "amax nan");
    expect_close(amin(x, Shape{0}), {nan, nan, 3}, 0, 0, "amin nan");
    ValuesIndices r = max(x, 1);
    expect_close(r.values, {nan, nan, 9}, 0, 0);
    expect_close(r.indices, {1, 0, 2}, 0, 0, "first NaN index");
    EXPECT_EQ(argmax(x).item<int64_t>(), 1);
    EXPECT_TRUE(std::isnan(max(x).item<double>()));
    EXPECT_TRUE(std::isnan(logsumexp(x, Shape{1}).to_vector<double>()[0]));
  }
  // A long contiguous row takes the SIMD path; NaN deep inside it still wins. So do the column paths.
  for (DType t : {DType::Float32, DType::Float64}) {
    Values v = random_values(1000, 3);
    v[777] = nan;
    v[900] = INFINITY;
    Tensor x = tensor_from(v, {1000}, t);
    EXPECT_EQ(argmax(x).item<int64_t>(), 777);
    EXPECT_EQ(argmin(x).item<int64_t>(), 777);
    EXPECT_TRUE(std::isnan(amax(x).item<double>()));
    EXPECT_TRUE(std::isnan(amin(x).item<double>()));
    v[777] = 0;
    x = tensor_from(v, {1000}, t);
    EXPECT_EQ(amax(x).item<double>(), INFINITY);
    EXPECT_EQ(argmax(x).item<int64_t>(), 900);
    Tensor columns = tensor_from(random_values(64, 4), {4, 16}, t);
    Values cv = columns.to_vector<double>();
    cv[2 * 16 + 5] = nan;
    columns = tensor_from(cv, {4, 16}, t);
    for (int is_lse = 0; is_lse < 2; ++is_lse) {
      Tensor r = is_lse ? logsumexp(columns, Shape{0}) : amax(columns, Shape{0});
      Values expected = reference_reduce(cv, {4, 16}, {0}, is_lse ? ReduceFn(ref_logsumexp) : ReduceFn(ref_max));
      expect_close(r, expected, 1e-6, 1e-6, is_lse ? "logsumexp columns with NaN" : "amax columns with NaN");
    }
    for (bool is_max : {true, false}) {
      ValuesIndices r = is_max ? max(columns, 0) : min(columns, 0);
      expect_close(r.values, reference_reduce(cv, {4, 16}, {0}, is_max ? ReduceFn(ref_max) : ReduceFn(ref_min)), 0, 0);
      expect_close(r.indices, reference_reduce(cv, {4, 16}, {0}, [&](const Values& group) { return double(ref_arg(group, is_max)); }),
                   0, 0, "column indices with NaN");
    }
  }
}

TEST(Reduce, LogsumexpInfinities) {
  const double inf = INFINITY;
  Tensor x = tensor_from({-inf, -inf, 1, inf, 1000, 1000}, {3, 2});
  expect_close(logsumexp(x, Shape{1}), {-inf, inf, 1000 + std::log(2.0)}, 1e-12, 1e-12);
  // Stable for large values: no overflow to inf.
  Tensor big = tensor_from({1000, 1000}, {2}, DType::Float32);
  EXPECT_NEAR(logsumexp(big, Shape{0}).item<double>(), 1000 + std::log(2.0), 1e-3);
  // Integers give float32.
  Tensor ints = tensor_from({0, 0}, {2}, DType::Int64);
  Tensor l = logsumexp(ints, Shape{0});
  EXPECT_EQ(l.dtype(), DType::Float32);
  EXPECT_NEAR(l.item<double>(), std::log(2.0), 1e-6);
}

TEST(Reduce, ZeroDimAndEmpty) {
  Tensor s = tensor_from({2.5}, {});
  EXPECT_EQ(amax(s).item<double>(), 2.5);
  EXPECT_EQ(max(s).item<double>(), 2.5);
  ValuesIndices r = max(s, 0, true);
  expect_shape(r.values, {});
  EXPECT_EQ(r.indices.item<int64_t>(), 0);
  EXPECT_EQ(argmax(s, -1).item<int64_t>(), 0);
  EXPECT_NEAR(logsumexp(s, Shape{0}).item<double>(), 2.5, 1e-12);
  EXPECT_TRUE(std::isnan(var(s).item<double>()));  // one element, correction 1: 0 / 0
  EXPECT_EQ(var(s, {}, 0).item<double>(), 0.0);
  for (bool keepdim : {false, true}) {
    expect_shape(sum(s, Shape{0}, keepdim), {});
    EXPECT_EQ(amin(s, Shape{-1}, keepdim).item<double>(), 2.5);
    EXPECT_EQ(std_dev(s, Shape{0}, 0, keepdim).item<double>(), 0.0);
    expect_shape(argmin(s, std::nullopt, keepdim), {});
  }

  Tensor e = zeros(Shape{0, 3}, {DType::Float64});
  expect_shape(amax(e, Shape{1}), {0});
  expect_shape(max(e, 1).values, {0});
  expect_shape(argmax(e, 1), {0});
  expect_close(sum(e, Shape{0}), {0, 0, 0});
  expect_close(logsumexp(e, Shape{0}), {-INFINITY, -INFINITY, -INFINITY});
  expect_close(var(e, Shape{0}), {NAN, NAN, NAN});
  expect_shape(var(e, Shape{1}), {0});
}

TEST(Reduce, Gradients) {
  auto dims_of = [](std::initializer_list<int64_t> d) { return Shape(d); };
  for (const Shape& dims : {dims_of({}), dims_of({1}), dims_of({0, 2}), dims_of({-1})}) {
    for (bool keepdim : {false, true}) {
      std::string what = "dims " + std::to_string(dims.size()) + (keepdim ? " keepdim" : "");
      Tensor x = random_tensor({2, 3, 4}, DType::Float64, 21);
      gradcheck([&](const std::vector<Tensor>& in) { return logsumexp(in[0], dims, keepdim); }, {x}, 1e-6, 1e-5, 1e-4, "logsumexp " + what);
      gradcheck([&](const std::vector<Tensor>& in) { return var(in[0], dims, 1, keepdim); }, {x}, 1e-6, 1e-5, 1e-4, "var " + what);
      gradcheck([&](const std::vector<Tensor>& in) { return std_dev(in[0], dims, 0, keepdim); }, {x}, 1e-6, 1e-5, 1e-4, "std " + what);
      gradcheck([&](const std::vector<Tensor>& in) { return amax(in[0], dims, keepdim); }, {x}, 1e-6, 1e-5, 1e-4, "amax " + what);
      gradcheck([&](const std::vector<Tensor>& in) { return amin(transpose(in[0], 0, 1), dims, keepdim); }, {x}, 1e-6, 1e-5, 1e-4, "amin strided " + what);
    }
  }
  Tensor x = random_tensor({3, 4}, DType::Float64, 22);
  for (int64_t dim : {0, 1, -1})
    for (bool keepdim : {false, true}) {
      gradcheck([&](const std::vector<Tensor>& in) { return max(in[0], dim, keepdim).values; }, {x}, 1e-6, 1e-5, 1e-4, "max dim");
      gradcheck([&](const std::vector<Tensor>& in) { return min(in[0], dim, keepdim).values; }, {x}, 1e-6, 1e-5, 1e-4, "min dim");
    }
  gradcheck([](const std::vector<Tensor>& in) { return max(in[0]); }, {x}, 1e-6, 1e-5, 1e-4, "max all");
}

TEST(Reduce, TiesShareTheGradient) {
  Tensor x = tensor_from({1, 3, 3, 2, 5, 5, 5, 0}, {2, 4});
  x.set_requires_grad(true);
  sum(amax(x, Shape{1})).backward();
  expect_close(x.grad(), {0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0}, 1e-12, 1e-12);
  // max over a dim sends the whole gradient to the selected (first) index.
  Tensor y = tensor_from({1, 3, 3, 2}, {4});
  y.set_requires_grad(true);
  max(y, 0).values.backward();
  expect_close(y.grad(), {0, 1, 0, 0}, 0, 0);
  Tensor z = tensor_from({4, 1, 4}, {3});
  z.set_requires_grad(true);
  max(z).backward();
  expect_close(z.grad(), {0.5, 0, 0.5}, 0, 0);
}

TEST(Reduce, LargeAndDeterministicAcrossThreadCounts) {
  // Sizes above the full-reduction chunk, with a column reduction (dim 0) and a row reduction (dim 1).
  const Shape shape = {300, 257};
  Tensor x = random_tensor(shape, DType::Float32, 31, -1, 3);
  Tensor flat = random_tensor({100003}, DType::Float32, 32, -1, 3);
  auto run = [&]() {
    std::vector<std::vector<double>> r;
    r.push_back(sum(flat).to_vector<double>());
    r.push_back(var(flat).to_vector<double>());
    r.push_back(logsumexp(flat, Shape{0}).to_vector<double>());
    r.push_back(amax(flat).to_vector<double>());
    r.push_back(argmax(flat).to_vector<double>());
    for (int64_t d : {0, 1}) {
      r.push_back(sum(x, Shape{d}).to_vector<double>());
      r.push_back(var(x, Shape{d}).to_vector<double>());
      r.push_back(amax(x, Shape{d}).to_vector<double>());
      r.push_back(max(x, d).indices.to_vector<double>());
      r.push_back(logsumexp(non_contiguous(x), Shape{d}).to_vector<double>());
    }
    return r;
  };
  auto [one, two] = run_with_1_and_2_threads(run);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << "result " << i;  // bitwise (as doubles)
  // And correct.
  const Values fv = flat.to_vector<double>();
  EXPECT_NEAR(one[0][0], ref_sum(fv), 1e-2);
  EXPECT_NEAR(one[1][0], ref_var(1, false)(fv), 1e-5);
  EXPECT_NEAR(one[2][0], ref_logsumexp(fv), 1e-4);
  EXPECT_EQ(one[3][0], ref_max(fv));
  EXPECT_EQ(one[4][0], double(ref_arg(fv, true)));
  const Values xv = x.to_vector<double>();
  expect_close(var(x, Shape{0}), reference_reduce(xv, shape, {0}, ref_var(1, false)), 1e-5, 1e-6, "var dim 0");
  expect_close(amax(x, Shape{0}), reference_reduce(xv, shape, {0}, ref_max), 0, 0, "amax dim 0");
  expect_close(logsumexp(x, Shape{0}), reference_reduce(xv, shape, {0}, ref_logsumexp), 1e-5, 1e-5, "lse dim 0");
}

namespace {
template <typename F>
void expect_error(F&& f, const std::string& op, ErrorKind kind) {
  try {
    f();
    ADD_FAILURE() << "expected an error from " << op;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[" + op + "]", 0), 0u) << e.what();
  }
}
}  // namespace

TEST(Reduce, Errors) {
  Tensor e = zeros(Shape{0, 3});
  expect_error([&] { max(e); }, "max", ErrorKind::Runtime);
  expect_error([&] { min(e); }, "min", ErrorKind::Runtime);
  expect_error([&] { argmax(e); }, "argmax", ErrorKind::Runtime);
  expect_error([&] { max(e, 0); }, "max", ErrorKind::Index);
  expect_error([&] { argmin(e, 0); }, "argmin", ErrorKind::Index);
  expect_error([&] { amax(e, Shape{0}); }, "amax", ErrorKind::Index);
  expect_error([&] { amin(e); }, "amin", ErrorKind::Index);
  Tensor x = zeros(Shape{2, 3});
  expect_error([&] { max(x, 2); }, "max", ErrorKind::Index);
  expect_error([&] { amax(x, Shape{0, -2}); }, "amax", ErrorKind::Runtime);
  expect_error([&] { logsumexp(x, Shape{3}); }, "logsumexp", ErrorKind::Index);
  expect_error([&] { var(zeros(Shape{3}, {DType::Int64})); }, "var", ErrorKind::Type);
  expect_error([&] { std_dev(zeros(Shape{3}, {DType::Int32})); }, "std", ErrorKind::Type);
}
