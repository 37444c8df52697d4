// One binary for every CPU (docs/ops.md, "One binary for every CPU"). On x86-64 the library is compiled for a
// baseline ISA (x86-64-v2), and the CPU kernels once more for each higher level into a plugin beside it:
// libdygrad_cpu_avx2.so (x86-64-v3: AVX2, FMA) and libdygrad_cpu_avx512.so (x86-64-v4). When it starts, the
// library loads the plugin of the highest level the CPU runs; its kernels then replace the baseline ones
// (runtime/op_def.h, kernel ISA levels). DYGRAD_CPU_ISA=baseline|avx2|avx512 in the environment caps the level
// (tests, side-by-side measurements); cpu_kernel_isa_note() says why a higher level was not loaded. On aarch64
// the library is compiled for armv8-a and has one level, "neon" (128-bit Advanced SIMD with FMA), and no plugin.
#pragma once
#include <string>
#include <vector>

namespace dg {

// The level whose kernels are in use: "avx512", "avx2" or "baseline" ("neon" on aarch64); a build for the machine
// it runs on (DYGRAD_ISA=native) says "native". While a plugin loads, its own level (its static initialisers may
// ask).
std::string cpu_kernel_isa();
// Why no higher level was loaded ("" when the highest the build has was).
std::string cpu_kernel_isa_note();
// The levels this build has and this CPU runs, lowest first, whatever DYGRAD_CPU_ISA says ({"native"} for a
// native build): the levels `make test-levels` runs the kernel-sensitive tests at.
std::vector<std::string> cpu_kernel_levels();
// The CPU's features that matter to dygrad's kernels, by their /proc/cpuinfo names ("avx2 avx512f ... avx512_bf16
// amx_bf16"; on aarch64 "fp asimd fphp asimdhp ... sve sve2 bf16 ..." and "sve256", the SVE vector length in
// bits), and whether it runs bf16 dot products natively.
std::string cpu_features();
// The ISA level the library (not the plugin) is compiled for: "x86-64-v2" (or "x86-64-v3", cmake
// -DDYGRAD_BASELINE_ISA), "armv8-a" on aarch64, "native" for a DYGRAD_ISA=native build. An x86-64 CPU below it
// stops the process at load time with a message (runtime/cpu_baseline.cpp) rather than a SIGILL later.
const char* cpu_baseline_isa();
bool cpu_has_avx512_bf16();
bool cpu_has_amx_bf16();

}  // namespace dg
