"""Math, reduction and shape bindings against torch: values, gradients, dtype rules, methods and errors."""
import numpy as np
import pytest
import torch

import dygrad as dg
from peer import assert_matches, tensors_from

rng = np.random.default_rng(0)


def pair(shape, dtype=np.float64, low=-2.0, high=2.0, transposed=False, requires_grad=False):
    """The same random values as a dygrad and a torch tensor (transposed: a non-contiguous view)."""
    a = rng.uniform(low, high, size=shape[::-1] if transposed else shape).astype(dtype)
    return tensors_from(a, requires_grad, transposed)


def close(d, t, rtol=1e-6, atol=1e-7):
    assert_matches(d, t, rtol, atol)


UNARY = {
    "exp": (-2, 2), "log": (0.1, 3), "sqrt": (0.1, 3), "rsqrt": (0.1, 3), "abs": (-2, 2), "sin": (-3, 3),
    "cos": (-3, 3), "tanh": (-3, 3), "sigmoid": (-4, 4), "relu": (-2, 2),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("transposed", [False, True])
def test_unary_values_and_grads(name, transposed):
    low, high = UNARY[name]
    d, t = pair((5, 3), low=low, high=high, transposed=transposed, requires_grad=True)
    out_d, out_t = getattr(dg, name)(d), getattr(torch, name)(t)
    close(out_d, out_t)
    close(getattr(d, name)(), out_t)  # the Tensor method
    w = rng.standard_normal((5, 3) if not transposed else (3, 5)).T if transposed else rng.standard_normal((5, 3))
    out_d.backward(dg.tensor(np.ascontiguousarray(w)))
    out_t.backward(torch.tensor(np.ascontiguousarray(w)))
    close(d.grad, t.grad)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_silu(approximate):
    d, t = pair((4, 6), requires_grad=True)
    out_d = dg.gelu(d, approximate=approximate) + dg.silu(d)
    out_t = torch.nn.functional.gelu(t, approximate=approximate) + torch.nn.functional.silu(t)
    close(out_d, out_t)
    out_d.sum().backward()
    out_t.sum().backward()
    close(d.grad, t.grad)


def test_unary_dtype_rules():
    i = dg.tensor([1, 4, 9])
    assert dg.sqrt(i).dtype == dg.float32  # integers promote to the default float
    assert dg.abs(i).dtype == dg.int64
    assert dg.relu(dg.tensor([1.0, -1.0], dtype=dg.bfloat16)).dtype == dg.bfloat16
    close(dg.exp(dg.tensor([0.5, 1.0], dtype=dg.float32)), torch.exp(torch.tensor([0.5, 1.0])))


def test_inplace_exp_relu():
    d, t = pair((3, 4))
    assert d.exp_() is d
    close(d, t.exp_())
    d2, t2 = pair((3, 4))
    r = dg.relu_(d2)
    assert r is d2
    close(d2, torch.relu_(t2))


def test_pow_forms_and_operator():
    d, t = pair((3, 4), low=0.5, high=2, requires_grad=True)
    e_d, e_t = pair((4,), low=-1, high=2, requires_grad=True)
    close(d ** 2, t ** 2)
    close(d.pow(0.5), t.pow(0.5))
    close(2 ** d, 2 ** t)
    close(2.5 ** d, 2.5 ** t)
    close(dg.pow(d, e_d), torch.pow(t, e_t))
    close(dg.pow(3, e_d), torch.pow(3, e_t))
    out_d, out_t = d ** e_d + 1.5 ** d, t ** e_t + 1.5 ** t
    out_d.sum().backward()
    out_t.sum().backward()
    close(d.grad, t.grad)
    close(e_d.grad, e_t.grad)
    # dtype rules
    i = dg.tensor([1, 2, 3])
    assert (i ** 2).dtype == dg.int64 and (i ** 2.0).dtype == dg.float32 and (2.0 ** i).dtype == dg.float32
    assert (dg.tensor([1.0], dtype=dg.float32) ** dg.tensor([2.0])).dtype == dg.float32
    # in place
    x = dg.tensor([1.0, 2.0, 3.0])
    y = x
    x **= 2
    assert x is y and x.tolist() == [1.0, 4.0, 9.0]
    assert x.pow_(0.5) is x and x.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(RuntimeError, match=r"\[pow_\]"):  # torch: RuntimeError, result type can't be cast
        dg.tensor([1, 2]).pow_(0.5)
    with pytest.raises(RuntimeError, match=r"\[pow_\]"):
        i2 = dg.tensor([1, 2])
        i2 **= 0.5


def test_square_is_pow_two():
    # torch composes square as pow(input, 2): bool squares to int64, integers stay integers, the gradient is 2x.
    for values in ([1, -2, 3], [True, False], [1.5, -2.0], [[0.5, 2.0], [3.0, -1.0]]):
        d, t = dg.tensor(values), torch.tensor(values)
        assert str(dg.square(d).dtype).split(".")[-1] == str(torch.square(t).dtype).split(".")[-1]
        assert dg.square(d).tolist() == torch.square(t).tolist() and d.square().tolist() == t.square().tolist()
    d, t = pair((3, 4), transposed=True, requires_grad=True)
    dg.square(d).sum().backward()
    torch.square(t).sum().backward()
    close(d.grad, t.grad)
    x = dg.tensor([3, -4])
    assert x.square_() is x and x.tolist() == [9, 16]
    with pytest.raises(RuntimeError, match=r"\[square_\] result type int64 can't be cast to the desired output type bool"):
        dg.tensor([True]).square_()
    with pytest.raises(TypeError, match=r"square"):
        dg.square([1.0])
    with pytest.raises(TypeError):
        d ** "x"


def test_maximum_minimum_broadcast():
    a_d, a_t = pair((3, 1, 4), requires_grad=True)
    b_d, b_t = pair((5, 4), transposed=False, requires_grad=True)
    out_d = dg.maximum(a_d, b_d) * 2 + a_d.minimum(b_d)
    out_t = torch.maximum(a_t, b_t) * 2 + a_t.minimum(b_t)
    close(out_d, out_t)
    out_d.sum().backward()
    out_t.sum().backward()
    close(a_d.grad, a_t.grad)
    close(b_d.grad, b_t.grad)
    with pytest.raises(TypeError, match=r"\[maximum\]"):
        dg.maximum(a_d, 1.0)


def test_unary_errors():
    with pytest.raises(TypeError, match=r"\[exp\]"):
        dg.exp([1.0, 2.0])
    with pytest.raises(TypeError, match=r"\[exp\]"):
        dg.exp(dg.ones(2), dg.ones(2))
    with pytest.raises(TypeError, match=r"\[gelu\]"):
        dg.gelu(dg.ones(2), approximate=1)
    close(dg.exp(input=dg.zeros(2)), torch.exp(torch.zeros(2)))


# --- reductions -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_dim(name, keepdim):
    d, t = pair((4, 5), transposed=True, requires_grad=True)
    r_d, r_t = getattr(dg, name)(d, 1, keepdim=keepdim), getattr(torch, name)(t, 1, keepdim=keepdim)
    close(r_d.values, r_t.values)
    close(r_d.indices, r_t.indices)
    values, indices = r_d  # a tuple
    assert isinstance(r_d, tuple) and values is r_d[0] and indices is r_d[1]
    assert type(r_d).__name__ == name
    r_d.values.sum().backward()
    r_t.values.sum().backward()
    close(d.grad, t.grad)
    close(getattr(d, name)(), getattr(t, name)())                         # all elements
    close(getattr(d, name)(dim=0).values, getattr(t, name)(dim=0).values)
    e_d, e_t = pair((5,))
    close(getattr(dg, name)(d, e_d), getattr(torch, name)(t, e_t))        # elementwise form


def test_amax_argmax_logsumexp():
    d, t = pair((3, 4, 5), requires_grad=True)
    close(dg.amax(d, (0, 2)), torch.amax(t, (0, 2)))
    close(d.amin(1, keepdim=True), t.amin(1, keepdim=True))
    close(dg.amax(d), torch.amax(t))
    close(dg.argmax(d), torch.argmax(t))
    close(d.argmax(dim=1), t.argmax(dim=1))
    close(dg.argmin(d, 2, keepdim=True), torch.argmin(t, 2, keepdim=True))
    out_d, out_t = dg.logsumexp(d, 1), torch.logsumexp(t, 1)
    close(out_d, out_t)
    close(d.logsumexp((0, 2), keepdim=True), t.logsumexp((0, 2), keepdim=True))
    out_d.sum().backward()
    out_t.sum().backward()
    close(d.grad, t.grad)


@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std(name):
    d, t = pair((4, 6), transposed=True, requires_grad=True)
    f_d, f_t = getattr(dg, name), getattr(torch, name)
    close(f_d(d), f_t(t))
    close(f_d(d, 1), f_t(t, 1))
    close(f_d(d, dim=0, keepdim=True), f_t(t, dim=0, keepdim=True))
    close(f_d(d, False), f_t(t, False))                                # var(input, unbiased)
    close(f_d(d, 1, unbiased=False), f_t(t, 1, unbiased=False))
    close(getattr(d, name)(dim=(0, 1), correction=0), getattr(t, name)(dim=(0, 1), correction=0))
    out_d, out_t = f_d(d, 1, correction=2), f_t(t, 1, correction=2)
    out_d.sum().backward()
    out_t.sum().backward()
    close(d.grad, t.grad)


def test_reduction_errors():
    with pytest.raises(TypeError, match=r"\[argmax\]"):
        dg.argmax(dg.ones(3), dim="0")
    with pytest.raises(IndexError, match=r"\[amax\]"):
        dg.amax(dg.ones(3), 2)
    with pytest.raises(TypeError, match=r"\[logsumexp\]"):
        dg.logsumexp(dg.ones(3))


# --- shapes ---------------------------------------------------------------------------------------------------------
def test_shape_views():
    d, t = pair((2, 1, 3, 1), requires_grad=True)
    close(d.squeeze(), t.squeeze())
    close(dg.squeeze(d, 1), torch.squeeze(t, 1))
    close(d.squeeze((1, -1)), t.squeeze((1, -1)))
    close(d.squeeze(0), t.squeeze(0))  # not size 1: unchanged
    close(d.unsqueeze(-1), t.unsqueeze(-1))
    close(dg.flatten(d), torch.flatten(t))
    close(d.flatten(1, 2), t.flatten(1, 2))
    close(d.flatten(start_dim=2), t.flatten(start_dim=2))
    close(dg.unflatten(d, 2, (3, 1)), torch.unflatten(t, 2, (3, 1)))
    close(d.narrow(2, 1, 2), t.narrow(2, 1, 2))
    close(dg.select(d, 2, -1), torch.select(t, 2, -1))
    out_d = d.narrow(2, 1, 2).sum() + d.select(0, 1).sum() * 2
    out_t = t.narrow(2, 1, 2).sum() + t.select(0, 1).sum() * 2
    out_d.backward()
    out_t.backward()
    close(d.grad, t.grad)
    with pytest.raises(IndexError, match=r"\[squeeze\]"):
        d.squeeze(7)
    with pytest.raises(TypeError, match=r"\[unsqueeze\]"):
        d.unsqueeze(1.0)


# --- fuzz: wrong types, arity, huge/negative sizes, NaN and empty tensors raise, never crash ------------------------
FUZZ_FUNCTIONS = [
    "exp", "log", "gelu", "pow", "maximum", "max", "min", "amax", "argmax", "logsumexp", "var", "std", "squeeze",
    "unsqueeze", "flatten", "unflatten", "narrow", "select", "eq", "lt", "where", "masked_fill", "clamp",
    "logical_and", "softmax", "log_softmax", "embedding", "cross_entropy", "cat", "stack", "split", "chunk",
    "index_select", "gather", "scatter_add", "index_add", "tril", "rms_norm", "swiglu", "rotary_position_embedding",
    "scaled_dot_product_attention", "adamw_step", "rand", "randn", "randint", "arange", "bernoulli_mask", "matmul",
    "mm", "bmm", "outer", "linear", "floor", "sign", "reciprocal", "isnan", "isfinite", "rotary_attention", "sgd_step",
]


def test_fuzz_bindings_raise_cleanly():
    fuzz_rng = np.random.default_rng(11)
    pool = [None, 0, -1, 3, 2 ** 70, -(2 ** 40), 1.5, float("nan"), "x", [], [1, -2], (2, 3), True,
            dg.ones(2, 3), dg.zeros(0), dg.tensor([1, 0]), dg.tensor([True, False]), dg.tensor(float("nan")),
            [dg.ones(2)], object()]
    for name in FUZZ_FUNCTIONS:
        f = getattr(dg, name)
        for _ in range(40):
            args = [pool[i] for i in fuzz_rng.integers(0, len(pool), size=fuzz_rng.integers(0, 5))]
            try:
                f(*args)
            except (TypeError, ValueError, IndexError, RuntimeError, NotImplementedError, OverflowError, MemoryError):
                pass
    try:
        dg.synchronize()
    except Exception:  # a deferred kernel error from an index out of range is expected here
        pass


def test_rounding_sign_reciprocal_and_float_predicates_match_torch():
    """floor / ceil / trunc / fix, sign, reciprocal, isnan / isinf / isfinite against torch 2.13 on the values the
    sweep's random draws never reach (nan, +-inf, +-0, halves) and on every dtype family: results, dtypes, the
    in-place forms, the errors (bool rounding; reciprocal_ of an integer tensor)."""
    values = {"float": [1.5, -2.5, float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 0.49999997, -7.0],
              "int": [1, -2, 3, 0], "bool": [True, False]}
    for name in ("floor", "ceil", "trunc", "fix", "sign", "reciprocal", "isnan", "isinf", "isfinite"):
        for kind, vals in values.items():
            t, d = torch.tensor(vals), dg.tensor(vals)
            try:
                expected = getattr(torch, name)(t)
            except NotImplementedError:  # torch's rounding of bool; dygrad raises TypeError, as for abs
                with pytest.raises(TypeError, match=r"not supported for bool"):
                    getattr(dg, name)(d)
                continue
            got = getattr(d, name)()
            assert str(got.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1], (name, kind)
            np.testing.assert_array_equal(got.numpy(), expected.numpy(), err_msg=f"{name} {kind}")
            if name in ("floor", "ceil", "trunc", "fix", "sign") and kind != "bool":
                inplace = dg.tensor(vals)
                assert getattr(inplace, name + "_")() is inplace
                np.testing.assert_array_equal(inplace.numpy(), expected.numpy())
    with pytest.raises(RuntimeError, match=r"\[reciprocal_\] result type float32 can't be cast to the desired output "
                                           r"type int64"):
        dg.tensor([1, 2]).reciprocal_()
    x = dg.tensor([0.3, 2.0]).requires_grad_()
    assert not x.isnan().requires_grad and x.isfinite().dtype == dg.bool


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_logaddexp_special_values_and_every_range(dtype):
    """logaddexp (math::logaddexp, vectorised for float32): infinities, nan, far-apart operands (the log1p term
    below one ulp of the maximum), subnormal results and a broadcast row, against torch; finite values against the
    float64 formula within 4 ulps of the larger of the sum's two terms, max(a, b) and log1p(exp(-|a - b|)) (the exp, log
    and division each round once, the sum once more; where the terms cancel, as torch's formula does too, the error
    is relative to them, not to the result)."""
    inf, nan = float("inf"), float("nan")
    a = [inf, -inf, inf, -inf, nan, 0.0, 1.0, -100.0, -90.0, 20.0, 0.0, -3.0, 1e-30, -104.0]
    b = [inf, -inf, -inf, 3.0, 1.0, nan, 1.0, -100.0, -110.0, -20.0, -100.0, 2.5, -1e-30, -104.5]
    da, ta = dg.tensor(a, dtype=getattr(dg, dtype)), torch.tensor(a, dtype=getattr(torch, dtype))
    db, tb = dg.tensor(b, dtype=getattr(dg, dtype)), torch.tensor(b, dtype=getattr(torch, dtype))
    got, want = dg.logaddexp(da, db).numpy(), torch.logaddexp(ta, tb).numpy()
    special = ~np.isfinite(want)
    np.testing.assert_array_equal(got[special], want[special])
    x = np.random.default_rng(3).uniform(-30, 30, (64, 40)).astype(dtype)
    y = np.random.default_rng(4).uniform(-30, 30, (40,)).astype(dtype)
    got_bc = dg.logaddexp(dg.tensor(x), dg.tensor(y)).numpy().astype(np.float64)
    finite = (np.array(a)[~special], np.array(b)[~special])
    for g, (p, q) in ((got[~special], finite), (got_bc, np.broadcast_arrays(x, y))):
        p = np.asarray(p, np.float64).astype(dtype).astype(np.float64)
        q = np.asarray(q, np.float64).astype(dtype).astype(np.float64)
        ref = np.logaddexp(p, q)
        scale = np.maximum(np.abs(np.maximum(p, q)), np.log1p(np.exp(-np.abs(p - q))))
        ulp = np.spacing(scale.astype(dtype)).astype(np.float64)
        assert np.all(np.abs(g.astype(np.float64) - ref) <= 4 * ulp), np.max(np.abs(g - ref) / ulp)


def test_expm1_and_log1p_special_values_ranges_and_gradients():
    """expm1 and log1p (math::expm1 / math::log1p, vectorised for float32): signed zeros, infinities, nan, -1 and
    below, the clamps' edges against torch; float32 within 2 ulp of float64's value over every range (near 0, where
    exp(x) - 1 and log(1 + x) would cancel, up to overflow); the gradients y + 1 and 1 / (1 + x)."""
    inf, nan = float("inf"), float("nan")
    specials = [0.0, -0.0, inf, -inf, nan, -1.0, -2.0, 1e-30, -1e-30, 1e-8, 20.0, 20.5, 88.0, 89.0, -20.5, -104.0,
                3e38]
    for dtype in ("float32", "float64"):
        d, t = dg.tensor(specials, dtype=getattr(dg, dtype)), torch.tensor(specials, dtype=getattr(torch, dtype))
        for op in ("expm1", "log1p"):
            got, want = getattr(dg, op)(d).numpy(), getattr(torch, op)(t).numpy()
            np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))
            np.testing.assert_allclose(got, want, rtol=2.4e-7 if dtype == "float32" else 1e-15, atol=0)
    draws = np.random.default_rng(5)
    x = np.concatenate([draws.uniform(-30, 90, 4000), draws.uniform(-1, 1, 4000), draws.uniform(-1e-6, 1e-6, 1000),
                        np.exp(draws.uniform(-80, 80, 1000))]).astype(np.float32)
    for op, domain in (("expm1", x), ("log1p", x[x > -1])):
        with np.errstate(over="ignore"):
            want = getattr(np, op)(domain.astype(np.float64))
            finite = np.isfinite(want.astype(np.float32))
        got = getattr(dg, op)(dg.tensor(domain)).numpy().astype(np.float64)
        ulp = np.spacing(np.abs(want[finite]).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(got[finite] - want[finite]) <= 2 * ulp), op
        assert np.all(got[~finite] == np.inf), op
    values = np.array([-0.5, 0.0, 1e-10, 3.0])
    d, t = dg.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
    (dg.expm1(d) + d.log1p()).sum().backward()
    (torch.expm1(t) + t.log1p()).sum().backward()
    np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), rtol=1e-15)
    assert dg.tensor([1, 2]).expm1().dtype == dg.float32


def test_pow_float32_special_values_and_ranges_against_float64():
    """math::pow (float32, vectorised, its arithmetic in double): C99's special cases on a grid of signed zeros,
    infinities, nan, +-1, subnormals, odd and even integers, halves and huge values, against float64's pow (and torch
    where the result is 0, inf or nan); random bases and exponents over every magnitude (results overflowing,
    underflowing into subnormals) within half an ulp of float64's value plus 2^-16 ulp (its two double steps err by
    about 2^-45 relative, so only the final rounding counts), through each kernel: a tensor exponent broadcast over
    rows, a number exponent, a number base."""
    grid = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45,
                     3e-39, 3.4e38, -3.4e38, 0.1, 7.5, -7.5, 16777216.0, 50331651.0, -1e30, 1e-30], np.float32)
    x, y = (a.ravel() for a in np.meshgrid(grid, grid, indexing="ij"))
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    got = dg.pow(dg.tensor(x), dg.tensor(y)).numpy()
    np.testing.assert_array_equal(got, want)  # nan where nan, signed zeros and infinities where they belong
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))
    special = ~np.isfinite(want) | (want == 0)
    np.testing.assert_array_equal(got[special], torch.pow(torch.tensor(x), torch.tensor(y)).numpy()[special])
    rng = np.random.default_rng(7)
    cases = [(np.exp(rng.uniform(-100, 100, (512, 64))), rng.uniform(-3, 3, (64,))),
             (rng.uniform(0, 4, (512, 64)), rng.uniform(-70, 70, (64,))),
             (rng.uniform(0, 4, (512, 64)) * 1e-39, rng.uniform(-2, 2, (64,))),
             (-np.round(rng.uniform(0, 40, (512, 64))), np.round(rng.uniform(-15, 15, (64,))))]
    for base, exponent in cases:
        base, exponent = base.astype(np.float32), exponent.astype(np.float32)
        d = dg.tensor(base)
        number = float(exponent[5])
        for result, b, e in [(dg.pow(d, dg.tensor(exponent)), base, exponent),
                             (dg.pow(d, number), base, np.float32(number)),
                             (number ** dg.tensor(base), np.float32(number), base)]:
            result = result.numpy()
            with np.errstate(all="ignore"):
                ref = np.power(np.float64(b) if np.ndim(b) == 0 else b.astype(np.float64), np.asarray(e, np.float64))
            finite = np.abs(ref) <= np.finfo(np.float32).max
            ulp = np.spacing(np.abs(ref[finite]).astype(np.float32)).astype(np.float64)
            assert np.all(np.abs(result[finite].astype(np.float64) - ref[finite]) <= (0.5 + 2.0 ** -16) * ulp)
            np.testing.assert_array_equal(result[~finite], ref[~finite].astype(np.float32))
