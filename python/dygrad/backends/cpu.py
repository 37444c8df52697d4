"""torch.backends.cpu: the SIMD capability string torch reports, here the one of the kernels dygrad runs
(docs/ops.md, "One binary for every CPU"), and dygrad's own account of the choice."""
from .. import _C

# dygrad's kernel levels and torch's names for its own (ATEN_CPU_CAPABILITY takes them in lower case).
_CAPABILITY = {"baseline": "DEFAULT", "avx2": "AVX2", "avx512": "AVX512"}


def get_cpu_capability():
    """"AVX512", "AVX2" or "DEFAULT": the level of the kernels in use (a native build: the best the CPU has), as
    torch names its capabilities."""
    isa, _, features = _C._cpu_kernel_isa()
    if isa == "native":
        flags = features.split()
        return "AVX512" if "avx512f" in flags else "AVX2" if {"avx2", "fma"} <= set(flags) else "DEFAULT"
    return _CAPABILITY[isa]


def kernel_isa():
    """(isa, note, features): "avx512", "avx2", "baseline" or "native"; why no higher level was loaded ("" if the
    highest was; "DYGRAD_CPU_ISA=avx2" where the environment capped it); the CPU's flags that matter to the kernels
    ("avx2 fma avx512f ... avx512_bf16 amx_bf16")."""
    return _C._cpu_kernel_isa()


def kernel_levels():
    """The kernel levels this build has and this CPU runs, lowest first, whatever DYGRAD_CPU_ISA says: e.g.
    ("baseline", "avx2", "avx512") on an AVX-512 machine; ("native",) for a native build. DYGRAD_CPU_ISA=LEVEL
    in the environment of a new process runs it at LEVEL (`make test-levels` runs the kernel-sensitive tests at
    each)."""
    return _C._cpu_kernel_levels()


def baseline_isa():
    """The ISA level the library is compiled for: "x86-64-v2" (SSE4.2, POPCNT: the portable build's default),
    "x86-64-v3" (AVX2, FMA, BMI2: cmake -DDYGRAD_BASELINE_ISA=x86-64-v3) or "native" (cmake -DDYGRAD_ISA=native).
    On a CPU below it the library stops the process when it loads, with a message naming the missing features."""
    return _C._cpu_baseline_isa()
