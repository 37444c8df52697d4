// Typed GEMM calls on the serial OpenBLAS for the fused kernels, which call it from several pool threads
// at once, and the lock that makes such concurrent calls safe.
#include <cblas.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "dygrad/backend/cpu/fused_math.h"

namespace dg::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace dg::cpu

// --- concurrent calls into the serial OpenBLAS ----------------------------------------------------------
// Debian's serial OpenBLAS is built without USE_LOCKING: blas_memory_alloc hands out packing buffers from a
// shared table without a lock, so two threads in ?gemm at once may share a buffer and get wrong results.
// OpenBLAS reaches blas_memory_alloc/free through its PLT, so definitions in libdygrad interpose them; these
// take a mutex around the claim and the release only. The matmul family (backend/cpu/matmul.cpp) defines
// the same interposition; these definitions are weak so that, with both linked, that one is used and the
// two never clash. TODO(merge): delete this block once matmul.cpp provides it.
namespace {
struct BlasBufferLock {
  void* (*claim)(int) = nullptr;
  void (*release)(void*) = nullptr;
  std::mutex mutex;
  BlasBufferLock() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&cblas_sgemm), &info) != 0 && info.dli_fname != nullptr) {
      if (void* library = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) {
        claim = reinterpret_cast<void* (*)(int)>(dlsym(library, "blas_memory_alloc"));
        release = reinterpret_cast<void (*)(void*)>(dlsym(library, "blas_memory_free"));
      }
    }
    if (!claim || !release) {
      claim = reinterpret_cast<void* (*)(int)>(dlsym(RTLD_NEXT, "blas_memory_alloc"));
      release = reinterpret_cast<void (*)(void*)>(dlsym(RTLD_NEXT, "blas_memory_free"));
    }
    if (!claim || !release) {
      std::fputs("dygrad: OpenBLAS's blas_memory_alloc/blas_memory_free not found\n", stderr);
      std::abort();
    }
  }
  static BlasBufferLock& instance() {
    static BlasBufferLock lock;
    return lock;
  }
};
}  // namespace

extern "C" __attribute__((weak)) void* blas_memory_alloc(int position) {
  BlasBufferLock& lock = BlasBufferLock::instance();
  std::lock_guard<std::mutex> guard(lock.mutex);
  return lock.claim(position);
}

extern "C" __attribute__((weak)) void blas_memory_free(void* buffer) {
  BlasBufferLock& lock = BlasBufferLock::instance();
  std::lock_guard<std::mutex> guard(lock.mutex);
  lock.release(buffer);
}
