"""A backward formula writing a gradient into a saved tensor's memory when nothing else can read it
(src/dygrad/autograd/saved_buffers.h; docs/recompute.md, "Backward temporaries at the peak"): SwiGLU's backward
into its gate/up inputs, linear's grad_input into its saved input. Exactness against torch and the plain
(copying) path, and every case where the memory must NOT be taken."""
import gc

import numpy as np
import pytest
import torch

import dygrad as dg
import dygrad.nn.functional as F


pytestmark = pytest.mark.usefixtures("synchronize_mode")  # exact allocator figures (conftest.py)


def mlp_dg(x, w1, w3, w2):
    return F.linear(F.swiglu(F.linear(x, w1), F.linear(x, w3)), w2)


def mlp_torch(x, w1, w3, w2):
    f = torch.nn.functional
    return f.linear(f.silu(f.linear(x, w1)) * f.linear(x, w3), w2)


def weights(seed=0, n=64, c=48, f=96):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((n, c), (f, c), (f, c), (c, f))]


def test_mlp_gradients_match_torch_and_the_backward_holds_less():
    arrays = weights()
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    mlp_torch(*ts).pow(2).sum().backward()
    nf = 64 * 96 * 4  # bytes of one [tokens, ffn] activation
    extra = {}
    for hold in (False, True):
        ds = [dg.from_numpy(a.copy()).requires_grad_() for a in arrays]
        x, w1, w3, w2 = ds
        a, b = F.linear(x, w1), F.linear(x, w3)
        s = F.swiglu(a, b)
        loss = F.linear(s, w2).pow(2).sum()
        held = (a, b, s) if hold else ()
        del a, b, s
        gc.collect()
        base = dg.memory_allocated()
        dg.reset_peak_memory_stats()
        loss.backward()
        extra[hold] = (dg.max_memory_allocated() - base) / nf  # the backward's own peak, in [tokens, ffn] units
        for d, t in zip(ds, ts):
            np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)
        del held
    # taken: grad_s in s's memory, grad_a / grad_b in a's / b's: one [tokens, ffn] buffer more at most (plus
    # the [tokens, c] ones); held by the user: grad_s, grad_a, grad_b are new buffers
    assert extra[False] < 1.5 and extra[True] > 3.0, extra


def test_same_values_as_the_copying_path_when_the_user_holds_the_activations():
    arrays = weights(1)
    results = []
    for keep in (False, True):
        ds = [dg.from_numpy(a.copy()).requires_grad_() for a in arrays]
        x, w1, w3, w2 = ds
        a, b = F.linear(x, w1), F.linear(x, w3)
        s = F.swiglu(a, b)
        out = F.linear(s, w2)
        before = [t.detach().clone() for t in (a, b, s)]
        if not keep:
            del a, b, s
        out.pow(2).sum().backward()
        if keep:  # held by the user: their memory was not taken
            for t, ref in zip((a, b, s), before):
                np.testing.assert_array_equal(t.detach().numpy(), ref.numpy())
        results.append([d.grad.numpy().copy() for d in ds])
    for p, q in zip(*results):
        np.testing.assert_array_equal(p, q)


def test_retain_graph_keeps_the_saved_tensors_intact():
    ds = [dg.from_numpy(a.copy()).requires_grad_() for a in weights(2)]
    out = mlp_dg(*ds).pow(2).sum()
    out.backward(retain_graph=True)
    first = [d.grad.numpy().copy() for d in ds]
    for d in ds:
        d.grad = None
    out.backward()
    for p, d in zip(first, ds):
        np.testing.assert_array_equal(p, d.grad.numpy())


def test_leaf_inputs_views_and_hooks_are_never_overwritten():
    rng = np.random.default_rng(3)
    g = dg.from_numpy(rng.standard_normal((8, 16)).astype(np.float32)).requires_grad_()
    u = dg.from_numpy(rng.standard_normal((8, 16)).astype(np.float32)).requires_grad_()
    g0, u0 = g.detach().clone(), u.detach().clone()
    F.swiglu(g, u).sum().backward()  # leaves: the edges to them hold them
    np.testing.assert_array_equal(g.detach().numpy(), g0.numpy())
    np.testing.assert_array_equal(u.detach().numpy(), u0.numpy())
    gt, ut = torch.tensor(g0.numpy(), requires_grad=True), torch.tensor(u0.numpy(), requires_grad=True)
    (torch.nn.functional.silu(gt) * ut).sum().backward()
    np.testing.assert_allclose(g.grad.numpy(), gt.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(u.grad.numpy(), ut.grad.numpy(), rtol=1e-5, atol=1e-6)
    # a view of the activation alive elsewhere: the storage is shared, so it is not taken
    x = dg.from_numpy(rng.standard_normal((8, 16)).astype(np.float32)).requires_grad_()
    a = x * 2
    view = a.detach()[:2]
    snapshot = view.clone()
    F.swiglu(a, x * 3).sum().backward()
    np.testing.assert_array_equal(view.numpy(), snapshot.numpy())
    # under saved-tensor hooks that keep what they pack, the unpacked tensor has another owner: not taken
    kept = []

    def pack(t):
        kept.append(t)
        return t

    y = dg.from_numpy(rng.standard_normal((8, 16)).astype(np.float32)).requires_grad_()
    with dg.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        a, b = y * 2, y * 3
        out = F.swiglu(a, b)
    del a, b
    copies = [t.detach().clone() for t in kept]
    out.sum().backward()
    for t, c in zip(kept, copies):
        np.testing.assert_array_equal(t.detach().numpy(), c.numpy())
