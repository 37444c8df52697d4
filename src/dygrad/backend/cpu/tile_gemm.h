// Register-blocked GEMM for the small tiles of the fused attention kernels (64 x 64 x 128 and the like). A
// serial BLAS call repacks both operands on every call and claims its packing buffer under a process-wide
// lock (backend/cpu/matmul.cpp); this reads the operands in place. Measured per core on the 2-core AVX-512
// Xeon VM (CPU time, so robust to load): 120-135 GFLOP/s on the attention tile shapes, about on par with
// serial OpenBLAS calls.
// Single-threaded: the caller owns the tile, so results do not depend on the thread count.
//
// Notation: C[M, N] = alpha * op(A)[M, K] B[K, N] + beta C. B is row-major with unit column stride and
// leading dim ldb; op(A) = A (a[i * lda + p]) or A^T (a[p * lda + i]), read one element at a time and
// broadcast, so neither needs packing. A micro-tile is kRows rows of C by up to kVecs vectors of kLanes columns
// held in registers while p runs over all of K, sized per kernel level to the register file: 6 x 4 zmm of 16
// lanes (24 of AVX-512's 32 registers), 6 x 2 ymm of 8 lanes (12 of AVX2's 16), 6 x 2 xmm of 4 lanes at the
// baseline (12 of SSE's 16), 6 x 3 NEON q registers of 4 lanes on aarch64 (18 of its 32; GCC also holds the 3 B
// vectors and all 6 A elements, 27 in all: 6 x 4 spilled 5 accumulators per step of p in GCC 12's code; neither
// speed is measured, as nothing is under qemu). A vector wider than the ISA's registers is split by the compiler
// into as many registers per accumulator, and the accumulators spill: AVX-512's blocking compiled for AVX2 ran the
// attention at 2% of the GEMM peak. beta is 0 (C is not read) or 1. Each C element is one sum over p in
// increasing order, at every level (one fma per step at avx2, avx512 and neon, math::fmadd_lanes: those compute
// the same bits).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dygrad/backend/cpu/blas.h"
#include "dygrad/math/scalar.h"

namespace dg::cpu {

namespace tile_gemm_detail {
#if defined(__AVX512F__)
constexpr int kLanes = 16, kVecs = 4;
#elif defined(__AVX2__)
constexpr int kLanes = 8, kVecs = 2;
#elif defined(__aarch64__)
constexpr int kLanes = 4, kVecs = 3;
#else
constexpr int kLanes = 4, kVecs = 2;
#endif
constexpr int kRows = 6;
typedef float Vec __attribute__((vector_size(4 * kLanes)));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof(v)); }
// s in every lane: one broadcast from memory (vbroadcastss). `Vec{} + s`, the usual idiom, is an addition the
// compiler must keep (0 + -0 is +0), one more uop per element of A on the FMA ports: the 6 x 2 avx2 tile ran at
// about 2/3 of the FMA peak for it.
inline Vec splat(float s) {
  Vec v;
#pragma GCC unroll 16
  for (int l = 0; l < kLanes; ++l) v[l] = s;
  return v;
}

// C[R, kLanes NV] at c: rows of A at a (element (r, p) at a[r * a_row + p * a_col]), B panel at b.
template <int R, int NV>
inline void micro_tile(int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                       float alpha, bool accumulate, float* c, int64_t ldc) {
  Vec acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = Vec{};
  for (int64_t p = 0; p < k; ++p) {
    Vec bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = load(b + p * ldb + kLanes * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Vec ar = splat(a[r * a_row + p * a_col]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = math::fmadd_lanes(ar, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* out = c + r * ldc + kLanes * v;
      const Vec scaled = acc[r][v] * alpha;
      store(out, accumulate ? load(out) + scaled : scaled);
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
  for (; j + kVecs * kLanes <= n; j += kVecs * kLanes)
    panel<kVecs>(m, k, a, a_row, a_col, b + j, ldb, alpha, accumulate, c + j, ldc);
  switch ((n - j) / kLanes) {  // fewer than kVecs whole vectors of columns left
    case 3: panel<3>(m, k, a, a_row, a_col, b + j, ldb, alpha, accumulate, c + j, ldc); j += 3 * kLanes; break;
    case 2: panel<2>(m, k, a, a_row, a_col, b + j, ldb, alpha, accumulate, c + j, ldc); j += 2 * kLanes; break;
    case 1: panel<1>(m, k, a, a_row, a_col, b + j, ldb, alpha, accumulate, c + j, ldc); j += kLanes; break;
    default: break;
  }
  for (; j < n; ++j)  // the last n % kLanes columns, one at a time
    for (int64_t i = 0; i < m; ++i) {
      float total = 0;
      for (int64_t p = 0; p < k; ++p) total = math::fmadd(a[i * a_row + p * a_col], b[p * ldb + j], total);
      float& out = c[i * ldc + j];
      out = accumulate ? out + alpha * total : alpha * total;
    }
}

// Float64 tiles go to the serial BLAS (the reference and gradcheck dtype; speed matters less).
inline void tile_gemm(bool trans_a, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                      const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm(trans_a, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace tile_gemm_detail {
typedef float Vec4 __attribute__((vector_size(16)));

// The 4 x 4 block of floats at src (rows ld apart) transposed into dst (rows ldd apart): four loads, eight
// shuffles, four stores (every level has 128-bit vectors), where the element loop is 32 scalar moves.
inline void transpose_4x4(const float* src, int64_t ld, float* dst, int64_t ldd) {
  Vec4 r0, r1, r2, r3;
  std::memcpy(&r0, src, 16);
  std::memcpy(&r1, src + ld, 16);
  std::memcpy(&r2, src + 2 * ld, 16);
  std::memcpy(&r3, src + 3 * ld, 16);
  const Vec4 t0 = __builtin_shufflevector(r0, r1, 0, 4, 1, 5), t1 = __builtin_shufflevector(r0, r1, 2, 6, 3, 7);
  const Vec4 t2 = __builtin_shufflevector(r2, r3, 0, 4, 1, 5), t3 = __builtin_shufflevector(r2, r3, 2, 6, 3, 7);
  const Vec4 c0 = __builtin_shufflevector(t0, t2, 0, 1, 4, 5), c1 = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
  const Vec4 c2 = __builtin_shufflevector(t1, t3, 0, 1, 4, 5), c3 = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
  std::memcpy(dst, &c0, 16);
  std::memcpy(dst + ldd, &c1, 16);
  std::memcpy(dst + 2 * ldd, &c2, 16);
  std::memcpy(dst + 3 * ldd, &c3, 16);
}
}  // namespace tile_gemm_detail

// dst[c * ldd + r] = src[r * ld + c] for a [rows, cols] source: the transposed B operand of S = Q K^T. Sixteen
// source rows at a time, so that each destination run is contiguous and the source lines stay in cache; floats
// in 4 x 4 blocks of vector shuffles (the element loop was a tenth of the rotary_attention forward at avx2).
template <typename T>
inline void transpose_into(const T* src, int64_t rows, int64_t cols, int64_t ld, T* dst, int64_t ldd) {
  int64_t r0 = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (; r0 + 4 <= rows; r0 += 4) {
      int64_t c = 0;
      for (; c + 4 <= cols; c += 4) tile_gemm_detail::transpose_4x4(src + r0 * ld + c, ld, dst + c * ldd + r0, ldd);
      for (; c < cols; ++c)
        for (int64_t r = 0; r < 4; ++r) dst[c * ldd + r0 + r] = src[(r0 + r) * ld + c];
    }
  }
  for (; r0 < rows; r0 += 16) {
    const int64_t nr = rows - r0 < 16 ? rows - r0 : 16;
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < nr; ++r) dst[c * ldd + r0 + r] = src[(r0 + r) * ld + c];
  }
}

}  // namespace dg::cpu
