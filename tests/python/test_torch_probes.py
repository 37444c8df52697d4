"""Issue 12 item 4: the probes and settings a PyTorch CPU script reads answer as torch 2.13 answers on a
machine without a GPU (dygrad.cuda, dygrad.backends, matmul precision, threads, GradScaler, compile)."""
import warnings

import pytest
import torch

import dygrad as dg


def test_cuda_probes_answer_as_torch_without_a_gpu():
    assert torch.cuda.is_available() is False  # the peer runs on a CPU-only machine
    assert dg.cuda.is_available() is torch.cuda.is_available()
    assert dg.cuda.device_count() == torch.cuda.device_count()
    assert dg.cuda.is_initialized() == torch.cuda.is_initialized()
    dg.cuda.manual_seed(0), dg.cuda.manual_seed_all(0), dg.cuda.empty_cache()  # no-ops, as torch's
    assert dg.backends.mps.is_available() == torch.backends.mps.is_available()
    assert dg.backends.cudnn.is_available() == torch.backends.cudnn.is_available()


@pytest.mark.parametrize("name", ["synchronize", "current_device", "get_device_name", "get_device_properties"])
def test_cuda_calls_that_need_a_gpu_raise_as_torch(name):
    # torch built without CUDA raises AssertionError; built with it on a machine without a GPU, RuntimeError naming
    # why (no driver, no GPU): dygrad with the CUDA plugin is the second kind (docs/cuda.md, "Python").
    args = [0] if name == "get_device_properties" else []
    with pytest.raises(AssertionError):
        getattr(torch.cuda, name)(*args)
    if dg.cuda._built():
        with pytest.raises(RuntimeError, match=dg._C._cuda_status()["unavailable"][:20]):
            getattr(dg.cuda, name)(*args)
    else:
        with pytest.raises(AssertionError):
            getattr(dg.cuda, name)(*args)


def test_cuda_memory_and_bf16_probes_answer_as_torch():
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved"):
        assert getattr(dg.cuda, name)() == getattr(torch.cuda, name)() == 0
    assert dg.cuda.is_bf16_supported() is torch.cuda.is_bf16_supported() is False
    assert dg.cuda.is_bf16_supported(including_emulation=False) is False


def test_use_deterministic_algorithms_sets_dygrads_deterministic_mode():
    saved = dg.get_context().deterministic
    try:
        for module in (torch, dg):
            module.use_deterministic_algorithms(True, warn_only=True)
            assert module.are_deterministic_algorithms_enabled() is True
            assert module.is_deterministic_algorithms_warn_only_enabled() is True
            module.use_deterministic_algorithms(False)
            assert module.are_deterministic_algorithms_enabled() is False
            assert module.is_deterministic_algorithms_warn_only_enabled() is False
            with pytest.raises(TypeError, match=r"argument 'mode' \(position 1\) must be bool, not int"):
                module.use_deterministic_algorithms(1)
        dg.use_deterministic_algorithms(True)
        assert dg.get_context().deterministic is True
    finally:
        dg.use_deterministic_algorithms(False)
        dg.set_context(deterministic=saved)


def test_seed_reseeds_from_entropy_and_returns_the_seed():
    s = dg.seed()
    assert isinstance(s, int) and 0 <= s < 2 ** 64 and dg.default_generator.initial_seed() == s
    a = dg.rand(4).tolist()
    dg.manual_seed(s)
    assert dg.rand(4).tolist() == a  # the tensor RNG was seeded with it too
    assert dg.seed() != s  # 2**-63 odds of a false failure


def test_backend_flags_default_and_round_trip_as_torch():
    assert dg.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32
    assert dg.backends.cudnn.allow_tf32 == torch.backends.cudnn.allow_tf32
    assert dg.backends.cudnn.benchmark == torch.backends.cudnn.benchmark
    assert dg.backends.cudnn.deterministic == torch.backends.cudnn.deterministic
    saved = dg.backends.cuda.matmul.allow_tf32
    try:
        dg.backends.cuda.matmul.allow_tf32 = True
        assert dg.backends.cuda.matmul.allow_tf32 is True
    finally:
        dg.backends.cuda.matmul.allow_tf32 = saved


def test_float32_matmul_precision_accepts_torch_values_and_rejects_others():
    assert dg.get_float32_matmul_precision() == torch.get_float32_matmul_precision() == "highest"
    for value in ("high", "medium", "highest"):
        dg.set_float32_matmul_precision(value)
        assert dg.get_float32_matmul_precision() == value
    for module in (torch, dg):  # an unknown value warns and changes nothing
        module.set_float32_matmul_precision("high")
        with pytest.warns(UserWarning, match="fastest"):
            module.set_float32_matmul_precision("fastest")
        assert module.get_float32_matmul_precision() == "high"
        module.set_float32_matmul_precision("highest")


def test_num_threads_round_trip():
    n = dg.get_num_threads()
    assert n >= 1
    dg.set_num_threads(1)
    try:
        assert dg.get_num_threads() == 1
    finally:
        dg.set_num_threads(n)
    with pytest.raises(ValueError):
        dg.set_num_threads(0)


def test_device_objects_compare_and_print_as_torch():
    for spec in ("cpu", "cuda", "cuda:1"):
        assert repr(dg.device(spec)) == repr(torch.device(spec))
        assert dg.device(spec).type == torch.device(spec).type and dg.device(spec).index == torch.device(spec).index
    assert dg.zeros(2).device == dg.device("cpu")
    assert tuple(dg.zeros(2).to(dg.device("cpu")).shape) == (2,)
    with pytest.raises(RuntimeError):
        torch.device("tpu")
    with pytest.raises(RuntimeError):
        dg.device("tpu")


def test_grad_scaler_disabled_is_a_pass_through_as_torch():
    for scaler_cls in (dg.amp.GradScaler, torch.amp.GradScaler):
        scaler = scaler_cls(enabled=False)
        assert scaler.is_enabled() is False and scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    w = dg.nn.Parameter(dg.ones(3))
    opt = dg.optim.SGD([w], lr=0.5)
    scaler = dg.amp.GradScaler(enabled=False)
    loss = (w * 2).sum()
    assert scaler.scale(loss) is loss
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert w.tolist() == [0.0, 0.0, 0.0]


def test_grad_scaler_for_cuda_without_cuda_disables_with_a_warning_as_torch():
    for scaler_cls in (torch.amp.GradScaler, dg.amp.GradScaler):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scaler = scaler_cls("cuda", enabled=True)
        assert scaler.is_enabled() is False and caught
    with pytest.raises(NotImplementedError, match="GradScaler"):
        dg.amp.GradScaler("cpu", enabled=True)


def test_compile_accepts_every_form_torch_accepts():
    model = dg.nn.Linear(4, 2)
    x = dg.randn(3, 4)
    compiled = dg.compile(model)
    assert isinstance(compiled, dg.jit.OptimizedModule) and compiled._orig_mod is model
    assert dg.compile(model, mode="reduce-overhead", fullgraph=True, dynamic=False)._orig_mod is model
    assert dg.compile(model, disable=True) is model
    with pytest.raises(RuntimeError, match="Unrecognized mode"):
        dg.compile(model, mode="fastest")

    @dg.compile
    def f(a):
        return a * 2

    @dg.compile(mode="max-autotune")
    def g(a):
        return a + 1

    for _ in range(3):  # warm-up, capture, replay
        assert f(x).tolist() == (x * 2).tolist() and g(x).tolist() == (x + 1).tolist()
    assert f.stats["replays"] == 1 and g.stats["replays"] == 1
    import inspect
    torch_params = list(inspect.signature(torch.compile).parameters)
    assert list(inspect.signature(dg.compile).parameters) == torch_params
