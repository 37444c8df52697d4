"""torch.backends.cpu: the SIMD capability string torch reports, here the one of the kernels dygrad runs
(docs/ops.md, "One binary for every CPU"), and dygrad's own account of the choice."""
from .. import _C


def get_cpu_capability():
    """"AVX512" when the AVX-512 kernel plugin is in use (or a native build runs on an AVX-512 CPU), else
    "DEFAULT" (the library's baseline kernels, baseline_isa()), as torch names its capabilities."""
    isa, _, features = _C._cpu_kernel_isa()
    if isa == "avx512" or (isa == "native" and "avx512f" in features.split()):
        return "AVX512"
    return "DEFAULT"


def kernel_isa():
    """(isa, note, features): "avx512", "baseline" or "native"; why the plugin was not loaded ("" if it was); the
    CPU's flags that matter to the kernels ("avx2 fma avx512f ... avx512_bf16 amx_bf16")."""
    return _C._cpu_kernel_isa()


def baseline_isa():
    """The ISA level the library is compiled for: "x86-64-v2" (SSE4.2, POPCNT: the portable build's default),
    "x86-64-v3" (AVX2, FMA, BMI2: cmake -DDYGRAD_BASELINE_ISA=x86-64-v3) or "native" (cmake -DDYGRAD_ISA=native).
    On a CPU below it the library stops the process when it loads, with a message naming the missing features."""
    return _C._cpu_baseline_isa()
