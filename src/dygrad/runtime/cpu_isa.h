// One binary for every x86-64 CPU (docs/ops.md, "One binary for every CPU"): the library is compiled for a
// baseline ISA (x86-64-v2), and the CPU kernels once more for AVX-512 (x86-64-v4) into a plugin,
// libdygrad_cpu_avx512.so, that the library loads when it starts on a CPU with AVX-512; the plugin's kernels
// then replace the baseline ones (runtime/op_def.h, kernel ISA levels). DYGRAD_CPU_ISA=baseline in the
// environment keeps the baseline kernels (tests, side-by-side measurements); cpu_kernel_isa_note() says why the
// plugin was not loaded.
#pragma once
#include <string>

namespace dg {

// "avx512" when the plugin's kernels are in use, else "baseline"; a build for the machine it runs on
// (DYGRAD_ISA=native) says "native".
std::string cpu_kernel_isa();
// Why the plugin was not loaded ("" when it was, or when the build has none).
std::string cpu_kernel_isa_note();
// The CPU's features that matter to dygrad's kernels, by their /proc/cpuinfo names ("avx2 avx512f ... avx512_bf16
// amx_bf16"), and whether it runs bf16 dot products natively.
std::string cpu_features();
// The ISA level the library (not the plugin) is compiled for: "x86-64-v2" (or "x86-64-v3", cmake
// -DDYGRAD_BASELINE_ISA), "native" for a DYGRAD_ISA=native build. A CPU below it stops the process at load time
// with a message (runtime/cpu_baseline.cpp) rather than a SIGILL later.
const char* cpu_baseline_isa();
bool cpu_has_avx512_bf16();
bool cpu_has_amx_bf16();

}  // namespace dg
