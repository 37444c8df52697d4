// The serial GEMM entry points of the CPU backend: typed calls into the linked BLAS (float32 through oneDNN or
// OpenBLAS, float64 through OpenBLAS), implemented in backend/cpu/fused_blas.cpp. Each call is serial and thread safe;
// several pool threads may call at once (fused_blas.cpp says how OpenBLAS calls are serialised).
#pragma once
#include <cstdint>

namespace dg::cpu {

// Row-major serial GEMM: C[M,N] = alpha * op(A) op(B) + beta * C, leading dims in elements. sgemm_library()
// says which library the float32 call reaches ("onednn" or "openblas").
const char* sgemm_library();
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// bfloat16 x bfloat16 -> float32 with float32 accumulation: C = alpha * op(A) op(B) + beta * C through oneDNN's
// dnnl_gemm_bf16bf16f32, serial like gemm(). Only call when bf16_gemm_library() is not null: oneDNN is linked and
// the CPU has AVX512-BF16 (checked at run time, __builtin_cpu_supports, so a binary built elsewhere keeps the
// portable path: convert to float32 and sgemm, backend/cpu/matmul.cpp). DYGRAD_BF16_GEMM=convert forces the
// portable path (side-by-side benchmarks).
const char* bf16_gemm_library();  // "onednn" or nullptr
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace dg::cpu
