"""One binary for every CPU (docs/ops.md): the library is built for a baseline ISA (x86-64-v2) and loads its
AVX-512 kernel plugin on a CPU that has AVX-512; the baseline kernels (DYGRAD_CPU_ISA=baseline, or a CPU without
AVX-512, run here under qemu) compute the same results; a CPU below the baseline stops at load time with a message."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import dygrad as dg

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "isa", "workload.py")
ISA, NOTE, FEATURES = dg.backends.cpu.kernel_isa()
portable = pytest.mark.skipif(ISA == "native", reason="a DYGRAD_ISA=native build has no baseline kernels")


def run_workload(tmp_path, name, prefix=(), env=None, timeout=120):
    out = str(tmp_path / name)
    result = subprocess.run(list(prefix) + [sys.executable, WORKLOAD, out], capture_output=True, text=True,
                            timeout=timeout, env=dict(os.environ, **(env or {})))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    with open(out + ".json") as f:
        isa = json.load(f)
    return isa, dict(np.load(out + ".npz"))


def assert_same_results(got, want, bitwise=("matmul", "add_mul", "bf16_roundtrip")):
    """The kernels are the same source compiled twice, without -ffast-math: the builds vectorise with 8 and 16
    lanes and may contract a * b + c into fused multiply-adds in different places (an x86-64-v2 baseline has no
    FMA: about 1 element in 200 of exp/log/tanh differs in the last bit); everything agrees to float32 rounding. GEMMs are bitwise on
    one CPU (oneDNN's code is the same); on another CPU oneDNN picks other kernels."""
    assert sorted(got) == sorted(want)
    for k in want:
        # bf16 results: one bf16 rounding apart at most (the GEMMs accumulate in float32 in either path)
        tol = dict(rtol=8e-3, atol=8e-3) if k.startswith("bf16_") else dict(rtol=2e-6, atol=1e-6)
        np.testing.assert_allclose(got[k], want[k], err_msg=k, **tol)
    for k in bitwise:  # no contraction or transcendental inside: bitwise
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_kernel_isa_reports_what_runs_and_matches_torch_capability_names():
    import torch
    avx512 = "avx512f" in FEATURES.split()
    with open("/proc/cpuinfo") as f:
        assert avx512 == (" avx512f" in f.read())
    if ISA == "native":
        assert NOTE == ""
    elif avx512:
        assert ISA == "avx512" and NOTE == "", NOTE
    else:
        assert ISA == "baseline" and "no AVX-512" in NOTE
    assert dg.backends.cpu.get_cpu_capability() in ("AVX512", "DEFAULT")
    assert dg.backends.cpu.baseline_isa() in ("x86-64-v3", "x86-64-v2", "native")
    assert (dg.backends.cpu.baseline_isa() == "native") == (ISA == "native")
    if avx512 and ISA != "baseline":
        assert dg.backends.cpu.get_cpu_capability() == torch.backends.cpu.get_cpu_capability() == "AVX512"


@portable
def test_baseline_kernels_compute_what_the_avx512_plugin_computes(tmp_path):
    want_isa, want = run_workload(tmp_path, "default")
    got_isa, got = run_workload(tmp_path, "baseline", env={"DYGRAD_CPU_ISA": "baseline"})
    assert got_isa[0] == "baseline" and got_isa[1] == "DYGRAD_CPU_ISA=baseline" and got_isa[3] == "DEFAULT"
    assert want_isa[0] == ISA
    assert_same_results(got, want)


QEMU = shutil.which("qemu-x86_64")


@portable
@pytest.mark.skipif(QEMU is None, reason="qemu-user is not installed ('make deps' installs it)")
def test_a_cpu_without_avx512_runs_the_baseline_kernels_under_qemu(tmp_path):
    """qemu's Haswell model has AVX2 (x86-64-v3, at or above either baseline) and no AVX-512: the library must not execute a single AVX-512 instruction
    (a SIGILL would kill the child), must not load the plugin, and must compute the same results."""
    want_isa, want = run_workload(tmp_path, "default")
    got_isa, got = run_workload(tmp_path, "qemu", prefix=[QEMU, "-cpu", "Haswell"], timeout=600)
    assert got_isa[0] == "baseline" and "no AVX-512" in got_isa[1], got_isa
    assert "avx512f" not in got_isa[2].split() and "avx2" in got_isa[2].split()
    assert_same_results(got, want, bitwise=("add_mul", "bf16_roundtrip"))


# A qemu CPU model below each baseline, and the first features the library's message must name.
BELOW_BASELINE = {"x86-64-v2": ("Conroe", "popcnt sse4.2 sse4.1"),  # Core 2: SSSE3, no SSE4.1/4.2, no POPCNT
                  "x86-64-v3": ("Nehalem", "avx avx2 fma")}  # x86-64-v2: SSE4.2, POPCNT, no AVX


@pytest.mark.skipif(dg.backends.cpu.baseline_isa() not in BELOW_BASELINE, reason="a native build has no baseline")
@pytest.mark.skipif(QEMU is None, reason="qemu-user is not installed ('make deps' installs it)")
def test_a_cpu_below_the_baseline_stops_at_load_time_with_a_message_under_qemu():
    """Under a qemu model below the baseline the library's first initialiser (compiled for plain x86-64) must stop
    the process with a message naming what is missing, before any instruction of the baseline that the CPU lacks
    runs in the library or the bindings (a SIGILL is a return code of -4)."""
    baseline = dg.backends.cpu.baseline_isa()
    model, missing = BELOW_BASELINE[baseline]
    code = "import dygrad; print('imported')"
    result = subprocess.run([QEMU, "-cpu", model, sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1, (result.returncode, result.stderr[-3000:])
    assert "imported" not in result.stdout
    assert f"dygrad: this build of libdygrad needs an {baseline} CPU, and this CPU lacks: {missing}" in result.stderr
    assert "-DDYGRAD_ISA=native" in result.stderr
