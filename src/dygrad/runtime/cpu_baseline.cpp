// The portable library's baseline check (docs/ops.md, "One binary for every CPU"). The library and the bindings
// are compiled for DYGRAD_BASELINE_ISA (x86-64-v2: SSE4.2, POPCNT; or x86-64-v3: AVX2, FMA, BMI1/2 ...); on a CPU
// below it the first such instruction of a static initialiser or an op would kill the process with SIGILL,
// wherever it happens to be.
// This file alone is compiled for plain x86-64 (CMakeLists.txt) and includes nothing of dygrad's (no inline
// function of the library is instantiated here), and its constructor runs before every other initialiser of the
// library (priority 101: .init_array.00101 precedes the unprioritised C++ initialisers; the bindings' initialisers
// run after the library's): it checks the CPU and stops the process with a message that says what is missing.
namespace dg {
// Declared in runtime/cpu_isa.h (not included: nothing of dygrad's is compiled for plain x86-64).
const char* cpu_baseline_isa();
#if defined(DYGRAD_BASELINE_ISA)
const char* cpu_baseline_isa() { return DYGRAD_BASELINE_ISA; }
#else
const char* cpu_baseline_isa() { return "native"; }
#endif
}  // namespace dg

#if defined(DYGRAD_BASELINE_ISA) && defined(__x86_64__)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

#define DG_BASELINE_FEATURE(name) {name, __builtin_cpu_supports(name) != 0}

__attribute__((constructor(101))) void dygrad_check_baseline_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports(DYGRAD_BASELINE_ISA)) return;
  struct Feature {
    const char* name;
    bool present;
  };
  // x86-64-v2's and x86-64-v3's features (the psABI's levels); "avx" also checks that the OS saves the YMM state.
  const Feature v2[] = {DG_BASELINE_FEATURE("popcnt"), DG_BASELINE_FEATURE("sse4.2"), DG_BASELINE_FEATURE("sse4.1"),
                        DG_BASELINE_FEATURE("ssse3"), DG_BASELINE_FEATURE("cmpxchg16b"), DG_BASELINE_FEATURE("lahf_lm")};
  const Feature v3[] = {DG_BASELINE_FEATURE("avx"),  DG_BASELINE_FEATURE("avx2"),  DG_BASELINE_FEATURE("fma"),
                        DG_BASELINE_FEATURE("bmi"),  DG_BASELINE_FEATURE("bmi2"),  DG_BASELINE_FEATURE("f16c"),
                        DG_BASELINE_FEATURE("lzcnt"), DG_BASELINE_FEATURE("movbe")};
  char missing[256] = "";
  auto note = [&](const Feature& f) {
    if (f.present) return;
    if (missing[0]) std::strncat(missing, " ", sizeof(missing) - std::strlen(missing) - 1);
    std::strncat(missing, f.name, sizeof(missing) - std::strlen(missing) - 1);
  };
  for (const Feature& f : v2) note(f);
  if (std::strcmp(DYGRAD_BASELINE_ISA, "x86-64-v3") == 0)
    for (const Feature& f : v3) note(f);
  const bool v3_baseline = std::strcmp(DYGRAD_BASELINE_ISA, "x86-64-v3") == 0;
  char message[768];
  const int n = std::snprintf(message, sizeof(message),
                              "dygrad: this build of libdygrad needs an %s CPU, and this CPU lacks: %s.\n"
                              "dygrad: rebuild it for this machine (cmake -DDYGRAD_ISA=native)%s.\n",
                              DYGRAD_BASELINE_ISA, missing[0] ? missing : "(an ISA feature)",
                              v3_baseline && __builtin_cpu_supports("x86-64-v2")
                                  ? " or for the x86-64-v2 baseline (cmake -DDYGRAD_BASELINE_ISA=x86-64-v2)"
                                  : "");
  if (n > 0) {
    ssize_t ignored = write(STDERR_FILENO, message, std::strlen(message));
    (void)ignored;
  }
  _exit(EXIT_FAILURE);  // nothing of the library has run yet: no destructor, no atexit handler of ours to run
}

}  // namespace
#endif
