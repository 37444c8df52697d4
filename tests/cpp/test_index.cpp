// Joining and indexing ops against host references (contiguous and non-contiguous inputs, several
// dtypes), gradient checks, determinism of scatter_add, and index errors raised at the next sync point.
#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {
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

// Row-major offset of a multi-index.
int64_t offset(const Shape& shape, const Shape& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + idx[d];
  return off;
}
// Calls f(idx) for every multi-index of `shape` in row-major order.
template <typename F>
void for_each_index(const Shape& shape, F&& f) {
  if (shape_numel(shape) == 0) return;
  Shape idx(shape.size(), 0);
  while (true) {
    f(idx);
    int64_t d = static_cast<int64_t>(shape.size()) - 1;
    for (; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < shape[static_cast<size_t>(d)]) break;
      idx[static_cast<size_t>(d)] = 0;
    }
    if (d < 0) return;
  }
}

Tensor index_tensor(const std::vector<int64_t>& values, const Shape& shape, DType dtype = DType::Int64) {
  return from_vector<int64_t>(values, shape, dtype);
}

std::vector<int64_t> random_indices(int64_t n, int64_t bound, uint32_t seed) {
  std::vector<double> r = random_values(n, seed, 0.0, double(bound));
  std::vector<int64_t> out;
  for (double x : r) out.push_back(std::min<int64_t>(static_cast<int64_t>(x), bound - 1));
  return out;
}

// An error raised either by the call or at the next sync point (reading the result).
template <typename F>
void expect_deferred_error(F&& f, const std::string& message, ErrorKind kind = ErrorKind::Runtime) {
  try {
    Tensor out = f();
    out.to_vector<double>();
    ADD_FAILURE() << "expected an error: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(Index, CatValuesDtypesAndNonContiguous) {
  const Shape sa{2, 3, 4}, sb{2, 1, 4}, sc{2, 2, 4};
  Tensor a = random_tensor(sa, DType::Float64, 1), b = random_tensor(sb, DType::Float64, 2),
         c = random_tensor(sc, DType::Float64, 3);
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>(), vc = c.to_vector<double>();
  std::vector<double> expected;
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) for (int64_t k = 0; k < 4; ++k) expected.push_back(va[size_t(offset(sa, {i, j, k}))]);
    for (int64_t k = 0; k < 4; ++k) expected.push_back(vb[size_t(offset(sb, {i, 0, k}))]);
    for (int64_t j = 0; j < 2; ++j) for (int64_t k = 0; k < 4; ++k) expected.push_back(vc[size_t(offset(sc, {i, j, k}))]);
  }
  for (DType dtype : {DType::Float64, DType::Float32, DType::BFloat16, DType::Int64}) {
    const double tol = dtype == DType::BFloat16 ? 1e-2 : dtype == DType::Float32 ? 1e-7 : 0;
    Tensor x = to(a, dtype), y = to(b, dtype), z = to(c, dtype);
    if (dtype == DType::Int64) {
      x = to(mul(a, 100.0), dtype);
      y = to(mul(b, 100.0), dtype);
      z = to(mul(c, 100.0), dtype);
    }
    std::vector<double> ref;
    if (dtype == DType::Int64) {
      std::vector<double> rx = x.to_vector<double>(), ry = y.to_vector<double>(), rz = z.to_vector<double>();
      for (int64_t i = 0; i < 2; ++i) {
        ref.insert(ref.end(), rx.begin() + i * 12, rx.begin() + (i + 1) * 12);
        ref.insert(ref.end(), ry.begin() + i * 4, ry.begin() + (i + 1) * 4);
        ref.insert(ref.end(), rz.begin() + i * 8, rz.begin() + (i + 1) * 8);
      }
    } else {
      ref = expected;
    }
    for (bool strided : {false, true}) {
      Tensor inputs[3] = {strided ? non_contiguous(x) : x, y, strided ? non_contiguous(z) : z};
      Tensor out = cat(inputs, 1);
      expect_shape(out, {2, 6, 4});
      EXPECT_EQ(out.dtype(), dtype);
      expect_close(out, ref, tol, tol, std::string("cat ") + dtype_name(dtype));
      Tensor neg = cat(inputs, -2);
      expect_close(neg, ref, tol, tol, "cat dim -2");
    }
  }
  // Promotion: int64 with float32 -> float32; bool with int32 -> int32.
  Tensor mixed[2] = {from_vector<int64_t>({1, 2}, Shape{2}), from_vector<float>({0.5f}, Shape{1})};
  Tensor m = cat(mixed, 0);
  EXPECT_EQ(m.dtype(), DType::Float32);
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{1, 2, 0.5f}));
  // 1-D empty tensors are skipped (torch's legacy rule); zero-size pieces along dim are fine.
  Tensor with_empty[3] = {zeros(Shape{0}), ones(Shape{2, 2}), zeros(Shape{2, 0})};
  Tensor e = cat(with_empty, 1);
  expect_shape(e, {2, 2});
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
  Tensor single[1] = {a};
  expect_close(cat(single, 2), va, 0, 0);
}

TEST(Index, StackSplitChunk) {
  Tensor a = random_tensor({2, 3}, DType::Float64, 4), b = random_tensor({2, 3}, DType::Float64, 5);
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  Tensor pair[2] = {a, non_contiguous(b)};
  Tensor s0 = stack(pair, 0);
  expect_shape(s0, {2, 2, 3});
  std::vector<double> ref0 = va;
  ref0.insert(ref0.end(), vb.begin(), vb.end());
  expect_close(s0, ref0, 0, 0, "stack 0");
  Tensor s2 = stack(pair, -1);
  expect_shape(s2, {2, 3, 2});
  std::vector<double> ref2;
  for (size_t i = 0; i < 6; ++i) {
    ref2.push_back(va[i]);
    ref2.push_back(vb[i]);
  }
  expect_close(s2, ref2, 0, 0, "stack -1");

  Tensor x = random_tensor({7, 2}, DType::Float64, 6);
  std::vector<double> vx = x.to_vector<double>();
  std::vector<Tensor> pieces = split(x, 3);
  ASSERT_EQ(pieces.size(), 3u);
  expect_shape(pieces[2], {1, 2});
  int64_t row = 0;
  for (const Tensor& p : pieces) {
    EXPECT_TRUE(p.shares_storage(x));
    expect_close(p, std::vector<double>(vx.begin() + row * 2, vx.begin() + (row + p.size(0)) * 2), 0, 0, "split");
    row += p.size(0);
  }
  std::vector<Tensor> sized = split(x, Dims{1, 0, 6}, 0);
  ASSERT_EQ(sized.size(), 3u);
  expect_shape(sized[1], {0, 2});
  expect_shape(sized[2], {6, 2});
  std::vector<Tensor> columns = split(x, 1, -1);
  ASSERT_EQ(columns.size(), 2u);
  EXPECT_EQ(columns[1].to_vector<double>()[3], vx[7]);
  std::vector<Tensor> chunks = chunk(x, 3);
  ASSERT_EQ(chunks.size(), 3u);  // sizes 3, 3, 1
  expect_shape(chunks[0], {3, 2});
  expect_shape(chunks[2], {1, 2});
  EXPECT_EQ(chunk(x, 10).size(), 7u);
  // Writes through a split piece are visible in the input.
  Tensor piece = split(x, 3)[1];
  fill_(piece, 0.0);
  EXPECT_EQ(x.to_vector<double>()[6], 0.0);
}

TEST(Index, IndexSelect) {
  const Shape shape{4, 5, 3};
  Tensor a = random_tensor(shape, DType::Float64, 7);
  std::vector<double> va = a.to_vector<double>();
  for (int64_t dim = 0; dim < 3; ++dim) {
    const int64_t size = shape[static_cast<size_t>(dim)];
    std::vector<int64_t> idx = random_indices(6, size, uint32_t(10 + dim));
    idx[0] = size - 1;
    idx[1] = 0;
    Shape out_shape = shape;
    out_shape[static_cast<size_t>(dim)] = 6;
    std::vector<double> ref;
    for_each_index(out_shape, [&](const Shape& o) {
      Shape src = o;
      src[static_cast<size_t>(dim)] = idx[static_cast<size_t>(o[static_cast<size_t>(dim)])];
      ref.push_back(va[static_cast<size_t>(offset(shape, src))]);
    });
    for (DType index_dtype : {DType::Int64, DType::Int32})
      for (DType dtype : {DType::Float64, DType::Float32, DType::BFloat16}) {
        const double tol = dtype == DType::BFloat16 ? 1e-2 : dtype == DType::Float32 ? 1e-7 : 0;
        Tensor x = to(a, dtype);
        Tensor ix = index_tensor(idx, {6}, index_dtype);
        for (bool strided : {false, true}) {
          Tensor out = index_select(strided ? non_contiguous(x) : x, dim, strided ? non_contiguous(ix) : ix);
          expect_shape(out, out_shape);
          expect_close(out, ref, tol, tol, "index_select dim " + std::to_string(dim));
        }
      }
  }
  // 0-D index keeps the dim with size 1; an empty index gives an empty dim.
  expect_shape(index_select(a, 1, index_tensor({2}, {})), {4, 1, 3});
  expect_shape(index_select(a, 1, index_tensor({}, {0})), {4, 0, 3});
  // Embedding-style lookup, int64 data.
  Tensor table = from_vector<int64_t>({10, 11, 20, 21, 30, 31}, Shape{3, 2});
  EXPECT_EQ(index_select(table, 0, index_tensor({2, 0, 2}, {3})).to_vector<int64_t>(),
            (std::vector<int64_t>{30, 31, 10, 11, 30, 31}));
}

TEST(Index, GatherAndScatterAdd) {
  const Shape shape{3, 5, 4};
  Tensor a = random_tensor(shape, DType::Float64, 8);
  std::vector<double> va = a.to_vector<double>();
  for (int64_t dim = 0; dim < 3; ++dim) {
    Shape index_shape{2, 3, 3};
    index_shape[static_cast<size_t>(dim)] = 7;  // larger than the input along dim is allowed
    const int64_t size = shape[static_cast<size_t>(dim)];
    std::vector<int64_t> idx = random_indices(shape_numel(index_shape), size, uint32_t(20 + dim));
    std::vector<double> ref;
    for_each_index(index_shape, [&](const Shape& p) {
      Shape src = p;
      src[static_cast<size_t>(dim)] = idx[static_cast<size_t>(offset(index_shape, p))];
      ref.push_back(va[static_cast<size_t>(offset(shape, src))]);
    });
    Tensor ix = index_tensor(idx, index_shape);
    for (DType dtype : {DType::Float64, DType::Float32})
      for (bool strided : {false, true}) {
        Tensor x = to(a, dtype);
        Tensor out = gather(strided ? non_contiguous(x) : x, dim, strided ? non_contiguous(ix) : to(ix, DType::Int32));
        expect_shape(out, index_shape);
        expect_close(out, ref, 1e-7, 1e-7, "gather dim " + std::to_string(dim));
      }

    // scatter_add: self of `shape`, src larger than index in every dim.
    Shape src_shape{3, 4, 4};
    src_shape[static_cast<size_t>(dim)] = 8;
    Tensor src = random_tensor(src_shape, DType::Float64, uint32_t(30 + dim));
    std::vector<double> vs = src.to_vector<double>();
    std::vector<double> expected = va;
    for_each_index(index_shape, [&](const Shape& p) {
      Shape dst = p;
      dst[static_cast<size_t>(dim)] = idx[static_cast<size_t>(offset(index_shape, p))];
      expected[static_cast<size_t>(offset(shape, dst))] += vs[static_cast<size_t>(offset(src_shape, p))];
    });
    for (bool strided : {false, true}) {
      Tensor out = scatter_add(strided ? non_contiguous(a) : a, dim, strided ? non_contiguous(ix) : ix,
                               strided ? non_contiguous(src) : src);
      expect_close(out, expected, 1e-12, 1e-12, "scatter_add dim " + std::to_string(dim));
      // The input is unchanged; scatter_add_ writes into a (non-contiguous) target.
      expect_close(a, va, 0, 0);
      Tensor target = strided ? non_contiguous(a) : clone(a);
      scatter_add_(target, dim, ix, src);
      expect_close(target, expected, 1e-12, 1e-12, "scatter_add_ dim " + std::to_string(dim));
    }
  }
}

TEST(Index, ScatterAddIsDeterministic) {
  // Many colliding contributions: identical bits for 1 and 2 threads, and equal to the in-order sum.
  const int threads = get_context().num_threads;
  const int64_t n = 200000;
  Tensor src = random_tensor({4, n}, DType::Float32, 9, -1, 1);
  Tensor ix = index_tensor(random_indices(4 * n, 3, 10), {4, n});
  std::vector<float> results[2];
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run + 1);
    results[run] = scatter_add(zeros(Shape{4, 3}), 1, ix, src).to_vector<float>();
  }
  set_num_threads(threads);
  EXPECT_EQ(results[0], results[1]);
  std::vector<float> vs = src.to_vector<float>();
  std::vector<int64_t> vi = ix.to_vector<int64_t>();
  std::vector<float> in_order(12, 0.0f);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j < n; ++j) in_order[size_t(r * 3 + vi[size_t(r * n + j)])] += vs[size_t(r * n + j)];
  EXPECT_EQ(results[0], in_order);
}

TEST(Index, IndexAdd) {
  Tensor a = random_tensor({4, 3}, DType::Float64, 11), src = random_tensor({5, 3}, DType::Float64, 12);
  std::vector<int64_t> idx{3, 0, 3, 1, 3};
  std::vector<double> expected = a.to_vector<double>(), vs = src.to_vector<double>();
  for (size_t j = 0; j < idx.size(); ++j)
    for (size_t k = 0; k < 3; ++k) expected[size_t(idx[j]) * 3 + k] += vs[j * 3 + k];
  expect_close(index_add(a, 0, index_tensor(idx, {5}), non_contiguous(src)), expected, 1e-12, 1e-12, "index_add");
}

TEST(Index, TrilTriu) {
  const Shape shape{2, 4, 5};
  Tensor a = random_tensor(shape, DType::Float64, 13);
  std::vector<double> va = a.to_vector<double>();
  for (int64_t diagonal : {-5, -1, 0, 2, 6}) {
    std::vector<double> lower, upper;
    for_each_index(shape, [&](const Shape& p) {
      const double v = va[size_t(offset(shape, p))];
      lower.push_back(p[2] - p[1] <= diagonal ? v : 0.0);
      upper.push_back(p[2] - p[1] >= diagonal ? v : 0.0);
    });
    for (bool strided : {false, true}) {
      Tensor x = strided ? non_contiguous(a) : a;
      expect_close(tril(x, diagonal), lower, 0, 0, "tril " + std::to_string(diagonal));
      expect_close(triu(x, diagonal), upper, 0, 0, "triu " + std::to_string(diagonal));
    }
  }
  Tensor ints = from_vector<int64_t>({1, 2, 3, 4}, Shape{2, 2});
  EXPECT_EQ(tril(ints).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 3, 4}));
  EXPECT_EQ(triu(to(ints, DType::BFloat16), 1).to_vector<double>(), (std::vector<double>{0, 2, 0, 0}));
  expect_shape(tril(zeros(Shape{3, 0, 2})), {3, 0, 2});
}

TEST(Index, Gradcheck) {
  Tensor x = random_tensor({3, 4}, DType::Float64, 14), y = random_tensor({3, 2}, DType::Float64, 15);
  gradcheck([](const std::vector<Tensor>& t) {
    Tensor parts[3] = {t[0], t[1], t[0]};
    return cat(parts, 1);
  }, {x, y}, 1e-6, 1e-6, 1e-5, "cat");
  gradcheck([](const std::vector<Tensor>& t) {
    Tensor parts[2] = {t[0], mul(t[0], t[0])};
    return stack(parts, 1);
  }, {x}, 1e-6, 1e-6, 1e-5, "stack");
  gradcheck([](const std::vector<Tensor>& t) {
    std::vector<Tensor> p = split(t[0], 3, 1);
    return mul(p[0], p[1]);  // (3, 3) * (3, 1)
  }, {x}, 1e-6, 1e-6, 1e-5, "split");
  // split/chunk/unbind: one node for all the views; pieces that are not used get zero gradient; through a
  // transposed view (non-contiguous pieces) and with negative dims.
  gradcheck([](const std::vector<Tensor>& t) {
    std::vector<Tensor> p = split(transpose(t[0], 0, 1), Dims{1, 2, 1}, -2);  // (1, 3), (2, 3), (1, 3)
    return mul(p[0], p[2]);
  }, {x}, 1e-6, 1e-6, 1e-5, "split sizes, a piece unused");
  gradcheck([](const std::vector<Tensor>& t) {
    std::vector<Tensor> p = chunk(t[0], 2, -1);
    return add(p[0], mul(p[1], p[1]));
  }, {x}, 1e-6, 1e-6, 1e-5, "chunk");
  Tensor cube = random_tensor({3, 2, 4}, DType::Float64, 17);
  for (int64_t dim : {0, 1, -1}) {
    gradcheck([dim](const std::vector<Tensor>& t) {
      std::vector<Tensor> p = unbind(permute(t[0], Dims{2, 0, 1}), dim);
      return p.size() > 2 ? mul(p[0], p[2]) : mul(p[0], p[1]);
    }, {cube}, 1e-6, 1e-6, 1e-5, "unbind dim " + std::to_string(dim));
  }
  gradcheck([](const std::vector<Tensor>& t) { return unbind(t[0], 1)[1]; }, {cube}, 1e-6, 1e-6, 1e-5,
            "unbind, one piece used");
  Tensor idx = index_tensor({2, 0, 2, 2, 1}, {5});
  gradcheck([&](const std::vector<Tensor>& t) { return index_select(t[0], 0, idx); }, {x}, 1e-6, 1e-6, 1e-5, "index_select");
  gradcheck([&](const std::vector<Tensor>& t) { return index_select(t[0], 1, idx); }, {x}, 1e-6, 1e-6, 1e-5, "index_select 1");
  Tensor gidx = index_tensor({3, 0, 0, 1, 2, 2, 3, 3}, {2, 4});
  gradcheck([&](const std::vector<Tensor>& t) { return gather(t[0], 1, gidx); }, {x}, 1e-6, 1e-6, 1e-5, "gather");
  Tensor sidx = index_tensor({2, 0, 1, 0, 0, 1}, {2, 3});
  Tensor big_src = random_tensor({3, 3}, DType::Float64, 16);
  gradcheck([&](const std::vector<Tensor>& t) { return scatter_add(t[0], 0, sidx, t[1]); }, {x, big_src}, 1e-6, 1e-6,
            1e-5, "scatter_add");
  gradcheck([&](const std::vector<Tensor>& t) {
    Tensor target = mul(t[0], 2.0);
    scatter_add_(target, 0, sidx, t[1]);
    return target;
  }, {x, big_src}, 1e-6, 1e-6, 1e-5, "scatter_add_");
  gradcheck([&](const std::vector<Tensor>& t) { return index_add(t[0], 1, idx, t[1]); },
            {x, random_tensor({3, 5}, DType::Float64, 17)}, 1e-6, 1e-6, 1e-5, "index_add");
  gradcheck([](const std::vector<Tensor>& t) { return tril(t[0], 1); }, {x}, 1e-6, 1e-6, 1e-5, "tril");
  gradcheck([](const std::vector<Tensor>& t) { return triu(t[0], -1); }, {x}, 1e-6, 1e-6, 1e-5, "triu");
}

// The error kinds are torch's: IndexError for index_select, RuntimeError for the others.
TEST(Index, OutOfRangeIndexRaisedAtSync) {
  Tensor a = random_tensor({3, 5}, DType::Float32, 18);
  expect_deferred_error([&] { return gather(a, 1, index_tensor({0, 7, 1}, {1, 3})); },
                        "[gather] index 7 is out of bounds for dimension 1 with size 5");
  expect_deferred_error([&] { return gather(a, 0, index_tensor({-1}, {1, 1}, DType::Int32)); },
                        "[gather] index -1 is out of bounds for dimension 0 with size 3");
  expect_deferred_error([&] { return index_select(a, 0, index_tensor({0, 3}, {2})); },
                        "[index_select] index 3 is out of bounds for dimension 0 with size 3", ErrorKind::Index);
  expect_deferred_error([&] { return scatter_add(a, 1, index_tensor({5}, {1, 1}), ones(Shape{1, 1})); },
                        "[scatter_add] index 5 is out of bounds for dimension 1 with size 5");
  expect_deferred_error([&] { return index_add(a, 0, index_tensor({9}, {1}), ones(Shape{1, 5})); },
                        "[index_add] index 9 is out of bounds for dimension 0 with size 3");
  // The stream keeps working after the error was raised.
  EXPECT_EQ(gather(a, 1, index_tensor({4}, {1, 1})).item<float>(), a.to_vector<float>()[4]);
}

TEST(Index, Errors) {
  Tensor a = zeros(Shape{2, 3});
  Tensor mismatched[2] = {a, zeros(Shape{3, 3})};
  expect_error([&] { cat(mismatched, 1); }, "cat", ErrorKind::Runtime);  // RuntimeError, as torch
  Tensor ranks[2] = {a, zeros(Shape{2, 3, 1})};
  expect_error([&] { cat(ranks, 0); }, "cat", ErrorKind::Runtime);
  expect_error([&] { cat(std::span<const Tensor>(), 0); }, "cat", ErrorKind::Value);
  Tensor scalars[1] = {ones(Shape{})};
  expect_error([&] { cat(scalars, 0); }, "cat", ErrorKind::Runtime);
  expect_error([&] { cat(mismatched, 2); }, "cat", ErrorKind::Index);
  expect_error([&] { stack(mismatched, 0); }, "stack", ErrorKind::Value);
  expect_error([&] { split(a, 0, 1); }, "split", ErrorKind::Value);
  expect_error([&] { split(a, Dims{1, 1}, 1); }, "split", ErrorKind::Value);
  expect_error([&] { chunk(a, 0); }, "chunk", ErrorKind::Value);
  expect_error([&] { index_select(a, 0, zeros(Shape{2})); }, "index_select", ErrorKind::Type);
  expect_error([&] { index_select(a, 0, index_tensor({0, 1}, {1, 2})); }, "index_select", ErrorKind::Index);
  expect_error([&] { index_select(a, 2, index_tensor({0}, {1})); }, "index_select", ErrorKind::Index);
  expect_error([&] { gather(a, 1, index_tensor({0, 0, 0}, {3, 1})); }, "gather", ErrorKind::Runtime);
  expect_error([&] { gather(a, 1, index_tensor({0}, {1})); }, "gather", ErrorKind::Runtime);
  expect_error([&] { scatter_add(a, 0, index_tensor({0, 0}, {1, 2}), ones(Shape{1, 1})); }, "scatter_add",
               ErrorKind::Runtime);
  expect_error([&] { scatter_add(a, 0, index_tensor({0}, {1, 1}), ones(Shape{1, 1}, {DType::Float64})); },
               "scatter_add", ErrorKind::Type);
  expect_error([&] { index_add(a, 0, index_tensor({0}, {1}), ones(Shape{2, 3})); }, "index_add", ErrorKind::Runtime);
  expect_error([&] { tril(zeros(Shape{3})); }, "tril", ErrorKind::Runtime);
  expect_error([&] { triu(zeros(Shape{})); }, "triu", ErrorKind::Runtime);
}

TEST(Index, UnbindBackwardIsOneTask) {
  // N pieces, one node: the engine runs one formula, which enqueues one cat (no fill, no add), and the
  // gradient comes back laid out like the (permuted) input.
  Tensor base = random_tensor({4, 3, 5}, DType::Float64, 18);
  base.set_requires_grad(true);
  Tensor permuted = permute(base, Dims{1, 0, 2});
  std::vector<Tensor> pieces = unbind(permuted, 0);
  ASSERT_EQ(pieces.size(), 3u);
  std::vector<Tensor> grads;
  for (uint32_t k = 0; k < 3; ++k) grads.push_back(random_tensor({4, 5}, DType::Float64, 20 + k));
  Tensor inputs[1] = {permuted};
  Stream::cpu().synchronize();
  const uint64_t before = Stream::cpu().enqueued();
  std::vector<Tensor> result = grad(pieces, inputs, grads);
  const uint64_t tasks = Stream::cpu().enqueued() - before;
  EXPECT_EQ(tasks, 3u + 1u);  // the engine copies each given root gradient, then one cat
  EXPECT_EQ(result[0].strides()[1], 15);  // [3, 4, 5] viewing base's [4, 3, 5] memory: dim 1 outermost
  std::vector<double> expected;
  for (int64_t k = 0; k < 3; ++k) {
    std::vector<double> g = grads[static_cast<size_t>(k)].to_vector<double>();
    expected.insert(expected.end(), g.begin(), g.end());
  }
  expect_close(result[0], expected, 0, 0, "unbind gradient");
}

TEST(Index, CatIntoPermutedOutputFromStridedGradients) {
  // The attention layout: qkv [B, T, 3 H D] viewed [B, T, 3, H, D], permuted to [3, B, H, T, D] and
  // unbound; the backward cats the three gradients into a [3, B, H, T, D] tensor laid out like the view
  // (dims written in memory order). Gradients contiguous, transposed (as from a matmul of k^T) and
  // broadcast (stride 0); results exact, and the same for 1 and 2 threads.
  const int64_t B = 2, T = 5, H = 3, D = 4;
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    auto run = [&] {
      Tensor qkv = to(random_tensor({B, T, 3 * H * D}, DType::Float64, 30), dtype);
      qkv.set_requires_grad(true);
      std::vector<Tensor> pieces = unbind(permute(view(qkv, Dims{B, T, 3, H, D}), Dims{2, 0, 3, 1, 4}), 0);
      std::vector<Tensor> grads = {to(random_tensor({B, H, T, D}, DType::Float64, 31), dtype),
                                   transpose(to(random_tensor({B, H, D, T}, DType::Float64, 32), dtype), 2, 3),
                                   expand(to(random_tensor({1, 1, T, D}, DType::Float64, 33), dtype), Dims{B, H, T, D})};
      Tensor inputs[1] = {qkv};
      std::vector<Tensor> result = grad(pieces, inputs, grads);
      // expected[b, t, k, h, d] = grads[k][b, h, t, d]
      std::vector<std::vector<double>> g;
      for (const Tensor& t : grads) g.push_back(t.to_vector<double>());
      std::vector<double> expected;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t k = 0; k < 3; ++k)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t d = 0; d < D; ++d) expected.push_back(g[size_t(k)][size_t(offset({B, H, T, D}, {b, h, t, d}))]);
      expect_shape(result[0], {B, T, 3 * H * D});
      expect_close(result[0], expected, 0, 0, std::string("unbind gradient ") + dtype_name(dtype));
      return result[0].to_vector<double>();
    };
    auto [one, two] = run_with_1_and_2_threads(run);
    EXPECT_TRUE(one == two) << "differs across thread counts";
  }
}

TEST(Index, CatLongRowsAndPermutedInputs) {
  // Rows longer than one copy segment (16384 elements) are split; along dim 0 the pieces are flat.
  Tensor a = random_tensor({2, 20000}, DType::Float32, 34), b = random_tensor({2, 20001}, DType::Float32, 35);
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  Tensor pair[2] = {a, b};
  std::vector<double> expected;
  for (int64_t r = 0; r < 2; ++r) {
    expected.insert(expected.end(), va.begin() + r * 20000, va.begin() + (r + 1) * 20000);
    expected.insert(expected.end(), vb.begin() + r * 20001, vb.begin() + (r + 1) * 20001);
  }
  expect_close(cat(pair, 1), expected, 0, 0, "cat long rows dim 1");
  Tensor c = random_tensor({3, 20000}, DType::Float32, 36);
  Tensor rows[2] = {a, c};
  std::vector<double> stacked = va, vc = c.to_vector<double>();
  stacked.insert(stacked.end(), vc.begin(), vc.end());
  expect_close(cat(rows, 0), stacked, 0, 0, "cat long rows dim 0");
  // Equal pieces (copied block by block, piece after piece) with long rows and a broadcast one.
  Tensor d = random_tensor({2, 20000}, DType::Float32, 41);
  Tensor equal[3] = {a, d, expand(random_tensor({1, 20000}, DType::Float32, 42), Dims{2, 20000})};
  std::vector<double> three = va, vd = d.to_vector<double>(), ve = equal[2].to_vector<double>();
  three.insert(three.end(), vd.begin(), vd.end());
  three.insert(three.end(), ve.begin(), ve.end());
  expect_close(stack(equal, 0), three, 0, 0, "stack long rows");
  expect_close(cat(equal, 0), three, 0, 0, "cat equal long rows");
  // Inputs whose innermost dim is strided (transposed) and an output of the usual contiguous layout.
  Tensor m = random_tensor({6, 5}, DType::Float64, 37), n = random_tensor({6, 7}, DType::Float64, 38);
  Tensor mt = transpose(m, 0, 1), nt = transpose(n, 0, 1);  // [5, 6], [7, 6], strided
  Tensor both[2] = {mt, nt};
  std::vector<double> vm = m.to_vector<double>(), vn = n.to_vector<double>(), e;
  for (int64_t i = 0; i < 5; ++i) for (int64_t j = 0; j < 6; ++j) e.push_back(vm[size_t(j * 5 + i)]);
  for (int64_t i = 0; i < 7; ++i) for (int64_t j = 0; j < 6; ++j) e.push_back(vn[size_t(j * 7 + i)]);
  expect_close(cat(both, 0), e, 0, 0, "cat transposed inputs");
  // A stack of two along a new last dim (the interleaving pass when both are contiguous), every width.
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64, DType::Bool}) {
    Tensor p = to(random_tensor({3, 5, 700}, DType::Float64, 39, -50, 50), dtype);
    Tensor q = to(random_tensor({3, 5, 700}, DType::Float64, 40, -50, 50), dtype);
    const std::vector<double> vp = p.to_vector<double>(), vq = q.to_vector<double>();
    std::vector<double> interleaved;
    for (size_t i = 0; i < vp.size(); ++i) {
      interleaved.push_back(vp[i]);
      interleaved.push_back(vq[i]);
    }
    for (bool strided : {false, true}) {
      Tensor pair2[2] = {strided ? non_contiguous(p) : p, q};
      Tensor st = stack(pair2, -1);
      expect_shape(st, {3, 5, 700, 2});
      expect_close(st, interleaved, 0, 0, std::string("stack last dim ") + dtype_name(dtype) + (strided ? " strided" : ""));
    }
  }
}
