// The device's error word (docs/cuda.md, "Errors"; docs/async-errors.md). A kernel that validates data (an index in
// range, a class target) cannot throw, and a trap would kill the CUDA context: it records the fault and does nothing
// more. Every kernel checks the word first and does nothing while it is set, so the Tasks launched between a fault
// and the launcher's clear (runtime/stream.h, DeviceCompletion::clear_fault) leave their outputs unwritten, as the
// CPU's poisoned-input rule leaves a skipped Task's. Compiled by nvcc (kernels) and the host compiler (the backend).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define DG_CUDA_HD __host__ __device__
#else
#define DG_CUDA_HD
#endif

namespace dg::cuda {

// What a fault records, in pinned host memory mapped into the device (cudaHostAllocMapped): the completer reads it
// when the Task's event has completed, without a copy.
// The code names the message and the error kind, as the CPU kernel of the same op words them
// (cuda_device.cpp, describe).
enum FaultCode : int32_t {
  kFaultNone = 0,
  kFaultIndexSelect = 1,     // index_select: IndexError; value: the index, bound: the dim's size, dim
  kFaultGather = 2,          // gather: RuntimeError; the same fields
  kFaultEmbedding = 3,       // embedding: IndexError; value: the index, bound: the table's rows
  kFaultTargetOutOfRange = 4,  // value: the class target, bound: the number of classes
};
struct HostFault {
  volatile unsigned long long seq;  // the Task that faulted (0: none); written last
  volatile long long value;
  volatile long long bound;
  volatile int32_t code;
  volatile int32_t dim;
};

// What each kernel receives: the stream's word in device memory (0, or the faulting Task's sequence number: sticky
// until the launcher clears it), the host record, and its own Task's sequence number.
struct FaultContext {
  unsigned long long* word;
  HostFault* host;
  unsigned long long seq;
};

#if defined(__CUDACC__)
// True when an earlier kernel of the stream faulted: the caller returns without writing anything.
__device__ inline bool stream_faulted(const FaultContext& f) { return *static_cast<volatile unsigned long long*>(f.word) != 0; }

// Records a fault once per stream (the first kernel thread to fail wins; the others' are dropped).
__device__ inline void record_fault(const FaultContext& f, FaultCode code, long long value, long long bound,
                                    int dim = 0) {
  if (atomicCAS(f.word, 0ull, f.seq) != 0ull) return;
  f.host->value = value;
  f.host->bound = bound;
  f.host->code = code;
  f.host->dim = dim;
  __threadfence_system();
  f.host->seq = f.seq;
}
#endif

}  // namespace dg::cuda
