// Loading the CPU kernel plugin of the highest level the CPU runs at start-up (runtime/cpu_isa.h).
#include "dygrad/runtime/cpu_isa.h"

#include <dlfcn.h>
#include <unistd.h>
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dygrad/runtime/op_def.h"

namespace dg {

namespace {

// x86-64-v4's AVX-512 subsets: what the avx512 plugin is compiled for (libgcc also checks that the OS saves the
// AVX-512 state).
[[maybe_unused]] bool cpu_has_avx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

// x86-64-v3: AVX, AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE (and the OS saving the YMM state): the avx2 plugin's.
[[maybe_unused]] bool cpu_has_avx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("x86-64-v3");
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

// The kernel levels, lowest first: the library's own kernels, then each plugin this build has. A plugin's
// kernels register at its level (DG_KERNEL_ISA) and replace the lower ones (runtime/op_def.h).
struct Level {
  const char* name;    // DYGRAD_CPU_ISA's value, kernel_isa()'s answer
  const char* plugin;  // the module's file name beside the library; null: the library's own kernels
  bool (*cpu_runs)();  // whether this CPU runs its code
  const char* lacks;   // why not, for the note
};

bool always() { return true; }

#if defined(__aarch64__)
// armv8-a: Advanced SIMD (NEON) and FP are part of every aarch64 Linux CPU; one level, the library's own kernels.
constexpr Level kLevels[] = {
    {"neon", nullptr, always, ""},
};
// The names DYGRAD_CPU_ISA accepts, lowest first; x86-64's names are not among them (ignored with a warning).
constexpr const char* kLevelNames[] = {"neon"};
#else
constexpr Level kLevels[] = {
    {"baseline", nullptr, always, ""},
#if defined(DYGRAD_CPU_PLUGIN_AVX2)
    {"avx2", DYGRAD_CPU_PLUGIN_AVX2, cpu_has_avx2, "the CPU has no AVX2 and FMA (x86-64-v3)"},
#endif
#if defined(DYGRAD_CPU_PLUGIN_AVX512)
    {"avx512", DYGRAD_CPU_PLUGIN_AVX512, cpu_has_avx512, "the CPU has no AVX-512 (x86-64-v4)"},
#endif
};
// The names DYGRAD_CPU_ISA accepts, lowest first, whether or not this build has a plugin for them.
constexpr const char* kLevelNames[] = {"baseline", "avx2", "avx512"};
#endif
constexpr int kNumLevels = static_cast<int>(sizeof(kLevels) / sizeof(kLevels[0]));
constexpr int kNumLevelNames = static_cast<int>(sizeof(kLevelNames) / sizeof(kLevelNames[0]));

int level_rank(const char* name) {
  for (int i = 0; i < kNumLevelNames; ++i)
    if (std::strcmp(name, kLevelNames[i]) == 0) return i;
  return -1;
}

std::string level_names() {  // "baseline, avx2, avx512"
  std::string out;
  for (const char* name : kLevelNames) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

struct IsaState {
  std::string isa = kLevels[0].name;
  std::string note;
};

// The level whose plugin dlopen is loading, while it loads: the plugin's static initialisers may ask for the level
// (fused_blas.cpp does), and state() is still being initialised then. Constant-initialised, so it is null before
// any initialiser runs.
std::atomic<const char*> loading_level{nullptr};

std::string library_directory() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cpu_kernel_isa), &info) || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

bool plugin_present(const Level& level) {
  return !level.plugin || access((library_directory() + "/" + level.plugin).c_str(), R_OK) == 0;
}

std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : b.empty() ? a : a + "; " + b; }

IsaState load_plugin() {
  IsaState s;
#if defined(DYGRAD_NATIVE_BUILD)
  s.isa = "native";
  return s;
#else
  // The highest level allowed: DYGRAD_CPU_ISA caps it (a level this build has no plugin for caps at the next lower).
  int cap = kNumLevels - 1;
  const char* want = std::getenv("DYGRAD_CPU_ISA");
  if (want && *want) {
    const int wanted = level_rank(want);
    if (wanted < 0) {
      s.note = std::string("DYGRAD_CPU_ISA=") + want + " is not a kernel level (" + level_names() + "); ignored";
      std::fprintf(stderr, "dygrad: %s\n", s.note.c_str());
    } else {
      while (cap > 0 && level_rank(kLevels[cap].name) > wanted) --cap;
      if (cap < kNumLevels - 1) s.note = std::string("DYGRAD_CPU_ISA=") + want;
    }
  }
  for (int i = cap; i > 0; --i) {
    const Level& level = kLevels[i];
    if (!level.cpu_runs()) {
      s.note = join(s.note, level.lacks);
      continue;
    }
    const std::string path = library_directory() + "/" + level.plugin;
    // RTLD_LOCAL, and the plugin's own symbols are hidden: its copies of inline functions, compiled for its ISA,
    // never stand in for the library's. Its kernels register themselves from its static initialisers.
    loading_level = level.name;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    loading_level = nullptr;
    if (!handle) {
      const char* why = dlerror();
      s.note = join(s.note, "could not load " + path + ": " + (why ? why : "unknown error"));
      continue;
    }
    s.isa = level.name;
    return s;
  }
#if !defined(__aarch64__)  // aarch64 has one level: its kernels are the highest there are
  if (kNumLevels == 1) s.note = join(s.note, "this build has no kernel plugin");
#endif
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

std::string cpu_kernel_isa() {
  if (const char* level = loading_level.load()) return level;
  return state().isa;
}
std::string cpu_kernel_isa_note() { return state().note; }

std::vector<std::string> cpu_kernel_levels() {
#if defined(DYGRAD_NATIVE_BUILD)
  return {"native"};
#else
  std::vector<std::string> out;
  for (const Level& level : kLevels)
    if (level.cpu_runs() && plugin_present(level)) out.emplace_back(level.name);
  return out;
#endif
}

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
  [[maybe_unused]] auto add = [&](bool on, const char* name) {
    if (on) out += (out.empty() ? "" : " ") + std::string(name);
  };
#if defined(__x86_64__)
  __builtin_cpu_init();
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  add(__builtin_cpu_supports("avx512vnni"), "avx512_vnni");
  add(cpu_has_avx512_bf16(), "avx512_bf16");
  add(cpu_has_amx_bf16(), "amx_bf16");
#elif defined(__aarch64__)
  // The auxiliary vector's HWCAP bits, by /proc/cpuinfo's names: FP and Advanced SIMD (every armv8-a CPU), half
  // precision arithmetic (armv8.2-a), int8 dot products, SVE and SVE2, bf16 (armv8.6-a), int8 matrix multiply, SME;
  // then the SVE vector length in bits ("sve256": torch's SVE256 capability), which the kernel chooses per process.
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  add(hwcap & HWCAP_FP, "fp");
  add(hwcap & HWCAP_ASIMD, "asimd");
  add(hwcap & HWCAP_FPHP, "fphp");
  add(hwcap & HWCAP_ASIMDHP, "asimdhp");
  add(hwcap & HWCAP_ASIMDDP, "asimddp");
  add(hwcap & HWCAP_ASIMDFHM, "asimdfhm");
  add(hwcap & HWCAP_SVE, "sve");
  add(hwcap2 & HWCAP2_SVE2, "sve2");
  add(hwcap2 & HWCAP2_BF16, "bf16");
  add(hwcap2 & HWCAP2_SVEBF16, "svebf16");
  add(hwcap2 & HWCAP2_I8MM, "i8mm");
  add(hwcap2 & HWCAP2_SME, "sme");
  if (hwcap & HWCAP_SVE) {
    const int vl = prctl(PR_SVE_GET_VL);  // bytes in the low bits, flags above
    if (vl > 0) add(true, ("sve" + std::to_string(8 * (vl & PR_SVE_VL_LEN_MASK))).c_str());
  }
#endif
  return out;
}

}  // namespace dg
