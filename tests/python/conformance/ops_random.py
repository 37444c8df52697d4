"""Entries of the factories (ops/random.cpp: rand, randn, randint, bernoulli_mask, bernoulli, multinomial, arange,
linspace) and of the test-only
op `_deferred_failure` (python/src/runtime.cpp). Random ops have no reference: seeded determinism, fresh values
per call, 1 vs 2 threads bitwise and their moments within bounds."""
import numpy as np

from .spec import FLOATS, Entry, Input

SHAPE = (Input((6, 7), grad=False),)
BIG = (Input((256, 512), grad=False),)  # 131072 values: the moment bounds below are 6 standard errors


def bounds(name, got, expected, sigma, n):
    return (name, float(got), expected, 6.0 * sigma / np.sqrt(n))


def uniform_moments(v):
    n = v.size
    return [bounds("mean", v.mean(), 0.5, np.sqrt(1 / 12), n), bounds("var", v.var(), 1 / 12, np.sqrt(1 / 180), n),
            ("min >= 0", float(v.min() >= 0), 1.0, 0.0), ("max < 1", float(v.max() < 1), 1.0, 0.0)]


def normal_moments(v):
    n = v.size
    return [bounds("mean", v.mean(), 0.0, 1.0, n), bounds("var", v.var(), 1.0, np.sqrt(2.0), n),
            bounds("P(|x| < 1)", (np.abs(v) < 1).mean(), 0.682689492, 0.4654, n)]


def randint_moments(v):
    n = v.size  # uniform integers in [-3, 5)
    counts = np.bincount((v + 3).astype(np.int64).ravel(), minlength=8)
    return [bounds("mean", v.mean(), 0.5, np.sqrt(63 / 12), n), ("min", float(v.min()), -3.0, 0.0),
            ("max", float(v.max()), 4.0, 0.0), bounds("P(x = 4)", counts[7] / n, 1 / 8, np.sqrt(7 / 64), n)]


def bernoulli_moments(v):
    return [bounds("P(1)", v.astype(np.float64).mean(), 0.3, np.sqrt(0.21), v.size)]


def multinomial_moments(v):
    n = v.size  # categories 0..3 with probabilities 0.1, 0.2, 0.3, 0.4: mean 2, variance 1
    return [bounds("mean", v.mean(), 2.0, 1.0, n), ("min", float(v.min()), 0.0, 0.0), ("max", float(v.max()), 3.0, 0.0),
            bounds("P(x = 3)", (v == 3).mean(), 0.4, np.sqrt(0.24), n)]


def multinomial_call(m, x):
    weights = m.tensor([1.0, 2.0, 3.0, 4.0], dtype=x.dtype, device=x.device).expand(x.shape[0], 4)
    return m.multinomial(weights, x.shape[1], replacement=True)


def without_replacement_moments(v):
    # 2 of 4 categories (weights 1, 2, 3, 4) per row, without replacement: P(category 3 drawn first) = 0.4, and
    # a row never repeats a category.
    first = v[..., 0]
    return [bounds("P(first = 3)", (first == 3).mean(), 0.4, np.sqrt(0.24), first.size),
            ("distinct", float((v[..., 0] != v[..., 1]).all()), 1.0, 0.0)]


ENTRIES = [
    Entry("rand", lambda m, x: m.rand(*x.shape, dtype=x.dtype, device=x.device), cases=(SHAPE,), big=BIG,
          check="random", differentiable=False, moments=uniform_moments),
    Entry("randn", lambda m, x: m.randn(*x.shape, dtype=x.dtype, device=x.device), cases=(SHAPE,), big=BIG,
          check="random",
          differentiable=False, moments=normal_moments),
    Entry("randint", lambda m, x: m.randint(-3, 5, tuple(x.shape), dtype=x.dtype, device=x.device), cases=(SHAPE,),
          big=BIG,
          check="random", differentiable=False, moments=randint_moments, dtypes=("int64", "int32", "float32")),
    Entry("bernoulli_mask", lambda m, x: m.bernoulli_mask(tuple(x.shape), 0.3, device=x.device), check="random",
          ref=lambda torch, x: torch.rand(tuple(x.shape)) < 0.3, differentiable=False, cases=(SHAPE,), big=BIG,
          dtypes=("float32",), moments=bernoulli_moments),
    Entry("bernoulli", lambda m, x: m.bernoulli(m.full(tuple(x.shape), 0.3, dtype=x.dtype, device=x.device)),
          check="random",
          differentiable=False, cases=(SHAPE,), big=BIG, moments=bernoulli_moments),
    Entry("multinomial", multinomial_call, check="random", differentiable=False, cases=(SHAPE,), big=BIG,
          dtypes=("float32", "float64"), moments=multinomial_moments),
    Entry("multinomial", lambda m, x: m.multinomial(
              m.tensor([1.0, 2.0, 3.0, 4.0], dtype=x.dtype, device=x.device).expand(x.shape[0], 4), 2),
          variant="without replacement", check="random", differentiable=False, cases=(SHAPE,), big=BIG,
          dtypes=("float32",), moments=without_replacement_moments),
    Entry("linspace", lambda m, x: (m.linspace(0, 1, x.shape[0], dtype=x.dtype, device=x.device),
                                    m.linspace(-3, 7.5, 7, dtype=x.dtype, device=x.device),
                                    m.logspace(-1, 2, x.shape[0], dtype=x.dtype, device=x.device),
                                    m.linspace(5, -2, 1, dtype=x.dtype, device=x.device)),
          differentiable=False, cases=((Input((10,), grad=False),),), big=(Input((65000,), grad=False),),
          dtypes=FLOATS + ("int64", "int32")),
    Entry("arange", lambda m, x: (m.arange(0, x.shape[0], dtype=x.dtype, device=x.device),
                                  m.arange(2, 11, 3, dtype=x.dtype, device=x.device), m.arange(x.shape[0], device=x.device)),
          differentiable=False, cases=((Input((10,), grad=False),),), big=(Input((65000,), grad=False),),  # float16 holds up to 65504
          dtypes=FLOATS + ("int64", "int32")),
    Entry("_deferred_failure", lambda m, x: m._C._deferred_failure(x, 7), cases=(SHAPE,), check="error",
          raises=IndexError, differentiable=False, dtypes=("float32",),
          note="a test-only op whose kernel fails: the error surfaces at the next sync"),
]
