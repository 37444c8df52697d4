// CPU GEMM for matmul: batched, broadcast, strided C = A @ B through the serial OpenBLAS, tiled over dygrad's
// intra-op pool.
//
// Design (docs/threading.md):
//  * Each output matrix C[M, N] is cut into tiles whose size is a function of (batch, M, N, K) alone, never of
//    the thread count (gemm_tiling). Each tile is one serial cblas_?gemm call over the full K (no split-K), so
//    every output element is computed by the same operations in the same order however many threads run:
//    results are bitwise identical for any thread count. The (batch, tile) pairs are the chunks of
//    parallel_chunks, which the pool hands out dynamically; batches are natural tiles.
//  * Operands are read in place when their matrix dims are row-major (strides (ld, 1), passed as NoTrans) or
//    column-major ((1, ld), passed as Trans); batch dims may have any strides, 0 for broadcast. The op layer
//    copies a float32/float64 operand only when neither layout holds (blas_layout).
//  * Batch folding: when B is the same matrix for every batch and A's batches stack onto its rows (a linear
//    layer, [B, T, C] @ [C, N]), the whole batch is one GEMM with batch * M rows, which tiles better.
//  * bfloat16 on a CPU with AVX512-BF16 (checked at run time): each tile through oneDNN's bf16 x bf16 -> float32
//    GEMM on the operands in place, rounded once (gemm_bf16_native). float16, and bfloat16 elsewhere: each
//    tile's rows of A and columns of B are converted to float32, multiplied by sgemm (float32 accumulation) and
//    rounded once to the output dtype.
//  * Integers: a plain loop kernel over the same tiles, exact, wrapping on overflow like torch.
//  * Debian builds the serial OpenBLAS without USE_LOCKING, which makes concurrent calls unsafe: every call
//    goes through backend/cpu/fused_blas.cpp, which serialises the OpenBLAS ones.
//
// The kernel: inputs (a [..., M, K], b [..., K, N]) of one dtype (not bool), batch dims broadcast against each
// other; output [batch..., M, N], contiguous. Any strides; float32/float64 operands must satisfy blas_layout
// (core/shape.h; the op layer copies them otherwise).
//
// Legend: batch = the broadcast batch dims flattened, M = rows of A and C, K = the inner dim, N = columns of
// B and C; a tile is C[m0 : m0 + tile_m, n0 : n0 + tile_n] of one batch, computed over all of K.
#include "dygrad/backend/cpu/matmul.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "dygrad/backend/cpu/blas.h"
#include "dygrad/backend/cpu/tile_gemm.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/thread_pool.h"
#include "dygrad/backend/cpu/loops.h"

namespace dg::cpu {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t multiple) { return ceil_div(a, multiple) * multiple; }

// Tiling (measured with bench/bench_gemm.cpp --tiles=2,4,8,16; results in bench/RESULTS.md). A tile is one
// BLAS call that packs its own rows of A (tile_m x K) and columns of B (K x tile_n), so every split along M
// repacks all of B and every split along N all of A, where the multithreaded OpenBLAS packs each panel once
// and shares it between its threads. Measured interleaved in one process on the 2-core machine, 2 tiles per
// call reached 1.00-1.2x the multithreaded OpenBLAS on 2 threads, 4 tiles 0.93-1.1x, 16 tiles 0.86-1.2x. So
// tiles are few and large: split until there are kTargetTiles per GEMM call, always halving the longer side
// (the split that repacks less), as long as tiles stay at least kMinTileM x kMinTileN and kMinTileFlops.
// Batches are tiles of their own. Machines with more cores want a larger target (set_gemm_target_tiles); it
// must not follow the pool size, or results would change with the thread count. The minimum tile side is 128:
// with 256, a 384 x 384 weight gradient over K = 2048 (the attention output projection's, in backward) was one
// tile on one core (147 GFLOP/s; split in two, 248).
constexpr int64_t kTargetTiles = 2;
std::atomic<int64_t> target_tiles{kTargetTiles};  // set_gemm_target_tiles
constexpr int64_t kMinTileM = 128;
constexpr int64_t kMinTileN = 128;
constexpr double kMinTileFlops = 4.0e6;  // about 30 microseconds of one core
constexpr int64_t kTileAlign = 16;       // the float32 micro-kernel's width under AVX-512

// The batched GEMM a Task describes, with broadcasting resolved into per-batch offsets (in the Task's scratch).
struct GemmPlan {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  int64_t* a_offsets = nullptr;  // [batch] element offset of batch i's A and B; C is contiguous
  int64_t* b_offsets = nullptr;
  ScratchArena* scratch = nullptr;  // the Task's: per-worker tile buffers
  int64_t a_row_stride = 0, a_col_stride = 0, b_row_stride = 0, b_col_stride = 0;
  // addmm: C = beta * input + alpha * A @ B, input [..., M, N] broadcast (any strides, 0 included). Null: matmul.
  const void* input = nullptr;
  int64_t* input_offsets = nullptr;
  int64_t input_row_stride = 0, input_col_stride = 0;
  double alpha = 1, beta = 0;
};

// Batch offsets of `t` (a [..., R, C] operand) for every index of the output batch shape, broadcasting
// its missing and size-1 batch dims, into the Task's scratch. Returns them; `count` is their number.
int64_t* batch_offsets(ScratchArena& scratch, const Tensor& t, IntSpan out_batch, int64_t& count) {
  const int64_t nb = static_cast<int64_t>(out_batch.size()), lead = nb - (t.dim() - 2);
  Dims strides(static_cast<size_t>(nb), 0);
  for (int64_t d = lead < 0 ? 0 : lead; d < nb; ++d)
    strides[static_cast<size_t>(d)] = t.shape()[d - lead] == 1 ? 0 : t.strides()[d - lead];
  count = 1;
  for (int64_t s : out_batch) count *= s;
  int64_t* offsets = scratch.take<int64_t>(count);
  Dims index(static_cast<size_t>(nb), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    offsets[static_cast<size_t>(i)] = offset;
    for (int64_t d = nb - 1; d >= 0; --d) {  // odometer step, keeping the running offset
      const size_t k = static_cast<size_t>(d);
      offset += strides[k];
      if (++index[k] < out_batch[k]) break;
      offset -= strides[k] * index[k];
      index[k] = 0;
    }
  }
  return offsets;
}

GemmPlan make_plan(ScratchArena& scratch, const Tensor& a, const Tensor& b, const Tensor& out, bool blas,
                   const Tensor* input = nullptr, double alpha = 1, double beta = 0) {
  GemmPlan p;
  p.scratch = &scratch;
  p.M = out.size(-2);
  p.N = out.size(-1);
  p.K = a.size(-1);
  IntSpan out_batch = out.shape().subspan(0, static_cast<size_t>(out.dim() - 2));
  p.a_offsets = batch_offsets(scratch, a, out_batch, p.batch);
  p.b_offsets = batch_offsets(scratch, b, out_batch, p.batch);
  p.a_row_stride = a.stride(-2);
  p.a_col_stride = a.stride(-1);
  p.b_row_stride = b.stride(-2);
  p.b_col_stride = b.stride(-1);
  if (input) {  // addmm: never folded (input's batches need not stack like A's)
    int64_t count;
    p.input_offsets = batch_offsets(scratch, *input, out_batch, count);
    p.input = input->raw_data();
    p.input_row_stride = input->stride(-2);
    p.input_col_stride = input->stride(-1);
    p.alpha = alpha;
    p.beta = beta;
    return p;
  }
  // Fold the batch into M when B is shared and A's batches stack: batch i's rows start at i * M * row stride.
  if (p.batch > 1 && p.batch * p.M <= INT_MAX &&
      std::all_of(p.b_offsets, p.b_offsets + p.batch, [](int64_t o) { return o == 0; })) {
    const int64_t row_stride = p.M == 1 ? p.a_offsets[1] : p.a_row_stride;
    bool stacked = true;
    for (int64_t i = 0; i < p.batch && stacked; ++i) stacked = p.a_offsets[static_cast<size_t>(i)] == i * p.M * row_stride;
    if (stacked && (!blas || blas_layout(p.batch * p.M, p.K, row_stride, p.a_col_stride).ok)) {
      p.M *= p.batch;
      p.batch = 1;
      p.a_row_stride = row_stride;
      p.a_offsets[0] = 0;
      p.b_offsets[0] = 0;
    }
  }
  return p;
}

// Runs body(batch, m0, tile_m, n0, tile_n, buffer) for every tile of the plan, across the pool. buffer: the
// `buffer_elements(tile_m, tile_n)` elements of U a tile may use for itself (a per-worker slot of the Task's
// scratch; buffer_elements of the full tile size, 0: none), null when it needs none.
template <typename U, typename Size, typename Body>
void for_each_tile(const GemmPlan& p, Size&& buffer_elements, Body&& body) {
  const GemmTiling t = gemm_tiling(p.batch, p.M, p.N, p.K);
  const int64_t per_batch = t.tiles_m * t.tiles_n;
  const int64_t elements = buffer_elements(t.tile_m, t.tile_n);
  ScratchSlots<U> buffers = p.scratch->per_worker<U>(elements, elements > 0 ? p.batch * per_batch : 0);
  auto tile = [&](int64_t chunk) {
    const int64_t batch = chunk / per_batch, r = chunk % per_batch;
    const int64_t m0 = (r / t.tiles_n) * t.tile_m, n0 = (r % t.tiles_n) * t.tile_n;
    if (elements == 0) {
      body(batch, m0, std::min(t.tile_m, p.M - m0), n0, std::min(t.tile_n, p.N - n0), static_cast<U*>(nullptr));
      return;
    }
    const auto held = buffers.acquire();
    body(batch, m0, std::min(t.tile_m, p.M - m0), n0, std::min(t.tile_n, p.N - n0), held.data());
  };
  // A whole product smaller than one minimum tile (a batch of tiny matrices: attention heads of a short
  // sequence, einsum) runs on this thread: waking the pool costs more than the work. The tiles and their
  // order are the same, so the result is too.
  if (2.0 * static_cast<double>(p.batch) * static_cast<double>(p.M) * static_cast<double>(p.N) *
          static_cast<double>(p.K) < kMinTileFlops) {
    for (int64_t c = 0; c < p.batch * per_batch; ++c) tile(c);
    return;
  }
  parallel_chunks(p.batch * per_batch, tile);
}

// C[m, n] = A[m, K] @ B[K, n], row-major C with leading dim ldc; one serial call (float32: oneDNN or OpenBLAS,
// backend/cpu/fused_blas.cpp).
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
               int64_t ldb, float* C, int64_t ldc) {
  gemm(ta, tb, m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
}
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* A, int64_t lda, const double* B,
               int64_t ldb, double* C, int64_t ldc) {
  gemm(ta, tb, m, n, k, 1.0, A, lda, B, ldb, 0.0, C, ldc);
}

// A float32 A read transposed whose leading dimension is a multiple of 4 KiB (the weight gradient dY^T X of a
// layer with 1024 outputs: dY [tokens, 1024]): packing A's column panels walks addresses 4 KiB apart, which
// alias in the caches. Measured per core, 512x384 tiles over K = 2048: oneDNN 114-117 and OpenBLAS 126-131
// GFLOP/s, against 146-153 for the same product computed as C^T = B^T A (B read transposed, A row-major).
// Such tiles are computed as C^T into a per-thread block and transposed into C (~3% of the tile's time).
bool aliased_transposed_a(const BlasLayout& la, const BlasLayout& lb, int64_t K, size_t itemsize) {
  return itemsize == sizeof(float) && la.transposed && !lb.transposed && (la.ld * 4) % 4096 == 0 && K >= 256;
}

// float32 / float64: every tile is one BLAS call on the operands in place.
// A [batch][M, K], B [batch][K, N] strided; C [batch, M, N] contiguous.
template <typename T>
void gemm_blas(const GemmPlan& p, const T* A, const T* B, T* C) {
  const BlasLayout la = blas_layout(p.M, p.K, p.a_row_stride, p.a_col_stride);
  const BlasLayout lb = blas_layout(p.K, p.N, p.b_row_stride, p.b_col_stride);
  DG_CHECK(la.ok && lb.ok, Runtime, "[matmul] internal error: operand layout not readable by BLAS");
  const bool via_transpose = !p.input && aliased_transposed_a(la, lb, p.K, sizeof(T));
  auto tile_block = [&](int64_t tm, int64_t tn) { return via_transpose ? tm * tn : int64_t{0}; };
  for_each_tile<T>(p, tile_block, [&](int64_t batch, int64_t m0, int64_t tm, int64_t n0, int64_t tn, T* block) {
    const size_t i = static_cast<size_t>(batch);
    const T* a = A + p.a_offsets[i] + m0 * p.a_row_stride;  // op(A) rows m0.. (A^T: columns of stored A)
    const T* b = B + p.b_offsets[i] + n0 * p.b_col_stride;
    T* c = C + (batch * p.M + m0) * p.N + n0;
    if (p.input) {
      // addmm as torch computes it: C = input, then one GEMM C = alpha A B + beta C (beta 0: C is not read).
      if (p.beta != 0) {
        const T* in = static_cast<const T*>(p.input) + p.input_offsets[i] + m0 * p.input_row_stride + n0 * p.input_col_stride;
        for (int64_t r = 0; r < tm; ++r)
          for (int64_t q = 0; q < tn; ++q) c[r * p.N + q] = in[r * p.input_row_stride + q * p.input_col_stride];
      }
      gemm(la.transposed, lb.transposed, tm, tn, p.K, static_cast<T>(p.alpha), a, la.ld, b, lb.ld,
           static_cast<T>(p.beta), c, p.N);
      return;
    }
    if (via_transpose) {
      // C^T [tn, tm] = B^T [tn, K] @ A_stored [K, tm] into the worker's block; then C = (C^T)^T.
      blas_gemm(true, false, tn, tm, p.K, b, lb.ld, a, la.ld, block, tm);
      transpose_into(block, tn, tm, tm, c, p.N);
      return;
    }
    blas_gemm(la.transposed, lb.transposed, tm, tn, p.K, a, la.ld, b, lb.ld, c, p.N);
  });
}

// float16 / bfloat16: a tile is computed in blocks of at most kConvertRows x kConvertColumns: the block's
// columns of B [K, nb] and rows of A [mb, K] are converted to float32, multiplied by sgemm into a float32
// block [mb, nb] and rounded once into C. Blocks are fixed by the tile, so results stay thread-independent.
constexpr int64_t kConvertRows = 256, kConvertColumns = 1024;

template <typename T>
void convert_block(const T* src, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = src + r * row_stride;
    float* out = dst + r * cols;
    if (col_stride == 1) for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<float>(row[c]);
    else for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<float>(row[c * col_stride]);
  }
}

template <typename T>
void gemm_converted(const GemmPlan& p, const T* A, const T* B, T* C) {
  auto blocks = [&](int64_t tm, int64_t tn) {  // B [K, nb], A [mb, K] and C [mb, nb] blocks in float32
    const int64_t max_rows = std::min(tm, kConvertRows), max_cols = std::min(tn, kConvertColumns);
    return p.K * max_cols + max_rows * p.K + max_rows * max_cols;
  };
  for_each_tile<float>(p, blocks, [&](int64_t batch, int64_t m0, int64_t tm, int64_t n0, int64_t tn, float* buffer) {
    const int64_t K = p.K, max_rows = std::min(tm, kConvertRows), max_cols = std::min(tn, kConvertColumns);
    float* b_block = buffer;
    float* a_block = b_block + K * max_cols;
    float* c_block = a_block + max_rows * K;
    const T* a = A + p.a_offsets[batch];
    const T* b = B + p.b_offsets[batch];
    for (int64_t n = n0; n < n0 + tn; n += kConvertColumns) {
      const int64_t nb = std::min(kConvertColumns, n0 + tn - n);
      convert_block(b + n * p.b_col_stride, K, nb, p.b_row_stride, p.b_col_stride, b_block);
      for (int64_t m = m0; m < m0 + tm; m += kConvertRows) {
        const int64_t mb = std::min(kConvertRows, m0 + tm - m);
        convert_block(a + m * p.a_row_stride, mb, K, p.a_row_stride, p.a_col_stride, a_block);
        blas_gemm(false, false, mb, nb, K, a_block, K, b_block, nb, c_block, nb);
        for (int64_t i = 0; i < mb; ++i) {
          T* dst = C + (batch * p.M + m + i) * p.N + n;
          if (!p.input) {
            for (int64_t j = 0; j < nb; ++j) dst[j] = T(c_block[i * nb + j]);
            continue;
          }
          // addmm: alpha * AB + beta * input in float32, rounded once (beta 0: input is not read)
          const T* in = static_cast<const T*>(p.input) + p.input_offsets[batch] +
                        (m + i) * p.input_row_stride + n * p.input_col_stride;
          const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
          for (int64_t j = 0; j < nb; ++j)
            dst[j] = T(beta == 0 ? alpha * c_block[i * nb + j]
                                 : alpha * c_block[i * nb + j] + beta * static_cast<float>(in[j * p.input_col_stride]));
        }
      }
    }
  });
}

// bfloat16 with AVX512-BF16 (bf16_gemm_library()), operands in place (they must satisfy blas_layout, else
// gemm_converted). A plain product: each tile is one call of oneDNN's matmul primitive, bf16 x bf16 summed in
// float32 and rounded once to bf16 by oneDNN (matmul_bf16, one cached primitive per problem and thread). addmm
// (and DYGRAD_BF16_GEMM=gemm, the former path, for side-by-side measurements): each tile in blocks of
// kConvertRows rows, one dnnl_gemm_bf16bf16f32 call per block into a float32 block, rounded once into C after
// alpha * AB + beta * input is combined in float32 (as the converted path). Either way a tile's calls are fixed
// by the tile, so results stay thread-independent. Why the primitive (docs/mixed-precision.md): its brgemm
// kernels convert to bf16 in registers before the store, where the GEMM API writes a float32 block that a second
// pass reads back and rounds: 13-17% of a K = 384 tile (the multiplies themselves run alike). Transposed-A tiles
// (weight gradients) get oneDNN 2.6's GEMM driver behind the primitive (its brgemm wants dense operands there).
bool native_bf16_readable(const GemmPlan& p) {
  return bf16_gemm_library() != nullptr && blas_layout(p.M, p.K, p.a_row_stride, p.a_col_stride).ok &&
         blas_layout(p.K, p.N, p.b_row_stride, p.b_col_stride).ok;
}

// float32 -> bfloat16, round to nearest even, NaN kept quiet: BFloat16(float)'s rule written without a branch so
// the compiler vectorizes it (the scalar conversion cost about half the GEMM's time at K = 384).
void round_to_bf16(const float* src, BFloat16* dst, int64_t n) {
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  for (int64_t j = 0; j < n; ++j) {
    uint32_t u;
    std::memcpy(&u, src + j, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    out[j] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded);
  }
}

// Rows per oneDNN call within a tile (a float32 block of rows x tile width): 256, or DYGRAD_BF16_ROWS for tuning
// (a function of the environment only, never the thread count).
int64_t native_rows() {
  static const int64_t rows = [] {
    const char* v = std::getenv("DYGRAD_BF16_ROWS");
    return v ? std::max<int64_t>(16, std::atoll(v)) : kConvertRows;
  }();
  return rows;
}

// Whether plain bf16 products take the matmul primitive: yes unless DYGRAD_BF16_GEMM=gemm (read once).
bool bf16_matmul_primitive() {
  static const bool primitive = [] {
    const char* v = std::getenv("DYGRAD_BF16_GEMM");
    return v == nullptr || std::strcmp(v, "gemm") != 0;
  }();
  return primitive;
}

void gemm_bf16_native(const GemmPlan& p, const BFloat16* A, const BFloat16* B, BFloat16* C) {
  const int64_t kConvertRows = native_rows();
  const bool primitive = !p.input && bf16_matmul_primitive();
  const BlasLayout la = blas_layout(p.M, p.K, p.a_row_stride, p.a_col_stride);
  const BlasLayout lb = blas_layout(p.K, p.N, p.b_row_stride, p.b_col_stride);
  // Other than the primitive: a float32 block of rows x tile width.
  auto c_blocks = [&](int64_t tm, int64_t tn) { return primitive ? int64_t{0} : std::min(tm, kConvertRows) * tn; };
  for_each_tile<float>(p, c_blocks, [&](int64_t batch, int64_t m0, int64_t tm, int64_t n0, int64_t tn, float* c_block) {
    const size_t i = static_cast<size_t>(batch);
    if (primitive) {  // a plain product: the tile in one matmul primitive call, rounded by oneDNN
      const BFloat16* a = A + p.a_offsets[i] + m0 * p.a_row_stride;
      const BFloat16* b = B + p.b_offsets[i] + n0 * p.b_col_stride;
      BFloat16* c = C + (batch * p.M + m0) * p.N + n0;
      matmul_bf16(la.transposed, lb.transposed, tm, tn, p.K, reinterpret_cast<const uint16_t*>(a), la.ld,
                  reinterpret_cast<const uint16_t*>(b), lb.ld, reinterpret_cast<uint16_t*>(c), p.N);
      return;
    }
    const BFloat16* b = B + p.b_offsets[i] + n0 * p.b_col_stride;
    for (int64_t m = m0; m < m0 + tm; m += kConvertRows) {
      const int64_t mb = std::min(kConvertRows, m0 + tm - m);
      const BFloat16* a = A + p.a_offsets[i] + m * p.a_row_stride;
      gemm_bf16(la.transposed, lb.transposed, mb, tn, p.K, 1.0f, reinterpret_cast<const uint16_t*>(a), la.ld,
                reinterpret_cast<const uint16_t*>(b), lb.ld, 0.0f, c_block, tn);
      const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
      for (int64_t r = 0; r < mb; ++r) {
        BFloat16* dst = C + (batch * p.M + m + r) * p.N + n0;
        const float* src = c_block + r * tn;
        if (!p.input) {
          round_to_bf16(src, dst, tn);
          continue;
        }
        const BFloat16* in = static_cast<const BFloat16*>(p.input) + p.input_offsets[i] + (m + r) * p.input_row_stride +
                             n0 * p.input_col_stride;
        for (int64_t j = 0; j < tn; ++j)
          dst[j] = BFloat16(beta == 0 ? alpha * src[j]
                                      : alpha * src[j] + beta * static_cast<float>(in[j * p.input_col_stride]));
      }
    }
  });
}

// Integers: c[i, j] = sum_k a[i, k] * b[k, j] in wrapping 64-bit arithmetic, stored modulo the dtype.
template <typename T>
void gemm_integer(const GemmPlan& p, const T* A, const T* B, T* C) {
  auto accumulators = [](int64_t, int64_t tn) { return tn; };  // a tile row of them
  for_each_tile<uint64_t>(p, accumulators, [&](int64_t batch, int64_t m0, int64_t tm, int64_t n0, int64_t tn, uint64_t* acc) {
    const T* a = A + p.a_offsets[batch] + m0 * p.a_row_stride;
    const T* b = B + p.b_offsets[batch] + n0 * p.b_col_stride;
    for (int64_t i = 0; i < tm; ++i) {
      std::fill(acc, acc + tn, 0);
      for (int64_t k = 0; k < p.K; ++k) {
        const uint64_t x = static_cast<uint64_t>(static_cast<int64_t>(a[i * p.a_row_stride + k * p.a_col_stride]));
        const T* row = b + k * p.b_row_stride;
        for (int64_t j = 0; j < tn; ++j)
          acc[j] += x * static_cast<uint64_t>(static_cast<int64_t>(row[j * p.b_col_stride]));
      }
      T* dst = C + (batch * p.M + m0 + i) * p.N + n0;
      if (!p.input) {
        for (int64_t j = 0; j < tn; ++j) dst[j] = static_cast<T>(acc[j]);
        continue;
      }
      // addmm: alpha * AB + beta * input, wrapping (alpha and beta as integers, as torch's integral addmm)
      const T* in = static_cast<const T*>(p.input) + p.input_offsets[batch] +
                    (m0 + i) * p.input_row_stride + n0 * p.input_col_stride;
      const uint64_t alpha = static_cast<uint64_t>(static_cast<int64_t>(p.alpha)), beta = static_cast<uint64_t>(static_cast<int64_t>(p.beta));
      for (int64_t j = 0; j < tn; ++j)
        dst[j] = static_cast<T>(alpha * acc[j] +
                                (beta == 0 ? 0 : beta * static_cast<uint64_t>(static_cast<int64_t>(in[j * p.input_col_stride]))));
    }
  });
}
}  // namespace


GemmTiling gemm_tiling(int64_t batch, int64_t M, int64_t N, int64_t K) {
  M = std::max<int64_t>(M, 1);
  N = std::max<int64_t>(N, 1);
  int64_t tiles_m = 1, tiles_n = 1;
  auto tile_flops = [&](int64_t tm, int64_t tn) { return 2.0 * double(ceil_div(M, tm)) * double(ceil_div(N, tn)) * double(K); };
  const int64_t target = target_tiles.load(std::memory_order_relaxed);
  while (batch * tiles_m * tiles_n < target) {
    const int64_t tile_m = ceil_div(M, tiles_m), tile_n = ceil_div(N, tiles_n);
    const bool can_split_m = ceil_div(M, 2 * tiles_m) >= kMinTileM && tile_flops(2 * tiles_m, tiles_n) >= kMinTileFlops;
    const bool can_split_n = ceil_div(N, 2 * tiles_n) >= kMinTileN && tile_flops(tiles_m, 2 * tiles_n) >= kMinTileFlops;
    if (can_split_m && (tile_m >= tile_n || !can_split_n)) tiles_m *= 2;
    else if (can_split_n) tiles_n *= 2;
    else break;
  }
  GemmTiling t;
  t.tile_m = std::min(M, round_up(ceil_div(M, tiles_m), kTileAlign));
  t.tile_n = std::min(N, round_up(ceil_div(N, tiles_n), kTileAlign));
  t.tiles_m = ceil_div(M, t.tile_m);
  t.tiles_n = ceil_div(N, t.tile_n);
  return t;
}

void set_gemm_target_tiles(int64_t tiles) { target_tiles.store(std::max<int64_t>(1, tiles)); }
int64_t gemm_target_tiles() { return target_tiles.load(); }

namespace {
// One plan's tiles in the operands' dtype: BLAS for float32/float64, float32 GEMMs rounded once for 16-bit
// floats, exact integer sums; bool is refused (naming `op`).
void run_gemm(const char* op, const GemmPlan& plan, const Tensor& a, const Tensor& b, const Tensor& out) {
  visit_dtype(out.dtype(), [&]<typename T>() {
    const T* A = a.data<T>();
    const T* B = b.data<T>();
    T* C = out.data<T>();
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) gemm_blas<T>(plan, A, B, C);
    else if constexpr (std::is_same_v<T, BFloat16>) {
      if (native_bf16_readable(plan)) gemm_bf16_native(plan, A, B, C);
      else gemm_converted<T>(plan, A, B, C);
    } else if constexpr (std::is_same_v<T, Half>) gemm_converted<T>(plan, A, B, C);
    else if constexpr (std::is_same_v<T, bool>) fail(ErrorKind::NotImplemented, "[", op, "] not implemented for dtype bool");
    else gemm_integer<T>(plan, A, B, C);
  });
}
// Whether the plan's operands are read by a library call in place (batch folding must keep their layout).
bool blas_plan(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float64 || (dtype == DType::BFloat16 && bf16_gemm_library());
}
}  // namespace

void matmul_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& b = task.inputs[1];
  const Tensor& out = task.outputs[0];
  if (out.numel() == 0) return;
  if (a.size(-1) == 0) {  // K = 0: an empty sum
    std::memset(out.raw_data(), 0, static_cast<size_t>(out.numel()) * out.itemsize());
    return;
  }
  const DType dtype = out.dtype();
  run_gemm("matmul", make_plan(task_scratch(task), a, b, out, blas_plan(dtype)), a, b, out);
}

// inputs (input [..., M, N] broadcast to the output, a [..., M, K], b [..., K, N]) of one dtype; output
// [..., M, N] contiguous; AddmmAttrs beta, alpha: out = beta * input + alpha * a @ b, each tile one GEMM call
// that reads its tile of input as C (float32/float64), or the tile's float32 product and input combined and
// rounded once (16-bit), or the exact integer sum. beta 0 never reads input (its nan and inf do not propagate).
void addmm_kernel(Task& task) {
  const Tensor& input = task.inputs[0];
  const Tensor& a = task.inputs[1];
  const Tensor& b = task.inputs[2];
  const Tensor& out = task.outputs[0];
  const AddmmAttrs& attrs = task.attrs.get<AddmmAttrs>();
  if (out.numel() == 0) return;
  const DType dtype = out.dtype();
  const double beta = attrs.beta.to_double();
  if (a.size(-1) == 0) {  // K = 0: beta * input
    visit_dtype(dtype, [&]<typename T>() {
      if constexpr (!std::is_same_v<T, bool>) {
        const Tensor operands[2] = {out, input};
        StridedIteration it(operands);
        const T scale = attrs.beta.to<T>();
        for_each_element(it, [&](char** ptr, const int64_t* st, int64_t n) {
          for (int64_t k = 0; k < n; ++k) {
            T& o = *reinterpret_cast<T*>(ptr[0] + k * st[0]);
            o = beta == 0 ? T(0) : static_cast<T>(static_cast<compute_t<T>>(scale) *
                                                   static_cast<compute_t<T>>(*reinterpret_cast<const T*>(ptr[1] + k * st[1])));
          }
        });
      }
    });
    return;
  }
  run_gemm("addmm", make_plan(task_scratch(task), a, b, out, blas_plan(dtype), &input, attrs.alpha.to_double(), beta),
           a, b, out);
}

DG_REGISTER_KERNEL(matmul, Device::Type::CPU, matmul_kernel);
DG_REGISTER_KERNEL(addmm, Device::Type::CPU, addmm_kernel);

}  // namespace dg::cpu
