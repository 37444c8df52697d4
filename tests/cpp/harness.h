// The conformance harness every op test uses: random inputs, comparison against a float64 reference
// computed on the host, non-contiguous copies of inputs, and float64 finite-difference gradient checks.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dygrad/dygrad.h"

namespace dg::test {

using Shape = std::vector<int64_t>;

// Uniform values in [lo, hi), reproducible from `seed`.
inline std::vector<double> random_values(int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = dist(gen);
  return v;
}

inline Tensor tensor_from(const std::vector<double>& values, const Shape& shape, DType dtype = DType::Float64) {
  return from_vector<double>(values, shape, dtype);
}

inline Tensor random_tensor(const Shape& shape, DType dtype = DType::Float64, uint32_t seed = 0, double lo = -1.0,
                            double hi = 1.0) {
  return tensor_from(random_values(shape_numel(shape), seed, lo, hi), shape, dtype);
}

// The same values laid out non-contiguously: every other element of a buffer twice as large, with the
// two innermost dims swapped in memory when there are at least two.
inline Tensor non_contiguous(const Tensor& t) {
  std::vector<double> values = t.to_vector<double>();
  const int64_t n = t.numel(), nd = t.dim();
  std::vector<double> buffer(static_cast<size_t>(2 * n + 1), -12345.0);
  Dims strides(static_cast<size_t>(nd), 0);
  // Memory order: dims reversed for the last two (column-major-ish), then doubled.
  Dims order;
  for (int64_t d = 0; d < nd; ++d) order.push_back(d);
  if (nd >= 2) std::swap(order[static_cast<size_t>(nd - 1)], order[static_cast<size_t>(nd - 2)]);
  int64_t acc = 2;
  for (int64_t k = nd - 1; k >= 0; --k) {
    strides[static_cast<size_t>(order[static_cast<size_t>(k)])] = acc;
    acc *= std::max<int64_t>(t.shape()[order[static_cast<size_t>(k)]], 1);
  }
  Dims index(static_cast<size_t>(nd), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 1;
    for (int64_t d = 0; d < nd; ++d) off += index[static_cast<size_t>(d)] * strides[static_cast<size_t>(d)];
    buffer[static_cast<size_t>(off)] = values[static_cast<size_t>(i)];
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < t.shape()[d]) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
  Tensor base = from_vector<double>(buffer, Shape{static_cast<int64_t>(buffer.size())}, t.dtype());
  Tensor out = as_strided(base, t.shape(), strides, 1);
  EXPECT_FALSE(out.is_contiguous() && n > 1);
  return out;
}

// Elementwise comparison with |a - e| <= atol + rtol * |e| (NaNs must match).
inline void expect_close(const Tensor& actual, const std::vector<double>& expected, double rtol = 1e-6,
                         double atol = 1e-6, const std::string& what = "") {
  std::vector<double> a = actual.to_vector<double>();
  ASSERT_EQ(a.size(), expected.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << what << " at " << i;
      continue;
    }
    if (std::isinf(expected[i])) {
      EXPECT_EQ(a[i], expected[i]) << what << " at " << i;
      continue;
    }
    EXPECT_LE(std::fabs(a[i] - expected[i]), atol + rtol * std::fabs(expected[i]))
        << what << " at " << i << ": got " << a[i] << ", expected " << expected[i];
  }
}

inline void expect_shape(const Tensor& t, const Shape& shape) {
  EXPECT_EQ(std::vector<int64_t>(t.shape().begin(), t.shape().end()), shape);
}

// Finite-difference gradient check in float64: compares the gradient of sum(f(inputs) * w) for a random
// weight w (so every output element matters) against central differences.
inline void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                      double eps = 1e-6, double atol = 1e-5, double rtol = 1e-4, const std::string& what = "") {
  for (Tensor& in : inputs) {
    ASSERT_EQ(in.dtype(), DType::Float64) << "gradcheck needs float64 inputs";
    in = clone(detach(in));
    in.set_requires_grad(true);
  }
  Tensor out = f(inputs);
  Tensor weights = random_tensor(std::vector<int64_t>(out.shape().begin(), out.shape().end()), DType::Float64, 77);
  auto objective = [&](const std::vector<Tensor>& xs) {
    NoGradGuard no_grad;
    return sum(mul(f(xs), weights)).item<double>();
  };
  sum(mul(out, weights)).backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    Tensor analytic = x.grad();
    std::vector<double> numeric(static_cast<size_t>(x.numel()));
    x.wait_readable();
    double* data = x.data<double>();
    ASSERT_TRUE(x.is_contiguous());
    for (int64_t i = 0; i < x.numel(); ++i) {
      double saved = data[i];
      data[i] = saved + eps;
      double fp = objective(inputs);
      data[i] = saved - eps;
      double fm = objective(inputs);
      data[i] = saved;
      numeric[static_cast<size_t>(i)] = (fp - fm) / (2 * eps);
    }
    if (!analytic.defined()) {
      for (double v : numeric) EXPECT_NEAR(v, 0.0, atol) << what << ": input " << k << " got no gradient";
      continue;
    }
    expect_close(analytic, numeric, rtol, atol, what + " gradient of input " + std::to_string(k));
  }
}

// Runs `run` with 1 and then 2 intra-op threads, restores the thread count, and returns both results: for
// checks that a kernel's result does not depend on the thread count (docs/threading.md).
template <typename F>
auto run_with_1_and_2_threads(F&& run) {
  const int saved = get_context().num_threads;
  set_num_threads(1);
  auto one = run();
  set_num_threads(2);
  auto two = run();
  set_num_threads(saved > 0 ? saved : 2);
  return std::make_pair(std::move(one), std::move(two));
}

}  // namespace dg::test
