// The CPU's kernel level and features as runtime/cpu_isa.cpp reports them (docs/ops.md, "One binary for every
// CPU"): the levels of this architecture, lowest first; the features the CPU reports itself. Two tests read what to
// expect from the environment, set by the ctest entries that run them in a process of their own
// (tests/cpp/CMakeLists.txt: DYGRAD_CPU_ISA, and on aarch64 qemu's CPU models); in the plain run they skip.
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "dygrad/runtime/cpu_isa.h"
#include "harness.h"

namespace dg::test {
namespace {

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

bool native_build() { return std::string(cpu_baseline_isa()) == "native"; }

TEST(CpuIsa, TheLevelsAreThisArchitecturesLowestFirstAndTheHighestRuns) {
  const std::vector<std::string> levels = cpu_kernel_levels();
  ASSERT_FALSE(levels.empty());
  if (native_build()) {
    EXPECT_EQ(levels, std::vector<std::string>{"native"});
    EXPECT_EQ(cpu_kernel_isa(), "native");
    return;
  }
#if defined(__aarch64__)
  EXPECT_EQ(levels, std::vector<std::string>{"neon"});
  EXPECT_EQ(std::string(cpu_baseline_isa()), "armv8-a");
#else
  const std::vector<std::string> known = {"baseline", "avx2", "avx512"};
  EXPECT_EQ(levels.front(), "baseline");
  size_t next = 0;  // a subsequence of the known levels, in their order
  for (const std::string& level : levels) {
    while (next < known.size() && known[next] != level) ++next;
    EXPECT_LT(next, known.size()) << level << " is not a level, or out of order";
  }
#endif
  const char* cap = std::getenv("DYGRAD_CPU_ISA");
  if (!cap || !*cap) {  // uncapped: the highest level the build has and the CPU runs, and nothing to explain
    EXPECT_EQ(cpu_kernel_isa(), levels.back()) << cpu_kernel_isa_note();
    EXPECT_EQ(cpu_kernel_isa_note(), "");
  }
}

TEST(CpuIsa, TheFeaturesAreTheCpusOwn) {
  const std::vector<std::string> features = words(cpu_features());
  const std::set<std::string> present(features.begin(), features.end());
  EXPECT_EQ(present.size(), features.size()) << "a feature named twice: " << cpu_features();
#if defined(__aarch64__)
  // FP and Advanced SIMD are part of armv8-a; each other name is the HWCAP bit of the same name, and "sveN" is the
  // SVE vector length, present exactly when SVE is.
  EXPECT_TRUE(present.count("fp") && present.count("asimd")) << cpu_features();
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  EXPECT_EQ(present.count("fphp") == 1, (hwcap & HWCAP_FPHP) != 0) << cpu_features();
  EXPECT_EQ(present.count("sve") == 1, (hwcap & HWCAP_SVE) != 0) << cpu_features();
  EXPECT_EQ(present.count("bf16") == 1, (hwcap2 & HWCAP2_BF16) != 0) << cpu_features();
  int vector_lengths = 0;
  for (const std::string& f : features) {
    if (f == "sve2" || f.size() <= 3 || f.compare(0, 3, "sve") != 0 ||
        f.find_first_not_of("0123456789", 3) != std::string::npos)
      continue;
    const int bits = std::atoi(f.c_str() + 3);
    EXPECT_TRUE(bits >= 128 && bits <= 2048 && bits % 128 == 0) << f;
    ++vector_lengths;
  }
  EXPECT_EQ(vector_lengths, present.count("sve") ? 1 : 0) << cpu_features();
  EXPECT_FALSE(cpu_has_avx512_bf16());
  EXPECT_FALSE(cpu_has_amx_bf16());
#elif defined(__x86_64__)
  __builtin_cpu_init();
  EXPECT_EQ(present.count("avx2") == 1, __builtin_cpu_supports("avx2") != 0) << cpu_features();
  EXPECT_EQ(present.count("avx512f") == 1, __builtin_cpu_supports("avx512f") != 0) << cpu_features();
  EXPECT_EQ(present.count("avx512_bf16") == 1, cpu_has_avx512_bf16()) << cpu_features();
#endif
}

// Run by ctest with DYGRAD_CPU_ISA set to this architecture's level, and to another's: the one caps (a level the
// build has), the other is ignored with a warning that names the levels there are.
TEST(CpuIsa, TheEnvironmentCapsTheLevelOrIsIgnored) {
  const char* cap = std::getenv("DYGRAD_CPU_ISA");
  if (!cap || !*cap) GTEST_SKIP() << "run by ctest with DYGRAD_CPU_ISA set (tests/cpp/CMakeLists.txt)";
  if (native_build()) GTEST_SKIP() << "a native build has one level";
  const std::vector<std::string> levels = cpu_kernel_levels();
  const std::string note = cpu_kernel_isa_note();
  bool known = false;
  for (const std::string& level : levels) known = known || level == cap;
  if (known) {
    EXPECT_EQ(cpu_kernel_isa(), cap) << note;
    EXPECT_EQ(note.find("ignored"), std::string::npos) << note;
  } else {
    EXPECT_EQ(cpu_kernel_isa(), levels.back()) << note;
    EXPECT_NE(note.find(std::string("DYGRAD_CPU_ISA=") + cap + " is not a kernel level ("), std::string::npos)
        << note;
    EXPECT_NE(note.find(levels.front()), std::string::npos) << "the note names the levels: " << note;
  }
}

// Run by ctest under qemu's CPU models (tests/cpp/CMakeLists.txt, aarch64 builds): exactly the features the model has.
TEST(CpuIsa, TheFeaturesAreTheExpectedOnes) {
  const char* expected = std::getenv("DYGRAD_EXPECT_CPU_FEATURES");
  if (!expected) GTEST_SKIP() << "run by ctest under a CPU model, with DYGRAD_EXPECT_CPU_FEATURES set";
  EXPECT_EQ(cpu_features(), expected);
}

}  // namespace
}  // namespace dg::test
