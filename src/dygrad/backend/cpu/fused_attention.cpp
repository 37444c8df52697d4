// Scaled dot-product attention, flash-style: tiled over query and key blocks with an online softmax, so no
// [T, S] matrix is ever stored; backward recomputes the probabilities from the saved log-sum-exp.
//
// Notation: per batch-head n, Q[T, D], K[S, D], V[S, Dv], O[T, Dv], scale s, L[T] = log-sum-exp of each
// score row, blocks of Bq query rows and Bk key rows. Forward, for each (n, query block), over key blocks:
//   S_blk = s Q_blk K_blk^T (+ mask)   m_new = max(m, rowmax S_blk)   P = exp(S_blk - m_new)
//   l = l exp(m - m_new) + rowsum P    O_blk = O_blk exp(m - m_new) + P V_blk
// then O = O_blk / l and L = m + log l. Causal key blocks wholly above the diagonal are skipped.
// Backward, for each n (one task, fixed block order, so results do not depend on the thread count):
//   Dr = rowsum(dO * O); per key block, per query block: P = exp(s Q K^T (+ mask) - L),
//   dV += P^T dO,  dP = dO V^T,  dS = P (dP - Dr),  dQ += s dS K,  dK += s dS^T Q.
// A row that attends to no key (all masked) gives O = 0, L = -inf and zero gradients.
// The tile products run on the register-blocked tile_gemm (backend/cpu/tile_gemm.h) rather than the serial
// BLAS, whose every call repacks its operands and claims a packing buffer under a lock shared by all threads
// (backend/cpu/matmul.cpp). Operands that tile_gemm needs transposed (K^T for S, V^T for dP) are packed once
// per batch-head (forward) or per key block (backward).
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "dygrad/backend/cpu/accumulate.h"
#include "dygrad/backend/cpu/tile_gemm.h"
#include "dygrad/math/elementary.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/thread_pool.h"

// rotary_attention reads q, k and v as [B, H, T, D] views of a fused projection qkv [B, T, 3 H D] (q, k and v
// are its thirds, head h at columns h D..) and rotates the rows of q and k by the rotary embedding of their
// positions as it packs them (row t of q or k: position t); its backward rotates dQ and dK back (the inverse
// rotation) once they are summed, so the gradient of qkv is written whole, in place.
// The kernels of this file and their operands:
// inputs (query[L..., T, D], key[L..., S, D], value[L..., S, Dv] any strides, then mask[L..., T, S] when
// AttentionAttrs mask: Bool (true = attend) or Additive in the query's dtype; broadcast strides allowed).
// Floating dtypes; float16/bfloat16 compute in float32 (tiles converted on load, results rounded once).
// AttentionAttrs scale and is_causal (query i sees keys j <= i).
// outputs (out[L..., T, Dv] with unit column stride (any row and batch strides), lse[N, T] in the compute
// dtype: the log-sum-exp of each row, N = prod(L)).
//   void attention_kernel(Task& task);
// inputs (grad_out[L..., T, Dv], query, key, value, out, lse, then mask as above), same attributes;
// outputs (grad_query, grad_key, grad_value) with unit column stride, any row and batch strides.
//   void attention_backward_kernel(Task& task);
// inputs (qkv[B, T, 3 H D] any strides, cos[T, D/2], sin[T, D/2] in qkv's dtype); RotaryAttentionAttrs scale,
// is_causal, heads, rotate_half; outputs (out[B, T, H D] with unit column stride, lse[B H, T]).
//   void rotary_attention_kernel(Task& task);
// inputs (grad_out[B, T, H D], qkv, out, lse, cos, sin), same attributes; outputs (grad_qkv[B, T, 3 H D] with unit
// column stride).
//   void rotary_attention_backward_kernel(Task& task);

namespace dg::cpu {

namespace {
// Query rows per task and per tile; key rows per tile. The causal cut trims each tile to the keys its query
// rows can see, so a wide key tile costs nothing above the diagonal and keeps the GEMMs large.
constexpr int64_t kQueryBlock = kAttentionQueryBlock, kKeyBlock = kAttentionKeyBlock;  // runtime/scratch.h
// Query rows per GEMM call in a causal block that crosses the diagonal (two of the tile GEMM's 6-row tiles).
constexpr int64_t kCausalRows = 12;
// std::max as a function object for eight_lane_reduce (the larger; the first when equal or unordered).
template <typename T>
T max_of_two(T a, T b) { return std::max(a, b); }

enum MaskKind : int64_t { kNoMask = 0, kBoolMask = 1, kAdditiveMask = 2 };

// A batch of matrices [L..., rows, cols] with any strides; n indexes the flattened leading dims.
template <typename T>
struct Batched {
  const T* base = nullptr;
  Dims lead_sizes, lead_strides;
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 0;

  Batched() = default;
  explicit Batched(const Tensor& t) : base(static_cast<const T*>(t.raw_data())) {
    const int64_t nd = t.dim();
    for (int64_t d = 0; d < nd - 2; ++d) {
      lead_sizes.push_back(t.shape()[d]);
      lead_strides.push_back(t.strides()[d]);
    }
    rows = t.shape()[nd - 2];
    cols = t.shape()[nd - 1];
    row_stride = t.strides()[nd - 2];
    col_stride = t.strides()[nd - 1];
  }
  const T* matrix(int64_t n) const {
    int64_t offset = 0;
    for (size_t d = lead_sizes.size(); d-- > 0;) {
      offset += (n % lead_sizes[d]) * lead_strides[d];
      n /= lead_sizes[d];
    }
    return base + offset;
  }
  // Rows [r0, r0 + count) of matrix n as a row-major block of the compute type C with leading dim `ld`: in
  // place when the columns are unit-stride and no conversion is needed (what BLAS reads directly), else
  // gathered (and converted, for 16-bit floats) into `pack` (room for count * cols).
  template <typename C>
  const C* block(const T* matrix_base, int64_t r0, int64_t count, C* pack, int64_t& ld) const {
    if constexpr (std::is_same_v<T, C>) {
      if (col_stride == 1 && row_stride >= cols && cols > 0) {
        ld = row_stride;
        return matrix_base + r0 * row_stride;
      }
    }
    for (int64_t r = 0; r < count; ++r)
      for (int64_t c = 0; c < cols; ++c) pack[r * cols + c] = static_cast<C>(matrix_base[(r0 + r) * row_stride + c * col_stride]);
    ld = std::max<int64_t>(cols, 1);
    return pack;
  }
};

// Scores of block (q0.., k0..) [nq, nk] with leading dim nk: the mask and the causal cut applied in place.
template <typename T, typename M>
void mask_scores(T* scores, int64_t nq, int64_t nk, int64_t q0, int64_t k0, bool causal, int64_t mask_kind,
                 const void* mask_matrix, int64_t mask_row_stride, int64_t mask_col_stride) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  if (mask_kind == kBoolMask) {
    const bool* mask = static_cast<const bool*>(mask_matrix);
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j)
        if (!mask[(q0 + i) * mask_row_stride + (k0 + j) * mask_col_stride]) scores[i * nk + j] = kNegInf;
  } else if (mask_kind == kAdditiveMask) {
    const M* mask = static_cast<const M*>(mask_matrix);
    for (int64_t i = 0; i < nq; ++i) {
      const M* row = mask + (q0 + i) * mask_row_stride + k0 * mask_col_stride;
      if (mask_col_stride == 1) for (int64_t j = 0; j < nk; ++j) scores[i * nk + j] += static_cast<T>(row[j]);
      else for (int64_t j = 0; j < nk; ++j) scores[i * nk + j] += static_cast<T>(row[j * mask_col_stride]);
    }
  }
  if (causal && k0 + nk - 1 > q0) {
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = std::max<int64_t>(0, q0 + i + 1 - k0); j < nk; ++j) scores[i * nk + j] = kNegInf;
  }
}

struct Config {
  double scale;
  bool causal;
  int64_t mask_kind;
};

// The mask [L..., T, S] (broadcast strides allowed), bool or in the compute type.
struct MaskView {
  const char* base = nullptr;
  Dims lead_sizes, lead_strides;
  int64_t row_stride = 0, col_stride = 0, itemsize = 1;
  MaskView() = default;
  MaskView(const Task& task, size_t input, int64_t kind) {
    if (kind == kNoMask) return;
    const Tensor& m = task.inputs[input];
    base = static_cast<const char*>(m.raw_data());
    itemsize = static_cast<int64_t>(m.itemsize());
    for (int64_t d = 0; d < m.dim() - 2; ++d) {
      lead_sizes.push_back(m.shape()[d]);
      lead_strides.push_back(m.strides()[d]);
    }
    row_stride = m.strides()[m.dim() - 2];
    col_stride = m.strides()[m.dim() - 1];
  }
  const void* matrix(int64_t n) const {
    if (!base) return nullptr;
    int64_t offset = 0;
    for (size_t d = lead_sizes.size(); d-- > 0;) {
      offset += (n % lead_sizes[d]) * lead_strides[d];
      n /= lead_sizes[d];
    }
    return base + offset * itemsize;
  }
};

// The rotary embedding applied to the rows of q and k (rotary_attention), or none (cos null).
template <typename S>
struct Rope {
  const S* cos = nullptr;
  const S* sin = nullptr;
  int64_t cos_row = 0, cos_col = 0, sin_row = 0, sin_col = 0;
  bool rotate_half = false;

  explicit operator bool() const { return cos != nullptr; }
  // dst[0, D) = the row src (column stride cs) rotated by the angles of position t, or by minus them (inverse).
  // src may be dst (cs 1): each pair is read before it is written.
  template <typename In, typename Out>
  void rotate(const In* src, int64_t cs, Out* dst, int64_t t, int64_t D, bool inverse) const {
    const int64_t pairs = D / 2;
    const S* c_row = cos + t * cos_row;
    const S* s_row = sin + t * sin_row;
    for (int64_t p = 0; p < pairs; ++p) {
      using C = compute_t<S>;
      const C c = static_cast<C>(c_row[p * cos_col]);
      const C sn = inverse ? -static_cast<C>(s_row[p * sin_col]) : static_cast<C>(s_row[p * sin_col]);
      const int64_t first = rotate_half ? p : 2 * p, second = rotate_half ? p + pairs : 2 * p + 1;
      const C a = static_cast<C>(src[first * cs]), b = static_cast<C>(src[second * cs]);
      dst[first] = static_cast<Out>(a * c - b * sn);
      dst[second] = static_cast<Out>(a * sn + b * c);
    }
  }
  // Rows [r0, r0 + count) of matrix m (base: its first row), rotated, as a row-major block of the compute type in
  // `pack` (room for count * cols).
  template <typename T>
  const T* rows(const Batched<S>& m, const S* base, int64_t r0, int64_t count, T* pack, int64_t& ld) const {
    for (int64_t r = 0; r < count; ++r)
      rotate(base + (r0 + r) * m.row_stride, m.col_stride, pack + r * m.cols, r0 + r, m.cols, false);
    ld = std::max<int64_t>(m.cols, 1);
    return pack;
  }
};

// What a kernel reads and writes: q, k, v (and in the backward the gradient of out), out, lse, the mask, the
// rotary embedding, and the gradients of q, k and v.
template <typename S>
struct Operands {
  Batched<S> q, k, v, out, dout, gq, gk, gv;
  const void* lse = nullptr;
  MaskView mask;
  Rope<S> rope;
};

// Part `part` (0: q, 1: k, 2: v) of a fused projection [B, T, 3 H D] (or an output [B, T, H D]: part 0, parts 1)
// as the [B, H, T, D] matrices of its heads.
template <typename S>
Batched<S> heads_of(const Tensor& t, int64_t heads, int64_t parts, int64_t part) {
  Batched<S> m;
  const int64_t D = t.shape()[2] / (parts * heads), column = t.strides()[2];
  m.base = static_cast<const S*>(t.raw_data()) + part * heads * D * column;
  m.lead_sizes.push_back(t.shape()[0]);
  m.lead_sizes.push_back(heads);
  m.lead_strides.push_back(t.strides()[0]);
  m.lead_strides.push_back(D * column);
  m.rows = t.shape()[1];
  m.cols = D;
  m.row_stride = t.strides()[1];
  m.col_stride = column;
  return m;
}

// Consecutive buffers cut from one scratch slot (sizes as ops/fused_attention.cpp declares them).
template <typename T>
struct Carve {
  T* next;
  T* take(int64_t count) {
    T* p = next;
    next += count;
    return p;
  }
};
int64_t at_least_1(int64_t n) { return std::max<int64_t>(n, 1); }

// S: the stored dtype; T: the compute type (float for 16-bit floats).
template <typename S>
void attention_forward(ScratchArena& scratch, const Operands<S>& ops, const Config& cfg) {
  using T = compute_t<S>;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const Batched<S>&q = ops.q, &k = ops.k, &v = ops.v;
  const MaskView& mask = ops.mask;
  const Rope<S>& rope = ops.rope;
  const Batched<S>& out = ops.out;  // unit column stride; rows may be strided ([B, T, H, Dv] storage)
  T* lse = static_cast<T*>(const_cast<void*>(ops.lse));
  const int64_t T_len = q.rows, S_len = k.rows, D = q.cols, Dv = v.cols;
  const int64_t batch = shape_numel(q.lead_sizes);
  const int64_t query_blocks = (T_len + kQueryBlock - 1) / kQueryBlock;
  const T scale = static_cast<T>(cfg.scale);
  // K^T [D, S] of every batch-head, packed once (in the compute type) for all of its query blocks.
  // Its rows are S_len + 16 apart: at a power-of-two stride (S = 256: 1 KiB) the transpose's 64 destination rows fell
  // into four L1 sets and every store missed.
  const int64_t ldkt = S_len + kAttentionKeyPad;
  T* keys_t = scratch.take<T>(at_least_1(batch * D * ldkt));
  {  // per pool thread: one packed K [S, D], given back before the query blocks' buffers are taken
    ScratchRewind packing(scratch);
    auto k_packs = scratch.per_worker<T>(at_least_1(S_len * D), batch);
    parallel_chunks(batch, [&](int64_t n) {
      const auto k_pack = k_packs.acquire();
      int64_t ldk;
      const T* kb = rope ? rope.rows(k, k.matrix(n), 0, S_len, k_pack.data(), ldk)
                         : k.block(k.matrix(n), 0, S_len, k_pack.data(), ldk);
      transpose_into(kb, S_len, D, ldk, keys_t + n * D * ldkt, ldkt);
    });
  }
  // Per pool thread: packed Q [Bq, D] and V [Bk, Dv], scores [Bq, Bk], accumulator [Bq, Dv], row max and sum [Bq].
  const int64_t bq = std::min(kQueryBlock, T_len), bk = std::min(kKeyBlock, S_len);
  auto blocks = scratch.per_worker<T>(at_least_1(bq * D) + at_least_1(bk * Dv) + bq * kKeyBlock + bq * Dv + 2 * bq,
                                      batch * query_blocks);
  parallel_chunks(batch * query_blocks, [&](int64_t job) {
    const int64_t n = job / query_blocks, q0 = (job % query_blocks) * kQueryBlock;
    const int64_t nq = std::min(kQueryBlock, T_len - q0);
    const T* k_transposed = keys_t + n * D * ldkt;
    const auto held = blocks.acquire();
    Carve<T> carve{held.data()};
    T* q_pack = carve.take(at_least_1(bq * D));
    T* v_pack = carve.take(at_least_1(bk * Dv));
    T* scores = carve.take(bq * kKeyBlock);  // uninitialised: GEMM writes it
    T* acc = carve.take(bq * Dv);
    T* row_max = carve.take(bq);
    T* row_sum = carve.take(bq);
    std::fill(acc, acc + nq * Dv, T(0));
    std::fill(row_max, row_max + nq, kNegInf);
    std::fill(row_sum, row_sum + nq, T(0));
    int64_t ldq, ldv;
    const T* qb = rope ? rope.rows(q, q.matrix(n), q0, nq, q_pack, ldq) : q.block(q.matrix(n), q0, nq, q_pack, ldq);
    const S* v_matrix = v.matrix(n);
    const void* mask_matrix = mask.matrix(n);
    const int64_t key_end = cfg.causal ? std::min(S_len, q0 + nq) : S_len;
    for (int64_t k0 = 0; k0 < key_end; k0 += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, key_end - k0);
      const T* vb = v.block(v_matrix, k0, nk, v_pack, ldv);
      T* s = scores;
      // A causal block that crosses the diagonal: each group of kCausalRows query rows needs only the keys up to its
      // last row's (visible_keys); the scores right of them are masked anyway (mask_scores' causal cut) and P is 0
      // there, so both GEMMs stop at that column (for T = 256 they computed 25% more than the causal half).
      const bool diagonal = cfg.causal && k0 + nk - 1 > q0;
      auto visible_keys = [&](int64_t i0, int64_t rows) {
        return diagonal ? std::clamp<int64_t>(q0 + i0 + rows - k0, 0, nk) : nk;
      };
      for (int64_t i0 = 0; i0 < nq; i0 += kCausalRows) {
        const int64_t rows = std::min(kCausalRows, nq - i0);
        const int64_t cols = std::min(nk, (visible_keys(i0, rows) + 15) / 16 * 16);  // whole vectors of columns
        tile_gemm(false, rows, cols, D, scale, qb + i0 * ldq, ldq, k_transposed + k0, ldkt, T(0), s + i0 * nk, nk);
      }
      mask_scores<T, S>(s, nq, nk, q0, k0, cfg.causal, cfg.mask_kind, mask_matrix, mask.row_stride, mask.col_stride);
      for (int64_t i = 0; i < nq; ++i) {
        T* row = s + i * nk;
        const T block_max = eight_lane_reduce<T>(nk, kNegInf, [row](int64_t j) { return row[j]; }, max_of_two<T>, max_of_two<T>);
        const T m_old = row_max[static_cast<size_t>(i)], m_new = std::max(m_old, block_max);
        if (m_new == kNegInf) {  // nothing attended yet: P = 0 (avoids -inf - -inf)
          for (int64_t j = 0; j < nk; ++j) row[j] = kNegInf;
          continue;
        }
        for (int64_t j = 0; j < nk; ++j) row[j] -= m_new;
        if (m_old != m_new) {
          const T correction = math::exp_nonpositive(m_old - m_new);  // 0 when m_old = -inf
          row_sum[static_cast<size_t>(i)] *= correction;
          T* o = acc + i * Dv;
          for (int64_t c = 0; c < Dv; ++c) o[c] *= correction;
          row_max[static_cast<size_t>(i)] = m_new;
        }
      }
      for (int64_t e = 0; e < nq * nk; ++e) s[e] = math::exp_nonpositive(s[e]);  // s - m_new <= 0
      for (int64_t i = 0; i < nq; ++i) {
        const T* row = s + i * nk;
        row_sum[static_cast<size_t>(i)] += eight_lane_sum<T>(nk, [row](int64_t j) { return row[j]; });
      }
      for (int64_t i0 = 0; i0 < nq; i0 += kCausalRows) {
        const int64_t rows = std::min(kCausalRows, nq - i0), keys = visible_keys(i0, rows);
        if (keys > 0) tile_gemm(false, rows, Dv, keys, T(1), s + i0 * nk, nk, vb, ldv, T(1), acc + i0 * Dv, Dv);
      }
    }
    S* o = const_cast<S*>(out.matrix(n)) + q0 * out.row_stride;
    for (int64_t i = 0; i < nq; ++i) {
      const T l = row_sum[static_cast<size_t>(i)];
      const T inv = l > T(0) ? T(1) / l : T(0);
      for (int64_t c = 0; c < Dv; ++c) o[i * out.row_stride + c] = static_cast<S>(acc[static_cast<size_t>(i * Dv + c)] * inv);
      lse[n * T_len + q0 + i] = l > T(0) ? row_max[static_cast<size_t>(i)] + std::log(l) : kNegInf;
    }
  });
}

template <typename S>
void attention_backward(ScratchArena& scratch, const Operands<S>& ops, const Config& cfg) {
  using T = compute_t<S>;
  constexpr bool kDirect = std::is_same_v<S, T>;  // gradients accumulate in the outputs themselves
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const Batched<S>&dout = ops.dout, &q = ops.q, &k = ops.k, &v = ops.v, &o = ops.out;
  const T* lse_all = static_cast<const T*>(ops.lse);
  const MaskView& mask = ops.mask;
  const Rope<S>& rope = ops.rope;
  // The gradients: unit column stride, any row and batch strides (laid out like q, k, v by ops/fused_attention.cpp;
  // rotary_attention: the thirds of the gradient of qkv).
  const Batched<S>&gq = ops.gq, &gk = ops.gk, &gv = ops.gv;
  const int64_t T_len = q.rows, S_len = k.rows, D = q.cols, Dv = v.cols;
  const int64_t batch = shape_numel(q.lead_sizes);
  const T scale = static_cast<T>(cfg.scale);
  // Per pool thread (one batch-head at a time): the 16-bit floats' accumulators, rotary_attention's rotated q and
  // k, Dr, the packed tiles and P, dP (the declaration's order, ops/fused_attention.cpp).
  const int64_t bq = std::min(kQueryBlock, T_len), bk = std::min(kKeyBlock, S_len);
  const int64_t accumulators = kDirect ? 0 : T_len * D + S_len * D + S_len * Dv;
  const int64_t rotated = rope ? at_least_1(T_len * D) + at_least_1(S_len * D) : 0;
  auto heads = scratch.per_worker<T>(accumulators + rotated + T_len + at_least_1(bq * D) + at_least_1(bq * Dv) +
                                         at_least_1(bk * D) + at_least_1(bk * Dv) + (D + Dv) * kKeyBlock +
                                         2 * kQueryBlock * kKeyBlock,
                                     batch);
  parallel_chunks(batch, [&](int64_t n) {
    const auto held = heads.acquire();
    Carve<T> carve{held.data()};
    // 16-bit floats: accumulate in float buffers, rounded once at the end.
    // dq, dk, dv: rows with leading dims ldq_out, ldk_out, ldv_out (the outputs themselves, or float buffers).
    T *dq, *dk, *dv;
    int64_t ldq_out = D, ldk_out = D, ldv_out = Dv;
    if constexpr (kDirect) {
      dq = const_cast<S*>(gq.matrix(n));
      dk = const_cast<S*>(gk.matrix(n));
      dv = const_cast<S*>(gv.matrix(n));
      ldq_out = gq.row_stride;
      ldk_out = gk.row_stride;
      ldv_out = gv.row_stride;
    } else {
      dq = carve.take(T_len * D);
      dk = carve.take(S_len * D);
      dv = carve.take(S_len * Dv);
      std::fill(dq, dq + accumulators, T(0));  // as the vectors were: the three are consecutive
    }
    auto zero_rows = [](T* m, int64_t r0, int64_t count, int64_t cols, int64_t ld) {
      for (int64_t r = r0; r < r0 + count; ++r) std::fill(m + r * ld, m + r * ld + cols, T(0));
    };
    // dQ is written (beta 0) by the first key tile, which every query row sees; dK and dV per key tile.
    if (S_len == 0) zero_rows(dq, 0, T_len, D, ldq_out);
    const T* lse = lse_all + n * T_len;
    const S* q_matrix = q.matrix(n);
    const S* k_matrix = k.matrix(n);
    const S* v_matrix = v.matrix(n);
    const S* do_matrix = dout.matrix(n);
    const S* o_matrix = o.matrix(n);
    const void* mask_matrix = mask.matrix(n);
    // Dr[i] = rowsum(dO * O).
    T* row_dot = carve.take(T_len);
    for (int64_t i = 0; i < T_len; ++i) {
      T total = 0;
      for (int64_t c = 0; c < Dv; ++c)
        total += static_cast<T>(do_matrix[i * dout.row_stride + c * dout.col_stride]) *
                 static_cast<T>(o_matrix[i * o.row_stride + c * o.col_stride]);
      row_dot[static_cast<size_t>(i)] = total;
    }
    T* q_pack = carve.take(at_least_1(bq * D));
    T* do_pack = carve.take(at_least_1(bq * Dv));
    T* k_pack = carve.take(at_least_1(bk * D));
    T* v_pack = carve.take(at_least_1(bk * Dv));
    // rotary_attention: q and k of this batch-head rotated once, [T, D] and [S, D], read by every tile.
    T* q_rotated = nullptr;
    T* k_rotated = nullptr;
    int64_t ld_rotated = D;
    if (rope) {
      q_rotated = carve.take(at_least_1(T_len * D));
      k_rotated = carve.take(at_least_1(S_len * D));
      rope.rows(q, q_matrix, 0, T_len, q_rotated, ld_rotated);
      rope.rows(k, k_matrix, 0, S_len, k_rotated, ld_rotated);
    }
    T* kt_pack = carve.take(D * kKeyBlock);
    T* vt_pack = carve.take(Dv * kKeyBlock);
    T* probs = carve.take(kQueryBlock * kKeyBlock);
    T* dprobs = carve.take(kQueryBlock * kKeyBlock);
    int64_t ldq, ldk, ldv, lddo;
    for (int64_t k0 = 0; k0 < S_len; k0 += kKeyBlock) {
      const int64_t nk_block = std::min(kKeyBlock, S_len - k0);
      const T* kb = rope ? (ldk = ld_rotated, k_rotated + k0 * ld_rotated) : k.block(k_matrix, k0, nk_block, k_pack, ldk);
      const T* vb = v.block(v_matrix, k0, nk_block, v_pack, ldv);
      transpose_into(kb, nk_block, D, ldk, kt_pack, nk_block);   // K_blk^T [D, nk_block]
      transpose_into(vb, nk_block, Dv, ldv, vt_pack, nk_block);  // V_blk^T [Dv, nk_block]
      zero_rows(dk, k0, nk_block, D, ldk_out);
      zero_rows(dv, k0, nk_block, Dv, ldv_out);
      // Causal: query rows i < k0 see no key of this block.
      const int64_t first_query = cfg.causal ? (k0 / kQueryBlock) * kQueryBlock : 0;
      for (int64_t q0 = first_query; q0 < T_len; q0 += kQueryBlock) {
        const int64_t nq = std::min(kQueryBlock, T_len - q0);
        // Causal: keys past the block's last query row get P = 0; leave them out of the tile.
        const int64_t nk = cfg.causal ? std::min(nk_block, q0 + nq - k0) : nk_block;
        const T* qb = rope ? (ldq = ld_rotated, q_rotated + q0 * ld_rotated) : q.block(q_matrix, q0, nq, q_pack, ldq);
        const T* dob = dout.block(do_matrix, q0, nq, do_pack, lddo);
        T* p = probs;
        T* dp = dprobs;
        // Column j of K^T / V^T is key k0 + j: the first nk columns of the packs, leading dim nk_block.
        tile_gemm(false, nq, nk, D, scale, qb, ldq, kt_pack, nk_block, T(0), p, nk);
        mask_scores<T, S>(p, nq, nk, q0, k0, cfg.causal, cfg.mask_kind, mask_matrix, mask.row_stride, mask.col_stride);
        for (int64_t i = 0; i < nq; ++i) {
          T* row = p + i * nk;
          const T l = lse[q0 + i];
          if (l == kNegInf) for (int64_t j = 0; j < nk; ++j) row[j] = kNegInf;
          else for (int64_t j = 0; j < nk; ++j) row[j] -= l;
        }
        for (int64_t e = 0; e < nq * nk; ++e) p[e] = math::exp_nonpositive(p[e]);  // s - L: <= 0 up to rounding
        tile_gemm(true, nk, Dv, nq, T(1), p, nk, dob, lddo, T(1), dv + k0 * ldv_out, ldv_out);
        tile_gemm(false, nq, nk, Dv, T(1), dob, lddo, vt_pack, nk_block, T(0), dp, nk);
        for (int64_t i = 0; i < nq; ++i) {
          const T r = row_dot[static_cast<size_t>(q0 + i)];
          for (int64_t j = 0; j < nk; ++j) dp[i * nk + j] = p[i * nk + j] * (dp[i * nk + j] - r);
        }
        tile_gemm(false, nq, D, nk, scale, dp, nk, kb, ldk, k0 == 0 ? T(0) : T(1), dq + q0 * ldq_out, ldq_out);
        tile_gemm(true, nk, D, nq, scale, dp, nk, qb, ldq, T(1), dk + k0 * ldk_out, ldk_out);
      }
    }
    if (rope) {  // dQ and dK were taken against the rotated q and k: rotate them back
      for (int64_t t = 0; t < T_len; ++t) rope.rotate(dq + t * ldq_out, 1, dq + t * ldq_out, t, D, true);
      for (int64_t t = 0; t < S_len; ++t) rope.rotate(dk + t * ldk_out, 1, dk + t * ldk_out, t, D, true);
    }
    if constexpr (!kDirect) {
      auto store = [](const Batched<S>& out, int64_t m, const T* acc, int64_t rows, int64_t cols) {
        S* dst = const_cast<S*>(out.matrix(m));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) dst[r * out.row_stride + c] = static_cast<S>(acc[r * cols + c]);
      };
      store(gq, n, dq, T_len, D);
      store(gk, n, dk, S_len, D);
      store(gv, n, dv, S_len, Dv);
    }
  });
}

// Whether a boolean mask is the causal one (query i attends to keys j <= i) for every batch-head: one [T, S] matrix
// broadcast over the leading dims. Such a mask takes the causal path, which skips the blocks above the diagonal
// instead of computing and masking them: the same values, at half the work (a mask written out as
// `~torch.ones(T, S).triu(1)`, and the JIT's attention pattern, whose composed code masks with one).
bool is_causal_mask(const MaskView& mask, int64_t T, int64_t S) {
  for (size_t d = 0; d < mask.lead_sizes.size(); ++d)
    if (mask.lead_sizes[d] > 1 && mask.lead_strides[d] != 0) return false;
  const bool* m = static_cast<const bool*>(mask.matrix(0));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j)
      if (m[i * mask.row_stride + j * mask.col_stride] != (j <= i)) return false;
  return true;
}

// The task's attributes, and its boolean mask replaced by the causal path where it is the causal mask (`mask`
// is then dropped).
Config config_of(const Task& task, MaskView& mask, int64_t T, int64_t S) {
  const AttentionAttrs& attrs = task.attrs.get<AttentionAttrs>();
  Config cfg{attrs.scale, attrs.is_causal, static_cast<int64_t>(attrs.mask)};
  if (cfg.mask_kind == kBoolMask && T > 0 && S > 0 && is_causal_mask(mask, T, S)) {
    cfg = {attrs.scale, true, kNoMask};
    mask = MaskView();
  }
  return cfg;
}
int64_t rows_of(const Tensor& t) { return t.shape()[t.dim() - 2]; }

template <typename S>
Rope<S> rope_of(const Tensor& cos, const Tensor& sin, bool rotate_half) {
  Rope<S> r;
  r.cos = cos.data<S>();
  r.sin = sin.data<S>();
  r.cos_row = cos.strides()[0];
  r.cos_col = cos.strides()[1];
  r.sin_row = sin.strides()[0];
  r.sin_col = sin.strides()[1];
  r.rotate_half = rotate_half;
  return r;
}
}  // namespace

void attention_kernel(Task& task) {
  const int64_t kind = static_cast<int64_t>(task.attrs.get<AttentionAttrs>().mask);
  MaskView mask(task, 3, kind);
  const Config cfg = config_of(task, mask, rows_of(task.inputs[0]), rows_of(task.inputs[1]));
  visit_floating(task.inputs[0].dtype(), [&]<typename S>() {
    Operands<S> ops{.q = Batched<S>(task.inputs[0]), .k = Batched<S>(task.inputs[1]), .v = Batched<S>(task.inputs[2]),
                    .out = Batched<S>(task.outputs[0]), .lse = task.outputs[1].raw_data(), .mask = mask};
    attention_forward<S>(task_scratch(task), ops, cfg);
  });
}

void attention_backward_kernel(Task& task) {
  const int64_t kind = static_cast<int64_t>(task.attrs.get<AttentionAttrs>().mask);
  MaskView mask(task, 6, kind);
  const Config cfg = config_of(task, mask, rows_of(task.inputs[1]), rows_of(task.inputs[2]));
  visit_floating(task.inputs[1].dtype(), [&]<typename S>() {
    Operands<S> ops{.q = Batched<S>(task.inputs[1]), .k = Batched<S>(task.inputs[2]), .v = Batched<S>(task.inputs[3]),
                    .out = Batched<S>(task.inputs[4]), .dout = Batched<S>(task.inputs[0]),
                    .gq = Batched<S>(task.outputs[0]), .gk = Batched<S>(task.outputs[1]), .gv = Batched<S>(task.outputs[2]),
                    .lse = task.inputs[5].raw_data(), .mask = mask};
    attention_backward<S>(task_scratch(task), ops, cfg);
  });
}

void rotary_attention_kernel(Task& task) {
  const RotaryAttentionAttrs& attrs = task.attrs.get<RotaryAttentionAttrs>();
  const Config cfg{attrs.scale, attrs.is_causal, kNoMask};
  const Tensor& qkv = task.inputs[0];
  visit_floating(qkv.dtype(), [&]<typename S>() {
    const int64_t h = attrs.heads;
    Operands<S> ops{.q = heads_of<S>(qkv, h, 3, 0), .k = heads_of<S>(qkv, h, 3, 1), .v = heads_of<S>(qkv, h, 3, 2),
                    .out = heads_of<S>(task.outputs[0], h, 1, 0), .lse = task.outputs[1].raw_data(),
                    .rope = rope_of<S>(task.inputs[1], task.inputs[2], attrs.rotate_half)};
    attention_forward<S>(task_scratch(task), ops, cfg);
  });
}

void rotary_attention_backward_kernel(Task& task) {
  const RotaryAttentionAttrs& attrs = task.attrs.get<RotaryAttentionAttrs>();
  const Config cfg{attrs.scale, attrs.is_causal, kNoMask};
  const Tensor& qkv = task.inputs[1];
  const Tensor& grad_qkv = task.outputs[0];
  visit_floating(qkv.dtype(), [&]<typename S>() {
    const int64_t h = attrs.heads;
    Operands<S> ops{.q = heads_of<S>(qkv, h, 3, 0), .k = heads_of<S>(qkv, h, 3, 1), .v = heads_of<S>(qkv, h, 3, 2),
                    .out = heads_of<S>(task.inputs[2], h, 1, 0), .dout = heads_of<S>(task.inputs[0], h, 1, 0),
                    .gq = heads_of<S>(grad_qkv, h, 3, 0), .gk = heads_of<S>(grad_qkv, h, 3, 1),
                    .gv = heads_of<S>(grad_qkv, h, 3, 2), .lse = task.inputs[3].raw_data(),
                    .rope = rope_of<S>(task.inputs[4], task.inputs[5], attrs.rotate_half)};
    attention_backward<S>(task_scratch(task), ops, cfg);
  });
}


DG_REGISTER_KERNEL(scaled_dot_product_attention, Device::Type::CPU, attention_kernel);
DG_REGISTER_KERNEL(scaled_dot_product_attention_backward, Device::Type::CPU, attention_backward_kernel);
DG_REGISTER_KERNEL(rotary_attention, Device::Type::CPU, rotary_attention_kernel);
DG_REGISTER_KERNEL(rotary_attention_backward, Device::Type::CPU, rotary_attention_backward_kernel);

}  // namespace dg::cpu
