// The spin-wait hint of the busy loops (the stream worker, the pool helpers, the shared-memory collectives): it
// tells the core that the thread waits (x86's pause also spares the loop's exit a memory-order mis-speculation and
// lends the pipeline to a sibling hyperthread).
#pragma once
#if defined(__x86_64__)
#include <immintrin.h>
#else
#include <thread>
#endif

namespace dg {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  // Arm's hint for a spin-wait loop (ACLE's __yield()). Not measured: under qemu-user no timing means anything.
  __asm__ __volatile__("yield" ::: "memory");
#else
  std::this_thread::yield();
#endif
}

}  // namespace dg
