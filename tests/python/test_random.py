"""Random and range factories: shapes, dtypes, argument forms, statistics, reproducibility and RNG state."""
import numpy as np
import pytest
import torch

import dygrad as dg


def test_rand_randn_forms():
    for f in (dg.rand, dg.randn):
        assert tuple(f(2, 3).shape) == (2, 3)
        assert tuple(f((2, 3)).shape) == (2, 3)
        assert tuple(f([4]).shape) == (4,)
        assert tuple(f(size=(1, 2)).shape) == (1, 2)
        assert tuple(f().shape) == ()
        assert f(3).dtype == dg.float32 and f(3, dtype=dg.float64).dtype == dg.float64
        assert f(3, dtype=dg.bfloat16).dtype == dg.bfloat16
        x = f(3, requires_grad=True)
        assert x.requires_grad and x.is_leaf
        with pytest.raises(TypeError, match=r"\[(rand|randn)\]"):
            f(2, "3")
        with pytest.raises(TypeError, match=r"\[(rand|randn)\]"):
            f(2, bogus=1)


def test_rand_randn_statistics():
    dg.manual_seed(123)
    u = dg.rand(20000, dtype=dg.float64).numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    z = dg.randn(20000, dtype=dg.float64).numpy()
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05
    like = dg.randn_like(dg.zeros(2, 3, dtype=dg.float64))
    assert like.dtype == dg.float64 and tuple(like.shape) == (2, 3)
    assert dg.rand_like(dg.zeros(4), dtype=dg.float64).dtype == dg.float64


def test_randint():
    x = dg.randint(3, 7, (1000,))
    assert x.dtype == dg.int64 and tuple(x.shape) == (1000,)
    v = x.numpy()
    assert v.min() == 3 and v.max() == 6
    y = dg.randint(5, (2, 3))
    assert tuple(y.shape) == (2, 3) and y.numpy().max() < 5 and y.numpy().min() >= 0
    assert dg.randint(0, 2, size=(4,), dtype=dg.int32).dtype == dg.int32
    assert dg.randint(low=1, high=3, size=[2]).numpy().min() >= 1
    with pytest.raises(TypeError, match=r"\[randint\]"):
        dg.randint(5)


@pytest.mark.parametrize("args,kwargs", [((5,), {}), ((2, 7), {}), ((0, 1, 0.25), {}), ((1.5,), {}),
                                         ((10, 0, -3), {}), ((4,), {"dtype": "float64"}),
                                         ((0, 5), {"dtype": "int32"}), ((), {"end": 3}),
                                         ((), {"start": 1, "end": 4, "step": 2})])
def test_arange(args, kwargs):
    kd = {k: (getattr(dg, v) if k == "dtype" else v) for k, v in kwargs.items()}
    kt = {k: (getattr(torch, v) if k == "dtype" else v) for k, v in kwargs.items()}
    d, t = dg.arange(*args, **kd), torch.arange(*args, **kt)
    assert str(d.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    np.testing.assert_allclose(d.numpy(), t.numpy())


def test_arange_errors_and_grad():
    assert dg.arange(3.0, requires_grad=True).requires_grad
    with pytest.raises(TypeError, match=r"\[arange\]"):
        dg.arange("3")
    with pytest.raises(TypeError, match=r"\[arange\]"):
        dg.arange()


def test_rng_state_and_seed():
    dg.manual_seed(7)
    state = dg.get_rng_state()
    assert set(state) == {"seed", "offset"} and state["seed"] == 7
    a = dg.randn(5).numpy()
    dg.set_rng_state(state)
    b = dg.randn(5).numpy()
    np.testing.assert_array_equal(a, b)
    c = dg.randn(5).numpy()
    assert not np.array_equal(b, c)
    dg.manual_seed(7)
    np.testing.assert_array_equal(dg.randn(5).numpy(), a)
    with pytest.raises(TypeError):
        dg.set_rng_state({"seed": 1})


def test_inplace_fills_and_bernoulli():
    dg.manual_seed(1)
    x = dg.zeros(10000, dtype=dg.float64, requires_grad=True)
    with dg.no_grad():
        assert x.uniform_(-2, 3) is x
    with pytest.raises(RuntimeError, match=r"\[uniform_\]"):
        x.uniform_()
    v = x.detach().numpy()
    assert v.min() >= -2 and v.max() < 3 and abs(v.mean() - 0.5) < 0.1
    y = dg.zeros(10000)
    assert y.normal_(mean=1.0, std=2.0) is y
    w = y.numpy()
    assert abs(w.mean() - 1) < 0.1 and abs(w.std() - 2) < 0.1
    with pytest.raises(TypeError, match=r"\[uniform_\]"):
        dg.zeros(3, dtype=dg.int64).uniform_()
    m = dg.bernoulli_mask((20000,), 0.25)
    assert m.dtype == dg.bool and abs(m.numpy().mean() - 0.25) < 0.02
    assert dg.bernoulli_mask([3], 0.5, dtype=dg.float32).dtype == dg.float32
    z = dg.zeros(3)
    assert z.fill_(2.0).zero_() is z and z.tolist() == [0.0, 0.0, 0.0]
    assert dg.ones(2).long().dtype == dg.int64 and dg.ones(2).int().dtype == dg.int32
    assert dg.ones(2).bool().dtype == dg.bool and dg.ones(2).half().dtype == dg.float16


def test_factory_keywords_are_checked_alike():
    # zeros/ones/full/rand/arange share one keyword parser: the cpu device is accepted, one not available raises
    # naming the op (the test device: tests/python/test_devices.py), and keywords torch does not take raise TypeError
    # naming the op.
    assert tuple(dg.rand(2, device="cpu", generator=None).shape) == (2,)
    for make in (lambda: dg.zeros(2, device="cuda"), lambda: dg.rand(2, device="cuda"),
                 lambda: dg.arange(3, device="cuda")):
        with pytest.raises(RuntimeError, match=r"^\[(zeros|rand|arange)\] device cuda:0 is not available"):
            make()
    with pytest.raises(TypeError, match=r"\[zeros\].*fill_value"):
        dg.zeros(2, fill_value=1)
    with pytest.raises(TypeError, match=r"\[ones\].*generator"):
        dg.ones(2, generator=None)
