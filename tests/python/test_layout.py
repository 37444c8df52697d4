"""Output layouts of elementwise ops follow their inputs, as in torch (ops/layout.h): a permuted or strided input
gives an output laid out in the same dim order, so the kernels walk every operand in memory order. Strides and
values are checked against torch 2.13 on the same inputs."""
import numpy as np
import pytest
import torch

import dygrad as dg


def pair(shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return dg.tensor(x), torch.tensor(x)


def qkv_views(lib_tensor, torch_tensor):
    # q of a fused qkv projection: [B, T, 3, H, D] -> [B, H, T, D] (a permuted, non-dense view)
    q = lib_tensor.view(2, 5, 3, 4, 6).permute(2, 0, 3, 1, 4)[0]
    tq = torch_tensor.view(2, 5, 3, 4, 6).permute(2, 0, 3, 1, 4)[0]
    return q, tq


CASES = {
    "permuted * scalar": lambda x: x.permute(0, 2, 1, 3) * 2.0,
    "permuted + permuted": lambda x: x.permute(0, 2, 1, 3) + x.permute(0, 2, 1, 3),
    "permuted * broadcast": lambda x: x.permute(0, 2, 1, 3) * x[0, :, 0, :],
    "broadcast * permuted": lambda x: x[0, 0, 0, :] * x.permute(0, 2, 1, 3),
    "transposed exp": lambda x: x.transpose(-1, -2).exp(),
    "contiguous + permuted": lambda x: x.permute(0, 2, 1, 3).contiguous() + x.permute(0, 2, 1, 3),
    "sliced (step 2)": lambda x: x[..., ::2] * 3.0,
    "contiguous": lambda x: x * x,
}


@pytest.mark.parametrize("name", list(CASES))
def test_elementwise_output_layout_matches_torch(name):
    x, tx = pair((2, 3, 4, 6))
    ours, theirs = CASES[name](x), CASES[name](tx)
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert tuple(ours.stride()) == tuple(theirs.stride()), name
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)


def test_rotary_composed_on_qkv_view_matches_torch():
    # the unfused rotary embedding of the LLaMA benchmark: strided halves of a permuted view, a broadcast table
    x, tx = pair((2, 5, 72), seed=1)
    cos, tcos = pair((5, 3), seed=2)
    sin, tsin = pair((5, 3), seed=3)
    q, tq = qkv_views(x, tx)
    def rope(lib, v, c, s):
        v1, v2 = v[..., ::2], v[..., 1::2]
        return lib.stack((v1 * c - v2 * s, v1 * s + v2 * c), -1).flatten(-2)
    first = q[..., ::2] * cos
    assert tuple(first.stride()) == tuple((tq[..., ::2] * tcos).stride())
    np.testing.assert_allclose(rope(dg, q, cos, sin).numpy(), rope(torch, tq, tcos, tsin).numpy(), rtol=1e-6,
                               atol=1e-6)


def test_permuted_outputs_keep_autograd_and_views_working():
    x, tx = pair((3, 4, 5))
    x.requires_grad_(True)
    tx.requires_grad_(True)
    for lib_x, lib in ((x, dg), (tx, torch)):
        y = (lib_x.permute(2, 0, 1) * 3.0).exp()
        y.reshape(-1).sum().backward()  # reshape copies where a view is impossible, in both
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)
    y = x.detach().permute(2, 0, 1) * 1.0
    assert not y.is_contiguous()
    with pytest.raises(Exception, match=r"\[view\]"):
        y.view(-1)  # as in torch: a permuted result is not viewable as flat
    np.testing.assert_array_equal(y.contiguous().numpy(), x.detach().numpy().transpose(2, 0, 1))


def test_inplace_into_permuted_view_is_correct():
    x, tx = pair((4, 6, 8))
    y, ty = pair((6, 4, 8), seed=5)
    xv, txv = x.permute(1, 0, 2), tx.permute(1, 0, 2)
    xv.add_(y)
    txv.add_(ty)
    xv.mul_(y[..., :1])
    txv.mul_(ty[..., :1])
    np.testing.assert_allclose(x.numpy(), tx.numpy(), rtol=1e-6)


# Every stride class of the binary kernel's rows (backend/cpu/elementwise_kernels.h: 1, 0, 2 and any stride, for
# each input) against torch on the same views, in several dtypes.
VIEWS = {
    "contiguous": lambda t: t[:, :8],
    "step2": lambda t: t[:, :16:2],
    "step3": lambda t: t[:, :24:3],
    "broadcast": lambda t: t[:, :1].expand(8, 8),
    "transposed": lambda t: t[:8, :8].transpose(0, 1),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bfloat16"])
@pytest.mark.parametrize("a_kind", list(VIEWS))
@pytest.mark.parametrize("b_kind", list(VIEWS))
def test_binary_rows_of_every_stride_class(dtype, a_kind, b_kind):
    rng = np.random.default_rng(7)
    base_a = rng.integers(-9, 10, size=(8, 24)).astype(np.float64)  # small integers: exact in every dtype
    base_b = rng.integers(1, 10, size=(8, 24)).astype(np.float64)
    a = VIEWS[a_kind](dg.tensor(base_a).to(getattr(dg, dtype)))
    b = VIEWS[b_kind](dg.tensor(base_b).to(getattr(dg, dtype)))
    ta = VIEWS[a_kind](torch.tensor(base_a).to(getattr(torch, dtype)))
    tb = VIEWS[b_kind](torch.tensor(base_b).to(getattr(torch, dtype)))
    for got, want in ((a * b, ta * tb), (a - b, ta - tb), (dg.maximum(a, b), torch.maximum(ta, tb))):
        np.testing.assert_array_equal(got.to(dg.float64).numpy(), want.to(torch.float64).numpy())
