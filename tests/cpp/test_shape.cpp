// View ops: values against host references, strides, storage sharing, writes through views, edge cases,
// error messages and float64 gradient checks (single views and chains).
#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {
// Host reference: element at multi-index `idx` of a row-major buffer of `shape`.
double at(const std::vector<double>& v, const Shape& shape, const Shape& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + idx[d];
  return v[static_cast<size_t>(off)];
}

// Reference for slice along dim of a row-major 3-D array.
std::vector<double> slice_reference(const std::vector<double>& v, const Shape& shape, int64_t dim, int64_t start,
                                    int64_t length, int64_t step) {
  std::vector<double> out;
  Shape idx(3, 0);
  Shape out_shape = shape;
  out_shape[static_cast<size_t>(dim)] = length;
  for (idx[0] = 0; idx[0] < out_shape[0]; ++idx[0])
    for (idx[1] = 0; idx[1] < out_shape[1]; ++idx[1])
      for (idx[2] = 0; idx[2] < out_shape[2]; ++idx[2]) {
        Shape src = idx;
        src[static_cast<size_t>(dim)] = start + idx[static_cast<size_t>(dim)] * step;
        out.push_back(at(v, shape, src));
      }
  return out;
}

template <typename F>
void expect_error(F&& f, const std::string& op, ErrorKind kind) {
  try {
    f();
    ADD_FAILURE() << "expected an error from " << op;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find("[" + op + "]"), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(Shape, SliceValuesStridesAndClamping) {
  const Shape shape{3, 7, 4};
  Tensor a = random_tensor(shape, DType::Float64, 1);
  std::vector<double> v = a.to_vector<double>();
  for (Tensor input : {a, non_contiguous(a)}) {
    Tensor s = slice(input, 1, 1, 6, 2);  // rows 1, 3, 5
    expect_shape(s, {3, 3, 4});
    EXPECT_TRUE(s.shares_storage(input));
    EXPECT_EQ(s.stride(1), input.stride(1) * 2);
    expect_close(s, slice_reference(v, shape, 1, 1, 3, 2), 0, 0, "slice step 2");
    // Negative start/end and clamping as in Python: [-3:100] on dim 2 -> elements 1..3.
    Tensor neg = slice(input, -1, -3, 100);
    expect_shape(neg, {3, 7, 3});
    expect_close(neg, slice_reference(v, shape, 2, 1, 3, 1), 0, 0, "slice negative start");
    // start past end and start beyond size give empty views.
    expect_shape(slice(input, 1, 5, 2), {3, 0, 4});
    expect_shape(slice(input, 1, 50, 60), {3, 0, 4});
    expect_shape(slice(input, 0, -100, 100, 5), {1, 7, 4});
    expect_shape(slice(input, 1, -100, -8), {3, 0, 4});
  }
}

TEST(Shape, NarrowAndSelect) {
  const Shape shape{4, 5, 3};
  Tensor a = random_tensor(shape, DType::Float64, 2);
  std::vector<double> v = a.to_vector<double>();
  for (Tensor input : {a, non_contiguous(a)}) {
    Tensor n = narrow(input, 1, 2, 3);
    expect_shape(n, {4, 3, 3});
    EXPECT_EQ(n.storage_offset(), input.storage_offset() + 2 * input.stride(1));
    expect_close(n, slice_reference(v, shape, 1, 2, 3, 1), 0, 0, "narrow");
    expect_close(narrow(input, 0, -2, 2), slice_reference(v, shape, 0, 2, 2, 1), 0, 0, "narrow negative start");

    Tensor s = select(input, 1, -1);  // index 4
    expect_shape(s, {4, 3});
    EXPECT_TRUE(s.shares_storage(input));
    std::vector<double> expected;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t k = 0; k < 3; ++k) expected.push_back(at(v, shape, {i, 4, k}));
    expect_close(s, expected, 0, 0, "select");
    Tensor row = select(select(input, 0, 3), 0, 0);
    expect_shape(row, {3});
    expect_close(row, {at(v, shape, {3, 0, 0}), at(v, shape, {3, 0, 1}), at(v, shape, {3, 0, 2})}, 0, 0, "select x2");
    Tensor scalar = select(row, 0, 2);
    EXPECT_EQ(scalar.dim(), 0);
    EXPECT_EQ(scalar.item<double>(), at(v, shape, {3, 0, 2}));
  }
}

TEST(Shape, WritesThroughViewsAreVisible) {
  Tensor a = zeros(std::vector<int64_t>{3, 4}, {DType::Float32});
  Tensor column = select(a, 1, 2);
  fill_(column, 5.0);
  Tensor block = narrow(slice(a, 0, 0, 3, 2), 1, 0, 2);  // rows 0 and 2, cols 0..1
  copy_(block, from_vector<float>({1, 2, 3, 4}, std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 5, 0, 0, 0, 5, 0, 3, 4, 5, 0}));
  Tensor u = unsqueeze(a, 0);
  add_(u, 1.0);
  EXPECT_EQ(a.to_vector<float>()[3], 1.0f);
}

TEST(Shape, SqueezeUnsqueeze) {
  Tensor a = random_tensor({1, 3, 1, 2}, DType::Float64, 3);
  std::vector<double> v = a.to_vector<double>();
  Tensor s = squeeze(a);
  expect_shape(s, {3, 2});
  EXPECT_TRUE(s.shares_storage(a));
  expect_close(s, v, 0, 0);
  expect_shape(squeeze(a, 2), {1, 3, 2});
  expect_shape(squeeze(a, -4), {3, 1, 2});
  expect_shape(squeeze(a, 1), {1, 3, 1, 2});  // not size 1: unchanged
  expect_shape(squeeze(ones(std::vector<int64_t>{1, 1})), {});
  expect_shape(squeeze(ones(std::vector<int64_t>{})), {});

  Tensor b = random_tensor({2, 3}, DType::Float64, 4);
  Tensor nb = non_contiguous(b);
  for (Tensor input : {b, nb}) {
    Tensor u0 = unsqueeze(input, 0), u1 = unsqueeze(input, 1), u2 = unsqueeze(input, -1);
    expect_shape(u0, {1, 2, 3});
    expect_shape(u1, {2, 1, 3});
    expect_shape(u2, {2, 3, 1});
    for (const Tensor& u : {u0, u1, u2}) {
      EXPECT_TRUE(u.shares_storage(input));
      expect_close(u, b.to_vector<double>(), 0, 0);
    }
  }
  expect_shape(unsqueeze(ones(std::vector<int64_t>{}), 0), {1});
  expect_shape(unsqueeze(zeros(std::vector<int64_t>{0, 2}), 1), {0, 1, 2});
}

TEST(Shape, FlattenUnflatten) {
  Tensor a = random_tensor({2, 3, 4, 5}, DType::Float64, 5);
  std::vector<double> v = a.to_vector<double>();
  Tensor f = flatten(a);
  expect_shape(f, {120});
  EXPECT_TRUE(f.shares_storage(a));
  expect_shape(flatten(a, 1, 2), {2, 12, 5});
  expect_shape(flatten(a, -2), {2, 3, 20});
  expect_shape(flatten(a, 2, 2), {2, 3, 4, 5});
  expect_shape(flatten(ones(std::vector<int64_t>{})), {1});
  // A non-contiguous input flattens by copy, with the same values.
  Tensor nc = non_contiguous(a);
  Tensor fc = flatten(nc);
  expect_close(fc, v, 0, 0, "flatten non-contiguous");
  Tensor u = unflatten(f, 0, Dims{6, -1});
  expect_shape(u, {6, 20});
  expect_close(u, v, 0, 0);
  expect_shape(unflatten(a, -1, Dims{5, 1}), {2, 3, 4, 5, 1});
  expect_shape(unflatten(zeros(std::vector<int64_t>{3, 0}), 1, Dims{0, 4}), {3, 0, 4});
}

TEST(Shape, ZeroSizeAndSizeOne) {
  Tensor e = zeros(std::vector<int64_t>{0, 3});
  expect_shape(slice(e, 0, 0, 10), {0, 3});
  expect_shape(narrow(e, 1, 1, 2), {0, 2});
  expect_shape(select(e, 1, 2), {0});
  EXPECT_TRUE(select(e, 1, 2).to_vector<float>().empty());
  Tensor one = full(std::vector<int64_t>{1, 1, 1}, 7.0);
  EXPECT_EQ(select(select(select(one, 0, 0), 0, 0), 0, -1).item<float>(), 7.0f);
  expect_shape(narrow(one, 2, 1, 0), {1, 1, 0});
}

TEST(Shape, Errors) {
  Tensor a = zeros(std::vector<int64_t>{2, 3});
  expect_error([&] { narrow(a, 1, 2, 2); }, "narrow", ErrorKind::Runtime);
  expect_error([&] { narrow(a, 1, 4, 0); }, "narrow", ErrorKind::Index);
  expect_error([&] { narrow(a, 2, 0, 1); }, "narrow", ErrorKind::Index);
  expect_error([&] { slice(a, 0, 0, 2, 0); }, "slice", ErrorKind::Value);
  expect_error([&] { slice(a, 0, 0, 2, -1); }, "slice", ErrorKind::Value);
  expect_error([&] { slice(a, -3, 0, 1); }, "slice", ErrorKind::Index);
  expect_error([&] { select(a, 1, 3); }, "select", ErrorKind::Index);
  expect_error([&] { select(a, 0, -3); }, "select", ErrorKind::Index);
  expect_error([&] { select(ones(std::vector<int64_t>{}), 0, 0); }, "select", ErrorKind::Index);
  expect_error([&] { squeeze(a, 2); }, "squeeze", ErrorKind::Index);
  expect_error([&] { unsqueeze(a, 3); }, "unsqueeze", ErrorKind::Index);
  expect_error([&] { flatten(a, 1, 0); }, "flatten", ErrorKind::Runtime);
  expect_error([&] { unflatten(a, 1, Dims{2, 2}); }, "unflatten", ErrorKind::Runtime);
  expect_error([&] { unflatten(a, 1, Dims{-1, -1}); }, "unflatten", ErrorKind::Runtime);
}

TEST(Shape, Gradcheck) {
  Tensor x = random_tensor({3, 5, 4}, DType::Float64, 6);
  gradcheck([](const std::vector<Tensor>& t) { return narrow(t[0], 1, 1, 3); }, {x}, 1e-6, 1e-6, 1e-5, "narrow");
  gradcheck([](const std::vector<Tensor>& t) { return slice(t[0], 1, -4, 5, 2); }, {x}, 1e-6, 1e-6, 1e-5, "slice");
  gradcheck([](const std::vector<Tensor>& t) { return slice(t[0], 2, 3, 1); }, {x}, 1e-6, 1e-6, 1e-5, "slice empty");
  gradcheck([](const std::vector<Tensor>& t) { return select(t[0], 2, -1); }, {x}, 1e-6, 1e-6, 1e-5, "select");
  gradcheck([](const std::vector<Tensor>& t) { return squeeze(unsqueeze(t[0], 1)); }, {x}, 1e-6, 1e-6, 1e-5, "squeeze");
  gradcheck([](const std::vector<Tensor>& t) { return squeeze(unsqueeze(t[0], -1), 3); }, {x}, 1e-6, 1e-6, 1e-5, "squeeze dim");
  gradcheck([](const std::vector<Tensor>& t) { return flatten(t[0], 0, 1); }, {x}, 1e-6, 1e-6, 1e-5, "flatten");
  gradcheck([](const std::vector<Tensor>& t) { return unflatten(t[0], 1, Dims{1, 5}); }, {x}, 1e-6, 1e-6, 1e-5, "unflatten");
  // Chains: permute -> reshape (copies) -> slice; and views of views feeding arithmetic.
  gradcheck([](const std::vector<Tensor>& t) {
    return slice(reshape(permute(t[0], Dims{2, 0, 1}), Dims{4, 15}), 1, 2, 14, 3);
  }, {x}, 1e-6, 1e-6, 1e-5, "permute->reshape->slice");
  gradcheck([](const std::vector<Tensor>& t) {
    Tensor a = select(narrow(t[0], 0, 1, 2), 2, 1);
    return mul(a, narrow(select(t[0], 2, 3), 0, 0, 2));
  }, {x}, 1e-6, 1e-6, 1e-5, "overlapping views");
}

TEST(Shape, DoubleBackwardThroughSliceGradient) {
  // The placement of a slice's gradient is itself differentiable (create_graph).
  Tensor x = random_tensor({4, 3}, DType::Float64, 7);
  x.set_requires_grad(true);
  Tensor y = sum(mul(mul(slice(x, 0, 1, 4, 2), slice(x, 0, 1, 4, 2)), slice(x, 0, 1, 4, 2)));  // sum x[1::2]^3
  std::vector<Tensor> g = grad(std::span<const Tensor>(&y, 1), std::span<const Tensor>(&x, 1), {}, true, true);
  Tensor gsum = sum(g[0]);
  gsum.backward();
  std::vector<double> v = x.to_vector<double>(), gg = x.grad().to_vector<double>();
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      const double expected = (i % 2 == 1) ? 6 * v[static_cast<size_t>(i * 3 + j)] : 0.0;
      EXPECT_NEAR(gg[static_cast<size_t>(i * 3 + j)], expected, 1e-12);
    }
}
