"""remainder (Python's sign, the `%` operator), fmod (C's sign) and atan2 against torch 2.13: integer and floating
dtypes, broadcasting, numbers on either side, the in-place forms, integer division by zero, bool refused, and the
gradients."""
import numpy as np
import pytest
import torch

import dygrad as dg

FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTEGERS = ["int64", "int32", "int16", "int8", "uint8"]


def name_of(dtype):
    return str(dtype).split(".")[-1]


def both(array, dtype):
    return dg.tensor(array).to(getattr(dg, dtype)), torch.tensor(array).to(getattr(torch, dtype))


def assert_same(d, t):
    assert name_of(d.dtype) == name_of(t.dtype) and tuple(d.shape) == tuple(t.shape)
    np.testing.assert_array_equal(d.float().numpy() if d.dtype == dg.bfloat16 else d.numpy(),
                                  t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy())


OPS = {
    "remainder": lambda m, a, b: m.remainder(a, b), "fmod": lambda m, a, b: m.fmod(a, b),
    "%": lambda m, a, b: a % b, "method": lambda m, a, b: a.remainder(b), "fmod_method": lambda m, a, b: a.fmod(b),
}


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS)
@pytest.mark.parametrize("op", sorted(OPS))
def test_values_bitwise_as_torch(dtype, op):
    rng = np.random.default_rng(0)
    low = 0 if dtype == "uint8" else -50
    a = rng.integers(low, 100, size=(4, 6)).astype(np.float64)
    signs = np.where(rng.random(6) < 0.5, -1, 1) if dtype != "uint8" else 1
    b = rng.integers(1, 9, size=(6,)).astype(np.float64) * signs
    if dtype in FLOATS:
        a = a / 7 + rng.uniform(-1, 1, size=a.shape)
        b = b / 3
    fn = OPS[op]
    da, ta = both(a, dtype)
    db, tb = both(b, dtype)
    assert_same(fn(dg, da, db), fn(torch, ta, tb))  # broadcast
    assert_same(fn(dg, da.t().contiguous().t(), db), fn(torch, ta, tb))
    for s in (3, -2.5, 4.0):
        if dtype == "uint8" and s < 0:
            continue
        assert_same(fn(dg, da, s), fn(torch, ta, s))


def test_python_sign_and_c_sign():
    a = dg.tensor([-7.0, 7.0, -7.0, 7.0, -0.0, 5.5])
    b = dg.tensor([2.0, -2.0, -2.0, 2.0, 3.0, float("inf")])
    ta, tb = torch.tensor(a.tolist()), torch.tensor(b.tolist())
    assert_same(a % b, ta % tb)
    assert_same(dg.fmod(a, b), torch.fmod(ta, tb))
    assert (a % b).tolist()[:4] == [1.0, -1.0, -1.0, 1.0] and dg.fmod(a, b).tolist()[:4] == [-1.0, 1.0, -1.0, 1.0]
    i = dg.tensor([-7, 7, -9223372036854775808])
    assert (i % 3).tolist() == (torch.tensor(i.tolist()) % 3).tolist()
    assert dg.remainder(i, -1).tolist() == [0, 0, 0] and dg.fmod(i, -1).tolist() == [0, 0, 0]


def test_numbers_on_either_side_and_promotion():
    x, t = dg.tensor([1, 5, -3]), torch.tensor([1, 5, -3])
    for fn in (lambda v: 7 % v, lambda v: 2.5 % v, lambda v: v % 2.5, lambda v: v % 2, lambda v: dg.remainder(7, v)
               if isinstance(v, dg.Tensor) else torch.remainder(7, v), lambda v: v.fmod(1.5)):
        assert_same(fn(x), fn(t))
    h, th = dg.ones(3, dtype=dg.float16) * 7, torch.ones(3, dtype=torch.float16) * 7
    assert_same(h % 2.5, th % 2.5)
    assert_same(dg.tensor([7], dtype=dg.int8) % dg.tensor([3], dtype=dg.int16),
                torch.tensor([7], dtype=torch.int8) % torch.tensor([3], dtype=torch.int16))


def test_inplace_forms():
    d, t = both(np.array([-7.5, 3.0, 9.25]), "float32")
    d %= 2
    t %= 2
    assert_same(d, t)
    d.remainder_(dg.tensor([0.7, -0.7, 0.3]))
    t.remainder_(torch.tensor([0.7, -0.7, 0.3]))
    assert_same(d, t)
    d.fmod_(-0.4)
    t.fmod_(-0.4)
    assert_same(d, t)
    i = dg.tensor([5, -5])
    with pytest.raises(RuntimeError, match="can't be cast"):
        i %= 1.5


def test_integer_division_by_zero_and_bool_raise():
    with pytest.raises(RuntimeError, match=r"\[remainder\] ZeroDivisionError"):
        (dg.tensor([1, 2]) % dg.tensor([1, 0])).tolist()
    with pytest.raises(RuntimeError, match=r"\[fmod\] ZeroDivisionError"):
        dg.fmod(dg.tensor([1, 2]), 0).tolist()
    assert np.isnan(dg.fmod(dg.tensor([1.0]), 0.0).item()) and np.isnan((dg.tensor([1.0]) % 0.0).item())
    with pytest.raises(TypeError, match=r"\[remainder\].*Bool"):
        dg.tensor([True]) % dg.tensor([True])


@pytest.mark.parametrize("op", ["remainder", "fmod"])
def test_gradients_match_torch(op):
    rng = np.random.default_rng(3)
    a, b = rng.uniform(-5, 5, (3, 4)), rng.uniform(0.5, 2, (4,)) * np.array([1, -1, 1, -1])
    grads = {}
    for m in (dg, torch):
        x = m.tensor(a, requires_grad=True)
        y = m.tensor(b, requires_grad=True)
        (getattr(m, op)(x, y) * m.tensor(a)).sum().backward()
        grads[m] = (x.grad.numpy(), y.grad.numpy())
    for ours, theirs in zip(grads[dg], grads[torch]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_atan2_values_and_gradients():
    rng = np.random.default_rng(4)
    y, x = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    grads = {}
    for m in (dg, torch):
        dy = m.tensor(y, requires_grad=True)
        dx = m.tensor(x, requires_grad=True)
        out = m.atan2(dy, dx)
        (out * m.tensor(y)).sum().backward()
        grads[m] = (out.detach().numpy(), dy.grad.numpy(), dx.grad.numpy())
    for ours, theirs in zip(grads[dg], grads[torch]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)
    assert name_of(dg.atan2(dg.tensor([1]), dg.tensor([2])).dtype) == "float32"
    f = dg.tensor([1.0, -1.0])
    f.atan2_(dg.tensor([-1.0, -1.0]))
    np.testing.assert_allclose(f.numpy(), [3 * np.pi / 4, -3 * np.pi / 4], rtol=1e-6)
