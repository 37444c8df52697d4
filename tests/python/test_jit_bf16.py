"""dygrad.jit O1's bfloat16 runs (docs/jit-fusion.md, "bfloat16 runs"): bfloat16 elementwise ops and the casts
between float32 and bfloat16 fuse into float32 programs whose records round to bfloat16 where eager's op stored
bfloat16, so a fused run reads and computes what eager's op-by-op evaluation did: eager's bits, generated and
interpreted, special values included. The conformance sweep at O1 in bfloat16 covers every op one by one
(test_conformance.py::test_capture_and_replay_at_o1_in_bfloat16); this file covers chains, casts, refusals and an
autocast training step."""
import math

import pytest

import dygrad as dg
from dygrad import nn
from jit_steps import assert_trained_alike, bits, check_bits, graph_of, regression_run


pytestmark = pytest.mark.usefixtures("jit_config")  # conftest.py

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 3.140625, -2.5, 1e-40, -1e-40, 1e-3, 88.0, 89.0, -104.0, 3e38, -3e38,
           math.inf, -math.inf, math.nan, 1.00390625, 255.5, -7.0, 0.1]


def operand(n=4096, seed=0, special=True):
    dg.manual_seed(seed)
    x = dg.randn(n) * 3
    if special:
        x[: len(SPECIAL)] = dg.tensor(SPECIAL)
    return x.to(dg.bfloat16)


@pytest.mark.parametrize("codegen", [True, False])
def test_bf16_chains_of_every_functor_are_eager_bits_with_special_values(codegen):
    dg.jit.config.codegen = codegen
    x, y = operand(seed=0), operand(seed=1, special=False)
    chains = [
        lambda x, y: ((x * 1.5 + 0.25).exp() - 1).log1p() * y,
        lambda x, y: (x.abs().sqrt() + x.sigmoid() - y.tanh()).rsqrt() / (y * y + 1),
        lambda x, y: dg.nn.functional.gelu(x * y) + dg.nn.functional.silu(x) - dg.nn.functional.relu(-y),
        lambda x, y: dg.nn.functional.gelu(x, approximate="tanh").expm1() + x.abs().log(),
        lambda x, y: (dg.maximum(x, y) - dg.minimum(x, y)).pow(3) + x.sign() * x.reciprocal() + (2 - x) / (3 / y),
        lambda x, y: x.lerp(y, 0.3) * x.pow(0.5) + y.pow(-2) - x.neg().exp(),
    ]
    for fn in chains:
        check_bits(fn, x, y)


def test_casts_both_ways_round_as_eager_in_one_run():
    # float32 values between bfloat16 numbers (ties to even, NaN, overflow to inf) cast down, computed, cast up
    dg.manual_seed(3)
    x = dg.randn(4096) * 100
    x[:8] = dg.tensor([1.00390625, 1.01171875, -1.00390625, math.nan, 3.4e38, -3.4e38, 1e-39, -0.0])

    def f(x):
        h = (x * 0.5).to(dg.bfloat16)       # rounded once, by the cast
        g = (h * h + 1).sqrt().float()      # bfloat16 ops, then exact widening
        return g * x - 1, (g + x).to(dg.bfloat16)

    check_bits(f, x)


def test_a_bf16_clone_is_left_to_eager_so_nan_payloads_survive():
    # eager copies a bfloat16 tensor's bits; a float round trip would make every NaN 0x7fc0
    raw = dg.tensor([0x7fc1, -0x3f, 0x7f81, 0x3f80] * 64, dtype=dg.int16)   # NaNs with payloads, -NaN, 1.0

    def f(x):
        return (x * 1).clone() + 0, x.clone()

    x = raw.view(dg.bfloat16)
    text = dg.jit.graph(f, x, passes=True).split("=== fusion")[1].split("\n===")[0]
    assert "copy(" in text and "+copy" not in text   # the clone stays eager's copy
    check_bits(f, x, fused=0)
    assert bits(f(x)[1]) == raw.tolist()


def test_a_row_reduction_does_not_join_a_bf16_run():
    def f(x):
        h = x.float() * 2                      # a cast: the run touches bfloat16
        return h - h.amax(-1, keepdim=True)    # a row program over float32 would follow: not in the same run

    x = operand().reshape(64, 64)
    text = dg.jit.graph(f, x, passes=True).split("=== fusion")[1].split("\n===")[0]
    assert "amax" in text.split("jit_fused")[0] + text  # the reduction is its own sub-op or a run of its own
    want = f(x)
    g = dg.jit(f, jit_level="O1")
    for _ in range(3):
        assert bits(g(x)) == bits(want)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(64, 256), nn.Linear(256, 64)

    def forward(self, x, y):
        with dg.autocast("cpu", dtype=dg.bfloat16):
            h = self.a(x)
            h = h * dg.sigmoid(h * 1.702)          # composed quick-GELU in bfloat16
            out = self.b(h)
        return ((out.float() - y) ** 2).mean()


@pytest.mark.parametrize("codegen", [True, False])
def test_an_autocast_training_step_is_eager_bits_over_steps(codegen):
    dg.jit.config.codegen = codegen

    adamw = lambda ps: dg.optim.AdamW(ps, lr=1e-3)  # noqa: E731
    eager = regression_run(Mlp, adamw, (32, 64))
    jitted = regression_run(Mlp, adamw, (32, 64), jit_level="O1")
    assert_trained_alike(eager, jitted)
    graph = graph_of(jitted[2])
    assert "dg_bf16_round" in graph.source() and graph.num_fused >= 2


def test_rematerialize_takes_bf16_chains():
    """A composed GELU MLP under autocast: its bfloat16 GELU intermediates are computed again in the backward instead
    of held (test_jit_remat.py's model), eager's bits, a smaller arena."""
    from test_jit_remat import GeluMLP

    class AutocastMLP(GeluMLP):
        def forward(self, x, y):
            with dg.autocast("cpu", dtype=dg.bfloat16):
                return super().forward(x, y).float()

    sgd = lambda ps: dg.optim.SGD(ps, lr=0.1, momentum=0.9)  # noqa: E731
    eager = regression_run(AutocastMLP, sgd, (32, 64))
    with_remat = regression_run(AutocastMLP, sgd, (32, 64), jit_level="O1")
    dg.jit.config.rematerialize = False
    without = regression_run(AutocastMLP, sgd, (32, 64), jit_level="O1")
    assert_trained_alike(eager, with_remat)
    assert_trained_alike(eager, without)
    assert graph_of(with_remat[2]).arena_bytes < graph_of(without[2]).arena_bytes
