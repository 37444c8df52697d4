"""torch.backends.cpu: the SIMD capability string torch reports, here the one of the kernels dygrad runs
(docs/ops.md, "One binary for every CPU"), and dygrad's own account of the choice."""
from .. import _C

# dygrad's kernel levels and torch's names for its own (ATEN_CPU_CAPABILITY takes them in lower case). On aarch64
# torch's DEFAULT is its NEON code, as dygrad's one level is.
_CAPABILITY = {"baseline": "DEFAULT", "avx2": "AVX2", "avx512": "AVX512", "neon": "DEFAULT"}


def get_cpu_capability():
    """"AVX512", "AVX2" or "DEFAULT": the level of the kernels in use (a native build: the best the CPU has), as
    torch names its capabilities; "DEFAULT" on aarch64 (NEON), "SVE256" for a native build on a CPU with 256-bit
    SVE."""
    isa, _, features = _C._cpu_kernel_isa()
    if isa == "native":
        flags = features.split()
        if "asimd" in flags:  # aarch64
            return "SVE256" if "sve256" in flags else "DEFAULT"
        return "AVX512" if "avx512f" in flags else "AVX2" if {"avx2", "fma"} <= set(flags) else "DEFAULT"
    return _CAPABILITY[isa]


def kernel_isa():
    """(isa, note, features): "avx512", "avx2", "baseline", "neon" (aarch64) or "native"; why no higher level was
    loaded ("" if the highest was; "DYGRAD_CPU_ISA=avx2" where the environment capped it); the CPU's flags that
    matter to the kernels ("avx2 fma avx512f ... avx512_bf16 amx_bf16"; on aarch64 "fp asimd ... sve sve256 ...",
    sve256 being the SVE vector length in bits)."""
    return _C._cpu_kernel_isa()


def kernel_levels():
    """The kernel levels this build has and this CPU runs, lowest first, whatever DYGRAD_CPU_ISA says: e.g.
    ("baseline", "avx2", "avx512") on an AVX-512 machine; ("neon",) on aarch64; ("native",) for a native build.
    DYGRAD_CPU_ISA=LEVEL in the environment of a new process runs it at LEVEL (`make test-levels` runs the
    kernel-sensitive tests at each)."""
    return _C._cpu_kernel_levels()


def baseline_isa():
    """The ISA level the library is compiled for: "x86-64-v2" (SSE4.2, POPCNT: the portable build's default),
    "x86-64-v3" (AVX2, FMA, BMI2: cmake -DDYGRAD_BASELINE_ISA=x86-64-v3), "armv8-a" (aarch64: every 64-bit Arm
    CPU) or "native" (cmake -DDYGRAD_ISA=native). On an x86-64 CPU below it the library stops the process when it
    loads, with a message naming the missing features."""
    return _C._cpu_baseline_isa()
