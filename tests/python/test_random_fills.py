"""The in-place random fills (random_, uniform_, normal_, exponential_, geometric_, cauchy_, log_normal_, bernoulli_)
and generator= on them and on rand/randn/randint. dygrad's numbers are its own (docs/rng.md), so the distributions are
compared with torch's statistically (large samples, fixed seeds, generous bounds); ranges, dtype rules, errors and
warnings are torch's exactly, and a seed or a Generator replays the same numbers."""
import warnings

import numpy as np
import pytest
import torch

import dygrad as dg
from test_autograd_views import raises_both  # torch and dygrad raise the same error

N = 200_000


def values(t):
    return np.asarray(t.tolist(), dtype=np.float64)


def quantiles_close(case, qs=(0.05, 0.25, 0.5, 0.75, 0.95), rtol=0.03, atol=0.02):
    """case(lib) fills a tensor of N values; dygrad's quantiles match torch's."""
    torch.manual_seed(0)
    dg.manual_seed(0)
    a, b = values(case(torch)), values(case(dg))
    np.testing.assert_allclose(np.quantile(b, qs), np.quantile(a, qs), rtol=rtol, atol=atol)
    return b


@pytest.mark.parametrize("name, digits_or_max", [
    ("float32", 2 ** 24), ("float64", 2 ** 53), ("float16", 2 ** 11), ("bfloat16", 2 ** 8), ("int64", 2 ** 63 - 1),
    ("int32", 2 ** 31 - 1), ("int16", 2 ** 15 - 1), ("int8", 127), ("uint8", 255), ("bool", 1)])
def test_random_default_range_per_dtype(name, digits_or_max):
    dg.manual_seed(1)
    x = dg.empty(N, dtype=getattr(dg, name))
    assert x.random_() is x
    v = np.asarray(x.tolist(), dtype=np.float64)
    assert v.min() >= 0 and v.max() <= digits_or_max
    assert np.all(v == np.round(v))
    # uniform over [0, high]: the mean is half of it
    assert abs(v.mean() / digits_or_max - 0.5) < 0.01
    if digits_or_max <= 2 ** 11:
        assert v.max() == digits_or_max and v.min() == 0  # both ends reached


def test_random_ranges_and_keywords():
    dg.manual_seed(2)
    assert set(values(dg.empty(N).random_(3, 7))) == {3.0, 4.0, 5.0, 6.0}
    assert set(values(dg.empty(N, dtype=dg.int8).random_(5))) == {0.0, 1.0, 2.0, 3.0, 4.0}
    assert set(values(dg.empty(N).random_(to=3))) == {0.0, 1.0, 2.0}
    v = values(dg.empty(N, dtype=dg.int8).random_(-5, None))  # to=None: up to the dtype's largest
    assert v.min() == -5 and v.max() == 127
    v = values(dg.empty(N, dtype=dg.int64).random_(-2 ** 63, 2 ** 63 - 1))
    assert v.min() < -9e18 and v.max() > 9e18
    b = values(dg.empty(N, dtype=dg.bool).random_(0, 2))
    assert 0.49 < b.mean() < 0.51
    # quantiles against torch's for a small integer range
    quantiles_close(lambda lib: lib.empty(N).random_(-10, 10), atol=1.0)


def test_random_errors_and_warnings_as_torchs():
    raises_both(lambda lib: lib.empty(3).random_(5, 5),
                "random_ expects 'from' to be less than 'to', but got from=5 >= to=5")
    raises_both(lambda lib: lib.empty(3).random_(-3), "random_ expects 'from' to be less than 'to', but got from=0 >= to=-3")
    raises_both(lambda lib: lib.empty(3, dtype=lib.uint8).random_(-3, 5), "from is out of bounds for unsigned char")
    raises_both(lambda lib: lib.empty(3, dtype=lib.uint8).random_(0, 300), "to - 1 is out of bounds for unsigned char")
    raises_both(lambda lib: lib.empty(3, dtype=lib.int8).random_(-200, 5), "from is out of bounds for signed char")
    raises_both(lambda lib: lib.empty(3, dtype=lib.bool).random_(0, 3), "to - 1 is out of bounds for bool")
    raises_both(lambda lib: lib.empty(3, dtype=lib.float16).random_(0, 2 ** 20), "to - 1 is out of bounds for c10::Half")
    raises_both(lambda lib: lib.empty(3, dtype=lib.complex64).random_(), "not implemented for", NotImplementedError)
    raises_both(lambda lib: lib.empty(3).random_(2.5, 4), "", TypeError)
    for lib in (torch, dg):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lib.empty(10).random_(0, 2 ** 30)
        assert any("to - 1 is out of bounds [-(2^24), 2^24]. Due to precision limitations float can support "
                   "discrete uniform distribution only within this range" in str(w.message) for w in caught), lib


def test_continuous_distributions_match_torchs():
    e = quantiles_close(lambda lib: lib.empty(N).exponential_(lambd=2.0))
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.01
    g = quantiles_close(lambda lib: lib.empty(N, dtype=lib.int64).geometric_(0.3), atol=0.5)
    assert g.min() >= 1 and abs(g.mean() - 1 / 0.3) < 0.05
    c = quantiles_close(lambda lib: lib.empty(N, dtype=lib.float64).cauchy_(median=1.0, sigma=2.0),
                        qs=(0.1, 0.25, 0.5, 0.75, 0.9), rtol=0.05, atol=0.05)
    assert abs(np.median(c) - 1.0) < 0.03 and abs(np.quantile(c, 0.75) - 3.0) < 0.05
    ln = quantiles_close(lambda lib: lib.empty(N).log_normal_(mean=1.0, std=0.5))
    assert abs(np.log(ln).mean() - 1.0) < 0.01 and abs(np.log(ln).std() - 0.5) < 0.01
    u = quantiles_close(lambda lib: lib.empty(N, dtype=lib.float64).uniform_(-2, 3))
    assert u.min() >= -2 and u.max() < 3
    quantiles_close(lambda lib: lib.empty(N).normal_(1.0, 2.0))
    half = values(dg.empty(N, dtype=dg.float16).exponential_())
    assert half.min() >= 0 and abs(half.mean() - 1.0) < 0.02


def test_fill_errors_as_torchs():
    raises_both(lambda lib: lib.empty(3).exponential_(0), "exponential_ expects lambda > 0.0, but found lambda=0")
    raises_both(lambda lib: lib.empty(3, dtype=lib.int64).exponential_(),
                "Exponential distribution is a continuous probability distribution. dtype must be a floating point")
    raises_both(lambda lib: lib.empty(3).geometric_(1), "geometric_ expects p to be in (0, 1), but got p=1")
    raises_both(lambda lib: lib.empty(3, dtype=lib.bool).geometric_(0.5), "not implemented for", NotImplementedError)
    raises_both(lambda lib: lib.empty(3).cauchy_(sigma=0), "cauchy_ expects sigma > 0.0, but found sigma=0")
    raises_both(lambda lib: lib.empty(3, dtype=lib.int64).cauchy_(),
                "Cauchy distribution is a continuous probability distribution. dtype must be a floating point")
    raises_both(lambda lib: lib.empty(3).log_normal_(std=-1), "log_normal_ expects std > 0.0, but found std=-1")
    raises_both(lambda lib: lib.empty(3, dtype=lib.int64).log_normal_(), "not implemented for", NotImplementedError)
    raises_both(lambda lib: lib.empty(3).uniform_(2, 1),
                "uniform_ expects to return a [from, to) range, but found from=2 > to=1")
    raises_both(lambda lib: lib.empty(3).normal_(0, -1), "normal expects std >= 0.0, but found std -1")
    raises_both(lambda lib: lib.empty(3).bernoulli_(1.5), "bernoulli_ expects p to be in [0, 1], but got p=1.5")
    raises_both(lambda lib: lib.empty(3).geometric_(), "", TypeError)  # p is required


FILLS = [lambda x, **g: x.random_(0, 100, **g), lambda x, **g: x.uniform_(**g), lambda x, **g: x.normal_(**g),
         lambda x, **g: x.exponential_(**g), lambda x, **g: x.geometric_(0.2, **g), lambda x, **g: x.cauchy_(**g),
         lambda x, **g: x.log_normal_(**g), lambda x, **g: x.bernoulli_(0.3, **g)]


@pytest.mark.parametrize("fill", FILLS)
def test_seed_and_generator_replay_the_same_numbers(fill):
    dg.manual_seed(7)
    a = values(fill(dg.empty(1000)))
    dg.manual_seed(7)
    b = values(fill(dg.empty(1000)))
    np.testing.assert_array_equal(a, b)
    state = dg.get_rng_state()
    g1, g2 = dg.Generator().manual_seed(3), dg.Generator().manual_seed(3)
    first = values(fill(dg.empty(1000), generator=g1))
    np.testing.assert_array_equal(first, values(fill(dg.empty(1000), generator=g2)))
    assert not np.array_equal(first, values(fill(dg.empty(1000), generator=g1)))  # the generator advanced
    assert dg.get_rng_state() == state  # the process generator was not touched
    with pytest.raises(TypeError, match="generator"):
        fill(dg.empty(3), generator=5)


def test_factories_take_a_generator():
    for make in (lambda **g: dg.rand(1000, **g), lambda **g: dg.randn(1000, **g),
                 lambda **g: dg.randint(0, 50, (1000,), **g), lambda **g: dg.rand_like(dg.empty(1000), **g)):
        np.testing.assert_array_equal(values(make(generator=dg.Generator().manual_seed(11))),
                                      values(make(generator=dg.Generator().manual_seed(11))))
        assert not np.array_equal(values(make(generator=dg.Generator().manual_seed(11))),
                                  values(make(generator=dg.Generator().manual_seed(12))))
    u = values(dg.rand(N, generator=dg.Generator().manual_seed(0)))
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    n = values(dg.normal(1.0, 2.0, (N,), generator=dg.Generator().manual_seed(5)))
    np.testing.assert_array_equal(n, values(dg.normal(1.0, 2.0, (N,), generator=dg.Generator().manual_seed(5))))
    assert abs(n.mean() - 1.0) < 0.03 and abs(n.std() - 2.0) < 0.03
    with pytest.raises(TypeError, match="generator"):
        dg.arange(3, generator=dg.Generator())


def test_fills_and_autograd_as_torchs():
    for fill in FILLS:
        raises_both(lambda lib: fill(lib.zeros(3, requires_grad=True)),
                    "a leaf Variable that requires grad is being used in an in-place operation")
        with pytest.raises(RuntimeError) as error:
            fill(dg.zeros(3, requires_grad=True))
        assert "copy_" not in str(error.value)  # named as the method, not the copy it ends with

        def case(lib):
            x = lib.ones(3, requires_grad=True)
            y = x * 2
            fill(y)
            (y * 3).sum().backward()  # the old values were overwritten: a zero gradient
            return x.grad.tolist()
        assert case(torch) == case(dg) == [0.0, 0.0, 0.0]
    with dg.no_grad():
        x = dg.zeros(1000, requires_grad=True)
        x.exponential_()  # allowed on a leaf under no_grad, as torch's
    assert values(x.detach()).min() >= 0 and values(x.detach()).mean() > 0.5
