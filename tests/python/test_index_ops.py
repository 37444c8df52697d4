"""Join/split/index bindings against torch: cat, stack, split, chunk, unbind, index_select, gather, scatter_add,
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


def test_unbind_values_and_gradients():
    # Non-contiguous input, negative dims; the pieces are views of it.
    leaf_d, leaf_t = pair((4, 3, 5), requires_grad=True)
    x_d, x_t = leaf_d.permute(2, 0, 1), leaf_t.permute(2, 0, 1)  # (5, 4, 3), non-contiguous
    for dim in (0, 1, -1, -3):
        parts_d, parts_t = x_d.unbind(dim), x_t.unbind(dim)
        assert isinstance(parts_d, tuple) and len(parts_d) == len(parts_t)
        for p_d, p_t in zip(parts_d, parts_t):
            close(p_d, p_t)
    parts_d, parts_t = dg.unbind(x_d, -2), torch.unbind(x_t, -2)
    w = [rng.standard_normal(tuple(p.shape)) for p in parts_t]
    # Pieces 1 and 3 get no gradient: their part of the input's gradient is zero.
    loss_d = (parts_d[0] * dg.tensor(w[0])).sum() + (parts_d[2] * dg.tensor(w[2])).sum()
    loss_t = (parts_t[0] * torch.tensor(w[0])).sum() + (parts_t[2] * torch.tensor(w[2])).sum()
    loss_d.backward()
    loss_t.backward()
    close(leaf_d.grad, leaf_t.grad)
    assert dg.unbind(dg.zeros(0, 3)) == ()
    with pytest.raises(IndexError, match=r"\[unbind\]"):
        dg.zeros(2, 3).unbind(2)


def test_unbind_iter_split_chunk_gradients_match_torch():
    base_d, base_t = pair((2, 6, 3, 4), requires_grad=True)
    # The LLaMA split of a fused qkv projection: iterate a permuted view.
    q_d, k_d, v_d = base_d.view(2, 6, 3, 2, 2).permute(2, 0, 3, 1, 4)
    q_t, k_t, v_t = base_t.view(2, 6, 3, 2, 2).permute(2, 0, 3, 1, 4)
    ((q_d * k_d).sum() + (v_d * v_d).sum()).backward()
    ((q_t * k_t).sum() + (v_t * v_t).sum()).backward()
    close(base_d.grad, base_t.grad)
    # split / chunk with a piece left unused, on a non-contiguous input.
    x_d, x_t = pair((7, 5), requires_grad=True, transposed=True)
    a_d, _, c_d = x_d.split([2, 1, 4])
    a_t, _, c_t = x_t.split([2, 1, 4])
    (a_d.sum() * 3 + (c_d * c_d).sum()).backward()
    (a_t.sum() * 3 + (c_t * c_t).sum()).backward()
    close(x_d.grad, x_t.grad)
    y_d, y_t = pair((3, 8), requires_grad=True)
    parts_d, parts_t = y_d.chunk(3, dim=-1), y_t.chunk(3, dim=-1)
    backward_both(parts_d[1], parts_t[1])
    close(y_d.grad, y_t.grad)


def test_unbind_finite_differences():
    x = rng.standard_normal((3, 2, 4))
    w = rng.standard_normal((3, 4))

    def f(values):
        parts = dg.tensor(values).unbind(1)
        return float(((parts[0] * dg.tensor(w)).sum() * 0.5 + (parts[0] * parts[0]).sum()).item())

    x_d = dg.tensor(x).requires_grad_(True)
    parts = x_d.unbind(1)
    ((parts[0] * dg.tensor(w)).sum() * 0.5 + (parts[0] * parts[0]).sum()).backward()
    numeric = np.zeros_like(x)
    eps = 1e-6
    for index in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[index] += eps
        minus[index] -= eps
        numeric[index] = (f(plus) - f(minus)) / (2 * eps)
    np.testing.assert_allclose(x_d.grad.numpy(), numeric, rtol=1e-6, atol=1e-8)


def test_unbind_backward_is_one_task():
    # One node for all the views: its backward is a single cat Task, whatever the number of pieces.
    base = dg.randn(4, 3, 8, 5, requires_grad=True)
    pieces = base.permute(1, 0, 2, 3).unbind(0)
    grads = [dg.randn(*p.shape) for p in pieces]
    dg.synchronize()
    with dg.profiler.profile() as prof:
        dg.autograd.grad(pieces, [base], grads)
        dg.synchronize()
    counts = {row.name: row.count for row in prof.key_averages()}
    assert counts.get("cat") == 1, counts
    assert "fill" not in counts and "add" not in counts, counts
    # The gradient is laid out like the input: through view + permute (LLaMA's qkv split) it reaches the
    # projection's output without a copy.
    x = dg.randn(2, 6, 12, requires_grad=True)
    qkv = x * 2  # a non-leaf, as the projection's output is (a leaf's .grad would be a copy of any view)
    q, k, v = qkv.view(2, 6, 3, 2, 2).permute(2, 0, 3, 1, 4)
    grads = [dg.randn(*q.shape) for _ in range(3)]
    loss = (q * grads[0]).sum() + (k * grads[1]).sum() + (v * grads[2]).sum()
    dg.synchronize()
    with dg.profiler.profile() as prof:
        loss.backward()
        dg.synchronize()
    counts = {row.name: row.count for row in prof.key_averages()}
    assert counts.get("cat") == 1 and "copy" not in counts, counts  # fill: the root's ones
    grad_qkv = x.grad / 2
    expected = torch.stack([torch.tensor(g.numpy()) for g in grads]).permute(1, 3, 0, 2, 4).reshape(2, 6, 12)
    np.testing.assert_array_equal(grad_qkv.numpy(), expected.numpy())


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


# --- scatter, scatter_, index_add_, repeat, repeat_interleave (issue 13) ------------------------------------------
def index_pair(values):
    return dg.tensor(values, dtype=dg.int64), torch.tensor(values, dtype=torch.int64)


def test_scatter_src_and_value_against_torch():
    # distinct indices along dim 0 per column: the derivative is well defined
    i_d, i_t = index_pair([[0, 2, 1], [3, 0, 2]])
    x_d, x_t = pair((4, 3), requires_grad=True, transposed=True)
    s_d, s_t = pair((2, 3), requires_grad=True)
    out_d, out_t = dg.scatter(x_d, 0, i_d, s_d), torch.scatter(x_t, 0, i_t, s_t)
    close(out_d, out_t)
    close(x_d.scatter(0, i_d, src=s_d), x_t.scatter(0, i_t, src=s_t))
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)  # zero where scatter wrote
    close(s_d.grad, s_t.grad)  # g gathered at the index
    j_d, j_t = index_pair([[2, 0], [1, 2]])
    close(dg.scatter(x_d, 1, j_d, 2.5), torch.scatter(x_t, 1, j_t, 2.5))
    close(dg.scatter(x_d, 0, i_d, value=-1.0), torch.scatter(x_t, 0, i_t, value=-1.0))
    x_d.grad = None
    x_t.grad = None
    out_d, out_t = dg.scatter(x_d, 0, i_d, 2.0), torch.scatter(x_t, 0, i_t, 2.0)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    # an integer tensor takes a float value truncated, as torch
    assert dg.scatter(dg.zeros(3, dtype=dg.int64), 0, dg.tensor([1]), 2.7).tolist() == [0, 2, 0]


def test_scatter_src_larger_than_index_gets_zero_gradient():
    # torch 2.13's own backward fails here ("ScatterBackward0 returned an invalid gradient"): dygrad gives g
    # gathered at the index and zero where src was not read, which is the derivative.
    x = dg.zeros(3, 4, requires_grad=True)
    src = dg.tensor(np.arange(12.0).reshape(3, 4), dtype=dg.float32, requires_grad=True)
    index = dg.tensor([[2, 0], [1, 2]])
    out = dg.scatter(x, 0, index, src)
    expected = np.zeros((3, 4))
    expected[2, 0], expected[0, 1], expected[1, 0], expected[2, 1] = 0, 1, 4, 5
    assert np.array_equal(out.detach().numpy(), expected)
    w = rng.standard_normal((3, 4))
    out.backward(dg.tensor(w, dtype=dg.float32))
    want = np.zeros((3, 4))
    want[:2, :2] = [[w[2, 0], w[0, 1]], [w[1, 0], w[2, 1]]]
    np.testing.assert_allclose(src.grad.numpy(), want, rtol=1e-6)


def test_scatter_reduce_and_inplace():
    i_d, i_t = index_pair([[0, 1, 0], [0, 0, 2]])  # repeats: accumulates
    x_np = rng.standard_normal((3, 3))
    s_np = rng.standard_normal((2, 3))
    for reduce in ("add", "multiply"):
        d = dg.scatter(dg.tensor(x_np), 0, i_d, dg.tensor(s_np), reduce=reduce)
        t = torch.scatter(torch.tensor(x_np), 0, i_t, torch.tensor(s_np), reduce=reduce)
        close(d, t)
        close(dg.scatter(dg.tensor(x_np), 0, i_d, 1.5, reduce=reduce), torch.scatter(torch.tensor(x_np), 0, i_t, 1.5, reduce=reduce))
        a_d, a_t = dg.tensor(x_np), torch.tensor(x_np)
        assert a_d.scatter_(0, i_d, dg.tensor(s_np), reduce=reduce) is a_d
        a_t.scatter_(0, i_t, torch.tensor(s_np), reduce=reduce)
        close(a_d, a_t)
    # scatter_ keeps autograd: the gradient of the overwritten positions is zero
    leaf_d, leaf_t = pair((3, 3), requires_grad=True)
    s_d, s_t = pair((1, 3), requires_grad=True)
    y_d, y_t = leaf_d * 2, leaf_t * 2
    y_d.scatter_(0, i_d[:1], s_d)
    y_t.scatter_(0, i_t[:1], s_t)
    close(y_d, y_t)
    backward_both(y_d, y_t)
    close(leaf_d.grad, leaf_t.grad)
    close(s_d.grad, s_t.grad)
    # reduce='multiply' has no derivative (as torch)
    p = dg.ones(3, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"\[scatter\].*multiply"):
        dg.scatter(p, 0, i_d, dg.ones(2, 3), reduce="multiply").sum().backward()


def test_scatter_errors():
    x = dg.zeros(3, 5)
    with pytest.raises(RuntimeError, match=r"\[scatter\] reduce argument must be either add or multiply"):
        dg.scatter(x, 0, dg.tensor([[0]]), 1.0, reduce="mean")
    with pytest.raises(RuntimeError, match=r"\[scatter\] index 5 is out of bounds for dimension 0 with size 3"):
        dg.scatter(x, 0, dg.tensor([[5]]), dg.ones(1, 1)).tolist()
    with pytest.raises(RuntimeError, match=r"\[scatter\] index -1 is out of bounds"):
        dg.scatter(x, 1, dg.tensor([[-1]]), 0.5).tolist()
    with pytest.raises(RuntimeError, match=r"\[scatter\] expected self.dtype to be equal to src.dtype"):
        dg.scatter(x, 0, dg.tensor([[0]]), dg.ones(1, 1, dtype=dg.float64))
    with pytest.raises(RuntimeError, match=r"\[scatter\].*exceeds"):
        dg.scatter(x, 0, dg.tensor([[0, 1]]), dg.ones(1, 1))
    with pytest.raises(TypeError, match=r"\[scatter\].*index must be int64"):
        dg.scatter(x, 0, dg.tensor([[0.0]]), 1.0)
    with pytest.raises(TypeError, match=r"\[scatter\]"):
        dg.scatter(x, 0, dg.tensor([[0]]), "a")
    with pytest.raises(TypeError, match=r"\[scatter\]"):
        dg.scatter(x, 0, dg.tensor([[0]]))
    with pytest.raises(RuntimeError, match=r"\[scatter_\] a leaf Variable"):
        dg.zeros(3, requires_grad=True).scatter_(0, dg.tensor([0]), 1.0)


def test_index_add_method_and_inplace():
    x_d, x_t = pair((4, 3))
    s_d, s_t = pair((5, 3), requires_grad=True)
    i_d, i_t = index_pair([0, 3, 0, 1, 3])
    close(x_d.index_add(0, i_d, s_d, alpha=2), x_t.index_add(0, i_t, s_t, alpha=2))
    base_d, base_t = pair((4, 3), requires_grad=True)
    y_d, y_t = base_d * 1, base_t * 1
    assert y_d.index_add_(0, i_d, s_d, alpha=-1.5) is y_d
    y_t.index_add_(0, i_t, s_t, alpha=-1.5)
    close(y_d, y_t)
    backward_both(y_d, y_t)
    close(base_d.grad, base_t.grad)
    close(s_d.grad, s_t.grad)
    with pytest.raises(RuntimeError, match=r"\[index_add_\] a leaf Variable"):
        base_d.index_add_(0, i_d, s_d)
    with pytest.raises(RuntimeError, match=r"\[index_add_\] source of shape"):
        x_d.index_add_(0, i_d, dg.ones(2, 3, dtype=dg.float64))


def test_repeat_against_torch():
    x_d, x_t = pair((2, 3), requires_grad=True, transposed=True)
    for sizes in [(2, 1), (1, 1), (2, 3, 2), ((3, 1),), (dg.Size([1, 2]),)]:
        t_sizes = tuple(torch.Size(s) if isinstance(s, dg.Size) else s for s in sizes)
        out_d, out_t = x_d.repeat(*sizes), x_t.repeat(*t_sizes)
        close(out_d, out_t)
        assert out_d.is_contiguous()
    out_d, out_t = x_d.repeat(2, 1, 3), x_t.repeat(2, 1, 3)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    copy = x_d.repeat(1, 1)  # a copy, not a view
    assert copy.data_ptr() != x_d.data_ptr()
    with pytest.raises(RuntimeError, match=r"\[repeat\] number of dimensions of repeat dims"):
        x_d.repeat(2)
    with pytest.raises(RuntimeError, match=r"\[repeat\] repeats must be non-negative"):
        x_d.repeat(-1, 2)
    assert x_d.repeat(0, 2).shape == (0, 6)


def test_repeat_interleave_against_torch():
    x_d, x_t = pair((2, 3), requires_grad=True)
    close(dg.repeat_interleave(x_d, 2), torch.repeat_interleave(x_t, 2))
    close(x_d.repeat_interleave(3, dim=1), x_t.repeat_interleave(3, dim=1))
    close(x_d.repeat_interleave(dg.tensor([2]), dim=-1), x_t.repeat_interleave(torch.tensor([2]), dim=-1))
    r_d, r_t = dg.tensor([1, 0, 2]), torch.tensor([1, 0, 2])
    out_d, out_t = dg.repeat_interleave(x_d, r_d, dim=1, output_size=3), torch.repeat_interleave(x_t, r_t, dim=1, output_size=3)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    out_d, out_t = x_d.repeat_interleave(2, dim=0), x_t.repeat_interleave(2, dim=0)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    ix = dg.repeat_interleave(dg.tensor([1, 2], dtype=dg.int32))
    assert ix.dtype == dg.int32 and ix.tolist() == torch.repeat_interleave(torch.tensor([1, 2], dtype=torch.int32)).tolist()
    assert dg.repeat_interleave(dg.tensor(3.0), 2).tolist() == [3.0, 3.0]
    with pytest.raises(RuntimeError, match=r"\[repeat_interleave\] repeats must have the same size as input along dim"):
        dg.repeat_interleave(x_d, dg.tensor([1, 2, 3]), dim=0)
    with pytest.raises(RuntimeError, match=r"\[repeat_interleave\] repeats can not be negative"):
        dg.repeat_interleave(x_d, dg.tensor([1, -2]), dim=0)
    with pytest.raises(RuntimeError, match=r"\[repeat_interleave\] repeats must be non-negative"):
        dg.repeat_interleave(x_d, -1)
    # With output_size the counts are not read on the host: a wrong size is the Task's error, raised at the next
    # sync point (torch, which reads them, raises at the call; docs/pytorch-api.md).
    with pytest.raises(RuntimeError, match=r"\[repeat_interleave\] output_size=5"):
        dg.repeat_interleave(x_d, dg.tensor([1, 2]), dim=0, output_size=5).tolist()
    with pytest.raises(RuntimeError, match=r"\[repeat_interleave\] repeats can not be negative"):
        dg.repeat_interleave(dg.tensor([1, -2]), output_size=1).tolist()
    with pytest.raises(RuntimeError, match=r"\[repeat_interleave\] repeats must be 0-dim or 1-dim"):
        dg.repeat_interleave(x_d, dg.tensor([[1, 2]]), dim=0)
    with pytest.raises(NotImplementedError, match=r"\[repeat_interleave\] repeats must be an integral tensor"):
        dg.repeat_interleave(x_d, dg.tensor([1.0, 2.0]), dim=0)
    with pytest.raises(IndexError):
        dg.repeat_interleave(x_d, 2, dim=5)


def test_out_of_range_index_error_kinds_match_torch():
    # torch: IndexError for index_select, RuntimeError for gather, scatter_add and index_add (deferred here:
    # raised at the next sync, naming the op)
    x = dg.zeros(3, 3)
    bad = dg.tensor([[5]])
    with pytest.raises(RuntimeError, match=r"\[gather\] index 5 is out of bounds for dimension 0 with size 3"):
        dg.gather(x, 0, bad).tolist()
    with pytest.raises(RuntimeError, match=r"\[scatter_add\] index 5 is out of bounds"):
        dg.scatter_add(x, 0, bad, dg.ones(1, 1)).tolist()
    with pytest.raises(RuntimeError, match=r"\[index_add\] index 5 is out of bounds"):
        x.index_add(0, dg.tensor([5]), dg.ones(1, 3)).tolist()
    with pytest.raises(IndexError, match=r"\[index_select\] index 5 is out of bounds"):
        dg.index_select(x, 0, dg.tensor([5])).tolist()
    for big in (dg.zeros(300, 300), ):  # the general (threaded) loops raise the same
        with pytest.raises(RuntimeError, match=r"\[gather\] index 300"):
            dg.gather(big, 0, dg.full((300, 300), 300, dtype=dg.int64)).tolist()
