"""complex64 and complex128 against torch 2.13 (docs/dtypes.md, "Complex"): the dtypes and their promotion, creation,
printing, NumPy, files, the views between a complex tensor and its float pairs, the composed arithmetic and its
gradients (torch's convention: dL/dre + i dL/dim), the LLaMA rotary embedding, and the clear refusal of every
other op."""
import io
import pickle

import numpy as np
import pytest
import torch

import dygrad as dg

REAL_NAMES = ["bool", "uint8", "int8", "int16", "uint16", "int32", "int64", "float16", "bfloat16", "float32",
              "float64", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"]
COMPLEX = ["complex64", "complex128"]
TOL = {"complex64": dict(rtol=2e-6, atol=2e-6), "complex128": dict(rtol=1e-13, atol=1e-13)}


def name_of(dtype):
    return str(dtype).split(".")[-1]


def values(n, seed=0, shape=None):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    return z.reshape(shape) if shape else z


def pair(z, dtype="complex64", requires_grad=False):
    """A NumPy complex array as a dygrad and a torch tensor of `dtype`."""
    d = dg.tensor(z, dtype=getattr(dg, dtype))
    t = torch.tensor(z, dtype=getattr(torch, dtype))
    if requires_grad:
        d.requires_grad_(True)
        t.requires_grad_(True)
    return d, t


def assert_same(d, t, **tol):
    assert name_of(d.dtype) == name_of(t.dtype), (d.dtype, t.dtype)
    assert tuple(d.shape) == tuple(t.shape)
    np.testing.assert_allclose(d.detach().numpy(), t.detach().resolve_conj().numpy(),
                               **(tol or TOL.get(name_of(t.dtype), {})))


# --- the dtypes ---------------------------------------------------------------------------------------------------
def test_dtype_objects_match_torch():
    for name in COMPLEX:
        ours, theirs = getattr(dg, name), getattr(torch, name)
        assert repr(ours) == repr(theirs).replace("torch", "dygrad")
        assert (ours.itemsize, ours.is_floating_point, ours.is_signed, ours.is_complex) == \
            (theirs.itemsize, theirs.is_floating_point, theirs.is_signed, theirs.is_complex)
        assert name_of(ours.to_real()) == name_of(theirs.to_real())
        assert ours.to_complex() is ours
        assert repr(dg.finfo(ours)) == repr(torch.finfo(theirs))
        assert pickle.loads(pickle.dumps(ours)) is ours
    assert dg.cfloat is dg.complex64 and dg.cdouble is dg.complex128
    assert dg.float32.to_complex() is dg.complex64 and dg.float64.to_complex() is dg.complex128
    assert not dg.float32.is_complex and dg.float32.to_real() is dg.float32


@pytest.mark.parametrize("c", COMPLEX)
def test_promote_types_with_every_dtype_as_torch(c):
    for other in REAL_NAMES + COMPLEX:
        try:
            expected = name_of(torch.promote_types(getattr(torch, c), getattr(torch, other)))
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match="Promotion for"):
                dg.promote_types(getattr(dg, c), getattr(dg, other))
            assert "Promotion for" in str(e)
            continue
        assert name_of(dg.promote_types(getattr(dg, c), getattr(dg, other))) == expected, other
        assert name_of(dg.promote_types(getattr(dg, other), getattr(dg, c))) == expected, other


def test_result_type_tiers_as_torch():
    cases = [("float32", (3,), "complex128", ()), ("float64", (3,), "complex64", ()), ("int64", (3,), "complex128", ()),
             ("float32", (), "complex128", ()), ("complex64", (3,), "float64", (3,)), ("complex64", (3,), "float64", ()),
             ("bool", (3,), "complex64", (3,)), ("int32", (3,), "complex64", (3,))]
    for a, sa, b, sb in cases:
        d = dg.zeros(sa, dtype=getattr(dg, a)) + dg.zeros(sb, dtype=getattr(dg, b))
        t = torch.zeros(sa, dtype=getattr(torch, a)) + torch.zeros(sb, dtype=getattr(torch, b))
        assert name_of(d.dtype) == name_of(t.dtype), (a, sa, b, sb)


def subtract_from_number(x):
    return (0.1 - 2j) - x


def test_python_complex_scalars_promote_as_torch():
    for name in ["float32", "float64", "int64", "int32", "bool", "complex64", "complex128"]:
        d, t = dg.ones(3, dtype=getattr(dg, name)), torch.ones(3, dtype=getattr(torch, name))
        for fn in (lambda x: x + (0.1 + 2j), subtract_from_number, lambda x: x * 1j, lambda x: 1j / (x + 1),
                   lambda x: dg.add(x, 2j) if isinstance(x, dg.Tensor) else torch.add(x, 2j)):
            if name == "bool" and fn is subtract_from_number:
                continue  # torch refuses `number - bool tensor`; dygrad refuses only bool - bool (not complex's)
            assert_same(fn(d), fn(t))
    d, t = dg.ones((), dtype=dg.float32), torch.ones((), dtype=torch.float32)
    assert name_of((d + 1j).dtype) == name_of((t + 1j).dtype) == "complex64"
    d, t = dg.ones(2, dtype=dg.float64), torch.ones(2, dtype=torch.float64)
    assert_same(d + (0.1 + 0.2j), t + (0.1 + 0.2j))  # computed with the full float64 value, as torch
    d, t = pair(values(4))
    d *= 2 - 1j
    t *= 2 - 1j
    assert_same(d, t)


# --- creation, printing, NumPy, files ---------------------------------------------------------------------------
def test_tensor_infers_complex_and_reads_back_python_complex():
    d, t = dg.tensor([1 + 2j, 3.5, -1j]), torch.tensor([1 + 2j, 3.5, -1j])
    assert d.dtype is dg.complex64 and d.is_complex() and dg.is_complex(d) and not dg.zeros(1).is_complex()
    assert d.tolist() == t.tolist() and all(isinstance(v, complex) for v in d.tolist())
    assert d[0].item() == t[0].item() == 1 + 2j and isinstance(d[1].item(), complex)
    assert dg.tensor([[1, 2j]], dtype=dg.complex128).tolist() == [[1 + 0j, 2j]]
    assert dg.tensor([1.5, 2.0], dtype=dg.complex64).tolist() == [1.5 + 0j, 2 + 0j]
    assert dg.tensor(2 - 3j).item() == 2 - 3j


@pytest.mark.parametrize("c", COMPLEX)
def test_factories(c):
    for fn in (lambda m: m.zeros(2, 3, dtype=getattr(m, c)), lambda m: m.ones(4, dtype=getattr(m, c)),
               lambda m: m.full((2, 2), 1.5, dtype=getattr(m, c)), lambda m: m.full((3,), 2 - 1j, dtype=getattr(m, c)),
               lambda m: m.zeros_like(m.ones(3, dtype=getattr(m, c))), lambda m: m.full((2,), 3j)):
        assert_same(fn(dg), fn(torch))
    assert dg.empty(2, 3, dtype=getattr(dg, c)).dtype is getattr(dg, c)
    dg.manual_seed(0)
    r = dg.randn(20000, dtype=getattr(dg, c))
    assert r.dtype is getattr(dg, c)
    parts = dg.view_as_real(r).numpy()
    assert abs(parts.mean()) < 0.02 and abs(parts.var(axis=0) - 0.5).max() < 0.03  # each part N(0, 1/2), as torch


def test_repr_as_torch():
    arrays = [np.array([1 + 2j, 3.5 - 1e-3j]), np.array([[0j, 1j], [2, -3 - 4j]]), np.array(1 + 2j),
              np.array([1e-5 + 1e9j]), np.array([np.nan + 1j, 1 + np.inf * 1j]), np.zeros((0, 2), dtype=complex)]
    for z in arrays:
        for c in COMPLEX:
            d, t = pair(z, c)
            assert repr(d).replace("dygrad.", "torch.") == repr(t), (z, c)
    d, t = pair(values(3), requires_grad=True)
    assert repr(d) == repr(t)


@pytest.mark.parametrize("c", COMPLEX)
def test_numpy_both_ways(c):
    z = values(6, shape=(2, 3)).astype(c)
    d = dg.from_numpy(z)
    assert d.dtype is getattr(dg, c) and d.tolist() == z.tolist()
    z[0, 0] = 7 + 7j  # shared memory
    assert d[0, 0].item() == 7 + 7j
    back = d.numpy()
    assert back.dtype == np.dtype(c)
    np.testing.assert_array_equal(back, z)
    np.testing.assert_array_equal(np.asarray(dg.tensor(z).t()), z.T)
    assert pickle.loads(pickle.dumps(dg.tensor(z))).tolist() == z.tolist()


@pytest.mark.parametrize("c", COMPLEX)
def test_save_load_with_torch(c):
    z = values(6, shape=(3, 2))
    d, t = pair(z, c)
    buffer = io.BytesIO()
    dg.save({"z": d, "v": d.t()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["z"].dtype == getattr(torch, c) and torch.equal(loaded["z"], t) and torch.equal(loaded["v"], t.t())
    buffer = io.BytesIO()
    torch.save({"z": t}, buffer)
    buffer.seek(0)
    ours = dg.load(buffer)["z"]
    assert ours.dtype is getattr(dg, c) and ours.tolist() == t.tolist()


def test_safetensors_c64_both_ways(tmp_path):
    from safetensors.torch import load_file, save_file
    t = torch.tensor(values(5), dtype=torch.complex64)
    save_file({"z": t}, str(tmp_path / "t.safetensors"))
    ours = dg.load(str(tmp_path / "t.safetensors"))["z"]
    assert ours.dtype is dg.complex64 and ours.tolist() == t.tolist()
    from dygrad.safetensors_io import save_file as dg_save_file
    dg_save_file({"z": ours.numpy()}, str(tmp_path / "d.safetensors"))
    assert torch.equal(load_file(str(tmp_path / "d.safetensors"))["z"], t)


# --- views ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("c", COMPLEX)
def test_view_as_real_and_complex_are_views_with_torch_strides(c):
    d, t = pair(values(12, shape=(3, 4)), c)
    for fn in (lambda m, x: m.view_as_real(x), lambda m, x: m.view_as_real(x.t()),
               lambda m, x: m.view_as_real(x[1:, ::2]), lambda m, x: x.real, lambda m, x: x.imag,
               lambda m, x: x.t().imag, lambda m, x: m.view_as_complex(m.view_as_real(x)[:, 1:]),
               lambda m, x: m.real(x), lambda m, x: m.imag(x[2])):
        dv, tv = fn(dg, d), fn(torch, t)
        assert tuple(dv.stride()) == tuple(tv.stride()) and dv.storage_offset() == tv.storage_offset()
        assert_same(dv, tv)
    r = dg.view_as_real(d)
    r[0, 0, 1] = 42.0  # writes go through
    assert d[0, 0].item().imag == 42.0
    d.real[1] = 5.0
    d.imag = dg.zeros(3, 4)
    t.real[1] = 5.0
    t.imag = torch.zeros(3, 4)
    t[0, 0] = d[0, 0].item()
    assert_same(d, t)
    x = dg.zeros(4, 2)
    z = dg.view_as_complex(x)
    z[1] = 1 + 2j  # basic indexing: a copy into the view
    z[2:] = 3.0
    assert x.tolist() == [[0.0, 0.0], [1.0, 2.0], [3.0, 0.0], [3.0, 0.0]]


def test_view_as_complex_errors_as_torch():
    bad = [dg.zeros(3), dg.zeros(3, 2).t(), dg.zeros(4, 3)[:, :2], dg.zeros(2, 2, dtype=dg.int32),
           dg.zeros(7)[1:].view(3, 2), dg.zeros(()), dg.zeros(3, 2, dtype=dg.float16)]
    for x in bad:
        with pytest.raises(RuntimeError, match=r"\[view_as_complex\]"):
            dg.view_as_complex(x)
    with pytest.raises(RuntimeError, match=r"\[view_as_real\] is only supported for complex"):
        dg.view_as_real(dg.zeros(2))
    with pytest.raises(RuntimeError, match=r"\[imag\] is not implemented for tensors with non-complex"):
        dg.zeros(2).imag
    x = dg.zeros(2)
    assert x.real is not None and x.real.data_ptr() == x.data_ptr()


# --- arithmetic ---------------------------------------------------------------------------------------------------
BINARY = {
    "add": lambda m, a, b: a + b, "sub": lambda m, a, b: a - b, "mul": lambda m, a, b: a * b,
    "div": lambda m, a, b: a / b, "add_alpha": lambda m, a, b: m.add(a, b, alpha=3), "sub_fn": lambda m, a, b: m.sub(a, b),
}


@pytest.mark.parametrize("c", COMPLEX)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_broadcast_and_promote_as_torch(c, op):
    fn = BINARY[op]
    za, zb = values(12, 1, (3, 4)), values(4, 2)
    da, ta = pair(za, c)
    db, tb = pair(zb, c)
    assert_same(fn(dg, da, db), fn(torch, ta, tb))
    assert_same(fn(dg, da.t(), db[:3]), fn(torch, ta.t(), tb[:3]))
    for real in ("float32", "float64", "int64", "bool"):
        if real == "bool" and op in ("sub", "sub_fn"):
            continue  # torch refuses any subtraction with a bool tensor (dygrad: only bool - bool)
        r = np.arange(1, 5)
        dr, tr = dg.tensor(r, dtype=getattr(dg, real)), torch.tensor(r, dtype=getattr(torch, real))
        assert_same(fn(dg, da, dr), fn(torch, ta, tr))
        assert_same(fn(dg, dr, da), fn(torch, tr, ta))
    for s in (2, -1.5):
        assert_same(fn(dg, da, s), fn(torch, ta, s))
        assert_same(fn(dg, s, da) if op not in ("add_alpha", "sub_fn") else fn(dg, da, s),
                    fn(torch, s, ta) if op not in ("add_alpha", "sub_fn") else fn(torch, ta, s))


@pytest.mark.parametrize("c", COMPLEX)
def test_unary_and_other_ops_as_torch(c):
    z = values(12, 3, (3, 4))
    z[0, 0] = 0
    d, t = pair(z, c)
    for fn in (lambda m, x: -x, lambda m, x: x.abs(), lambda m, x: m.abs(x), lambda m, x: x.angle(),
               lambda m, x: m.exp(x), lambda m, x: x.conj(), lambda m, x: m.conj_physical(x), lambda m, x: x.sum(),
               lambda m, x: x.sum(-1), lambda m, x: x.sum(0, keepdim=True), lambda m, x: x.mean(), lambda m, x: x.mean(1),
               lambda m, x: x.reshape(2, 6), lambda m, x: x.view(12), lambda m, x: x.flatten(), lambda m, x: x.unsqueeze(1),
               lambda m, x: x.transpose(0, 1).contiguous(), lambda m, x: x.clone(), lambda m, x: x[1:, ::2],
               lambda m, x: x[m.tensor([2, 0])], lambda m, x: x[x.real > 0], lambda m, x: m.cat([x, x], 1),
               lambda m, x: m.stack([x, x]), lambda m, x: x.to(getattr(m, "complex128")),
               lambda m, x: x.to(getattr(m, "complex64")), lambda m, x: x.type_as(m.zeros(1, dtype=getattr(m, "complex128"))),
               lambda m, x: x == x[0], lambda m, x: x != x.conj(), lambda m, x: m.where(x.real > 0, x, x * 2),
               lambda m, x: (x * 0 + 1j) == 1j, lambda m, x: 1j != x,
               lambda m, x: x.resolve_conj(), lambda m, x: m.complex(x.real, x.imag), lambda m, x: m.polar(x.abs(), x.angle()),
               lambda m, x: m.isnan(x / x), lambda m, x: m.isfinite(x / x.real)):
        assert_same(fn(dg, d), fn(torch, t))
    assert not d.conj().is_conj() and not dg.is_conj(d)
    r = dg.tensor([-2.0, 0.0, 3.0, float("nan")])
    np.testing.assert_array_equal(r.angle().numpy(), torch.tensor([-2.0, 0.0, 3.0, float("nan")]).angle().numpy())
    assert name_of(d.abs().dtype) == name_of(t.abs().dtype) and name_of(d.real.float().dtype) == "float32"


def test_inplace_and_out_forms():
    d, t = pair(values(6, 4, (2, 3)))
    db, tb = pair(values(3, 5))
    for fn in (lambda x, y: x.add_(y), lambda x, y: x.mul_(y), lambda x, y: x.sub_(y, alpha=2), lambda x, y: x.div_(y),
               lambda x, y: x.mul_(2.0)):
        fn(d, db)
        fn(t, tb)
        assert_same(d, t, rtol=1e-5, atol=1e-6)
    out = dg.empty(2, 3, dtype=dg.complex64)
    dg.mul(d, db, out=out)
    assert_same(out, t * tb, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="can't be cast"):
        dg.zeros(3).add_(dg.ones(3, dtype=dg.complex64))


def test_conversions_to_and_from_real():
    d, t = pair(values(4, 6))
    for name in ("float32", "float64", "int64"):
        with _no_check():
            ours, theirs = d.to(getattr(dg, name)), t.to(getattr(torch, name))
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    r = np.array([1.5, -2.0, 3.25])
    assert_same(dg.tensor(r).to(dg.complex64), torch.tensor(r).to(torch.complex64))
    assert_same(dg.tensor([3, -1]).to(dg.complex128), torch.tensor([3, -1]).to(torch.complex128))


def test_module_casts_treat_complex_buffers_as_torch():
    # Module.to(dtype) casts floating and complex tensors (a complex buffer cast to a real dtype keeps its real
    # part); double/float/half/bfloat16 cast the floating ones only; to(complex dtype) makes the floats complex.
    def build(m):
        lin = m.nn.Linear(2, 2)
        with m.no_grad():
            lin.weight.copy_(m.tensor([[1.0, 2.0], [3.0, 4.0]]))
            lin.bias.copy_(m.tensor([0.5, -0.25]))
        lin.register_buffer("freqs_cis", m.complex(m.tensor([0.5, 0.25, -1.0]), m.tensor([0.75, -2.0, 0.125])))
        return lin

    casts = [lambda m, mod: mod.to(m.float64), lambda m, mod: mod.to(dtype=m.bfloat16), lambda m, mod: mod.double(),
             lambda m, mod: mod.half(), lambda m, mod: mod.bfloat16(), lambda m, mod: mod.float(),
             lambda m, mod: mod.to(m.complex128), lambda m, mod: mod.to("cpu", m.float16)]
    for cast in casts:
        with _no_check():
            ours, theirs = cast(dg, build(dg)), cast(torch, build(torch))
        for name in ("weight", "bias", "freqs_cis"):
            d, t = getattr(ours, name), getattr(theirs, name)
            assert name_of(d.dtype) == name_of(t.dtype), (name, d.dtype, t.dtype)
            np.testing.assert_array_equal(d.detach().to(dg.float64 if not d.is_complex() else dg.complex128).numpy(),
                                          t.detach().to(torch.float64 if not t.is_complex() else torch.complex128)
                                          .numpy())
    for m in (dg, torch):
        with pytest.warns(UserWarning, match="Complex modules"):
            build(m).to(m.complex64)
        with pytest.raises(TypeError, match="floating point or complex"):
            build(m).to(m.int64)


class _no_check:  # torch warns on a complex-to-real cast (dygrad does not): nothing to check here
    def __enter__(self):
        import warnings
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *a):
        self._w.__exit__(*a)


# --- matmul and pow -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("c", COMPLEX)
@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)),
                                    ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((2, 3, 4), (2, 4, 5))])
def test_matmul_as_torch(c, shapes):
    (da, ta), (db, tb) = pair(values(int(np.prod(shapes[0])), 1, shapes[0]), c), \
        pair(values(int(np.prod(shapes[1])), 2, shapes[1]), c)
    assert_same(da @ db, ta @ tb, **({"rtol": 1e-5, "atol": 1e-5} if c == "complex64" else {}))
    if len(shapes[0]) == len(shapes[1]) == 3:
        assert_same(dg.bmm(da, db), torch.bmm(ta, tb), **({"rtol": 1e-5, "atol": 1e-5} if c == "complex64" else {}))
    if len(shapes[0]) == len(shapes[1]) == 2:
        assert_same(da.mm(db), ta.mm(tb), **({"rtol": 1e-5, "atol": 1e-5} if c == "complex64" else {}))


def test_matmul_of_complex_and_real_refuses_as_torch():
    d, t = pair(values(4, 3, (2, 2)))
    with pytest.raises((RuntimeError, TypeError)):
        t @ t.real
    with pytest.raises(TypeError, match=r"\[matmul\].*same dtype"):
        d @ d.real


@pytest.mark.parametrize("c", COMPLEX)
def test_pow_as_torch(c):
    (da, ta), (db, tb) = pair(values(12, 4, (3, 4)), c), pair(values(12, 5, (3, 4)), c)
    tol = {"rtol": 2e-5, "atol": 2e-5} if c == "complex64" else {"rtol": 1e-12, "atol": 1e-12}
    assert_same(da ** db, ta ** tb, **tol)
    for p in (2, 3, 0.5, -1, -2.5, 1, 0):
        assert_same(da ** p, ta ** p, **tol)
    assert_same(2.0 ** da, 2.0 ** ta, **tol)
    assert_same((-1.5) ** da, (-1.5) ** ta, **tol)
    assert_same(da.pow(db[0]), ta.pow(tb[0]), **tol)  # broadcast
    zero_d, zero_t = pair(np.zeros(3, dtype=np.complex128), c)
    assert_same(zero_d ** 2, zero_t ** 2)
    assert_same(zero_d ** 0.5, zero_t ** 0.5)
    assert_same(dg.exp(da), torch.exp(ta), **tol)


# --- other ops refuse complex tensors clearly ----------------------------------------------------------------
@pytest.mark.parametrize("call, name", [
    (lambda z: dg.relu(z), "relu"), (lambda z: z.sin(), "sin"), (lambda z: z.log(), "log"),
    (lambda z: dg.softmax(z, -1), "softmax"), (lambda z: z < z, "lt"), (lambda z: z.max(), "max|amax"),
    (lambda z: dg.sigmoid(z), "sigmoid"), (lambda z: z.cumsum(0), "cumsum"), (lambda z: dg.maximum(z, z), "maximum"),
    (lambda z: z.sqrt(), "sqrt"), (lambda z: dg.remainder(z, 2), "remainder"), (lambda z: z.tanh(), "tanh")])
def test_other_ops_refuse_complex_naming_op_and_dtype(call, name):
    z = dg.tensor([[1 + 1j, 2j], [3, 4 - 1j]])
    with pytest.raises((NotImplementedError, RuntimeError, TypeError),
                       match=rf"\[({name})\].*(ComplexFloat|complex64)"):
        call(z)


# --- autograd -------------------------------------------------------------------------------------------------
def test_abs_squared_gradient_is_2z_as_torch():
    d, t = pair(values(5, 7), requires_grad=True)
    (d.abs() ** 2).sum().backward()
    (t.abs() ** 2).sum().backward()
    assert_same(d.grad, t.grad, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d.grad.numpy(), 2 * d.detach().numpy(), rtol=1e-5)


GRAD_FUNCTIONS = {
    "mul": lambda m, a, b: (a * b).abs().sum(),
    "div": lambda m, a, b: m.view_as_real(a / b).pow(2).sum(),
    "add_sub": lambda m, a, b: m.view_as_real((a + b * 2) - a.conj() * 1j).sum(),
    "exp_angle": lambda m, a, b: (m.exp(a) * b).angle().sum(),
    "abs_mean": lambda m, a, b: (a.abs() * b.real).mean() + (a * b).mean().real,
    "polar": lambda m, a, b: m.view_as_real(m.polar(a.abs(), b.angle()) * a).sum(),
    "complex_views": lambda m, a, b: (m.complex(a.real * 2, b.imag) * a.imag).imag.sum() + a.real[0].sum(),
    "broadcast": lambda m, a, b: m.view_as_real(a * b[0] + b.sum(0)).pow(2).sum(),
    "neg_sum": lambda m, a, b: (-(a - b)).sum(0).abs().sum(),
    "matmul": lambda m, a, b: m.view_as_real(a @ b.t() + m.matmul(a[0], b.t())).pow(2).sum(),
    "bmm": lambda m, a, b: m.bmm(a.unsqueeze(0), b.t().unsqueeze(0)).abs().sum() + (a @ b[1]).real.sum(),
    "pow": lambda m, a, b: (a ** b).abs().sum() + m.view_as_real(a.pow(3) + a ** 2 + a ** 0.5).sum(),
    "rpow": lambda m, a, b: m.view_as_real(2.0 ** a + (-1.5) ** b).sum(),
}


@pytest.mark.parametrize("c", COMPLEX)
@pytest.mark.parametrize("name", sorted(GRAD_FUNCTIONS))
def test_gradients_match_torch(c, name):
    fn = GRAD_FUNCTIONS[name]
    da, ta = pair(values(6, 8, (2, 3)), c, requires_grad=True)
    db, tb = pair(values(6, 9, (2, 3)), c, requires_grad=True)
    fn(dg, da, db).backward()
    fn(torch, ta, tb).backward()
    tol = dict(rtol=1e-4, atol=1e-5) if c == "complex64" else dict(rtol=1e-10, atol=1e-12)
    assert_same(da.grad, ta.grad, **tol)
    assert_same(db.grad, tb.grad, **tol)


@pytest.mark.parametrize("name", sorted(GRAD_FUNCTIONS))
def test_gradients_match_float64_finite_differences(name):
    """Through real float64 leaves viewed as complex: the real gradient of the pairs is checked against central
    differences (dygrad's autograd of its own composition, independently of torch)."""
    fn = GRAD_FUNCTIONS[name]
    rng = np.random.default_rng(11)
    xa, xb = rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3, 2))

    def loss(a, b):
        return fn(dg, dg.view_as_complex(a), dg.view_as_complex(b))

    pa, pb = dg.tensor(xa, dtype=dg.float64, requires_grad=True), dg.tensor(xb, dtype=dg.float64, requires_grad=True)
    loss(pa, pb).backward()

    def value(a, b):
        return loss(dg.tensor(a, dtype=dg.float64), dg.tensor(b, dtype=dg.float64)).item()

    for k, (leaf, grad) in enumerate(((xa, pa.grad), (xb, pb.grad))):
        numeric = np.zeros_like(leaf)
        for i in np.ndindex(leaf.shape):
            step = np.zeros_like(leaf)
            step[i] = 1e-6
            args_plus, args_minus = [xa, xb], [xa, xb]
            args_plus[k], args_minus[k] = leaf + step, leaf - step
            numeric[i] = (value(*args_plus) - value(*args_minus)) / 2e-6
        np.testing.assert_allclose(grad.numpy(), numeric, rtol=1e-6, atol=1e-7)


def test_leaf_gradient_accumulates_and_grad_of_complex_output():
    d, t = pair(values(4, 12), requires_grad=True)
    for _ in range(2):
        (d * (1 + 2j)).abs().sum().backward()
        (t * (1 + 2j)).abs().sum().backward()
    assert_same(d.grad, t.grad, rtol=1e-5, atol=1e-6)
    z, tz = pair(values(3, 13), requires_grad=True)
    g = values(3, 14)
    (z * 2).backward(dg.tensor(g, dtype=dg.complex64))
    (tz * 2).backward(torch.tensor(g, dtype=torch.complex64))
    assert_same(z.grad, tz.grad)


# --- the LLaMA rotary embedding (the motivating program) ---------------------------------------------------------
def precompute_freqs_cis(m, dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (m.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = m.arange(end, device=freqs.device, dtype=m.float32)
    freqs = m.outer(t, freqs)
    return m.polar(m.ones_like(freqs), freqs)


def reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(m, xq, xk, freqs_cis):
    xq_ = m.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = m.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = m.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = m.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_llama_rotary_embedding_forward_and_backward_match_torch(dtype):
    B, T, H, D = 2, 5, 3, 8  # batch, time, heads, head dim
    rng = np.random.default_rng(21)
    q, k, g = (rng.standard_normal((B, T, H, D)).astype(np.float32) for _ in range(3))
    results = {}
    for m in (dg, torch):
        xq = m.tensor(q).to(getattr(m, dtype)).requires_grad_(True)
        xk = m.tensor(k).to(getattr(m, dtype)).requires_grad_(True)
        freqs_cis = precompute_freqs_cis(m, D, T * 2)[:T]  # the slice LLaMA takes at a start position
        assert name_of(freqs_cis.dtype) == "complex64"
        oq, ok = apply_rotary_emb(m, xq, xk, freqs_cis)
        assert name_of(oq.dtype) == dtype and tuple(oq.shape) == (B, T, H, D)
        ((oq.float() * m.tensor(g)).sum() + (ok.float() ** 2).sum()).backward()
        results[m] = [oq.detach().float().numpy(), ok.detach().float().numpy(), xq.grad.float().numpy(),
                      xk.grad.float().numpy(), freqs_cis.detach().resolve_conj().numpy()]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-2, atol=1e-2)
    for ours, theirs in zip(results[dg], results[torch]):
        np.testing.assert_allclose(ours, theirs, **tol)
