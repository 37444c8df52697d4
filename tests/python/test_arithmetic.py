"""Arithmetic through every entry point (function, method, operator, in place) against NumPy float64
references, type promotion and gradients against torch, on broadcast and non-contiguous inputs."""
import operator

import numpy as np
import pytest
import torch

import dygrad as dg

SHAPE_PAIRS = [((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((4, 1, 3), (2, 1)), ((), (2, 3)), ((2, 3), ()),
               ((0, 3), (3,)), ((1,), (1,))]
OPS = {
    "add": (dg.add, np.add, operator.add), "sub": (dg.sub, np.subtract, operator.sub),
    "mul": (dg.mul, np.multiply, operator.mul), "div": (dg.div, np.divide, operator.truediv),
}


def operands(shape_a, shape_b, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-2, 2, shape_a)
    b = rng.uniform(0.5, 2, shape_b) * rng.choice([-1, 1], shape_b)  # away from zero for div
    return a, b


def close(t, expected, rtol=1e-12):
    assert tuple(t.shape) == np.shape(expected)
    np.testing.assert_allclose(np.array(t.tolist(), dtype=np.float64).reshape(np.shape(expected)), expected, rtol=rtol, atol=0)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
def test_binary_ops_match_numpy(name, shapes):
    function, reference, op = OPS[name]
    a, b = operands(*shapes)
    ta, tb = dg.tensor(a), dg.tensor(b)
    expected = reference(a, b)
    close(function(ta, tb), expected)
    close(getattr(ta, name)(tb), expected)
    close(op(ta, tb), expected)
    if np.shape(expected) == a.shape:
        target = ta.clone()
        result = getattr(target, name + "_")(tb)
        assert result is target
        close(target, expected)
        target = ta.clone()
        alias = target
        target_inplace = {"add": operator.iadd, "sub": operator.isub, "mul": operator.imul, "div": operator.itruediv}[name]
        alias = target_inplace(alias, tb)
        assert alias is target
        close(target, expected)


@pytest.mark.parametrize("name", OPS)
def test_binary_ops_on_non_contiguous_inputs(name):
    function, reference, _ = OPS[name]
    a, b = operands((4, 3), (3, 4), seed=1)
    ta, tb = dg.tensor(a).t(), dg.tensor(b)
    assert not ta.is_contiguous()
    close(function(ta, tb), reference(a.T, b))
    close(function(tb, ta), reference(b, a.T))
    wide = dg.tensor(np.arange(24.0).reshape(4, 6)).permute(1, 0).reshape(24)
    close(function(wide, 2.0), reference(np.arange(24.0).reshape(4, 6).T.reshape(24), 2.0))


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("scalar", [2, 2.5, -0.5, True])
def test_scalars_on_either_side(name, scalar):
    function, reference, op = OPS[name]
    a = np.array([[1.5, -2.0, 3.0], [0.25, 4.0, -1.0]])
    t = dg.tensor(a, dtype=dg.float64)
    close(function(t, scalar), reference(a, float(scalar)))
    close(op(t, scalar), reference(a, float(scalar)))
    close(op(scalar, t), reference(float(scalar), a))
    close(op(np.float64(scalar), t) if not isinstance(scalar, bool) else op(scalar, t), reference(float(scalar), a))


@pytest.mark.parametrize("alpha", [2, -0.5])
def test_alpha(alpha):
    a, b = operands((2, 3), (3,))
    ta, tb = dg.tensor(a), dg.tensor(b)
    close(dg.add(ta, tb, alpha=alpha), a + alpha * b)
    close(dg.sub(ta, tb, alpha=alpha), a - alpha * b)
    close(ta.add(2.0, alpha=alpha), a + alpha * 2.0)
    target = ta.clone()
    target.sub_(tb, alpha=alpha)
    close(target, a - alpha * b)


def test_neg():
    a = np.array([[1.5, -2.0], [0.0, 3.0]])
    t = dg.tensor(a)
    close(dg.neg(t), -a)
    close(-t, -a)
    close(t.neg(), -a)
    close(+t, a)


PROMOTION_OPERANDS = [
    ("int64", [1, 2]), ("int32", [1, 2]), ("float32", [1.0, 2.0]), ("float64", [1.0, 2.0]), ("bool", [True, False]),
    ("uint8", [1, 2]), ("float16", [1.0, 2.0]), ("bfloat16", [1.0, 2.0]),
]


@pytest.mark.parametrize("left", PROMOTION_OPERANDS, ids=lambda p: p[0])
@pytest.mark.parametrize("right", PROMOTION_OPERANDS + [("scalar", 2.5), ("scalar", 3), ("scalar", True),
                                                        ("zero-dim float64", 2.0)], ids=lambda p: str(p[0]))
@pytest.mark.parametrize("name", ["add", "mul", "div"])
def test_type_promotion_matches_torch(left, right, name):
    def make(lib, spec):
        kind, data = spec
        if kind == "scalar":
            return data
        if kind == "zero-dim float64":
            return lib.tensor(data, dtype=lib.float64)
        return lib.tensor(data, dtype=getattr(lib, kind))

    try:
        theirs = getattr(torch, name)(make(torch, left), make(torch, right))
    except RuntimeError:  # where torch refuses a combination, dygrad must refuse it too
        with pytest.raises((RuntimeError, TypeError)):
            getattr(dg, name)(make(dg, left), make(dg, right))
        return
    ours = getattr(dg, name)(make(dg, left), make(dg, right))
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(np.array(ours.float().tolist()), theirs.float().numpy(), rtol=1e-2)


GRAD_SHAPES = [((2, 3), (3,)), ((2, 1), (1, 3)), ((3,), (3,)), ((), (2, 2)), ((4, 1, 2), (3, 1))]


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("shapes", GRAD_SHAPES, ids=str)
def test_gradients_match_torch(name, shapes):
    function = OPS[name][0]
    a, b = operands(*shapes, seed=3)
    out_shape = np.broadcast_shapes(*shapes)
    w = np.random.default_rng(4).standard_normal(out_shape)
    da, db = dg.tensor(a, requires_grad=True), dg.tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (function(da, db) * dg.tensor(w)).sum().backward()
    (getattr(torch, name)(ta, tb) * torch.tensor(w)).sum().backward()
    close(da.grad, ta.grad.numpy(), rtol=1e-10)
    close(db.grad, tb.grad.numpy(), rtol=1e-10)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("scalar_first", [False, True])
def test_scalar_gradients_match_torch(name, scalar_first):
    op = OPS[name][2]
    a = np.array([[0.5, -1.5, 2.0], [1.25, -0.75, 3.0]])
    da, ta = dg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    if scalar_first:
        (op(1.5, da) * da).sum().backward()
        (op(1.5, ta) * ta).sum().backward()
    else:
        (op(da, 1.5) * da).sum().backward()
        (op(ta, 1.5) * ta).sum().backward()
    close(da.grad, ta.grad.numpy(), rtol=1e-10)


def test_chain_and_reduction_gradients_match_torch():
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    dx, dy = dg.tensor(x, requires_grad=True), dg.tensor(y, requires_grad=True)
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    ((dx * dy - dy / 3.0).t().contiguous().mean(0) * (-dx.sum(1))).sum().backward()
    ((tx * ty - ty / 3.0).t().contiguous().mean(0) * (-tx.sum(1))).sum().backward()
    close(dx.grad, tx.grad.numpy(), rtol=1e-10)
    close(dy.grad, ty.grad.numpy(), rtol=1e-10)
    (gx,) = dg.autograd.grad((dx.view(12) * dx.reshape(12)).sum(), dx)
    (tgx,) = torch.autograd.grad((tx.view(12) * tx.reshape(12)).sum(), tx)
    close(gx, tgx.numpy())


def test_float32_values_match_torch():
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7,)).astype(np.float32)
    ours = ((dg.tensor(a) + dg.tensor(b)) * 0.5 - dg.tensor(a) / 3.0).numpy()
    theirs = ((torch.tensor(a) + torch.tensor(b)) * 0.5 - torch.tensor(a) / 3.0).numpy()
    np.testing.assert_array_equal(ours, theirs)


def test_gradient_hooks_match_torch():
    seen = []

    def hook(grad):
        seen.append(grad.tolist())
        return grad * 2.0

    for lib in (dg, torch):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        y = x * 3.0
        y.register_hook(hook)
        x.register_hook(lambda g: None)
        (y * y).sum().backward()
        seen.append(x.grad.tolist())
    assert seen[0:2] == seen[2:4] and seen[1] == [36.0, 72.0]
    with pytest.raises(TypeError, match="register_hook"):
        dg.ones(1, requires_grad=True).register_hook(3)
    x = dg.ones(2, requires_grad=True)
    x.register_hook(lambda g: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        (x * 2.0).sum().backward()


def test_fill_with_a_0d_tensor_value_matches_torch():
    """torch's fill_(Tensor): the value is copied on the stream (no host read), cast to the target's dtype, and
    differentiable; a value with dimensions is refused with torch's message."""
    for dtype, value in [("float32", 2.5), ("int64", 2.7), ("float64", -1.25)]:
        d, t = dg.zeros(3, dtype=getattr(dg, dtype)), torch.zeros(3, dtype=getattr(torch, dtype))
        with dg._C._OpRecorder() as rec:
            d.fill_(dg.tensor(value))
        t.fill_(torch.tensor(value))
        assert rec.host_reads == [] and d.tolist() == t.tolist()
    v_d, v_t = dg.tensor(3.0, requires_grad=True), torch.tensor(3.0, requires_grad=True)
    x_d, x_t = dg.zeros(4), torch.zeros(4)
    (x_d.fill_(v_d) * dg.arange(4.0)).sum().backward()
    (x_t.fill_(v_t) * torch.arange(4.0)).sum().backward()
    assert v_d.grad.item() == v_t.grad.item() == 6.0
    with pytest.raises(RuntimeError, match=r"\[fill_\] fill_ only supports 0-dimension value tensor but got tensor "
                                           r"with 1 dimensions"):
        dg.zeros(3).fill_(dg.tensor([1.0, 2.0]))
