// Math shared by the fused LLM kernels: an exp that the compiler vectorises (no -ffast-math, so libm's exp
// stays scalar), the row view of a tensor's last dim, and typed BLAS calls on the serial OpenBLAS.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "dygrad/backend/cpu/reduce.h"

namespace dg::cpu {

// y[i] = exp(x[i]) for x <= 88.3, 0 for x < -87.3 (and for -inf). Range reduction x = k ln2 + r with
// |r| <= ln2/2, a degree-7 Taylor polynomial for exp(r) (truncation below 1e-8 relative), and 2^k built
// from the exponent bits: within 2 ulp of exp in float32, branch-free so that the loop vectorises.
inline void exp_inplace(float* x, int64_t n) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::min(x[i], 88.3f);
    const bool underflow = v < -87.3f;
    const float vc = std::max(v, -87.3f);
    const float k = std::floor(vc * kLog2e + 0.5f);
    const float r = (vc - k * kLn2Hi) - k * kLn2Lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const float two_k = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
    x[i] = underflow ? 0.0f : p * two_k;
  }
}
inline void exp_inplace(double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

// Maximum and sum of n values with 8 independent lanes (so they vectorise), combined in a fixed order.
template <typename T>
inline T max_of(const T* x, int64_t n) {
  T lane[8];
  for (int k = 0; k < 8; ++k) lane[k] = -std::numeric_limits<T>::infinity();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = std::max(lane[k], x[i + k]);
  for (; i < n; ++i) lane[0] = std::max(lane[0], x[i]);
  return std::max(std::max(std::max(lane[0], lane[1]), std::max(lane[2], lane[3])),
                  std::max(std::max(lane[4], lane[5]), std::max(lane[6], lane[7])));
}
template <typename T>
inline T sum_of(const T* x, int64_t n) {
  T lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += x[i + k];
  for (; i < n; ++i) lane[0] += x[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// A tensor [..., N] seen as rows of its last dim: row r starts at row_offset(r) (elements), its elements
// step by `column_stride`. Any strides, broadcast (stride 0) included.
struct RowView {
  ReduceLayout layout;
  int64_t rows, columns, column_stride;
  explicit RowView(const Tensor& t)
      : layout(t, Dims{t.dim() - 1}), rows(layout.num_outputs), columns(t.shape()[t.dim() - 1]),
        column_stride(columns == 1 ? 1 : t.strides()[t.dim() - 1]) {}
  int64_t row_offset(int64_t r) const { return layout.output_offset(r); }
};

// Copies n elements with stride `step` into a contiguous buffer, converting to the compute type.
template <typename C, typename T>
inline void load_row(C* dst, const T* src, int64_t n, int64_t step) {
  if (step == 1) for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<C>(src[i]);
  else for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<C>(src[i * step]);
}

// Row-major serial GEMM: C[M,N] = alpha * op(A) op(B) + beta * C, leading dims in elements. float32 through
// oneDNN or OpenBLAS (sgemm_library() says which), float64 through OpenBLAS (backend/cpu/fused_blas.cpp).
const char* sgemm_library();
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace dg::cpu
