// The CUDA backend's devices (docs/cuda.md): per GPU, one CUDA stream that the dygrad stream's launcher launches on,
// an event per ring slot that tells the completer when a Task's work has run, the error word, and a caching allocator
// over the GPU's memory. Host code; kernels take what they need through `launch_context`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "dygrad/backend/cuda/fault.h"
#include "dygrad/runtime/op_def.h"

namespace dg::cuda {

// How many GPUs the driver reports; 0 without a driver or a device (never raises).
int device_count();
// Brings GPUs 0..count-1 up (their streams, allocators, the pinned pool); returns how many are up.
int enable(int count);
int enabled_count();

// What a kernel of Task `task` launches with: its device made current on this thread, its CUDA stream, and its
// fault context (fault.h).
struct LaunchContext {
  cudaStream_t stream;
  FaultContext fault;
};
LaunchContext launch_context(const Task& task);
// After a launch: raises naming the op when the launch itself failed (a bad configuration, no kernel image for this
// GPU); the kernel's own data errors come through the error word instead.
void check_launch(const Task& task);

}  // namespace dg::cuda
