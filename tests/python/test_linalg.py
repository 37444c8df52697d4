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
