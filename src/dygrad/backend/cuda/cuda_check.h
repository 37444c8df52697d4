// Calls into the CUDA runtime and driver, checked: a failure raises naming the dygrad op or step and CUDA's own
// name and description of the error (host code only; kernels report through the error word, fault.h).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include "dygrad/core/error.h"

namespace dg::cuda {

[[noreturn]] void raise_cuda_error(const char* what, cudaError_t err);
[[noreturn]] void raise_driver_error(const char* what, CUresult err);

// DG_CUDA_CHECK("[copy_device] cudaMemcpyAsync", cudaMemcpyAsync(...)).
#define DG_CUDA_CHECK(what, call)                                                \
  do {                                                                           \
    const cudaError_t dg_cuda_err_ = (call);                                     \
    if (dg_cuda_err_ != cudaSuccess) ::dg::cuda::raise_cuda_error(what, dg_cuda_err_); \
  } while (0)

}  // namespace dg::cuda
