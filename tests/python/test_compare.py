"""Comparison and selection bindings against torch: operators, where, masked_fill, clamp, logical ops."""
import numpy as np
import pytest
import torch

import dygrad as dg
from peer import assert_matches, tensors_from

rng = np.random.default_rng(1)


def pair(a, requires_grad=False):
    return tensors_from(a, requires_grad)


def close(d, t):
    assert_matches(d, t, rtol=1e-6)


def ints(shape):
    return rng.integers(-2, 3, size=shape).astype(np.float64)  # many ties


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(op):
    a_d, a_t = pair(ints((3, 4)))
    b_d, b_t = pair(ints((4,)))
    close(getattr(dg, op)(a_d, b_d), getattr(torch, op)(a_t, b_t))
    close(getattr(a_d.t(), op)(1), getattr(a_t.t(), op)(1))
    close(getattr(dg, op)(a_d, 0.5), getattr(torch, op)(a_t, 0.5))


def test_operators():
    a_d, a_t = pair(ints((3, 4)))
    b_d, b_t = pair(ints((3, 4)))
    for f in [lambda x, y: x == y, lambda x, y: x != y, lambda x, y: x < y, lambda x, y: x <= y,
              lambda x, y: x > y, lambda x, y: x >= y]:
        close(f(a_d, b_d), f(a_t, b_t))
        close(f(a_d, 1), f(a_t, 1))
        close(f(1, a_d), f(1, a_t))  # reflected: 1 < x is x > 1
    i_d, i_t = pair(np.array([1, 2, 3]))
    close(i_d == 2.5, i_t == 2.5)
    assert (a_d == None) is False and (a_d != None) is True  # noqa: E711
    assert a_d.__hash__ is not None and hash(a_d) == hash(a_d) and hash(a_d) != hash(b_d)
    assert len({a_d, b_d, a_d}) == 2
    with pytest.raises(TypeError):
        a_d < "x"


def test_logical():
    a_d, a_t = pair(np.array([[True, False, True], [False, False, True]]))
    b_d, b_t = pair(np.array([0.0, 1.0, 2.0]))
    close(dg.logical_not(a_d), torch.logical_not(a_t))
    close(a_d.logical_and(b_d), a_t.logical_and(b_t))
    close(dg.logical_or(a_d, b_d), torch.logical_or(a_t, b_t))


def test_bool_operators():
    a_d, a_t = pair(rng.random((3, 4)) > 0.5)
    b_d, b_t = pair(rng.random((4,)) > 0.5)
    close(a_d & b_d, a_t & b_t)
    close(a_d | b_d, a_t | b_t)
    close(~a_d, ~a_t)
    close(a_d & True, a_t & True)
    close(False | b_d, False | b_t)
    x_d = dg.tensor([1.0, -2.0, 3.0])
    close((x_d > 0) & (x_d < 2), (torch.tensor([1.0, -2.0, 3.0]) > 0) & (torch.tensor([1.0, -2.0, 3.0]) < 2))
    # integers: bitwise, as torch (test_torch_names.py covers the family); a float operand raises as torch's
    close(dg.tensor([1, 2]) & dg.tensor([3, 4]), torch.tensor([1, 2]) & torch.tensor([3, 4]))
    close(~dg.tensor([1, 2]), ~torch.tensor([1, 2]))
    for x in (a_d, a_t):
        with pytest.raises(NotImplementedError, match='"bitwise_and_cpu" not implemented for'):
            x & 1.5


def test_where():
    c_d, c_t = pair(rng.random((3, 1)) > 0.5)
    x_d, x_t = pair(rng.standard_normal((3, 4)), requires_grad=True)
    y_d, y_t = pair(rng.standard_normal((4,)), requires_grad=True)
    out_d, out_t = dg.where(c_d, x_d, y_d), torch.where(c_t, x_t, y_t)
    close(out_d, out_t)
    (out_d * out_d).sum().backward()
    (out_t * out_t).sum().backward()
    close(x_d.grad, x_t.grad)
    close(y_d.grad, y_t.grad)
    close(dg.where(c_d, x_d, 0.0), torch.where(c_t, x_t, 0.0))
    close(dg.where(c_d, -1, y_d), torch.where(c_t, -1, y_t))
    close(dg.where(condition=c_d, input=1.5, other=2), torch.where(c_t, 1.5, 2))
    i_d, i_t = pair(np.array([1, 2, 3], dtype=np.int32))
    close(dg.where(i_d > 1, i_d, 0), torch.where(i_t > 1, i_t, 0))
    with pytest.raises(TypeError, match=r"\[where\]"):
        dg.where(c_d, x_d, "y")


def test_masked_fill():
    x_d, x_t = pair(rng.standard_normal((4, 3)), requires_grad=True)
    m_d, m_t = pair(rng.random((3,)) > 0.5)
    out_d, out_t = x_d.t().masked_fill(m_d.unsqueeze(1), -1e9), x_t.t().masked_fill(m_t.unsqueeze(1), -1e9)
    close(out_d, out_t)
    close(dg.masked_fill(x_d, m_d, dg.tensor(2.0)), torch.masked_fill(x_t, m_t, torch.tensor(2.0)))
    out_d.sum().backward()
    out_t.sum().backward()
    close(x_d.grad, x_t.grad)
    y_d, y_t = pair(rng.standard_normal((4, 3)))
    assert y_d.masked_fill_(m_d, 0.5) is y_d
    close(y_d, y_t.masked_fill_(m_t, 0.5))
    with pytest.raises(TypeError, match=r"\[masked_fill\]"):
        x_d.masked_fill(m_d, "a")
    with pytest.raises(TypeError, match=r"\[masked_fill\]"):
        x_d.masked_fill([True], 1.0)


def test_clamp():
    x_d, x_t = pair(rng.standard_normal((5, 4)), requires_grad=True)
    close(dg.clamp(x_d, -0.5, 0.5), torch.clamp(x_t, -0.5, 0.5))
    close(x_d.clamp(min=0), x_t.clamp(min=0))
    close(x_d.clamp(max=0.1), x_t.clamp(max=0.1))
    close(dg.clip(x_d, -1, 1), torch.clip(x_t, -1, 1))
    lo_d, lo_t = pair(rng.standard_normal((4,)) - 1)
    hi_d, hi_t = pair(rng.standard_normal((5, 1)) + 1)
    out_d, out_t = dg.clamp(x_d, lo_d, hi_d), torch.clamp(x_t, lo_t, hi_t)
    close(out_d, out_t)
    close(dg.clamp(x_d, min=lo_d), torch.clamp(x_t, min=lo_t))
    with pytest.raises(TypeError, match=r"\[clamp\]"):
        dg.clamp(x_d, lo_d, 0.5)  # torch takes no mix of a Tensor and a number bound
    out_d.sum().backward()
    out_t.sum().backward()
    close(x_d.grad, x_t.grad)
    i_d, i_t = pair(np.array([-3, 0, 5]))
    close(i_d.clamp(0, 2), i_t.clamp(0, 2))
    close(i_d.clamp(0.5), i_t.clamp(0.5))  # int tensor, float bound: float32
    y_d, y_t = pair(rng.standard_normal((3,)))
    assert y_d.clamp_(-0.1, 0.1) is y_d
    close(y_d, y_t.clamp_(-0.1, 0.1))
    with pytest.raises(RuntimeError, match=r"\[clamp\]"):
        dg.clamp(x_d)
    with pytest.raises(TypeError, match=r"\[clamp\]"):
        dg.clamp(x_d, min="0")


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_clamp_scalar_nan_and_infinities_match_torch(dtype):
    # clamp's scalar-bound loop is a packed max/min (a nan element stays nan); a nan bound makes every element nan
    values = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, -2.0, -0.5, 0.25, 0.5, 3.0] * 7, dtype=np.float64)
    x_d = dg.tensor(values).to(getattr(dg, dtype))
    x_t = torch.tensor(values).to(getattr(torch, dtype))
    for kwargs in [dict(min=-0.5, max=0.5), dict(min=0.0), dict(max=-0.0), dict(min=-np.inf, max=np.inf),
                   dict(min=np.nan), dict(max=np.nan), dict(min=-1.0, max=np.nan), dict(min=1.0, max=-1.0)]:
        got = x_d.clamp(**kwargs).to(dg.float64).numpy()
        want = x_t.clamp(**kwargs).to(torch.float64).numpy()
        np.testing.assert_array_equal(got, want, err_msg=str(kwargs))
        numbers = ~np.isnan(want)
        assert np.array_equal(np.signbit(got[numbers]), np.signbit(want[numbers])), kwargs  # -0.0 as torch


DTYPES = ["float32", "float64", "int64", "int32", "bool", "bfloat16", "float16"]


@pytest.mark.parametrize("name", ["cat", "where", "maximum", "pow", "eq", "masked_fill"])
def test_dtype_rules_match_torch(name):
    ops = {
        "cat": lambda lib, a, b: lib.cat([a, b]),
        "where": lambda lib, a, b: lib.where(a > 0, a, b),
        "maximum": lambda lib, a, b: lib.maximum(a, b),
        "pow": lambda lib, a, b: lib.pow(a, b),
        "eq": lambda lib, a, b: lib.eq(a, b),
        "masked_fill": lambda lib, a, b: a.masked_fill(a > 0, 2.5 if b.dtype.is_floating_point else 2),
    }
    f = ops[name]

    def result(lib, x, y):
        try:
            return str(f(lib, lib.ones(3, dtype=getattr(lib, x)), lib.ones(3, dtype=getattr(lib, y))).dtype).split(".")[-1]
        except (TypeError, RuntimeError, ValueError, NotImplementedError):
            return "error"
    for x in DTYPES:
        for y in DTYPES:
            assert result(dg, x, y) == result(torch, x, y), (name, x, y)


TRUTH_DTYPES = ["float32", "float64", "bfloat16", "int64", "int32", "uint8", "bool"]


@pytest.mark.parametrize("op", ["all", "any"])
@pytest.mark.parametrize("dtype", TRUTH_DTYPES)
def test_all_any_match_torch(op, dtype):
    """Every dim form torch takes (none, an int, a tuple, an empty tuple), keepdim, the method, empty reductions
    (all: True, any: False), nan (nonzero, so true), and the result dtype (uint8 stays uint8)."""
    a = rng.integers(0, 2, size=(3, 4, 5)).astype(np.float64)
    a[0] = 1  # a slice all true, so `all` is not false everywhere
    a[1, 1] = 0
    if dtype in ("float32", "float64", "bfloat16"):
        a[2, 0, 0] = np.nan
    d, t = dg.tensor(a).to(getattr(dg, dtype)), torch.tensor(a).to(getattr(torch, dtype))
    forms = [lambda m, x: getattr(m, op)(x), lambda m, x: getattr(x, op)(),
             lambda m, x: getattr(m, op)(x, 1), lambda m, x: getattr(m, op)(x, dim=-1, keepdim=True),
             lambda m, x: getattr(m, op)(x, (0, 2)), lambda m, x: getattr(x, op)(dim=(2, 0), keepdim=True),
             lambda m, x: getattr(m, op)(x, dim=()), lambda m, x: getattr(m, op)(x[:, :0], 1),
             lambda m, x: getattr(m, op)(x[:0]), lambda m, x: getattr(m, op)(x.permute(2, 0, 1)[:, ::2], 0)]
    for form in forms:
        got, want = form(dg, d), form(torch, t)
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        assert got.tolist() == want.tolist()


def test_all_any_errors_name_the_op():
    with pytest.raises(IndexError, match=r"\[all\].*out of range"):
        dg.all(dg.zeros(2, 3), dim=2)
    with pytest.raises(RuntimeError, match=r"\[any\].*appears multiple times|\[any\].*repeat"):
        dg.any(dg.zeros(2, 3), dim=(1, -1))
    with pytest.raises(TypeError, match=r"any"):
        dg.any(dg.zeros(2), dim="x")


def test_equal_matches_torch():
    a = rng.standard_normal((3, 4)).astype(np.float32)
    cases = [(a, a.copy()), (a, a + np.float32(1e-6) * (a > 0)), (a, a[:, :3]), (a, a.reshape(4, 3)),
             (np.array([1, 2]), np.array([1.0, 2.0])), (np.array([np.nan]), np.array([np.nan])),
             (np.zeros((0, 2)), np.zeros((0, 2))), (np.array(3.0), np.array([3.0]))]
    for x, y in cases:
        want = torch.equal(torch.tensor(x), torch.tensor(y))
        got = dg.equal(dg.tensor(x), dg.tensor(y))
        assert got is want, (x, y)
        assert dg.tensor(x).equal(dg.tensor(y)) is want
    d = dg.tensor(a)
    assert dg.equal(d.t(), dg.tensor(a.T.copy()))  # strided operands
    with pytest.raises(TypeError, match=r"\[equal\] argument 'other' must be Tensor, not int"):
        dg.equal(d, 3)


def assert_same_values(got, want):
    """Bitwise but for nan payloads: equal values, nan where nan, and the same sign of zero."""
    x, y = got.double().numpy(), want.double().numpy()
    np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(np.signbit(x)[~np.isnan(x)], np.signbit(y)[~np.isnan(y)])


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_round_matches_torch_bitwise(dtype):
    """Ties to even, negative zero, large values, nan/inf, decimals of both signs (in float32 for 16-bit floats,
    as torch), and round_ in place on a view."""
    a = np.concatenate([np.arange(-6, 6.5, 0.5), [-0.4, 0.4, 1.005, 123.456, -98.765, 2.0 ** 40 + 0.5,
                                                 np.nan, np.inf, -np.inf]])
    d, t = dg.tensor(a).to(getattr(dg, dtype)), torch.tensor(a).to(getattr(torch, dtype))
    for decimals in (0, 1, 2, 3, -1, -2):
        got, want = dg.round(d, decimals=decimals), torch.round(t, decimals=decimals)
        assert got.dtype == d.dtype
        assert_same_values(got, want)
    assert_same_values(d.round(), t.round())
    v_d, v_t = d.clone()[::2], t.clone()[::2]
    assert v_d.round_(decimals=1) is v_d
    v_t.round_(decimals=1)
    assert_same_values(v_d, v_t)


def test_round_integers_and_errors_match_torch():
    assert dg.round(dg.tensor([3, -4])).tolist() == [3, -4]
    assert dg.round(dg.tensor([3, -4], dtype=dg.int32)).dtype == dg.int32
    with pytest.raises(NotImplementedError, match=r"\[round\] decimals=1 .* int64 of shape \(2,\)"):
        dg.round(dg.tensor([3, 4]), decimals=1)
    with pytest.raises(TypeError, match=r"round.*bool"):
        dg.round(dg.tensor([True]))
    with pytest.raises(TypeError):
        dg.round(dg.tensor([1.5]), 1)  # decimals is keyword-only, as torch
    x = dg.tensor([0.5, 1.5], requires_grad=True)
    dg.round(x * 3, decimals=1).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0]  # piecewise constant: torch's zero gradient
