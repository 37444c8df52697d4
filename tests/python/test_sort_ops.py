"""sort, argsort, topk, cumsum, cumprod (and prod, composed of it in _composed.py), flip, roll (ops/sort.cpp), and
bernoulli, multinomial, linspace, logspace (ops/random.cpp) against torch: values, gradients, dtypes, named-tuple
returns and errors. The conformance sweep (conformance/ops_sort.py, ops_random.py) covers layouts, float64 finite
differences and thread counts."""
import numpy as np
import pytest
import torch

import dygrad as dg


def same(d, t):
    if d.dtype == dg.bfloat16:
        d, t = d.to(dg.float32), t.to(torch.float32)
    np.testing.assert_array_equal(d.numpy(), t.detach().numpy())


NAN = float("nan")


# --- sort, argsort, topk ------------------------------------------------------------------------------------------
def test_sort_returns_named_tuple():
    r = dg.sort(dg.tensor([[3.0, 1.0, 2.0]]))
    assert type(r).__name__ == "sort" and type(r).__module__ == "dygrad.return_types"
    values, indices = r
    assert r.values is values and r.indices is indices
    assert indices.dtype == dg.int64
    t = dg.topk(dg.tensor([1.0, 3.0]), 1)
    assert type(t).__name__ == "topk" and type(t).__module__ == "dygrad.return_types"
    assert t.values.tolist() == [3.0] and t.indices.tolist() == [1]
    assert isinstance(r, dg.return_types.sort) and isinstance(t, dg.return_types.topk)
    assert isinstance(dg.max(dg.ones(2), 0), dg.return_types.max) and not isinstance(r, dg.return_types.topk)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_nan_is_largest(descending):
    x = [3.0, NAN, 1.0, -np.inf, 1.0, NAN, np.inf, -0.0, 0.0]
    d = dg.sort(dg.tensor(x), descending=descending, stable=True)
    t = torch.sort(torch.tensor(x), descending=descending, stable=True)
    same(d.values, t.values)
    same(d.indices, t.indices)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16", "int64", "int32", "uint8", "bool"])
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_indices_equal_torch_with_ties(dtype, descending):
    values = np.random.default_rng(0).integers(0, 2 if dtype == "bool" else 4, size=(5, 37))
    x = values.astype(bool) if dtype == "bool" else values
    for dim in (0, 1, -1):
        d = dg.sort(dg.tensor(x, dtype=getattr(dg, dtype)), dim=dim, descending=descending, stable=True)
        t = torch.sort(torch.tensor(x, dtype=getattr(torch, dtype)), dim=dim, descending=descending, stable=True)
        assert d.values.dtype == getattr(dg, dtype)
        same(d.indices, t.indices)
        same(d.values.to(dg.float64), t.values.to(torch.float64))
        # stable=False is stable too (a valid order for torch's unstable sort), and argsort is sort's indices.
        same(dg.sort(dg.tensor(x, dtype=getattr(dg, dtype)), dim, descending).indices, t.indices)
        same(dg.argsort(dg.tensor(x, dtype=getattr(dg, dtype)), dim=dim, descending=descending, stable=True), t.indices)


def test_sort_signatures_follow_torch():
    x = dg.tensor([3.0, 1.0, 2.0])
    assert x.sort(0, True).indices.tolist() == [0, 2, 1]
    assert x.sort(stable=True, dim=0, descending=True).indices.tolist() == [0, 2, 1]
    assert dg.sort(x, stable=None).indices.tolist() == [1, 2, 0]
    assert x.argsort(descending=True, stable=True).tolist() == [0, 2, 1]
    # torch's overloads: stable= is keyword-only and takes dim / descending by keyword.
    for call in (lambda m, t: m.sort(t, 0, stable=True), lambda m, t: m.sort(t, 0, False, True),
                 lambda m, t: m.argsort(t, 0, True, True)):
        with pytest.raises(TypeError):
            call(torch, torch.tensor([3.0, 1.0]))
        with pytest.raises(TypeError):
            call(dg, dg.tensor([3.0, 1.0]))


def test_sort_0d_and_empty():
    d, t = dg.sort(dg.tensor(5.0)), torch.sort(torch.tensor(5.0))
    assert d.values.shape == t.values.shape == () and d.indices.item() == 0
    d = dg.sort(dg.zeros(0, 3), dim=0)
    assert d.values.shape == (0, 3) and d.indices.dtype == dg.int64
    t = dg.topk(dg.tensor(5.0), 1)
    assert t.values.shape == () and t.values.item() == 5.0


def test_topk_values_indices_and_ties():
    rng = np.random.default_rng(1)
    x = rng.permutation(60).reshape(3, 4, 5).astype(np.float32)
    for k, dim, largest in [(2, -1, True), (3, 1, False), (1, 0, True), (5, 2, False), (0, 1, True)]:
        d = dg.topk(dg.tensor(x), k, dim, largest)
        t = torch.topk(torch.tensor(x), k, dim, largest)
        same(d.values, t.values)
        same(d.indices, t.indices)
    # ties: the lower index first (torch leaves the order unspecified; the values agree)
    d = dg.topk(dg.tensor([1.0, 3.0, 3.0, 2.0, 3.0]), 2)
    assert d.values.tolist() == [3.0, 3.0] and d.indices.tolist() == [1, 2]
    # NaN is the largest value, as torch
    same(dg.topk(dg.tensor([1.0, NAN, 2.0]), 2).values, torch.topk(torch.tensor([1.0, NAN, 2.0]), 2).values)
    same(dg.topk(dg.tensor([1.0, NAN, 2.0]), 2, largest=False).indices,
         torch.topk(torch.tensor([1.0, NAN, 2.0]), 2, largest=False).indices)
    # sorted=False: the same (sorted) selection; torch's order is unspecified, the sets agree
    d = dg.topk(dg.tensor(x), 3, sorted=False)
    t = torch.topk(torch.tensor(x), 3, sorted=False)
    assert np.array_equal(np.sort(d.values.numpy(), -1), np.sort(t.values.numpy(), -1))
    for dtype in ("int64", "int32", "uint8", "float16", "bfloat16"):
        d = dg.topk(dg.tensor(x, dtype=getattr(dg, dtype)), 2)
        assert d.values.dtype == getattr(dg, dtype) and d.indices.dtype == dg.int64
        same(d.indices, torch.topk(torch.tensor(x, dtype=getattr(torch, dtype)), 2).indices)


@pytest.mark.parametrize("k", [4, -1])
def test_topk_k_out_of_range_raises(k):
    with pytest.raises(RuntimeError, match=r"\[topk\] selected index k out of range"):
        dg.topk(dg.tensor([3.0, 1.0, 2.0]), k)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        torch.topk(torch.tensor([3.0, 1.0, 2.0]), k)


def test_sort_errors():
    with pytest.raises(IndexError, match=r"\[sort\] dimension out of range"):
        dg.sort(dg.ones(3), 1)
    with pytest.raises(RuntimeError, match="does not support bool"):
        dg.topk(dg.tensor([True, False]), 1)
    with pytest.raises(TypeError):
        dg.sort([3, 1])


def grads(lib, fn, x, cotangent):
    t = lib.tensor(x, dtype=lib.float64).requires_grad_(True)
    out = fn(lib, t)
    (out * lib.tensor(cotangent, dtype=lib.float64)).sum().backward()
    return t.grad.numpy(), out.detach().numpy()


@pytest.mark.parametrize("fn", [
    lambda m, t: m.sort(t, dim=1, stable=True).values,
    lambda m, t: m.sort(t, 0, descending=True).values,
    lambda m, t: m.topk(t, 2, 1).values,
    lambda m, t: m.topk(t, 3, 0, largest=False).values,
    lambda m, t: m.cumsum(t, 1),
    lambda m, t: m.cumsum(t, 0),
    lambda m, t: m.cumprod(t, 1),
    lambda m, t: m.flip(t, (0, 1)),
    lambda m, t: m.roll(t, (1, -2), (0, 1)),
    lambda m, t: m.roll(t, 7),
    lambda m, t: m.fliplr(t),
    lambda m, t: m.flipud(t),
], ids=["sort", "sort_desc", "topk", "topk_smallest", "cumsum", "cumsum0", "cumprod", "flip", "roll", "roll_flat",
        "fliplr", "flipud"])
def test_gradients_match_torch(fn):
    rng = np.random.default_rng(2)
    x = rng.permutation(20).reshape(4, 5) / 4.0 - 2.0
    want_out = fn(torch, torch.tensor(x))
    cotangent = rng.standard_normal(tuple(want_out.shape))
    got_grad, got = grads(dg, fn, x, cotangent)
    want_grad, want = grads(torch, fn, x, cotangent)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("x", [
    [[2.0, 0.0, 3.0, -1.5, 0.5]],                # one zero in the middle
    [[0.0, 2.0, 0.0, 3.0, 4.0]],                 # zero first, a second zero later
    [[1.5, -2.0, 0.5, 3.0, 0.0]],                # zero last
    [[0.0, 0.0, 0.0, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0, 5.0]],
])
def test_cumprod_gradient_with_zeros(x):
    rng = np.random.default_rng(3)
    cotangent = rng.standard_normal(np.shape(x))
    for dim in (-1,):
        got_grad, _ = grads(dg, lambda m, t: m.cumprod(t, dim), x, cotangent)
        want_grad, _ = grads(torch, lambda m, t: m.cumprod(t, dim), x, cotangent)
        np.testing.assert_allclose(got_grad, want_grad, rtol=1e-12, atol=1e-12)
    # and against central differences (cumprod is a polynomial: exact up to rounding)
    base = np.array(x, dtype=np.float64)
    numeric = np.zeros_like(base)
    for j in np.ndindex(*base.shape):
        up, down = base.copy(), base.copy()
        up[j] += 1e-6
        down[j] -= 1e-6
        f = lambda v: float((np.cumprod(v, -1) * cotangent).sum())  # noqa: E731
        numeric[j] = (f(up) - f(down)) / 2e-6
    np.testing.assert_allclose(got_grad, numeric, rtol=1e-6, atol=1e-6)


# --- cumsum, cumprod ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16", "int64", "int32", "uint8", "bool"])
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_scan_dtypes_and_values_bitwise(op, dtype):
    rng = np.random.default_rng(4)
    x = rng.integers(0, 2, (3, 40)).astype(bool) if dtype == "bool" else rng.uniform(0.5, 1.5, (3, 40))
    if dtype in ("int64", "int32", "uint8"):
        x = rng.integers(0, 3, (3, 40))
    d = getattr(dg, op)(dg.tensor(x, dtype=getattr(dg, dtype)), 1)
    t = getattr(torch, op)(torch.tensor(x, dtype=getattr(torch, dtype)), 1)
    assert str(d.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    # the same accumulate type as torch's CPU kernels (double for float32): equal bits
    same(d.to(dg.float64), t.to(torch.float64))


def test_scan_dtype_argument_and_inplace():
    x = dg.tensor([[1, 2], [3, 4]], dtype=dg.int32)
    assert dg.cumsum(x, 0, dtype=dg.float64).dtype == dg.float64
    assert dg.cumsum(x, dim=1, dtype=dg.float32).tolist() == [[1.0, 3.0], [3.0, 7.0]]
    assert x.cumprod(1).tolist() == [[1, 2], [3, 12]]
    y = dg.tensor([1.0, 2.0, 3.0])
    assert y.cumsum_(0) is y and y.tolist() == [1.0, 3.0, 6.0]
    assert y.cumprod_(0).tolist() == [1.0, 3.0, 18.0]
    with pytest.raises(RuntimeError, match="Bad in-place call"):
        y.cumsum_(0, dtype=dg.float64)
    leaf = dg.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        leaf.cumsum_(0)
    # on a non-leaf, the gradient flows through the in-place scan
    a = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a * 2
    b.cumsum_(0)
    b.sum().backward()
    assert a.grad.tolist() == [6.0, 4.0, 2.0]
    with pytest.raises(IndexError, match=r"\[cumsum\] dimension out of range"):
        dg.cumsum(y, 1)
    assert dg.cumsum(dg.tensor(5.0), 0).shape == ()


# --- prod (composed: the last entry of cumprod) ---------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "uint8", "bool"])
def test_prod_values_and_dtypes_match_torch(dtype):
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2, (3, 4, 5)).astype(bool) if dtype == "bool" else rng.uniform(0.5, 1.5, (3, 4, 5))
    if dtype in ("int32", "uint8"):
        x = rng.integers(0, 3, (3, 4, 5))
    d, t = dg.tensor(x, dtype=getattr(dg, dtype)), torch.tensor(x, dtype=getattr(torch, dtype))
    cases = [lambda m, v: m.prod(v), lambda m, v: m.prod(v, 1), lambda m, v: m.prod(v, -1, keepdim=True),
             lambda m, v: v.prod(dim=0), lambda m, v: m.prod(v, 2, dtype=m.float64), lambda m, v: v.prod()]
    for case in cases:
        got, want = case(dg, d), case(torch, t)
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(got.to(dg.float64).numpy(), want.to(torch.float64).numpy(), rtol=1e-6)


def test_prod_empty_scalar_and_errors_match_torch():
    for shape, dim in [((2, 0), 1), ((0,), None), ((0, 3), 0)]:
        got = dg.prod(dg.empty(shape)) if dim is None else dg.prod(dg.empty(shape), dim)
        want = torch.prod(torch.empty(shape)) if dim is None else torch.prod(torch.empty(shape), dim)
        same(got, want)
    same(dg.prod(dg.tensor(5.0), 0), torch.prod(torch.tensor(5.0), 0))
    assert dg.prod(dg.tensor(5.0), -1, keepdim=True).shape == torch.prod(torch.tensor(5.0), -1, keepdim=True).shape
    with pytest.raises(IndexError, match=r"\[prod\] dimension out of range"):
        dg.prod(dg.ones(2, 3), 2)
    for bad in (lambda m: m.prod(m.ones(2, 3), (0, 1)), lambda m: m.prod(m.ones(2, 3), keepdim=True)):
        with pytest.raises(TypeError):
            bad(torch)
        with pytest.raises(TypeError):
            bad(dg)


@pytest.mark.parametrize("x", [[[2.0, 0.5, 3.0, -1.5]], [[2.0, 0.0, 3.0, -1.5], [0.0, 1.0, 0.0, 2.0]]],
                         ids=["no_zero", "zeros"])
def test_prod_gradient_matches_torch(x):
    for fn in (lambda m, t: m.prod(t, 1), lambda m, t: m.prod(t, 0, keepdim=True), lambda m, t: m.prod(t)):
        cotangent = np.random.default_rng(6).standard_normal(tuple(fn(torch, torch.tensor(x)).shape))
        got_grad, got = grads(dg, fn, x, cotangent)
        want_grad, want = grads(torch, fn, x, cotangent)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_allclose(got_grad, want_grad, rtol=1e-12, atol=1e-12)


# --- flip, roll ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "uint8", "bool"])
def test_flip_roll_values(dtype):
    x = np.arange(24).reshape(2, 3, 4) % 2 == 0 if dtype == "bool" else np.arange(24).reshape(2, 3, 4)
    d, t = dg.tensor(x, dtype=getattr(dg, dtype)), torch.tensor(x, dtype=getattr(torch, dtype))
    for dims in ([0], (1, 2), [-1, 0], [0, 1, 2], []):
        same(dg.flip(d, dims), torch.flip(t, dims))
    same(d.flip(0, 2), t.flip(0, 2))
    same(d.transpose(0, 2).flip(1), t.transpose(0, 2).flip(1))
    same(dg.fliplr(d), torch.fliplr(t))
    same(dg.flipud(d), torch.flipud(t))
    for shifts, dims in [(1, None), (-5, None), (2, 1), ((1, -1), (0, 2)), ((7, 30), (1, 2)), (0, 0)]:
        same(dg.roll(d, shifts, dims), torch.roll(t, shifts, dims))
    same(d.roll(3), t.roll(3))
    same(d[:, ::2].roll(1, -1), t[:, ::2].roll(1, -1))
    # a copy, never a view of the input
    rolled = dg.roll(d, 0, 0)
    assert rolled.data_ptr() != d.data_ptr()


def test_flip_roll_errors():
    with pytest.raises(RuntimeError, match="appears multiple times"):
        dg.flip(dg.ones(3), [0, -1])
    with pytest.raises(IndexError, match=r"\[flip\] dimension out of range"):
        dg.flip(dg.ones(3), [1])
    with pytest.raises(RuntimeError, match="Input must be >= 2-d"):
        dg.fliplr(dg.ones(3))
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        dg.roll(dg.ones(2, 3), (1, 1))
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        dg.roll(dg.ones(2, 3), (1, 1), 0)
    with pytest.raises(IndexError, match=r"\[roll\] dimension out of range"):
        dg.roll(dg.ones(2, 3), 1, 5)
    assert dg.flip(dg.tensor(5.0), [0]).item() == 5.0


# --- linspace, logspace -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("start,end,steps", [(0, 1, 7), (0, 1, 100), (-3, 7.5, 1000), (5, -2, 777), (0.1, 0.9, 12345),
                                             (2, 2, 5), (0, 1, 1), (0, 1, 0), (-1e3, 1e3, 33)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32"])
def test_linspace_bitwise_equal_torch(start, end, steps, dtype):
    d = dg.linspace(start, end, steps, dtype=getattr(dg, dtype))
    t = torch.linspace(start, end, steps, dtype=getattr(torch, dtype))
    assert d.dtype == getattr(dg, dtype) and d.shape == t.shape
    same(d, t)


@pytest.mark.parametrize("start,end,steps,base", [(0, 2, 3, 10.0), (-1, 2, 10, 10.0), (0, 10, 11, 2.0),
                                                  (0.5, -3.25, 101, 3.0)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_logspace_bitwise_equal_torch(start, end, steps, base, dtype):
    d = dg.logspace(start, end, steps, base, dtype=getattr(dg, dtype))
    t = torch.logspace(start, end, steps, base, dtype=getattr(torch, dtype))
    same(d, t)


def test_linspace_arguments_and_16_bit():
    assert dg.linspace(0, 10, 5).dtype == dg.float32  # torch's default dtype, integer ends or not
    x = dg.linspace(start=0, end=1, steps=3, requires_grad=True)
    assert x.requires_grad and x.tolist() == [0.0, 0.5, 1.0]
    for dtype in ("float16", "bfloat16"):  # close to torch's (not bitwise: torch rounds its 16-bit step differently)
        d = dg.linspace(-3, 7.5, 50, dtype=getattr(dg, dtype)).to(dg.float64).numpy()
        t = torch.linspace(-3, 7.5, 50, dtype=getattr(torch, dtype)).to(torch.float64).numpy()
        np.testing.assert_allclose(d, t, rtol=1e-2, atol=1e-2)
    same(dg.linspace(dg.tensor(0.5), dg.tensor(2), 5), torch.linspace(torch.tensor(0.5), torch.tensor(2), 5))
    with pytest.raises(RuntimeError, match="0-dimensional start and end"):
        dg.linspace(dg.zeros(2), 1, 3)
    with pytest.raises(RuntimeError, match="0-dimensional start and end"):
        torch.linspace(torch.zeros(2), 1, 3)
    with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
        dg.linspace(0, 1, -1)
    with pytest.raises(TypeError):
        dg.linspace(0, 1)
    with pytest.raises(TypeError):
        dg.linspace(0, 1, 3, base=2.0)


# --- multinomial, bernoulli ----------------------------------------------------------------------------------------
def test_multinomial_with_replacement_frequencies():
    dg.manual_seed(0)
    weights = dg.tensor([[1.0, 0.0, 3.0, 4.0], [0.0, 0.0, 5.0, 0.0]])
    samples = dg.multinomial(weights, 20000, replacement=True)
    assert samples.shape == (2, 20000) and samples.dtype == dg.int64
    counts = np.bincount(samples.numpy()[0], minlength=4) / 20000
    np.testing.assert_allclose(counts, [1 / 8, 0.0, 3 / 8, 4 / 8], atol=6 * np.sqrt(0.25 / 20000))
    assert (samples.numpy()[1] == 2).all()
    one_d = dg.multinomial(dg.tensor([0.2, 0.8]), 5, True)
    assert one_d.shape == (5,)


def test_multinomial_without_replacement():
    dg.manual_seed(1)
    w = dg.tensor([1.0, 2.0, 3.0, 4.0]).expand(20000, 4)
    samples = dg.multinomial(w, 4).numpy()
    assert (np.sort(samples, -1) == np.arange(4)).all()  # a permutation per row
    # P(first = c) = w_c / sum; P(second = 3 | first = 2) = 4 / 7
    np.testing.assert_allclose(np.bincount(samples[:, 0], minlength=4) / 20000, [0.1, 0.2, 0.3, 0.4], atol=0.02)
    first_two = samples[samples[:, 0] == 2]
    assert abs((first_two[:, 1] == 3).mean() - 4 / 7) < 0.04
    # zero weights are drawn last (after the positive ones run out), as torch
    assert dg.multinomial(dg.tensor([0.0, 1.0, 0.0]), 3).tolist()[0] == 1
    assert torch.multinomial(torch.tensor([0.0, 1.0, 0.0]), 3).tolist()[0] == 1


def test_multinomial_errors():
    with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist.size"):
        dg.multinomial(dg.tensor([1.0, 2.0]), 3)
    with pytest.raises(RuntimeError, match="prob_dist must be 1 or 2 dim"):
        dg.multinomial(dg.ones(2, 2, 2), 1)
    with pytest.raises(RuntimeError, match="only supports floating-point dtypes"):
        dg.multinomial(dg.tensor([1, 2]), 1)
    with pytest.raises(RuntimeError, match="cannot sample n_sample <= 0"):
        dg.multinomial(dg.tensor([1.0, 2.0]), 0)
    # value checks run in the kernel: they raise at the next sync (docs/async-errors.md), as RuntimeError
    for bad in ([1.0, -1.0], [1.0, float("nan")], [1.0, float("inf")]):
        with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan` or element < 0"):
            dg.multinomial(dg.tensor(bad), 1).tolist()
        with pytest.raises(RuntimeError, match="probability tensor contains"):
            torch.multinomial(torch.tensor(bad), 1)
    with pytest.raises(RuntimeError, match=r"invalid multinomial distribution \(sum of probabilities <= 0\)"):
        dg.multinomial(dg.tensor([[1.0, 1.0], [0.0, 0.0]]), 1, True).tolist()
    with pytest.raises(TypeError, match="generator"):
        dg.multinomial(dg.tensor([1.0, 2.0]), 1, generator=3)


def test_bernoulli_forms_and_moments():
    dg.manual_seed(2)
    p = dg.tensor([0.0, 0.25, 1.0]).expand(40000, 3)
    draws = dg.bernoulli(p)
    assert draws.dtype == dg.float32 and draws.shape == (40000, 3)
    means = draws.numpy().mean(0)
    assert means[0] == 0.0 and means[2] == 1.0 and abs(means[1] - 0.25) < 6 * np.sqrt(0.1875 / 40000)
    scalar_p = dg.bernoulli(dg.zeros(40000, dtype=dg.float64), 0.7)
    assert scalar_p.dtype == dg.float64 and abs(scalar_p.numpy().mean() - 0.7) < 6 * np.sqrt(0.21 / 40000)
    x = dg.zeros(40000)
    assert x.bernoulli_() is x and abs(x.numpy().mean() - 0.5) < 6 * np.sqrt(0.25 / 40000)
    y = dg.zeros(3, dtype=dg.int64)
    assert y.bernoulli_(dg.tensor([1.0, 0.0, 1.0])).tolist() == [1, 0, 1]
    assert dg.zeros(2, 3).bernoulli_(dg.tensor([1.0, 0.0, 1.0])).tolist() == [[1.0, 0.0, 1.0]] * 2
    leaf = dg.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        leaf.bernoulli_(0.5)
    assert not dg.bernoulli(dg.full((3,), 0.5, requires_grad=True)).requires_grad
    with pytest.raises(RuntimeError, match="Expected p_in >= 0 && p_in <= 1"):
        dg.bernoulli(dg.tensor([0.5, 2.0])).tolist()
    with pytest.raises(NotImplementedError, match="bernoulli"):
        dg.bernoulli(dg.tensor([1, 0]))


@pytest.mark.parametrize("draw", [
    lambda g: dg.multinomial(dg.tensor([[1.0, 2.0, 3.0, 4.0]] * 8), 3, generator=g),
    lambda g: dg.multinomial(dg.tensor([1.0, 2.0, 3.0]), 50, True, generator=g),
    lambda g: dg.bernoulli(dg.full((64,), 0.5), generator=g),
    lambda g: dg.bernoulli(dg.zeros(64), 0.5, generator=g),
    lambda g: dg.zeros(64).bernoulli_(0.5, generator=g),
], ids=["multinomial", "multinomial_replacement", "bernoulli", "bernoulli_p", "bernoulli_"])
def test_generator_and_seed_determinism(draw):
    # A seeded Generator replays its draws and leaves the process generator alone.
    dg.manual_seed(7)
    state = dg.get_rng_state()
    first = draw(dg.Generator().manual_seed(123)).tolist()
    assert dg.get_rng_state() == state
    assert draw(dg.Generator().manual_seed(123)).tolist() == first
    g = dg.Generator().manual_seed(123)
    draw(g)
    assert draw(g).tolist() != first  # the Generator advanced
    # Without one: the process generator, reproducible under manual_seed, fresh per call.
    dg.manual_seed(9)
    a = draw(None).tolist()
    b = draw(None).tolist()
    dg.manual_seed(9)
    assert draw(None).tolist() == a and a != b
