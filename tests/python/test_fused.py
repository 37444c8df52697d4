"""Fused-op bindings against torch compositions: rms_norm, rotary_position_embedding, swiglu,
scaled_dot_product_attention, rotary_attention, adamw_step (against torch.optim.AdamW), sgd_step (against
torch.optim.SGD); _set_memory_category."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dygrad as dg
from peer import assert_matches, tensors_from

rng = np.random.default_rng(5)


def pair(shape, requires_grad=False, dtype=np.float64):
    return tensors_from(rng.standard_normal(shape).astype(dtype), requires_grad)


def close(d, t, rtol=1e-7, atol=1e-10):
    assert_matches(d, t, rtol, atol)


def backward_both(out_d, out_t):
    w = rng.standard_normal(tuple(out_t.shape))
    out_d.backward(dg.tensor(w))
    out_t.backward(torch.tensor(w))


def test_rms_norm():
    x_d, x_t = pair((3, 4, 8), requires_grad=True)
    w_d, w_t = pair((8,), requires_grad=True)
    out_d = dg.rms_norm(x_d, w_d, eps=1e-6)
    out_t = x_t * torch.rsqrt(x_t.pow(2).mean(-1, keepdim=True) + 1e-6) * w_t
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    close(w_d.grad, w_t.grad)
    close(dg.rms_norm(x_d), x_t * torch.rsqrt(x_t.pow(2).mean(-1, keepdim=True) + 1e-5))
    with pytest.raises(TypeError, match=r"\[rms_norm\]"):
        dg.rms_norm(x_d, weight=1.0)


def rope_reference(x, cos, sin, mode):
    if mode == "interleaved":
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
        return out.flatten(-2)
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)


@pytest.mark.parametrize("mode", ["interleaved", "rotate_half"])
def test_rotary_position_embedding(mode):
    B, H, T, D = 2, 3, 5, 8
    x_d, x_t = pair((B, H, T, D), requires_grad=True)
    angles = rng.uniform(0, 6, size=(T, D // 2))
    cos_d, sin_d = dg.tensor(np.cos(angles)), dg.tensor(np.sin(angles))
    cos_t, sin_t = torch.tensor(np.cos(angles)), torch.tensor(np.sin(angles))
    out_d = dg.rotary_position_embedding(x_d, cos_d, sin_d, mode=mode)
    out_t = rope_reference(x_t, cos_t, sin_t, mode)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    y_d = dg.rotary_position_embedding(x_d.detach().transpose(1, 2), cos_d, sin_d, mode, layout="BTHD")
    close(y_d.transpose(1, 2), out_t)
    with pytest.raises(ValueError, match=r"\[rotary_position_embedding\]"):
        dg.rotary_position_embedding(x_d, cos_d, sin_d, mode="half")


def rotary_attention_reference(qkv, cos, sin, heads, mode, is_causal):
    B, T, width = qkv.shape
    D = width // (3 * heads)
    q, k, v = qkv.reshape(B, T, 3, heads, D).permute(2, 0, 3, 1, 4)
    q, k = rope_reference(q, cos, sin, mode), rope_reference(k, cos, sin, mode)
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal).transpose(1, 2).reshape(B, T, heads * D)


@pytest.mark.parametrize("mode,is_causal", [("interleaved", True), ("rotate_half", False)])
def test_rotary_attention(mode, is_causal):
    """The fused op against torch's rotary + sdpa in float64 (values and the gradient of qkv); a qkv that is a
    strided slice of a wider projection; the same op as dygrad's own rotary + sdpa in float32."""
    B, T, H, D = 2, 70, 3, 8  # 70: a partial query and key block
    wide = rng.standard_normal((B, T, 3 * H * D + 5))
    angles = rng.uniform(0, 6, size=(T, D // 2))
    cos_d, sin_d = dg.tensor(np.cos(angles)), dg.tensor(np.sin(angles))
    cos_t, sin_t = torch.tensor(np.cos(angles)), torch.tensor(np.sin(angles))
    wide_d, wide_t = dg.tensor(wide).requires_grad_(), torch.tensor(wide, requires_grad=True)
    qkv_d, qkv_t = wide_d[..., 2:2 + 3 * H * D], wide_t[..., 2:2 + 3 * H * D]
    out_d = dg.nn.functional.rotary_attention(qkv_d, cos_d, sin_d, H, mode, is_causal=is_causal)
    out_t = rotary_attention_reference(qkv_t, cos_t, sin_t, H, mode, is_causal)
    assert tuple(out_d.shape) == (B, T, H * D) and out_d.is_contiguous()
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(wide_d.grad, wide_t.grad)
    # float32: the fused op against dygrad's rotary_position_embedding + scaled_dot_product_attention
    x = dg.tensor(wide[..., :3 * H * D].astype(np.float32)).requires_grad_()
    cos32, sin32 = cos_d.float(), sin_d.float()
    fused = dg.nn.functional.rotary_attention(x, cos32, sin32, H, mode, is_causal=is_causal, scale=0.3)
    y = x.detach().requires_grad_()
    q, k, v = y.view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
    q, k = (dg.rotary_position_embedding(t, cos32, sin32, mode) for t in (q, k))
    composed = dg.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.3)
    composed = composed.transpose(1, 2).reshape(B, T, H * D)
    g = dg.tensor(rng.standard_normal((B, T, H * D)).astype(np.float32))
    fused.backward(g)
    composed.backward(g)
    np.testing.assert_allclose(fused.detach().numpy(), composed.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_rotary_attention_errors():
    qkv = dg.zeros((2, 5, 24))
    cos, sin = dg.zeros((5, 2)), dg.zeros((5, 2))
    ra = dg.nn.functional.rotary_attention
    with pytest.raises(ValueError, match=r"\[rotary_attention\] expected qkv of 3 dims .* got shape \(2, 5, 24, 1\)"):
        ra(qkv.unsqueeze(-1), cos, sin, 2)
    with pytest.raises(ValueError, match=r"\[rotary_attention\] the last dim of qkv of shape \(2, 5, 24\) is not 3 \* heads"):
        ra(qkv, cos, sin, 5)
    with pytest.raises(ValueError, match=r"\[rotary_attention\] heads must be positive"):
        ra(qkv, cos, sin, 0)
    with pytest.raises(ValueError, match=r"\[rotary_attention\] the head dim D must be even"):
        ra(dg.zeros((2, 5, 18)), cos, sin, 2)
    with pytest.raises(ValueError, match=r"\[rotary_attention\] cos and sin must have shape \(5, 2\)"):
        ra(qkv, dg.zeros((4, 2)), sin, 2)
    with pytest.raises(ValueError, match=r"\[rotary_attention\] mode must be"):
        ra(qkv, cos, sin, 2, "half")
    with pytest.raises(TypeError, match=r"\[rotary_attention\]"):
        ra(qkv.long(), cos, sin, 2)


def test_swiglu():
    g_d, g_t = pair((4, 6), requires_grad=True)
    u_d, u_t = pair((4, 6), requires_grad=True)
    out_d, out_t = dg.swiglu(g_d, u_d), F.silu(g_t) * u_t
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(g_d.grad, g_t.grad)
    close(u_d.grad, u_t.grad)
    x_d, x_t = pair((3, 8))
    close(dg.swiglu(x_d), F.silu(x_t[:, :4]) * x_t[:, 4:])
    with pytest.raises(TypeError, match=r"\[swiglu\]"):
        dg.swiglu(g_d, up=2)


@pytest.mark.parametrize("variant", ["plain", "causal", "bool_mask", "float_mask", "scale"])
def test_scaled_dot_product_attention(variant):
    q_d, q_t = pair((2, 3, 5, 4), requires_grad=True)
    k_d, k_t = pair((2, 3, 6, 4), requires_grad=True)
    v_d, v_t = pair((2, 3, 6, 4), requires_grad=True)
    kwargs_d, kwargs_t = {}, {}
    if variant == "causal":
        kwargs_d = kwargs_t = {"is_causal": True}
    elif variant == "bool_mask":
        m = rng.random((5, 6)) > 0.3
        m[:, 0] = True
        kwargs_d, kwargs_t = {"attn_mask": dg.tensor(m)}, {"attn_mask": torch.tensor(m)}
    elif variant == "float_mask":
        m = rng.standard_normal((3, 1, 6))
        kwargs_d, kwargs_t = {"attn_mask": dg.tensor(m)}, {"attn_mask": torch.tensor(m)}
    elif variant == "scale":
        kwargs_d = kwargs_t = {"scale": 0.3}
    out_d = dg.scaled_dot_product_attention(q_d, k_d, v_d, **kwargs_d)
    out_t = F.scaled_dot_product_attention(q_t, k_t, v_t, **kwargs_t)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    for a, b in [(q_d, q_t), (k_d, k_t), (v_d, v_t)]:
        close(a.grad, b.grad)


@pytest.mark.parametrize("T,D,causal", [(130, 64, True), (1, 64, True), (77, 40, False), (200, 96, True)])
def test_scaled_dot_product_attention_float32_qkv_views(T, D, causal):
    # float32 runs the register-blocked tile kernels: q, k, v as strided views of one projection (the LLaMA
    # layout), T not a multiple of the 64-row blocks, head dims that fill whole and partial 64-column panels.
    B, H = 2, 3
    qkv = rng.standard_normal((B, T, 3 * H * D)).astype(np.float32)
    grad = rng.standard_normal((B, H, T, D)).astype(np.float32)
    kwargs = {"is_causal": True} if causal else {"attn_mask": dg.tensor(rng.random((T, T)) > 0.3)}
    results = []
    for lib in (dg, torch):
        base = lib.tensor(qkv).requires_grad_(True)
        q, k, v = base.view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
        mask = {} if causal else {"attn_mask": lib.tensor(kwargs["attn_mask"].numpy())}
        out = (dg.scaled_dot_product_attention if lib is dg else F.scaled_dot_product_attention)(
            q, k, v, is_causal=causal, **mask)
        out.backward(lib.tensor(grad))
        results.append((out.detach().numpy(), base.grad.numpy()))
    (out_d, grad_d), (out_t, grad_t) = results
    np.testing.assert_allclose(out_d, out_t, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grad_d, grad_t, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("T,S", [(70, 150), (150, 70), (200, 333), (129, 129)])
def test_scaled_dot_product_attention_float32_causal_blocks(T, S):
    # The float32 kernel stops each causal block's GEMMs at the last key a group of query rows sees (top-left
    # alignment, query i sees keys j <= i, as torch's is_causal): T and S apart, not multiples of the blocks.
    q, k, v, grad = (rng.standard_normal(shape).astype(np.float32)
                     for shape in ((2, 3, T, 32), (2, 3, S, 32), (2, 3, S, 48), (2, 3, T, 48)))
    results = []
    for lib, sdpa in ((dg, dg.scaled_dot_product_attention), (torch, F.scaled_dot_product_attention)):
        leaves = [lib.tensor(a).requires_grad_(True) for a in (q, k, v)]
        out = sdpa(*leaves, is_causal=True)
        out.backward(lib.tensor(grad))
        results.append([out.detach().numpy()] + [x.grad.numpy() for x in leaves])
    for d, t in zip(*results):
        np.testing.assert_allclose(d, t, rtol=1e-4, atol=2e-5)


def test_sdpa_errors():
    q = dg.ones(1, 2, 3, 4)
    with pytest.raises(TypeError, match=r"\[scaled_dot_product_attention\]"):
        dg.scaled_dot_product_attention(q, q, "v")
    # torch's errors: RuntimeError for a dropout probability out of range and for mismatched heads
    with pytest.raises(RuntimeError, match=r"dropout probability has to be between 0 and 1, but got 1.5"):
        dg.scaled_dot_product_attention(q, q, q, dropout_p=1.5)
    with pytest.raises(RuntimeError, match=r"leading \(batch, head\) dims.*need enable_gqa=True"):
        dg.scaled_dot_product_attention(dg.ones(1, 4, 3, 4), dg.ones(1, 2, 3, 4), dg.ones(1, 2, 3, 4))
    with pytest.raises(RuntimeError, match=r"Number of heads in key and value must divide the number of heads"):
        dg.scaled_dot_product_attention(dg.ones(1, 4, 3, 4), dg.ones(1, 3, 3, 4), dg.ones(1, 3, 3, 4), enable_gqa=True)
    with pytest.raises(IndexError, match=r"enable_gqa"):
        dg.scaled_dot_product_attention(dg.ones(3, 4), dg.ones(3, 4), dg.ones(3, 4), enable_gqa=True)
    for lib, sdpa in ((torch, F.scaled_dot_product_attention), (dg, dg.nn.functional.scaled_dot_product_attention)):
        with pytest.raises(RuntimeError):
            sdpa(lib.ones(1, 4, 3, 4), lib.ones(1, 2, 3, 4), lib.ones(1, 2, 3, 4))
        with pytest.raises(RuntimeError):
            sdpa(lib.ones(1, 4, 3, 4), lib.ones(1, 3, 3, 4), lib.ones(1, 3, 3, 4), enable_gqa=True)
        with pytest.raises(IndexError):
            sdpa(lib.ones(3, 4), lib.ones(3, 4), lib.ones(3, 4), enable_gqa=True)


@pytest.mark.parametrize("shape_q,kv_heads,kwargs", [
    ((2, 4, 5, 8), (2, 2), {}),
    ((2, 6, 7, 4), (3, 1), {"is_causal": True}),
    ((1, 4, 3, 4), (1, 4), {"scale": 0.3}),
    ((8, 6, 4), (2, 2), {"mask": True}),
])
def test_sdpa_enable_gqa_matches_torch(shape_q, kv_heads, kwargs):
    # key/value with fewer heads (dim -3) than query: values and the gradients summed back to each kv head.
    *lead, H, T, D = shape_q
    S = T + 1 if not kwargs.get("is_causal") else T
    q_d, q_t = pair(shape_q, True)
    k_d, k_t = pair((*lead, kv_heads[0], S, D), True)
    v_d, v_t = pair((*lead, kv_heads[1], S, D + 1), True)
    kw = dict(kwargs)
    if kw.pop("mask", False):
        m = rng.random((T, S)) > 0.3
        m[:, 0] = True
        kw_d, kw_t = {"attn_mask": dg.tensor(m)}, {"attn_mask": torch.tensor(m)}
    else:
        kw_d = kw_t = kw
    out_d = dg.nn.functional.scaled_dot_product_attention(q_d, k_d, v_d, enable_gqa=True, **kw_d)
    out_t = F.scaled_dot_product_attention(q_t, k_t, v_t, enable_gqa=True, **kw_t)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    for a, b in [(q_d, q_t), (k_d, k_t), (v_d, v_t)]:
        close(a.grad, b.grad)


def composed_attention(lib, q, k, v, keep, p, causal=False):
    """torch's math path with a given keep mask: softmax(q k^T / sqrt(D) + bias) * keep / (1 - p) @ v."""
    scores = q @ k.transpose(-2, -1) * (1.0 / np.sqrt(q.shape[-1]))
    if causal:
        T, S = scores.shape[-2:]
        scores = scores.masked_fill(~lib.tensor(np.tril(np.ones((T, S), dtype=bool))), float("-inf"))
    probabilities = lib.softmax(scores, dim=-1) if lib is dg else torch.softmax(scores, dim=-1)
    return (probabilities * keep / (1.0 - p)) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_dropout_is_the_math_path_with_a_seeded_mask(causal):
    p = 0.3
    q_d, q_t = pair((2, 3, 6, 4), True)
    k_d, k_t = pair((2, 3, 6, 4), True)
    v_d, v_t = pair((2, 3, 6, 5), True)
    dg.manual_seed(123)
    out = dg.nn.functional.scaled_dot_product_attention(q_d, k_d, v_d, dropout_p=p, is_causal=causal)
    dg.manual_seed(123)
    again = dg.nn.functional.scaled_dot_product_attention(q_d, k_d, v_d, dropout_p=p, is_causal=causal)
    np.testing.assert_array_equal(out.detach().numpy(), again.detach().numpy())  # deterministic for a seed
    dg.manual_seed(124)
    other = dg.nn.functional.scaled_dot_product_attention(q_d, k_d, v_d, dropout_p=p, is_causal=causal)
    assert not np.array_equal(out.detach().numpy(), other.detach().numpy())
    # The keep mask the call drew: the same seed, the same draw (the only random op of the call).
    dg.manual_seed(123)
    keep = dg.bernoulli_mask((2, 3, 6, 6), 1.0 - p, dtype=dg.float64)
    expected = composed_attention(torch, q_t, k_t, v_t, torch.tensor(keep.numpy()), p, causal)
    close(out, expected)
    backward_both(out, expected)
    for a, b in [(q_d, q_t), (k_d, k_t), (v_d, v_t)]:
        close(a.grad, b.grad)


def test_sdpa_dropout_moments():
    # Uniform attention (q = 0) over S keys and v = 1: each output is (#kept / S) / (1 - p), with mean 1 and
    # variance p / ((1 - p) S). 4096 rows: the sample mean is within 5 standard errors of 1.
    p, S, rows = 0.25, 16, 64 * 64
    q = dg.zeros(64, 64, 1, 4, dtype=dg.float64)
    k = dg.tensor(rng.standard_normal((64, 64, S, 4)))
    v = dg.ones(64, 64, S, 1, dtype=dg.float64)
    dg.manual_seed(7)
    out = dg.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=p).numpy().ravel()
    variance = p / ((1 - p) * S)
    assert abs(out.mean() - 1.0) < 5 * np.sqrt(variance / rows)
    assert abs(out.var() / variance - 1.0) < 0.15
    assert np.allclose(out * (1 - p) * S, np.round(out * (1 - p) * S))  # whole counts of kept keys
    zeros = dg.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    assert not zeros.numpy().any()


def test_adamw_step_matches_torch():
    shapes = [(4, 3), (5,)]
    params_t = [torch.tensor(rng.standard_normal(s)) for s in shapes]
    params_d = [dg.tensor(p.numpy().copy()) for p in params_t]
    exp_avgs = [dg.zeros(*s, dtype=dg.float64) for s in shapes]
    exp_avg_sqs = [dg.zeros(*s, dtype=dg.float64) for s in shapes]
    steps = [dg.tensor(0.0) for _ in shapes]
    params_t = [torch.nn.Parameter(p) for p in params_t]
    opt = torch.optim.AdamW(params_t, lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, foreach=False)
    for step in (1, 2, 3):
        grads = [rng.standard_normal(s) for s in shapes]
        for p, g in zip(params_t, grads):
            p.grad = torch.tensor(g)
        opt.step()
        assert dg.adamw_step(params_d, [dg.tensor(g) for g in grads], exp_avgs, exp_avg_sqs, steps, lr=1e-2,
                             beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1) is None
        assert [s.item() for s in steps] == [float(step)] * len(shapes)  # counted inside the Task
    for d, t in zip(params_d, params_t):
        close(d, t, rtol=1e-10)
    for d, t in zip(exp_avgs, params_t):
        close(d, opt.state[t]["exp_avg"], rtol=1e-10)
    with pytest.raises(TypeError, match=r"\[adamw_step\]"):
        dg.adamw_step(params_d[0], [], [], [], [])
    with pytest.raises(TypeError, match=r"\[adamw_step\]"):
        dg.adamw_step([1.0], [], [], [], [])
    with pytest.raises(TypeError, match=r"\[adamw_step\] state_steps\[0\] must be a 0-d float32"):
        dg.adamw_step(params_d[:1], [dg.zeros(4, 3, dtype=dg.float64)], exp_avgs[:1], exp_avg_sqs[:1],
                      [dg.tensor(0.0, dtype=dg.float64)])



def test_sgd_step_matches_torch_and_checks_its_arguments():
    """The binding with numbers (the optimizer passes tensors: test_optim_rebind.py): three steps with momentum and
    nesterov, the first storing d_p in the buffers (their flags false), then the momentum update; torch's values in
    float64. Then the argument errors, each naming the op."""
    shapes = [(4, 3), (5,)]
    params_t = [torch.nn.Parameter(torch.tensor(rng.standard_normal(s))) for s in shapes]
    params_d = [dg.tensor(p.detach().numpy().copy()) for p in params_t]
    buffers = [dg.zeros(*s, dtype=dg.float64) for s in shapes]
    initialized = [dg.tensor(False) for _ in shapes]
    opt = torch.optim.SGD(params_t, lr=0.1, momentum=0.9, weight_decay=0.05, nesterov=True, maximize=True)
    for _ in range(3):
        grads = [rng.standard_normal(s) for s in shapes]
        for p, g in zip(params_t, grads):
            p.grad = torch.tensor(g)
        opt.step()
        assert dg.sgd_step(params_d, [dg.tensor(g) for g in grads], buffers, initialized, lr=0.1, momentum=0.9,
                           weight_decay=0.05, nesterov=True, maximize=True) is None
        assert [f.item() for f in initialized] == [True, True]  # set by the Task
    for d, t in zip(params_d, params_t):
        close(d, t, rtol=1e-12)
    for d, t in zip(buffers, params_t):
        close(d, opt.state[t]["momentum_buffer"], rtol=1e-12)
    g = [dg.zeros(4, 3, dtype=dg.float64)]
    with pytest.raises(TypeError, match=r"\[sgd_step\]"):
        dg.sgd_step(params_d[0], [])
    with pytest.raises(ValueError, match=r"\[sgd_step\] momentum 0.9 with 0 momentum_buffers"):
        dg.sgd_step(params_d[:1], g, momentum=0.9)
    with pytest.raises(ValueError, match=r"\[sgd_step\] Nesterov momentum requires a momentum and zero dampening"):
        dg.sgd_step(params_d[:1], g, buffers[:1], initialized[:1], momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(TypeError, match=r"\[sgd_step\] momentum_initialized\[0\] must be a 0-d bool"):
        dg.sgd_step(params_d[:1], g, buffers[:1], [dg.tensor(0.0)], momentum=0.9)
    with pytest.raises(TypeError, match=r"\[sgd_step\] param 0 is float64 but its grad or momentum buffer is float32"):
        dg.sgd_step(params_d[:1], [dg.zeros(4, 3)])
    with pytest.raises(ValueError, match=r"\[sgd_step\] hyper must be a contiguous float64 tensor of shape \[3\]"):
        dg.sgd_step(params_d[:1], g, lr=dg.tensor(0.1), hyper=dg.zeros(4, dtype=dg.float64))
    with pytest.raises(ValueError, match=r"\[sgd_step\] param 0 of shape \(3, 4\) is not contiguous"):
        dg.sgd_step([dg.zeros(4, 3, dtype=dg.float64).t()], [dg.zeros(3, 4, dtype=dg.float64)])

def test_set_memory_category():
    before = dg.memory_stats()
    t = dg.zeros(1024)
    dg._C._set_memory_category(t, "parameter")
    dg._C._set_memory_category(t, "optimizer_state")
    with pytest.raises(ValueError, match="_set_memory_category"):
        dg._C._set_memory_category(t, "weights")
    assert isinstance(before, dict)
