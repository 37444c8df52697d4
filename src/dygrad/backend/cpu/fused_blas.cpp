// Typed serial GEMM calls: the one place that picks the BLAS. float32 goes to oneDNN's dnnl_sgemm when the
// build found it (CMakeLists.txt: DYGRAD_ONEDNN), else to the serial OpenBLAS; float64 always to OpenBLAS.
// Callers (matmul tiles, fused kernels) call these from several pool threads at once: each call is serial
// (oneDNN's OpenMP team is one thread on every calling thread) and thread safe. Debian's openblas-serial
// (0.3.21) is built without USE_LOCKING: blas_memory_alloc claims a packing buffer with an unlocked
// test-then-set, so two threads in ?gemm at once can share a buffer and silently compute wrong results
// (measured: 2.7% of 200,000 concurrent 128^3 sgemm calls on two threads). OpenBLAS calls therefore run one at
// a time, under openblas_mutex: float64 (the reference dtype; oneDNN has no float64 GEMM on the CPU) and the
// float32 fallback without oneDNN are serial across the pool.
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "dygrad/backend/cpu/blas.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/cpu_isa.h"
#include "dygrad/runtime/op_def.h"

#if DYGRAD_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
// Exported by libdnnl 2.x (row-major like dnnl_sgemm) but not declared in its public header; bfloat16_t is a
// struct of one uint16_t, so a pointer to uint16_t is the same argument.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
                                               float alpha, const uint16_t* A, dnnl_dim_t lda, const uint16_t* B,
                                               dnnl_dim_t ldb, float beta, float* C, dnnl_dim_t ldc);
#endif

namespace dg::cpu {

namespace {
std::mutex openblas_mutex;  // see the file's header: the serial OpenBLAS is not thread safe
#if DYGRAD_HAVE_ONEDNN
// DYGRAD_SGEMM=openblas selects OpenBLAS at run time (side-by-side benchmarks); read once.
bool use_onednn() {
  static const bool onednn = [] {
    const char* choice = std::getenv("DYGRAD_SGEMM");
    return choice == nullptr || std::strcmp(choice, "openblas") != 0;
  }();
  return onednn;
}

// oneDNN parallelises a call over omp_get_max_threads() threads of the calling thread: one here, since dygrad's
// pool already runs one GEMM tile per thread. Set once per thread (the OpenMP setting is per thread).
void make_onednn_serial() {
  thread_local bool serial = false;
  if (!serial) {
    omp_set_num_threads(1);
    serial = true;
  }
}
#endif
}  // namespace

const char* sgemm_library() {
#if DYGRAD_HAVE_ONEDNN
  if (use_onednn()) return "onednn";
#endif
  return "openblas";
}

const char* bf16_gemm_library() {
#if DYGRAD_HAVE_ONEDNN
  static const bool native = [] {
    const char* choice = std::getenv("DYGRAD_BF16_GEMM");
    if (choice != nullptr && std::strcmp(choice, "convert") == 0) return false;
    // oneDNN picks its own kernels at run time; dygrad only decides whether to call it: without AVX512-BF16
    // oneDNN emulates bf16 dot products and is slower than converting to float32 (runtime/cpu_isa.h).
    return use_onednn() && dg::cpu_has_avx512_bf16();
  }();
  if (native) return "onednn";
#endif
  return nullptr;
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#if DYGRAD_HAVE_ONEDNN
  make_onednn_serial();
  const dnnl_status_t status = dnnl_gemm_bf16bf16f32(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda,
                                                     b, ldb, beta, c, ldc);
  DG_CHECK(status == dnnl_success, Runtime, "[matmul] oneDNN bf16 gemm failed (status ", static_cast<int>(status),
           ") for m=", m, " n=", n, " k=", k);
#else
  (void)trans_a, (void)trans_b, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c,
      (void)ldc;
  fail(ErrorKind::Runtime, "[matmul] internal error: bf16 GEMM called without oneDNN");
#endif
}

namespace {
[[maybe_unused]] const bool bf16_reported =
    (set_backend_info(Device::Type::CPU, "bf16_gemm", bf16_gemm_library() ? "onednn" : "convert"), true);
[[maybe_unused]] const bool sgemm_reported = (set_backend_info(Device::Type::CPU, "sgemm", sgemm_library()), true);
}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#if DYGRAD_HAVE_ONEDNN
  if (use_onednn()) {
    make_onednn_serial();
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                                            beta, c, ldc);
    DG_CHECK(status == dnnl_success, Runtime, "[matmul] oneDNN sgemm failed (status ", static_cast<int>(status),
             ") for m=", m, " n=", n, " k=", k);
    return;
  }
#endif
  std::lock_guard<std::mutex> lock(openblas_mutex);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  std::lock_guard<std::mutex> lock(openblas_mutex);
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace dg::cpu
