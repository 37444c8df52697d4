"""Helpers the binding tests share to compare dygrad against torch 2.13 on the same data."""
import numpy as np
import torch

import dygrad as dg


def tensors_from(a, requires_grad=False, transposed=False):
    """The NumPy array `a` as a dygrad and a torch tensor; transposed: their .t() views (non-contiguous)."""
    d, t = dg.tensor(a), torch.tensor(a)
    if transposed:
        d, t = d.t(), t.t()
    if requires_grad:
        d.requires_grad_(True)
        t.requires_grad_(True)
    return d, t


def assert_matches(d, t, rtol, atol=0.0):
    """Same dtype name, same shape, values within rtol/atol (compared in float64)."""
    assert str(d.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], (d.dtype, t.dtype)
    assert tuple(d.shape) == tuple(t.shape)
    np.testing.assert_allclose(d.detach().numpy().astype(np.float64), t.detach().numpy().astype(np.float64),
                               rtol=rtol, atol=atol)
