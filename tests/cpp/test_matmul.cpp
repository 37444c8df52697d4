// matmul, mm, bmm, outer and linear against a float64 host reference (1-D, 2-D, batched, broadcast, transposed
// and strided operands, empty and size-1 dims, several dtypes), their gradients, thread-count determinism of
// the tiled GEMM, and error messages.
#include <gtest/gtest.h>


#include <cstring>
#include <string>

#include "dygrad/backend/cpu/blas.h"
#include "dygrad/backend/cpu/matmul.h"
#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {

struct Reference {
  std::vector<double> values;
  Shape shape;
};

// torch.matmul computed on the host in float64 from the operands' (already rounded) values.
Reference reference_matmul(const Tensor& a, const Tensor& b) {
  Shape sa(a.shape().begin(), a.shape().end()), sb(b.shape().begin(), b.shape().end());
  const bool a_vector = sa.size() == 1, b_vector = sb.size() == 1;
  if (a_vector) sa.insert(sa.begin(), 1);
  if (b_vector) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  const size_t nb = std::max(sa.size(), sb.size()) - 2;
  Shape batch(nb, 1);
  auto batch_dim = [&](const Shape& s, size_t d) -> int64_t {  // d indexes the broadcast batch shape
    const size_t lead = nb - (s.size() - 2);
    return d < lead ? 1 : s[d - lead];
  };
  for (size_t d = 0; d < nb; ++d) batch[d] = std::max(batch_dim(sa, d), batch_dim(sb, d));
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  int64_t count = 1;
  for (int64_t s : batch) count *= s;
  Reference r;
  r.values.assign(static_cast<size_t>(count * M * N), 0.0);
  for (int64_t i = 0; i < count; ++i) {
    // Linear index of batch i in each operand (size-1 dims broadcast).
    int64_t rest = i, xa = 0, xb = 0, stride_a = 1, stride_b = 1;
    for (size_t d = nb; d-- > 0;) {
      const int64_t index = rest % batch[d];
      rest /= batch[d];
      const int64_t da = batch_dim(sa, d), db = batch_dim(sb, d);
      xa += (da == 1 ? 0 : index) * stride_a;
      xb += (db == 1 ? 0 : index) * stride_b;
      stride_a *= da;
      stride_b *= db;
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += x[static_cast<size_t>((xa * M + m) * K + k)] * y[static_cast<size_t>((xb * K + k) * N + n)];
        r.values[static_cast<size_t>((i * M + m) * N + n)] = acc;
      }
  }
  r.shape = batch;
  if (!a_vector) r.shape.push_back(M);
  if (!b_vector) r.shape.push_back(N);
  return r;
}

double tolerance(DType dtype, int64_t K) {
  switch (dtype) {
    case DType::Float64: return 1e-12 * double(K + 1);
    case DType::Float32: return 2e-6 * double(K + 1);
    case DType::BFloat16: return 1e-2 * double(K + 1);
    case DType::Float16: return 2e-3 * double(K + 1);
    default: return 0.0;  // integers: exact
  }
}

void check_matmul(const Tensor& a, const Tensor& b, const std::string& what) {
  Reference r = reference_matmul(a, b);
  Tensor out = matmul(a, b);
  EXPECT_EQ(out.dtype(), a.dtype()) << what;
  expect_shape(out, r.shape);
  const double tol = tolerance(a.dtype(), a.size(-1));
  expect_close(out, r.values, is_reduced_float(a.dtype()) ? 1e-2 : tol, tol, what);
}

// Floats uniform in [-1, 1); integers uniform in [-9, 8].
Tensor random_operand(const Shape& shape, DType dtype, uint32_t seed) {
  if (!is_integral(dtype, false)) return random_tensor(shape, dtype, seed);
  std::vector<double> values = random_values(shape_numel(shape), seed, -9, 9);
  for (double& x : values) x = std::floor(x);
  return tensor_from(values, shape, dtype);
}

std::string str(const Shape& s) { return shape_str(IntSpan(s.data(), s.size())); }

// The shape pairs every dtype runs through: torch.matmul's cases, broadcasting, empty and size-1 dims.
const std::vector<std::pair<Shape, Shape>> kShapeCases = {
    {{5}, {5}},                      // dot
    {{5}, {5, 3}},                   // vector @ matrix
    {{4, 5}, {5}},                   // matrix @ vector
    {{4, 5}, {5, 3}},                // mm
    {{2, 3, 4, 5}, {2, 3, 5, 6}},    // [B, H, T, D] @ [B, H, D, T]
    {{2, 7, 5}, {5, 3}},             // [B, T, C] @ [C, N]: the batch folds into M
    {{2, 1, 4, 5}, {3, 5, 6}},       // broadcast batch dims on both sides
    {{4, 5}, {2, 5, 3}},             // the left operand broadcast over the batch
    {{5}, {2, 5, 3}},                // vector @ batched
    {{2, 4, 5}, {5}},                // batched @ vector
    {{3, 0}, {0, 4}},                // K = 0: zeros
    {{1, 5}, {5, 3}},                // M = 1
    {{4, 5}, {5, 1}},                // N = 1
    {{1, 1}, {1, 1}},
    {{0, 5}, {5, 3}},                // M = 0
    {{2, 0, 5}, {5, 3}},
    {{4, 5}, {5, 0}},                // N = 0
    {{300, 64}, {64, 520}},          // several tiles
    {{3, 70, 64}, {64, 520}},        // folded into several tiles
    {{2, 40}, {40, 1100}},           // one tile wider than a float16/bfloat16 conversion block
};

}  // namespace

TEST(Matmul, ShapesAndDtypes) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16, DType::Int64, DType::Int32}) {
    uint32_t seed = 1;
    for (const auto& [sa, sb] : kShapeCases) {
      const std::string what = std::string(dtype_name(dtype)) + " " + str(sa) + " @ " + str(sb);
      Tensor a = random_operand(sa, dtype, seed++), b = random_operand(sb, dtype, seed++);
      check_matmul(a, b, what);
      if (a.numel() > 1) check_matmul(non_contiguous(a), b, what + " (strided a)");
      if (b.numel() > 1) check_matmul(a, non_contiguous(b), what + " (strided b)");
    }
  }
}

TEST(Matmul, TransposedOperandsAreReadInPlace) {
  // Operands whose last two dims are column-major go to BLAS as Trans: one Task, no copy.
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor a = transpose(random_tensor({3, 5, 4}, dtype, 1), -1, -2);  // [3, 4, 5], strides (20, 1, 4)
    Tensor b = transpose(random_tensor({6, 5}, dtype, 2), 0, 1);       // [5, 6], strides (1, 5)
    Tensor w = random_tensor({5, 6}, dtype, 3);
    const uint64_t before = Stream::cpu().enqueued();
    Tensor out = matmul(a, b);
    EXPECT_EQ(Stream::cpu().enqueued() - before, 1u) << "a transposed operand was copied";
    check_matmul(a, b, "transposed both");
    check_matmul(a, w, "transposed a");
    check_matmul(transpose(random_tensor({2, 3, 6, 5}, dtype, 4), -1, -2), transpose(random_tensor({2, 3, 4, 6}, dtype, 5), -1, -2),
                 "transposed batched");
    // A slice along the rows keeps the leading dimension: ld > cols.
    Tensor wide = random_tensor({4, 9}, dtype, 6);
    Tensor sliced = as_strided(wide, std::vector<int64_t>{4, 5}, std::vector<int64_t>{9, 1}, 2);
    const uint64_t before_slice = Stream::cpu().enqueued();
    Tensor out2 = matmul(sliced, w);
    EXPECT_EQ(Stream::cpu().enqueued() - before_slice, 1u) << "a row-major operand with ld > cols was copied";
    check_matmul(sliced, w, "sliced rows");
  }
}

TEST(Matmul, BroadcastAndZeroStrideOperands) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64}) {
    // Batch dims with stride 0 (expand) are read in place; a zero stride inside the matrix is copied for BLAS.
    Tensor a = expand(random_operand({1, 4, 5}, dtype, 1), std::vector<int64_t>{3, 4, 5});
    Tensor b = random_operand({3, 5, 2}, dtype, 2);
    check_matmul(a, b, "expanded batch");
    Tensor row = expand(random_operand({1, 5}, dtype, 3), std::vector<int64_t>{4, 5});
    check_matmul(row, b, "expanded rows");
    Tensor column = expand(random_operand({5, 1}, dtype, 4), std::vector<int64_t>{5, 3});
    check_matmul(a, column, "expanded columns");
  }
}

TEST(Matmul, ComposedOps) {
  Tensor a = random_tensor({4, 5}, DType::Float32, 1), b = random_tensor({5, 3}, DType::Float32, 2);
  expect_close(mm(a, b), reference_matmul(a, b).values, 1e-5, 1e-5, "mm");
  Tensor x = random_tensor({2, 4, 5}, DType::Float64, 3), y = random_tensor({2, 5, 3}, DType::Float64, 4);
  expect_close(bmm(x, y), reference_matmul(x, y).values, 1e-12, 1e-12, "bmm");
  Tensor u = random_tensor({4}, DType::Float64, 5), v = random_tensor({3}, DType::Float64, 6);
  Tensor o = outer(u, v);
  expect_shape(o, {4, 3});
  std::vector<double> uv = u.to_vector<double>(), vv = v.to_vector<double>(), expected;
  for (double p : uv)
    for (double q : vv) expected.push_back(p * q);
  expect_close(o, expected, 0, 0, "outer");
  // linear: x @ weight^T + bias over a batch, the weight read transposed in place.
  Tensor in = random_tensor({2, 3, 5}, DType::Float64, 7), weight = random_tensor({4, 5}, DType::Float64, 8);
  Tensor bias = random_tensor({4}, DType::Float64, 9);
  Tensor out = linear(in, weight, bias);
  expect_shape(out, {2, 3, 4});
  std::vector<double> xs = in.to_vector<double>(), ws = weight.to_vector<double>(), bs = bias.to_vector<double>(), ref;
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t o2 = 0; o2 < 4; ++o2) {
      double acc = bs[static_cast<size_t>(o2)];
      for (int64_t k = 0; k < 5; ++k) acc += xs[static_cast<size_t>(r * 5 + k)] * ws[static_cast<size_t>(o2 * 5 + k)];
      ref.push_back(acc);
    }
  expect_close(out, ref, 1e-12, 1e-12, "linear");
  expect_shape(linear(in, weight), {2, 3, 4});
}

TEST(Matmul, Gradients) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 2}}, {{2, 3, 4}, {2, 4, 2}}, {{2, 1, 3, 4}, {3, 4, 2}}, {{2, 3, 4}, {4, 2}}, {{3, 4}, {2, 4, 2}},
      {{4}, {4}},       {{4}, {4, 2}},          {{3, 4}, {4}},             {{2, 3, 4}, {4}},  {{4}, {2, 4, 3}},
      {{1, 3, 4}, {1, 4, 2}},
  };
  uint32_t seed = 10;
  for (const auto& [sa, sb] : cases) {
    const std::string what = str(sa) + " @ " + str(sb);
    gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
              {random_tensor(sa, DType::Float64, seed), random_tensor(sb, DType::Float64, seed + 1)}, 1e-6, 1e-5, 1e-4,
              what);
    seed += 2;
  }
  // Transposed and strided operands through views.
  gradcheck([](const std::vector<Tensor>& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], -1, -2)); },
            {random_tensor({4, 3}, DType::Float64, 30), random_tensor({2, 5, 4}, DType::Float64, 31)}, 1e-6, 1e-5, 1e-4,
            "transposed");
  gradcheck([](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); },
            {random_tensor({2, 3, 4}, DType::Float64, 32), random_tensor({5, 4}, DType::Float64, 33),
             random_tensor({5}, DType::Float64, 34)},
            1e-6, 1e-5, 1e-4, "linear");
  gradcheck([](const std::vector<Tensor>& x) { return linear(x[0], x[1]); },
            {random_tensor({3, 4}, DType::Float64, 35), random_tensor({5, 4}, DType::Float64, 36)}, 1e-6, 1e-5, 1e-4,
            "linear without bias");
  gradcheck([](const std::vector<Tensor>& x) { return outer(x[0], x[1]); },
            {random_tensor({3}, DType::Float64, 37), random_tensor({4}, DType::Float64, 38)}, 1e-6, 1e-5, 1e-4, "outer");
}

TEST(Matmul, OnlyTheNeededGradient) {
  Tensor a = random_tensor({3, 4}, DType::Float64, 1).set_requires_grad(true);
  Tensor b = random_tensor({4, 2}, DType::Float64, 2);
  sum(matmul(a, b)).backward();
  ASSERT_TRUE(a.grad().defined());
  expect_shape(a.grad(), {3, 4});
  EXPECT_FALSE(b.grad().defined());
}

namespace {
template <typename F>
std::vector<float> with_threads(int n, F&& f) {
  set_num_threads(n);
  std::vector<float> v = f().template to_vector<float>();
  return v;
}
}  // namespace

TEST(Matmul, BitwiseIdenticalAcrossThreadCounts) {
  const int saved = get_context().num_threads;
  const int64_t saved_tiles = cpu::gemm_target_tiles();
  struct Case { Shape a, b; int64_t target_tiles; };
  const std::vector<Case> cases = {{{512, 256}, {256, 512}, saved_tiles},
                                   {{512, 256}, {256, 512}, 8},
                                   {{4, 300, 64}, {64, 200}, 8},
                                   {{6, 128, 96}, {6, 96, 130}, saved_tiles}};
  for (const Case& c : cases) {
    cpu::set_gemm_target_tiles(c.target_tiles);
    Tensor a = random_tensor(c.a, DType::Float32, 1), b = random_tensor(c.b, DType::Float32, 2);
    std::vector<float> one = with_threads(1, [&] { return matmul(a, b); });
    std::vector<float> two = with_threads(2, [&] { return matmul(a, b); });
    ASSERT_EQ(one.size(), two.size());
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0) << str(c.a) << " @ " << str(c.b);
    // bfloat16 goes through per-tile float32 conversion: also deterministic.
    Tensor ah = to(a, DType::BFloat16), bh = to(b, DType::BFloat16);
    std::vector<float> one_h = with_threads(1, [&] { return matmul(ah, bh); });
    std::vector<float> two_h = with_threads(2, [&] { return matmul(ah, bh); });
    EXPECT_EQ(std::memcmp(one_h.data(), two_h.data(), one_h.size() * sizeof(float)), 0) << "bf16 " << str(c.a);
    // The model's bf16 layouts: a weight read transposed (linear's x @ W^T) and a transposed A (dY^T @ X).
    Tensor wt = transpose(to(random_tensor({c.b.back(), c.b[c.b.size() - 2]}, DType::Float32, 3), DType::BFloat16), 0, 1);
    std::vector<float> one_t = with_threads(1, [&] { return matmul(ah, wt); });
    std::vector<float> two_t = with_threads(2, [&] { return matmul(ah, wt); });
    EXPECT_EQ(std::memcmp(one_t.data(), two_t.data(), one_t.size() * sizeof(float)), 0) << "bf16 B^T " << str(c.a);
    if (c.a.size() == 2) {
      Tensor at = transpose(to(random_tensor({c.a[1], c.a[0]}, DType::Float32, 4), DType::BFloat16), 0, 1);
      std::vector<float> one_a = with_threads(1, [&] { return matmul(at, bh); });
      std::vector<float> two_a = with_threads(2, [&] { return matmul(at, bh); });
      EXPECT_EQ(std::memcmp(one_a.data(), two_a.data(), one_a.size() * sizeof(float)), 0) << "bf16 A^T " << str(c.a);
    }
  }
  cpu::set_gemm_target_tiles(saved_tiles);
  set_num_threads(saved);
}

TEST(Matmul, Bf16PrimitivesAreCachedPerThreadAndSafeConcurrently) {
  // Plain bf16 products run oneDNN's matmul primitive, one cached per problem and thread (fused_blas.cpp):
  // many small tiles on two threads at once, each thread making and reusing its own primitives, give the
  // single-thread result bit for bit, call after call.
  if (std::string(cpu::bf16_gemm_library() ? cpu::bf16_gemm_library() : "") != "onednn")
    GTEST_SKIP() << "no oneDNN bf16 GEMM on this CPU (the converted path is tested elsewhere)";
  const int saved = get_context().num_threads;
  Tensor a = to(random_tensor({32, 96, 128}, DType::Float32, 1), DType::BFloat16);
  Tensor b = to(random_tensor({32, 128, 80}, DType::Float32, 2), DType::BFloat16);
  set_num_threads(1);
  const std::vector<float> expected = matmul(a, b).to_vector<float>();
  set_num_threads(2);
  int mismatches = 0;
  for (int repeat = 0; repeat < 10; ++repeat) {
    const std::vector<float> got = matmul(a, b).to_vector<float>();
    mismatches += std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) != 0;
  }
  EXPECT_EQ(mismatches, 0);
  set_num_threads(saved);
  // A linear's tile (x @ W^T, dense operands) runs a brgemm kernel where the CPU has AVX512-BF16: the kernel that
  // rounds to bf16 in registers, the reason for the primitive (a fallback to another kernel would go unnoticed).
  EXPECT_NE(cpu::matmul_bf16_impl(false, true, 1024, 384, 384, 384, 384, 384).find("brg"), std::string::npos)
      << cpu::matmul_bf16_impl(false, true, 1024, 384, 384, 384, 384, 384);
}

TEST(Matmul, ConcurrentSerialBlasCallsAreSafe) {
  // Many small tiles run concurrently on two threads: Debian's serial OpenBLAS hands two concurrent calls the
  // same packing buffer unless the calls are serialised (backend/cpu/fused_blas.cpp); this fails then. float64
  // always goes to OpenBLAS; float32 to oneDNN when it is built in, else to OpenBLAS.
  const int saved = get_context().num_threads;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor a = random_tensor({64, 128, 128}, dtype, 1), b = random_tensor({64, 128, 128}, dtype, 2);
    set_num_threads(1);
    std::vector<double> expected = to(matmul(a, b), DType::Float64).to_vector<double>();
    set_num_threads(2);
    int mismatches = 0;
    for (int repeat = 0; repeat < 20; ++repeat) {
      std::vector<double> got = to(matmul(a, b), DType::Float64).to_vector<double>();
      mismatches += std::memcmp(got.data(), expected.data(), got.size() * sizeof(double)) != 0;
    }
    EXPECT_EQ(mismatches, 0) << dtype_name(dtype);
    set_num_threads(saved);
  }
}

TEST(Matmul, TilingDependsOnTheShapeOnly) {
  // The model shapes split into several tiles; batches are tiles of their own.
  cpu::GemmTiling t = cpu::gemm_tiling(1, 1024, 1024, 1024);
  EXPECT_GE(t.tiles_m * t.tiles_n, 2);
  EXPECT_GE(t.tile_m * t.tiles_m, 1024);
  EXPECT_GE(t.tile_n * t.tiles_n, 1024);
  t = cpu::gemm_tiling(48, 256, 256, 64);
  EXPECT_EQ(t.tiles_m * t.tiles_n, 1);
  t = cpu::gemm_tiling(1, 2, 3, 4);  // tiny: one tile
  EXPECT_EQ(t.tiles_m * t.tiles_n, 1);
  EXPECT_EQ(t.tile_m, 2);
  EXPECT_EQ(t.tile_n, 3);
}

TEST(Matmul, Cost) {
  Tensor a = random_tensor({2, 3, 4, 5}, DType::Float32, 1), b = random_tensor({3, 5, 6}, DType::Float32, 2);
  Task task;
  task.op = find_op("matmul");
  ASSERT_NE(task.op, nullptr);
  task.inputs.push_back(a);
  task.inputs.push_back(b);
  task.outputs.push_back(Tensor::empty(std::vector<int64_t>{2, 3, 4, 6}, DType::Float32));
  EXPECT_EQ(task.cost().flops, 2.0 * 2 * 3 * 4 * 6 * 5);
}

TEST(Matmul, Errors) {
  auto expect_error = [](auto&& f, ErrorKind kind, std::vector<std::string> parts) {
    try {
      f();
      ADD_FAILURE() << "expected an error containing " << parts[0];
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  Tensor a = zeros(std::vector<int64_t>{2, 3}), b = zeros(std::vector<int64_t>{4, 5});
  expect_error([&] { matmul(a, b); }, ErrorKind::Value, {"[matmul]", "(2, 3)", "(4, 5)", "inner dimensions 3 and 4 differ"});
  expect_error([&] { matmul(zeros(std::vector<int64_t>{3}), zeros(std::vector<int64_t>{4})); }, ErrorKind::Value,
               {"[matmul]", "inner dimensions 3 and 4 differ"});
  expect_error([&] { matmul(zeros(std::vector<int64_t>{2, 2, 3}), zeros(std::vector<int64_t>{3, 3, 4})); },
               ErrorKind::Value, {"[matmul]"});
  expect_error([&] { matmul(zeros(std::vector<int64_t>{}), a); }, ErrorKind::Value, {"[matmul]", "at least 1-D"});
  expect_error([&] { matmul(a, zeros(std::vector<int64_t>{3, 2}, {DType::Float64})); }, ErrorKind::Type,
               {"[matmul]", "float32", "float64"});
  expect_error([&] { matmul(zeros(std::vector<int64_t>{2, 3}, {DType::Bool}), zeros(std::vector<int64_t>{3, 2}, {DType::Bool})); },
               ErrorKind::NotImplemented, {"[matmul]", "bool"});
  expect_error([&] { mm(zeros(std::vector<int64_t>{2, 2, 3}), zeros(std::vector<int64_t>{3, 2})); }, ErrorKind::Value,
               {"[mm]", "2-D"});
  expect_error([&] { mm(a, b); }, ErrorKind::Value, {"[mm]", "inner dimensions 3 and 4 differ"});
  expect_error([&] { bmm(zeros(std::vector<int64_t>{2, 2, 3}), zeros(std::vector<int64_t>{3, 3, 2})); },
               ErrorKind::Value, {"[bmm]", "batch sizes 2 and 3 differ"});
  expect_error([&] { outer(a, zeros(std::vector<int64_t>{3})); }, ErrorKind::Value, {"[outer]", "1-D"});
  expect_error([&] { linear(zeros(std::vector<int64_t>{2, 3}), zeros(std::vector<int64_t>{4, 5})); }, ErrorKind::Value,
               {"[linear]", "in_features 3 and 5 differ"});
  expect_error([&] { linear(zeros(std::vector<int64_t>{2, 3}), zeros(std::vector<int64_t>{4, 3}), zeros(std::vector<int64_t>{5})); },
               ErrorKind::Value, {"[linear]", "bias"});
}
