"""Tensor.__getitem__ / __setitem__ against torch on the same data: a table of index expressions (values,
shapes, views for basic indexing), assignment, gradients through indexing, and the error types."""
import numpy as np
import pytest
import torch

import dygrad as dg

SHAPE = (4, 5, 6)


def data(shape=SHAPE, seed=0):
    return np.random.default_rng(seed).uniform(-2, 2, shape)


def both(array, dtype="float64"):
    return dg.tensor(array.astype(dtype)), torch.tensor(array.astype(dtype))


def as_numpy(t):
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return np.array(t.detach().tolist(), dtype=np.float64).reshape(tuple(t.shape))


def idx(m, values, dtype=None):
    """An index tensor in module m (dg or torch) from a nested list."""
    if dtype is None:
        return m.tensor(values)
    return m.tensor(values, dtype=getattr(m, dtype))


# Each entry builds the key for module m (dg or torch), so tensor indices exist in both.
BASIC = {
    "int": lambda m: 1,
    "negative int": lambda m: -1,
    "tuple of ints": lambda m: (2, -3),
    "all ints": lambda m: (3, 4, 5),
    "slice": lambda m: slice(1, 3),
    "slice step": lambda m: slice(None, None, 2),
    "slice negative bounds": lambda m: (slice(-3, -1), slice(None, -2, 3)),
    "slice out of range": lambda m: slice(2, 100),
    "empty slice": lambda m: slice(3, 1),
    "none": lambda m: None,
    "none inside": lambda m: (slice(None), None, 1),
    "ellipsis": lambda m: ...,
    "ellipsis last dim": lambda m: (..., 2),
    "ellipsis middle": lambda m: (1, ..., slice(1, 5, 2)),
    "ellipsis none": lambda m: (None, ..., None),
    "mixed": lambda m: (-1, slice(1, None, 2), None, ..., slice(-4, 5)),
    "empty tuple": lambda m: (),
    "numpy int": lambda m: (np.int64(2), np.int32(-1)),
}
ADVANCED = {
    "int tensor": lambda m: idx(m, [0, 3, 3, -1]),
    "int32 tensor": lambda m: idx(m, [2, 0], "int32"),
    "2-d int tensor": lambda m: idx(m, [[0, 1], [3, 2]]),
    "list": lambda m: [1, 0, 1],
    "tensor on dim 1": lambda m: (slice(None), idx(m, [4, 0, -5])),
    "adjacent pair": lambda m: (slice(None), idx(m, [[0], [2]]), idx(m, [5, 1, 0])),
    "separated pair": lambda m: (idx(m, [0, 3]), slice(None), idx(m, [5, 1])),
    "int between tensors": lambda m: (slice(None), idx(m, [0, 2]), 1),
    "tensor and slice step": lambda m: (idx(m, [1, 1]), slice(None, None, 2), slice(1, 4)),
    "tensor with none": lambda m: (None, idx(m, [3, 0]), ..., None),
    "0-d tensor": lambda m: idx(m, 2),
    "empty tensor": lambda m: idx(m, [], "int64"),
    "mask all dims": lambda m: m.tensor(data((4, 5, 6), 5) > 0),
    "mask leading": lambda m: m.tensor([True, False, True, True]),
    "mask dim 1": lambda m: (slice(None), m.tensor([False, True, True, False, True])),
    "mask 2-d after int": lambda m: (1, m.tensor(data((5, 6), 6) > 0.5)),
    "mask and tensor": lambda m: (m.tensor([True, False, True, False]), slice(None), idx(m, [1, 5])),
    "python true": lambda m: True,
    "python false": lambda m: (False, 1),
    "0-d mask": lambda m: (m.tensor(True), 0),
    "numpy array": lambda m: np.array([3, 1]),
    "numpy mask": lambda m: data((4,), 3) > 0,
    "numpy int32 array": lambda m: (slice(None), np.array([[1], [4]], dtype=np.int32)),
}


@pytest.mark.parametrize("name", list(BASIC))
def test_basic_getitem_is_a_view(name):
    x, tx = both(data())
    key = BASIC[name]
    y, ty = x[key(dg)], tx[key(torch)]
    assert tuple(y.shape) == tuple(ty.shape)
    np.testing.assert_array_equal(as_numpy(y), as_numpy(ty))
    assert y.stride() == ty.stride()
    # A view: its memory lies inside the base's and writes through it are visible in the base.
    assert x.data_ptr() <= y.data_ptr() < x.data_ptr() + x.numel() * x.element_size() or y.numel() == 0
    if y.numel():
        assert y.storage_offset() == ty.storage_offset()
    y.fill_(7.0)
    ty.fill_(7.0)
    np.testing.assert_array_equal(as_numpy(x), as_numpy(tx))


@pytest.mark.parametrize("name", list(ADVANCED))
@pytest.mark.parametrize("strided", [False, True])
def test_advanced_getitem(name, strided):
    if strided:  # every other element of a wider array: non-contiguous
        x, tx = both(data((4, 5, 12)))
        x, tx = x[:, :, ::2], tx[:, :, ::2]
        assert not x.is_contiguous()
    else:
        x, tx = both(data())
    key = ADVANCED[name]
    y, ty = x[key(dg)], tx[key(torch)]
    assert tuple(y.shape) == tuple(ty.shape)
    np.testing.assert_array_equal(as_numpy(y), as_numpy(ty))
    # A copy: writing it leaves x unchanged.
    before = as_numpy(x).copy()
    if y.numel():
        y.fill_(3.0)
    np.testing.assert_array_equal(as_numpy(x), before)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_getitem_dtypes(dtype):
    x, tx = both(data() * 10, dtype)
    for key in (lambda m: (1, slice(None, None, 2)), lambda m: (idx(m, [2, 0]), 3)):
        y, ty = x[key(dg)], tx[key(torch)]
        assert str(y.dtype).split(".")[-1] == str(ty.dtype).split(".")[-1]
        np.testing.assert_array_equal(as_numpy(y), as_numpy(ty))


SETITEM = {
    "int scalar": (lambda m: 1, lambda m: 2.5),
    "slice tensor": (lambda m: (slice(None), slice(1, 4)), lambda m: m.ones(3, 6, dtype=m.float64)),
    "broadcast row": (lambda m: (..., slice(None, None, 2)), lambda m: m.tensor([1.0, 2.0, 3.0], dtype=m.float64)),
    "leading ones value": (lambda m: 0, lambda m: m.zeros(1, 1, 5, 6, dtype=m.float64)),
    "int tensor repeated": (lambda m: idx(m, [1, 3, 1]),
                            lambda m: m.tensor([[[1.0]], [[2.0]], [[3.0]]], dtype=m.float64)),
    "separated tensors": (lambda m: (idx(m, [0, 2]), slice(None), idx(m, [1, 1])), lambda m: -1.0),
    "mask scalar": (lambda m: m.tensor(data((4, 5, 6), 7) > 0), lambda m: 0.0),
    "mask rows tensor": (lambda m: m.tensor([True, False, False, True]),
                         lambda m: m.full((6,), 4.0, dtype=m.float64)),
    "mask dim 1": (lambda m: (slice(None), m.tensor([True, False, True, False, False])), lambda m: 9),
    "numpy scalar value": (lambda m: (0, 0), lambda m: np.float64(2.5)),
    "python bool": (lambda m: (True, 2), lambda m: 8.0),
    "ellipsis all": (lambda m: ..., lambda m: 1.5),
}


@pytest.mark.parametrize("name", list(SETITEM))
def test_setitem(name):
    x, tx = both(data())
    key, value = SETITEM[name]
    version = x._version if hasattr(x, "_version") else None
    x[key(dg)] = value(dg)
    tx[key(torch)] = value(torch)
    np.testing.assert_array_equal(as_numpy(x), as_numpy(tx))
    if version is not None:
        assert x._version > version


def test_setitem_int_tensor_casts_and_views_write_through():
    x, tx = both(data() * 10, "int64")
    x[1, 2] = 3.7
    tx[1, 2] = 3.7
    np.testing.assert_array_equal(as_numpy(x), as_numpy(tx))
    v = x[2]
    v[idx(dg, [0, 4])] = 11
    assert x[2, 4, 3].item() == 11 and x[2, 0, 0].item() == 11


def test_setitem_last_write_wins():
    x, tx = dg.zeros(5, dtype=dg.float64), torch.zeros(5, dtype=torch.float64)
    x[dg.tensor([1, 1, 1, 3])] = dg.tensor([1.0, 2.0, 3.0, 4.0], dtype=dg.float64)
    tx[torch.tensor([1, 1, 1, 3])] = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    np.testing.assert_array_equal(as_numpy(x), as_numpy(tx))


GRAD = {
    "basic": lambda m: (1, slice(None, None, 2), None),
    "repeated": lambda m: (slice(None), idx(m, [[0, 0], [4, 0]])),
    "separated": lambda m: (idx(m, [3, 3, 0]), slice(1, 3), idx(m, [5, 5, 0])),
    "mask": lambda m: m.tensor(data((4, 5), 8) > 0),
    "mixed": lambda m: (..., idx(m, [1, 1]), None),
}


@pytest.mark.parametrize("name", list(GRAD))
def test_getitem_gradient(name):
    array = data()
    x = dg.tensor(array, requires_grad=True)
    tx = torch.tensor(array, requires_grad=True)
    key = GRAD[name]
    y, ty = x[key(dg)], tx[key(torch)]
    w = np.random.default_rng(3).uniform(-1, 1, tuple(ty.shape))
    (y * dg.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(as_numpy(x.grad), tx.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_setitem_gradient():
    array, values = data(), data((2, 6), 9)
    x, tx = dg.tensor(array, requires_grad=True), torch.tensor(array, requires_grad=True)
    v, tv = dg.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
    y, ty = x * 2.0, tx * 2.0
    y[idx(dg, [1, 3]), 2] = v
    ty[idx(torch, [1, 3]), 2] = tv
    y[0, 1:3] = 5.0
    ty[0, 1:3] = 5.0
    w = data(SHAPE, 10)
    (y * dg.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(as_numpy(x.grad), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(as_numpy(v.grad), tv.grad.numpy(), rtol=1e-12)


def test_assignment_into_leaf_raises_and_works_under_no_grad():
    x = dg.zeros(3, dtype=dg.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        x[0] = 1.0
    view = x[1:]
    with pytest.raises(RuntimeError):
        view[0] = 1.0
    with dg.no_grad():
        x[0] = 1.0
        x[dg.tensor([2])] = 4.0
    assert x.tolist() == [1.0, 0.0, 4.0]


ERRORS = {
    "int out of range": (lambda m: 4, IndexError),
    "negative out of range": (lambda m: (0, -6), IndexError),
    "too many indices": (lambda m: (0, 0, 0, 0), IndexError),
    "negative step": (lambda m: slice(None, None, -1), ValueError),
    "float": (lambda m: 1.5, IndexError),
    "float tensor": (lambda m: m.tensor([1.0]), IndexError),
    "object": (lambda m: object(), IndexError),
    "dict": (lambda m: {1: 2}, IndexError),
    "str": (lambda m: "a", TypeError),
    "numpy bool scalar": (lambda m: np.True_, IndexError),
    "numpy float scalar": (lambda m: np.float64(1.0), IndexError),
    "mask shape": (lambda m: m.tensor([True, False]), IndexError),
    "unbroadcastable": (lambda m: (idx(m, [0, 1]), idx(m, [0, 1, 2])), IndexError),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch warns on x["a"] (a sequence index)
@pytest.mark.parametrize("name", list(ERRORS))
def test_getitem_errors(name):
    key, error = ERRORS[name]
    x, tx = both(data())
    with pytest.raises(error):
        tx[key(torch)]
    with pytest.raises(error):
        x[key(dg)].tolist()


def test_two_ellipses_raise():
    # NumPy's rule (torch accepts x[..., ...] and treats the second ellipsis as empty).
    with pytest.raises(IndexError, match="single ellipsis"):
        dg.zeros(2, 3)[..., 0, ...]


def test_tensor_index_out_of_range_is_raised_at_the_sync_point():
    x = dg.zeros(5, 2)
    with pytest.raises(IndexError, match=r"\[index\] index 7 is out of bounds for dimension 0 with size 5"):
        x[dg.tensor([0, 7])].tolist()
    with pytest.raises(IndexError, match="out of bounds"):
        x[dg.tensor([9])] = 1.0
        dg.synchronize()


def test_setitem_errors():
    x = dg.zeros(4, 3)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        x[dg.tensor([0, 1])] = dg.zeros(3, 2)
    with pytest.raises(TypeError):
        del x[0]
    with pytest.raises(ValueError):
        x[::-1] = 1.0
    for value in ([1.0, 2.0, 3.0], np.ones(3), None, "a"):  # as torch: only Tensors and numbers
        with pytest.raises(TypeError):
            x[0] = value


def random_key(rng, shape, m):
    """A random index expression for `shape` (ints, slices, None, Ellipsis, int/bool tensors), built in m."""
    parts, dim, used_ellipsis = [], 0, False
    while dim < len(shape) and rng.random() < 0.85:
        size, kind = shape[dim], rng.integers(0, 7)
        if kind == 0 and size:
            parts.append(int(rng.integers(-size, size)))
        elif kind == 1:
            start, stop = (int(v) if rng.random() < 0.7 else None for v in rng.integers(-size - 2, size + 2, 2))
            parts.append(slice(start, stop, int(rng.integers(1, 4))))
        elif kind == 2:
            parts.append(None)
            continue
        elif kind == 3 and not used_ellipsis:
            parts.append(...)
            used_ellipsis = True
            dim = len(shape) - sum(1 for p in parts if p is not None and p is not ...)
            dim = max(dim, len(shape) - 1)
            continue
        elif kind == 4 and size:
            values = rng.integers(-size, size, tuple(rng.integers(1, 3, rng.integers(1, 3))))
            parts.append(m.tensor(values.tolist()))
        elif kind == 5:
            parts.append(m.tensor((rng.random(size) < 0.5).tolist()))
        else:
            parts.append(slice(None))
        dim += 1
    return tuple(parts)


def test_random_index_expressions_match_torch():
    rng = np.random.default_rng(1234)
    checked = 0
    for case in range(300):
        shape = tuple(int(s) for s in rng.integers(1, 5, rng.integers(1, 4)))
        array = data(shape, case)
        state = rng.bit_generator.state
        key = random_key(rng, shape, dg)
        rng.bit_generator.state = state
        tkey = random_key(rng, shape, torch)
        x, tx = both(array)
        try:
            expected = tx[tkey]
        except (IndexError, RuntimeError):
            continue
        y = x[key]
        assert tuple(y.shape) == tuple(expected.shape), (shape, tkey)
        np.testing.assert_array_equal(as_numpy(y), as_numpy(expected), err_msg=str((shape, tkey)))
        # The same expression assigned: a broadcast value of the indexed shape.
        value = np.random.default_rng(case).uniform(-1, 1, tuple(expected.shape))
        x[key] = dg.tensor(value)  # repeated targets: torch CPU writes them in order too (last wins)
        tx[tkey] = torch.tensor(value)
        np.testing.assert_array_equal(as_numpy(x), as_numpy(tx), err_msg=str((shape, tkey)))
        checked += 1
    assert checked > 150


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_and_nonzero_functions(accumulate):
    array, values = data((5, 3)), data((4, 3), 2)
    x, tx = both(array)
    rows = [4, 0, 4, 2]
    y = x.index_put((dg.tensor(rows),), dg.tensor(values), accumulate=accumulate)
    ty = tx.index_put((torch.tensor(rows),), torch.tensor(values), accumulate=accumulate)
    np.testing.assert_allclose(as_numpy(y), as_numpy(ty), rtol=1e-15)
    np.testing.assert_array_equal(as_numpy(x), array)  # out of place
    assert x.index_put_([dg.tensor(rows), dg.tensor([1, 1, 0, 2])], dg.tensor(1.5), accumulate=accumulate) is x
    tx.index_put_([torch.tensor(rows), torch.tensor([1, 1, 0, 2])], torch.tensor(1.5, dtype=torch.float64),
                  accumulate=accumulate)
    np.testing.assert_array_equal(as_numpy(x), as_numpy(tx))
    mask = data((3, 4), 4) > 0
    np.testing.assert_array_equal(as_numpy(dg.nonzero(dg.tensor(mask))), torch.nonzero(torch.tensor(mask)).numpy())
    for ours, theirs in zip(dg.tensor(mask).nonzero(as_tuple=True), torch.tensor(mask).nonzero(as_tuple=True)):
        np.testing.assert_array_equal(as_numpy(ours), theirs.numpy())
    assert tuple(dg.nonzero(dg.tensor(3.0)).shape) == tuple(torch.nonzero(torch.tensor(3.0)).shape)


# --- the assignments and list indices of the PyTorch-API issue (13), values and gradients against torch ----------
def test_mask_assignment_of_minus_inf_then_softmax_gradients():
    # The GPT-style top-k masking: logits[logits < v] = -inf, then softmax.
    array = data((3, 6), 21)
    grads = []
    for lib in (dg, torch):
        x = lib.tensor(array, requires_grad=True)
        logits = x * 1.0
        v = logits.max(dim=-1, keepdim=True).values - 0.5
        logits[logits < v] = -float("inf")
        out = lib.softmax(logits, dim=-1) if lib is dg else torch.softmax(logits, dim=-1)
        (out * lib.tensor(data((3, 6), 22))).sum().backward()
        grads.append((as_numpy(out), as_numpy(x.grad)))
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=1e-12)
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-10, atol=1e-12)


def test_mask_assignment_of_a_tensor_and_index_tensor_assignment_gradients():
    array = data((4, 5), 23)
    results = []
    for lib in (dg, torch):
        x = lib.tensor(array, requires_grad=True)
        y = x * 2.0
        mask = y > 0
        count = int(mask.sum())
        src = lib.tensor(np.arange(count, dtype=np.float64) + 1.0, requires_grad=True)
        y[mask] = src  # x[mask] = tensor
        rows = lib.tensor([0, 2])
        row_values = lib.tensor(data((2, 5), 24), requires_grad=True)
        y[rows] = row_values  # x[idx_tensor] = v
        y[lib.tensor([3])] = 7.0  # a number
        (y * lib.tensor(data((4, 5), 25))).sum().backward()
        results.append((as_numpy(y), as_numpy(x.grad), as_numpy(src.grad), as_numpy(row_values.grad)))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("key", ["last as list", "rows as list", "negative list", "list then slice"])
def test_list_indices_values_and_gradients(key):
    keys = {"last as list": (slice(None), [-1], slice(None)), "rows as list": [0, 2],
            "negative list": (slice(None), [-1, 0]), "list then slice": ([1, 1], slice(1, 3))}
    array = data((3, 4, 5), 26)
    results = []
    for lib in (dg, torch):
        x = lib.tensor(array, requires_grad=True)
        y = x[keys[key]]
        (y * lib.tensor(data(tuple(y.shape), 27))).sum().backward()
        results.append((tuple(y.shape), as_numpy(y), as_numpy(x.grad)))
    assert results[0][0] == results[1][0]
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-12)
    np.testing.assert_allclose(results[0][2], results[1][2], rtol=1e-12)
