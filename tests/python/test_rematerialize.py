"""Rematerialized saves (src/dygrad/autograd/node.h; docs/autograd.md, "Rematerialized saves"): a node that saves
an rms_norm output keeps the norm's node instead, and its backward recomputes the output from what the norm saved
anyway. A norm followed by a linear layer then holds its input once, not its input and its output. Memory,
exactness (bitwise against keeping the output, and against torch), double backward, and every case where the
output must be kept as it is."""
import contextlib
import gc

import numpy as np
import pytest
import torch

import dygrad as dg
import dygrad.nn.functional as F


pytestmark = pytest.mark.usefixtures("synchronize_mode")  # exact allocator figures (conftest.py)


def arrays(dtype=np.float32, n=64, c=48, f=80, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c)).astype(dtype)
    w = (1 + 0.1 * rng.standard_normal(c)).astype(dtype)
    lin = (0.2 * rng.standard_normal((f, c))).astype(dtype)
    g = rng.standard_normal((n, f)).astype(dtype)
    return x, w, lin, g


def leaves(x, w, lin):
    return [dg.tensor(a).requires_grad_(True) for a in (x, w, lin)]


def keep_saved_tensors():
    """Identity saved-tensor hooks: a node then keeps what it saves as it is (no rematerialization)."""
    return dg.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)


def held_after_forward(x, w, lin, hooks):
    """Bytes the graph of linear(rms_norm(x, w), lin) holds once the program keeps only the output."""
    gc.collect()
    base = dg.memory_allocated()
    if hooks:
        with keep_saved_tensors():
            out = F.linear(F.rms_norm(x, (x.shape[-1],), w), lin)
    else:
        out = F.linear(F.rms_norm(x, (x.shape[-1],), w), lin)
    gc.collect()
    return out, dg.memory_allocated() - base


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_norm_followed_by_a_linear_holds_its_output_no_more_with_the_same_gradients(dtype):
    x, w, lin, g = arrays(dtype)
    plain = leaves(x, w, lin)
    out, held = held_after_forward(*plain, hooks=False)
    kept = leaves(x, w, lin)
    out_kept, held_kept = held_after_forward(*kept, hooks=True)
    # the norm's output, x's shape, is what the identity hooks keep in addition
    assert held_kept - held == x.nbytes
    out.backward(dg.tensor(g))
    out_kept.backward(dg.tensor(g))
    for a, b in zip(plain, kept):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    # and against torch
    tx, tw, tl = (torch.tensor(a, requires_grad=True) for a in (x, w, lin))
    torch.nn.functional.linear(torch.nn.functional.rms_norm(tx, (x.shape[-1],), tw), tl).backward(
        torch.tensor(g))
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    for a, t in zip(plain, (tx, tw, tl)):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=rtol)


def test_every_consumer_of_the_output_recomputes_it():
    # the LLaMA MLP: one norm output feeds two linear layers (w1, w3); neither keeps it
    x, w, lin, g = arrays()
    plain, kept = leaves(x, w, lin), leaves(x, w, lin)
    results = []
    for ts, hooks in ((plain, False), (kept, True)):
        gc.collect()
        base = dg.memory_allocated()
        with (keep_saved_tensors() if hooks else contextlib.nullcontext()):
            h = F.rms_norm(ts[0], (x.shape[-1],), ts[1])
            out = F.linear(h, ts[2]) * F.linear(h, ts[2] * 0.5)
            del h
        gc.collect()
        results.append((out, dg.memory_allocated() - base))
    assert results[1][1] - results[0][1] == x.nbytes
    for (out, _), ts in zip(results, (plain, kept)):
        out.backward(dg.tensor(g))
    for a, b in zip(plain, kept):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())


def test_double_backward_through_a_rematerialized_output():
    x, w, lin, _ = arrays(np.float64, n=5, c=4, f=3)
    ts = leaves(x, w, lin)
    assert dg.autograd.gradcheck(lambda a, b, c: F.linear(F.rms_norm(a, (4,), b), c), ts)
    assert dg.autograd.gradgradcheck(lambda a, b, c: F.linear(F.rms_norm(a, (4,), b), c), ts)


def test_an_output_modified_in_place_before_the_save_is_kept():
    # under no_grad the in-place op keeps the norm as grad_fn but bumps the version: recomputing would give the
    # old values, so the linear keeps the modified tensor, as torch does
    x, w, lin, g = arrays()
    xs = leaves(x, w, lin)
    y = F.rms_norm(xs[0], (x.shape[-1],), xs[1])
    with dg.no_grad():
        y.mul_(2)
    F.linear(y, xs[2]).backward(dg.tensor(g))
    tx, tw, tl = (torch.tensor(a, requires_grad=True) for a in (x, w, lin))
    ty = torch.nn.functional.rms_norm(tx, (x.shape[-1],), tw)
    with torch.no_grad():
        ty.mul_(2)
    torch.nn.functional.linear(ty, tl).backward(torch.tensor(g))
    np.testing.assert_allclose(xs[2].grad.numpy(), tl.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_views_and_outputs_shared_with_numpy_are_kept():
    x, w, lin, g = arrays()
    held = {}
    for name, make in (("output", lambda y: y), ("slice", lambda y: y[:, :]), ("view", lambda y: y.view(x.shape))):
        xs = leaves(x, w, lin)
        gc.collect()
        base = dg.memory_allocated()
        y = F.rms_norm(xs[0], (x.shape[-1],), xs[1])
        out = F.linear(make(y), xs[2])
        del y
        gc.collect()
        held[name] = dg.memory_allocated() - base
        out.backward(dg.tensor(g))
        del out, xs
    # a view of the output is saved as it is: its memory stays held
    assert held["slice"] - held["output"] == x.nbytes and held["view"] - held["output"] == x.nbytes
    xs = leaves(x, w, lin)
    y = F.rms_norm(xs[0], (x.shape[-1],), xs[1])
    shared = y.detach().numpy()  # the host may now change y without a version bump
    out = F.linear(y, xs[2])
    shared *= 3
    out.backward(dg.tensor(g))
    np.testing.assert_allclose(xs[2].grad.numpy(), g.T @ shared, rtol=1e-4, atol=1e-4)


def test_a_second_backward_through_a_freed_norm_names_retain_graph():
    x, w, lin, _ = arrays()
    xs = leaves(x, w, lin)
    y = F.rms_norm(xs[0], (x.shape[-1],), xs[1])
    a, b = F.linear(y, xs[2]), F.linear(y, xs[2] * 2)
    del y
    a.sum().backward()  # runs the norm's backward, which frees what the norm saved
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        dg.autograd.grad(b.sum(), [xs[2]])
    # with retain_graph the norm's saved tensors stay and the second product's gradient is torch's
    xs = leaves(x, w, lin)
    y = F.rms_norm(xs[0], (x.shape[-1],), xs[1])
    a, b = F.linear(y, xs[2]), F.linear(y, xs[2] * 2)
    a.sum().backward(retain_graph=True)
    (grad,) = dg.autograd.grad(b.sum(), [xs[2]])
    tx, tw, tl = (torch.tensor(v, requires_grad=True) for v in (x, w, lin))
    ty = torch.nn.functional.rms_norm(tx, (x.shape[-1],), tw)
    (tgrad,) = torch.autograd.grad(torch.nn.functional.linear(ty, tl * 2).sum(), [tl])
    np.testing.assert_allclose(grad.numpy(), tgrad.numpy(), rtol=1e-4, atol=1e-4)


def test_the_graph_is_freed_with_nothing_left():
    x, w, lin, g = arrays()
    gc.collect()
    base = dg.memory_allocated()
    xs = leaves(x, w, lin)
    out = F.linear(F.rms_norm(xs[0], (x.shape[-1],), xs[1]), xs[2])
    del out  # never backpropagated: the linear's node holds the norm's node, which holds x
    gc.collect()
    assert dg.memory_allocated() - base == sum(a.nbytes for a in (x, w, lin))


def test_the_llama_step_holds_each_norm_input_once():
    from dygrad.models import llama
    cfg = llama.CONFIGS["tiny"]
    dg.manual_seed(0)
    model = llama.Llama(cfg)
    idx = dg.randint(0, cfg.vocab_size, (2, 32))
    gc.collect()
    base = dg.memory_allocated()
    loss = model(idx, idx)
    held = dg.memory_allocated() - base
    loss.backward()
    del loss
    for p in model.parameters():
        p.grad = None
    gc.collect()
    base = dg.memory_allocated()
    with keep_saved_tensors():
        loss = model(idx, idx)
    held_kept = dg.memory_allocated() - base
    # 2 norms a block and the final one; each output [2, 32, dim] float32
    assert held_kept - held == (2 * cfg.n_layers + 1) * 2 * 32 * cfg.dim * 4
    loss.backward()
