// nn ops (softmax, log_softmax, embedding, cross_entropy) against float64 host references, on contiguous
// and non-contiguous inputs, with gradients, thread-count determinism and error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {

using Values = std::vector<double>;

// Reference softmax / log_softmax of row-major x with `shape` along `dim` (wrapped).
Values reference_softmax(const Values& x, const Shape& shape, int64_t dim, bool log) {
  int64_t outer = 1, inner = 1;
  const int64_t D = shape.empty() ? 1 : shape[static_cast<size_t>(dim)];
  for (int64_t d = 0; d < dim; ++d) outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) inner *= shape[d];
  Values y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t r) { return static_cast<size_t>((o * D + r) * inner + i); };
      double m = -INFINITY;
      for (int64_t r = 0; r < D; ++r) m = std::max(m, x[at(r)]);
      double s = 0;
      for (int64_t r = 0; r < D; ++r) s += std::exp(x[at(r)] - m);
      for (int64_t r = 0; r < D; ++r) y[at(r)] = log ? x[at(r)] - m - std::log(s) : std::exp(x[at(r)] - m) / s;
    }
  return y;
}

double tol_for(DType t) { return t == DType::BFloat16 ? 2e-2 : t == DType::Float32 ? 2e-6 : 1e-12; }

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

// Row-major reference of cross-entropy per row for logits [N, C, d...] (class dim 1), target [N, d...].
Values reference_row_losses(const Values& logits, const Shape& shape, const std::vector<int64_t>& target, int64_t ignore) {
  const int64_t N = shape[0], C = shape[1];
  int64_t inner = 1;
  for (size_t d = 2; d < shape.size(); ++d) inner *= shape[d];
  Values out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t t = target[static_cast<size_t>(n * inner + i)];
      if (t == ignore) {
        out.push_back(0);
        continue;
      }
      auto at = [&](int64_t c) { return logits[static_cast<size_t>((n * C + c) * inner + i)]; };
      double m = -INFINITY, s = 0;
      for (int64_t c = 0; c < C; ++c) m = std::max(m, at(c));
      for (int64_t c = 0; c < C; ++c) s += std::exp(at(c) - m);
      out.push_back(m + std::log(s) - at(t));
    }
  return out;
}

Tensor int64_tensor(const std::vector<int64_t>& v, const Shape& shape) { return from_vector<int64_t>(v, shape); }

}  // namespace

TEST(NN, SoftmaxAllDims) {
  // {7, 40, 33}: a softmax over dims 0 and 1 of contiguous data takes the column-block path.
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{7, 40, 33}}) {
    for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
      Tensor base = random_tensor(shape, t, 41, -4, 4);
      const Values x = base.to_vector<double>();
      for (bool strided : {false, true}) {
        Tensor input = strided ? non_contiguous(base) : base;
        for (int64_t dim : {0, 1, 2, -1, -2, -3}) {
          const int64_t wd = dim < 0 ? dim + 3 : dim;
          for (bool log : {false, true}) {
            Tensor y = log ? log_softmax(input, dim) : softmax(input, dim);
            std::string what = std::string(log ? "log_softmax " : "softmax ") + dtype_name(t) + " dim " +
                               std::to_string(dim) + (strided ? " strided" : "") + " size " + std::to_string(shape[1]);
            expect_shape(y, shape);
            EXPECT_EQ(y.dtype(), t);
            expect_close(y, reference_softmax(x, shape, wd, log), tol_for(t), tol_for(t), what);
          }
        }
      }
    }
  }
}

TEST(NN, SoftmaxEdgeCases) {
  // 0-dim: softmax is 1, log_softmax 0.
  Tensor s = tensor_from({3.0}, {});
  EXPECT_EQ(softmax(s, 0).item<double>(), 1.0);
  EXPECT_EQ(log_softmax(s, -1).item<double>(), 0.0);
  // Size-0 dims: empty results of the same shape.
  expect_shape(softmax(zeros(Shape{0, 4}), 1), {0, 4});
  expect_shape(log_softmax(zeros(Shape{3, 0}), 1), {3, 0});
  // Masked entries (-inf) get probability 0; large values do not overflow; an all -inf row is NaN (torch).
  const double inf = INFINITY;
  Tensor x = tensor_from({1000, 1000, -inf, -inf, 0, -inf, -inf, -inf}, {2, 4}, DType::Float32);
  expect_close(softmax(x, 1), {0.5, 0.5, 0, 0, 1, 0, 0, 0}, 1e-6, 1e-6);
  std::vector<double> ls = log_softmax(x, 1).to_vector<double>();
  EXPECT_NEAR(ls[0], -std::log(2.0), 1e-6);
  EXPECT_EQ(ls[2], -inf);
  EXPECT_EQ(ls[4], 0.0);
  std::vector<double> all_masked = softmax(tensor_from({-inf, -inf}, {1, 2}), 1).to_vector<double>();
  EXPECT_TRUE(std::isnan(all_masked[0]));
  // A long contiguous row (vectorised path with a tail).
  Tensor row = random_tensor({2, 1003}, DType::Float32, 42, -10, 10);
  expect_close(softmax(row, -1), reference_softmax(row.to_vector<double>(), {2, 1003}, 1, false), 1e-5, 1e-8);
}

TEST(NN, SoftmaxLastDimMaskedRows) {
  // The contiguous last-dim path (lanes of 16 floats / 8 doubles plus a tail) on causally masked rows
  // (-inf beyond the diagonal, as attention does), rows whose exps underflow (a spread of 200: results
  // below 1.6e-38 are flushed to 0, within atol), a fully masked row and a row with a NaN (NaN rows, as
  // torch). Forward and
  // backward against float64 references, for row lengths below, at and above the lane width.
  const double inf = INFINITY;
  for (int64_t D : {5, 16, 37, 300}) {
    const int64_t R = D + 3;  // rows: D causal ones, one with a large spread, one fully masked, one with a NaN
    Values x = random_values(R * D, 61 + static_cast<uint32_t>(D), -4, 4);
    x[static_cast<size_t>((D + 2) * D + D / 2)] = NAN;  // NaN propagates to the whole row
    for (int64_t r = 0; r < D; ++r)
      for (int64_t c = r + 1; c < D; ++c) x[static_cast<size_t>(r * D + c)] = -inf;
    for (int64_t c = 0; c < D; ++c) x[static_cast<size_t>(D * D + c)] = -200.0 * double(c) / double(D);
    for (int64_t c = 0; c < D; ++c) x[static_cast<size_t>((D + 1) * D + c)] = -inf;
    const Values g = random_values(R * D, 71 + static_cast<uint32_t>(D));
    for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
      Tensor input = tensor_from(x, {R, D}, t);
      const Values stored = input.to_vector<double>();
      const double tol = tol_for(t);
      for (bool log : {false, true}) {
        const std::string what = std::string(log ? "log_softmax " : "softmax ") + dtype_name(t) + " D " + std::to_string(D);
        Tensor a = clone(input);
        a.set_requires_grad(true);
        Tensor y = log ? log_softmax(a, -1) : softmax(a, -1);
        const Values expected = reference_softmax(stored, {R, D}, 1, log);
        expect_close(y, expected, tol, log ? tol : std::max(tol, 1e-30), what);
        // Backward with a given gradient: softmax y * (g - sum(g y)), log_softmax g - exp(y) sum(g); the
        // reference uses the stored forward output, as the kernel does.
        Tensor gt = tensor_from(g, {R, D}, t);
        sum(mul(y, gt)).backward();
        const Values yv = y.to_vector<double>(), gv = gt.to_vector<double>();
        Values expected_grad(static_cast<size_t>(R * D));
        for (int64_t r = 0; r < R; ++r) {
          double total = 0;
          for (int64_t c = 0; c < D; ++c) {
            const size_t i = static_cast<size_t>(r * D + c);
            total += log ? gv[i] : gv[i] * yv[i];
          }
          for (int64_t c = 0; c < D; ++c) {
            const size_t i = static_cast<size_t>(r * D + c);
            expected_grad[i] = log ? gv[i] - std::exp(yv[i]) * total : yv[i] * (gv[i] - total);
          }
        }
        expect_close(a.grad(), expected_grad, 4 * tol, 4 * tol, what + " backward");
      }
    }
  }
}

TEST(NN, SoftmaxLastDimSameForAnyThreadCount) {
  Tensor x = random_tensor({64, 300}, DType::Float32, 81, -30, 30);
  Tensor g = random_tensor({64, 300}, DType::Float32, 82);
  auto run = [&] {
    std::vector<Values> r;
    for (bool log : {false, true}) {
      Tensor a = clone(x);
      a.set_requires_grad(true);
      Tensor y = log ? log_softmax(a, 1) : softmax(a, 1);
      sum(mul(y, g)).backward();
      r.push_back(y.to_vector<double>());
      r.push_back(a.grad().to_vector<double>());
    }
    return r;
  };
  auto [one, two] = run_with_1_and_2_threads(run);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(one[i] == two[i]) << "result " << i << " differs across thread counts";
}

TEST(NN, SoftmaxGradients) {
  Tensor x = random_tensor({3, 4, 5}, DType::Float64, 43);
  for (int64_t dim : {0, 1, 2, -1}) {
    gradcheck([&](const std::vector<Tensor>& in) { return softmax(in[0], dim); }, {x}, 1e-6, 1e-6, 1e-4, "softmax");
    gradcheck([&](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); }, {x}, 1e-6, 1e-6, 1e-4, "log_softmax");
    // Strided input and strided incoming gradient (through transpose views).
    gradcheck([&](const std::vector<Tensor>& in) { return transpose(softmax(transpose(in[0], 0, 2), dim), 1, 2); }, {x},
              1e-6, 1e-6, 1e-4, "softmax strided");
    gradcheck([&](const std::vector<Tensor>& in) { return transpose(log_softmax(transpose(in[0], 0, 2), dim), 1, 2); },
              {x}, 1e-6, 1e-6, 1e-4, "log_softmax strided");
  }
  // A broadcast incoming gradient (stride 0, from sum): softmax rows sum to 1, so the gradient is 0;
  // for log_softmax it is 1 - D * softmax.
  for (int64_t dim : {0, 2}) {
    Tensor a = clone(x);
    a.set_requires_grad(true);
    sum(softmax(a, dim)).backward();
    expect_close(a.grad(), Values(60, 0.0), 0, 1e-12, "softmax broadcast gradient");
    Tensor b = clone(x);
    b.set_requires_grad(true);
    sum(log_softmax(b, dim)).backward();
    Values p = reference_softmax(x.to_vector<double>(), {3, 4, 5}, dim, false), expected;
    for (double v : p) expected.push_back(1 - double(x.shape()[dim]) * v);
    expect_close(b.grad(), expected, 1e-12, 1e-12, "log_softmax broadcast gradient");
  }
  // Column path (inner >= 8) in the forward, then its backward.
  Tensor wide = random_tensor({3, 4, 9}, DType::Float64, 44);
  gradcheck([&](const std::vector<Tensor>& in) { return softmax(in[0], 1); }, {wide}, 1e-6, 1e-6, 1e-4, "softmax wide");
  gradcheck([&](const std::vector<Tensor>& in) { return log_softmax(in[0], 0); }, {wide}, 1e-6, 1e-6, 1e-4, "log_softmax wide");
}

TEST(NN, Embedding) {
  const int64_t V = 6, C = 5;
  Tensor table = random_tensor({V, C}, DType::Float64, 51);
  const Values w = table.to_vector<double>();
  const std::vector<int64_t> idx = {3, 0, 5, 3, 3, 1};
  for (DType index_type : {DType::Int64, DType::Int32}) {
    Tensor indices = from_vector<int64_t>(idx, Shape{2, 3}, index_type);
    for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
      Tensor weight = to(table, t);
      for (bool strided : {false, true}) {
        Tensor out = embedding(strided ? non_contiguous(weight) : weight, strided ? non_contiguous(indices) : indices);
        expect_shape(out, {2, 3, C});
        Values expected;
        const Values wt = weight.to_vector<double>();
        for (int64_t i : idx)
          for (int64_t c = 0; c < C; ++c) expected.push_back(wt[static_cast<size_t>(i * C + c)]);
        expect_close(out, expected, 0, 0, std::string("embedding ") + dtype_name(t));
      }
    }
  }
  // 0-dim index -> one row; empty indices -> [0, C].
  expect_shape(embedding(table, int64_tensor({2}, {})), {C});
  expect_shape(embedding(table, int64_tensor({}, {0})), {0, C});
  // Weight gradient: a scatter-add of rows (index 3 appears three times), checked numerically and exactly.
  Tensor indices = int64_tensor(idx, {2, 3});
  gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], indices); }, {table}, 1e-6, 1e-6, 1e-4, "embedding");
  Tensor weight = clone(table);
  weight.set_requires_grad(true);
  Tensor g = random_tensor({2, 3, C}, DType::Float64, 52);
  sum(mul(embedding(weight, indices), g)).backward();
  const Values gv = g.to_vector<double>();
  Values expected(static_cast<size_t>(V * C), 0.0);
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t c = 0; c < C; ++c) expected[static_cast<size_t>(idx[i] * C + c)] += gv[i * C + static_cast<size_t>(c)];
  expect_close(weight.grad(), expected, 1e-12, 1e-12, "embedding grad");
}

TEST(NN, EmbeddingErrors) {
  Tensor weight = zeros(Shape{4, 3});
  expect_error([&] { embedding(weight, int64_tensor({1, 4}, {2})).to_vector<double>(); }, "embedding", ErrorKind::Index);
  expect_error([&] { embedding(weight, int64_tensor({-1}, {1})).to_vector<double>(); }, "embedding", ErrorKind::Index);
  expect_error([&] { embedding(weight, zeros(Shape{2})); }, "embedding", ErrorKind::Type);
  expect_error([&] { embedding(zeros(Shape{4}), int64_tensor({1}, {1})); }, "embedding", ErrorKind::Value);
  // The stream keeps working after a deferred error.
  EXPECT_EQ(embedding(weight, int64_tensor({1}, {1})).to_vector<double>(), (Values{0, 0, 0}));
}

TEST(NN, CrossEntropy) {
  struct Case {
    Shape logits_shape;
    std::vector<int64_t> target;
  };
  const std::vector<Case> cases = {
      {{4, 5}, {1, 0, 4, 2}},
      {{4, 5}, {1, -100, 4, -100}},     // ignored rows
      {{2, 3, 4}, {0, 2, 1, 1, 2, -100, 0, 0}},  // [N, C, d]
      {{3, 1}, {0, 0, 0}},              // one class
  };
  for (const Case& c : cases) {
    Shape target_shape = {c.logits_shape[0]};
    for (size_t d = 2; d < c.logits_shape.size(); ++d) target_shape.push_back(c.logits_shape[d]);
    Tensor target = int64_tensor(c.target, target_shape);
    for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
      Tensor base = random_tensor(c.logits_shape, t, 61, -3, 3);
      const Values rows = reference_row_losses(base.to_vector<double>(), c.logits_shape, c.target, -100);
      double total = 0;
      int64_t counted = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        total += rows[i];
        counted += c.target[i] != -100;
      }
      for (bool strided : {false, true}) {
        Tensor logits = strided ? non_contiguous(base) : base;
        const double tol = tol_for(t) * 10;
        std::string what = std::string("cross_entropy ") + dtype_name(t) + (strided ? " strided" : "");
        Tensor none = cross_entropy(logits, target, "none");
        expect_shape(none, target_shape);
        expect_close(none, rows, tol, tol, what + " none");
        expect_close(cross_entropy(logits, target, "sum"), {total}, tol, tol, what + " sum");
        Tensor mean_loss = cross_entropy(logits, target);
        expect_shape(mean_loss, {});
        expect_close(mean_loss, {total / double(counted)}, tol, tol, what + " mean");
      }
    }
    Tensor x = random_tensor(c.logits_shape, DType::Float64, 62);
    for (const char* reduction : {"mean", "sum", "none"})
      gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target, reduction); }, {x}, 1e-6, 1e-6,
                1e-4, std::string("cross_entropy ") + reduction);
    std::vector<int64_t> relabelled = c.target;  // ignore_index 2 instead of -100
    for (int64_t& v : relabelled) v = v == -100 ? 2 : v;
    Tensor target2 = int64_tensor(relabelled, target_shape);
    gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(transpose(in[0], 0, 1), target2, "mean", 2); },
              {transpose(x, 0, 1)}, 1e-6, 1e-6, 1e-4, "cross_entropy strided, ignore_index 2");
  }
  // Unbatched: logits [C], target [].
  Tensor logits = tensor_from({1, 2, 3}, {3});
  const double expected = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 2.0;
  EXPECT_NEAR(cross_entropy(logits, int64_tensor({1}, {})).item<double>(), expected, 1e-12);
  expect_shape(cross_entropy(logits, int64_tensor({1}, {}), "none"), {});
  // No rows: the mean is NaN, the sum 0, none is empty.
  Tensor no_rows = zeros(Shape{0, 3}, {DType::Float64});
  Tensor no_targets = int64_tensor({}, {0});
  EXPECT_TRUE(std::isnan(cross_entropy(no_rows, no_targets).item<double>()));
  EXPECT_EQ(cross_entropy(no_rows, no_targets, "sum").item<double>(), 0.0);
  expect_shape(cross_entropy(no_rows, no_targets, "none"), {0});
  // Every target ignored: the mean is NaN (0 / 0), the sum 0, and the gradient 0 (not NaN) for sum.
  Tensor all_ignored = int64_tensor({-100, -100}, {2});
  EXPECT_TRUE(std::isnan(cross_entropy(zeros(Shape{2, 3}), all_ignored).item<double>()));
  Tensor z = zeros(Shape{2, 3}, {DType::Float64});
  z.set_requires_grad(true);
  cross_entropy(z, all_ignored, "sum").backward();
  expect_close(z.grad(), Values(6, 0.0), 0, 0);
}

TEST(NN, CrossEntropyErrors) {
  Tensor logits = zeros(Shape{2, 3});
  expect_error([&] { cross_entropy(logits, int64_tensor({0, 3}, {2})).to_vector<double>(); }, "cross_entropy", ErrorKind::Index);
  expect_error([&] { cross_entropy(logits, int64_tensor({-5, 0}, {2}), "none").to_vector<double>(); }, "cross_entropy",
               ErrorKind::Index);
  expect_error([&] { cross_entropy(logits, int64_tensor({0, 1, 2}, {3})); }, "cross_entropy", ErrorKind::Value);
  expect_error([&] { cross_entropy(logits, zeros(Shape{2})); }, "cross_entropy", ErrorKind::Type);
  expect_error([&] { cross_entropy(logits, int64_tensor({0, 1}, {2}), "average"); }, "cross_entropy", ErrorKind::Value);
  expect_error([&] { cross_entropy(zeros(Shape{2, 3}, {DType::Int64}), int64_tensor({0, 1}, {2})); }, "cross_entropy",
               ErrorKind::Type);
  expect_error([&] { softmax(zeros(Shape{2}, {DType::Int64}), 0); }, "softmax", ErrorKind::Type);
  expect_error([&] { log_softmax(zeros(Shape{2}), 1); }, "log_softmax", ErrorKind::Index);
}

TEST(NN, DeterministicAcrossThreadCounts) {
  const int64_t N = 512, C = 301;
  Tensor logits = random_tensor({N, C}, DType::Float32, 71, -5, 5);
  std::vector<int64_t> classes;
  for (int64_t n = 0; n < N; ++n) classes.push_back(n % 7 == 0 ? -100 : (n * 37) % C);
  Tensor target = int64_tensor(classes, {N});
  Tensor table = random_tensor({50, 64}, DType::Float32, 72);
  std::vector<int64_t> lookups;
  for (int64_t i = 0; i < 4000; ++i) lookups.push_back((i * 13) % 50);
  Tensor indices = int64_tensor(lookups, {4000});
  Tensor upstream = random_tensor({4000, 64}, DType::Float32, 73);
  auto run = [&]() {
    std::vector<std::vector<double>> r;
    r.push_back(softmax(logits, 1).to_vector<double>());
    r.push_back(softmax(logits, 0).to_vector<double>());
    r.push_back(log_softmax(non_contiguous(logits), 1).to_vector<double>());
    r.push_back(cross_entropy(logits, target).to_vector<double>());
    r.push_back(cross_entropy(logits, target, "none").to_vector<double>());
    Tensor x = clone(logits);
    x.set_requires_grad(true);
    cross_entropy(x, target).backward();
    r.push_back(x.grad().to_vector<double>());
    Tensor y = clone(logits);
    y.set_requires_grad(true);
    sum(mul(softmax(y, 1), logits)).backward();
    r.push_back(y.grad().to_vector<double>());
    Tensor w = clone(table);
    w.set_requires_grad(true);
    sum(mul(embedding(w, indices), upstream)).backward();
    r.push_back(w.grad().to_vector<double>());
    return r;
  };
  auto [one, two] = run_with_1_and_2_threads(run);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(one[i] == two[i]) << "result " << i << " differs across thread counts";
  // And correct: the mean loss against the float64 reference.
  const Values rows = reference_row_losses(logits.to_vector<double>(), {N, C}, classes, -100);
  double total = 0;
  int64_t counted = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    total += rows[i];
    counted += classes[i] != -100;
  }
  EXPECT_NEAR(one[3][0], total / double(counted), 1e-4);
}
