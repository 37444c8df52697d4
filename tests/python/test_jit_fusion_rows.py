"""dygrad.jit O1's row programs beyond sum and amax (docs/jit-fusion.md): amin, max/min over the last dim (values),
var/std and logsumexp as row reductions, the composed logsumexp and log-softmax of a cross-entropy, and the generated
code's exp and log (their fast forms with the full functions where a block leaves their range, and sums over heavy
passes taken from a row of values): one fused sub-op each, bitwise eager, generated and interpreted, float32 and
float64, over rows with +-0, +-inf and NaN."""
import numpy as np
import pytest

import dygrad as dg
from test_jit_fusion import bitwise, fused_names, fusion_config, replayed  # noqa: F401 (fusion_config: autouse)


def edge_rows(dtype, extremum_sign=1.0):
    """Rows of 37 (whole vectors of every level and a tail): an extremum at +0 and at -0 in different lanes (the
    rest of that row at `extremum_sign`), +inf, a row of -inf, a NaN, -inf among numbers, a -0.0 among numbers, a
    row far out of exp's range, the rest random."""
    x = np.random.default_rng(1).standard_normal((8, 37)) * 4
    x[1, :] = extremum_sign
    x[1, 2], x[1, 17] = 0.0, -0.0
    x[2, 5] = np.inf
    x[3, :] = -np.inf
    x[4, 7] = np.nan
    x[5, 9] = -np.inf
    x[6, 3] = -0.0
    x[7, :] *= 60  # exp(x - max) below the float32 normal range: the full exp's subnormals and zeros
    return dg.tensor(x.astype(dtype))


def check(f, args, names, codegen, fusion_config):  # noqa: F811
    fusion_config.codegen = codegen
    want = f(*args)
    want = want if isinstance(want, tuple) else (want,)
    jf, outs = replayed(f, args)
    got_names, graph = fused_names(jf)
    assert got_names == names and graph.num_ops == 1, got_names
    for got in outs:
        got = got if isinstance(got, tuple) else (got,)
        assert all(bitwise(g, w) for g, w in zip(got, want))
    return jf


CODEGEN = pytest.mark.parametrize("codegen", [True, False], ids=["generated", "interpreter"])
DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])


@CODEGEN
@DTYPES
def test_amin_is_a_row_reduction(fusion_config, codegen, dtype):  # noqa: F811
    def f(x):
        m = x.amin(-1, keepdim=True)
        return (x - m) * 0.5, m

    check(f, (edge_rows(dtype),), ["amin+add+mul_scalar"], codegen, fusion_config)


@CODEGEN
@DTYPES
def test_max_and_min_values_over_the_last_dim_are_row_reductions(fusion_config, codegen, dtype):  # noqa: F811
    def softmax_by_max(x):  # torch-style code: x.max(-1, keepdim=True).values
        m = x.max(-1, keepdim=True).values
        e = (x - m).exp()
        return e / e.sum(-1, keepdim=True), m

    def min_values(x):  # keepdim=False: the row values of shape [rows]
        return x.min(-1).values * 2.0

    # eager returns the first element equal to the maximum: the +0 at column 2, where amax's lanes may give -0
    check(softmax_by_max, (edge_rows(dtype, -1.0),), ["max_dim+add+exp+sum+div"], codegen, fusion_config)
    fusion_config.codegen = codegen
    x = edge_rows(dtype, 1.0)
    want = min_values(x)
    jf, outs = replayed(min_values, (x,))
    names, _ = fused_names(jf)
    assert names == ["min_dim+mul_scalar"], names
    assert all(bitwise(o, want) for o in outs)


def test_max_whose_indices_are_read_stays_its_own_op():
    def f(x):
        m = x.max(-1, keepdim=True)
        return (x - m.values) * 2.0, m.indices

    x = edge_rows("float32", -1.0)
    want = f(x)
    jf, outs = replayed(f, (x,))
    names, _ = fused_names(jf)
    assert names == ["add+mul_scalar"], names  # max_dim computes the indices: left to eager's kernel
    for got in outs:
        assert bitwise(got[0], want[0]) and (got[1].numpy() == want[1].numpy()).all()


@CODEGEN
@DTYPES
def test_var_and_std_are_row_reductions_in_eagers_float64_order(fusion_config, codegen, dtype):  # noqa: F811
    def standardise(x):
        d = x - x.mean(-1, keepdim=True)
        return d / (x.var(-1, keepdim=True) + 1e-5).sqrt()

    def stds(x):  # correction 0 and a correction above the row's length (divisor 0: inf or nan, as eager)
        return x.std(-1, correction=0) * 2.0, (x * 3.0).var(-1, keepdim=True, correction=40) + 1.0

    x = edge_rows(dtype) + 1000.0  # a large mean: the float64 accumulation matters for float32
    check(standardise, (x,), ["sum+div_scalar+add+var+add_scalar+sqrt+div"], codegen, fusion_config)
    fusion_config.codegen = codegen
    want = stds(x)
    jf, outs = replayed(stds, (x,))
    names, _ = fused_names(jf)
    # std, its [rows] values doubled, then x * 3 (a second pass over the row) and its var: one row program
    assert names == ["std+mul_scalar+mul_scalar+var+add_scalar"], names
    for got in outs:
        assert bitwise(got[0], want[0]) and bitwise(got[1], want[1])


@CODEGEN
@DTYPES
def test_logsumexp_op_and_the_composed_log_softmax_are_row_programs(fusion_config, codegen, dtype):  # noqa: F811
    def log_softmax_op(x):
        return x - x.logsumexp(-1, keepdim=True)

    def composed_cross_entropy(x, t):  # the log-softmax part as torch-style code writes it, then the pick and mean
        m = x.max(-1, keepdim=True).values
        logp = x - (m + (x - m).exp().sum(-1, keepdim=True).log())
        return -logp.gather(-1, t.unsqueeze(-1)).mean(), logp

    x = edge_rows(dtype, -1.0)
    check(log_softmax_op, (x,), ["logsumexp+add"], codegen, fusion_config)
    fusion_config.codegen = codegen
    t = dg.tensor(np.arange(8) * 4 % 37)
    want = composed_cross_entropy(x, t)
    jf, outs = replayed(composed_cross_entropy, (x, t))
    names, _ = fused_names(jf)
    assert names[0] == "max_dim+add+exp+sum+log+add+add", names
    for got in outs:
        assert bitwise(got[0], want[0]) and bitwise(got[1], want[1])


def test_generated_exp_takes_its_fast_form_and_the_full_one_where_needed(fusion_config):  # noqa: F811
    def softmax(x):
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)

    x = edge_rows("float32", -1.0)
    jf = check(softmax, (x,), ["amax+add+exp+sum+div"], True, fusion_config)
    src = dg.jit.source(softmax, x)
    # the fast form, its range test, the full exp for a block outside; the sum over exp's row buffer, not in its loop
    assert "exp_normal_range" in src and "exp_in_normal_range" in src and "dg::math::exp(" in src, src
    assert "return rb0[i]; });" in src, src
    assert jf.stats["fused_kernels"] == 1


@CODEGEN
def test_an_in_place_exp_reading_its_own_slot_is_not_run_twice(fusion_config, codegen):  # noqa: F811
    def f(x):
        x.mul_(3.0).exp_()
        return x.log() * 2.0

    base = np.random.default_rng(2).standard_normal(3000).astype(np.float32) * 40  # many blocks out of range
    want = f(dg.tensor(base))
    fusion_config.codegen = codegen
    jf = dg.jit(f, jit_level="O1")
    for _ in range(4):
        x = dg.tensor(base)
        got = jf(x)
        assert bitwise(got, want)
    names, _ = fused_names(jf)
    assert names == ["mul_scalar+exp+log+mul_scalar"], names
    if codegen:  # x is read and stored by the loop: one run with the full functions, no fast form
        src = dg.jit.source(f, dg.tensor(base))
        assert "exp_normal_range" not in src and "dg::math::exp(" in src, src


@CODEGEN
@DTYPES
def test_bfloat16_and_boolean_values_join_a_row_programs_vector_records(fusion_config, codegen, dtype):  # noqa: F811
    """The composed RMSNorm of autocast code (a bfloat16 input read as float, the result cast back to bfloat16) and a
    masked softmax (a boolean mask, a comparison of its result stored as bool): one row program each, the casts and
    masks in its vector records, eager's bits (row records and reductions stay in the compute type)."""
    def rmsnorm_bf16(xb, w):
        x = xb.float()
        return (x * (x * x).mean(-1, keepdim=True).add(1e-6).rsqrt() * w).bfloat16()

    def masked_softmax(s, mask):
        s = s.masked_fill(mask, float("-inf"))
        e = (s - s.amax(-1, keepdim=True)).exp()
        p = e / e.sum(-1, keepdim=True)
        return p, p > 0.05

    rows = edge_rows(dtype)
    if dtype == "float32":  # float32 programs carry bfloat16 values
        fusion_config.codegen = codegen
        xb, w = rows.bfloat16(), dg.tensor(np.random.default_rng(4).standard_normal(37).astype(dtype))
        want = rmsnorm_bf16(xb, w)
        jf, outs = replayed(rmsnorm_bf16, (xb, w))
        names, graph = fused_names(jf)
        assert names == ["copy+mul+sum+div_scalar+add_scalar+rsqrt+mul+mul+copy"] and graph.num_ops == 1, names
        assert all(o.dtype == dg.bfloat16 and o.view(dg.int16).tolist() == want.view(dg.int16).tolist() for o in outs)
        # a bfloat16 op whose rounded result the row's sum and its last pass read (autocast's `h * w` in bfloat16)
        def scaled_rmsnorm(xb, wb):
            x = (xb * wb).float()
            return x * (x * x).mean(-1, keepdim=True).add(1e-6).rsqrt()

        wb = w.bfloat16()
        want = scaled_rmsnorm(xb, wb)
        jf, outs = replayed(scaled_rmsnorm, (xb, wb))
        names, graph = fused_names(jf)
        assert names == ["mul+copy+mul+sum+div_scalar+add_scalar+rsqrt+mul"] and graph.num_ops == 1, names
        assert all(bitwise(o, want) for o in outs)
    mask = dg.tensor(np.random.default_rng(5).random((8, 37)) < 0.3)
    mask[2, :] = True  # a row masked whole: eager's NaN row
    check(masked_softmax, (rows, mask), ["masked_fill+amax+add+exp+sum+div+gt_scalar"], codegen, fusion_config)
