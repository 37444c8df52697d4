"""nn pieces Hugging Face models reach for (issue 41), against torch 2.13: nn.Buffer, Module.cuda without CUDA,
and the init functions eye_, dirac_, orthogonal_ and sparse_."""
import pickle

import numpy as np
import pytest
import torch

import dygrad as dg


def test_buffer_registers_persistent_or_not_as_torch():
    seen = {}
    for lib in (dg, torch):
        class Rotary(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.inv_freq = lib.nn.Buffer(lib.ones(4), persistent=False)
                self.scale = lib.nn.Buffer(lib.full((1,), 2.0))
                self.lin = lib.nn.Linear(2, 2)

        m = Rotary()
        seen[lib.__name__] = (sorted(m.state_dict()), sorted(n for n, _ in m.named_buffers()),
                              isinstance(m.inv_freq, lib.Tensor), m.inv_freq.requires_grad)
    assert seen["dygrad"] == seen["torch"]
    data = dg.ones(3)
    b = dg.nn.Buffer(data, persistent=False)
    assert isinstance(b, dg.nn.Buffer) and b.persistent is False and not isinstance(data, dg.nn.Buffer)
    b.add_(1.0)
    assert data.tolist() == [2.0, 2.0, 2.0]  # shares data's storage, as torch's (a detached view)
    copy = pickle.loads(pickle.dumps(b))
    assert isinstance(copy, dg.nn.Buffer) and copy.persistent is False and copy.tolist() == [2.0] * 3


def test_module_cuda_raises_without_cuda():
    # Without the CUDA plugin: "built without the cuda backend"; with it and no GPU: cuda:0 is not available (why).
    with pytest.raises(RuntimeError, match="built without the cuda backend|cuda:0 is not available"):
        dg.nn.Linear(2, 2).cuda()


def test_eye_and_dirac_match_torch():
    for shape in [(3, 4), (4, 3), (0, 2)]:
        assert dg.nn.init.eye_(dg.empty(*shape)).tolist() == torch.nn.init.eye_(torch.empty(*shape)).tolist()
    for shape, groups in [((4, 2, 3), 1), ((6, 3, 3, 3), 2), ((2, 2, 3, 3, 3), 1), ((3, 5, 2), 1)]:
        ours = dg.nn.init.dirac_(dg.empty(*shape), groups).numpy()
        theirs = torch.nn.init.dirac_(torch.empty(*shape), groups).numpy()
        assert np.array_equal(ours, theirs), (shape, groups)
    for lib in (dg, torch):
        with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
            lib.nn.init.eye_(lib.empty(2, 2, 2))
        with pytest.raises(ValueError, match="Only tensors with 3, 4, or 5 dimensions are supported"):
            lib.nn.init.dirac_(lib.empty(2, 2))
        with pytest.raises(ValueError, match="dim 0 must be divisible by groups"):
            lib.nn.init.dirac_(lib.empty(3, 2, 2), groups=2)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 2, 3), (6, 6)])
def test_orthogonal_is_orthogonal_as_torch(shape):
    for lib in (dg, torch):
        q = lib.nn.init.orthogonal_(lib.empty(*shape, dtype=lib.float64), gain=2.0).numpy().reshape(shape[0], -1)
        gram = q @ q.T if q.shape[0] <= q.shape[1] else q.T @ q
        assert np.allclose(gram, 4 * np.eye(gram.shape[0]), atol=1e-10), lib.__name__
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions are supported"):
        dg.nn.init.orthogonal_(dg.empty(3))


def test_sparse_zeroes_the_same_count_per_column_as_torch():
    for rows, sparsity in [(10, 0.3), (7, 0.5), (5, 0.0)]:
        ours = dg.nn.init.sparse_(dg.empty(rows, 4), sparsity).numpy()
        theirs = torch.nn.init.sparse_(torch.empty(rows, 4), sparsity).numpy()
        assert list((ours == 0).sum(0)) == list((theirs == 0).sum(0))
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        dg.nn.init.sparse_(dg.empty(2, 2, 2), 0.1)
