"""torch.backends.cpu: the SIMD capability string torch reports."""


def get_cpu_capability():
    with open("/proc/cpuinfo") as fh:
        flags = fh.read()
    if " avx512f" in flags:
        return "AVX512"
    if " avx2" in flags:
        return "AVX2"
    return "DEFAULT"
