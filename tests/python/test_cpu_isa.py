"""One binary for every CPU (docs/ops.md): the library is built for a baseline ISA (x86-64-v2) and loads the kernel
plugin of the highest level the CPU runs (avx2: x86-64-v3, avx512: x86-64-v4); every lower level (DYGRAD_CPU_ISA,
or a CPU without AVX-512 or AVX2, run here under qemu) computes the same results; a CPU below the baseline stops at
load time with a message."""
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


LEVELS = dg.backends.cpu.kernel_levels()  # lowest first, whatever DYGRAD_CPU_ISA says


def run_workload(tmp_path, name, prefix=(), env=None, timeout=120):
    """The workload in a child at the highest level (DYGRAD_CPU_ISA unset) or as `env` says."""
    out = str(tmp_path / name)
    base = {k: v for k, v in os.environ.items() if k != "DYGRAD_CPU_ISA"}
    result = subprocess.run(list(prefix) + [sys.executable, WORKLOAD, out], capture_output=True, text=True,
                            timeout=timeout, env=dict(base, **(env or {})))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    with open(out + ".json") as f:
        isa = json.load(f)
    return isa, dict(np.load(out + ".npz"))


U = 2.0 ** -24  # float32's unit roundoff


def assert_same_results(got, want, bitwise=("matmul", "add_mul", "bf16_roundtrip")):
    """The kernels are the same source compiled once per level, without -ffast-math: the levels vectorise with 4, 8
    and 16 lanes and may contract a * b + c into fused multiply-adds in different places (the x86-64-v2 baseline has
    no FMA: its exp/log/tanh polynomials multiply and add, rounded twice); everything agrees to float32 rounding.
    Sums (the GEMM, the reductions, cumsum) are held to their derived bound, twice n u sum |terms| per element
    (workload.error_scales: any order of summation is within half of it); the elementwise results to 2e-6 relative
    (a few ulps of the functions' own documented accuracy, tests/cpp/test_vec_math.cpp). GEMMs are bitwise on one
    CPU (oneDNN's code is the same); on another CPU, or under qemu, oneDNN picks other kernels."""
    scales = {k[len("scale_"):]: v for k, v in want.items() if k.startswith("scale_")}
    assert sorted(got) == sorted(want)
    for k in want:
        if k.startswith("scale_"):
            continue
        if k in scales:
            diff = np.abs(got[k].astype(np.float64) - want[k].astype(np.float64)).ravel()
            tol = 2 * U * scales[k].ravel()
            bad = np.flatnonzero(diff > tol)
            assert bad.size == 0, f"{k}: {bad.size} elements beyond 2 n u sum|terms|; first {bad[:5]}: " \
                                  f"{diff[bad[:5]]} > {tol[bad[:5]]}"
            continue
        # bf16 results: one bf16 rounding apart at most (the GEMMs accumulate in float32 in either path)
        tol = dict(rtol=8e-3, atol=8e-3) if k.startswith("bf16_") else dict(rtol=2e-6, atol=1e-6)
        np.testing.assert_allclose(got[k], want[k], err_msg=k, **tol)
    for k in bitwise:  # no contraction or transcendental inside: bitwise
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_kernel_isa_reports_what_runs_and_matches_torch_capability_names():
    import torch
    flags = FEATURES.split()
    with open("/proc/cpuinfo") as f:
        cpuinfo = f.read()
    assert ("avx512f" in flags) == (" avx512f" in cpuinfo) and ("avx2" in flags) == (" avx2" in cpuinfo)
    want_env = os.environ.get("DYGRAD_CPU_ISA")
    if ISA == "native":
        assert NOTE == "" and LEVELS == ("native",)
    else:
        assert LEVELS[0] == "baseline" and list(LEVELS) == [lv for lv in ("baseline", "avx2", "avx512") if lv in LEVELS]
        assert ("avx512" in LEVELS) == ("avx512f" in flags)
        assert ("avx2" in LEVELS) == ("avx2" in flags and "fma" in flags and dg.backends.cpu.baseline_isa() == "x86-64-v2")
        assert ISA == (want_env if want_env in LEVELS else LEVELS[-1]), (ISA, NOTE, LEVELS)
        # the note says why no higher level runs: the environment's cap, or what the CPU lacks
        assert (NOTE == "") == (ISA == "avx512"), NOTE
        if ISA != LEVELS[-1]:
            assert NOTE.startswith(f"DYGRAD_CPU_ISA={ISA}"), NOTE
        elif ISA != "avx512" and not want_env:
            assert "the CPU has no AVX-512 (x86-64-v4)" in NOTE, NOTE
    capability = dg.backends.cpu.get_cpu_capability()
    assert capability == {"avx512": "AVX512", "avx2": "AVX2"}.get(ISA, "DEFAULT" if ISA == "baseline" else capability)
    assert dg.backends.cpu.baseline_isa() in ("x86-64-v3", "x86-64-v2", "native")
    assert (dg.backends.cpu.baseline_isa() == "native") == (ISA == "native")
    if os.environ.get("ATEN_CPU_CAPABILITY") is None and ISA == LEVELS[-1] != "native":
        assert capability == torch.backends.cpu.get_cpu_capability()


def test_an_unknown_level_is_ignored_with_a_warning():
    code = "import dygrad as dg; print(dg.backends.cpu.kernel_isa()[0])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, DYGRAD_CPU_ISA="avx9"))
    assert result.returncode == 0, result.stderr
    if ISA != "native":
        assert result.stdout.split() == [LEVELS[-1]]
        assert "DYGRAD_CPU_ISA=avx9 is not a kernel level (baseline, avx2, avx512); ignored" in result.stderr


@portable
@pytest.mark.parametrize("level", ["baseline", "avx2"])
def test_each_lower_level_computes_what_the_highest_computes(tmp_path, level):
    if level not in LEVELS[:-1]:
        pytest.skip(f"{level} is not a lower level here (levels: {LEVELS})")
    want_isa, want = run_workload(tmp_path, "default")
    got_isa, got = run_workload(tmp_path, level, env={"DYGRAD_CPU_ISA": level})
    assert got_isa[0] == level and got_isa[1] == f"DYGRAD_CPU_ISA={level}"
    assert got_isa[3] == {"baseline": "DEFAULT", "avx2": "AVX2"}[level]
    assert want_isa[0] == LEVELS[-1]
    assert_same_results(got, want)


QEMU = shutil.which("qemu-x86_64")


# qemu CPU models without AVX-512: Haswell (x86-64-v3: AVX2, FMA) must run the avx2 kernels, Nehalem (x86-64-v2: no
# AVX) the baseline ones.
QEMU_MODELS = {"Haswell": ("avx2", "the CPU has no AVX-512 (x86-64-v4)"),
               "Nehalem": ("baseline", "the CPU has no AVX2 and FMA (x86-64-v3)")}


@portable
@pytest.mark.skipif(QEMU is None, reason="qemu-user is not installed ('make deps' installs it)")
@pytest.mark.parametrize("model", sorted(QEMU_MODELS))
def test_a_cpu_without_avx512_runs_its_own_level_under_qemu(tmp_path, model):
    """The library must not execute a single instruction the CPU model lacks (a SIGILL would kill the child), must
    load the plugin of the model's level and no higher, and must compute the same results."""
    level, note = QEMU_MODELS[model]
    if level == "baseline" and dg.backends.cpu.baseline_isa() != "x86-64-v2":
        pytest.skip("an x86-64-v3 baseline does not run on Nehalem (test_a_cpu_below_the_baseline...)")
    if level == "avx2" and dg.backends.cpu.baseline_isa() != "x86-64-v2":
        level, note = "baseline", "the CPU has no AVX-512 (x86-64-v4)"
    # The workload needs NumPy (dygrad imports it): a NumPy build that itself stops under this qemu model (NumPy 2.3
    # and 2.4's wheels do under qemu 7.2's Nehalem, with SIGILL before dygrad is loaded) cannot show anything of
    # dygrad's; the model with AVX2 (Haswell) still runs the check.
    probe = subprocess.run([QEMU, "-cpu", model, sys.executable, "-c", "import numpy"], capture_output=True, timeout=300)
    if probe.returncode != 0:
        pytest.skip(f"numpy {np.__version__} does not run under qemu's {model} model (return code {probe.returncode}), "
                    "without dygrad: the environment, not dygrad")
    want_isa, want = run_workload(tmp_path, "default")
    got_isa, got = run_workload(tmp_path, "qemu", prefix=[QEMU, "-cpu", model], timeout=600)
    assert got_isa[0] == level and note in got_isa[1], got_isa
    assert "avx512f" not in got_isa[2].split() and ("avx2" in got_isa[2].split()) == (model == "Haswell")
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
