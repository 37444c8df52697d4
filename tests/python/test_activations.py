"""The pointwise activations of issue 41 (functional forms, in-place forms and modules) against torch 2.13: values
and gradients on random inputs and exactly at the points where their pieces meet, float32 and float64, and the
errors torch raises."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import dygrad as dg
import dygrad.nn.functional as F

# name, keyword arguments, the points where the pieces meet
CASES = [
    ("leaky_relu", {}, [0.0]), ("leaky_relu", {"negative_slope": 0.2}, [0.0]),
    ("hardtanh", {}, [-1.0, 1.0]), ("hardtanh", {"min_val": -2.0, "max_val": 0.5}, [-2.0, 0.5]),
    ("relu6", {}, [0.0, 6.0]), ("hardsigmoid", {}, [-3.0, 3.0]), ("hardswish", {}, [-3.0, 3.0]),
    ("softsign", {}, [0.0]), ("tanhshrink", {}, [0.0]), ("softshrink", {}, [-0.5, 0.5]),
    ("softshrink", {"lambd": 1.5}, [-1.5, 1.5]), ("hardshrink", {}, [-0.5, 0.5]),
    ("threshold", {"threshold": 0.1, "value": 20.0}, [0.1]),
]


def inputs(points, dtype):
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.standard_normal(64) * 4, np.array(points), np.array(points) + 1e-3,
                             np.array(points) - 1e-3])
    return values.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,kwargs,points", CASES, ids=[f"{c[0]}{c[1]}" for c in CASES])
def test_activation_values_and_gradients_match_torch(name, kwargs, points, dtype):
    x = inputs(points, dtype)
    d, t = dg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ours, theirs = getattr(F, name)(d, **kwargs), getattr(TF, name)(t, **kwargs)
    tol = 1e-6 if dtype == "float32" else 1e-12
    # torch's hardsigmoid and hardswish backward scale by 1 / 6 rounded to float32 (a float literal in its kernel),
    # in float64 too: dygrad divides by 6 exactly
    grad_tol = 1e-7 if dtype == "float64" and name == "hardsigmoid" else tol
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=tol, atol=tol)
    weights = np.random.default_rng(4).standard_normal(x.shape).astype(dtype)
    (ours * dg.tensor(weights)).sum().backward()
    (theirs * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), rtol=grad_tol, atol=grad_tol)


@pytest.mark.parametrize("name,kwargs", [("leaky_relu", {}), ("hardtanh", {}), ("relu6", {}), ("hardsigmoid", {}),
                                         ("hardswish", {}), ("threshold", {"threshold": 0.0, "value": -1.0})])
def test_inplace_forms_match_torch_on_a_non_leaf(name, kwargs):
    x = inputs([0.0, 3.0], "float64")
    d, t = dg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    a, b = d * 2, t * 2
    ra, rb = getattr(F, name)(a, **kwargs, inplace=True), getattr(TF, name)(b, **kwargs, inplace=True)
    assert ra is a and np.allclose(a.detach().numpy(), b.detach().numpy())
    ra.sum().backward()
    rb.sum().backward()
    assert np.allclose(d.grad.numpy(), t.grad.numpy())


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_glu_and_softmin_match_torch(dim):
    x = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float64)
    d, t = dg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    for f, g in ((F.glu, TF.glu), (F.softmin, TF.softmin)):
        ours, theirs = f(d, dim), g(t, dim)
        assert np.allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)
        ours.pow(2).sum().backward()
        theirs.pow(2).sum().backward()
        assert np.allclose(d.grad.numpy(), t.grad.numpy(), rtol=1e-10)
        d.grad = t.grad = None
    for lib, f in ((dg, F.glu), (torch, TF.glu)):
        with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension 1 is size 3"):
            f(lib.ones(2, 3), 1)


@pytest.mark.parametrize("shape,channels", [((5,), 1), ((4, 3), 3), ((2, 3, 5), 3), ((2, 3, 5), 1)])
def test_prelu_module_matches_torch(shape, channels):
    x = np.random.default_rng(6).standard_normal(shape)
    ours, theirs = dg.nn.PReLU(channels, init=0.3, dtype=dg.float64), torch.nn.PReLU(channels, init=0.3,
                                                                                  dtype=torch.float64)
    ours.load_state_dict({"weight": dg.tensor(theirs.weight.detach().numpy() * np.linspace(0.5, 1.5, channels))})
    with torch.no_grad():
        theirs.weight.mul_(torch.tensor(np.linspace(0.5, 1.5, channels)))
    d, t = dg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out_d, out_t = ours(d), theirs(t)
    assert np.allclose(out_d.detach().numpy(), out_t.detach().numpy())
    out_d.pow(2).sum().backward()
    out_t.pow(2).sum().backward()
    assert np.allclose(d.grad.numpy(), t.grad.numpy()) and np.allclose(ours.weight.grad.numpy(),
                                                                       theirs.weight.grad.numpy())
    assert list(ours.state_dict()) == list(theirs.state_dict()) and repr(ours) == repr(theirs)
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel size"):
        dg.nn.PReLU(4)(dg.ones(2, 3))


def test_modules_repr_and_forward_match_torch():
    x = np.linspace(-5, 5, 40)
    for name, args in [("LeakyReLU", (0.2,)), ("Hardtanh", (-2.0, 2.0)), ("ReLU6", ()), ("Hardsigmoid", ()),
                       ("Hardswish", ()), ("Softsign", ()), ("Tanhshrink", ()), ("Softshrink", (0.7,)),
                       ("Hardshrink", ()), ("Threshold", (0.5, -3.0)), ("GLU", ()), ("Softmin", (0,))]:
        ours, theirs = getattr(dg.nn, name)(*args), getattr(torch.nn, name)(*args)
        assert repr(ours) == repr(theirs), name
        assert np.allclose(ours(dg.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy()), name
    assert isinstance(dg.nn.ReLU6(), dg.nn.Hardtanh) and issubclass(torch.nn.ReLU6, torch.nn.Hardtanh)
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        dg.nn.Hardtanh(1.0, -1.0)
