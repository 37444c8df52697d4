"""The Python API of devices (docs/devices.md) against torch's semantics, on the asynchronous test device: device=
on every factory and the default device (set_default_device, `with dygrad.device(d):`), the queries and host reads
of a device's tensor, checkpoints onto any device (save, load's map_location, load_state_dict, pickling), optimizer
state on its parameters' device, collectives refusing a device's tensor, and a training step on the device equal to
the CPU's bitwise. torch has no second device on this machine: its CPU and "meta" devices stand in where a device's
behaviour is compared (torch.device("meta") plays test:0: a device whose memory the host does not read).

The tests marked `needs_device_ops` run ops on the device (a forward, a backward, composed optimizer steps): they pass
once every op allocates its outputs on its inputs' device (the op sweep of issue 34)."""
import collections
import io
import os
import pickle
import subprocess
import sys
import threading
import zipfile

import numpy as np
import pytest
import torch

import dygrad as dg
import dygrad.distributed as dist
from dygrad import nn

dg.testing.enable_test_device(2)  # test:0 and test:1, for the rest of the process (they cannot be turned off)

needs_device_ops = pytest.mark.needs_device_ops


@pytest.fixture
def default_device():
    """Restores the CPU as the default device after a test that changes it, whatever the test did."""
    yield
    dg.set_default_device(None)


def dev(t):
    return str(t.device)


def run_python(code, env=None):
    import os
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))


# --- queries -------------------------------------------------------------------------------------------------------
def test_test_device_count_and_availability():
    assert dg.testing.test_device_count() == 2
    fresh = run_python("import dygrad as dg\n"
                       "print(dg.testing.test_device_count())\n"
                       "try:\n    dg.zeros(1, device='test:0')\nexcept RuntimeError as e:\n    print(e)\n"
                       "print(dg.testing.enable_test_device(3), dg.testing.test_device_count())\n"
                       "print(dg.zeros(1, device='test:2').device)")
    assert fresh.returncode == 0, fresh.stderr
    lines = fresh.stdout.splitlines()
    assert lines[0] == "0"
    assert "[zeros] device test:0 is not available" in lines[1] and "enable_test_device" in lines[1]
    assert lines[2:] == ["3 3", "test:2"]
    from_env = run_python("import dygrad as dg; print(dg.testing.test_device_count())", {"DYGRAD_TEST_DEVICES": "2"})
    assert from_env.stdout.strip() == "2", from_env.stderr


def test_device_objects_as_torch():
    for ours, theirs in ((dg.device("test:1"), torch.device("cuda:1")), (dg.device("test", 1), torch.device("cuda", 1)),
                         (dg.device("test"), torch.device("cuda")), (dg.device("cpu"), torch.device("cpu"))):
        assert repr(ours) == repr(theirs).replace("cuda", "test")
        assert (ours.type, ours.index) == (theirs.type.replace("cuda", "test"), theirs.index)
        assert str(ours) == str(theirs).replace("cuda", "test")
    assert dg.device("test:1") == dg.device("test", 1) and dg.device("test:1") != dg.device("test:0")
    assert dg.device("test") != dg.device("test:0")  # as torch: cuda != cuda:0
    assert torch.device("cuda") != torch.device("cuda:0")
    assert len({dg.device("test:1"), dg.device("test", 1)}) == 1
    with pytest.raises(RuntimeError, match="type \\(string\\) must not include an index"):
        dg.device("test:1", 1)


def test_a_device_tensors_queries():
    t = dg.ones(2, 3, device="test:1")
    assert t.device == dg.device("test:1") and t.device.type == "test" and t.device.index == 1
    assert repr(t.device) == "device(type='test', index=1)"
    assert not t.is_cpu and not t.is_cuda and not t.is_meta and t.get_device() == 1
    m = torch.ones(2, device="meta")
    assert not m.is_cpu and not m.is_cuda
    cpu = dg.ones(2)
    assert cpu.is_cpu and cpu.get_device() == torch.ones(2).get_device() == -1
    assert dg.ones(1, device="test:0").get_device() == 0


def test_to_and_cpu_copy_between_devices():
    x = dg.arange(6, dtype=dg.float32).reshape(2, 3)
    d = x.to("test:0")
    assert dev(d) == "test:0" and d.dtype == dg.float32 and d.cpu().tolist() == x.tolist()
    assert d.to("test:0") is d and x.cpu() is x and x.to("cpu") is x  # as torch: nothing to do returns self
    other = dg.zeros(1, dtype=dg.float64, device="test:1")
    moved = x.to(other)  # torch: other's device and dtype
    assert dev(moved) == "test:1" and moved.dtype == dg.float64 and moved.cpu().tolist() == x.tolist()
    cast = x.to("test:0", dg.float64)
    assert dev(cast) == "test:0" and cast.dtype == dg.float64 and cast.cpu().tolist() == x.tolist()
    cast = x.to(device="test:1", dtype=dg.int64)
    assert dev(cast) == "test:1" and cast.dtype == dg.int64 and cast.cpu().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert dev(x.to(dg.device("test:0"))) == "test:0" and dev(d.to(dg.device("cpu"))) == "cpu"
    across = d.to("test:1")
    assert dev(across) == "test:1" and across.to("cpu").tolist() == x.tolist()
    theirs = torch.arange(6.0).reshape(2, 3)
    assert theirs.to(torch.zeros(1, dtype=torch.float64, device="meta")).device.type == "meta"
    with pytest.raises(RuntimeError, match="Expected one of .* device type at start of device string: foo"):
        x.to("foo")
    with pytest.raises(RuntimeError, match="test:3"):
        x.to("test:3")  # a test device that is not on


def test_host_reads_of_a_device_tensor_go_through_a_copy():
    t = dg.tensor([[1.5, -2.0], [3.0, 4.25]], device="test:0")
    assert t.tolist() == [[1.5, -2.0], [3.0, 4.25]]
    assert t[1, 1].item() == 4.25 and float(t[0, 0]) == 1.5 and int(t[1, 0]) == 3 and bool(t[0, 1])
    assert dg.tensor(7, device="test:1").item() == 7
    assert f"{dg.tensor(0.125, device='test:0'):.3f}" == "0.125"
    assert repr(t) == "tensor([[ 1.5000, -2.0000],\n        [ 3.0000,  4.2500]], device='test:0')"
    # torch's order of the suffixes: device, size, dtype, then grad_fn or requires_grad
    assert repr(dg.tensor([1.0, 2.0], dtype=dg.float64, device="test:1", requires_grad=True)) == \
        "tensor([1., 2.], device='test:1', dtype=dygrad.float64, requires_grad=True)"
    assert repr(dg.zeros(0, 3, device="test:1")) == "tensor([], device='test:1', size=(0, 3))"
    assert repr(torch.zeros(0, 3, device="meta", dtype=torch.float64)) == \
        "tensor(..., device='meta', size=(0, 3), dtype=torch.float64)"
    assert str(t) == repr(t) and repr(dg.ones(1)) == "tensor([1.])"


def test_numpy_of_a_device_tensor_raises_as_torch():
    message = torch_message(lambda: torch.ones(2, device="meta").numpy())
    assert message == ("can't convert meta device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
                       "memory first.")
    t = dg.ones(2, device="test:1")
    with pytest.raises(TypeError) as e:
        t.numpy()
    assert str(e.value) == "[numpy] " + message.replace("meta", "test:1")
    with pytest.raises(TypeError, match="can't convert test:1 device type tensor to numpy"):
        np.asarray(t)
    assert t.cpu().numpy().tolist() == [1.0, 1.0]


def test_pinned_memory_from_the_device_backend():
    # The test device's backend provides pinned memory (docs/devices.md, "Pinned host memory"); torch's semantics.
    x = dg.arange(6.0).reshape(2, 3)
    assert not x.is_pinned()
    pinned = x.pin_memory()
    assert pinned is not x and pinned.is_pinned() and pinned.is_cpu and pinned.tolist() == x.tolist()
    assert pinned.pin_memory() is pinned  # torch: self when pinned already
    assert pinned[1:].is_pinned() and pinned.t().is_pinned()  # views share the pinned storage
    assert not pinned.clone().is_pinned() and not (pinned + 1).is_pinned()  # op outputs are pageable, as torch's
    with pytest.raises(RuntimeError, match=r"\[pin_memory\] cannot pin a test:0 tensor: only dense CPU tensors can "
                                           r"be pinned"):
        dg.ones(3, device="test:0").pin_memory()
    assert "only dense CPU tensors can be pinned" in torch_message(lambda: torch.ones(1, device="meta").pin_memory())
    assert not dg.ones(3, device="test:0").is_pinned()
    # Gradients pass through it (torch's pin_memory is differentiable).
    w = dg.tensor([1.0, 2.0], requires_grad=True)
    (w.pin_memory() * 3).sum().backward()
    assert w.grad.tolist() == [3.0, 3.0]


@pytest.mark.parametrize("make", [
    lambda: dg.empty(2, 3, pin_memory=True), lambda: dg.zeros(2, pin_memory=True), lambda: dg.ones(2, pin_memory=True),
    lambda: dg.full((2,), 7.0, pin_memory=True), lambda: dg.randn(4, pin_memory=True),
    lambda: dg.rand(4, pin_memory=True), lambda: dg.randint(0, 5, (3,), pin_memory=True),
    lambda: dg.arange(5, pin_memory=True), lambda: dg.linspace(0, 1, 5, pin_memory=True),
    lambda: dg.tensor([1, 2], pin_memory=True), lambda: dg.eye(3, pin_memory=True),
    lambda: dg.scalar_tensor(2.0, pin_memory=True), lambda: dg.randperm(4, pin_memory=True),
    lambda: dg.empty_like(dg.ones(2), pin_memory=True), lambda: dg.zeros_like(dg.ones(2), pin_memory=True),
    lambda: dg.ones(2).new_tensor([1.0, 2.0], pin_memory=True),
])
def test_factories_take_pin_memory(make):
    t = make()
    assert t.is_pinned() and t.is_cpu


def test_pin_memory_on_a_device_is_refused_as_torch():
    for make in (lambda: dg.ones(2, device="test:0", pin_memory=True),
                 lambda: dg.tensor([1.0], device="test:0", pin_memory=True),
                 lambda: dg.eye(2, device="test:0", pin_memory=True)):
        with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
            make()
    with pytest.raises(TypeError, match="pin_memory"):
        dg.ones(2, pin_memory="yes")


def test_copies_go_through_pinned_memory():
    x = dg.arange(12.0).reshape(3, 4)
    before = dg.memory.host_memory_stats()["num_allocs"]
    for source in (x, x.pin_memory(), x.t(), x.t().pin_memory()):  # pageable sources are staged; pinned ones not
        d = source.to("test:0", non_blocking=True)
        assert d.device == dg.device("test:0") and d.tolist() == source.tolist()
    assert dg.memory.host_memory_stats()["num_allocs"] > before  # staging buffers came from the pinned pool
    d = x.to("test:0")
    back = d.to("cpu", non_blocking=True)  # torch's non-blocking copy to the host lands in pinned memory
    assert back.is_pinned() and back.tolist() == x.tolist()
    back = d.to("cpu")
    assert not back.is_pinned() and back.tolist() == x.tolist()
    assert not d.cpu().is_pinned()
    out = dg.zeros(4, 3)
    out.copy_(d.t())  # into pageable memory through pinned staging, any strides
    assert out.tolist() == x.t().tolist()
    dst = dg.zeros(3, 4, device="test:1")
    dst.copy_(x.t().t())
    assert dst.tolist() == x.tolist()


def test_data_loader_pins_its_batches():
    from dygrad.utils import data as dgdata
    ds = dgdata.TensorDataset(dg.arange(8.0).reshape(4, 2), dg.arange(4))
    batches = list(dgdata.DataLoader(ds, batch_size=2, pin_memory=True))
    assert all(t.is_pinned() for batch in batches for t in batch)
    assert batches[1][0].tolist() == [[4.0, 5.0], [6.0, 7.0]]
    assert not any(t.is_pinned() for t in next(iter(dgdata.DataLoader(ds, batch_size=2))))

    class Dicts(dgdata.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return {"x": dg.full((2,), float(i)), "meta": ("id", i)}

    batch = next(iter(dgdata.DataLoader(Dicts(), batch_size=2, pin_memory=True)))
    assert batch["x"].is_pinned() and batch["x"].tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert batch["meta"][0] == ("id", "id") and batch["meta"][1].is_pinned()  # strings stay as collated
    from dygrad.utils.data.dataloader import pin_memory
    Pair = collections.namedtuple("Pair", "a b")
    pinned = pin_memory(Pair(dg.ones(1), [dg.ones(1), "s"]))
    assert type(pinned) is Pair and pinned.a.is_pinned() and pinned.b[0].is_pinned() and pinned.b[1] == "s"


def test_a_cpu_scalar_tensor_is_an_operand_of_device_ops_as_in_torch():
    x = dg.arange(6.0).reshape(2, 3)
    d = x.to("test:0")
    s = dg.tensor(2.0)
    for f in (lambda a, b: a * b, lambda a, b: b - a, lambda a, b: dg.maximum(a, b), lambda a, b: a > b,
              lambda a, b: dg.where(a > 2, b, a), lambda a, b: dg.lerp(a, a * 2, b)):
        got = f(d, s)
        assert got.device == dg.device("test:0") and got.tolist() == f(x, s).tolist()
    assert (s + d).device == dg.device("test:0") and dg.add(s, d).tolist() == (s + x).tolist()
    d.mul_(s)
    assert d.tolist() == (x * 2).tolist()
    with pytest.raises(RuntimeError, match=r"expected all tensors to be on the same device, but found cpu and test:0"):
        s.add_(d)  # the CPU scalar is written only by CPU tensors (torch's rule)
    with pytest.raises(RuntimeError, match="expected all tensors to be on the same device"):
        d + dg.ones(3)  # a CPU tensor with dimensions is no scalar
    with pytest.raises(RuntimeError, match="expected all tensors to be on the same device"):
        d + dg.tensor(1.0, device="test:1")  # two devices
    # Gradients reach the CPU scalar on the CPU, as torch's.
    w = dg.tensor(3.0, requires_grad=True)
    v = dg.ones(2, 3, device="test:0", requires_grad=True)
    (v * w * v).sum().backward()
    tw = torch.tensor(3.0, requires_grad=True)
    tv = torch.ones(2, 3, requires_grad=True)
    (tv * tw * tv).sum().backward()
    assert w.grad.device == dg.device("cpu") and w.grad.item() == tw.grad.item()
    assert v.grad.device == dg.device("test:0") and v.grad.tolist() == tv.grad.tolist()


def test_a_forked_child_cannot_use_a_device_but_runs_on_the_cpu():
    d = dg.ones(4, device="test:0") * 3  # the device has run work before the fork
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 1
        try:
            os.close(r)
            outcome = []
            try:
                (d + 1).tolist()
                outcome.append("device ran")
            except RuntimeError as e:
                outcome.append("refused" if "forked child" in str(e) else f"other: {e}")
            outcome.append(str((dg.ones(3) * 2).tolist()))
            os.write(w, "|".join(outcome).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as pipe:
        report = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert report == "refused|[2.0, 2.0, 2.0]"
    assert (d + 1).tolist() == [4.0] * 4  # the parent's device goes on


def test_accelerator_and_cuda_probes_ignore_the_test_device():
    assert not dg.accelerator.is_available() and dg.accelerator.device_count() == 0
    assert dg.accelerator.current_accelerator() is None
    assert not dg.cuda.is_available() and dg.cuda.device_count() == 0
    with pytest.raises(RuntimeError):
        dg.ones(1, device="test:0").cuda()
    with pytest.raises(RuntimeError, match="cuda"):
        dg.zeros(1, device="cuda")


def torch_message(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 -- the message torch gives, whatever its type
        return str(e)
    raise AssertionError("torch did not raise")


# --- factories -----------------------------------------------------------------------------------------------------
CPP_FACTORIES = {
    "empty": lambda lib, **kw: lib.empty(2, 3, **kw),
    "zeros": lambda lib, **kw: lib.zeros(2, 3, **kw),
    "ones": lambda lib, **kw: lib.ones((2, 3), **kw),
    "full": lambda lib, **kw: lib.full((2, 3), 1.5, **kw),
    "rand": lambda lib, **kw: lib.rand(2, 3, **kw),
    "randn": lambda lib, **kw: lib.randn(2, 3, **kw),
    "randint": lambda lib, **kw: lib.randint(0, 7, (2, 3), **kw),
    "arange": lambda lib, **kw: lib.arange(0, 6, 2, **kw),
    "linspace": lambda lib, **kw: lib.linspace(0, 1, 5, **kw),
    "logspace": lambda lib, **kw: lib.logspace(0, 1, 5, **kw),
    "tensor": lambda lib, **kw: lib.tensor([[1.0, 2.0], [3.0, 4.0]], **kw),
}
PY_FACTORIES = {
    "eye": lambda lib, **kw: lib.eye(3, 2, **kw),
    "as_tensor": lambda lib, **kw: lib.as_tensor([1, 2, 3], **kw),
    "asarray": lambda lib, **kw: lib.asarray([[1.0], [2.0]], **kw),
    "scalar_tensor": lambda lib, **kw: lib.scalar_tensor(2.5, **kw),
    "randperm": lambda lib, **kw: lib.randperm(5, **kw),
}
FACTORIES = {**CPP_FACTORIES, **PY_FACTORIES}
RANDOM = ("empty", "rand", "randn", "randint")


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories_take_device(name):
    make = FACTORIES[name]
    dg.manual_seed(3)
    here = make(dg)
    dg.manual_seed(3)
    there = make(dg, device="test:1")
    assert dev(there) == "test:1" and there.dtype == here.dtype and tuple(there.shape) == tuple(here.shape)
    if name != "empty":  # the same numbers as on the host, the random ones too (the generator does not change)
        assert there.cpu().tolist() == here.tolist()
    assert dev(make(dg, device=dg.device("test:0"))) == "test:0" and dev(make(dg, device="cpu")) == "cpu"
    assert dev(make(dg, device="cpu:0")) == "cpu" and dev(make(torch, device="cpu:0")) == "cpu"
    if name not in ("randint",) and here.is_floating_point():
        grad = make(dg, device="test:0", requires_grad=True)
        assert grad.requires_grad and grad.is_leaf and dev(grad) == "test:0"
    unknown = torch_message(lambda: make(torch, device="foo"))  # torch's message, with its own list of types
    their_types = unknown.split("Expected one of ")[1].split(" device type")[0]
    with pytest.raises(RuntimeError) as e:
        make(dg, device="foo")
    assert str(e.value) == f"[{name}] " + unknown.replace(their_types, "cpu, cuda, mps, meta, xpu, test"), str(e.value)
    for unavailable in ("test:2", "cuda", "cuda:0"):
        with pytest.raises(RuntimeError, match=f"device {unavailable}(:0)? is not available"):
            make(dg, device=unavailable)


def test_like_and_new_factories_follow_their_input():
    """*_like take their input's device (torch: the default device does not apply to them), new_* self's."""
    d = dg.arange(6, dtype=dg.float32, device="test:1").reshape(2, 3)
    m = torch.arange(6.0, device="meta").reshape(2, 3)
    likes = {"zeros_like": lambda lib, x, **kw: lib.zeros_like(x, **kw),
             "ones_like": lambda lib, x, **kw: lib.ones_like(x, **kw),
             "empty_like": lambda lib, x, **kw: lib.empty_like(x, **kw),
             "full_like": lambda lib, x, **kw: lib.full_like(x, 2.0, **kw),
             "rand_like": lambda lib, x, **kw: lib.rand_like(x, **kw),
             "randn_like": lambda lib, x, **kw: lib.randn_like(x, **kw),
             "randint_like": lambda lib, x, **kw: lib.randint_like(x, 5, **kw),
             "new_zeros": lambda lib, x, **kw: x.new_zeros((2,), **kw),
             "new_ones": lambda lib, x, **kw: x.new_ones(2, **kw),
             "new_empty": lambda lib, x, **kw: x.new_empty((2,), **kw),
             "new_full": lambda lib, x, **kw: x.new_full((2,), 3.0, **kw),
             "new_tensor": lambda lib, x, **kw: x.new_tensor([1.0, 2.0], **kw)}
    for name, make in likes.items():
        assert make(torch, m).device.type == "meta", name
        assert dev(make(dg, d)) == "test:1", name
        assert make(torch, m, device="cpu").device.type == "cpu", name
        assert dev(make(dg, d, device="cpu")) == "cpu" and dev(make(dg, d, device="test:0")) == "test:0", name
        assert dev(make(dg, dg.ones(2, 3))) == "cpu", name
    assert dg.zeros_like(d).cpu().tolist() == [[0.0] * 3] * 2 and dg.full_like(d, 2.0).cpu().tolist() == [[2.0] * 3] * 2
    assert d.new_tensor([1, 2]).dtype == dg.float32 and d.new_tensor([1, 2]).cpu().tolist() == [1.0, 2.0]
    copied = dg.ones(2).new_tensor(d)  # a tensor's data, copied to self's device (torch's new_tensor)
    assert dev(copied) == "cpu" and copied.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert dev(d.new_tensor(dg.ones(2), dtype=dg.float64)) == "test:1"


def test_python_factories_follow_torch():
    x = dg.arange(3, dtype=dg.float32)
    d = x.to("test:0")
    assert dg.as_tensor(d) is d and dg.as_tensor(x) is x  # no copy where nothing changes
    assert dev(dg.as_tensor(x, device="test:1")) == "test:1" and dg.as_tensor(d, device="cpu").tolist() == x.tolist()
    a = np.arange(4.0)
    assert dev(dg.as_tensor(a, device="test:0")) == "test:0" and dg.as_tensor(a, device="test:0").cpu().tolist() == \
        a.tolist()
    assert dg.asarray(d) is d and dev(dg.asarray(x, device="test:1")) == "test:1"
    assert dev(dg.asarray(a, device="test:1", requires_grad=True)) == "test:1"
    theirs = torch_message(lambda: torch.asarray(torch.arange(3.0), device="meta", copy=False))
    with pytest.raises(ValueError) as e:
        dg.asarray(x, device="test:0", copy=False)
    assert str(e.value) == theirs.replace("meta", "test:0")
    with pytest.raises(ValueError, match="can't alias tensor from device 'cpu' to 'test:1'"):
        dg.asarray(a, device="test:1", copy=False)
    r = dg.randint_like(d, 10)
    assert dev(r) == "test:0" and r.dtype == dg.float32 and dev(dg.randint_like(d, 2, 9, device="cpu")) == "cpu"
    assert torch.randint_like(torch.ones(2, device="meta"), 3).device.type == "meta"
    dg.manual_seed(1)
    here = dg.normal(2.0, 3.0, (4,))
    dg.manual_seed(1)
    there = dg.normal(2.0, 3.0, (4,), device="test:1")
    assert dev(there) == "test:1" and there.cpu().tolist() == here.tolist()
    assert dev(dg.scalar_tensor(1, device="test:0", dtype=dg.int64)) == "test:0"
    eye = dg.eye(3, device="test:1", dtype=dg.float64, requires_grad=True)
    assert dev(eye) == "test:1" and eye.is_leaf and eye.requires_grad and eye.dtype == dg.float64
    assert eye.detach().cpu().tolist() == torch.eye(3, dtype=torch.float64).tolist()


def test_legacy_tensor_types_are_the_cpus():
    for name in ("FloatTensor", "LongTensor"):
        ours, theirs = getattr(dg, name), getattr(torch, name)
        assert dev(ours(2, device="cpu")) == "cpu" and str(theirs(2, device="cpu").device) == "cpu"
        message = torch_message(lambda: theirs(2, device="meta"))
        assert message == "legacy constructor expects device type: cpu but device type: meta was passed"
        for args in ((2,), ([1, 2],)):
            with pytest.raises(RuntimeError) as e:
                ours(*args, device="test:0")
            assert str(e.value) == message.replace("meta", "test")


# --- the default device ----------------------------------------------------------------------------------------------
def test_default_device_is_the_cpu_until_set(default_device):
    assert dg.get_default_device() == dg.device("cpu") and repr(dg.get_default_device()) == \
        repr(torch.get_default_device())
    dg.set_default_device("test:1")
    assert dg.get_default_device() == dg.device("test:1")
    dg.set_default_device("test")  # no index: the device's first, as torch's get_default_device reports it
    assert repr(dg.get_default_device()) == "device(type='test', index=0)"
    dg.set_default_device(None)
    assert dg.get_default_device() == dg.device("cpu")
    with pytest.raises(RuntimeError, match=r"\[set_default_device\] device test:3 is not available"):
        dg.set_default_device("test:3")  # torch raises at the next factory; dygrad at once
    with pytest.raises(RuntimeError, match="Expected one of"):
        dg.set_default_device("foo")
    assert dg.get_default_device() == dg.device("cpu")


def _placements(lib, default):
    """Which factories build on the default device (True) and which stay where they are (False)."""
    cpu_tensor = lib.ones(2, device="cpu")
    calls = {name: (lambda make=make: make(lib)) for name, make in FACTORIES.items()}
    calls.update({
        "zeros_like": lambda: lib.zeros_like(cpu_tensor), "rand_like": lambda: lib.rand_like(cpu_tensor),
        "randint_like": lambda: lib.randint_like(cpu_tensor, 3), "new_zeros": lambda: cpu_tensor.new_zeros(2),
        "new_tensor": lambda: cpu_tensor.new_tensor([1.0]), "from_numpy": lambda: lib.from_numpy(np.ones(2)),
        "normal": lambda: lib.normal(0.0, 1.0, (2,)), "as_tensor(ndarray)": lambda: lib.as_tensor(np.ones(2)),
        "as_tensor(tensor)": lambda: lib.as_tensor(cpu_tensor), "asarray(tensor)": lambda: lib.asarray(cpu_tensor),
        "FloatTensor": lambda: lib.FloatTensor(2, 3), "FloatTensor(data)": lambda: lib.FloatTensor([1.0]),
        "explicit cpu": lambda: lib.zeros(2, device="cpu"),
    })
    return {name: str(call().device) == default for name, call in calls.items()}


def test_the_default_device_reaches_the_factories_torch_gives_it_to(default_device):
    torch.set_default_device("meta")
    try:
        theirs = _placements(torch, "meta")
    finally:
        torch.set_default_device(None)
    dg.set_default_device("test:0")
    ours = _placements(dg, "test:0")
    assert ours == theirs
    assert sorted(k for k, v in ours.items() if not v) == [
        "FloatTensor", "FloatTensor(data)", "explicit cpu", "from_numpy", "new_tensor", "new_zeros", "normal",
        "rand_like", "randint_like", "zeros_like"]


def test_with_device_nests_and_restores(default_device):
    dg.set_default_device("test:0")
    with dg.device("test:1") as entered:
        assert entered == dg.device("test:1") and dg.get_default_device() == dg.device("test:1")
        assert dev(dg.zeros(1)) == "test:1"
        with dg.device("cpu"):
            assert dev(dg.zeros(1)) == "cpu" and dg.get_default_device() == dg.device("cpu")
        assert dev(dg.ones(1)) == "test:1"
    assert dev(dg.zeros(1)) == "test:0"
    with pytest.raises(ZeroDivisionError):
        with dg.device("test:1"):
            1 / 0  # noqa: B018
    assert dg.get_default_device() == dg.device("test:0")
    again = dg.device("test:1")
    with again:
        with again:  # one device object entered twice
            assert dev(dg.zeros(1)) == "test:1"
        assert dev(dg.zeros(1)) == "test:1"
    assert dev(dg.zeros(1)) == "test:0"
    with pytest.raises(RuntimeError, match="cuda:0 is not available"):
        with dg.device("cuda"):
            pass
    assert dg.get_default_device() == dg.device("test:0")


def test_meta_inside_a_default_device_builds_meta_tensors(default_device):
    dg.set_default_device("test:1")
    with dg.device("meta"):
        assert str(dg.get_default_device()) == "meta"
        layer = nn.Linear(4, 4)
        assert layer.weight.is_meta and str(layer.weight.device) == "meta"
    assert dg.get_default_device() == dg.device("test:1") and dev(dg.zeros(1)) == "test:1"


def test_the_default_device_is_per_thread_as_torch(default_device):
    seen = {}

    def worker(lib, key):
        seen[key] = (str(lib.get_default_device()), str(lib.zeros(1).device))

    torch.set_default_device("meta")
    try:
        t = threading.Thread(target=worker, args=(torch, "torch"))
        t.start()
        t.join()
    finally:
        torch.set_default_device(None)
    dg.set_default_device("test:1")
    t = threading.Thread(target=worker, args=(dg, "dygrad"))
    t.start()
    t.join()
    assert seen == {"torch": ("cpu", "cpu"), "dygrad": ("cpu", "cpu")}
    assert dev(dg.zeros(1)) == "test:1"


def test_modules_built_under_a_default_device_live_there(default_device):
    dg.manual_seed(0)
    here = nn.Linear(3, 2)
    dg.manual_seed(0)
    with dg.device("test:0"):
        there = nn.Linear(3, 2)
    assert all(dev(p) == "test:0" for p in there.parameters())
    assert there.weight.detach().cpu().tolist() == here.weight.detach().tolist()  # the same draws
    assert there.bias.detach().cpu().tolist() == here.bias.detach().tolist()


MODULES = {
    "Linear": lambda lib, **kw: lib.nn.Linear(3, 2, **kw),
    "Embedding": lambda lib, **kw: lib.nn.Embedding(5, 2, padding_idx=1, **kw),
    "LayerNorm": lambda lib, **kw: lib.nn.LayerNorm(4, **kw),
    "RMSNorm": lambda lib, **kw: lib.nn.RMSNorm(4, eps=1e-6, **kw),
    "BatchNorm1d": lambda lib, **kw: lib.nn.BatchNorm1d(3, **kw),
    "GroupNorm": lambda lib, **kw: lib.nn.GroupNorm(2, 4, **kw),
    "Conv2d": lambda lib, **kw: lib.nn.Conv2d(2, 3, 3, **kw),
    "ConvTranspose1d": lambda lib, **kw: lib.nn.ConvTranspose1d(2, 3, 3, **kw),
    "PReLU": lambda lib, **kw: lib.nn.PReLU(2, **kw),
    "LSTM": lambda lib, **kw: lib.nn.LSTM(3, 4, **kw),
    "GRUCell": lambda lib, **kw: lib.nn.GRUCell(3, 4, **kw),
    "MultiheadAttention": lambda lib, **kw: lib.nn.MultiheadAttention(4, 2, add_bias_kv=True, **kw),
    "TransformerEncoderLayer": lambda lib, **kw: lib.nn.TransformerEncoderLayer(4, 2, 8, **kw),
    "Transformer": lambda lib, **kw: lib.nn.Transformer(4, 2, 1, 1, 8, batch_first=True, **kw),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_take_device_as_torchs(name):
    """A module's device= places every parameter and buffer there (torch's factory_kwargs), with the values it has
    on the host."""
    make = MODULES[name]
    theirs = make(torch, device="meta")
    assert {t.device.type for t in list(theirs.parameters()) + list(theirs.buffers())} == {"meta"}
    dg.manual_seed(0)
    here = make(dg)
    dg.manual_seed(0)
    there = make(dg, device="test:1")
    tensors = dict(there.named_parameters()) | dict(there.named_buffers())
    assert {dev(t) for t in tensors.values()} == {"test:1"} and tensors
    for key, t in (dict(here.named_parameters()) | dict(here.named_buffers())).items():
        assert tensors[key].detach().cpu().tolist() == t.detach().tolist(), key
    wide = make(dg, device="test:0", dtype=dg.float64)
    assert {(dev(p), p.dtype) for p in wide.parameters()} == {("test:0", dg.float64)}


def test_module_to_moves_parameters_buffers_and_grads():
    m = nn.BatchNorm1d(3)
    m.weight.grad = dg.ones(3)
    weight = m.weight
    assert m.to("test:1") is m and m.weight is weight  # the same Parameter objects, as torch's
    assert {dev(t) for t in list(m.parameters()) + list(m.buffers())} == {"test:1"} and dev(m.weight.grad) == "test:1"
    assert m.running_var.cpu().tolist() == [1.0, 1.0, 1.0]
    m.to(dg.zeros(1, dtype=dg.float64))  # a tensor: its device and dtype
    assert dev(m.weight) == "cpu" and m.weight.dtype == dg.float64 and m.num_batches_tracked.dtype == dg.int64
    m.to("test:0", dg.float32)
    assert dev(m.running_mean) == "test:0" and m.running_mean.dtype == dg.float32
    assert m.cpu() is m and dev(m.weight) == "cpu"


# --- checkpoints ----------------------------------------------------------------------------------------------------
def _saved(obj):
    f = io.BytesIO()
    dg.save(obj, f)
    return f.getvalue()


def _locations(raw):
    """The storage locations recorded in a checkpoint's pickle (its persistent ids)."""
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        name = next(n for n in z.namelist() if n.endswith("data.pkl"))
        locations = []

        class Reader(pickle.Unpickler):
            def find_class(self, module, attr):
                return lambda *a, **k: None

            def persistent_load(self, pid):
                locations.append(pid[3])

        Reader(io.BytesIO(z.read(name))).load()
        return locations


def test_save_records_the_device_and_load_restores_it():
    w = dg.arange(6, dtype=dg.float32).reshape(2, 3)
    raw = _saved({"w": w.to("test:1"), "b": dg.ones(2, dtype=dg.bfloat16, device="test:0"), "cpu": dg.zeros(1)})
    assert sorted(_locations(raw)) == ["cpu", "test:0", "test:1"]  # torch records 'cuda:0' the same way
    loaded = dg.load(io.BytesIO(raw))
    assert dev(loaded["w"]) == "test:1" and loaded["w"].cpu().tolist() == w.tolist()
    assert dev(loaded["b"]) == "test:0" and loaded["b"].dtype == dg.bfloat16 and loaded["b"].cpu().tolist() == [1, 1]
    assert dev(loaded["cpu"]) == "cpu"
    # torch reads the file with a map_location, as a CUDA checkpoint on a machine without CUDA
    theirs = torch.load(io.BytesIO(raw), map_location="cpu")
    assert theirs["w"].tolist() == w.tolist() and theirs["b"].dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="test"):
        torch.load(io.BytesIO(raw))


@pytest.mark.parametrize("map_location, expected", [
    ("cpu", ("cpu", "cpu")), (dg.device("cpu"), ("cpu", "cpu")), ("test:1", ("test:1", "test:1")),
    (dg.device("test:0"), ("test:0", "test:0")), ({"test:0": "test:1"}, ("test:1", "cpu")),
    ({"test:0": "cpu"}, ("cpu", "cpu")), ({"cpu": "test:1"}, ("test:0", "test:1")), ({}, ("test:0", "cpu")),
    (lambda storage, location: storage, ("cpu", "cpu")), (lambda storage, location: None, ("test:0", "cpu")),
    (None, ("test:0", "cpu")),
])
def test_map_location_in_torchs_forms(map_location, expected):
    raw = _saved({"d": dg.arange(4, dtype=dg.float32, device="test:0"), "c": dg.arange(3)})
    loaded = dg.load(io.BytesIO(raw), map_location=map_location)
    assert (dev(loaded["d"]), dev(loaded["c"])) == expected
    assert loaded["d"].cpu().tolist() == [0.0, 1.0, 2.0, 3.0] and loaded["c"].cpu().tolist() == [0, 1, 2]


def test_map_location_callable_sees_the_storage_on_the_host():
    raw = _saved({"d": dg.tensor([1.0, 2.0], device="test:1")})
    seen = []

    def keep_on_host(storage, location):
        seen.append((location, storage.device, storage.nbytes()))
        return storage

    assert dev(dg.load(io.BytesIO(raw), map_location=keep_on_host)["d"]) == "cpu"
    assert seen == [("test:1", dg.device("cpu"), 8)]
    with pytest.raises(RuntimeError, match=r"map_location\(storage, location\) returned a str"):
        dg.load(io.BytesIO(raw), map_location=lambda storage, location: "test:0")


def test_a_torch_checkpoint_loads_onto_a_device(tmp_path):
    base = torch.arange(10.0)
    path = tmp_path / "t.pt"
    torch.save({"a": base[:4], "b": base[4:], "tied": base, "again": base, "t": torch.ones(2, 3).t()}, path)
    for kwargs in ({}, {"mmap": True}):
        loaded = dg.load(path, map_location="test:1", **kwargs)
        assert {dev(t) for t in loaded.values()} == {"test:1"}
        assert loaded["a"].cpu().tolist() == [0.0, 1.0, 2.0, 3.0] and loaded["t"].cpu().tolist() == [[1.0, 1.0]] * 3
        # views of one storage share one copy on the device, as on the host and in torch
        assert loaded["b"].data_ptr() - loaded["a"].data_ptr() == 16 and loaded["tied"].data_ptr() == \
            loaded["again"].data_ptr() == loaded["a"].data_ptr()


def test_safetensors_load_takes_map_location(tmp_path):
    from dygrad.safetensors_io import save_file
    path = tmp_path / "w.safetensors"
    save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(path))
    loaded = dg.load(path, map_location="test:0")
    assert dev(loaded["w"]) == "test:0" and loaded["w"].cpu().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert dev(dg.load(path)["w"]) == "cpu"


def test_a_device_checkpoint_without_the_device_needs_map_location(tmp_path):
    path = tmp_path / "d.pt"
    dg.save({"w": dg.ones(2, device="test:1")}, path)
    result = run_python(f"import dygrad as dg\n"
                        f"try:\n    dg.load({str(path)!r})\nexcept RuntimeError as e:\n    print(e)\n"
                        f"print(dg.load({str(path)!r}, map_location='cpu')['w'].tolist())")
    assert result.returncode == 0, result.stderr
    error, values = result.stdout.splitlines()
    assert "device 'test:1', which is not available" in error and "map_location" in error
    assert values == "[1.0, 1.0]"


def test_load_state_dict_copies_across_devices():
    dg.manual_seed(0)
    source = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    target = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).to("test:1")
    weight = target[0].weight
    target.load_state_dict(source.state_dict())  # cpu -> test:1
    assert target[0].weight is weight and dev(weight) == "test:1"
    assert {k: v.cpu().tolist() for k, v in target.state_dict().items()} == \
        {k: v.tolist() for k, v in source.state_dict().items()}
    back = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    back.load_state_dict(dg.load(io.BytesIO(_saved(target.state_dict()))))  # test:1 -> cpu, through a file
    assert {dev(t) for t in back.state_dict().values()} == {"cpu"}
    assert {k: v.tolist() for k, v in back.state_dict().items()} == \
        {k: v.tolist() for k, v in source.state_dict().items()}
    assigned = nn.Linear(3, 4)
    assigned.load_state_dict(target[0].state_dict(), assign=True)  # assign: the loaded tensors themselves
    assert dev(assigned.weight) == "test:1" and isinstance(assigned.weight, nn.Parameter)


def test_pickling_keeps_the_device():
    t = dg.tensor([1.0, 2.0], device="test:1").requires_grad_(True)
    back = pickle.loads(pickle.dumps(t))
    assert dev(back) == "test:1" and back.requires_grad and back.detach().cpu().tolist() == [1.0, 2.0]
    bf = pickle.loads(pickle.dumps(dg.ones(2, dtype=dg.bfloat16, device="test:0")))
    assert dev(bf) == "test:0" and bf.dtype == dg.bfloat16
    raw = pickle.dumps(dg.ones(1))
    with dg.device("test:0"):  # a CPU tensor's pickle stays on the CPU under a default device (torch too)
        assert dev(pickle.loads(raw)) == "cpu"
    theirs = pickle.dumps(torch.ones(1))
    torch.set_default_device("meta")
    try:
        assert pickle.loads(theirs).device.type == "cpu"
    finally:
        torch.set_default_device(None)


# --- optimizers -----------------------------------------------------------------------------------------------------
OPTIMIZERS = {
    "SGD": lambda params: dg.optim.SGD(params, lr=0.1),
    "SGD momentum": lambda params: dg.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True),
    "Adam": lambda params: dg.optim.Adam(params, lr=0.01),
    "AdamW": lambda params: dg.optim.AdamW(params, lr=0.01, weight_decay=0.1),
    "Adam tensor lr": lambda params: dg.optim.Adam(params, lr=dg.tensor(0.01)),
}


def _params_and_grads(device):
    """Two parameters and three steps of gradients, the same numbers on any device."""
    rng = np.random.default_rng(0)
    params = [nn.Parameter(dg.tensor(rng.standard_normal((3, 2)).astype(np.float32), device=device)),
              nn.Parameter(dg.tensor(rng.standard_normal(4).astype(np.float32), device=device))]
    grads = [[dg.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32), device=device) for p in params]
             for _ in range(3)]
    return params, grads


def _run(make, devices):
    params, grads = _params_and_grads("cpu")
    params = [nn.Parameter(p.detach().to(d)) for p, d in zip(params, devices)]
    optimizer = make(params)
    for step in grads:
        for p, g in zip(params, step):
            p.grad = g.to(p.device)
        optimizer.step()
    return params, optimizer


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("devices", [("test:0", "test:0"), ("cpu", "test:1")], ids=["one device", "two devices"])
def test_optimizer_state_lives_on_its_parameters_device_and_steps_bitwise(name, devices):
    """The fused steps run on the parameters' device (once per device, for a group on several), with state, step
    counts and hyper-parameter tensors there: the parameters equal the CPU's bitwise."""
    make = OPTIMIZERS[name]
    reference, _ = _run(make, ("cpu", "cpu"))
    params, optimizer = _run(make, devices)
    for p, expected, device in zip(params, reference, devices):
        assert dev(p) == device and p.detach().cpu().numpy().tobytes() == expected.detach().numpy().tobytes()
        state = optimizer.state[p]
        if name != "SGD":  # (plain SGD keeps no state)
            assert {dev(v) for v in state.values() if isinstance(v, dg.Tensor)} == {device}, state
    if name.startswith("Adam"):
        assert optimizer.state[params[1]]["step"].cpu().item() == 3.0


def test_optimizer_state_dict_moves_to_the_parameters_device():
    params, optimizer = _run(OPTIMIZERS["Adam"], ("test:0", "test:0"))
    saved = _saved(optimizer.state_dict())
    host_params, _ = _params_and_grads("cpu")
    on_host = dg.optim.Adam(host_params, lr=0.01)
    on_host.load_state_dict(dg.load(io.BytesIO(saved)))  # the file's tensors are on test:0: moved to the cpu
    assert {dev(v) for s in on_host.state.values() for v in s.values()} == {"cpu"}
    assert on_host.state[host_params[0]]["exp_avg"].tolist() == optimizer.state[params[0]]["exp_avg"].cpu().tolist()
    device_params, _ = _params_and_grads("test:1")
    on_device = dg.optim.Adam(device_params, lr=0.01)
    on_device.load_state_dict(dg.load(io.BytesIO(saved), map_location="cpu"))
    assert {dev(v) for s in on_device.state.values() for v in s.values()} == {"test:1"}
    momentum = dg.optim.SGD(_params_and_grads("test:0")[0], lr=0.1, momentum=0.9)
    momentum.load_state_dict({"state": {0: {"momentum_buffer": dg.ones(3, 2)}}, "param_groups": [
        dict(momentum.state_dict()["param_groups"][0])]})
    assert dev(momentum.state[momentum.param_groups[0]["params"][0]]["momentum_buffer"]) == "test:0"


def test_a_scheduler_reaches_every_devices_learning_rate():
    def run(devices):
        params, grads = _params_and_grads("cpu")
        params = [nn.Parameter(p.detach().to(d)) for p, d in zip(params, devices)]
        optimizer = dg.optim.SGD(params, lr=0.5, momentum=0.5)
        scheduler = dg.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.to(p.device)
            optimizer.step()
            scheduler.step()
            optimizer.param_groups[0]["momentum"] = 0.25  # a hyper-parameter changed between steps
        return [p.detach().cpu().numpy().tobytes() for p in params]

    assert run(("test:0", "test:1")) == run(("cpu", "cpu"))


def test_master_weights_live_on_the_parameters_device():
    def run(device):
        p = nn.Parameter(dg.tensor([1.0, -2.0, 3.0], dtype=dg.bfloat16, device=device))
        optimizer = dg.optim.AdamW([{"params": [p], "master_weights": True}], lr=0.1)
        for g in ([0.5, 0.25, -1.0], [-0.125, 2.0, 0.75]):
            p.grad = dg.tensor(g, dtype=dg.bfloat16, device=device)
            optimizer.step()
        state = optimizer.state[p]
        assert {dev(v) for v in state.values()} == {device} and state["master_param"].dtype == dg.float32
        return p.detach().cpu().float().tolist(), state["master_param"].cpu().numpy().tobytes()

    assert run("test:1") == run("cpu")


def test_main_grad_lives_on_the_parameters_device():
    p = nn.Parameter(dg.ones(3, dtype=dg.bfloat16, device="test:0"))
    dg.amp.use_main_grad([p])
    assert dev(p.main_grad) == "test:0" and p.main_grad.dtype == dg.float32


# --- distributed ----------------------------------------------------------------------------------------------------
def test_collectives_refuse_a_device_tensor_without_reading_it():
    """The group of one (no MPI) checks as the MPI group does (test_distributed.py runs the MPI one under mpirun)."""
    g = dist._single_process_group()
    d = dg.ones(4, device="test:0")
    calls = {"all_reduce": (lambda: dist.all_reduce(d, group=g), "tensor"),
             "broadcast": (lambda: dist.broadcast(d, group=g, group_src=0), "tensor"),
             "reduce": (lambda: dist.reduce(d, group=g, group_dst=0), "tensor"),
             "all_gather_into_tensor": (lambda: dist.all_gather_into_tensor(dg.zeros(4), d, group=g), "input_tensor"),
             "all_gather": (lambda: dist.all_gather([dg.zeros(4)], d, group=g), "tensor"),
             "reduce_scatter_tensor": (lambda: dist.reduce_scatter_tensor(d, dg.ones(4), group=g), "output")}
    for name, (call, argument) in calls.items():
        with pytest.raises(NotImplementedError) as e:
            call()
        assert str(e.value).startswith(f"[{name}] the single process group takes cpu tensors; got {argument} on "
                                       f"test:0"), str(e.value)
    with pytest.raises(NotImplementedError, match=r"\[DistributedDataParallel\] the single process group takes cpu "
                                                  r"tensors; got weight on test:1"):
        nn.parallel.DistributedDataParallel(nn.Linear(2, 2).to("test:1"), process_group=g)
    x = dg.ones(4)
    dist.all_reduce(x, group=g)  # the group still works
    assert x.tolist() == [1.0] * 4


# --- a training step on the device: waits on the op sweep -----------------------------------------------------------
def _train(device, make_optimizer, steps=3):
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3), nn.LayerNorm(3))
    model.to(device)
    optimizer = make_optimizer(model.parameters())
    rng = np.random.default_rng(1)
    for _ in range(steps):
        x = dg.tensor(rng.standard_normal((5, 4)).astype(np.float32), device=device)
        target = dg.tensor(rng.standard_normal((5, 3)).astype(np.float32), device=device)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
    model.to("cpu")
    return {k: v.numpy().tobytes() for k, v in model.state_dict().items()}, loss.item()


@needs_device_ops
@pytest.mark.parametrize("name", ["SGD momentum", "AdamW"])
def test_a_training_step_on_the_device_equals_the_cpus_bitwise(name):
    dg.use_deterministic_algorithms(True)
    try:
        on_device = _train("test:0", OPTIMIZERS[name])
        on_cpu = _train("cpu", OPTIMIZERS[name])
    finally:
        dg.use_deterministic_algorithms(False)
    assert on_device == on_cpu


@needs_device_ops
def test_composed_optimizer_steps_on_the_device_equal_the_cpus_bitwise():
    """amsgrad (and a non-contiguous parameter) take the composed path: its ops run on the device."""
    make = lambda params: dg.optim.Adam(params, lr=0.01, amsgrad=True)  # noqa: E731
    reference, _ = _run(make, ("cpu", "cpu"))
    params, optimizer = _run(make, ("test:0", "test:1"))
    for p, expected in zip(params, reference):
        assert p.detach().cpu().numpy().tobytes() == expected.detach().numpy().tobytes()
    assert {dev(v) for v in optimizer.state[params[1]].values()} == {"test:1"}


def test_a_device_stream_bounds_how_far_the_host_runs_ahead_too():
    """A device's stream (the test device's launcher; CUDA's launch queue will be one) bounds the host's run-ahead as
    the CPU's does (docs/stream.md, "Run-ahead bound"): with a bound set for test:0, the host waits at enqueue and the
    queued estimate stays within the bound in force."""
    saved = dg.get_run_ahead_limit("test:0")
    dg.set_run_ahead_limit(0.002, device="test:0")
    try:
        a = dg.randn(192, 192, device="test:0")
        b = dg.randn(192, 192, device="test:0") / 14
        for _ in range(10):
            a = a @ b  # the op's rate measured on the launcher
        dg.synchronize()
        dg._C._run_ahead_stats("test:0", reset=True)
        for _ in range(200):
            a = a @ b
        stats = dg._C._run_ahead_stats("test:0")
        dg.synchronize()
        assert stats["limit_ns"] == 2_000_000 and 1_000_000 <= stats["bound_ns"] <= 2_000_000
        assert stats["waits"] > 0 and 0 < stats["max_queued_ns"] <= stats["bound_ns"], stats
        assert dg._C._run_ahead_stats("cpu")["limit_ns"] == int(dg.get_run_ahead_limit() * 1e9)  # per stream
        assert dg.isfinite(a.cpu()).all().item()
    finally:
        dg.set_run_ahead_limit(saved, device="test:0")
