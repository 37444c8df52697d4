// The serial GEMM entry points of the CPU backend: typed calls into the linked BLAS (float32 through oneDNN or
// OpenBLAS, float64 through OpenBLAS), implemented in backend/cpu/fused_blas.cpp. Each call is serial and thread safe;
// several pool threads may call at once (fused_blas.cpp says how OpenBLAS calls are serialised).
#pragma once
#include <cstdint>
#include <string>

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

// bfloat16 x bfloat16 -> bfloat16: C = op(A) op(B) summed in float32 and rounded once (to nearest even), through
// oneDNN's matmul primitive (brgemm kernels where the CPU has them), serial like gemm(); the primitive of each
// problem is made once per thread and cached (fused_blas.cpp). Same condition as gemm_bf16. The matmul path of
// bf16 products without alpha / beta (backend/cpu/matmul.cpp): at the model's K = 384 shapes the primitive runs
// ~1.15x dnnl_gemm_bf16bf16f32 followed by a rounding pass, which it saves (docs/mixed-precision.md).
void matmul_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                 const uint16_t* b, int64_t ldb, uint16_t* c, int64_t ldc);
// The oneDNN implementation matmul_bf16 runs for a problem (e.g. "brg:avx512_core_bf16", "gemm:jit"), for tests
// and benchmarks; "none" without oneDNN.
std::string matmul_bf16_impl(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                             int64_t ldc);

}  // namespace dg::cpu
