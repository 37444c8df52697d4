"""The CUDA backend (docs/cuda.md): what runs on every machine - the plugin's build and loading, the kernel registry's
CUDA column, dygrad.cuda's answers and errors without a GPU - and, on a machine with one (bench/gpu_check.sh's unit
phase), the first checks of the device itself."""
import subprocess
import sys

import pytest
import torch

import dygrad as dg

STATUS = dg._C._cuda_status()
BUILT = STATUS["built"]
HAS_GPU = BUILT and STATUS["available"] > 0
needs_plugin = pytest.mark.skipif(not BUILT, reason="this build has no CUDA plugin (no nvcc at build time)")
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no GPU here")
no_gpu = pytest.mark.skipif(HAS_GPU, reason="a GPU is here")

# The ops that have no CUDA kernel yet, exactly (cuda_kernel_list.py): an op that gains one must leave the list (the
# test fails until it does), and an op off the list must have one. The list only shrinks; docs/cuda.md counts it.
from cuda_kernel_list import WITHOUT_CUDA_KERNEL  # noqa: E402


def ops_without_cuda_kernel():
    return sorted(op["name"] for op in dg._C._op_table() if "cuda" not in op["devices"])


@needs_plugin
def test_the_plugin_loads_and_registers_the_backend():
    assert STATUS["plugin"] == "loaded"
    assert any("cuda" in op["devices"] for op in dg._C._op_table())


def test_the_plugin_is_reported_whether_or_not_it_is_built():
    assert STATUS["plugin"] in ("loaded", "not built") or STATUS["plugin"].startswith(("could not load", "absent"))
    assert STATUS["built"] == (STATUS["plugin"] == "loaded")


@needs_plugin
def test_every_op_has_a_cuda_kernel_but_the_listed_ones():
    missing = ops_without_cuda_kernel()
    gained = sorted(set(WITHOUT_CUDA_KERNEL) - set(missing))
    lacking = sorted(set(missing) - set(WITHOUT_CUDA_KERNEL))
    assert not gained, f"these ops have a CUDA kernel now: remove them from tests/python/cuda_kernel_list.py: {gained}"
    assert not lacking, f"these ops have no CUDA kernel (every op needs one): {lacking}"


@no_gpu
def test_without_a_gpu_cuda_is_unavailable_and_says_why_as_torch():
    assert dg.cuda.is_available() is False and dg.cuda.device_count() == 0
    assert dg.cuda.is_initialized() is False
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved"):
        assert getattr(dg.cuda, name)() == 0 == getattr(torch.cuda, name)()
    dg.cuda.empty_cache()  # a no-op, as torch's
    if BUILT:
        # torch built with CUDA on a machine without a driver or GPU: RuntimeError from its lazy initialisation.
        reason = STATUS["unavailable"]
        assert reason.startswith("Found no NVIDIA driver") or reason == "No CUDA GPUs are available", reason
        for call in (dg.cuda.synchronize, dg.cuda.current_stream, dg.cuda.Stream, dg.cuda.Event):
            with pytest.raises(RuntimeError, match=reason[:20]):
                call()
        with pytest.raises(RuntimeError, match=r"\[to\] device cuda:0 is not available.*" + reason[:20]):
            dg.ones(2).cuda()
        with pytest.raises(RuntimeError, match=r"\[zeros\] device cuda:0 is not available"):
            dg.zeros(2, device="cuda")
        with pytest.raises(RuntimeError, match="cuda:0 is not available"):
            dg.nn.Linear(2, 2).cuda()
    else:
        # torch built without CUDA: AssertionError "Torch not compiled with CUDA enabled", as the peer here raises.
        for module in (torch, dg):
            with pytest.raises(AssertionError):
                module.cuda.synchronize()


@needs_plugin
def test_the_core_library_never_links_the_cuda_runtime():
    lib = dg._C.__file__.rsplit("/", 1)[0] + "/libdygrad.so"
    needed = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
    assert "libdygrad.so" in lib and "NEEDED" in needed
    assert "cuda" not in needed.lower(), needed
    plugin = lib.replace("libdygrad.so", "libdygrad_cuda.so")
    plugin_needed = subprocess.run(["readelf", "-d", plugin], capture_output=True, text=True).stdout
    # The runtime is linked statically: the plugin needs only the driver, which it opens itself.
    assert "libcudart" not in plugin_needed and "libcuda.so" not in plugin_needed, plugin_needed


# --- with a GPU (bench/gpu_check.sh's unit phase) --------------------------------------------------------------------
@needs_gpu
def test_a_tensor_goes_to_the_gpu_and_back():
    x = dg.arange(12, dtype=dg.float32).reshape(3, 4)
    y = x.cuda()
    assert y.device == "cuda:0" and y.cpu().tolist() == x.tolist()
    assert dg.cuda.memory_allocated() > 0


@needs_gpu
def test_elementwise_kernels_match_the_cpu_bitwise():
    x = dg.randn(64, 33)
    w = dg.randn(33)
    for f in (lambda a, b: a + b, lambda a, b: a * b - b, lambda a, b: dg.maximum(a, b), lambda a, b: (a > b).float()):
        assert f(x.cuda(), w.cuda()).cpu().tolist() == f(x, w).tolist()
    for f in (dg.exp, dg.tanh, dg.sigmoid, dg.nn.functional.silu):
        assert f(x.t().cuda()).cpu().tolist() == f(x.t()).tolist()


@needs_gpu
def test_stream_and_events_follow_the_gpu():
    y = dg.ones(1024, device="cuda") * 2
    event = dg.cuda.Event()
    event.record()
    event.synchronize()
    assert event.query() and dg.cuda.current_stream().query()
    dg.cuda.synchronize()
    assert y.cpu().tolist() == [2.0] * 1024


@needs_gpu
def test_a_bad_index_raises_at_the_next_sync_naming_the_op_and_line_and_the_gpu_stays_usable():
    table = dg.arange(40, dtype=dg.float32).reshape(10, 4).cuda()
    out = dg.index_select(table, 0, dg.tensor([1, 12, 3]).cuda())  # returns: the GPU runs it later
    with pytest.raises(IndexError, match=r"\[index_select\] index 12 is out of bounds for dimension 0 with size 10"
                                         r".*test_cuda\.py"):
        dg.cuda.synchronize()
    with pytest.raises(RuntimeError):
        out.cpu()  # the failed op's output stays poisoned
    assert dg.index_select(table, 0, dg.tensor([1, 2]).cuda()).cpu().tolist() == [[4, 5, 6, 7], [8, 9, 10, 11]]
    emb = dg.nn.functional.embedding(dg.tensor([[0, 10]]).cuda(), table)
    with pytest.raises(IndexError, match=r"\[embedding\] index 10 is out of range for a table of 10 rows"):
        emb.cpu()


@needs_gpu
def test_reductions_over_dims_match_the_cpu():
    x = dg.randn(7, 300, 5)
    for dims in ((1,), (0, 2), (0, 1, 2)):
        assert dg.amax(x.cuda(), dim=dims).cpu().tolist() == dg.amax(x, dim=dims).tolist()  # exact
        got, want = x.cuda().sum(dim=dims).cpu(), x.sum(dim=dims)
        assert dg.allclose(got, want, rtol=1e-5, atol=1e-5)  # another summation order: the last bits differ


@needs_gpu
def test_softmax_and_log_softmax_match_the_cpu():
    x = dg.randn(6, 1000)
    for f in (dg.softmax, dg.log_softmax):
        for dim in (0, 1):
            assert dg.allclose(f(x.cuda(), dim=dim).cpu(), f(x, dim=dim), rtol=1e-5, atol=1e-6)


@needs_gpu
def test_rms_norm_and_swiglu_match_the_cpu():
    x, w = dg.randn(5, 3, 64), dg.randn(64)
    got = dg.nn.functional.rms_norm(x.cuda(), (64,), w.cuda(), eps=1e-6).cpu()
    assert dg.allclose(got, dg.nn.functional.rms_norm(x, (64,), w, eps=1e-6), rtol=1e-5, atol=1e-6)
    gate, up = dg.randn(4, 96), dg.randn(4, 96)
    swiglu = dg.nn.functional.swiglu
    assert swiglu(gate.cuda(), up.cuda()).cpu().tolist() == swiglu(gate, up).tolist()  # the same element math


@needs_gpu
def test_the_rotary_embedding_is_the_cpus_bitwise():
    from dygrad.models.llama import rope_tables
    x = dg.randn(2, 4, 16, 32)
    cos, sin = rope_tables(32, 16)
    f = dg.nn.functional.rotary_position_embedding
    for mode in ("interleaved", "rotate_half"):
        assert f(x.cuda(), cos.cuda(), sin.cuda(), mode).cpu().tolist() == f(x, cos, sin, mode).tolist()


@needs_gpu
def test_an_adamw_step_on_the_gpu_matches_the_cpus():
    # Parameters used through elementwise ops and sum only (ops with CUDA kernels; matmul has none yet).
    start = [dg.randn(33), dg.randn(4, 5)]
    for device in ("cpu", "cuda"):
        params = [dg.nn.Parameter(t.to(device)) for t in start]
        opt = dg.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
        for _ in range(3):
            sum((p * p * 0.5).sum() for p in params).backward()
            opt.step()
            opt.zero_grad()
        if device == "cpu":
            want = [p.detach() for p in params]
    for got, expected in zip(params, want):
        assert dg.allclose(got.detach().cpu(), expected, rtol=1e-6, atol=1e-7)
