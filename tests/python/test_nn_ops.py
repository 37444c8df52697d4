"""nn-level bindings against torch: softmax, log_softmax, embedding, cross_entropy (values, grads, errors)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dygrad as dg
from peer import assert_matches, tensors_from

rng = np.random.default_rng(3)


def pair(shape, requires_grad=False, transposed=False, dtype=np.float64):
    a = rng.standard_normal(shape[::-1] if transposed else shape).astype(dtype)
    return tensors_from(a, requires_grad, transposed)


def close(d, t, rtol=1e-7, atol=1e-12):
    assert_matches(d, t, rtol, atol)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax(name, dim):
    x_d, x_t = pair((4, 6), requires_grad=True, transposed=True)
    out_d, out_t = getattr(dg, name)(x_d, dim), getattr(torch, name)(x_t, dim)
    close(out_d, out_t)
    close(getattr(x_d, name)(dim=dim), out_t)
    w = rng.standard_normal((4, 6))
    out_d.backward(dg.tensor(w))
    out_t.backward(torch.tensor(w))
    close(x_d.grad, x_t.grad)
    f_d, f_t = pair((3, 5), dtype=np.float32)
    close(getattr(dg, name)(f_d, 1, dtype=dg.float64), getattr(torch, name)(f_t, 1, dtype=torch.float64))
    close(getattr(dg, name)(f_d, 1), getattr(torch, name)(f_t, 1), rtol=1e-5, atol=1e-6)


def test_softmax_errors():
    with pytest.raises(TypeError, match=r"\[softmax\]"):
        dg.softmax(dg.ones(3))
    with pytest.raises(IndexError, match=r"\[softmax\]"):
        dg.softmax(dg.ones(3), 1)


def test_embedding():
    w_d, w_t = pair((10, 4), requires_grad=True)
    idx = rng.integers(0, 10, size=(3, 5))
    out_d, out_t = dg.embedding(w_d, dg.tensor(idx)), torch.embedding(w_t, torch.tensor(idx))
    close(out_d, out_t)
    g = rng.standard_normal((3, 5, 4))
    out_d.backward(dg.tensor(g))
    out_t.backward(torch.tensor(g))
    close(w_d.grad, w_t.grad)
    with pytest.raises(TypeError, match=r"\[embedding\]"):
        dg.embedding(w_d, idx)


@pytest.mark.parametrize("padding_idx", [2, -1])
def test_embedding_padding_idx(padding_idx):
    w_d, w_t = pair((6, 3), requires_grad=True)
    idx = np.array([[0, 2, 5], [2, 1, 5]])
    out_d = dg.embedding(w_d, dg.tensor(idx), padding_idx)
    out_t = F.embedding(torch.tensor(idx), w_t, padding_idx=padding_idx)
    close(out_d, out_t)
    g = rng.standard_normal((2, 3, 3))
    out_d.backward(dg.tensor(g))
    out_t.backward(torch.tensor(g))
    close(w_d.grad, w_t.grad)
    with pytest.raises(IndexError, match=r"\[embedding\]"):
        dg.embedding(w_d, dg.tensor(idx), 6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(reduction):
    x_d, x_t = pair((6, 5), requires_grad=True)
    target = rng.integers(0, 5, size=(6,))
    target[2] = -100
    out_d = dg.cross_entropy(x_d, dg.tensor(target), reduction=reduction)
    out_t = F.cross_entropy(x_t, torch.tensor(target), reduction=reduction)
    close(out_d, out_t)
    out_d.sum().backward()
    out_t.sum().backward()
    close(x_d.grad, x_t.grad)


def test_cross_entropy_spatial_and_ignore_index():
    x_d, x_t = pair((2, 4, 3), requires_grad=True)
    target = rng.integers(0, 4, size=(2, 3))
    out_d = dg.cross_entropy(x_d, dg.tensor(target), ignore_index=1)
    out_t = F.cross_entropy(x_t, torch.tensor(target), ignore_index=1)
    close(out_d, out_t)
    out_d.backward()
    out_t.backward()
    close(x_d.grad, x_t.grad)
    with pytest.raises(ValueError, match=r"\[cross_entropy\]"):
        dg.cross_entropy(x_d, dg.tensor(target), reduction="avg")
    with pytest.raises(TypeError, match=r"\[cross_entropy\]"):
        dg.cross_entropy(x_d, dg.tensor(target), reduction=1)
    with pytest.raises(TypeError, match=r"\[cross_entropy\]"):
        dg.cross_entropy(x_d, dg.tensor(target.astype(np.int32)))


@pytest.mark.parametrize("layout", ["rows", "transposed", "spatial"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_many_rows_against_float64_and_thread_counts(layout, weighted, reduction):
    # More rows than one partial sum (nll_loss sums runs of 4096 rows, merged in order), some ignored, in each
    # layout the kernel reads: the float64 reference within float32 rounding, and bitwise the same at 1 and 2
    # threads (the partials' order is fixed by the row count alone).
    n, c = 9000, 7
    logp = rng.standard_normal((n, c)).astype(np.float32)
    target = rng.integers(0, c, size=n)
    target[::13] = 3  # ignore_index below
    weight = rng.uniform(0.5, 2.0, size=c).astype(np.float32) if weighted else None
    x = dg.tensor(logp)
    if layout == "transposed":
        x = dg.tensor(np.ascontiguousarray(logp.T)).t()
    elif layout == "spatial":  # [N', C, d]: rows are (n', d) pairs with the class dim in the middle
        x = dg.tensor(np.ascontiguousarray(logp.reshape(n // 3, 3, c).transpose(0, 2, 1)))
    tgt = dg.tensor(target.reshape(n // 3, 3) if layout == "spatial" else target)
    w = dg.tensor(weight) if weighted else None
    keep = target != 3
    wt = (weight[target] if weighted else np.ones(n)).astype(np.float64) * keep
    rows = -wt * logp.astype(np.float64)[np.arange(n), target]
    ref = {"none": rows, "sum": rows.sum(), "mean": rows.sum() / wt.sum()}[reduction]
    results = []
    for threads in (1, 2):
        before = dg.get_num_threads()
        dg.set_num_threads(threads)
        try:
            results.append(dg.nn.functional.nll_loss(x, tgt, weight=w, ignore_index=3, reduction=reduction).numpy())
        finally:
            dg.set_num_threads(before)
    assert np.array_equal(results[0], results[1])
    got = results[0].reshape(-1) if reduction == "none" else results[0]
    # Each row is one float32 product (half an ulp of the row); the sums add the rows in float64 (exact enough) and
    # round once to float32 (half an ulp of the result): |error| <= 2^-24 (sum |row| [/ sum w] + |result|).
    scale = np.abs(rows) if reduction == "none" else np.abs(rows).sum() / (wt.sum() if reduction == "mean" else 1)
    bound = 2.0 ** -24 * (scale + np.abs(ref))
    assert np.all(np.abs(got.astype(np.float64) - np.reshape(ref, np.shape(got))) <= np.reshape(bound, np.shape(got)))
    with pytest.raises(IndexError, match=r"\[nll_loss\] Target 7 is out of bounds"):
        bad = target.copy()
        bad[5000] = c
        dg.nn.functional.nll_loss(x, dg.tensor(bad.reshape(n // 3, 3) if layout == "spatial" else bad),
                                  weight=w, ignore_index=3, reduction=reduction).numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("T", [5, 37])
def test_composed_causal_attention_matches_torch(dtype, T):
    # The unfused LLaMA attention: q, k, v unbound from a permuted view of one qkv tensor, scores masked with
    # a broadcast [T, T] causal mask (-inf), softmax over the last dim, a row fully masked by an extra mask
    # (NaN, as torch); values and the qkv gradient (cat of the three gradients into the permuted layout).
    B, H, D = 2, 3, 4
    qkv_np = rng.standard_normal((B, T, 3 * H * D)).astype(dtype)
    mask_np = np.triu(np.ones((T, T), dtype=bool), 1)
    w_np = rng.standard_normal((B, H, T, D)).astype(dtype)
    outs = []
    for lib, qkv in ((dg, dg.tensor(qkv_np)), (torch, torch.tensor(qkv_np))):
        qkv.requires_grad_(True)
        q, k, v = qkv.view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / np.sqrt(D)
        att = att.masked_fill(lib.tensor(mask_np), float("-inf")).softmax(-1)
        log_att = (q @ k.transpose(-1, -2)).masked_fill(lib.tensor(mask_np), float("-inf")).log_softmax(-1)
        y = att @ v
        (y * lib.tensor(w_np)).sum().backward()
        full = lib.tensor(np.ones((T, T), dtype=bool))
        nan_rows = (q @ k.transpose(-1, -2)).masked_fill(full, float("-inf")).softmax(-1)
        outs.append((att, log_att, y, qkv.grad, nan_rows))
    rtol, atol = (2e-5, 2e-6) if dtype == np.float32 else (1e-10, 1e-12)
    for d, t in zip(outs[0], outs[1]):
        close(d, t, rtol, atol)
