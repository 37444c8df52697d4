"""Tensor creation, dtype inference (vs torch), NumPy interop (zero-copy both ways), metadata, repr,
factories, views, reductions, autograd accessors and runtime controls."""
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import dygrad as dg


def dtype_name(dtype):
    return str(dtype).split(".")[-1]


# --- creation and dtype inference ----------------------------------------------------------------------------
INFERENCE_CASES = [
    1.5, 2, True, [1.0, 2.0], [1, 2], [True, False], [[1, 2], [3, 4]], [1, 2.5], [True, 1], [],
    [[1.0], [2.0]], np.arange(3, dtype=np.float64), np.arange(3, dtype=np.float32), np.arange(3, dtype=np.int32),
    np.arange(3, dtype=np.int64), np.arange(3, dtype=np.uint8), np.arange(3, dtype=np.uint16),
    np.arange(3, dtype=np.float16), np.array([True, False]), np.float64(1.5), np.float32(2.5), np.int64(3),
    np.arange(6.0).reshape(2, 3)[:, ::2],
]


# Lists holding one-element tensors: each is a number of its dtype (promoted with the others, torch's
# infer_scalar_type), never descended into for the sizes unless the first elements say a sequence belongs there.
TENSOR_LIST_CASES = [
    "[t(1.), t(2.)]", "[t([1.]), t([2.])]", "[[t(1.)], [t(2.)]]", "[[t([1.])], [t([2.])]]", "[t([[1.]]), t([[2.]])]",
    "[t([1.]), t(2.)]", "[t(1.), 2.5]", "[t(1), 2.5]", "[t(1), t(2)]", "[t(1, dtype=L.int32), t(2, dtype=L.int32)]",
    "[t(1, dtype=L.int32), 2]", "[t(1., dtype=L.float64), t(2.)]", "[t(1., dtype=L.float64), 2.5]",
    "[t(1., dtype=L.float16), t(2., dtype=L.float16)]", "[t(1., dtype=L.float16), 2]", "[t(1., dtype=L.float16), 2.5]",
    "[t(1., dtype=L.bfloat16), t(1., dtype=L.float16)]", "[t(True), t(False)]", "[t(True), 2]", "[t(True), t(2.5)]",
    "[t(1+2j), t(3.)]", "[[t(1.), t(2.)], [t(3.), t(4.)]]", "[[1, 2], t([3., 4.])]", "(t(1.), t(2.))",
    "[t(1), t(2)], dtype=L.float64", "[t(1.5), 2.], dtype=L.float64", "[t(3)], dtype=L.bool",
    "[t(L.ones(1, 1)), 1.]", "[t(1.) * t(1., requires_grad=True), t(2.)]",
]


@pytest.mark.parametrize("source", TENSOR_LIST_CASES)
def test_tensor_of_one_element_tensors_as_torch(source):
    def build(L):
        return eval(f"L.tensor({source})", {"L": L, "t": L.tensor})
    theirs, ours = build(torch), build(dg)
    assert dtype_name(ours.dtype) == dtype_name(theirs.dtype) and tuple(ours.shape) == tuple(theirs.shape)
    assert ours.tolist() == theirs.tolist() and not ours.requires_grad


@pytest.mark.parametrize("source, error, text", [
    ("[t([1.]), t([2., 3.])]", ValueError, "only one element tensors can be converted to Python scalars"),
    ("[t([1., 2.]), t([3., 4.])]", ValueError, "only one element tensors can be converted to Python scalars"),
    ("[t([1., 2.]), [3, 4]]", ValueError, "only one element tensors can be converted to Python scalars"),
    ("[t([1, 2]), t([3, 4])]", TypeError, "only integer tensors of a single element can be converted to an index"),
    ("[t(1.5), t(2.)], dtype=L.int64", TypeError, "only integer tensors of a single element can be converted to an index"),
    ("[t(1.5)], dtype=L.bool", TypeError, "only integer tensors of a single element can be converted to an index"),
    ("[t(1+1j), t(2.)], dtype=L.float32", RuntimeError, "value cannot be converted to type double without overflow"),
])
def test_tensor_of_tensors_errors_as_torch(source, error, text):
    for L in (torch, dg):
        with pytest.raises(error, match=re.escape(text)):
            eval(f"L.tensor({source})", {"L": L, "t": L.tensor})


def test_tensor_of_a_tensor_that_requires_grad_warns_as_torch():
    # torch's text; torch warns once per process (TORCH_WARN_ONCE), dygrad through Python's warnings filters.
    with pytest.warns(UserWarning, match="Converting a tensor with requires_grad=True to a scalar may lead to "
                                         "unexpected behavior"):
        out = dg.tensor([dg.tensor(1.0, requires_grad=True), 2.0])
    assert out.tolist() == [1.0, 2.0] and not out.requires_grad


@pytest.mark.parametrize("data", INFERENCE_CASES, ids=lambda d: f"{type(d).__name__}:{getattr(d, 'dtype', d)}")
def test_tensor_infers_dtype_and_values_as_torch(data):
    ours = dg.tensor(data)
    theirs = torch.tensor(data)
    assert dtype_name(ours.dtype) == dtype_name(theirs.dtype)
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert ours.tolist() == theirs.tolist()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8", "bool"])
def test_tensor_with_explicit_dtype(dtype):
    data = [[0, 1.5, 2], [3, -0.0, 1]] if "float" in dtype else [[0, 1, 2], [3, 0, 1]]
    ours = dg.tensor(data, dtype=getattr(dg, dtype))
    theirs = torch.tensor(data, dtype=getattr(torch, dtype))
    assert ours.dtype is getattr(dg, dtype)
    assert ours.tolist() == theirs.tolist()


def test_tensor_copies_its_input():
    array = np.ones(3)
    t = dg.tensor(array)
    array[0] = 5
    assert t.tolist() == [1.0, 1.0, 1.0]
    source = dg.ones(2, requires_grad=True)
    copy = dg.tensor(source)
    assert not copy.requires_grad and copy.is_leaf
    assert dg.tensor(dg.tensor(3.0)).item() == 3.0


def test_dtype_objects():
    assert repr(dg.float32) == "dygrad.float32" and str(dg.bfloat16) == "dygrad.bfloat16"
    assert dg.float32 is dg.float and dg.float64 is dg.double and dg.int64 is dg.long
    assert dg.float16.is_floating_point and not dg.int32.is_floating_point
    assert dg.float64.itemsize == 8 and dg.bool.itemsize == 1
    assert dg.ones(2).dtype is dg.float32
    assert dg.ones(2, dtype=np.float64).dtype is dg.float64  # NumPy types are accepted as dtypes
    assert dg.ones(2, dtype=float).dtype is dg.float64


# --- NumPy interop -------------------------------------------------------------------------------------------------
def test_from_numpy_shares_memory_both_ways():
    array = np.zeros(4, dtype=np.float32)
    t = dg.from_numpy(array)
    assert t.dtype is dg.float32 and t.data_ptr() == array.ctypes.data
    array[1] = 5.0
    assert t.tolist() == [0.0, 5.0, 0.0, 0.0]
    # dygrad's writes into NumPy's memory have finished when the call returns: no synchronize here.
    t.add_(1.0)
    assert array.tolist() == [1.0, 6.0, 1.0, 1.0]
    t.mul_(2)
    assert array.tolist() == [2.0, 12.0, 2.0, 2.0]
    t += 1
    assert array.tolist() == [3.0, 13.0, 3.0, 3.0]
    t.copy_(dg.tensor([9.0, 8.0, 7.0, 6.0]))
    assert array.tolist() == [9.0, 8.0, 7.0, 6.0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int64, np.int32, np.uint16, np.uint8, np.bool_])
def test_from_numpy_keeps_dtype(dtype):
    array = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    t = dg.from_numpy(array)
    assert dtype_name(t.dtype) == dtype_name(torch.from_numpy(array).dtype)
    assert t.tolist() == array.tolist()


def test_from_numpy_strided_views():
    base = np.arange(24.0).reshape(4, 6)
    view = base[1:, ::2]
    t = dg.from_numpy(view)
    assert t.shape == (3, 3) and t.stride() == (6, 2)
    assert t.tolist() == view.tolist()
    view[0, 0] = -1.0
    assert t.tolist()[0][0] == -1.0
    assert (t * 2).tolist() == (view * 2).tolist()


def test_from_numpy_rejects_what_it_cannot_share():
    with pytest.raises(TypeError, match=r"\[from_numpy\].*complex256"):
        dg.from_numpy(np.zeros(3, dtype=np.clongdouble))
    with pytest.raises(ValueError, match=r"\[from_numpy\].*negative"):
        dg.from_numpy(np.arange(4.0)[::-1])
    with pytest.raises(TypeError, match=r"\[from_numpy\] expected np.ndarray"):
        dg.from_numpy([1.0, 2.0])


def test_from_numpy_keeps_the_array_alive_and_releases_it():
    array = np.arange(8.0)
    base_refs = sys.getrefcount(array)
    t = dg.from_numpy(array)
    assert sys.getrefcount(array) == base_refs + 1
    y = t * 2.0  # the queued Task holds t's storage too; it may be the last owner, on the stream worker
    del t
    dg.synchronize()
    assert y.tolist() == (array * 2).tolist()
    del y
    dg.synchronize()
    assert sys.getrefcount(array) == base_refs
    del array
    kept = dg.from_numpy(np.arange(3.0))  # the tensor alone keeps the array's memory alive
    assert kept.tolist() == [0.0, 1.0, 2.0]


def test_numpy_is_zero_copy_and_waits_for_pending_writes():
    t = dg.ones(3)
    a = t.numpy()
    assert a.ctypes.data == t.data_ptr() and a.dtype == np.float32
    t.add_(1.0)  # the storage is now shared with NumPy: the write finishes before add_ returns
    assert a.tolist() == [2.0, 2.0, 2.0]
    a[0] = 7.0
    assert t.tolist() == [7.0, 2.0, 2.0]
    y = dg.ones(1000, 100) * 3.0
    assert float(y.numpy().sum()) == 300000.0
    del t
    assert a.tolist() == [7.0, 2.0, 2.0]  # the array keeps the storage alive


def test_numpy_of_views_and_dtypes():
    t = dg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=dg.float64)
    assert t.t().numpy().tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    assert t.t().numpy().strides == (8, 24)
    assert dg.tensor([1, 2], dtype=dg.uint16).numpy().dtype == np.uint16
    assert dg.tensor([True]).numpy().dtype == np.bool_
    assert dg.zeros(0, 3).numpy().shape == (0, 3)
    assert np.asarray(dg.ones(2, dtype=dg.float16)).dtype == np.float16
    with pytest.raises(RuntimeError, match="requires grad"):
        dg.ones(2, requires_grad=True).numpy()
    with pytest.raises(TypeError, match="BFloat16"):
        dg.ones(2, dtype=dg.bfloat16).numpy()


# --- metadata, repr, conversions ------------------------------------------------------------------------------------
def test_metadata():
    t = dg.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4) and isinstance(t.shape, tuple) and isinstance(t.shape, dg.Size)
    assert repr(t.shape) == "dygrad.Size([2, 3, 4])"
    assert t.ndim == 3 and t.dim() == 3 and t.numel() == 24 and t.size(1) == 3 and t.size(-1) == 4
    assert t.stride() == (12, 4, 1) and t.is_contiguous()
    p = t.permute(2, 0, 1)
    assert not p.is_contiguous() and p.contiguous().is_contiguous()
    assert t.contiguous() is t
    assert len(t) == 2 and t.element_size() == 4 and t.device == "cpu"


@pytest.mark.parametrize("data,dtype", [
    ([1.0, 2.0, 3.0], "float32"), ([[1.5, 2.25], [3.0, 4.0]], "float32"), ([1, 2, 3], "int64"),
    ([True, False], "bool"), ([1.0, 2.5], "float64"), (3.5, "float32"), ([[1, 2], [3, 4]], "int32"),
    ([], "float32"), ([0.5, -1.25, 100.0], "float32"),
])
def test_repr_matches_torch(data, dtype):
    ours = repr(dg.tensor(data, dtype=getattr(dg, dtype)))
    theirs = repr(torch.tensor(data, dtype=getattr(torch, dtype))).replace("torch.", "dygrad.")
    assert ours == theirs
    assert str(dg.tensor(data, dtype=getattr(dg, dtype))) == ours


def test_repr_with_autograd():
    leaf = dg.tensor([1.0, 2.0], requires_grad=True)
    assert repr(leaf) == repr(torch.tensor([1.0, 2.0], requires_grad=True))
    assert "grad_fn=<AddBackward0>" in repr(leaf + leaf)


def test_item_tolist_and_python_numbers():
    assert dg.tensor(2.5).item() == 2.5 and isinstance(dg.tensor(2).item(), int)
    assert dg.tensor(True).item() is True
    assert float(dg.tensor([3.0])) == 3.0 and int(dg.tensor(7)) == 7 and bool(dg.tensor(1))
    assert [0, 1, 2][dg.tensor(1)] == 1
    big = 2**62 + 1
    assert dg.tensor([big]).tolist() == [big]
    assert dg.tensor([[1, 2], [3, 4]]).t().tolist() == [[1, 3], [2, 4]]


def test_conversions():
    t = dg.tensor([1.7, -2.2])
    assert t.double().dtype is dg.float64 and t.half().dtype is dg.float16 and t.bfloat16().dtype is dg.bfloat16
    assert t.long().tolist() == torch.tensor([1.7, -2.2]).long().tolist()
    assert t.int().dtype is dg.int32 and t.bool().tolist() == [True, True]
    assert t.to(dg.float64).dtype is dg.float64 and t.to(dg.ones(1, dtype=dg.int64)).dtype is dg.int64
    assert t.to("cpu") is not None and t.to(dg.float32).data_ptr() == t.data_ptr()
    assert t.float().data_ptr() == t.data_ptr()  # no copy when the dtype already matches
    assert t.to(dg.float32, copy=True).data_ptr() != t.data_ptr()
    c = t.clone()
    assert c.data_ptr() != t.data_ptr() and c.tolist() == t.tolist()


# --- factories ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["zeros", "ones", "empty"])
def test_sized_factories(name):
    for args in [(2, 3), ((2, 3),), ([2, 3],), ((),)]:
        ours, theirs = getattr(dg, name)(*args), getattr(torch, name)(*args)
        assert tuple(ours.shape) == tuple(theirs.shape) and dtype_name(ours.dtype) == dtype_name(theirs.dtype)
        if name != "empty":
            assert ours.tolist() == theirs.tolist()
    t = getattr(dg, name)(2, dtype=dg.float64, requires_grad=True)
    assert t.dtype is dg.float64 and t.requires_grad and t.is_leaf
    assert getattr(dg, name)(size=(1, 2)).shape == (1, 2)


@pytest.mark.parametrize("value", [3, 2.5, True])
def test_full_infers_dtype_from_value(value):
    ours, theirs = dg.full((2, 2), value), torch.full((2, 2), value)
    assert dtype_name(ours.dtype) == dtype_name(theirs.dtype) and ours.tolist() == theirs.tolist()


def test_like_factories():
    base = dg.ones(2, 3, dtype=dg.float64)
    assert dg.zeros_like(base).dtype is dg.float64 and dg.zeros_like(base).tolist() == [[0.0] * 3] * 2
    assert dg.ones_like(base, dtype=dg.int32).tolist() == [[1] * 3] * 2
    assert dg.full_like(base, 7).tolist() == [[7.0] * 3] * 2
    assert dg.empty_like(base).shape == (2, 3)
    assert dg.zeros_like(base, requires_grad=True).requires_grad


# --- views and reductions ---------------------------------------------------------------------------------------------
def test_views_match_numpy():
    array = np.arange(24.0).reshape(2, 3, 4)
    t = dg.tensor(array)
    assert t.view(6, 4).tolist() == array.reshape(6, 4).tolist()
    assert t.view(-1).tolist() == array.reshape(-1).tolist()
    assert t.reshape((4, -1)).tolist() == array.reshape(4, -1).tolist()
    assert dg.reshape(t, (24,)).tolist() == array.reshape(24).tolist()
    assert t.permute(2, 0, 1).tolist() == array.transpose(2, 0, 1).tolist()
    assert dg.permute(t, (1, 0, 2)).tolist() == array.transpose(1, 0, 2).tolist()
    assert t.transpose(0, 2).tolist() == array.swapaxes(0, 2).tolist()
    assert t.permute(2, 0, 1).reshape(4, 6).tolist() == array.transpose(2, 0, 1).reshape(4, 6).tolist()
    row = dg.tensor([1.0, 2.0, 3.0])
    assert row.expand(2, 3).tolist() == [[1.0, 2.0, 3.0]] * 2 and row.expand(2, 3).stride() == (0, 1)
    assert dg.tensor([[1.0], [2.0]]).expand(-1, 2).tolist() == [[1.0, 1.0], [2.0, 2.0]]
    m = dg.tensor([[1, 2, 3], [4, 5, 6]])
    assert m.t().tolist() == [[1, 4], [2, 5], [3, 6]] and m.T.tolist() == m.t().tolist()
    assert m.t().data_ptr() == m.data_ptr()


@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 2), [1, 2]])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_match_numpy(dim, keepdim):
    array = np.random.default_rng(0).standard_normal((3, 4, 5))
    t = dg.tensor(array)
    axis = tuple(dim) if isinstance(dim, list) else dim
    kwargs = {} if dim is None else {"dim": dim, "keepdim": keepdim}
    np.testing.assert_allclose(np.array(t.sum(**kwargs).tolist()), array.sum(axis=axis, keepdims=keepdim and dim is not None), rtol=1e-12)
    np.testing.assert_allclose(np.array(dg.mean(t, **kwargs).tolist()), array.mean(axis=axis, keepdims=keepdim and dim is not None), rtol=1e-12)


def test_sum_dtypes():
    assert dg.tensor([1, 2, 3]).sum().dtype is dg.int64 and dg.tensor([True, True]).sum().item() == 2
    assert dg.tensor([1, 2], dtype=dg.int32).sum(dtype=dg.float64).dtype is dg.float64


# --- autograd -----------------------------------------------------------------------------------------------------------
def test_backward_and_accessors():
    x = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    assert x.is_leaf and x.grad is None and x.grad_fn is None
    y = (x * x).sum()
    assert not y.is_leaf and y.grad_fn.name() == "SumBackward0"
    y.backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]
    (x * 2.0).sum().backward()
    assert x.grad.tolist() == [4.0, 6.0, 8.0]  # accumulates
    x.grad = None
    (x * 3.0).backward(dg.ones(3))
    assert x.grad.tolist() == [3.0, 3.0, 3.0]
    d = x.detach()
    assert not d.requires_grad and d.data_ptr() == x.data_ptr()
    z = dg.zeros(2)
    assert z.requires_grad_() is z and z.requires_grad
    z.requires_grad = False
    assert not z.requires_grad


def test_retain_graph_and_autograd_grad():
    x = dg.tensor([1.0, 2.0], dtype=dg.float64, requires_grad=True)
    y = (x * x * x).sum()
    (g,) = dg.autograd.grad(y, x, retain_graph=True)
    assert g.tolist() == [3.0, 12.0] and x.grad is None
    y.backward()
    assert x.grad.tolist() == [3.0, 12.0]
    (g2,) = dg.autograd.grad((x * x).sum(), [x], create_graph=True)
    (gg,) = dg.autograd.grad(g2.sum(), x)
    assert gg.tolist() == [2.0, 2.0]


def test_no_grad_and_enable_grad():
    x = dg.ones(2, requires_grad=True)
    with dg.no_grad():
        assert not dg.is_grad_enabled()
        assert not (x * 2).requires_grad
        with dg.enable_grad():
            assert (x * 2).requires_grad
    assert dg.is_grad_enabled() and (x * 2).requires_grad

    @dg.no_grad()
    def f(t):
        return t * 2

    @dg.no_grad
    def g(t):
        return t * 2

    assert not f(x).requires_grad and not g(x).requires_grad and dg.is_grad_enabled()
    dg.set_grad_enabled(False)
    assert not dg.is_grad_enabled()
    dg.set_grad_enabled(True)
    with dg.set_grad_enabled(False):
        assert not dg.is_grad_enabled()
    assert dg.is_grad_enabled()


# --- runtime ------------------------------------------------------------------------------------------------------------
def test_context_round_trip():
    original = dg.get_context()
    assert isinstance(original.num_threads, int) and original.num_threads >= 1
    try:
        dg.set_context(deterministic=True)
        assert dg.get_context().deterministic and dg.get_context().num_threads == original.num_threads
        dg.set_context(synchronize=True)
        assert dg.get_context().synchronize
        assert (dg.ones(3) * 2.0).tolist() == [2.0, 2.0, 2.0]
        dg.set_context(synchronize=False, inline_small_ops=not original.inline_small_ops)
        assert dg.get_context().inline_small_ops == (not original.inline_small_ops)
        assert (dg.ones(3) * 2.0).tolist() == [2.0, 2.0, 2.0]
    finally:
        dg.set_context(original)
    assert dg.get_context() == original
    with pytest.raises(TypeError):
        dg.set_context(deterministic="yes")
    with pytest.raises(TypeError):
        dg.set_context(inline_small_ops=1)


def test_memory_statistics():
    dg.synchronize()
    before = dg.memory_allocated()
    t = dg.empty(1000, dtype=dg.float64)
    assert dg.memory_allocated() == before + 8000
    assert dg.max_memory_allocated() >= before + 8000
    assert dg.memory_reserved() >= dg.memory_allocated()
    del t
    dg.synchronize()
    assert dg.memory_allocated() == before
    dg.reset_peak_memory_stats()
    assert dg.max_memory_allocated() == dg.memory_allocated()
    dg.empty_cache()
    assert dg.memory_stats()["allocated_bytes"] == dg.memory_allocated()


def test_manual_seed_and_synchronize():
    dg.manual_seed(1234)
    assert dg.initial_seed() == 1234
    dg.synchronize()


def test_call_site_is_this_line():
    file, function, line = dg._C._current_call_site()
    assert file.endswith("test_tensor.py") and function == "test_call_site_is_this_line" and line > 0


def test_python_subclass_for_parameters():
    class Parameter(dg.Tensor):
        pass

    data = dg.ones(2, 3)
    p = dg.Tensor._make_subclass(Parameter, data, True)
    assert isinstance(p, Parameter) and isinstance(p, dg.Tensor) and dg.is_tensor(p)
    assert p.requires_grad and p.is_leaf and p.data_ptr() == data.data_ptr()
    out = p * 2.0 + p
    assert type(out) is dg.Tensor and out.requires_grad
    out.sum().backward()
    assert p.grad.tolist() == [[3.0] * 3] * 2
    with pytest.raises(RuntimeError, match="leaf"):
        p += 1  # in place on a leaf that requires grad is refused, as in torch
    alias = p
    with dg.no_grad():  # ... but allowed under no_grad (optimizer updates)
        p -= 1.0
    assert p is alias and type(p) is Parameter and p.tolist() == [[0.0] * 3] * 2


def test_tensors_hash_by_identity():
    a, b = dg.ones(1), dg.ones(1)
    assert len({a, b, a}) == 2 and {a: 1}[a] == 1


def test_leaving_synchronize_mode_keeps_the_stream_consistent():
    # Regression: a Task run inline in synchronize mode was briefly visible to the stream worker as queued,
    # which then ran the empty ring slot (a crash in a later op).
    original = dg.get_context()
    for _ in range(50):
        dg.set_context(synchronize=True)
        (dg.ones(3) * 2.0).tolist()
        dg.set_context(synchronize=False)
        p = dg.ones(2, 3, requires_grad=True)
        (p * 2.0 + p).sum().backward()
        assert p.grad.tolist() == [[3.0] * 3] * 2
    dg.set_context(original)


def test_data_property():
    w = dg.ones(2, 3, requires_grad=True)
    d = w.data
    assert not d.requires_grad and d.data_ptr() == w.data_ptr()
    w.data = dg.zeros(3)
    assert w.shape == (3,) and w.tolist() == [0.0, 0.0, 0.0] and w.requires_grad and w.is_leaf


def test_changing_the_thread_count():
    # Regression: a pool helper that started after stop_helpers() bumped the generation waited forever.
    original = dg.get_context()
    try:
        for n in (1, 3, 2):
            dg.set_context(num_threads=n)
            assert dg.get_context().num_threads == n
            assert (dg.ones(100_000) * 2.0).sum().item() == 200_000.0
    finally:
        dg.set_context(original)
    assert dg.get_context().num_threads == original.num_threads


def test_deepcopy_and_pickle():
    import copy
    import pickle

    class Parameter(dg.Tensor):
        pass

    p = dg.Tensor._make_subclass(Parameter, dg.tensor([1.0, 2.0]), True)
    q = copy.deepcopy(p)
    assert type(q) is Parameter and q.requires_grad and q.data_ptr() != p.data_ptr() and q.tolist() == [1.0, 2.0]
    t = dg.tensor([[1, 2], [3, 4]]).t()
    assert copy.deepcopy(t).tolist() == [[1, 3], [2, 4]]
    for original in (t, dg.tensor([1.5, 2.5], dtype=dg.float64, requires_grad=True), dg.ones(2, dtype=dg.bfloat16)):
        restored = pickle.loads(pickle.dumps(original))
        assert restored.dtype is original.dtype and restored.tolist() == original.tolist()
        assert restored.requires_grad == original.requires_grad
    with pytest.raises(RuntimeError, match=r"\[tensor\] device cuda:0 is not available"):
        dg.tensor([1.0], device="cuda")


# --- the tensor surface of the PyTorch-API issue (13): device, conversions, new_*, Size -------------------------
def test_device_objects_and_tensor_device():
    for lib in (dg, torch):
        x = lib.ones(2)
        assert x.device == lib.device("cpu") and x.device.type == "cpu" and x.device.index is None
        assert str(x.device) == "cpu" and repr(x.device) == "device(type='cpu')"
        assert lib.device("cpu", 0).index == 0 and repr(lib.device("cpu", 0)) == "device(type='cpu', index=0)"
        assert {x.device: 1}[lib.device("cpu")] == 1
        assert x.is_cpu and not x.is_cuda and x.get_device() == -1
    assert isinstance(dg.ones(2).device, dg.device)
    # Difference from torch (docs/tensor.md): dygrad's device is a str, so it also equals "cpu".
    assert dg.ones(2).device == "cpu"


def test_to_device_dtype_other_and_flags_match_torch():
    for lib in (dg, torch):
        x = lib.tensor([1.5, -2.0])
        cpu = lib.device("cpu")
        assert x.to(cpu) is x and x.to("cpu") is x and x.to(lib.float32) is x and x.cpu() is x
        assert x.to(cpu, lib.float64).dtype == lib.float64
        assert x.to(lib.ones(1, dtype=lib.float16)).dtype == lib.float16
        assert x.to(device=cpu, dtype=lib.int64).tolist() == [1, -2]
        assert x.to("cpu", non_blocking=True) is x
        copied = x.to(lib.float32, copy=True)
        assert copied is not x and copied.tolist() == x.tolist()
        assert x.to(lib.float64, non_blocking=True, copy=True).dtype == lib.float64
        assert x.to(lib.float32, memory_format=lib.preserve_format if lib is torch else None) is x
        assert lib.zeros(2).copy_(x, non_blocking=True).tolist() == x.tolist()
        assert x.type(lib.float64).dtype == lib.float64 and x.type(lib.float32) is x
    assert dg.ones(1).type() == "dygrad.FloatTensor" and torch.ones(1).type() == "torch.FloatTensor"
    assert dg.ones(1).type("torch.DoubleTensor").dtype == dg.float64
    with pytest.raises(RuntimeError, match=r"\[to\] device cuda:0 is not available"):
        dg.ones(1).to("cuda")
    with pytest.raises(RuntimeError, match="built without the cuda backend|cuda:0 is not available"):
        dg.ones(1).cuda()


def test_pin_memory_without_an_accelerator_raises_as_torchs():
    # A fresh process: no device backend is up (another test module may have brought the test device up here).
    code = """if True:
        import torch, dygrad as dg
        def outcome(f):
            try:
                return ("ok", bool(f().is_pinned()))
            except RuntimeError as e:
                return ("RuntimeError", "accelerator" in str(e))
        for make in (lambda lib: lib.ones(3).pin_memory(), lambda lib: lib.ones(3, pin_memory=True),
                     lambda lib: lib.empty(2, pin_memory=True), lambda lib: lib.tensor([1.0], pin_memory=True),
                     lambda lib: lib.randn(2, pin_memory=True)):
            assert outcome(lambda: make(dg)) == outcome(lambda: make(torch)) == ("RuntimeError", True)
        assert not dg.ones(3).is_pinned() and not torch.ones(3).is_pinned()
        assert dg.memory.host_memory_stats()["allocated_bytes"] == 0
        print("ok")
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_type_as_matches_torch():
    for lib in (dg, torch):
        i = lib.tensor([1, 2])
        f = lib.tensor([0.5], dtype=lib.float64)
        assert i.type_as(f).dtype == lib.float64 and i.type_as(f).tolist() == [1.0, 2.0]
        assert f.type_as(f) is f and f.type_as(i).tolist() == [0]
        x = lib.tensor([1.5, 2.5], requires_grad=True)
        y = x.type_as(f)
        y.sum().backward()
        assert x.grad.dtype == lib.float32 and x.grad.tolist() == [1.0, 1.0]


def test_view_as_expand_as_where_methods_match_torch():
    """Tensor.view_as / expand_as (views sharing storage, gradients through them) and Tensor.where(cond, other)."""
    for lib in (dg, torch):
        x = lib.arange(6.0).reshape(2, 3).requires_grad_()
        v = x.view_as(lib.zeros(3, 2))
        assert tuple(v.shape) == (3, 2) and v.data_ptr() == x.data_ptr()
        e = lib.tensor([1.0, 2.0, 3.0]).expand_as(x)
        assert tuple(e.shape) == (2, 3) and e.stride() == (0, 1)
        cond = x.detach() > 2
        w = x.where(cond, lib.tensor(-1.0))
        assert w.tolist() == [[-1.0, -1.0, -1.0], [3.0, 4.0, 5.0]]
        assert x.detach().where(cond, 0).tolist() == [[0.0, 0.0, 0.0], [3.0, 4.0, 5.0]]
        (v.sum() + (w * 2).sum()).backward()
        assert x.grad.tolist() == [[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]]
    with pytest.raises(RuntimeError, match=r"\[view\] shape '\(4,\)' is invalid for input of size 6"):
        dg.zeros(2, 3).view_as(dg.zeros(4))
    with pytest.raises(RuntimeError, match=r"expand"):
        dg.zeros(2, 3).expand_as(dg.zeros(3, 3))
    with pytest.raises(TypeError, match=r"\[view_as\] argument 'other'"):
        dg.zeros(2).view_as((2,))


@pytest.mark.parametrize("call", [
    lambda x: x.new_zeros(2, 3), lambda x: x.new_zeros((2, 3)), lambda x: x.new_zeros([4]),
    lambda x: x.new_ones(2, dtype=getattr(type(x).__module__.startswith("torch") and torch or dg, "int64")),
    lambda x: x.new_full((2, 2), 7), lambda x: x.new_full([3], 2.5), lambda x: x.new_zeros(x.size()),
    lambda x: x.new_empty(3, 1).shape, lambda x: x.new_empty((0,)).shape, lambda x: x.new_tensor([1, 2]),
    lambda x: x.new_ones(size=(2,)),
])
def test_new_factories_match_torch(call):
    for base_dtype in ("float64", "int32"):
        ours = call(dg.ones(1, dtype=getattr(dg, base_dtype)))
        theirs = call(torch.ones(1, dtype=getattr(torch, base_dtype)))
        if isinstance(theirs, torch.Size):
            assert tuple(ours) == tuple(theirs)
            continue
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        assert tuple(ours.shape) == tuple(theirs.shape) and ours.tolist() == theirs.tolist()


def test_new_factories_requires_grad_and_errors():
    for lib in (dg, torch):
        x = lib.ones(2, dtype=lib.float64)
        y = x.new_ones(2, requires_grad=True)
        assert y.requires_grad and y.is_leaf and y.dtype == lib.float64
        assert lib.ones(1, dtype=lib.int64).new_full((2,), 2.5).tolist() == [2, 2]
        with pytest.raises(TypeError):
            x.new_full(2, 3.0)  # size must be a sequence
        with pytest.raises(TypeError):
            x.new_zeros(2, bogus=1)


def test_like_and_new_factories_follow_the_input_device():
    """torch's rule: empty_like/zeros_like/ones_like/full_like/rand_like/randn_like and new_* make their tensor on the
    input's device unless device= says otherwise; the plain factories honor device=."""
    dg.testing.enable_test_device(1)
    x = dg.arange(6.0).reshape(2, 3).to("test:0")
    made = [dg.empty_like(x), dg.zeros_like(x), dg.ones_like(x), dg.full_like(x, 2.5), dg.rand_like(x),
            dg.randn_like(x), x.new_empty(2), x.new_zeros(2), x.new_ones(2), x.new_full((2,), 1.5)]
    assert [str(t.device) for t in made] == ["test:0"] * len(made)
    assert dg.zeros_like(x, device="cpu").device == "cpu" and x.new_ones(2, device="cpu").device == "cpu"
    assert dg.full_like(x, 2.5).cpu().tolist() == [[2.5] * 3] * 2
    made = [dg.zeros(2, device="test:0"), dg.full((2,), 3, device="test:0"), dg.arange(4, device="test:0"),
            dg.linspace(0, 1, 3, device="test:0"), dg.rand(2, device="test:0"), dg.randint(0, 5, (3,), device="test:0")]
    assert [str(t.device) for t in made] == ["test:0"] * len(made)
    assert made[2].cpu().tolist() == [0, 1, 2, 3] and made[3].cpu().tolist() == [0.0, 0.5, 1.0]
    with pytest.raises(TypeError, match=r"\[numpy\] can't convert test:0 device type tensor to numpy"):
        x.numpy()


def test_clamp_in_place_matches_torch():
    array = np.array([-2.0, -0.5, 0.3, 4.0])
    for args, kwargs in [((-1.0, 1.0), {}), ((), {"min": 0.0}), ((), {"max": 0.1})]:
        ours = dg.tensor(array).clamp_(*args, **kwargs)
        theirs = torch.tensor(array).clamp_(*args, **kwargs)
        assert ours.tolist() == theirs.tolist()
    x = dg.tensor(array)
    assert x.clamp_(min=0.0) is x


def test_size_arithmetic_matches_torch():
    for lib in (dg, torch):
        s = lib.ones(2, 3, 4).size()
        assert isinstance(s, lib.Size) and s == (2, 3, 4) and s.numel() == 24
        for result, expected in [(s + (5,), (2, 3, 4, 5)), ((1,) + s, (1, 2, 3, 4)), (s[1:], (3, 4)),
                                 (s * 2, (2, 3, 4, 2, 3, 4)), (2 * s[:1], (2, 2)), (s + s[:1], (2, 3, 4, 2))]:
            assert isinstance(result, lib.Size) and tuple(result) == expected, (lib, result)
        assert s[-1] == 4 and isinstance(s[0], int)
        assert lib.Size([2, 3]).numel() == 6 and lib.Size([]).numel() == 1
    assert repr(dg.ones(2, 3).size()) == "dygrad.Size([2, 3])"
