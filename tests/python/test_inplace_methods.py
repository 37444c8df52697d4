"""torch's in-place Tensor methods that dygrad composes from their out-of-place twins (dygrad/_inplace.py): values,
dtypes and errors as torch 2.13's, gradients through a non-leaf, version counters, writes through views."""
import numpy as np
import pytest
import torch

import dygrad as dg
from dygrad import _inplace

X = np.array([[0.25, 1.5, 4.0], [0.5, 2.0, 9.0]], np.float32)
Y = np.array([[0.5, 1.5, 3.0], [1.0, 1.0, 10.0]], np.float32)

CASES = {
    "sqrt_": lambda m, x, y: x.sqrt_(), "neg_": lambda m, x, y: x.neg_(), "sigmoid_": lambda m, x, y: x.sigmoid_(),
    "log_": lambda m, x, y: x.log_(), "abs_": lambda m, x, y: (x - 2).abs_(), "tanh_": lambda m, x, y: x.tanh_(),
    "rsqrt_": lambda m, x, y: x.rsqrt_(), "sin_": lambda m, x, y: x.sin_(), "log1p_": lambda m, x, y: x.log1p_(),
    "clip_": lambda m, x, y: x.clip_(0.5, 2.0),
    "lt_": lambda m, x, y: x.lt_(y), "eq_": lambda m, x, y: x.eq_(y), "ge_scalar": lambda m, x, y: x.ge_(1.5),
    "logical_not_": lambda m, x, y: x.logical_not_(), "logical_and_": lambda m, x, y: (x - 0.5).logical_and_(y),
    "tril_": lambda m, x, y: x.tril_(), "triu_": lambda m, x, y: x.triu_(1),
    "multiply_": lambda m, x, y: x.multiply_(y), "subtract_": lambda m, x, y: x.subtract_(y, alpha=2),
    "true_divide_": lambda m, x, y: x.true_divide_(y),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_and_the_tensor_itself_as_torch(case):
    d, t = dg.tensor(X.copy()), torch.tensor(X.copy())
    dy, ty = dg.tensor(Y.copy()), torch.tensor(Y.copy())
    ours, theirs = CASES[case](dg, d, dy), CASES[case](torch, t, ty)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)
    if case not in ("abs_", "logical_and_"):  # those act on a temporary
        assert ours is d  # in place: the tensor itself is returned and holds the result
        np.testing.assert_allclose(d.numpy(), t.numpy(), rtol=1e-6, atol=1e-7)


def test_each_composed_method_is_installed_where_a_twin_exists():
    for base in _inplace._ARITHMETIC + _inplace._PREDICATES:
        if hasattr(dg.Tensor, base):
            assert hasattr(dg.Tensor, base + "_"), base


def test_an_integer_tensor_refuses_a_float_result_as_torch_and_keeps_its_values():
    d, t = dg.tensor([4, 9]), torch.tensor([4, 9])
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        t.sqrt_()
    with pytest.raises(RuntimeError, match=r"\[sqrt_\] result type Float can't be cast to the desired output type Long"):
        d.sqrt_()
    assert d.tolist() == [4, 9]
    d.lt_(dg.tensor([5, 5]))  # predicates write 1/0 in the tensor's dtype, as torch's
    t.lt_(torch.tensor([5, 5]))
    assert d.tolist() == t.tolist() == [1, 0] and d.dtype == dg.int64


def test_gradients_flow_through_the_in_place_write_as_torch():
    def run(m):
        x = m.tensor(X.copy(), requires_grad=True)
        y = x * 2
        y.sqrt_()  # torch saves the result: nothing may write y again before backward
        z = y * y.detach()
        z.tanh_()
        (z * 3).sum().backward()
        return x.grad.numpy()
    np.testing.assert_allclose(run(dg), run(torch), rtol=1e-4, atol=1e-6)  # float32 tanh backward near 1
    leaf = dg.tensor(X.copy(), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        leaf.sqrt_()


def test_a_view_writes_through_to_its_base_and_versions_move():
    base = dg.tensor(X.copy())
    before = base._version
    base[0].sqrt_()
    np.testing.assert_allclose(base.numpy()[0], np.sqrt(X[0]), rtol=1e-6)
    np.testing.assert_allclose(base.numpy()[1], X[1])
    assert base._version > before
