// Fused LLM ops against their composed formulas computed on the host in float64 (plain loops), float64
// gradchecks, thread-count independence, AdamW against torch's update formula, and error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "dygrad/backend/cpu/tile_gemm.h"
#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
Tensor zeros_of(const Shape& shape, DType dtype = DType::Float32) { return zeros(shape, {dtype}); }

// A view of t with its dim 0 fixed at `index` (what select would give), for the q, k, v of a qkv tensor.
Tensor pick(const Tensor& t, int64_t index) {
  Dims sizes(t.shape().begin() + 1, t.shape().end()), strides(t.strides().begin() + 1, t.strides().end());
  return Tensor::make_view(t, sizes, strides, t.storage_offset() + index * t.strides()[0]);
}

template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::string& op) {
  try {
    f();
    ADD_FAILURE() << "expected an error from " << op;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find("[" + op + "]"), std::string::npos) << e.what();
  }
}

// Runs f with the pool at `threads` threads, restoring the previous count.
template <typename F>
auto with_threads(int threads, F&& f) {
  const int saved = get_context().num_threads;
  set_num_threads(threads);
  auto result = f();
  set_num_threads(saved);
  return result;
}

// --- references ----------------------------------------------------------------------------------------
std::vector<double> rms_norm_reference(const std::vector<double>& x, const std::vector<double>* w, int64_t cols,
                                       double eps) {
  std::vector<double> y(x.size());
  const int64_t rows = cols ? static_cast<int64_t>(x.size()) / cols : 0;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += x[r * cols + c] * x[r * cols + c];
    const double inv = 1.0 / std::sqrt(ss / cols + eps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * inv * (w ? (*w)[c] : 1.0);
  }
  return y;
}

// x [A0, A1, A2, D] row-major values; cos, sin [T, D/2]; time_dim 1 or 2.
std::vector<double> rope_reference(const std::vector<double>& x, const Shape& shape, const std::vector<double>& cos,
                                   const std::vector<double>& sin, bool rotate_half, int time_dim) {
  std::vector<double> y(x.size());
  const int64_t D = shape[3], P = D / 2;
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c) {
        const int64_t row = ((a * shape[1] + b) * shape[2] + c) * D, t = time_dim == 2 ? c : b;
        for (int64_t p = 0; p < P; ++p) {
          const int64_t i = rotate_half ? p : 2 * p, j = rotate_half ? p + P : 2 * p + 1;
          const double x1 = x[row + i], x2 = x[row + j], co = cos[t * P + p], si = sin[t * P + p];
          y[row + i] = x1 * co - x2 * si;
          y[row + j] = x1 * si + x2 * co;
        }
      }
  return y;
}

double silu(double g) { return g / (1 + std::exp(-g)); }

// softmax(q k^T * scale + mask) v per batch-head. mask_kind 0 none, 1 bool (full [N, T, S] values, 0/1),
// 2 additive (full [N, T, S]); causal masks j > i.
struct AttentionCase {
  int64_t N, T, S, D, Dv;
  double scale;
  bool causal = false;
  int mask_kind = 0;
  std::vector<double> mask;  // [N, T, S]
};

bool attends(const AttentionCase& c, int64_t n, int64_t i, int64_t j) {
  if (c.causal && j > i) return false;
  if (c.mask_kind == 1 && c.mask[(n * c.T + i) * c.S + j] == 0) return false;
  return true;
}

// Probabilities [N, T, S] of the composed attention.
std::vector<double> attention_probs(const AttentionCase& c, const std::vector<double>& q, const std::vector<double>& k) {
  std::vector<double> p(static_cast<size_t>(c.N * c.T * c.S));
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t i = 0; i < c.T; ++i) {
      double* row = p.data() + (n * c.T + i) * c.S;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < c.S; ++j) {
        double s = 0;
        for (int64_t d = 0; d < c.D; ++d) s += q[(n * c.T + i) * c.D + d] * k[(n * c.S + j) * c.D + d];
        s *= c.scale;
        if (c.mask_kind == 2) s += c.mask[(n * c.T + i) * c.S + j];
        if (!attends(c, n, i, j)) s = -std::numeric_limits<double>::infinity();
        row[j] = s;
        mx = std::max(mx, s);
      }
      double total = 0;
      for (int64_t j = 0; j < c.S; ++j) total += (row[j] = std::exp(row[j] - mx));
      for (int64_t j = 0; j < c.S; ++j) row[j] /= total;
    }
  return p;
}

std::vector<double> attention_reference(const AttentionCase& c, const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v) {
  std::vector<double> p = attention_probs(c, q, k), out(static_cast<size_t>(c.N * c.T * c.Dv), 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t i = 0; i < c.T; ++i)
      for (int64_t j = 0; j < c.S; ++j)
        for (int64_t e = 0; e < c.Dv; ++e) out[(n * c.T + i) * c.Dv + e] += p[(n * c.T + i) * c.S + j] * v[(n * c.S + j) * c.Dv + e];
  return out;
}

// Gradients of sum(out * dout) by the composed formulas: dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dP P)),
// dQ = scale dS K, dK = scale dS^T Q.
void attention_reference_grads(const AttentionCase& c, const std::vector<double>& q, const std::vector<double>& k,
                               const std::vector<double>& v, const std::vector<double>& dout, std::vector<double>& dq,
                               std::vector<double>& dk, std::vector<double>& dv) {
  std::vector<double> p = attention_probs(c, q, k);
  dq.assign(q.size(), 0.0);
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  std::vector<double> ds(static_cast<size_t>(c.S));
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t i = 0; i < c.T; ++i) {
      const double* prow = p.data() + (n * c.T + i) * c.S;
      const double* go = dout.data() + (n * c.T + i) * c.Dv;
      double rowdot = 0;
      for (int64_t j = 0; j < c.S; ++j) {
        double dp = 0;
        for (int64_t e = 0; e < c.Dv; ++e) {
          dp += go[e] * v[(n * c.S + j) * c.Dv + e];
          dv[(n * c.S + j) * c.Dv + e] += prow[j] * go[e];
        }
        ds[j] = dp;
        rowdot += dp * prow[j];
      }
      for (int64_t j = 0; j < c.S; ++j) {
        const double s = prow[j] * (ds[j] - rowdot) * c.scale;
        for (int64_t d = 0; d < c.D; ++d) {
          dq[(n * c.T + i) * c.D + d] += s * k[(n * c.S + j) * c.D + d];
          dk[(n * c.S + j) * c.D + d] += s * q[(n * c.T + i) * c.D + d];
        }
      }
    }
}

}  // namespace

// --- rms_norm ------------------------------------------------------------------------------------------
TEST(FusedRmsNorm, MatchesComposedFormula) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const double tol = dtype == DType::Float32 ? 2e-6 : 1e-12;
    for (const Shape& shape : {Shape{4, 7}, Shape{2, 3, 33}, Shape{1, 1}, Shape{5}, Shape{0, 6}}) {
      const int64_t cols = shape.back();
      Tensor x = random_tensor(shape, dtype, 1, -2.0, 2.0);
      Tensor w = random_tensor({cols}, dtype, 2);
      std::vector<double> xv = values(x), wv = values(w);
      expect_close(rms_norm(x, w, 1e-5), rms_norm_reference(xv, &wv, cols, 1e-5), tol, tol, "weighted");
      expect_close(rms_norm(x, Tensor(), 1e-6), rms_norm_reference(xv, nullptr, cols, 1e-6), tol, tol, "no weight");
      if (x.numel() > 1)
        expect_close(rms_norm(non_contiguous(x), non_contiguous(w), 1e-5), rms_norm_reference(xv, &wv, cols, 1e-5), tol,
                     tol, "non-contiguous");
    }
  }
}

TEST(FusedRmsNorm, BroadcastAndReducedPrecisionInputs) {
  Tensor row = random_tensor({1, 9}, DType::Float32, 3);
  Tensor x = expand(row, std::vector<int64_t>{4, 9});  // stride 0 over rows
  std::vector<double> xv = values(x);
  expect_close(rms_norm(x), rms_norm_reference(xv, nullptr, 9, 1e-5), 2e-6, 2e-6);
  Tensor xb = random_tensor({3, 16}, DType::BFloat16, 4), wb = random_tensor({16}, DType::BFloat16, 5);
  std::vector<double> xbv = values(xb), wbv = values(wb);
  Tensor yb = rms_norm(xb, wb);
  EXPECT_EQ(yb.dtype(), DType::BFloat16);
  expect_close(yb, rms_norm_reference(xbv, &wbv, 16, 1e-5), 1e-2, 1e-2);
}

TEST(FusedRmsNorm, Gradcheck) {
  gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-5); },
            {random_tensor({3, 5}, DType::Float64, 6), random_tensor({5}, DType::Float64, 7)}, 1e-6, 1e-6, 1e-5, "x, w");
  gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0]); }, {random_tensor({2, 2, 4}, DType::Float64, 8)},
            1e-6, 1e-6, 1e-5, "x only");
  // A transposed input and a weight that does not need grad.
  Tensor w = random_tensor({3}, DType::Float64, 9);
  gradcheck([&](const std::vector<Tensor>& in) { return rms_norm(transpose(in[0], 0, 1), w); },
            {random_tensor({3, 4}, DType::Float64, 10)}, 1e-6, 1e-6, 1e-5, "transposed x");
}

TEST(FusedRmsNorm, BackwardIndependentOfThreadCount) {
  auto run = [] {
    Tensor x = random_tensor({333, 257}, DType::Float32, 11);
    Tensor w = random_tensor({257}, DType::Float32, 12);
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    Tensor g = random_tensor({333, 257}, DType::Float32, 13);
    sum(mul(rms_norm(x, w), g)).backward();
    std::vector<float> out = x.grad().to_vector<float>();
    std::vector<float> gw = w.grad().to_vector<float>();
    out.insert(out.end(), gw.begin(), gw.end());
    return out;
  };
  std::vector<float> one = with_threads(1, run), two = with_threads(2, run);
  EXPECT_EQ(one, two);
}

TEST(FusedRmsNorm, Errors) {
  Tensor x = zeros_of({2, 4});
  expect_error([&] { rms_norm(x, zeros_of({3})); }, ErrorKind::Value, "rms_norm");
  expect_error([&] { rms_norm(x, zeros_of({4}, DType::Float64)); }, ErrorKind::Type, "rms_norm");
  expect_error([&] { rms_norm(zeros_of({2, 4}, DType::Int64)); }, ErrorKind::Type, "rms_norm");
  expect_error([&] { rms_norm(zeros_of({}, DType::Float32)); }, ErrorKind::Value, "rms_norm");
}

// --- rotary_position_embedding -------------------------------------------------------------------------
TEST(FusedRope, BothModesAndLayouts) {
  const int64_t B = 2, H = 3, T = 5, D = 8;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const double tol = dtype == DType::Float32 ? 1e-6 : 1e-13;
    Tensor cos = random_tensor({T, D / 2}, dtype, 20), sin = random_tensor({T, D / 2}, dtype, 21);
    std::vector<double> cv = values(cos), sv = values(sin);
    // [B, T, H, D] storage permuted to [B, H, T, D]: the model's layout after the QKV split.
    Tensor bthd = random_tensor({B, T, H, D}, dtype, 22);
    Tensor bhtd = permute(bthd, std::vector<int64_t>{0, 2, 1, 3});
    for (RopeMode mode : {RopeMode::Interleaved, RopeMode::RotateHalf}) {
      const bool half = mode == RopeMode::RotateHalf;
      Tensor y = rotary_position_embedding(bhtd, cos, sin, mode);
      EXPECT_EQ(Dims(y.strides()), Dims(bhtd.strides()));  // laid out like x: [B, T, H, D] in memory
      expect_close(y, rope_reference(values(bhtd), {B, H, T, D}, cv, sv, half, 2), tol, tol, "BHTD view");
      Tensor y2 = rotary_position_embedding(bthd, non_contiguous(cos), non_contiguous(sin), mode, RopeLayout::BTHD);
      expect_shape(y2, {B, T, H, D});
      expect_close(y2, rope_reference(values(bthd), {B, T, H, D}, cv, sv, half, 1), tol, tol, "BTHD");
      expect_close(rotary_position_embedding(non_contiguous(bhtd), cos, sin, mode),
                   rope_reference(values(bhtd), {B, H, T, D}, cv, sv, half, 2), tol, tol, "non-contiguous");
    }
  }
}

TEST(FusedRope, Gradcheck) {
  const int64_t T = 3, D = 4;
  Tensor cos = random_tensor({T, D / 2}, DType::Float64, 23), sin = random_tensor({T, D / 2}, DType::Float64, 24);
  for (RopeMode mode : {RopeMode::Interleaved, RopeMode::RotateHalf}) {
    gradcheck([&](const std::vector<Tensor>& in) { return rotary_position_embedding(in[0], cos, sin, mode); },
              {random_tensor({2, 2, T, D}, DType::Float64, 25)}, 1e-6, 1e-7, 1e-6, "BHTD");
    gradcheck([&](const std::vector<Tensor>& in) {
      return rotary_position_embedding(permute(in[0], std::vector<int64_t>{0, 2, 1, 3}), cos, sin, mode);
    }, {random_tensor({1, T, 2, D}, DType::Float64, 26)}, 1e-6, 1e-7, 1e-6, "permuted");
    gradcheck([&](const std::vector<Tensor>& in) {
      return rotary_position_embedding(in[0], cos, sin, mode, RopeLayout::BTHD);
    }, {random_tensor({1, T, 2, D}, DType::Float64, 27)}, 1e-6, 1e-7, 1e-6, "BTHD");
  }
}

TEST(FusedRope, Errors) {
  Tensor cos = zeros_of({3, 2}), sin = zeros_of({3, 2});
  expect_error([&] { rotary_position_embedding(zeros_of({3, 4}), cos, sin); }, ErrorKind::Value, "rotary_position_embedding");
  expect_error([&] { rotary_position_embedding(zeros_of({1, 1, 3, 5}), cos, sin); }, ErrorKind::Value,
               "rotary_position_embedding");
  expect_error([&] { rotary_position_embedding(zeros_of({1, 1, 4, 4}), cos, sin); }, ErrorKind::Value,
               "rotary_position_embedding");
  expect_error([&] { rotary_position_embedding(zeros_of({1, 1, 3, 4}), zeros_of({3, 4}), sin); }, ErrorKind::Value,
               "rotary_position_embedding");
  expect_error([&] { rotary_position_embedding(zeros_of({1, 1, 3, 4}, DType::Int32), cos, sin); }, ErrorKind::Type,
               "rotary_position_embedding");
}

// --- swiglu --------------------------------------------------------------------------------------------
TEST(FusedSwiglu, MatchesComposedFormula) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    const double tol = dtype == DType::Float64 ? 1e-13 : dtype == DType::Float32 ? 2e-6 : 2e-2;
    Tensor gate = random_tensor({3, 700}, dtype, 30, -6, 6), up = random_tensor({3, 700}, dtype, 31, -2, 2);
    std::vector<double> gv = values(gate), uv = values(up), expected(gv.size());
    for (size_t i = 0; i < gv.size(); ++i) expected[i] = silu(gv[i]) * uv[i];
    expect_close(swiglu(gate, up), expected, tol, tol, "two inputs");
    expect_close(swiglu(non_contiguous(gate), non_contiguous(up)), expected, tol, tol, "non-contiguous");
    // Packed [..., 2F]: gate then up along the last dim.
    Tensor packed = random_tensor({2, 3, 10}, dtype, 32, -4, 4);
    std::vector<double> pv = values(packed), pexp;
    for (size_t r = 0; r < 6; ++r)
      for (size_t c = 0; c < 5; ++c) pexp.push_back(silu(pv[r * 10 + c]) * pv[r * 10 + 5 + c]);
    Tensor y = swiglu(packed);
    expect_shape(y, {2, 3, 5});
    expect_close(y, pexp, tol, tol, "packed");
    expect_close(swiglu(non_contiguous(packed)), pexp, tol, tol, "packed non-contiguous");
  }
  // Saturation: large |gate| stays finite.
  Tensor big = from_vector<float>({-200.0f, -90.0f, 90.0f, 200.0f}, std::vector<int64_t>{4});
  expect_close(swiglu(big, ones(Shape{4})), {0.0, 0.0, 90.0, 200.0}, 1e-6, 1e-6, "saturation");
}

TEST(FusedSwiglu, Gradcheck) {
  gradcheck([](const std::vector<Tensor>& in) { return swiglu(in[0], in[1]); },
            {random_tensor({3, 4}, DType::Float64, 33, -3, 3), random_tensor({3, 4}, DType::Float64, 34)}, 1e-6, 1e-7,
            1e-6, "two inputs");
  gradcheck([](const std::vector<Tensor>& in) { return swiglu(transpose(in[0], 0, 1), in[1]); },
            {random_tensor({4, 3}, DType::Float64, 35, -3, 3), random_tensor({3, 4}, DType::Float64, 36)}, 1e-6, 1e-7,
            1e-6, "transposed gate");
  gradcheck([](const std::vector<Tensor>& in) { return swiglu(in[0]); }, {random_tensor({2, 3, 6}, DType::Float64, 37, -3, 3)},
            1e-6, 1e-7, 1e-6, "packed");
}

TEST(FusedSwiglu, Errors) {
  expect_error([] { swiglu(zeros_of({2, 3}), zeros_of({3, 2})); }, ErrorKind::Value, "swiglu");
  expect_error([] { swiglu(zeros_of({2, 3}), zeros_of({2, 3}, DType::Float64)); }, ErrorKind::Type, "swiglu");
  expect_error([] { swiglu(zeros_of({2, 3})); }, ErrorKind::Value, "swiglu");
  expect_error([] { swiglu(zeros_of({2, 4}, DType::Int64)); }, ErrorKind::Type, "swiglu");
}

// --- scaled_dot_product_attention ----------------------------------------------------------------------
namespace {
struct AttentionInputs {
  Tensor q, k, v;  // [B, H, T|S, D|Dv] views
};

// q from a [B, T, 3, H, D] tensor permuted as in the model (so q, k, v are strided views) when T == S and
// D == Dv; otherwise non_contiguous copies.
AttentionInputs make_inputs(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, int64_t Dv, DType dtype, uint32_t seed) {
  if (T == S && D == Dv) {
    Tensor qkv = random_tensor({B, T, 3, H, D}, dtype, seed, -2, 2);
    Tensor split = permute(qkv, std::vector<int64_t>{2, 0, 3, 1, 4});
    return {pick(split, 0), pick(split, 1), pick(split, 2)};
  }
  return {non_contiguous(random_tensor({B, H, T, D}, dtype, seed, -2, 2)),
          non_contiguous(random_tensor({B, H, S, D}, dtype, seed + 1, -2, 2)),
          non_contiguous(random_tensor({B, H, S, Dv}, dtype, seed + 2, -2, 2))};
}

// Expands a [T, S] or [B, 1, T, S] mask's values to [B*H, T, S].
std::vector<double> full_mask(const std::vector<double>& m, int64_t B, int64_t H, int64_t T, int64_t S, bool per_batch) {
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T * S; ++i) out.push_back(m[static_cast<size_t>((per_batch ? b * T * S : 0) + i)]);
  return out;
}
}  // namespace

TEST(FusedAttention, MatchesComposedFormula) {
  struct Dims6 { int64_t B, H, T, S, D, Dv; };
  const Dims6 sizes[] = {{2, 3, 5, 7, 4, 6}, {2, 2, 6, 6, 8, 8}, {1, 2, 1, 9, 4, 4}, {1, 1, 70, 130, 16, 8},
                         {1, 2, 130, 130, 16, 16}, {1, 1, 300, 520, 8, 8}, {1, 1, 300, 300, 8, 4},
                         {1, 1, 9, 3, 4, 4}, {1, 1, 3, 0, 4, 4},
                         // head dims that fill whole 64-column panels of tile_gemm, 48 + 3 columns, odd rows
                         {1, 2, 200, 200, 64, 64}, {1, 1, 77, 90, 80, 51}};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const double tol = dtype == DType::Float32 ? 2e-5 : 1e-11;
    for (const Dims6& s : sizes) {
      AttentionInputs in = make_inputs(s.B, s.H, s.T, s.S, s.D, s.Dv, dtype, 40);
      std::vector<double> q = values(in.q), k = values(in.k), v = values(in.v);
      AttentionCase c{s.B * s.H, s.T, s.S, s.D, s.Dv, 1.0 / std::sqrt(double(s.D))};
      const std::string what = "T=" + std::to_string(s.T) + " S=" + std::to_string(s.S);
      expect_close(scaled_dot_product_attention(in.q, in.k, in.v), attention_reference(c, q, k, v), tol, tol,
                   "plain " + what);
      if (s.S > 0 && s.T <= s.S) {  // causal rows all see key 0
        AttentionCase cc = c;
        cc.causal = true;
        expect_close(scaled_dot_product_attention(in.q, in.k, in.v, Tensor(), 0.0, true), attention_reference(cc, q, k, v),
                     tol, tol, "causal " + what);
      }
      if (s.S == 0) continue;
      // A bool mask [T, S] broadcast over batch and heads; key 0 always attended so no row is empty.
      std::vector<double> bm = random_values(s.T * s.S, 41, 0, 1);
      for (int64_t i = 0; i < s.T * s.S; ++i) bm[i] = (i % s.S == 0 || bm[i] > 0.4) ? 1.0 : 0.0;
      Tensor bool_mask = tensor_from(bm, {s.T, s.S}, DType::Bool);
      AttentionCase cb = c;
      cb.mask_kind = 1;
      cb.mask = full_mask(bm, s.B, s.H, s.T, s.S, false);
      expect_close(scaled_dot_product_attention(in.q, in.k, in.v, bool_mask), attention_reference(cb, q, k, v), tol, tol,
                   "bool mask " + what);
      // An additive mask [B, 1, T, S] with a custom scale.
      Tensor add_mask = random_tensor({s.B, 1, s.T, s.S}, dtype, 42, -3, 1);
      AttentionCase ca = c;
      ca.scale = 0.3;
      ca.mask_kind = 2;
      ca.mask = full_mask(values(add_mask), s.B, s.H, s.T, s.S, true);
      expect_close(scaled_dot_product_attention(in.q, in.k, in.v, add_mask, 0.0, false, 0.3),
                   attention_reference(ca, q, k, v), tol, tol, "additive mask " + what);
    }
  }
}

TEST(FusedAttention, BackwardMatchesComposedGradients) {
  struct Case { int64_t B, H, T, S, D, Dv; bool causal; int mask; };
  const Case cases[] = {{1, 2, 70, 130, 8, 4, false, 0}, {1, 1, 130, 130, 8, 8, true, 0}, {2, 1, 65, 65, 4, 4, true, 0},
                        {1, 2, 33, 70, 4, 6, false, 1}, {1, 1, 1, 5, 4, 4, false, 2},
                        {1, 1, 300, 300, 8, 8, true, 0}, {1, 1, 70, 520, 8, 4, false, 1}, {1, 1, 290, 600, 4, 4, true, 0},
                        {1, 2, 256, 256, 64, 64, true, 0}, {1, 1, 77, 90, 80, 51, false, 1}, {1, 1, 1, 1, 64, 64, true, 0}};
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const double tol = dtype == DType::Float32 ? 2e-4 : 1e-10;
    for (const Case& s : cases) {
      AttentionInputs in = make_inputs(s.B, s.H, s.T, s.S, s.D, s.Dv, dtype, 50);
      std::vector<double> q = values(in.q), k = values(in.k), v = values(in.v);
      AttentionCase c{s.B * s.H, s.T, s.S, s.D, s.Dv, 1.0 / std::sqrt(double(s.D)), s.causal, s.mask};
      Tensor mask;
      if (s.mask == 1) {
        std::vector<double> bm = random_values(s.T * s.S, 51, 0, 1);
        for (int64_t i = 0; i < s.T * s.S; ++i) bm[i] = (i % s.S == 3 || bm[i] > 0.5) ? 1.0 : 0.0;
        mask = tensor_from(bm, {s.T, s.S}, DType::Bool);
        c.mask = full_mask(bm, s.B, s.H, s.T, s.S, false);
      } else if (s.mask == 2) {
        mask = random_tensor({s.T, s.S}, dtype, 52, -2, 2);
        c.mask = full_mask(values(mask), s.B, s.H, s.T, s.S, false);
      }
      Tensor q_leaf = clone(in.q), k_leaf = clone(in.k), v_leaf = clone(in.v);
      for (Tensor* t : {&q_leaf, &k_leaf, &v_leaf}) t->set_requires_grad(true);
      // Non-contiguous views of leaves: transposes of transposed copies.
      Tensor qv = transpose(contiguous(transpose(q_leaf, 2, 3)), 2, 3);
      Tensor dout = random_tensor({s.B, s.H, s.T, s.Dv}, dtype, 53);
      sum(mul(scaled_dot_product_attention(qv, k_leaf, v_leaf, mask, 0.0, s.causal), dout)).backward();
      std::vector<double> dq, dk, dv;
      attention_reference_grads(c, q, k, v, values(dout), dq, dk, dv);
      const std::string what = "T=" + std::to_string(s.T) + " S=" + std::to_string(s.S) + (s.causal ? " causal" : "");
      expect_close(q_leaf.grad(), dq, tol, tol, "dq " + what);
      expect_close(k_leaf.grad(), dk, tol, tol, "dk " + what);
      expect_close(v_leaf.grad(), dv, tol, tol, "dv " + what);
    }
  }
}

TEST(FusedAttention, Gradcheck) {
  for (bool causal : {false, true}) {
    gradcheck([&](const std::vector<Tensor>& in) {
      // q arrives as [B, T, H, D] and is permuted to [B, H, T, D]: a strided input.
      return scaled_dot_product_attention(permute(in[0], std::vector<int64_t>{0, 2, 1, 3}), in[1], in[2], Tensor(), 0.0,
                                          causal);
    }, {random_tensor({1, 4, 2, 3}, DType::Float64, 60), random_tensor({1, 2, 5, 3}, DType::Float64, 61),
        random_tensor({1, 2, 5, 2}, DType::Float64, 62)}, 1e-6, 1e-6, 1e-5, causal ? "causal" : "plain");
  }
  Tensor mask = tensor_from({1, 0, 1, 1, 1, 1, 0, 1}, {2, 4}, DType::Bool);
  gradcheck([&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], mask); },
            {random_tensor({2, 2, 3}, DType::Float64, 63), random_tensor({2, 4, 3}, DType::Float64, 64),
             random_tensor({2, 4, 3}, DType::Float64, 65)}, 1e-6, 1e-6, 1e-5, "bool mask, 3-D");
}

TEST(FusedAttention, TileGemmMatchesReference) {
  // C = alpha op(A) B + beta C on every path of tile_gemm: 64-column panels, 48/32/16-column panels, single
  // columns, row blocks of 6 and the remaining rows; A plain and transposed; beta 0 (C not read) and 1.
  for (bool trans_a : {false, true})
    for (float beta : {0.0f, 1.0f})
      for (int64_t m : {1, 6, 13})
        for (int64_t n : {1, 16, 37, 64, 115})
          for (int64_t k : {1, 9}) {
            const int64_t lda = (trans_a ? m : k) + 3, ldb = n + 5, ldc = n + 2;
            std::vector<double> a = random_values((trans_a ? k : m) * lda, 80), b = random_values(k * ldb, 81),
                                c = random_values(m * ldc, 82);
            std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), cf(c.begin(), c.end());
            if (beta == 0.0f)
              for (float& x : cf) x = std::numeric_limits<float>::quiet_NaN();  // must not be read
            cpu::tile_gemm(trans_a, m, n, k, 0.5f, af.data(), lda, bf.data(), ldb, beta, cf.data(), ldc);
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double total = 0;
                for (int64_t p = 0; p < k; ++p)
                  total += double(af[trans_a ? p * lda + i : i * lda + p]) * double(bf[p * ldb + j]);
                const double expected = 0.5 * total + (beta != 0.0f ? double(float(c[i * ldc + j])) : 0.0);
                ASSERT_NEAR(cf[i * ldc + j], expected, 1e-5) << "trans_a " << trans_a << " beta " << beta << " m " << m
                                                             << " n " << n << " k " << k << " at " << i << "," << j;
              }
          }
}

TEST(FusedAttention, IndependentOfThreadCount) {
  auto run = [] {
    AttentionInputs in = make_inputs(2, 3, 300, 300, 32, 32, DType::Float32, 70);
    Tensor q = clone(in.q), k = clone(in.k), v = clone(in.v);
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
    sum(mul(out, random_tensor({2, 3, 300, 32}, DType::Float32, 71))).backward();
    std::vector<float> all = out.to_vector<float>();
    for (Tensor* t : {&q, &k, &v}) {
      std::vector<float> g = t->grad().to_vector<float>();
      all.insert(all.end(), g.begin(), g.end());
    }
    return all;
  };
  std::vector<float> one = with_threads(1, run), two = with_threads(2, run);
  EXPECT_EQ(one, two);
}

TEST(FusedAttention, SixteenBitFloatsComputeInFloat32) {
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    for (bool causal : {false, true}) {
      const int64_t B = 1, H = 2, T = 70, S = 70, D = 8;
      AttentionInputs in = make_inputs(B, H, T, S, D, D, dtype, 130);
      std::vector<double> q = values(in.q), k = values(in.k), v = values(in.v);  // the rounded inputs
      AttentionCase c{B * H, T, S, D, D, 1.0 / std::sqrt(double(D)), causal};
      Tensor q_leaf = clone(in.q), k_leaf = clone(in.k), v_leaf = clone(in.v);
      for (Tensor* t : {&q_leaf, &k_leaf, &v_leaf}) t->set_requires_grad(true);
      Tensor out = scaled_dot_product_attention(q_leaf, k_leaf, v_leaf, Tensor(), 0.0, causal);
      EXPECT_EQ(out.dtype(), dtype);
      expect_close(out, attention_reference(c, q, k, v), 2e-2, 2e-2, "forward");
      Tensor dout = random_tensor({B, H, T, D}, dtype, 131);
      sum(mul(out, dout)).backward();
      std::vector<double> dq, dk, dv;
      attention_reference_grads(c, q, k, v, values(dout), dq, dk, dv);
      expect_close(q_leaf.grad(), dq, 3e-2, 3e-2, "dq");
      expect_close(k_leaf.grad(), dk, 3e-2, 3e-2, "dk");
      expect_close(v_leaf.grad(), dv, 3e-2, 3e-2, "dv");
    }
  }
}

TEST(FusedAttention, FourDimOutputIsStoredTokenMajor) {
  AttentionInputs in = make_inputs(2, 3, 4, 4, 8, 8, DType::Float32, 75);
  Tensor out = scaled_dot_product_attention(in.q, in.k, in.v);
  expect_shape(out, {2, 3, 4, 8});
  EXPECT_TRUE(transpose(out, 1, 2).is_contiguous());  // [B, T, H, Dv] storage: the merge of heads is free
  EXPECT_FALSE(out.is_view());
}

// q, k, v as [B, H, T, D] views of [B, T, H, D] storage (a fused QKV projection): the gradients that reach the views
// (sdpa's backward outputs, seen by a hook on each view) have the views' strides, with the reference's values, on
// the direct (float32) and the accumulating (bfloat16) paths; rotary's gradient keeps its input's layout too.
TEST(FusedAttention, GradientsAreLaidOutLikeTheInputs) {
  const int64_t B = 2, H = 3, T = 70, D = 16;
  const std::vector<int64_t> swap{0, 2, 1, 3};
  // The gradient arriving at `view`, recorded by a hook (which returns it unchanged).
  auto record_grad = [](Tensor& view, Tensor* seen) {
    view.register_hook([seen](const Tensor& g) {
      *seen = g;
      return g;
    });
  };
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    const double tol = dtype == DType::Float32 ? 2e-4 : 3e-2;
    AttentionInputs in = make_inputs(B, H, T, T, D, D, dtype, 140);
    std::vector<double> q = values(in.q), k = values(in.k), v = values(in.v);
    AttentionCase c{B * H, T, T, D, D, 1.0 / std::sqrt(double(D)), true};
    Tensor leaves[3] = {contiguous(permute(in.q, swap)), contiguous(permute(in.k, swap)), contiguous(permute(in.v, swap))};
    Tensor views[3], seen[3];
    for (int i = 0; i < 3; ++i) {
      leaves[i].set_requires_grad(true);
      views[i] = permute(leaves[i], swap);
      record_grad(views[i], &seen[i]);
    }
    Tensor out = scaled_dot_product_attention(views[0], views[1], views[2], Tensor(), 0.0, true);
    Tensor dout = random_tensor({B, H, T, D}, dtype, 141);
    sum(mul(out, dout)).backward();
    std::vector<double> dq, dk, dv;
    attention_reference_grads(c, q, k, v, values(dout), dq, dk, dv);
    const std::vector<double>* expected[3] = {&dq, &dk, &dv};
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(seen[i].defined());
      EXPECT_EQ(Dims(seen[i].strides()), Dims(views[i].strides())) << dtype_name(dtype) << " input " << i;
      expect_close(seen[i], *expected[i], tol, tol, std::string("grad ") + dtype_name(dtype));
    }
  }
  Tensor x = random_tensor({2, 5, 3, 8}, DType::Float32, 142);
  x.set_requires_grad(true);
  Tensor view = permute(x, swap), seen;
  record_grad(view, &seen);
  Tensor cos = random_tensor({5, 4}, DType::Float32, 143), sin = random_tensor({5, 4}, DType::Float32, 144);
  Tensor y = rotary_position_embedding(view, cos, sin, RopeMode::Interleaved);
  EXPECT_EQ(Dims(y.strides()), Dims(view.strides()));  // the output is laid out like the input
  // The backward's output is laid out like the incoming gradient: here g's, in the input's layout (sum(y * g)
  // sends g itself back to y, as sdpa's backward sends its gradients in the model).
  Tensor g = permute(random_tensor({2, 5, 3, 8}, DType::Float32, 145), swap);  // [B, H, T, D], [B, T, H, D] strides
  sum(mul(y, g)).backward();
  ASSERT_TRUE(seen.defined());
  EXPECT_EQ(Dims(seen.strides()), Dims(view.strides()));
}

TEST(FusedAttention, FullyMaskedRowGivesZeros) {
  Tensor q = random_tensor({1, 2, 4}, DType::Float64, 80), k = random_tensor({1, 3, 4}, DType::Float64, 81);
  Tensor v = random_tensor({1, 3, 4}, DType::Float64, 82);
  Tensor mask = tensor_from({0, 0, 0, 1, 1, 0}, {2, 3}, DType::Bool);
  std::vector<double> out = values(scaled_dot_product_attention(q, k, v, mask));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], 0.0);
  EXPECT_NE(out[4], 0.0);
}

TEST(FusedAttention, Errors) {
  const std::string op = "scaled_dot_product_attention";
  Tensor q = zeros_of({1, 2, 3, 4}), k = zeros_of({1, 2, 5, 4}), v = zeros_of({1, 2, 5, 4});
  expect_error([&] { scaled_dot_product_attention(q, k, v, Tensor(), 1.5); }, ErrorKind::Runtime, op);  // torch's kinds
  expect_error([&] { scaled_dot_product_attention(q, k, v, zeros_of({3, 5}), 0.0, true); }, ErrorKind::Value, op);
  expect_error([&] { scaled_dot_product_attention(q, k, v, zeros_of({3, 4})); }, ErrorKind::Value, op);
  expect_error([&] { scaled_dot_product_attention(q, k, v, zeros_of({3, 5}, DType::Float64)); }, ErrorKind::Type, op);
  expect_error([&] { scaled_dot_product_attention(q, zeros_of({1, 2, 5, 3}), v); }, ErrorKind::Value, op);
  expect_error([&] { scaled_dot_product_attention(q, k, zeros_of({1, 2, 6, 4})); }, ErrorKind::Value, op);
  expect_error([&] { scaled_dot_product_attention(q, zeros_of({2, 2, 5, 4}), v); }, ErrorKind::Runtime, op);
  expect_error([&] { scaled_dot_product_attention(zeros_of({1, 3, 3, 4}), k, v, Tensor(), 0.0, false, {}, true); },
               ErrorKind::Runtime, op);  // enable_gqa: 2 kv heads do not divide 3
  expect_error([&] { scaled_dot_product_attention(q, k, zeros_of({1, 2, 5, 4}, DType::Float64)); }, ErrorKind::Type, op);
  Tensor grad_mask = zeros_of({3, 5});
  grad_mask.set_requires_grad(true);
  expect_error([&] { scaled_dot_product_attention(q, k, v, grad_mask); }, ErrorKind::NotImplemented, op);
}

// --- adamw_step ----------------------------------------------------------------------------------------
namespace {
// torch.optim.AdamW's (or Adam's) single-tensor update on the host, operation for operation.
void adamw_reference(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m, std::vector<double>& v,
                     int64_t step, const AdamWOptions& o) {
  const double bc1 = 1 - std::pow(o.beta1, double(step)), bc2_sqrt = std::sqrt(1 - std::pow(o.beta2, double(step)));
  const double step_size = o.lr / bc1, w = 1 - o.beta1;
  for (size_t i = 0; i < p.size(); ++i) {
    const double gi = o.decoupled_weight_decay ? g[i] : g[i] + o.weight_decay * p[i];
    if (o.decoupled_weight_decay) p[i] *= 1 - o.lr * o.weight_decay;
    m[i] = m[i] + w * (gi - m[i]);
    v[i] = v[i] * o.beta2 + (1 - o.beta2) * gi * gi;
    const double denom = std::sqrt(v[i]) / bc2_sqrt + o.eps;
    p[i] = p[i] + -step_size * m[i] / denom;
  }
}
}  // namespace

std::vector<Tensor> step_counts(size_t n) {
  std::vector<Tensor> steps;
  for (size_t i = 0; i < n; ++i) steps.push_back(zeros_of(Shape{}));
  return steps;
}

TEST(FusedAdamW, MatchesTorchFormulaOverSteps) {
  for (bool decoupled : {true, false})
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const double tol = dtype == DType::Float64 ? 1e-14 : 1e-6;
    const std::vector<Shape> shapes = {{7}, {130, 300}, {3, 4}};  // the middle one spans several pieces
    std::vector<Tensor> params, grads, ms, vs;
    std::vector<std::vector<double>> rp, rm, rv;
    for (size_t i = 0; i < shapes.size(); ++i) {
      params.push_back(random_tensor(shapes[i], dtype, 90 + static_cast<uint32_t>(i)));
      params.back().set_requires_grad(true);
      ms.push_back(zeros(shapes[i], {dtype}));
      vs.push_back(zeros(shapes[i], {dtype}));
      rp.push_back(values(params.back()));
      rm.emplace_back(rp.back().size(), 0.0);
      rv.emplace_back(rp.back().size(), 0.0);
    }
    AdamWOptions o;
    o.lr = 3e-2;
    o.weight_decay = 0.05;
    o.decoupled_weight_decay = decoupled;
    std::vector<Tensor> steps = step_counts(shapes.size());
    for (int64_t step = 1; step <= 5; ++step) {
      grads.clear();
      for (size_t i = 0; i < shapes.size(); ++i) grads.push_back(random_tensor(shapes[i], dtype, 100 + uint32_t(step * 7 + i)));
      const uint32_t version = params[1].version();
      adamw_step(params, grads, ms, vs, steps, o);
      EXPECT_GT(params[1].version(), version);
      for (const Tensor& s : steps) EXPECT_EQ(values(s), std::vector<double>{double(step)});  // counted in the Task
      for (size_t i = 0; i < shapes.size(); ++i) adamw_reference(rp[i], values(grads[i]), rm[i], rv[i], step, o);
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      expect_close(params[i], rp[i], tol, tol, "param");
      expect_close(ms[i], rm[i], tol, tol, "exp_avg");
      expect_close(vs[i], rv[i], tol, tol, "exp_avg_sq");
    }
  }
}

TEST(FusedAdamW, Errors) {
  const std::string op = "adamw_step";
  std::vector<Tensor> p = {zeros_of({3})}, g = {zeros_of({3})}, m = {zeros_of({3})}, v = {zeros_of({3})};
  std::vector<Tensor> none, s = step_counts(1);
  expect_error([&] { adamw_step(p, g, m, none, s); }, ErrorKind::Value, op);
  expect_error([&] { adamw_step(p, g, m, v, none); }, ErrorKind::Value, op);
  std::vector<Tensor> s64 = {zeros_of(Shape{}, DType::Float64)}, s1 = {zeros_of({1})};
  expect_error([&] { adamw_step(p, g, m, v, s64); }, ErrorKind::Type, op);
  expect_error([&] { adamw_step(p, g, m, v, s1); }, ErrorKind::Type, op);
  std::vector<Tensor> g64 = {zeros_of({3}, DType::Float64)};
  expect_error([&] { adamw_step(p, g64, m, v, s); }, ErrorKind::Type, op);
  std::vector<Tensor> g4 = {zeros_of({4})};
  expect_error([&] { adamw_step(p, g4, m, v, s); }, ErrorKind::Value, op);
  Tensor leaf = zeros_of({3});
  leaf.set_requires_grad(true);
  std::vector<Tensor> non_leaf = {mul(leaf, 2.0)};
  expect_error([&] { adamw_step(non_leaf, g, m, v, s); }, ErrorKind::Runtime, op);
  AdamWOptions bad;
  bad.lr = -1;
  expect_error([&] { adamw_step(p, g, m, v, s, bad); }, ErrorKind::Value, op);
}

// --- gradients that arrive broadcast (sum's backward is an expand: every stride 0) -------------------------
TEST(FusedOps, ExpandedGradientsMatchDenseOnes) {
  auto grads_of = [](const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs, bool dense) {
    for (Tensor& t : inputs) {
      t = clone(t);
      t.set_requires_grad(true);
    }
    Tensor out = f(inputs);
    if (dense) sum(mul(out, ones(out.shape(), {out.dtype()}))).backward();
    else sum(out).backward();
    std::vector<double> all;
    for (Tensor& t : inputs) {
      std::vector<double> g = values(t.grad());
      all.insert(all.end(), g.begin(), g.end());
    }
    return all;
  };
  auto check = [&](const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
                   const std::string& what) {
    std::vector<double> dense = grads_of(f, inputs, true), expanded = grads_of(f, inputs, false);
    ASSERT_EQ(dense.size(), expanded.size());
    for (size_t i = 0; i < dense.size(); ++i) EXPECT_NEAR(dense[i], expanded[i], 1e-12) << what << " at " << i;
  };
  check([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1]); },
        {random_tensor({3, 5}, DType::Float64, 110), random_tensor({5}, DType::Float64, 111)}, "rms_norm");
  check([](const std::vector<Tensor>& in) { return swiglu(in[0], in[1]); },
        {random_tensor({3, 5}, DType::Float64, 112), random_tensor({3, 5}, DType::Float64, 113)}, "swiglu");
  Tensor cos = random_tensor({3, 2}, DType::Float64, 114), sin = random_tensor({3, 2}, DType::Float64, 115);
  check([&](const std::vector<Tensor>& in) { return rotary_position_embedding(in[0], cos, sin); },
        {random_tensor({1, 2, 3, 4}, DType::Float64, 116)}, "rope");
  check([](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0.0, true); },
        {random_tensor({1, 2, 5, 4}, DType::Float64, 117), random_tensor({1, 2, 5, 4}, DType::Float64, 118),
         random_tensor({1, 2, 5, 3}, DType::Float64, 119)}, "attention");
}

// create_graph: rms_norm's backward takes its composed path (the fused kernel is not differentiable), so the
// second derivative d/dx sum(grad_x^2) is that of the same formula written with basic ops.
TEST(FusedOps, DoubleBackwardTakesTheComposedPath) {
  auto second_derivative = [](bool fused) {
    Tensor x = random_tensor({2, 3}, DType::Float64, 120);
    x.set_requires_grad(true);
    const int64_t last = -1;
    Tensor y = fused ? rms_norm(x) : mul(x, rsqrt(add(mean(mul(x, x), IntSpan(&last, 1), true), Scalar(1e-5))));
    const Tensor outputs[1] = {sum(mul(y, random_tensor({2, 3}, DType::Float64, 121)))}, inputs[1] = {x};
    std::vector<Tensor> g = grad(outputs, inputs, {}, false, /*create_graph=*/true);
    EXPECT_TRUE(g[0].requires_grad());
    const Tensor again[1] = {sum(mul(g[0], g[0]))};
    return values(grad(again, inputs, {}, false, false)[0]);
  };
  const std::vector<double> composed = second_derivative(false);
  const int64_t shape[1] = {6};
  expect_close(from_vector(second_derivative(true), IntSpan(shape, 1)), composed, 1e-10, 1e-12);
}

// --- 16-bit floats through forward and backward: float64 on the same (rounded) values as the reference ------
TEST(FusedOps, BFloat16ForwardAndBackward) {
  // Runs f on `inputs` converted to dtype and returns the output and the input gradients (as doubles).
  auto run = [](const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs, DType dtype,
                const Tensor& weights) {
    std::vector<Tensor> xs;
    for (const Tensor& t : inputs) {
      xs.push_back(to(t, dtype, true));
      xs.back().set_requires_grad(true);
    }
    Tensor out = f(xs);
    sum(mul(out, to(weights, dtype))).backward();
    std::vector<std::vector<double>> result = {values(out)};
    for (Tensor& x : xs) result.push_back(values(x.grad()));
    return result;
  };
  auto check = [&](const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                   const Shape& out_shape, const std::string& what) {
    for (Tensor& t : inputs) t = to(to(t, DType::BFloat16), DType::Float64);  // values representable in bf16
    Tensor weights = to(to(random_tensor(out_shape, DType::Float64, 140), DType::BFloat16), DType::Float64);
    auto expected = run(f, inputs, DType::Float64, weights);
    auto actual = run(f, inputs, DType::BFloat16, weights);
    for (size_t i = 0; i < expected.size(); ++i) {
      double scale = 0;
      for (double e : expected[i]) scale = std::max(scale, std::fabs(e));
      for (size_t j = 0; j < expected[i].size(); ++j)
        EXPECT_NEAR(actual[i][j], expected[i][j], 2e-2 * std::max(scale, 1.0)) << what << " result " << i << " at " << j;
    }
  };
  check([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1]); },
        {random_tensor({6, 40}, DType::Float64, 141), random_tensor({40}, DType::Float64, 142)}, {6, 40}, "rms_norm");
  check([](const std::vector<Tensor>& in) { return swiglu(in[0]); }, {random_tensor({5, 64}, DType::Float64, 143, -3, 3)},
        {5, 32}, "swiglu");
  Tensor cos = random_tensor({4, 4}, DType::Float64, 144), sin = random_tensor({4, 4}, DType::Float64, 145);
  check([&](const std::vector<Tensor>& in) { return rotary_position_embedding(in[0], cos, sin, RopeMode::RotateHalf); },
        {random_tensor({2, 3, 4, 8}, DType::Float64, 146)}, {2, 3, 4, 8}, "rope");
}
