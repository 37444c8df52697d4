"""Python ints outside int64 against torch 2.13 (docs/dtypes.md, "Python ints beyond int64"): an int in
[2**63, 2**64) is an integral scalar (uint64 to torch.result_type) that arithmetic wraps into an integral tensor and
that checked conversions (fill_, full, where, clamp, masked_fill, alpha, pow's exponent) refuse; beyond that range
torch raises Python's OverflowError. Every case compares values, dtypes and error types (and the messages torch
shares with dygrad) on int64, uint8, uint64, int32, bool and float32 tensors."""
import pytest
import torch

import dygrad as dg

VALUES = {"2**63": 2 ** 63, "2**64-1": 2 ** 64 - 1, "2**64": 2 ** 64, "-2**63-1": -(2 ** 63) - 1}
DTYPES = ["int64", "uint8", "uint64", "int32", "bool", "float32"]

# Messages dygrad gives as torch does (the rest are compared by exception type): Python's own from the unsigned
# conversion, torch's promotion refusal, its checked conversion, and its tensor-from-data refusal.
SHARED_MESSAGES = ["int too big to convert", "can't convert negative int to unsigned",
                   "Promotion for uint16, uint32, uint64 types is not supported", "Overflow when unpacking long long"]


def operand(m, dtype):
    if dtype == "bool":
        return m.tensor([True, False])
    return m.tensor([3, 1], dtype=getattr(m, dtype))


def outcome(f):
    """f()'s result, its values read (dygrad raises a kernel's error, such as an integer division by zero, at the
    read: docs/async-errors.md), or its exception."""
    try:
        result = f()
        if isinstance(result, (torch.Tensor, dg.Tensor)):
            result.tolist()
        return result
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return e


def mismatch(ours, theirs):
    """None when dygrad's outcome is torch's: the same dtype and values, or the same exception type and message."""
    if isinstance(theirs, Exception):
        if not isinstance(ours, Exception):
            return f"torch raised {type(theirs).__name__}: {theirs}; dygrad returned {ours!r}"
        if type(ours) is not type(theirs):
            return f"torch raised {type(theirs).__name__}: {theirs}; dygrad {type(ours).__name__}: {ours}"
        said = str(theirs).splitlines()[0]
        for message in SHARED_MESSAGES:
            if message in said and message not in str(ours):
                return f"torch said {said!r}, dygrad {ours}"
        if "cannot be converted to type" in said and not ("cannot be converted to type" in str(ours) and
                                                           "without overflow" in str(ours)):
            return f"torch said {said!r}, dygrad {ours}"
        return None
    if isinstance(ours, Exception):
        return f"torch returned {theirs!r}; dygrad raised {type(ours).__name__}: {ours}"
    if isinstance(theirs, torch.dtype):
        return None if str(ours).split(".")[-1] == str(theirs).split(".")[-1] else f"torch {theirs}, dygrad {ours}"
    if not isinstance(theirs, torch.Tensor):
        return None if ours == theirs and type(ours) is type(theirs) else f"torch {theirs!r}, dygrad {ours!r}"
    if str(ours.dtype).split(".")[-1] != str(theirs.dtype).split(".")[-1]:
        return f"dtype: torch {theirs.dtype}, dygrad {ours.dtype}"
    if ours.tolist() != theirs.tolist():
        return f"values: torch {theirs.tolist()}, dygrad {ours.tolist()}"
    return None


def compare_all(cases):
    """cases: {name: f(m)}; every mismatch, with its name."""
    found = []
    for name, f in cases.items():
        problem = mismatch(outcome(lambda: f(dg)), outcome(lambda: f(torch)))
        if problem:
            found.append(f"{name}: {problem}")
    assert not found, "\n".join(found)


def index_put(m, x, v):
    y = x.clone()
    y[m.tensor([0])] = v
    return y


# Each op with the tensor x (made by operand()) and the Python int v.
OPS = {
    "add": lambda m, x, v: x + v, "radd": lambda m, x, v: v + x, "sub": lambda m, x, v: x - v,
    "rsub": lambda m, x, v: v - x, "mul": lambda m, x, v: x * v, "rmul": lambda m, x, v: v * x,
    "div": lambda m, x, v: x / v, "remainder": lambda m, x, v: x % v,
    "eq": lambda m, x, v: x == v, "ne": lambda m, x, v: x != v, "lt": lambda m, x, v: x < v,
    "ge": lambda m, x, v: x >= v,
    "bitwise_and": lambda m, x, v: x & v, "bitwise_or": lambda m, x, v: x | v, "bitwise_xor": lambda m, x, v: x ^ v,
    "where": lambda m, x, v: m.where(x != 0, x, v), "where_first": lambda m, x, v: m.where(x == 0, v, x),
    "clamp_max": lambda m, x, v: m.clamp(x, max=v), "clamp_min": lambda m, x, v: m.clamp(x, min=v),
    "fill_": lambda m, x, v: x.clone().fill_(v), "full": lambda m, x, v: m.full((2,), v, dtype=x.dtype),
    "full_like": lambda m, x, v: m.full_like(x, v),
    "masked_fill": lambda m, x, v: x.masked_fill(m.tensor([True, False]), v),
    "index_put": index_put, "setitem": lambda m, x, v: x.clone().__setitem__(0, v),
    "add_": lambda m, x, v: x.clone().add_(v), "sub_": lambda m, x, v: x.clone().sub_(v),
    "mul_": lambda m, x, v: x.clone().mul_(v),
}


@pytest.mark.parametrize("op", list(OPS))
def test_op_with_an_int_beyond_int64_as_torch(op):
    compare_all({f"{op} {dtype} {name}": (lambda m, dtype=dtype, v=v: OPS[op](m, operand(m, dtype), v))
                 for dtype in DTYPES for name, v in VALUES.items()})


def test_wrapping_where_the_values_tell():
    """Values where the wrap (2**63 -> -2**63 in int64) decides the result, not just the dtype."""
    i64 = lambda m: m.tensor([-(2 ** 63), 0, -1, 7])  # noqa: E731
    u64 = lambda m: m.tensor([2 ** 63, 2 ** 64 - 1, 3], dtype=m.uint64)  # noqa: E731
    compare_all({
        "int64 == 2**63": lambda m: i64(m) == 2 ** 63, "int64 != 2**63": lambda m: i64(m) != 2 ** 63,
        "int64 > 2**64-1": lambda m: i64(m) > 2 ** 64 - 1, "int64 <= 2**63": lambda m: i64(m) <= 2 ** 63,
        "uint64 == 2**63": lambda m: u64(m) == 2 ** 63, "uint64 != 2**64-1": lambda m: u64(m) != 2 ** 64 - 1,
        "uint8 == 2**64-1": lambda m: m.tensor([0, 255], dtype=m.uint8) == 2 ** 64 - 1,
        "uint64 * 2**63": lambda m: u64(m) * 2 ** 63, "uint64 & 2**63": lambda m: u64(m) & 2 ** 63,
        "uint64 | 2**63": lambda m: u64(m) | 2 ** 63, "uint64 ^ 2**64-1": lambda m: u64(m) ^ (2 ** 64 - 1),
        "int64 % 2**63": lambda m: i64(m) % 2 ** 63,
        "2**63 % int64": lambda m: 2 ** 63 % m.tensor([3, 7, -5]),
        "2**63 - int64": lambda m: 2 ** 63 - m.tensor([3, 1]), "2**64-1 - int32": lambda m: (2 ** 64 - 1) - m.tensor(
            [3, 1], dtype=m.int32),
        "2**63 ** int64": lambda m: (2 ** 63) ** m.tensor([3, 1]), "2**63 / int64": lambda m: 2 ** 63 / m.tensor([3, 1]),
        "0-dim int64 + 2**63": lambda m: m.tensor(3) + 2 ** 63, "int16 + 2**64-1": lambda m: m.tensor(
            [3, 1], dtype=m.int16) + (2 ** 64 - 1),
        "float64 + 2**64-1": lambda m: m.tensor([3.0, 1.0], dtype=m.float64) + (2 ** 64 - 1),
        "float64 - 2**64-1": lambda m: m.tensor([3.0, 1.0], dtype=m.float64) - (2 ** 64 - 1),
        "float16 + 2**63": lambda m: m.tensor([3.0, 1.0], dtype=m.float16) + 2 ** 63,
        "float32 - -2**63": lambda m: m.tensor([1.0]) - (-(2 ** 63)),
        "int64 - -2**63": lambda m: m.tensor([1, -5]) - (-(2 ** 63)),
        "int64 << 2**63": lambda m: m.tensor([3, 1]) << 2 ** 63,
        "uint64 where": lambda m: m.where(m.tensor([True, False]), m.tensor([1, 2], dtype=m.uint64), 2 ** 63),
        "uint64 fill_": lambda m: m.zeros(2, dtype=m.uint64).fill_(2 ** 64 - 1),
        "uint64 bitwise_and_": lambda m: m.tensor([3, 2 ** 64 - 1], dtype=m.uint64).bitwise_and_(2 ** 63),
        "float full_like": lambda m: m.full_like(m.tensor([3, 1]), 2 ** 63, dtype=m.float32),
        "float64 full": lambda m: m.full((2,), 2 ** 64 - 1, dtype=m.float64),
    })


def test_checked_conversions_and_promotion_refusals():
    x = lambda m: m.tensor([3, 1])  # noqa: E731
    compare_all({
        "add alpha int64": lambda m: m.add(x(m), 1, alpha=2 ** 63),
        "add alpha tensor": lambda m: m.add(x(m), x(m), alpha=2 ** 63),
        "add alpha float": lambda m: m.add(m.tensor([1.0, 2.0]), 1, alpha=2 ** 63),
        "sub alpha float": lambda m: m.sub(m.tensor([1.0, 2.0]), 2, alpha=2 ** 63),
        "pow int64": lambda m: x(m) ** 2 ** 63, "pow uint8": lambda m: m.tensor([3, 1], dtype=m.uint8) ** 2 ** 63,
        "pow float": lambda m: m.tensor([1.0, 0.5]) ** 2 ** 63,
        "clamp_ int64": lambda m: x(m).clamp_(min=2 ** 63),
        "masked_fill_ int64": lambda m: x(m).masked_fill_(m.tensor([True, False]), 2 ** 64 - 1),
        "where two numbers": lambda m: m.where(m.tensor([True, False]), 2 ** 63, 1),
        "where two big numbers": lambda m: m.where(m.tensor([True, False]), 2 ** 63, 2 ** 64 - 1),
        "where number, int64 tensor": lambda m: m.where(m.tensor([True, False]), 2 ** 63, x(m)),
        "full no dtype": lambda m: m.full((2,), 2 ** 63), "full no dtype 2**64": lambda m: m.full((2,), 2 ** 64),
        "arange": lambda m: m.arange(2 ** 63, 2 ** 63 + 2),
        "arange float64": lambda m: m.arange(2 ** 63, 2 ** 63 + 4096, 2048, dtype=m.float64),
        "arange -2**63-1": lambda m: m.arange(-(2 ** 63) - 1, 0),
        "scalar_tensor": lambda m: m.scalar_tensor(2 ** 63),
        "scalar_tensor 2**64": lambda m: m.scalar_tensor(2 ** 64),
        "result_type int64": lambda m: m.result_type(x(m), 2 ** 63),
        "result_type uint8": lambda m: m.result_type(m.tensor([1], dtype=m.uint8), 2 ** 64 - 1),
        "result_type 0-dim int32": lambda m: m.result_type(m.tensor(1, dtype=m.int32), 2 ** 63),
        "result_type float32": lambda m: m.result_type(m.tensor([1.0]), 2 ** 63),
        "result_type bool": lambda m: m.result_type(m.tensor([True]), 2 ** 63),
        "result_type 2**64": lambda m: m.result_type(x(m), 2 ** 64),
        "result_type -2**63-1": lambda m: m.result_type(x(m), -(2 ** 63) - 1),
        "remainder(number, tensor) 2**64": lambda m: m.remainder(2 ** 64, x(m)),
        "bitwise_and 2**64": lambda m: m.bitwise_and(x(m), 2 ** 64),
        "2**64 ** tensor": lambda m: (2 ** 64) ** x(m),
        "uint64 |= 2**64": lambda m: m.tensor([1], dtype=m.uint64).__ior__(2 ** 64),
        # torch's double arguments take any int as float() does; its number (Scalar) arguments refuse 2**64
        "dropout p 2**64": lambda m: m.nn.functional.dropout(m.ones(3), p=2 ** 64),
        "pad value 2**64": lambda m: m.nn.functional.pad(m.ones(2), (1, 0), value=2 ** 64),
        "clip_grad_norm_ 2**64": lambda m: m.nn.utils.clip_grad_norm_([m.ones(2, requires_grad=True)], 2 ** 64),
        "std correction 2**64": lambda m: m.ones(3).std(correction=2 ** 64),
        "vector_norm ord 2**64": lambda m: m.linalg.vector_norm(m.ones(3), ord=2 ** 64),
    })


@pytest.mark.parametrize("dtype", [None, *DTYPES])
def test_tensor_from_ints_beyond_int64_as_torch(dtype):
    def cases(v):
        kw = lambda m: {} if dtype is None else {"dtype": getattr(m, dtype)}  # noqa: E731
        return {"tensor(v)": lambda m: m.tensor(v, **kw(m)), "tensor([v, 1])": lambda m: m.tensor([v, 1], **kw(m)),
                "tensor([[1], [v]])": lambda m: m.tensor([[1], [v]], **kw(m)),
                "tensor([v, 1.5])": lambda m: m.tensor([v, 1.5], **kw(m)),
                "tensor([1.5, v])": lambda m: m.tensor([1.5, v], **kw(m))}
    compare_all({f"{name} {dtype} {vname}": f for vname, v in VALUES.items() for name, f in cases(v).items()})


def test_a_uint64_tensors_values_come_back_as_python_ints():
    """item() and tolist() give the int; int(), bool() and index read int64, which refuses it as torch's."""
    for v in (2 ** 63, 2 ** 64 - 1, 5):
        compare_all({f"{name} {v}": (lambda m, f=f, v=v: f(m.tensor(v, dtype=m.uint64))) for name, f in {
            "item": lambda t: t.item(), "tolist": lambda t: t.reshape(1).tolist(), "int": int, "float": float,
            "bool": bool, "index": lambda t: [0, 1, 2][t]}.items()})
        ours, theirs = dg.tensor(v, dtype=dg.uint64), torch.tensor(v, dtype=torch.uint64)
        # the item as a scalar operand: a UInt again, so it compares and fills as the int does
        assert (dg.tensor([2 ** 63, 3], dtype=dg.uint64) == ours.item()).tolist() == (
            torch.tensor([2 ** 63, 3], dtype=torch.uint64) == theirs.item()).tolist()


def test_jit_keeps_2_63_apart_from_the_int64_of_its_bits():
    """The UInt 2**63 and the Int -2**63 have the same bits; the JIT's attribute equality tells them apart, so a
    graph captured with one is not replayed for the other (a float result differs in sign)."""
    @dg.jit
    def shift(x, k):
        return x + k

    for k in (2 ** 63, -(2 ** 63), 2 ** 64 - 1, -1, 2 ** 63):
        for _ in range(3):  # capture, then replays
            for values in ([1.0, 2.0], [1, 2]):
                ours, theirs = shift(dg.tensor(values), k), dg.tensor(values) + k
                assert mismatch(ours, torch.tensor(values) + k) is None, (k, values)
                assert ours.tolist() == theirs.tolist()
