// index / index_put_ / nonzero (ops/indexing.h) against host loops: basic indices as views, integer and
// boolean tensor indices (placement of the broadcast dims), assignment, gradients, determinism, errors.
#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {
using TI = TensorIndex;

Tensor ints(const std::vector<int64_t>& values, const Shape& shape, DType dtype = DType::Int64) {
  return from_vector<int64_t>(values, shape, dtype);
}
Tensor bools(const std::vector<int64_t>& values, const Shape& shape) { return from_vector<int64_t>(values, shape, DType::Bool); }

Tensor at(const Tensor& a, std::vector<TI> indices) { return index(a, indices); }

template <typename F>
void expect_error(F&& f, const std::string& text, ErrorKind kind) {
  try {
    Tensor out = f();
    out.to_vector<double>();  // data-dependent errors are raised at the sync point
    ADD_FAILURE() << "expected an error: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(Indexing, BasicIndicesAreViews) {
  const Shape shape{4, 5, 6};
  Tensor a = random_tensor(shape, DType::Float64, 1);
  std::vector<double> va = a.to_vector<double>();
  auto v = [&](int64_t i, int64_t j, int64_t k) { return va[size_t((i * 5 + j) * 6 + k)]; };
  for (bool strided : {false, true}) {
    Tensor x = strided ? non_contiguous(a) : a;
    // x[-1, 1::2, None, ..., -4:5]
    Tensor out = at(x, {TI::integer_index(-1), TI::slice(1, TensorIndex().stop, 2), TI::none(), TI::ellipsis(),
                        TI::slice(-4, 5)});
    expect_shape(out, {2, 1, 3});
    std::vector<double> expected;
    for (int64_t j : {1, 3})
      for (int64_t k = 2; k < 5; ++k) expected.push_back(v(3, j, k));
    expect_close(out, expected, 0, 0, "basic");
    EXPECT_TRUE(out.shares_storage(x));
    EXPECT_TRUE(out.is_view());
    // Ellipsis in front, None at the end, out-of-range slice bounds clamp.
    Tensor tail = at(x, {TI::ellipsis(), TI::integer_index(2), TI::none()});
    expect_shape(tail, {4, 5, 1});
    Tensor empty = at(x, {TI::slice(7, 9)});
    expect_shape(empty, {0, 5, 6});
  }
  // Writes through the view are visible in the base.
  Tensor b = zeros(Shape{3, 4});
  Tensor row = at(b, {TI::integer_index(1), TI::slice(0, 4, 3)});
  fill_(row, Scalar(5.0));
  expect_close(b, {0, 0, 0, 0, 5, 0, 0, 5, 0, 0, 0, 0}, 0, 0, "write through view");
  // x[...] on a 0-d tensor: a new view of the same element.
  Tensor s = full(Shape{}, Scalar(2.0));
  Tensor alias = at(s, {TI::ellipsis()});
  EXPECT_FALSE(alias.same(s));
  EXPECT_TRUE(alias.shares_storage(s));
}

TEST(Indexing, IntegerTensorIndex) {
  Tensor a = random_tensor({5, 3}, DType::Float64, 2);
  std::vector<double> va = a.to_vector<double>();
  const std::vector<int64_t> idx{4, -1, 0, 4, 2, -5};
  for (DType dtype : {DType::Float64, DType::Float32, DType::BFloat16, DType::Int32}) {
    for (DType index_dtype : {DType::Int64, DType::Int32}) {
      for (bool strided : {false, true}) {
        Tensor x = to(strided ? non_contiguous(a) : a, dtype);
        std::vector<double> vx = x.to_vector<double>();
        Tensor out = at(x, {TI::tensor_index(ints(idx, {2, 3}, index_dtype))});
        expect_shape(out, {2, 3, 3});
        std::vector<double> expected;
        for (int64_t i : idx)
          for (int64_t c = 0; c < 3; ++c) expected.push_back(vx[size_t(((i + 5) % 5) * 3 + c)]);
        expect_close(out, expected, 0, 0, "index " + std::string(dtype_name(dtype)));
        EXPECT_FALSE(out.shares_storage(x));
        // Along dim 1 (a row of R in front): x[:, idx] -> [5, 2, 3]
        Tensor cols = at(x, {TI::slice(), TI::tensor_index(ints({2, 0, -1, 1, 1, 0}, {2, 3}, index_dtype))});
        expect_shape(cols, {5, 2, 3});
        std::vector<double> ce;
        for (int64_t r = 0; r < 5; ++r)
          for (int64_t c : {2, 0, 2, 1, 1, 0}) ce.push_back(vx[size_t(r * 3 + c)]);
        expect_close(cols, ce, 0, 0, "columns");
      }
    }
  }
  (void)va;
}

TEST(Indexing, AdvancedDimsPlacement) {
  const Shape shape{3, 4, 5, 6};
  Tensor a = random_tensor(shape, DType::Float64, 3);
  std::vector<double> va = a.to_vector<double>();
  auto v = [&](int64_t i, int64_t j, int64_t k, int64_t l) { return va[size_t(((i * 4 + j) * 5 + k) * 6 + l)]; };
  Tensor i1 = ints({0, 3}, {2, 1}), i2 = ints({4, 1, -2}, {3}, DType::Int32);
  // Adjacent: x[:, i1, i2, :] -> [3, 2, 3, 6]
  for (bool strided : {false, true}) {
    Tensor x = strided ? non_contiguous(a) : a;
    Tensor adj = at(x, {TI::slice(), TI::tensor_index(i1), TI::tensor_index(i2)});
    expect_shape(adj, {3, 2, 3, 6});
    std::vector<double> e1;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t p : {0, 3})
        for (int64_t q : {4, 1, 3})
          for (int64_t l = 0; l < 6; ++l) e1.push_back(v(i, p, q, l));
    expect_close(adj, e1, 0, 0, "adjacent");
    // Separated: x[i1, :, i2] -> [2, 3, 4, 6]
    Tensor sep = at(x, {TI::tensor_index(ints({0, 2}, {2, 1})), TI::slice(), TI::tensor_index(i2)});
    expect_shape(sep, {2, 3, 4, 6});
    std::vector<double> e2;
    for (int64_t p : {0, 2})
      for (int64_t q : {4, 1, 3})
        for (int64_t j = 0; j < 4; ++j)
          for (int64_t l = 0; l < 6; ++l) e2.push_back(v(p, j, q, l));
    expect_close(sep, e2, 0, 0, "separated");
    // An int between tensors is applied first (torch): x[:, i1, 1, i2] is x[:, :, 1][:, i1, i2] -> [3, 2, 3]
    Tensor mixed = at(x, {TI::slice(), TI::tensor_index(i1), TI::integer_index(1), TI::tensor_index(i2)});
    expect_shape(mixed, {3, 2, 3});
    std::vector<double> e3;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t p : {0, 3})
        for (int64_t q : {4, 1, 4}) e3.push_back(v(i, p, 1, q));  // -2 wraps in a dim of 6
    expect_close(mixed, e3, 0, 0, "mixed");
  }
  // A 0-d index tensor removes its dim (a copy).
  Tensor zero_d = at(a, {TI::slice(), TI::tensor_index(ints({2}, {}))});
  expect_shape(zero_d, {3, 5, 6});
  // Zero-size index.
  expect_shape(at(a, {TI::tensor_index(Tensor::empty(Shape{0}, DType::Int64))}), {0, 4, 5, 6});
}

TEST(Indexing, BooleanMasks) {
  Tensor a = random_tensor({3, 4}, DType::Float64, 4);
  std::vector<double> va = a.to_vector<double>();
  std::vector<int64_t> m{1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0};
  Tensor out = at(non_contiguous(a), {TI::tensor_index(bools(m, {3, 4}))});
  std::vector<double> expected;
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i]) expected.push_back(va[i]);
  expect_shape(out, {5});
  expect_close(out, expected, 0, 0, "mask 2-d");
  // A mask over dim 1 only: x[:, mask] -> [3, 2]
  Tensor cols = at(a, {TI::slice(), TI::tensor_index(bools({0, 1, 0, 1}, {4}))});
  expect_shape(cols, {3, 2});
  expect_close(cols, {va[1], va[3], va[5], va[7], va[9], va[11]}, 0, 0, "mask columns");
  // Python bools: x[True] adds a dim of 1, x[False] one of 0.
  expect_shape(at(a, {TI::boolean(true)}), {1, 3, 4});
  expect_shape(at(a, {TI::boolean(false)}), {0, 3, 4});
  // nonzero itself.
  Tensor nz = nonzero(bools({0, 1, 1, 0, 0, 1}, {2, 3}));
  expect_shape(nz, {3, 2});
  EXPECT_EQ(nz.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 2, 1, 2}));
}

TEST(Indexing, IndexPut) {
  // Last write wins for repeated indices (index order); accumulate adds them.
  Tensor x = zeros(Shape{5, 2});
  Tensor values = tensor_from({1, 2, 3, 4, 5, 6}, {3, 2});
  const std::vector<TI> idx{TI::tensor_index(ints({1, 3, 1}, {3}))};
  index_put_(x, idx, values);
  expect_close(x, {0, 0, 5, 6, 0, 0, 3, 4, 0, 0}, 0, 0, "put");
  Tensor y = zeros(Shape{5, 2}, {DType::Float64});
  index_put_(y, idx, values, true);
  expect_close(y, {0, 0, 6, 8, 0, 0, 3, 4, 0, 0}, 0, 0, "accumulate");
  // Broadcast value, non-contiguous destination, a scalar, a basic index, a mask.
  Tensor z = non_contiguous(zeros(Shape{3, 4}, {DType::Float64}));
  index_put_(z, std::vector<TI>{TI::slice(), TI::tensor_index(ints({0, 2}, {2}))}, tensor_from({7, 8}, {2}));
  expect_close(z, {7, 0, 8, 0, 7, 0, 8, 0, 7, 0, 8, 0}, 0, 0, "broadcast value");
  index_put_(z, std::vector<TI>{TI::integer_index(1), TI::slice(1, 3)}, Scalar(9));
  expect_close(z, {7, 0, 8, 0, 7, 9, 9, 0, 7, 0, 8, 0}, 0, 0, "basic scalar");
  index_put_(z, std::vector<TI>{TI::tensor_index(gt(z, Scalar(7.5)))}, Scalar(-1));
  expect_close(z, {7, 0, -1, 0, 7, -1, -1, 0, 7, 0, -1, 0}, 0, 0, "mask scalar");
  index_put_(z, std::vector<TI>{TI::tensor_index(bools({1, 0, 1}, {3}))}, tensor_from({1, 2, 3, 4}, {4}));
  expect_close(z, {1, 2, 3, 4, 7, -1, -1, 0, 1, 2, 3, 4}, 0, 0, "row mask tensor");
  // Integer destination, float value: cast.
  Tensor w = zeros(Shape{3}, {DType::Int32});
  index_put_(w, std::vector<TI>{TI::tensor_index(ints({2}, {1}))}, Scalar(4.7));
  EXPECT_EQ(w.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 4}));
  // The version counter moves.
  const uint32_t before = y.version();
  index_put_(y, idx, values);
  EXPECT_GT(y.version(), before);
}

TEST(Indexing, AccumulateIsDeterministic) {
  const int threads = get_context().num_threads;
  const int64_t n = 100000;
  Tensor src = random_tensor({n, 3}, DType::Float32, 9);
  std::vector<double> r = random_values(n, 5, 0.0, 7.0);
  std::vector<int64_t> idx;
  for (double d : r) idx.push_back(std::min<int64_t>(int64_t(d), 6));
  std::vector<float> results[2];
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run + 1);
    Tensor out = zeros(Shape{7, 3});
    index_put_(out, std::vector<TI>{TI::tensor_index(ints(idx, {n}))}, src, true);
    results[run] = out.to_vector<float>();
  }
  set_num_threads(threads);
  EXPECT_EQ(results[0], results[1]);
  std::vector<float> vs = src.to_vector<float>(), in_order(21, 0.0f);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < 3; ++c) in_order[size_t(idx[size_t(j)] * 3 + c)] += vs[size_t(j * 3 + c)];
  EXPECT_EQ(results[0], in_order);
}

TEST(Indexing, Gradients) {
  // Repeated indices accumulate into the gradient.
  gradcheck([](const std::vector<Tensor>& x) {
    return at(x[0], {TI::slice(), TI::tensor_index(ints({2, 0, 2, 2}, {2, 2}))});
  }, {random_tensor({3, 4}, DType::Float64, 6)}, 1e-6, 1e-5, 1e-4, "index repeated");
  gradcheck([](const std::vector<Tensor>& x) {
    return at(x[0], {TI::tensor_index(bools({1, 0, 1, 1, 0, 1}, {2, 3})), TI::none()});
  }, {random_tensor({2, 3, 2}, DType::Float64, 7)}, 1e-6, 1e-5, 1e-4, "index mask");
  gradcheck([](const std::vector<Tensor>& x) {
    return at(x[0], {TI::integer_index(1), TI::slice(0, 4, 2), TI::none()});
  }, {random_tensor({3, 4}, DType::Float64, 8)}, 1e-6, 1e-5, 1e-4, "basic");
  // Assignment into a non-leaf: gradient to the overwritten tensor (zero where written) and to the value.
  gradcheck([](const std::vector<Tensor>& x) {
    Tensor y = mul(x[0], Scalar(2.0));
    index_put_(y, std::vector<TI>{TI::tensor_index(ints({0, 2}, {2}))}, x[1]);
    index_put_(y, std::vector<TI>{TI::integer_index(1), TI::slice(1, 3)}, x[2]);
    return y;
  }, {random_tensor({3, 4}, DType::Float64, 9), random_tensor({1, 4}, DType::Float64, 10),
      random_tensor({2}, DType::Float64, 11)}, 1e-6, 1e-5, 1e-4, "index_put_");
  // Double backward through index: the gradient of the gradient.
  Tensor x = random_tensor({4}, DType::Float64, 12);
  x.set_requires_grad(true);
  Tensor g = ones(Shape{3}, {DType::Float64});
  g.set_requires_grad(true);
  Tensor y = at(x, {TI::tensor_index(ints({1, 1, 3}, {3}))});
  y.backward(g, false, true);
  expect_close(x.grad(), {0, 2, 0, 1}, 0, 0, "grad");
}

TEST(Indexing, Errors) {
  Tensor a = zeros(Shape{5, 3});
  expect_error([&] { return at(a, {TI::tensor_index(ints({0, 7}, {2}))}); },
               "[index] index 7 is out of bounds for dimension 0 with size 5", ErrorKind::Index);
  expect_error([&] { return at(a, {TI::integer_index(-6)}); }, "out of bounds for dimension 0 with size 5",
               ErrorKind::Index);
  expect_error([&] { return at(a, {TI::integer_index(0), TI::integer_index(0), TI::integer_index(0)}); },
               "[index] too many indices", ErrorKind::Index);
  expect_error([&] { return at(a, {TI::slice(0, 3, -1)}); }, "step must be greater than zero", ErrorKind::Value);
  expect_error([&] { return at(a, {TI::tensor_index(zeros(Shape{2}))}); }, "tensors used as indices", ErrorKind::Index);
  expect_error([&] { return at(a, {TI::tensor_index(bools({1, 0}, {2}))}); }, "The shape of the mask", ErrorKind::Index);
  expect_error([&] { return at(a, {TI::ellipsis(), TI::ellipsis()}); }, "single ellipsis", ErrorKind::Index);
  expect_error([&] { return at(a, {TI::tensor_index(ints({0, 1}, {2})), TI::tensor_index(ints({0, 1, 2}, {3}))}); },
               "could not be broadcast", ErrorKind::Index);
  expect_error([&] {
    return index_put_(a, std::vector<TI>{TI::tensor_index(ints({0, 1}, {2}))}, zeros(Shape{3, 2}));
  }, "shape mismatch", ErrorKind::Runtime);
  expect_error([&] {
    return index_put_(a, std::vector<TI>{TI::tensor_index(ints({9}, {1}))}, Scalar(1));
  }, "[index_put] index 9 is out of bounds", ErrorKind::Index);
  Tensor leaf = zeros(Shape{3}, {DType::Float64});
  leaf.set_requires_grad(true);
  expect_error([&] { return index_put_(leaf, std::vector<TI>{TI::integer_index(0)}, Scalar(1)); }, "leaf",
               ErrorKind::Runtime);
  {
    NoGradGuard no_grad;
    index_put_(leaf, std::vector<TI>{TI::integer_index(0)}, Scalar(1));
  }
  expect_close(leaf, {1, 0, 0}, 0, 0, "no_grad write");
}

TEST(Indexing, BroadcastInputsHalfAndEdgeSizes) {
  // An expanded (stride 0) input: x[idx, 1:] on [4, 3] expanded from [1, 3].
  Tensor row = tensor_from({1, 2, 3}, {1, 3});
  Tensor x = expand(row, Shape{4, 3});
  Tensor out = at(x, {TI::tensor_index(ints({3, 0}, {2})), TI::slice(1)});
  expect_shape(out, {2, 2});
  expect_close(out, {2, 3, 2, 3}, 0, 0, "expanded");
  // Writing into an expanded tensor is refused (several elements share memory).
  expect_error([&] {
    Tensor e = expand(zeros(Shape{1, 3}), Shape{4, 3});
    return index_put_(e, std::vector<TI>{TI::tensor_index(ints({0}, {1}))}, ones(Shape{3}));
  }, "index_put_", ErrorKind::Runtime);
  // Broadcast index tensors and value, float16 (exact: the values are small integers).
  Tensor h = to(tensor_from({0, 1, 2, 3, 4, 5}, {2, 3}), DType::Float16);
  Tensor picked = at(h, {TI::tensor_index(ints({1, 0}, {2, 1})), TI::tensor_index(ints({2, 0, 1}, {1, 3}))});
  expect_shape(picked, {2, 3});
  expect_close(picked, {5, 3, 4, 2, 0, 1}, 0, 0, "float16");
  index_put_(h, std::vector<TI>{TI::tensor_index(ints({1}, {1})), TI::tensor_index(ints({0, 2}, {2}))},
             to(tensor_from({7}, {1}), DType::Float16), true);
  expect_close(h, {0, 1, 2, 10, 4, 12}, 0, 0, "float16 accumulate");
  // Zero-size tensors and size-1 dims.
  Tensor empty = zeros(Shape{0, 3});
  expect_shape(at(empty, {TI::tensor_index(Tensor::empty(Shape{0}, DType::Int64))}), {0, 3});
  expect_shape(at(empty, {TI::slice(), TI::tensor_index(ints({2, 2}, {2}))}), {0, 2});
  expect_shape(at(zeros(Shape{1, 1}), {TI::tensor_index(ints({0, 0, 0}, {3})), TI::integer_index(-1)}), {3});
  index_put_(empty, std::vector<TI>{TI::tensor_index(bools({}, {0}))}, Scalar(1));
  Tensor zero_d = full(Shape{}, Scalar(4.0));
  expect_shape(at(zero_d, {TI::none(), TI::ellipsis(), TI::none()}), {1, 1});
  expect_error([&] { return at(zero_d, {TI::integer_index(0)}); }, "too many indices", ErrorKind::Index);
}

TEST(Indexing, NonzeroLargeAndThreadCountIndependent) {
  const int threads = get_context().num_threads;
  const Shape shape{300, 700};
  std::vector<double> r = random_values(shape_numel(shape), 21, 0.0, 1.0);
  std::vector<int64_t> mask, expected;
  for (size_t i = 0; i < r.size(); ++i) {
    mask.push_back(r[i] < 0.3);
    if (r[i] < 0.3) {
      expected.push_back(int64_t(i) / 700);
      expected.push_back(int64_t(i) % 700);
    }
  }
  Tensor m = bools(mask, shape);
  for (int run = 1; run <= 2; ++run) {
    set_num_threads(run);
    EXPECT_EQ(nonzero(m).to_vector<int64_t>(), expected) << run << " threads";
    EXPECT_EQ(nonzero(non_contiguous(to(m, DType::Float32))).to_vector<int64_t>(), expected) << "strided float";
  }
  set_num_threads(threads);
  expect_shape(nonzero(zeros(Shape{3, 0})), {0, 2});
  expect_shape(nonzero(full(Shape{}, Scalar(1.0))), {1, 0});
}
