"""Errors become the Python exception a torch user expects, naming the op; fuzzing the bindings with wrong
types, wrong arity, huge and negative sizes, NaN and empty tensors never crashes the interpreter."""
import math
import random
import sys

import numpy as np
import pytest

import dygrad as dg

ALLOWED = (TypeError, ValueError, IndexError, RuntimeError, NotImplementedError, OverflowError)


@pytest.mark.parametrize("call,error,message", [
    (lambda: dg.add(dg.ones(2, 3), dg.ones(4)), ValueError, r"\[add\] shapes \(2, 3\) and \(4,\)"),
    (lambda: dg.ones(2, 3) * dg.ones(2), ValueError, r"\[mul\]"),
    (lambda: dg.ones(2).view(3), RuntimeError, r"\[view\]"),
    (lambda: dg.ones(2, 3).transpose(0, 5), IndexError, r"\[transpose\] dimension out of range"),
    (lambda: dg.ones(2, 3).sum(7), IndexError, r"\[sum\]"),
    (lambda: dg.ones(2).item(), RuntimeError, r"\[item\]"),
    (lambda: dg.ones(2).backward(), RuntimeError, r"\[backward\]"),
    (lambda: dg.ones(2, requires_grad=True).add_(1), RuntimeError, r"add"),
    (lambda: dg.ones(2, dtype=dg.int64).requires_grad_(), RuntimeError, r"\[requires_grad_\]"),
    (lambda: dg.zeros(-1), ValueError, r"negative dimension"),
    (lambda: dg.zeros(1 << 62), RuntimeError, r"too large"),
    (lambda: dg.zeros(2**70), OverflowError, r"\[zeros\]"),
    (lambda: dg.tensor([[1, 2], [3]]), ValueError, r"\[tensor\] expected sequence of length 2"),
    (lambda: dg.tensor(["a"]), TypeError, r"\[tensor\] new\(\): invalid data type 'str'"),
    (lambda: dg.tensor(None), TypeError, r"\[tensor\]"),
    (lambda: dg.add("a", dg.ones(1)), TypeError, r"\[add\] argument 'input' must be Tensor, not str"),
    (lambda: dg.add(dg.ones(1), "a"), TypeError, r"\[add\] argument 'other' must be Tensor or Number, not str"),
    (lambda: dg.add(dg.ones(1)), TypeError, r"\[add\] missing required argument 'other'"),
    (lambda: dg.add(dg.ones(1), 1, 2), TypeError, r"\[add\] takes 2 positional arguments but 3 were given"),
    (lambda: dg.add(dg.ones(1), 1, beta=2), TypeError, r"\[add\] got an unexpected keyword argument 'beta'"),
    (lambda: dg.add(dg.ones(1), 1, alpha="x"), TypeError, r"\[add\] argument 'alpha' must be Number"),
    (lambda: dg.mul(dg.ones(1), 1, alpha=2), TypeError, r"\[mul\] got an unexpected keyword argument 'alpha'"),
    (lambda: dg.ones(1).add(other=1, input=dg.ones(1)), TypeError, r"\[add\] got multiple values for argument 'input'"),
    (lambda: dg.ones(2) + "x", TypeError, r"unsupported operand"),
    (lambda: dg.zeros("a"), TypeError, r"\[zeros\] argument 'size' must be int"),
    (lambda: dg.zeros(2.5), TypeError, r"\[zeros\]"),
    (lambda: dg.zeros(2, dtype="float32"), TypeError, r"\[zeros\] argument 'dtype'"),
    (lambda: dg.ones(2).view("a"), TypeError, r"\[view\]"),
    (lambda: dg.ones(2).to("cuda"), RuntimeError, r"\[to\]"),
    (lambda: dg.ones(2, dtype=dg.bfloat16).numpy(), TypeError, r"BFloat16"),
    (lambda: len(dg.tensor(1.0)), TypeError, r"0-d"),
    (lambda: bool(dg.ones(2)), RuntimeError, r"ambiguous"),
    (lambda: dg.tensor([True]) - dg.tensor([True]), TypeError, r"\[sub\]"),
])
def test_error_types_and_messages(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_nan_and_inf_flow_through():
    t = dg.tensor([math.nan, 1.0, -1.0])
    assert math.isnan((t + 1).tolist()[0])
    assert (dg.tensor([1.0, -1.0]) / 0.0).tolist() == [math.inf, -math.inf]
    assert "nan" in repr(t)
    assert math.isnan(dg.zeros(0).mean().item())


def test_empty_tensors():
    e = dg.zeros(0, 3)
    assert (e + 1).shape == (0, 3) and (e * dg.ones(3)).shape == (0, 3)
    assert e.sum(0).tolist() == [0.0, 0.0, 0.0] and e.sum().item() == 0.0
    assert e.tolist() == [] and e.numpy().shape == (0, 3) and repr(dg.zeros(0)) == "tensor([])"
    assert dg.tensor([]).shape == (0,) and e.t().shape == (3, 0) and e.reshape(3, 0, 5).shape == (3, 0, 5)
    x = dg.zeros(0, requires_grad=True)
    (x * 2).sum().backward()
    assert x.grad.shape == (0,)


def fuzz_values():
    return [
        None, 0, 1, -1, 3, 100000, 2**70, -(2**70), 1.5, math.nan, math.inf, True, "x", b"y", [], [1, 2], [[1], [2, 3]],
        (2, 3), (-1,), (1 << 62,), object(),  # sizes stay small: an allocation that succeeds is filled dg.float32, dg.int64, np.float64(2.0), np.arange(3.0),
        np.zeros((2, 0)), dg.ones(3), dg.ones(2, 3), dg.zeros(0), dg.tensor(1.0), dg.ones(2, dtype=dg.int64),
        dg.ones(2, dtype=dg.bool), dg.ones(2, requires_grad=True), dg.ones(4, 3).t(), dg.ones(2, dtype=dg.bfloat16),
    ]


FUZZ_FUNCTIONS = ["add", "sub", "mul", "div", "neg", "tensor", "from_numpy", "zeros", "ones", "empty", "full",
                  "zeros_like", "ones_like", "full_like", "empty_like", "reshape", "permute", "transpose", "t",
                  "sum", "mean", "detach", "clone", "result_type", "broadcast_to"]
FUZZ_METHODS = ["add", "sub_", "mul", "div_", "view", "reshape", "expand", "permute", "transpose", "to", "float",
                "sum", "mean", "item", "tolist", "numpy", "backward", "requires_grad_", "size", "stride", "copy_",
                "fill_", "contiguous", "__add__", "__rsub__", "__itruediv__", "__neg__", "__getitem__", "__len__",
                "t_", "transpose_", "squeeze_", "unsqueeze_", "as_strided_", "detach_", "random_", "exponential_"]
FUZZ_KEYWORDS = [{}, {"alpha": 2}, {"dtype": dg.float64}, {"dtype": "bad"}, {"keepdim": True}, {"dim": 9},
                 {"requires_grad": True}, {"bogus": 1}, {"size": (2,)}]


def test_fuzz_bindings_never_crash():
    rng = random.Random(1234)
    calls = 0
    for _ in range(4000):
        values = fuzz_values()
        args = [rng.choice(values) for _ in range(rng.randint(0, 3))]
        kwargs = rng.choice(FUZZ_KEYWORDS)
        if rng.random() < 0.5:
            target = getattr(dg, rng.choice(FUZZ_FUNCTIONS))
        else:
            receiver = rng.choice([v for v in values if isinstance(v, dg.Tensor)])
            target = getattr(receiver, rng.choice(FUZZ_METHODS), None)
            if target is None:
                continue
        try:
            result = target(*args, **kwargs)
            if isinstance(result, dg.Tensor):
                repr(result)
        except ALLOWED:
            pass
        calls += 1
        if calls % 200 == 0:
            try:
                dg.synchronize()
            except ALLOWED:
                pass
    assert calls > 3000
    dg.synchronize()


@pytest.fixture(params=[True, False], ids=["inline", "queued"])
def inline_small_ops(request):
    """Runs a test with small ops run inline on an idle stream, then with every op queued (docs/stream.md)."""
    original = dg.get_context()
    dg.set_context(inline_small_ops=request.param)
    yield request.param
    dg.set_context(original)


def test_deferred_kernel_error_names_the_op_and_the_python_line(inline_small_ops):
    x = dg.ones(3)
    dg.synchronize()  # an idle stream: with inline_small_ops the failing op runs on this thread, deferred still
    poisoned = dg._C._deferred_failure(x, 7); line = sys._getframe().f_lineno  # noqa: E702
    with pytest.raises(IndexError) as info:
        dg.synchronize()
    message = str(info.value)
    assert "[_deferred_failure] index 7 is out of range" in message
    assert f"test_errors.py:{line}" in message and "test_deferred_kernel_error_names_the_op_and_the_python_line" in message
    # The failed op's output is invalid; reading it raises again, naming the failure.
    with pytest.raises(RuntimeError, match="produced after a failed op"):
        poisoned.tolist()
    with pytest.raises(RuntimeError, match="produced after a failed op"):
        (poisoned + 1).tolist()
    assert (x + 1).tolist() == [2.0, 2.0, 2.0]  # the stream goes on


def test_a_stream_mark_is_waited_for_and_raises_its_deferred_error():
    # dygrad.train times a step at a mark after its last op (_C._stream_mark / _stream_wait).
    x = dg.ones(1000)
    for _ in range(5):
        x = x * 1.5
    mark = dg._C._stream_mark()
    dg._C._stream_wait(mark)
    assert dg._C._stream_mark() >= mark and x[0].item() == 1.5 ** 5
    with pytest.raises(ValueError, match=r"\[_stream_wait\] no op of sequence number"):
        dg._C._stream_wait(mark + 10**9)  # never enqueued: an error, not a wait forever
    dg._C._deferred_failure(dg.ones(1), 3)
    with pytest.raises(IndexError, match=r"\[_deferred_failure\]"):
        dg._C._stream_wait(dg._C._stream_mark())


def test_deferred_error_in_synchronize_mode_is_raised_at_the_call():
    original = dg.get_context()
    dg.set_context(synchronize=True)
    try:
        with pytest.raises(IndexError, match=r"\[_deferred_failure\]"):
            dg._C._deferred_failure(dg.ones(1), 3)
    finally:
        dg.set_context(original)


def test_a_deferred_error_of_a_module_call_names_the_users_line():
    # The op is issued inside dygrad's own Python code (nn.Embedding -> F.embedding): the call site skips those
    # frames and names this file's line, where the user called the module.
    import inspect

    table = dg.nn.Embedding(10, 4)
    line = inspect.currentframe().f_lineno + 1
    out = table(dg.tensor([1, 99]))
    with pytest.raises(IndexError) as info:
        out.sum().item()
    assert f"(issued at {__file__}:{line} in " in str(info.value)
