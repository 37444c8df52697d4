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
