"""dygrad.jit O1's selections in fused programs (docs/jit-fusion.md, "Booleans, where and clamp"): comparisons,
boolean logic (`logical_*` and `~`, `&`, `|`, `^` on masks), `where` with tensor or number operands and `clamp` with
number or tensor bounds join elementwise runs; a boolean result is 0 or 1 in registers or stored as eager's bool
byte. Eager's bits, generated and interpreted, float32 and float64, over NaN with payloads, infinities, signed
zeros and subnormals; the bfloat16 forms eager's float computation keeps exact; refusals; a training step."""
import math
import struct

import pytest

import dygrad as dg
import dygrad.nn as nn
from jit_steps import BITS, after_passes, assert_trained_alike, bits, check_bits, graph_of, regression_run


pytestmark = pytest.mark.usefixtures("jit_config")  # conftest.py

DTYPES = [dg.float32, dg.float64]


def nan_with_payload(dtype, sign=1, payload=0x2345):
    """A quiet NaN with a payload (and a sign): a where must carry its bits."""
    if dtype == dg.float64:
        bits = (0x7FF8000000000000 | payload) | (1 << 63 if sign < 0 else 0)
        return struct.unpack("<d", struct.pack("<Q", bits))[0]
    bits = (0x7FC00000 | payload) | (1 << 31 if sign < 0 else 0)
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def specials(dtype):
    tiny = 1e-310 if dtype == dg.float64 else 1e-40  # subnormal
    return [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, tiny, -tiny, math.inf, -math.inf, math.nan,
            nan_with_payload(dtype), nan_with_payload(dtype, -1, 0x51), 1e30, -1e30, 0.25, 3.0, -3.0]


def operand(shape, dtype, seed, special=True):
    """Random values with the special ones written at the front, rotated by the seed so that two operands meet
    different ones (each payload NaN written through its bits: a float64 -> float32 cast need not keep it)."""
    dg.manual_seed(seed)
    x = dg.randn(*shape, dtype=dg.float64) * 2
    vals = specials(dtype)
    vals = vals[seed % len(vals):] + vals[:seed % len(vals)]
    if special:
        x.view(-1)[: len(vals)] = dg.tensor(vals, dtype=dg.float64)
    x = x.to(dtype)
    if special:
        bits = x.view(-1).view(BITS[dtype])
        for i, v in enumerate(vals):
            if v != v:
                fmt, ifmt = ("<d", "<q") if dtype == dg.float64 else ("<f", "<i")
                bits[i] = struct.unpack(ifmt, struct.pack(fmt, v))[0]
    return x


def fused_ops(fn, *args):
    """The graph's lines after the fusion pass: its fused sub-ops and the ops left beside them."""
    _, section = after_passes(fn, *args)
    lines = [line.strip() for line in section.splitlines()[1:] if line.strip()]
    return lines


@pytest.mark.parametrize("codegen", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_comparisons_and_logic_are_eager_bits_stored_as_bool_bytes(codegen, dtype):
    dg.jit.config.codegen = codegen
    x, y = operand((40, 33), dtype, 0), operand((40, 33), dtype, 7)
    y2 = operand((33,), dtype, 3)  # broadcast along the rows

    def f(x, y, y2):
        a = (x * 1) < y                       # NaN compares false
        b = (x + 0) >= y2
        c = (x * 1) != y                      # ... and true under ne
        d = (y * 1) == y2
        d2 = ((x * 1) <= y) ^ ((y * 1) > y2)
        d3 = (x * 1).lt(1e30) | (x * 1).ne(math.nan) | (x * 1).lt(math.nan)  # a NaN scalar: ne alone is true
        e = (x * 1 > 0.5) | (x * 1 <= -0.25)  # the scalar forms
        g = ((x * 1).eq(0.0) ^ (y * 1).ne(math.inf)) & ~((x * 1).ge(-math.inf))
        h = (x * 1).logical_not().logical_and(a).logical_or(b.logical_not())
        return a, b, c, d, d2, d3, e, g, h

    check_bits(f, x, y, y2)


@pytest.mark.parametrize("codegen", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_where_keeps_the_chosen_elements_bits_nan_payloads_included(codegen, dtype):
    dg.jit.config.codegen = codegen
    x, y = operand((37, 40), dtype, 0), operand((37, 40), dtype, 5)
    col = operand((37, 1), dtype, 2)
    mask = operand((40,), dtype, 9, special=False) > 0  # a boolean argument, broadcast

    def f(x, y, col, mask):
        s = x * 1                                    # payload NaNs survive a multiplication by 1 on x86
        a = dg.where(s > 0, s, 0.01 * s)            # leaky ReLU through where
        b = dg.where(mask, y * 1, col)              # a boolean slot, a column broadcast
        c = dg.where(s != s, -0.0, s)               # where(cond, number, tensor)
        d = dg.where(mask & (s < y), s, math.inf)   # where(cond, tensor, number)
        return a + 0, b, c, d

    check_bits(f, x, y, col, mask)


@pytest.mark.parametrize("codegen", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_clamp_with_number_and_tensor_bounds_is_eager_bits(codegen, dtype):
    dg.jit.config.codegen = codegen
    x = operand((33, 40), dtype, 0)
    lo, hi = operand((33, 40), dtype, 4) - 1, operand((40,), dtype, 11) + 1  # NaN bounds among them

    def f(x, lo, hi):
        s = x * 1
        return (s.clamp(min=-0.5, max=0.5), s.clamp(min=0.0) - 1, s.clamp(max=-0.0) + 0,
                s.clamp(min=-math.inf, max=math.inf), dg.clamp(s, lo, hi), s.clamp(min=lo) * 1, s.clamp(max=hi))

    check_bits(f, x, lo, hi)


@pytest.mark.parametrize("codegen", [True, False])
def test_bf16_comparisons_and_clamps_fuse_and_keep_eager_bits(codegen):
    # eager compares bfloat16 values as floats and clamps in float, rounding once: exact in a float32 program
    dg.jit.config.codegen = codegen
    x, y = operand((64, 40), dg.float32, 0).to(dg.bfloat16), operand((64, 40), dg.float32, 6).to(dg.bfloat16)

    def f(x, y):
        s = x * 1.5
        m = (s > y) | ~(s == s)
        return m, s.clamp(-0.3, 0.7) + y, dg.clamp(s, y, y + 1), (s.logical_not() ^ m)

    check_bits(f, x, y)


def test_runs_of_booleans_only_fuse_and_open_runs_that_compute():
    # logical ops on mask arguments open a run (no compute type yet), which the where then fixes (float64 here)
    dg.manual_seed(2)
    m1, m2 = dg.rand(24, 16) < 0.5, dg.rand(16) < 0.5
    x = dg.randn(24, 16, dtype=dg.float64)

    def f(m1, m2, x):
        m = (m1 & ~m2) | (m1 ^ m2).logical_not()
        return m, dg.where(m, x, -x) * 2

    check_bits(f, m1, m2, x)

    def g(m1, m2):
        return (m1 & m2) | ~m1
    check_bits(g, m1, m2)


def test_graph_shows_the_selections_fused():
    x = dg.randn(8, 32)

    def f(x):
        m = x > 0
        y = dg.where(m, x, 0.01 * x).clamp(min=-1.0, max=1.0)
        return y * 2

    lines = fused_ops(f, x)
    assert len(lines) == 1 and "jit_fused[gt_scalar+mul_scalar+where+clamp_scalar+mul_scalar]" in lines[0], lines
    src = dg.jit.source(f, x)
    assert "dg::math::clamp_below(" in src and "dg::math::clamp_above(" in src and "? T(1) : T(0)" in src


def test_dead_and_repeated_comparisons_are_removed_and_merged():
    """A boolean result of an elementwise op never raises (integer results may: an index out of range), so DCE
    removes a comparison nothing reads and CSE merges a repeated one."""
    def f(x):
        unused = x > 1.0          # noqa: F841 (dead)
        a = dg.where(x < 0, x * 0.5, x)
        b = dg.where(x < 0, x * 0.25, x)  # x < 0 again
        return a + b

    x = dg.randn(64)
    text = dg.jit.graph(f, x, passes=True)
    dce = text.split("=== dce")[1].split("\n===")[0]
    cse = text.split("=== cse")[1].split("\n===")[0]
    assert "gt_scalar" not in dce, dce
    assert cse.count("lt_scalar") == 1, cse
    jf = dg.jit(f, jit_level="O1")
    for _ in range(3):
        assert dg.equal(jf(x), f(x))


def test_what_cannot_be_exact_is_left_to_eager():
    # a bfloat16 where copies the chosen element's bits (a float round trip would quiet NaN payloads); a NaN scalar
    # of where_scalar or a NaN clamp bound (eager stores that NaN's bits, or fills a quiet NaN); a scalar comparison
    # of booleans (eager converts the number to bool)
    x, m = dg.randn(8, 16), dg.rand(16) < 0.5
    xb = x.to(dg.bfloat16)
    cases = [
        (lambda x, m: dg.where(m, x * 2, x) + 1, (xb, m), "where("),
        (lambda x, m: dg.where(m, x * 2, math.nan) + 1, (x, m), "where_scalar("),
        (lambda x, m: (x * 2).clamp(min=math.nan) + 1, (x, m), "clamp_scalar("),
        (lambda x, m: ((x * 2 > 0) == True) & m, (x, m), "eq_scalar("),  # noqa: E712
    ]
    for fn, args, op in cases:
        lines = fused_ops(fn, *args)
        assert any(line.startswith(op) or (" " + op) in line for line in lines), (op, lines)
        want = fn(*args)
        f = dg.jit(fn, jit_level="O1")
        for _ in range(3):
            got = f(*args)
        assert bits(got) == bits(want)


class LeakyClampedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        h = self.a(x)
        h = dg.where(h > 0, h, 0.01 * h)    # leaky ReLU through where (its backward: where on the mask)
        return self.b(h.clamp(-2.0, 2.0))   # clamped activations (backward: ge, le, logical_and, where)


class ClampedLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = LeakyClampedMLP()

    def forward(self, x, y):
        d = self.net(x) - y
        return (d.clamp(min=-1.0, max=1.0) ** 2).mean()  # a clamped (Huber-like) loss


def test_a_training_step_through_where_and_clamp_is_eager_bits_with_the_selections_fused():
    # deterministic mode: bitwise equality with eager is what fusion must keep
    dg.use_deterministic_algorithms(True)
    try:
        def opt(p):
            return dg.optim.SGD(p, lr=0.05, momentum=0.9)

        eager = regression_run(ClampedLoss, opt, (8, 16), steps=5)
        jitted = regression_run(ClampedLoss, opt, (8, 16), steps=5, jit_level="O1")
        assert_trained_alike(jitted, eager)
        names = " ".join(graph_of(jitted[2]).describe())
        fused = [n for n in names.split() if n.startswith("jit_fused[")]
        for op in ("gt_scalar", "where", "clamp_scalar", "ge_scalar", "le_scalar", "logical_and"):
            assert any(op in n for n in fused), (op, names)
    finally:
        dg.use_deterministic_algorithms(False)


@pytest.mark.parametrize("codegen", [True, False])
@pytest.mark.parametrize("dtype", DTYPES + [dg.bfloat16])
def test_sin_and_cos_fuse_with_eagers_bits_inside_and_outside_the_bounded_range(codegen, dtype):
    # float32: eager's guarded kernel, math::sin_bounded / cos_bounded for |x| <= kSinCosMax (2^17 with FMA, 2^12
    # without) and libm's sinf / cosf beyond, inf and NaN; float64 std::sin / std::cos; bfloat16 computed in float and
    # rounded. Values near multiples of pi/2, at the range's edges, tiny and huge, in one block with in-range ones
    # (the generated block runs again with the full functions) and in blocks of their own.
    dg.jit.config.codegen = codegen
    x = operand((4, 1024), dg.float64, 0).to(dg.float32) * 3
    edge = [math.pi, -math.pi / 2, 3 * math.pi / 2, 4096.0, 4097.0, -131072.0, 131073.0, 1e6, -3e7, 2.44140625e-4,
            -2.44e-4, 1e-42, 51471.85, 710.0, math.inf, -math.inf, math.nan, -0.0]
    x[1, : len(edge)] = dg.tensor(edge)
    x[3] = x[3] * 1e-3  # a row in range only: the fast forms alone
    x = x.to(dtype)

    def f(x):
        s = (x * 1).sin()
        return s * (x * 2).cos() + x.cos().sin()

    check_bits(f, x)


@pytest.mark.parametrize("codegen", [True, False])
def test_a_smooth_l1_loss_tail_is_one_full_reduction_program(codegen):
    # comparisons, where and clamp in the vector records of a full-reduction program (a loss tail): eager's bits
    dg.jit.config.codegen = codegen
    x, y = operand((64, 512), dg.float32, 0, special=False), operand((64, 512), dg.float32, 3, special=False)

    def f(x, y):
        d = x - y
        return dg.where(d.abs() < 1, 0.5 * d * d, d.abs() - 0.5).clamp(max=4.0).mean()

    lines = fused_ops(f, x, y)
    assert len(lines) == 1 and "where+clamp_scalar+sum+div_scalar]" in lines[0], lines
    check_bits(f, x, y)
