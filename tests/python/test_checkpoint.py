"""Issue 14 (part 1): dygrad.utils.checkpoint (torch.utils.checkpoint's API, non-reentrant semantics) and
MindSpore's Module.recompute(), against torch 2.13 (docs/recompute.md)."""
import importlib.util
import os
import warnings

import numpy as np
import pytest
import torch
import torch.utils.checkpoint as tck

import dygrad as dg
import dygrad.nn.functional as F
from dygrad.models import llama
from dygrad.utils.checkpoint import CheckpointError, checkpoint, checkpoint_sequential

REF = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "bench", "torch_ref.py")


@pytest.fixture(autouse=True)
def deterministic():
    previous = dg.get_context()
    dg.set_context(deterministic=True)
    yield
    dg.set_context(previous)


def grads(params):
    return [None if p.grad is None else p.grad.numpy().copy() for p in params]


def assert_bitwise(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x is not None and y is not None
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y)


def mlp(dropout=0.25):
    return dg.nn.Sequential(dg.nn.Linear(8, 32), dg.nn.Tanh(), dg.nn.Dropout(dropout), dg.nn.Linear(32, 32),
                            dg.nn.Tanh(), dg.nn.Dropout(dropout), dg.nn.Linear(32, 4))


def torch_mlp(net):
    t = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Dropout(0.0), torch.nn.Linear(32, 32),
                            torch.nn.Tanh(), torch.nn.Dropout(0.0), torch.nn.Linear(32, 4))
    t.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in net.state_dict().items()})
    return t


def run_mlp(net, x, how, seed=1):
    dg.manual_seed(seed)
    for p in net.parameters():
        p.grad = None
    x.grad = None
    if how == "plain":
        y = net(x)
    elif how == "checkpoint":
        y = checkpoint(net, x, use_reentrant=False)
    elif how == "reentrant":
        y = checkpoint(net, x, use_reentrant=True)
    elif how == "sequential":
        y = checkpoint_sequential(net, 3, x, use_reentrant=False)
    (y * y).sum().backward()
    return y.detach().numpy().copy(), grads(list(net.parameters()) + [x])


@pytest.mark.parametrize("how", ["checkpoint", "reentrant", "sequential"])
def test_mlp_with_dropout_gradients_equal_plain_bitwise(how):
    dg.manual_seed(0)
    net = mlp()
    x = dg.randn(6, 8, requires_grad=True)
    y0, g0 = run_mlp(net, x, "plain")
    y1, g1 = run_mlp(net, x, how)
    assert np.array_equal(y0, y1)
    assert_bitwise(g0, g1)


@pytest.mark.parametrize("how", ["checkpoint", "sequential"])
def test_mlp_matches_torch_checkpoint(how):
    dg.manual_seed(0)
    net = mlp(dropout=0.0)
    tnet = torch_mlp(net)
    xs = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    x = dg.from_numpy(xs.copy()).requires_grad_()
    _, g = run_mlp(net, x, how)
    tx = torch.from_numpy(xs.copy()).requires_grad_()
    if how == "checkpoint":
        ty = tck.checkpoint(tnet, tx, use_reentrant=False)
    else:
        ty = tck.checkpoint_sequential(tnet, 3, tx, use_reentrant=False)
    (ty * ty).sum().backward()
    tg = [p.grad.numpy() for p in tnet.parameters()] + [tx.grad.numpy()]
    for a, b in zip(g, tg):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_dropout_inside_checkpoint_replays_the_same_mask():
    x = dg.randn(64, 64, requires_grad=True)
    dg.manual_seed(3)
    y = checkpoint(lambda t: F.dropout(t, 0.5, True) * 3.0, x, use_reentrant=False)
    state_after_forward = dg.get_rng_state()
    y.sum().backward()
    kept = y.detach().numpy() != 0
    assert 0 < kept.mean() < 1
    # the gradient is the mask the forward drew (times 3 * 2): the recomputation replayed it
    np.testing.assert_array_equal(x.grad.numpy(), np.where(kept, 6.0, 0.0).astype(np.float32))
    # the recomputation restores the generator: it is where the forward left it
    assert dg.get_rng_state() == state_after_forward


def test_without_preserve_rng_state_the_mask_is_not_replayed():
    x = dg.randn(64, 64, requires_grad=True)
    dg.manual_seed(3)
    y = checkpoint(lambda t: F.dropout(t, 0.5, True), x, use_reentrant=False, preserve_rng_state=False)
    y.sum().backward()
    assert not np.array_equal(x.grad.numpy() != 0, y.detach().numpy() != 0)


def llama_model(fused=True):
    cfg = llama.CONFIGS["tiny"]
    dg.manual_seed(0)
    return llama.Llama(cfg, fused=fused)


def llama_batch(B=2, T=32):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, size=(B, T + 1))
    return data[:, :-1].copy(), data[:, 1:].copy()


def llama_grads(model, x, y, how):
    for p in model.parameters():
        p.grad = None
    if how == "recompute":
        for b in model.blocks:
            b.recompute()
    try:
        if how == "checkpoint":
            idx, tgt = dg.from_numpy(x), dg.from_numpy(y)
            cos, sin = model.rope_cos[:x.shape[1]], model.rope_sin[:x.shape[1]]
            mask = model.causal_mask[:x.shape[1], :x.shape[1]]
            h = model.embed(idx)
            for b in model.blocks:
                h = checkpoint(b, h, cos, sin, mask, use_reentrant=False)
            logits = model.head(model.norm(h))
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.reshape(-1))
        else:
            loss = model(dg.from_numpy(x), dg.from_numpy(y))
        loss.backward()
    finally:
        for b in model.blocks:
            b.recompute(False)
    return loss.item(), grads(model.parameters())


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_llama_tiny_checkpointed_blocks_equal_plain_bitwise(fused):
    model = llama_model(fused)
    x, y = llama_batch()
    l0, g0 = llama_grads(model, x, y, "plain")
    l1, g1 = llama_grads(model, x, y, "checkpoint")
    l2, g2 = llama_grads(model, x, y, "recompute")
    assert l0 == l1 == l2
    assert_bitwise(g0, g1)
    assert_bitwise(g0, g2)


def test_llama_tiny_recompute_matches_torch_checkpoint():
    spec = importlib.util.spec_from_file_location("torch_ref", REF)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    L, d, h, f, V, T, _ = ref.CFGS["tiny"]
    torch.manual_seed(0)
    tm = ref.LLaMA(L, d, h, f, V, T)
    model = llama.Llama(llama.CONFIGS["tiny"], fused=True)
    llama.load_reference_state_dict(model, {k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x, y = llama_batch(B=1, T=T)  # the reference's rotary tables and mask are for its full length
    loss, g = llama_grads(model, x, y, "recompute")

    class Ck(torch.nn.Module):
        def __init__(self, block):
            super().__init__()
            self.block = block

        def forward(self, *a):
            return tck.checkpoint(self.block, *a, use_reentrant=False)

    tm.blocks = torch.nn.ModuleList(Ck(b) for b in tm.blocks)
    tl = tm(torch.from_numpy(x), torch.from_numpy(y))
    tl.backward()
    assert abs(loss - tl.item()) <= 1e-5 * abs(tl.item())
    tgrads = {llama.reference_key(k.replace(".block.", ".")): p.grad.numpy() for k, p in tm.named_parameters()}
    for (name, _), mine in zip(model.named_parameters(), g):
        np.testing.assert_allclose(mine, tgrads[name], rtol=2e-3, atol=2e-5, err_msg=name)


def activation_bytes(model, x, y, how):
    """Allocator bytes held after the forward (the saved activations), parameters and inputs excluded."""
    for p in model.parameters():
        p.grad = None
    dg.synchronize() if hasattr(dg, "synchronize") else None
    base = dg.memory_allocated()
    if how == "recompute":
        for b in model.blocks:
            b.recompute()
    loss = model(dg.from_numpy(x), dg.from_numpy(y))
    loss.item()
    held = dg.memory_allocated() - base
    loss.backward()
    for b in model.blocks:
        b.recompute(False)
    return held


def test_saved_tensor_memory_is_lower_with_recompute():
    model = llama_model()
    x, y = llama_batch(B=2, T=64)
    plain = activation_bytes(model, x, y, "plain")
    recomputed = activation_bytes(model, x, y, "recompute")
    # each block keeps only its input instead of ~a dozen activations of its size and larger
    assert recomputed < 0.2 * plain, (plain, recomputed)


def test_nested_checkpoints():
    dg.manual_seed(0)
    w = dg.randn(16, 16, requires_grad=True)
    x = dg.randn(4, 16, requires_grad=True)

    def inner(t):
        return (t @ w).tanh()

    def outer(t):
        a = checkpoint(inner, t, use_reentrant=False)
        return checkpoint(inner, a.sin(), use_reentrant=False).exp()

    def plain(t):
        return (((t @ w).tanh().sin() @ w).tanh()).exp()

    plain(x).sum().backward()
    g0 = grads([w, x])
    w.grad = x.grad = None
    checkpoint(outer, x, use_reentrant=False).sum().backward()
    assert_bitwise(g0, grads([w, x]))


def test_kwargs_and_non_tensor_outputs():
    x = dg.randn(3, 5, requires_grad=True)

    def f(t, scale=1.0, *, offset):
        return {"y": (t * scale + offset).tanh(), "n": 3, "s": "text", "none": None}, [t.sin(), 7]

    out, rest = checkpoint(f, x, use_reentrant=False, scale=2.0, offset=0.5)
    assert out["n"] == 3 and out["s"] == "text" and out["none"] is None and rest[1] == 7
    (out["y"].sum() + rest[0].sum()).backward()
    g = x.grad.numpy().copy()
    x.grad = None
    out, rest = f(x, 2.0, offset=0.5)
    (out["y"].sum() + rest[0].sum()).backward()
    np.testing.assert_array_equal(g, x.grad.numpy())


def test_reentrant_rejects_kwargs_context_fn_and_debug_as_torch():
    x = dg.randn(3, requires_grad=True)
    tx = torch.randn(3, requires_grad=True)
    for kwargs in ({"offset": 1.0}, {"debug": True}, {"context_fn": lambda: (None, None)}):
        with pytest.raises(ValueError) as theirs:
            tck.checkpoint(lambda t, **k: t.sin(), tx, use_reentrant=True, **kwargs)
        with pytest.raises(ValueError) as mine:
            checkpoint(lambda t, **k: t.sin(), x, use_reentrant=True, **kwargs)
        assert str(mine.value) == str(theirs.value)


def _warning_texts(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught]


def test_use_reentrant_none_warns_with_torchs_text():
    x = dg.randn(3, requires_grad=True)
    tx = torch.randn(3, requires_grad=True)
    theirs = _warning_texts(lambda: tck.checkpoint(torch.sin, tx))
    mine = _warning_texts(lambda: checkpoint(dg.sin, x))
    assert mine == theirs and "use_reentrant parameter should be passed explicitly" in mine[0]
    seq = [dg.nn.Tanh(), dg.nn.Tanh()]
    tseq = [torch.nn.Tanh(), torch.nn.Tanh()]
    assert _warning_texts(lambda: checkpoint_sequential(seq, 2, x)) == \
        _warning_texts(lambda: tck.checkpoint_sequential(tseq, 2, tx))
    # explicit use_reentrant=False: silent; True with no input requiring grad: torch's warning
    assert _warning_texts(lambda: checkpoint(dg.sin, x, use_reentrant=False)) == []
    assert _warning_texts(lambda: checkpoint(dg.sin, dg.randn(3), use_reentrant=True)) == \
        _warning_texts(lambda: tck.checkpoint(torch.sin, torch.randn(3), use_reentrant=True))


def test_determinism_check_raises_on_changed_shapes():
    calls = []

    def f(t):
        calls.append(1)
        n = 4 if len(calls) == 1 else 3
        return t[:n].exp()

    x = dg.randn(5, requires_grad=True)
    y = checkpoint(f, x, use_reentrant=False)
    with pytest.raises(CheckpointError, match="Recomputed values for the following tensors have different metadata"):
        y.sum().backward()
    # determinism_check="none" skips the comparison
    calls.clear()
    y = checkpoint(lambda t: t[:4].exp() if not calls.append(1) and len(calls) == 1 else t[:4].exp(), x,
                   use_reentrant=False, determinism_check="none")
    y.sum().backward()


def test_determinism_check_raises_on_fewer_saved_tensors_and_bad_mode():
    calls = []

    def f(t):
        calls.append(1)
        return t.exp().exp() if len(calls) == 1 else t.exp() * 1.0

    x = dg.randn(5, requires_grad=True)
    y = checkpoint(f, x, use_reentrant=False)
    with pytest.raises(CheckpointError, match="A different number of tensors was saved"):
        y.sum().backward()
    with pytest.raises(ValueError) as mine:
        checkpoint(dg.sin, x, use_reentrant=False, determinism_check="bogus")
    with pytest.raises(ValueError) as theirs:
        tck.checkpoint(torch.sin, torch.randn(3, requires_grad=True), use_reentrant=False, determinism_check="bogus")
    assert str(mine.value) == str(theirs.value)


def test_early_stop_ends_the_recomputation_at_the_last_saved_tensor():
    for early_stop, expected in ((True, 1), (False, 2)):
        after_last_save = []

        def f(t):
            y = t.tanh()  # saves its output: the region's only saved tensor
            after_last_save.append(1)
            return y + 1.0

        x = dg.randn(4, requires_grad=True)
        checkpoint(f, x, use_reentrant=False, early_stop=early_stop).sum().backward()
        assert len(after_last_save) == expected
        np.testing.assert_allclose(x.grad.numpy(), 1 - np.tanh(x.detach().numpy()) ** 2, rtol=1e-6)


def test_retain_graph_backward_twice_and_autograd_grad():
    x = dg.randn(4, 4, requires_grad=True)
    y = checkpoint(lambda t: (t @ t).sin(), x, use_reentrant=False)
    (g1,) = dg.autograd.grad(y.sum(), x, retain_graph=True)
    (g2,) = dg.autograd.grad(y.sum(), x)
    (g0,) = dg.autograd.grad((x @ x).sin().sum(), x)
    np.testing.assert_array_equal(g1.numpy(), g0.numpy())
    np.testing.assert_array_equal(g2.numpy(), g0.numpy())


def test_context_fn_contexts_wrap_forward_and_recomputation():
    import contextlib
    log = []

    @contextlib.contextmanager
    def tag(name):
        log.append(name)
        yield

    x = dg.randn(3, requires_grad=True)
    y = checkpoint(lambda t: t.exp(), x, use_reentrant=False, context_fn=lambda: (tag("forward"), tag("recompute")))
    assert log == ["forward"]
    y.sum().backward()
    assert log == ["forward", "recompute"]


def test_module_recompute_returns_the_module_and_can_be_undone():
    net = mlp(dropout=0.0)
    assert net.recompute() is net
    assert "forward" in net.__dict__
    assert net.recompute(False) is net
    assert "forward" not in net.__dict__
    assert list(net.state_dict()) == list(mlp().state_dict())
    # under no_grad a recomputed module runs plainly
    net.recompute()
    with dg.no_grad():
        assert net(dg.randn(2, 8)).shape == (2, 4)


def test_more_tensors_saved_in_recomputation_raises_without_early_stop():
    calls = []

    def f(t):
        calls.append(1)
        return t.exp() if len(calls) == 1 else t.exp().exp()

    x = dg.randn(5, requires_grad=True)
    y = checkpoint(f, x, use_reentrant=False, early_stop=False)
    with pytest.raises(CheckpointError, match="trying to save more tensors during recomputation"):
        y.sum().backward()


def test_checkpoint_sequential_rejects_unexpected_kwargs_as_torch():
    x = dg.randn(3, requires_grad=True)
    with pytest.raises(ValueError) as mine:
        checkpoint_sequential([dg.nn.Tanh()], 1, x, use_reentrant=False, foo=1)
    with pytest.raises(ValueError) as theirs:
        tck.checkpoint_sequential([torch.nn.Tanh()], 1, torch.randn(3), use_reentrant=False, foo=1)
    assert str(mine.value) == str(theirs.value)


def test_peak_memory_of_a_step_is_lower_with_recompute():
    # the recomputed tensors are dropped as they are unpacked, so the backward holds one block's at a time
    import gc
    model = llama_model()
    x, y = llama_batch(B=4, T=256)
    peaks = {"plain": [], "recompute": []}
    for how in ["plain", "recompute"] * 2:
        for p in model.parameters():
            p.grad = None
        gc.collect()
        base = dg.memory_allocated()
        dg.reset_peak_memory_stats()
        llama_grads(model, x, y, how)
        peaks[how].append(dg.max_memory_allocated() - base)
    assert max(peaks["recompute"]) < 0.9 * min(peaks["plain"]), peaks


def test_double_backward_through_a_checkpoint_raises_instead_of_a_wrong_second_derivative():
    """dygrad does not re-attach a saved tensor's history after an unpack hook (docs/autograd.md, Known gaps), so
    a create_graph backward through a non-reentrant checkpoint raises rather than differentiate a cut graph; the
    first derivative with create_graph=False is unaffected."""
    x = dg.randn(4, 3, dtype=dg.float64, requires_grad=True)
    w = dg.randn(3, 3, dtype=dg.float64, requires_grad=True)
    f = lambda a: dg.tanh(a @ w).sum()
    (g,) = dg.autograd.grad(checkpoint(f, x, use_reentrant=False), [x])
    (ref,) = dg.autograd.grad(f(x), [x])
    assert dg.allclose(g, ref)
    with pytest.raises(RuntimeError, match="double backward .* non-reentrant checkpoint is not supported"):
        dg.autograd.grad(checkpoint(f, x, use_reentrant=False), [x], create_graph=True)
