"""dygrad.jit O1's pattern pass (docs/jit-fusion.md, "Patterns"): composed attention, forward and the backward
autograd records for it, replayed as scaled_dot_product_attention and its backward. Equal to eager within float
rounding (float64: 1e-10 relative), off in deterministic mode and by dygrad.jit.config.patterns; refused where a
matched op's result is read elsewhere, where an operand is written in between, or where a random op intervenes.
And the kernel side: a boolean mask that is the causal one takes the causal path, bitwise equal to is_causal=True."""
import math

import numpy as np
import pytest

import dygrad as dg
import dygrad.nn.functional as F
from dygrad.models import llama
from jit_steps import adamw_run, after_passes, assert_close, llama_step


pytestmark = pytest.mark.usefixtures("jit_config")  # conftest.py


def composed(q, k, v, mask=None, scale="div"):
    """Attention as a PyTorch user writes it without F.scaled_dot_product_attention."""
    s = q @ k.transpose(-2, -1)
    if scale == "div":
        s = s / math.sqrt(q.shape[-1])
    elif scale == "mul":
        s = s * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = s.masked_fill(mask, float("-inf"))
    return s.softmax(-1) @ v


def causal_mask(T):
    return dg.triu(dg.ones((T, T), dtype=dg.bool), 1)


def training_step(B=2, T=37, H=3, D=16, dtype=dg.float32, mask="causal", scale="div", seed=0):
    """(step, inputs): a projection to q, k, v ([B, H, T, D] strided views, as a fused QKV projection gives), the
    composed attention, a loss and its backward; the step returns the projection's gradient and the output."""
    dg.manual_seed(seed)
    C = H * D
    w = (dg.randn(C, 3 * C, dtype=dtype) * 0.3).requires_grad_()
    bias = dg.tril(dg.ones((T, T), dtype=dg.bool))  # nanoGPT's buffer: masked where it is 0
    rows = dg.rand(T, T) < 0.4
    rows[dg.arange(T), dg.arange(T)] = False  # every query attends at least to itself
    masks = {"causal": lambda: causal_mask(T), "computed": lambda: bias == 0, "random": lambda: rows,
             "none": lambda: None}
    fixed = masks[mask]() if mask != "computed" else None

    def step(x):
        q, k, v = (x @ w).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
        m = fixed if mask != "computed" else masks["computed"]()
        y = composed(q, k, v, m, scale).transpose(1, 2).reshape(B, T, C)
        (y * y.sin()).sum().backward()
        g = w.grad
        w.grad = None
        return g, y.detach()
    return step, [dg.randn(B, T, C, dtype=dtype) for _ in range(4)]


@pytest.mark.parametrize("dtype", [dg.float32, dg.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("mask,scale", [("causal", "div"), ("computed", "mul"), ("random", "div"), ("none", "none")])
def test_a_composed_attention_step_runs_the_fused_op_and_its_backward(dtype, mask, scale):
    step, xs = training_step(dtype=dtype, mask=mask, scale=scale)
    text, final = after_passes(step, xs[0])
    assert "patterns: 1 attention(s) into scaled_dot_product_attention (1 with its backward)" in text
    assert "scaled_dot_product_attention(" in final and "scaled_dot_product_attention_backward(" in final
    assert "softmax" not in final  # neither the softmax nor its backward is left
    want = [step(x) for x in xs]
    f = dg.jit(step, jit_level="O1")
    got = [f(x) for x in xs]
    assert f.stats["replays"] == 2 and f.stats["fused_kernels"] >= 1
    for (gw, yw), (gg, yg) in zip(want, got):
        assert_close(yg, yw, dtype)
        assert_close(gg, gw, dtype)


@pytest.mark.parametrize("mask", ["causal", "random"])
def test_autocast_bfloat16_attention_runs_the_fused_op_as_accurately_as_eager(mask):
    # under bf16 autocast the composed attention is bfloat16 from the matmuls to the softmax; sdpa computes it in
    # float32 and rounds once. Against the float32 step (no autocast) its error is eager's, give or take roundings
    step, xs = training_step(mask=mask)

    def ac_step(x):
        with dg.autocast("cpu", dtype=dg.bfloat16):
            return step(x)

    text, final = after_passes(ac_step, xs[0])
    assert "patterns: 1 attention(s) into scaled_dot_product_attention (1 with its backward)" in text
    assert "softmax" not in final
    ref = [step(x) for x in xs]
    eager = [ac_step(x) for x in xs]
    f = dg.jit(ac_step, jit_level="O1")
    got = [f(x) for x in xs]
    assert f.stats["replays"] == 2
    for triple in zip(ref, eager, got):
        for r, e, g in zip(*triple):
            r, e, g = (t.float().numpy() for t in (r, e, g))
            scale = float(np.abs(r).max())
            err_eager, err_o1 = float(np.abs(e - r).max()) / scale, float(np.abs(g - r).max()) / scale
            assert np.all(np.isfinite(g)) and err_o1 <= 1.5 * err_eager + 2 ** -8, (err_o1, err_eager)


def test_the_pattern_is_off_in_deterministic_mode_and_by_its_switch(jit_config):
    step, xs = training_step()
    want = [step(x) for x in xs]
    try:
        dg.use_deterministic_algorithms(True)
        text, _ = after_passes(step, xs[0])
        assert "=== patterns" not in text and "scaled_dot_product_attention" not in text
        f = dg.jit(step, jit_level="O1")
        got = [f(x) for x in xs]
    finally:
        dg.use_deterministic_algorithms(False)
    assert all(dg.equal(a, b) for (a, _), (b, _) in zip(want, got))  # eager's bits: only exact passes ran
    # the mode is part of the guard key: outside it the same function is captured again, with the pattern
    assert f(xs[0]) is not None and f.stats["captures"] == 2
    jit_config.patterns = False
    text, final = after_passes(step, xs[0])
    assert "=== patterns" not in text and "scaled_dot_product_attention" not in final
    g = dg.jit(step, jit_level="O1")
    assert all(dg.equal(a, b) for (a, _), (b, _) in zip(want, [g(x) for x in xs]))


def test_an_inference_attention_runs_the_fused_forward_alone():
    q, k, v = (dg.randn(2, 4, 33, 8) for _ in range(3))
    mask = causal_mask(33)

    def f(q, k, v):
        return composed(q, k, v, mask)

    with dg.no_grad():
        text, final = after_passes(f, q, k, v)
        assert "1 attention(s) into scaled_dot_product_attention (0 with its backward)" in text
        assert "logical_not" in final and "scaled_dot_product_attention(" in final
        want = f(q, k, v)
        g = dg.jit(f, jit_level="O1")
        for _ in range(3):
            got = g(q, k, v)
    assert_close(got, want, dg.float32)
    assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True), dg.float32)


def test_a_query_that_attends_to_no_key_gives_zeros_not_nan_as_torch_sdpa():
    # The documented difference (docs/jit-fusion.md): the composed softmax of a row of -inf is NaN; the fused op's
    # row is 0, as torch.nn.functional.scaled_dot_product_attention's (and torch.compile's SDPA pattern's).
    q, k, v = (dg.randn(1, 2, 5, 4) for _ in range(3))
    mask = dg.zeros((5, 5), dtype=dg.bool)
    mask[2] = True

    def f(q, k, v):
        return composed(q, k, v, mask)

    with dg.no_grad():
        want = f(q, k, v).numpy()
        g = dg.jit(f, jit_level="O1")
        for _ in range(3):
            got = g(q, k, v).numpy()
    assert np.isnan(want[:, :, 2]).all() and (got[:, :, 2] == 0).all()
    np.testing.assert_allclose(np.delete(got, 2, axis=2), np.delete(want, 2, axis=2), rtol=2e-5, atol=1e-6)


def unmatched(fn, *args):
    text, final = after_passes(fn, *args)
    assert "=== patterns: nothing matched" in text and "scaled_dot_product_attention" not in final


def assert_replays_eager(fn, *args):
    """Without grad: the O1 replays give eager's results bitwise."""
    with dg.no_grad():
        want = fn(*args)
        g = dg.jit(fn, jit_level="O1")
        for _ in range(3):
            got = g(*args)
    assert all(dg.equal(a, b) for a, b in zip(want, got))


def test_probabilities_read_elsewhere_are_not_replaced():
    q, k, v = (dg.randn(2, 3, 9, 4) for _ in range(3))

    def f(q, k, v):
        p = (q @ k.transpose(-2, -1) / 2).softmax(-1)
        return p @ v, p  # the attention weights are a result

    with dg.no_grad():
        unmatched(f, q, k, v)
    assert_replays_eager(f, q, k, v)


def test_an_operand_written_between_the_matched_ops_is_not_moved_past():
    q, k, v = (dg.randn(2, 3, 9, 4) for _ in range(3))

    def f(q, k, v):
        q, v = q * 1, v * 1
        s = (q @ k.transpose(-2, -1)) / 2
        v.add_(1)  # p @ v reads v after this write; the fused op would run where p @ v ran: legal
        q.add_(1)  # but q is read by q @ k^T before it: the fused op would read the new q
        return s.softmax(-1) @ v, q

    with dg.no_grad():
        unmatched(f, q, k, v)
    assert_replays_eager(f, q, k, v)


def test_dropout_on_the_probabilities_is_not_replaced():
    q, k, v = (dg.randn(2, 3, 9, 4) for _ in range(3))

    def f(q, k, v):
        p = (q @ k.transpose(-2, -1) / 2).softmax(-1)
        return F.dropout(p, 0.2, training=True) @ v

    unmatched(f, q, k, v)


def assert_o1_trains_as_eager(make_model, T, atol, **adamw):
    """8 AdamW steps eagerly and under O1: losses within 1e-5, parameters within rtol 1e-4 / `atol`, and the O1
    graph's two attentions (the models have two blocks) replaced with their backward."""
    m1, l1, _, _ = adamw_run(make_model, T, 8, **adamw)
    m2, l2, step, opt = adamw_run(make_model, T, 8, "O1", **adamw)
    assert step.stats["replays"] == 6
    np.testing.assert_allclose([float(x) for x in l2], [float(x) for x in l1], rtol=1e-5)
    for p, q in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-4, atol=atol)
    x = dg.randint(0, 256, (2, T))
    text = dg.jit.graph(llama_step(m2, opt), x, x, passes=True)
    assert "2 attention(s) into scaled_dot_product_attention (2 with its backward)" in text


def test_a_composed_llama_trains_at_o1_as_eager_within_rounding():
    cfg = llama.LlamaConfig(n_layers=2, dim=48, n_heads=3, ffn_dim=96, seq_len=40, batch_size=2)
    assert_o1_trains_as_eager(lambda: llama.Llama(cfg, fused=False), 40, 1e-5, weight_decay=0.1)


# --- the kernel: a boolean causal mask takes the causal path -----------------------------------------------------

@pytest.mark.parametrize("dtype", [dg.float32, dg.float64], ids=["float32", "float64"])
def test_a_boolean_causal_mask_equals_is_causal_bitwise(dtype):
    dg.manual_seed(3)
    T = 150  # three query blocks, two key blocks
    q, k, v = (dg.randn(2, 3, T, 16, dtype=dtype).requires_grad_() for _ in range(3))
    g = dg.randn(2, 3, T, 16, dtype=dtype)
    keep = ~causal_mask(T)
    results = []
    for kwargs in ({"is_causal": True}, {"attn_mask": keep}, {"attn_mask": keep.expand(2, 3, T, T).contiguous()}):
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        grads = dg.autograd.grad(out, (q, k, v), g)
        results.append((out, *grads))
    for a, b in zip(results[0], results[1]):
        assert dg.equal(a, b)
    for a, b in zip(results[0], results[2]):  # a mask per batch-head takes the masked path: equal within rounding
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5 if dtype == dg.float32 else 1e-12,
                                   atol=1e-6)


def test_a_mask_that_is_almost_causal_is_applied_as_given():
    import torch
    dg.manual_seed(4)
    T = 70
    q, k, v = (dg.randn(1, 2, T, 8) for _ in range(3))
    keep = ~causal_mask(T)
    keep[40, 3] = False  # one more key masked: not the causal mask
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    want = torch.nn.functional.scaled_dot_product_attention(*(torch.from_numpy(t.numpy()) for t in (q, k, v)),
                                                            attn_mask=torch.from_numpy(keep.numpy()))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not np.allclose(got.numpy()[0, :, 40], causal.numpy()[0, :, 40])


def test_nanogpts_attention_is_matched_and_a_composed_gpt2_trains_at_o1_as_eager():
    # nanoGPT's order: the mask (`self.bias[:, :, :T, :T] == 0`) is made after q @ k^T; the probabilities go
    # through attn_dropout (p = 0: the same tensor); v's gradient is read (its transpose's copy) before dk^T's
    # matmul ran: the fused backward runs where the backward's first matmul ran.
    from dygrad.models import gpt2
    GPT, _ = gpt2.build(dg)
    # AdamW's step is ~lr wherever the gradient is not 0: a rounding difference in a gradient near 0 moves its
    # element by a fraction of lr (1e-2), hence atol 1e-4
    assert_o1_trains_as_eager(lambda: GPT(gpt2.CONFIGS["tiny"], fused=False), 32, 1e-4, lr=1e-2)
