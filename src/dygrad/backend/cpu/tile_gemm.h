// Register-blocked GEMM for the small tiles of the fused attention kernels (64 x 64 x 128 and the like). A
// serial BLAS call repacks both operands on every call and claims its packing buffer under a process-wide
// lock (backend/cpu/matmul.cpp); this reads the operands in place. Measured per core on the 2-core AVX-512
// Xeon VM (CPU time, so robust to load): 120-135 GFLOP/s on the attention tile shapes, about on par with
// serial OpenBLAS calls.
// Single-threaded: the caller owns the tile, so results do not depend on the thread count.
//
// Notation: C[M, N] = alpha * op(A)[M, K] B[K, N] + beta C. B is row-major with unit column stride and
// leading dim ldb; op(A) = A (a[i * lda + p]) or A^T (a[p * lda + i]), read one element at a time and
// broadcast, so neither needs packing. A micro-tile is kRows rows of C by NV vectors of 16 columns held in
// registers (6 x 4 vectors = 24 zmm accumulators with AVX-512) while p runs over all of K. beta is 0
// (C is not read) or 1. Each C element is one sum over p in increasing order.
#pragma once
#include <cstdint>
#include <cstring>

#include "dygrad/backend/cpu/blas.h"

namespace dg::cpu {

namespace tile_gemm_detail {
typedef float Vec16 __attribute__((vector_size(64)));
constexpr int kRows = 6;

inline Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store16(float* p, Vec16 v) { std::memcpy(p, &v, sizeof(v)); }

// C[R, 16 NV] at c: rows of A at a (element (r, p) at a[r * a_row + p * a_col]), B panel at b.
template <int R, int NV>
inline void micro_tile(int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                       float alpha, bool accumulate, float* c, int64_t ldc) {
  Vec16 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = Vec16{};
  for (int64_t p = 0; p < k; ++p) {
    Vec16 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = load16(b + p * ldb + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Vec16 ar = Vec16{} + a[r * a_row + p * a_col];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = ar * bv[v] + acc[r][v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* out = c + r * ldc + 16 * v;
      const Vec16 scaled = acc[r][v] * alpha;
      store16(out, accumulate ? load16(out) + scaled : scaled);
    }
}

// All M rows for one panel of NV vectors of columns: blocks of kRows, then the remaining rows.
template <int NV>
inline void panel(int64_t m, int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                  float alpha, bool accumulate, float* c, int64_t ldc) {
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows)
    micro_tile<kRows, NV>(k, a + i * a_row, a_row, a_col, b, ldb, alpha, accumulate, c + i * ldc, ldc);
  const float* ar = a + i * a_row;
  float* cr = c + i * ldc;
  switch (m - i) {
    case 5: micro_tile<5, NV>(k, ar, a_row, a_col, b, ldb, alpha, accumulate, cr, ldc); break;
    case 4: micro_tile<4, NV>(k, ar, a_row, a_col, b, ldb, alpha, accumulate, cr, ldc); break;
    case 3: micro_tile<3, NV>(k, ar, a_row, a_col, b, ldb, alpha, accumulate, cr, ldc); break;
    case 2: micro_tile<2, NV>(k, ar, a_row, a_col, b, ldb, alpha, accumulate, cr, ldc); break;
    case 1: micro_tile<1, NV>(k, ar, a_row, a_col, b, ldb, alpha, accumulate, cr, ldc); break;
    default: break;
  }
}
}  // namespace tile_gemm_detail

// C[M, N] = alpha op(A) B + beta C for float tiles (beta 0 or 1); see the notation above.
inline void tile_gemm(bool trans_a, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  using namespace tile_gemm_detail;
  if (m == 0 || n == 0) return;
  const bool accumulate = beta != 0.0f;
  const int64_t a_row = trans_a ? 1 : lda, a_col = trans_a ? lda : 1;
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) panel<4>(m, k, a, a_row, a_col, b + j, ldb, alpha, accumulate, c + j, ldc);
  switch ((n - j) / 16) {
    case 3: panel<3>(m, k, a, a_row, a_col, b + j, ldb, alpha, accumulate, c + j, ldc); j += 48; break;
    case 2: panel<2>(m, k, a, a_row, a_col, b + j, ldb, alpha, accumulate, c + j, ldc); j += 32; break;
    case 1: panel<1>(m, k, a, a_row, a_col, b + j, ldb, alpha, accumulate, c + j, ldc); j += 16; break;
    default: break;
  }
  for (; j < n; ++j)  // the last n % 16 columns, one at a time
    for (int64_t i = 0; i < m; ++i) {
      float total = 0;
      for (int64_t p = 0; p < k; ++p) total += a[i * a_row + p * a_col] * b[p * ldb + j];
      float& out = c[i * ldc + j];
      out = accumulate ? out + alpha * total : alpha * total;
    }
}

// Float64 tiles go to the serial BLAS (the reference and gradcheck dtype; speed matters less).
inline void tile_gemm(bool trans_a, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                      const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm(trans_a, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// dst[c * ldd + r] = src[r * ld + c] for a [rows, cols] source: the transposed B operand of S = Q K^T. Sixteen
// source rows at a time, so that each destination run is contiguous and the source lines stay in cache.
template <typename T>
inline void transpose_into(const T* src, int64_t rows, int64_t cols, int64_t ld, T* dst, int64_t ldd) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t nr = rows - r0 < 16 ? rows - r0 : 16;
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < nr; ++r) dst[c * ldd + r0 + r] = src[(r0 + r) * ld + c];
  }
}

}  // namespace dg::cpu
