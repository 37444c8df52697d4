// Loading the AVX-512 kernel plugin at start-up (runtime/cpu_isa.h).
#include "dygrad/runtime/cpu_isa.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "dygrad/runtime/op_def.h"

namespace dg {

namespace {

bool cpu_has_avx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // x86-64-v4: what the plugin is compiled for (libgcc also checks that the OS saves the AVX-512 state).
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

#if defined(__x86_64__)
// CPUID leaf 7 sub-leaf 1 EAX bit 5: AVX512_BF16; leaf 7 sub-leaf 0 EDX bit 22: AMX-BF16 (GCC 12's
// __builtin_cpu_supports knows neither).
bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  unsigned max_leaf = 0;
  __asm__("cpuid" : "=a"(max_leaf), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(0), "c"(0));
  if (max_leaf < leaf) return false;
  __asm__("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
  return (r[reg] >> bit) & 1u;
}
#endif

struct IsaState {
  std::string isa = "baseline";
  std::string note;
};

std::string library_directory() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cpu_kernel_isa), &info) || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

IsaState load_plugin() {
  IsaState s;
#if defined(DYGRAD_NATIVE_BUILD)
  s.isa = "native";
  return s;
#elif !defined(DYGRAD_CPU_PLUGIN)
  s.note = "this build has no AVX-512 kernel plugin";
  return s;
#else
  const char* want = std::getenv("DYGRAD_CPU_ISA");
  if (want && std::strcmp(want, "baseline") == 0) {
    s.note = "DYGRAD_CPU_ISA=baseline";
    return s;
  }
  if (!cpu_has_avx512()) {
    s.note = "the CPU has no AVX-512 (x86-64-v4)";
    return s;
  }
  const std::string path = library_directory() + "/" DYGRAD_CPU_PLUGIN;
  // RTLD_LOCAL, and the plugin's own symbols are hidden: its copies of inline functions, compiled for AVX-512,
  // never stand in for the library's. Its kernels register themselves from its static initialisers.
  if (!dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    const char* why = dlerror();
    s.note = "could not load " + path + ": " + (why ? why : "unknown error");
    return s;
  }
  s.isa = "avx512";
  return s;
#endif
}

IsaState& state() {
  static IsaState s = load_plugin();
  return s;
}

// At load time, before any op runs (kernels attach by ISA level, whatever the initialisation order).
[[maybe_unused]] const bool loaded = (state(), true);

}  // namespace

std::string cpu_kernel_isa() { return state().isa; }
std::string cpu_kernel_isa_note() { return state().note; }

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  return cpu_has_avx512() && cpuid_bit(7, 1, 0, 5);
#else
  return false;
#endif
}

bool cpu_has_amx_bf16() {
#if defined(__x86_64__)
  return cpuid_bit(7, 0, 3, 22);
#else
  return false;
#endif
}

std::string cpu_features() {
  std::string out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  auto add = [&](bool on, const char* name) {
    if (on) out += (out.empty() ? "" : " ") + std::string(name);
  };
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  add(__builtin_cpu_supports("avx512vnni"), "avx512_vnni");
  add(cpu_has_avx512_bf16(), "avx512_bf16");
  add(cpu_has_amx_bf16(), "amx_bf16");
#endif
  return out;
}

}  // namespace dg
