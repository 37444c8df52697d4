"""The layers of issue 41, part 2, against torch 2.13: the exponential activations (elu, selu, celu, softplus, mish,
logsigmoid). Each module is built in both libraries with torch's initial weights copied into dygrad's; outputs,
input gradients and every parameter's gradient are compared in float64 (tight tolerances), state_dict keys and
reprs must be equal, and bad arguments must raise torch's exception type."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import dygrad as dg
import dygrad.nn.functional as F

TOL = dict(rtol=1e-10, atol=1e-11)


def rand(*shape, seed=0, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def both(array, grad=True):
    """The same float64 values as a dygrad and a torch tensor (leaves requiring grad)."""
    return dg.tensor(array, requires_grad=grad), torch.tensor(array, requires_grad=grad)


def close(ours, theirs, **tol):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), **(tol or TOL))


def copy_module(theirs, ours):
    """torch's parameters and buffers into dygrad's module; the state_dict keys must agree."""
    state = theirs.state_dict()
    assert list(ours.state_dict()) == list(state)
    ours.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in state.items()})
    return ours


def backward_both(ours, theirs, seed=9):
    """sum(out * w) for the same random w on both sides (every output element gets its own weight)."""
    ours, theirs = (ours if isinstance(ours, tuple) else (ours,)), (theirs if isinstance(theirs, tuple) else (theirs,))
    loss_d, loss_t = 0, 0
    for i, (o, t) in enumerate(zip(ours, theirs)):
        if o is None:
            continue
        w = rand(*t.shape, seed=seed + i)
        loss_d = loss_d + (o * dg.tensor(w)).sum()
        loss_t = loss_t + (t * torch.tensor(w)).sum()
    loss_d.backward()
    loss_t.backward()


def compare_grads(ours, theirs, **tol):
    grads = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert (p.grad is None) == (grads[name].grad is None), name
        if p.grad is not None:
            np.testing.assert_allclose(p.grad.numpy(), grads[name].grad.numpy(), err_msg=name, **(tol or TOL))


def same_error(call_ours, call_theirs, match=None):
    with pytest.raises(Exception) as theirs:
        call_theirs()
    with pytest.raises(type(theirs.value), match=match) as ours:
        call_ours()
    return str(ours.value), str(theirs.value)


# --- activations ------------------------------------------------------------------------------------------------
ACTIVATIONS = [("elu", {}), ("elu", {"alpha": 0.3}), ("selu", {}), ("celu", {}), ("celu", {"alpha": 2.5}),
               ("softplus", {}), ("softplus", {"beta": 2.0, "threshold": 5.0}), ("softplus", {"beta": 0.5}),
               ("mish", {}), ("logsigmoid", {}), ("silu", {})]


def activation_inputs(dtype):
    values = np.concatenate([rand(200, seed=1) * 4, [0.0, -0.0, 1e-9, -1e-9, 1e-5, -1e-5, 2.5, 2.5 + 1e-6, 10.0,
                                                     10.0 + 1e-6, 20.0, 19.999, 20.001, 40.0, -40.0, 100.0, -100.0,
                                                     800.0, -800.0]])
    return values.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,kwargs", ACTIVATIONS, ids=[f"{n}{k}" for n, k in ACTIVATIONS])
def test_activation_values_and_gradients_match_torch(name, kwargs, dtype):
    x = activation_inputs(dtype)
    d, t = dg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ours, theirs = getattr(F, name)(d, **kwargs), getattr(TF, name)(t, **kwargs)
    tol = dict(rtol=4e-7, atol=1e-30) if dtype == "float32" else dict(rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), **tol)
    assert ours.dtype == getattr(dg, dtype)
    w = rand(*x.shape, seed=4).astype(dtype)
    (ours * dg.tensor(w)).sum().backward()
    (theirs * torch.tensor(w)).sum().backward()
    # the gradients cross 0 (silu, mish): relative to their magnitude there, O(1)
    grad_tol = dict(rtol=2e-6, atol=1e-7) if dtype == "float32" else dict(rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), **grad_tol)


@pytest.mark.parametrize("name", ["elu", "selu", "celu", "mish"])
def test_activation_inplace_forms_match_torch_on_a_non_leaf(name):
    x = activation_inputs("float64")
    d, t = both(x)
    a, b = d * 2, t * 2
    ra, rb = getattr(F, name)(a, inplace=True), getattr(TF, name)(b, inplace=True)
    assert ra is a
    close(a, b)
    backward_both(ra, rb)
    close(d.grad, t.grad)
    for fn in ("elu_", "selu_", "celu_"):
        u, v = dg.tensor([-1.0, 2.0]), torch.tensor([-1.0, 2.0])
        assert getattr(F, fn)(u) is u and np.allclose(u.numpy(), getattr(TF, fn)(v).numpy())


def test_activation_modules_repr_forward_and_errors_match_torch():
    x = np.linspace(-6, 6, 41)
    for name, args, kwargs in [("ELU", (), {}), ("ELU", (0.5, True), {}), ("CELU", (2.0,), {}), ("SELU", (), {}),
                               ("SELU", (True,), {}), ("Softplus", (), {}), ("Softplus", (2, 3), {}), ("Mish", (), {}),
                               ("Mish", (), {"inplace": True}), ("LogSigmoid", (), {})]:
        ours, theirs = getattr(dg.nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
        assert repr(ours) == repr(theirs), name
        np.testing.assert_allclose(ours(dg.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy(), rtol=1e-14)
        assert getattr(dg.nn.modules.activation, name) is getattr(dg.nn, name)
    same_error(lambda: F.celu(dg.ones(3), alpha=0.0), lambda: TF.celu(torch.ones(3), alpha=0.0), "alpha cannot be 0")
