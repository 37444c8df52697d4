"""Linear-algebra bindings against torch: matmul (and @, @=), mm, bmm, outer, linear; grads and errors."""
import os

import numpy as np
import pytest
import torch

import dygrad as dg
from peer import assert_matches, tensors_from

rng = np.random.default_rng(4)


def pair(shape, requires_grad=False, transposed=False, dtype=np.float64):
    a = rng.standard_normal(shape[::-1] if transposed else shape).astype(dtype)
    return tensors_from(a, requires_grad, transposed)


def close(d, t, rtol=1e-10, atol=1e-12):
    assert_matches(d, t, rtol, atol)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)),
                                    ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul_broadcasting(shapes):
    a_d, a_t = pair(shapes[0], requires_grad=True)
    b_d, b_t = pair(shapes[1], requires_grad=True)
    out_d, out_t = a_d @ b_d, a_t @ b_t
    close(out_d, out_t)
    close(dg.matmul(a_d, b_d), torch.matmul(a_t, b_t))
    close(a_d.matmul(b_d), out_t)
    out_d.sum().backward()
    out_t.sum().backward()
    close(a_d.grad, a_t.grad)
    close(b_d.grad, b_t.grad)


def test_mm_bmm_outer_linear():
    a_d, a_t = pair((3, 4), transposed=True, requires_grad=True)
    b_d, b_t = pair((4, 2), requires_grad=True)
    close(dg.mm(a_d, b_d), torch.mm(a_t, b_t))
    close(a_d.mm(b_d), a_t.mm(b_t))
    x_d, x_t = pair((2, 3, 4))
    y_d, y_t = pair((2, 4, 5))
    close(dg.bmm(x_d, y_d), torch.bmm(x_t, y_t))
    u_d, u_t = pair((3,))
    v_d, v_t = pair((4,))
    close(dg.outer(u_d, v_d), torch.outer(u_t, v_t))
    close(u_d.outer(v_d), u_t.outer(v_t))
    w_d, w_t = pair((6, 4), requires_grad=True)
    bias_d, bias_t = pair((6,), requires_grad=True)
    out_d = dg.linear(x_d, w_d, bias_d) + dg.linear(x_d, w_d, bias=None)
    out_t = torch.nn.functional.linear(x_t, w_t, bias_t) + torch.nn.functional.linear(x_t, w_t, bias=None)
    close(out_d, out_t)
    out_d.sum().backward()
    out_t.sum().backward()
    close(w_d.grad, w_t.grad)
    close(bias_d.grad, bias_t.grad)
    f_d, f_t = pair((5, 7), dtype=np.float32)
    g_d, g_t = pair((7, 3), dtype=np.float32)
    close(f_d @ g_d, f_t @ g_t, rtol=1e-5, atol=1e-5)


def test_matmul_inplace_and_errors():
    a_d, a_t = pair((3, 3))
    b_d, b_t = pair((3, 3))
    keep = a_d
    a_d @= b_d
    a_t @= b_t
    assert a_d is keep
    close(a_d, a_t)
    with pytest.raises(TypeError):
        a_d @ 2
    with pytest.raises(TypeError, match=r"\[matmul\]"):
        dg.matmul(a_d, [[1.0]])
    with pytest.raises(ValueError, match=r"\[matmul\]|\[mm\]"):
        dg.matmul(dg.ones(2, 3), dg.ones(2, 3))
    with pytest.raises(TypeError, match=r"\[mm\]"):
        dg.mm(dg.ones(2, 3), dg.ones(3, 2, dtype=dg.float64))


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads the process's mapped libraries")
def test_links_the_serial_openblas():
    # dygrad tiles GEMMs over its own pool and needs the serial OpenBLAS; Debian's pthread build shares its
    # SONAME, so a wrong RUNPATH would load it silently (its threads then oversubscribe the cores).
    dg.ones(2, 2) @ dg.ones(2, 2)
    with open("/proc/self/maps") as maps:
        libraries = {line.split()[-1] for line in maps if "libopenblas" in line}
    assert not any("openblas-pthread" in path for path in libraries), libraries


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="counts the process's threads")
def test_float32_gemm_library_and_no_extra_threads():
    # float32 GEMM goes through oneDNN when the build found libdnnl-dev (make deps installs it), unless
    # DYGRAD_SGEMM=openblas; either way each tile is one serial call: no OpenMP or BLAS threads appear.
    expected = "openblas" if os.environ.get("DYGRAD_SGEMM") == "openblas" else (
        "onednn" if os.path.exists("/usr/include/oneapi/dnnl/dnnl.h") else "openblas")
    assert dg._C._sgemm_library() == expected
    a = dg.randn((300, 500))
    b = dg.randn((500, 200))
    (a @ b).numpy()
    before = len(os.listdir("/proc/self/task"))
    for _ in range(3):
        c = (a @ b).numpy()
    assert len(os.listdir("/proc/self/task")) == before
    np.testing.assert_allclose(c, a.numpy().astype(np.float64) @ b.numpy().astype(np.float64), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape_a, shape_b", [((300, 1024), (300, 50)), ((2, 256, 2048), (2, 256, 37)),
                                              ((512, 1024), (512, 384))])
def test_transposed_a_with_a_4kib_leading_dimension(shape_a, shape_b):
    # op(A) = A^T with A's rows 1024 or 2048 floats apart (a weight gradient dY^T X): the kernel computes C^T
    # and transposes it (backend/cpu/matmul.cpp, aliased_transposed_a); values against float64 NumPy.
    rng = np.random.default_rng(3)
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b).astype(np.float32)
    got = (dg.tensor(a).transpose(-1, -2) @ dg.tensor(b)).numpy()
    want = np.swapaxes(a.astype(np.float64), -1, -2) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert got.flags["C_CONTIGUOUS"]


# --- addmm, baddbmm, addbmm, norm, vector_norm, einsum, lerp, isclose (issue 13) -------------------------------
def backward_both(out_d, out_t):
    w = rng.standard_normal(tuple(out_t.shape))
    out_d.backward(dg.tensor(w))
    out_t.backward(torch.tensor(w))


@pytest.mark.parametrize("op,shapes", [("addmm", ((3,), (2, 4), (4, 3))), ("addmm", ((2, 3), (2, 4), (4, 3))),
                                       ("baddbmm", ((2, 1, 3), (2, 2, 4), (2, 4, 3))),
                                       ("addbmm", ((2, 3), (5, 2, 4), (5, 4, 3)))])
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, -2.0), (0, 3)])
def test_scaled_products(op, shapes, beta, alpha):
    (i_d, i_t), (a_d, a_t), (b_d, b_t) = [pair(s, requires_grad=True) for s in shapes]
    out_d = getattr(dg, op)(i_d, a_d, b_d, beta=beta, alpha=alpha)
    out_t = getattr(torch, op)(i_t, a_t, b_t, beta=beta, alpha=alpha)
    close(out_d, out_t)
    close(getattr(i_d, op)(a_d, b_d, beta=beta, alpha=alpha), out_t)
    backward_both(out_d, out_t)
    for d, t in ((a_d, a_t), (b_d, b_t)):
        close(d.grad, t.grad)
    if beta != 0:
        close(i_d.grad, i_t.grad)


def test_addmm_beta_zero_ignores_nan_and_inplace():
    nan = dg.full((2, 2), float("nan"))
    out = dg.addmm(nan, dg.ones(2, 3), dg.ones(3, 2), beta=0)
    assert out.tolist() == [[3.0, 3.0], [3.0, 3.0]]
    c_d, c_t = pair((2, 2))
    a_d, a_t = pair((2, 3))
    b_d, b_t = pair((3, 2))
    assert c_d.addmm_(a_d, b_d, beta=2, alpha=0.5) is c_d
    c_t.addmm_(a_t, b_t, beta=2, alpha=0.5)
    close(c_d, c_t)
    with pytest.raises(RuntimeError, match=r"\[addmm\] mat1 and mat2 shapes cannot be multiplied \(2x3 and 2x2\)"):
        dg.addmm(c_d, a_d, c_d)
    with pytest.raises(RuntimeError, match=r"\[baddbmm\] batch1 and batch2 must be 3-D"):
        dg.baddbmm(c_d, a_d, b_d)
    with pytest.raises(RuntimeError, match=r"\[addmm\] expected input and the matrices to have the same dtype"):
        dg.addmm(c_d.float(), a_d, b_d)


@pytest.mark.parametrize("ord", [2, 1, 3, 0.5, float("inf"), float("-inf"), 0])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), ((0, 2), True), (-1, True)])
def test_vector_norm_against_torch(ord, dim, keepdim):
    x_d, x_t = pair((3, 4, 2), requires_grad=True)
    out_d = dg.linalg.vector_norm(x_d, ord, dim, keepdim)
    out_t = torch.linalg.vector_norm(x_t, ord, dim, keepdim)
    close(out_d, out_t)
    close(dg.norm(x_d, ord, dim, keepdim), torch.norm(x_t, ord, dim, keepdim))
    close(x_d.norm(p=ord, dim=dim, keepdim=keepdim), out_t)
    if ord != 0:
        backward_both(out_d, out_t)
        close(x_d.grad, x_t.grad)


def test_norm_zero_gradient_dtypes_and_errors():
    for ord in (2, 3, 1.5, 0.5):
        x_d = dg.tensor([[3.0, 4.0], [0.0, 0.0]], requires_grad=True)
        x_t = torch.tensor([[3.0, 4.0], [0.0, 0.0]], requires_grad=True)
        dg.linalg.vector_norm(x_d, ord, dim=1).sum().backward()
        torch.linalg.vector_norm(x_t, ord, dim=1).sum().backward()
        assert not np.isnan(x_d.grad.numpy()).any()
        close(x_d.grad, x_t.grad, rtol=1e-6, atol=1e-7)
    x_d, x_t = pair((3, 4))
    close(dg.norm(x_d), torch.norm(x_t))
    close(dg.norm(x_d, "fro", dim=(0, 1)), torch.norm(x_t, "fro", dim=(0, 1)))
    close(dg.norm(x_d, "fro", dim=0), torch.norm(x_t, "fro", dim=0))
    h = dg.ones(3, dtype=dg.float16)
    assert dg.norm(h).dtype == dg.float16 and abs(dg.norm(h).item() - 3 ** 0.5) < 1e-3
    assert dg.linalg.vector_norm(dg.ones(3), dtype=dg.float64).dtype == dg.float64
    assert dg.norm(dg.ones(3), dtype=dg.float64).dtype == dg.float64
    with pytest.raises(RuntimeError, match=r"\[linalg.vector_norm\] expected a floating point tensor"):
        dg.norm(dg.tensor([1, 2]))
    with pytest.raises(RuntimeError, match=r"\[linalg.vector_norm\] cannot compute the inf norm on an empty tensor"):
        dg.linalg.vector_norm(dg.zeros(0), float("inf"))
    with pytest.raises(NotImplementedError, match=r"\[norm\] p='nuc'"):
        dg.norm(x_d, "nuc")
    with pytest.raises(RuntimeError, match=r"\[norm\] order abc not supported"):
        dg.norm(x_d, "abc")
    with pytest.raises(TypeError, match=r"\[linalg.vector_norm\]"):
        dg.linalg.vector_norm(x_d, "fro")


EINSUM_CASES = [
    ("bij,bjk->bik", ((2, 3, 4), (2, 4, 5))), ("bij,bjk", ((2, 3, 4), (2, 4, 5))), ("ij,jk", ((3, 4), (4, 2))),
    ("...ij,...jk->...ik", ((2, 3, 4), (4, 5))), ("bhqd,bhkd->bhqk", ((2, 2, 3, 4), (2, 2, 5, 4))),
    ("ij->", ((3, 4),)), ("ij->ji", ((3, 4),)), ("ij", ((3, 4),)), ("ji", ((3, 4),)), ("i,i->", ((5,), (5,))),
    ("i,j->ij", ((3,), (4,))), ("bij,bjk,k->bi", ((2, 3, 4), (2, 4, 5), (5,))), ("ijk,ijk->", ((2, 3, 4), (2, 3, 4))),
    ("...j,j", ((2, 3, 4), (4,))), ("b...,b...->b", ((2, 3, 4), (2, 3, 4))), ("iJ,Jk->ki", ((3, 4), (4, 2))),
    ("i j , j k -> i k", ((3, 4), (4, 2))), ("ab,cd->abcd", ((2, 3), (1, 2))), ("...,...->...", ((3, 1), (1, 4))),
    # a letter repeated within one operand: its diagonal (the implicit output counts letters as written)
    ("ii->i", ((4, 4),)), ("ii", ((3, 3),)), ("iij->j", ((3, 3, 2),)), ("bii->bi", ((2, 3, 3),)),
    ("ij,jj->i", ((2, 3), (3, 3))), ("...ii->...i", ((2, 3, 3),)), ("iji->j", ((3, 2, 3),)), ("iii->i", ((3, 3, 3),)),
    # a summed letter broadcast in one operand (size 1 there): summed in the other first
    ("ij,ij->", ((3, 4), (3, 1))), ("ijk,ikl->", ((2, 3, 4), (2, 1, 5))), ("...,...->", ((3, 1), (1, 4))),
    # an empty contraction: the values are zeros, the gradients empty
    ("ij,jk->ik", ((2, 0), (0, 3))), ("bij,jk->bik", ((2, 3, 0), (0, 4))),
]


@pytest.mark.parametrize("equation,shapes", EINSUM_CASES)
def test_einsum_against_torch(equation, shapes):
    pairs = [pair(s, requires_grad=True, transposed=len(s) == 2 and k == 0) for k, s in enumerate(shapes)]
    out_d = dg.einsum(equation, *[d for d, _ in pairs])
    out_t = torch.einsum(equation, *[t for _, t in pairs])
    close(out_d, out_t)
    close(dg.einsum(equation, [d for d, _ in pairs]), out_t)
    backward_both(out_d, out_t)
    for d, t in pairs:
        close(d.grad, t.grad)


def test_einsum_returns_a_new_tensor():
    x = dg.ones(2, 3, requires_grad=True)
    y = dg.einsum("ij", x)
    assert y is not x and y.grad_fn is not None
    (y * 2).sum().backward()
    assert x.grad.tolist() == [[2.0] * 3] * 2


def test_einsum_errors():
    a = dg.ones(2, 3)
    for equation, operands, kind, pattern in [
            ("ij,jk", (a,), RuntimeError, r"fewer operands were provided"),
            ("ij", (a, a), RuntimeError, r"more operands were provided"),
            ("ijk", (a,), RuntimeError, r"number of subscripts in the equation \(3\) does not match the number of dimensions \(2\)"),
            ("iii", (dg.ones(3, 3),), RuntimeError,
             r"number of subscripts in the equation \(3\) does not match the number of dimensions \(2\)"),
            ("i$", (a,), RuntimeError, r"invalid subscript given at index 1"),
            ("i.j", (a,), RuntimeError, r"not part of a single ellipsis"),
            ("ij->ix", (a,), RuntimeError, r"output subscript x does not appear"),
            ("ij->ii", (a,), RuntimeError, r"output subscript i appears more than once"),
            ("ii->i", (dg.ones(2, 3),), RuntimeError,
             r"subscript i is repeated for operand 0 but the sizes don't match, 3 != 2"),
            ("ij,jk", (a, dg.ones(3, 2, dtype=dg.float64)), RuntimeError, r"same dtype"),
            ("ij,jk", (a, dg.ones(4, 2)), RuntimeError, r"\[einsum\]")]:
        with pytest.raises(kind, match=r"\[einsum\]|" + pattern) as info:
            dg.einsum(equation, *operands)
        assert "[einsum]" in str(info.value) and __import__("re").search(pattern, str(info.value)), str(info.value)
    with pytest.raises(TypeError, match=r"\[einsum\]"):
        dg.einsum(a, a)


@pytest.mark.parametrize("weight", [0.25, 0.75, -0.5, 1.0, "tensor", "scalar-tensor"])
def test_lerp_against_torch(weight):
    a_d, a_t = pair((3, 4), requires_grad=True)
    b_d, b_t = pair((4,), requires_grad=True)
    if weight == "tensor":
        w_d, w_t = pair((3, 1), requires_grad=True)
    elif weight == "scalar-tensor":
        w_d, w_t = pair((), requires_grad=True)
    else:
        w_d, w_t = weight, weight
    out_d, out_t = dg.lerp(a_d, b_d, w_d), torch.lerp(a_t, b_t, w_t)
    close(out_d, out_t)
    close(a_d.lerp(b_d, w_d), out_t)
    backward_both(out_d, out_t)
    close(a_d.grad, a_t.grad)
    close(b_d.grad, b_t.grad)
    if not isinstance(w_d, float):
        close(w_d.grad, w_t.grad)
    y_d, y_t = a_d * 1, a_t * 1
    assert y_d.lerp_(b_d.detach(), w_d if isinstance(w_d, float) else w_d.detach()) is y_d
    y_t.lerp_(b_t.detach(), w_t if isinstance(w_t, float) else w_t.detach())
    close(y_d, y_t)


def test_lerp_dtypes_and_errors():
    h = dg.lerp(dg.zeros(3, dtype=dg.float16), dg.ones(3, dtype=dg.float16), 0.7)
    t = torch.lerp(torch.zeros(3, dtype=torch.float16), torch.ones(3, dtype=torch.float16), 0.7)
    assert h.dtype == dg.float16 and h.tolist() == t.tolist()
    assert dg.lerp(dg.zeros(2), dg.ones(2), dg.tensor(0.5, dtype=dg.float64)).dtype == dg.float32
    with pytest.raises(RuntimeError, match=r"\[lerp\] expected dtype float32 for `end` but got dtype float64"):
        dg.lerp(dg.zeros(3), dg.ones(3, dtype=dg.float64), 0.5)
    with pytest.raises(NotImplementedError, match=r"\[lerp\] not implemented for 'Long'"):
        dg.lerp(dg.zeros(3, dtype=dg.int64), dg.ones(3, dtype=dg.int64), 1)
    with pytest.raises(RuntimeError, match=r"\[lerp_\]"):
        dg.zeros(3).lerp_(dg.ones(2, 3), 0.5)
    with pytest.raises(TypeError, match=r"\[lerp\]"):
        dg.lerp(dg.zeros(3), dg.ones(3), "a")


def test_isclose_allclose_against_torch():
    values = [1.0, float("nan"), float("inf"), 2.0, -float("inf"), 1e-9, 100.0]
    other = [1.00001, float("nan"), float("inf"), -2.0, float("inf"), 0.0, 100.001]
    for kw in ({}, {"equal_nan": True}, {"rtol": 1e-3}, {"atol": 1e-8, "rtol": 0}, {"rtol": 0, "atol": 0}):
        for dtype in ("float32", "float64"):
            a_d, b_d = dg.tensor(values, dtype=getattr(dg, dtype)), dg.tensor(other, dtype=getattr(dg, dtype))
            a_t, b_t = torch.tensor(values, dtype=getattr(torch, dtype)), torch.tensor(other, dtype=getattr(torch, dtype))
            got, want = dg.isclose(a_d, b_d, **kw), torch.isclose(a_t, b_t, **kw)
            assert got.dtype == dg.bool and got.tolist() == want.tolist(), (kw, dtype)
            assert a_d.isclose(b_d, **kw).tolist() == want.tolist()
            assert dg.allclose(a_d, b_d, **kw) is torch.allclose(a_t, b_t, **kw)
            assert dg.allclose(a_d[:1], b_d[:1], **kw) is torch.allclose(a_t[:1], b_t[:1], **kw)
    ints = dg.isclose(dg.tensor([1, 2, 5]), dg.tensor([1, 3, 3]), atol=1)
    assert ints.tolist() == torch.isclose(torch.tensor([1, 2, 5]), torch.tensor([1, 3, 3]), atol=1).tolist()
    assert dg.isclose(dg.tensor([True]), dg.tensor([False])).tolist() == [False]
    assert dg.allclose(dg.ones(3), dg.ones(1, 3)) is True  # broadcast, as torch
    assert dg.ones(2).allclose(dg.ones(2) + 1e-9) is True
    with pytest.raises(RuntimeError, match=r"\[isclose\] float32 did not match float64"):
        dg.isclose(dg.ones(2), dg.ones(2, dtype=dg.float64))
    with pytest.raises(RuntimeError, match=r"\[isclose\] rtol must be greater than or equal to zero, but got -1"):
        dg.isclose(dg.ones(2), dg.ones(2), rtol=-1)
    with pytest.raises(RuntimeError, match=r"\[isclose\] atol must be"):
        dg.allclose(dg.ones(2), dg.ones(2), atol=-1)
    with pytest.raises(TypeError, match=r"\[isclose\]"):
        dg.isclose(dg.ones(2), 1.0)
