"""Join/split/index bindings against torch: cat, stack, split, chunk, index_select, gather, scatter_add,
index_add, tril, triu (values, gradients, errors)."""
import numpy as np
import pytest
import torch

import dygrad as dg
from peer import assert_matches, tensors_from

rng = np.random.default_rng(2)


def pair(shape, requires_grad=False, transposed=False):
    return tensors_from(rng.standard_normal(shape[::-1] if transposed else shape), requires_grad, transposed)


def close(d, t):
    assert_matches(d, t, rtol=1e-7, atol=1e-12)


def backward_both(out_d, out_t):
    w = rng.standard_normal(tuple(out_t.shape))
    out_d.backward(dg.tensor(w))
    out_t.backward(torch.tensor(w))


def test_cat_stack():
    a_d, a_t = pair((2, 3), requires_grad=True, transposed=True)
    b_d, b_t = pair((4, 3), requires_grad=True)
    out_d, out_t = dg.cat([a_d, b_d]), torch.cat([a_t, b_t])
    close(out_d, out_t)
    close(dg.cat((a_d, a_d), dim=1), torch.cat((a_t, a_t), dim=1))
    close(dg.concat([a_d, b_d], 0), torch.concat([a_t, b_t], 0))
    backward_both(out_d, out_t)
    close(a_d.grad, a_t.grad)
    close(b_d.grad, b_t.grad)
    s_d, s_t = dg.stack([a_d, a_d * 2], dim=-1), torch.stack([a_t, a_t * 2], dim=-1)
    close(s_d, s_t)
    close(dg.stack([a_d, a_d], 1), torch.stack([a_t, a_t], 1))
    with pytest.raises(TypeError, match=r"\[cat\]"):
        dg.cat(a_d)
    with pytest.raises(TypeError, match=r"\[stack\]"):
        dg.stack([a_d, 1.0])
    with pytest.raises(ValueError, match=r"\[cat\]|\[stack\]"):
        dg.stack([a_d, b_d])


def test_split_chunk():
    x_d, x_t = pair((7, 4), requires_grad=True)
    for parts_d, parts_t in [(dg.split(x_d, 3), torch.split(x_t, 3)), (x_d.split([2, 5]), x_t.split([2, 5])),
                             (x_d.split(3, dim=1), x_t.split(3, dim=1)), (x_d.chunk(3), x_t.chunk(3)),
                             (dg.chunk(x_d, 2, 1), torch.chunk(x_t, 2, 1))]:
        assert isinstance(parts_d, tuple) and len(parts_d) == len(parts_t)
        for p_d, p_t in zip(parts_d, parts_t):
            close(p_d, p_t)
    a, b = x_d.split([2, 5])
    (a.sum() + 2 * b.sum()).backward()
    a_t, b_t = x_t.split([2, 5])
    (a_t.sum() + 2 * b_t.sum()).backward()
    close(x_d.grad, x_t.grad)
    with pytest.raises(TypeError, match=r"\[split\]"):
        x_d.split("2")


def test_index_select_gather():
    x_d, x_t = pair((5, 4), requires_grad=True, transposed=True)
    idx = np.array([4, 0, 0, 2])
    out_d, out_t = dg.index_select(x_d, 0, dg.tensor(idx)), torch.index_select(x_t, 0, torch.tensor(idx))
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    g = rng.integers(0, 4, size=(5, 3))
    y_d, y_t = pair((5, 4), requires_grad=True)
    out_d, out_t = y_d.gather(1, dg.tensor(g)), y_t.gather(1, torch.tensor(g))
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(y_d.grad, y_t.grad)
    with pytest.raises(TypeError, match=r"\[gather\]"):
        y_d.gather(1, g)


def test_scatter_add_index_add():
    base_d, base_t = pair((3, 5), requires_grad=True)
    src_d, src_t = pair((3, 4), requires_grad=True)
    idx = rng.integers(0, 5, size=(3, 4))
    out_d = dg.scatter_add(base_d, 1, dg.tensor(idx), src_d)
    out_t = torch.scatter_add(base_t, 1, torch.tensor(idx), src_t)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(base_d.grad, base_t.grad)
    close(src_d.grad, src_t.grad)
    z_d, z_t = dg.zeros(3, 5, dtype=dg.float64), torch.zeros(3, 5, dtype=torch.float64)
    assert z_d.scatter_add_(1, dg.tensor(idx), src_d.detach()) is z_d
    close(z_d, z_t.scatter_add_(1, torch.tensor(idx), src_t.detach()))
    rows = np.array([2, 0, 2])
    s_d, s_t = pair((3, 5), requires_grad=True)
    out_d = base_d.index_add(0, dg.tensor(rows), s_d, alpha=2.0)
    out_t = base_t.index_add(0, torch.tensor(rows), s_t, alpha=2.0)
    close(out_d, out_t)
    close(dg.index_add(base_d, 0, dg.tensor(rows), s_d), torch.index_add(base_t, 0, torch.tensor(rows), s_t))
    backward_both(out_d, out_t)
    close(s_d.grad, s_t.grad)


def test_tril_triu():
    x_d, x_t = pair((2, 4, 5), requires_grad=True)
    for k in (-1, 0, 2):
        close(dg.tril(x_d, k), torch.tril(x_t, k))
        close(x_d.triu(diagonal=k), x_t.triu(diagonal=k))
    out_d, out_t = x_d.tril() + x_d.triu(1) * 3, x_t.tril() + x_t.triu(1) * 3
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    close(dg.tril(dg.ones(3, 3, dtype=dg.bool)), torch.tril(torch.ones(3, 3, dtype=torch.bool)))
