"""dygrad.jit O1's loss tails (docs/jit-fusion.md, "Full reductions"): an elementwise chain ending in a sum over every
element and the ops on its one value (`((x - y) ** 2).mean()`, F.mse_loss, a scaled sum) become one fused sub-op
that keeps eager's order for a full sum (chunks of 16384 summed in eight lanes, the partials added in order): bitwise
eager, generated and interpreted, float32 and float64, for one chunk, whole chunks and a partial last chunk; in a
training step, with the step's parameters equal to eager's after several steps."""
import numpy as np
import pytest

import dygrad as dg
import dygrad.nn as nn
import dygrad.nn.functional as F
from jit_steps import assert_trained_alike, graph_of, regression_run
from test_jit_fusion import (bitwise, fused_names, fusion_config, poisoned_replays,  # noqa: F401 (autouse)
                              replayed)

CODEGEN = pytest.mark.parametrize("codegen", [True, False], ids=["generated", "interpreter"])
DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])
# One chunk with a tail of three; two whole chunks; two chunks and a last one of 37 (a tail of five)
SIZES = [(5, 7), (2, 16384), (32805,)]


def mse(x, y):
    return ((x - y) ** 2).mean()


def check(f, args, names, codegen, fusion_config):  # noqa: F811
    fusion_config.codegen = codegen
    fusion_config.measure = False  # the generated code runs once loaded
    want = f(*args)
    want = want if isinstance(want, tuple) else (want,)
    jf, outs = replayed(f, args)
    got_names, graph = fused_names(jf)
    assert got_names == names, got_names
    assert graph.kernel_choices == ["generated" if codegen else "interpreted"] * len(names)
    for got in outs:
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want) and all(bitwise(g, w) for g, w in zip(got, want))
    return jf


@CODEGEN
@DTYPES
@pytest.mark.parametrize("shape", SIZES, ids=["one-chunk", "whole-chunks", "partial-chunk"])
def test_a_mean_squared_error_is_one_program_bitwise_eager(fusion_config, codegen, dtype, shape):  # noqa: F811
    rng = np.random.default_rng(0)
    x = dg.tensor((rng.standard_normal(shape) * 3).astype(dtype))
    y = dg.tensor(rng.standard_normal(shape).astype(dtype))
    jf = check(mse, (x, y), ["add+pow_scalar+sum+div_scalar"], codegen, fusion_config)
    assert graph_of(jf).num_ops == 1


@CODEGEN
def test_mse_loss_and_a_scaled_sum_returned_with_the_sum(fusion_config, codegen):  # noqa: F811
    def tails(x, y):
        s = (x * y).sum()  # the sum is a result too: stored by the kernel
        return s, s * 0.5 + 1.0, F.mse_loss(x, y, reduction="sum")

    x, y = dg.randn(3, 11000), dg.randn(3, 11000)
    check(tails, (x, y), ["mul+sum+mul_scalar+add_scalar", "add+mul+sum"], codegen, fusion_config)


@CODEGEN
def test_exp_and_log_in_a_summed_chain_keep_eagers_bits_out_of_their_fast_range(fusion_config, codegen):  # noqa: F811
    """A heavy chain sums a row of its values (the split form); exp's fast form with the full function where a value
    leaves its range: overflow to inf in one chunk, subnormal results in another."""
    def f(x, w):
        return (x.exp() * w).sum() / 3.0, (x.abs() + 1.0).log().sum()

    x = np.random.default_rng(2).standard_normal(40000).astype("float32")
    x[100] = -100.0   # exp: a subnormal
    x[30000] = 89.0   # exp: inf
    w = dg.randn(40000)
    check(f, (dg.tensor(x), w), ["exp+mul+sum+div_scalar", "abs+add_scalar+log+sum"], codegen, fusion_config)
    x[30000] = 0.5    # every value in range: the fast forms alone
    check(f, (dg.tensor(x), w), ["exp+mul+sum+div_scalar", "abs+add_scalar+log+sum"], codegen, fusion_config)


def test_nan_and_infinities_reach_the_sum_as_in_eager(fusion_config):  # noqa: F811
    x = dg.randn(20000)
    x[5], x[17000] = float("inf"), float("-inf")
    check(mse, (x, dg.randn(20000)), ["add+pow_scalar+sum+div_scalar"], True, fusion_config)
    x[9] = float("nan")
    check(mse, (x, dg.randn(20000)), ["add+pow_scalar+sum+div_scalar"], True, fusion_config)


@CODEGEN
@DTYPES
def test_a_broadcast_operand_sums_whole_rows_per_chunk(fusion_config, codegen, dtype):  # noqa: F811
    """A bias broadcast along rows (a Linear's output then its loss): rows of 32 (a multiple of eight dividing a chunk),
    512 to a chunk, the last chunk 188 rows; the lanes carried across a chunk's rows as eager's one sum of the chunk."""
    def f(h, b, y):
        return ((h + b) * y).mean()  # terms of both signs: a sum whose bits depend on its order

    rng = np.random.default_rng(3)
    for _ in range(4):  # draws: one sum's order may happen to round alike
        h, b, y = (dg.tensor(rng.standard_normal(s).astype(dtype)) for s in [(700, 32), (32,), (700, 32)])
        check(f, (h, b, y), ["add+mul+sum+div_scalar"], codegen, fusion_config)
        check(lambda h, b, y: (h.exp() * b - y).sum(), (h, b, y), ["exp+mul+add+sum"], codegen, fusion_config)


def test_what_a_full_sum_program_refuses(fusion_config):  # noqa: F811
    """A broadcast operand along rows of 30 (not a multiple of eight), a transposed summed value, a sum over some dims,
    and a sum that starts a run: the sum stays eager's op (or a row program's), still eager's bits."""
    x, c = dg.randn(64, 30), dg.randn(30)
    cases = [
        (lambda x, c: ((x - c) ** 2).mean(), ["add+pow_scalar"]),                     # [64, 30] - [30]
        (lambda x, c: (x * 2.0 + 1.0).t().sum(), ["mul_scalar+add_scalar"]),         # a transposed summed value
        (lambda x, c: (x * 2.0 + 1.0).t().contiguous().sum(), ["mul_scalar+add_scalar", "copy+sum"]),  # rows of 64
        (lambda x, c: (x * 2.0 + 1.0).sum(0) / 4.0, ["mul_scalar+add_scalar"]),       # a column sum
        (lambda x, c: x.sum() / 4.0 + 1.0, ["div_scalar+add_scalar"]),                # the sum reads memory
    ]
    for f, names in cases:
        want = f(x, c)
        jf, outs = replayed(f, (x, c))
        assert fused_names(jf)[0] == names, (fused_names(jf)[0], names)
        assert all(bitwise(o, want) for o in outs)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(64, 128), nn.Linear(128, 64)

    def forward(self, x, y):
        out = self.b(F.gelu(self.a(x)))
        return F.mse_loss(out, y) + 0.01 * (out ** 2).mean()   # a loss and a penalty: two tails


@CODEGEN
def test_a_training_step_with_loss_tails_is_eager_bits_over_steps(fusion_config, codegen):  # noqa: F811
    fusion_config.codegen = codegen
    adamw = lambda ps: dg.optim.AdamW(ps, lr=1e-3)  # noqa: E731
    dg.use_deterministic_algorithms(True)
    try:
        eager = regression_run(Regressor, adamw, (64, 64), steps=4)
        jitted = regression_run(Regressor, adamw, (64, 64), steps=4, jit_level="O1")
    finally:
        dg.use_deterministic_algorithms(False)
    assert_trained_alike(eager, jitted)
    names = [n for n, _ in graph_of(jitted[2]).fused_sources()]
    assert sum("sum" in n.split("+") and n.split("+")[-1] != "sum" or n.endswith("+sum") for n in names) >= 2, names


def test_a_poisoned_input_skips_only_what_eager_skips(fusion_config):  # noqa: F811
    """The poisoned-input rule inside a full-reduction program: a summed chain reading a failed kernel's output is
    skipped with the records on its total, and a record on a good total reading a poisoned single value is skipped
    alone; what eager computes is computed, bitwise."""
    def chain(x):
        bad = dg._C._deferred_failure(x, 9)  # its kernel fails: what reads it is skipped
        y = x * 2.0                           # runs (a result)
        return y, ((y - bad) ** 2).mean()     # skipped, its sum and the mean too

    def tail(x):
        bad = dg._C._deferred_failure(x, 9)[0, 0]
        s = (x * x).sum()                     # runs
        return s, s + bad                     # the add on the total is skipped

    for f, names in [(chain, ["mul_scalar+add+pow_scalar+sum+div_scalar"]), (tail, ["mul+sum+add"])]:
        jf = poisoned_replays(f, dg.randn(40, 37), 0)
        assert fused_names(jf)[0] == names, fused_names(jf)[0]
