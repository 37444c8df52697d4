"""dygrad.jit O1's versions and rematerialize passes (docs/jit-fusion.md, "Versions and rematerialization"): a captured
buffer that holds several values one after the other becomes a buffer per value, and elementwise results that the
backward reads late are computed again there instead of held. Both keep eager's bits (the same functors on the same
values); what they change is the arena: tested by its size and by steady-state peak memory."""
import math

import pytest

import dygrad as dg
from dygrad import nn
from jit_steps import llama_step


pytestmark = pytest.mark.usefixtures("jit_config")  # conftest.py


def new_gelu(x):
    return 0.5 * x * (1.0 + dg.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * dg.pow(x, 3.0))))


class GeluMLP(nn.Module):
    """Two layers of a composed GELU MLP: autograd saves the GELU's tanh, its products and its output."""

    def __init__(self, width=64, hidden=256, layers=2):
        super().__init__()
        self.up = nn.ModuleList(nn.Linear(width, hidden) for _ in range(layers))
        self.down = nn.ModuleList(nn.Linear(hidden, width) for _ in range(layers))

    def forward(self, x, y):
        for up, down in zip(self.up, self.down):
            x = x + down(new_gelu(up(x)))
        return ((x - y) ** 2).mean()


def mlp_run(jit, steps=6, rematerialize=True):
    dg.manual_seed(0)
    m = GeluMLP()
    opt = dg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    step = llama_step(m, opt)
    dg.jit.config.rematerialize = rematerialize
    f = dg.jit(step, jit_level="O1") if jit else step
    dg.manual_seed(1)
    data = [(dg.randn(32, 64), dg.randn(32, 64)) for _ in range(steps)]
    losses = [f(x, y) for x, y in data]
    return m, losses, f, step, data


def graph_of(f):
    return next(e.graph for e in f._entries.values() if getattr(e, "graph", None) is not None)


def test_a_composed_gelu_mlp_step_rematerializes_bitwise_eager_in_a_smaller_arena():
    m0, l0, _, _, _ = mlp_run(False)
    m1, l1, f1, step, data = mlp_run(True)
    m2, l2, f2, _, _ = mlp_run(True, rematerialize=False)
    assert f1.stats["replays"] == 4 and f1.stats["fused_kernels"] >= 1
    for losses, model in ((l1, m1), (l2, m2)):
        assert all(dg.equal(a, b) for a, b in zip(l0, losses))
        assert all(dg.equal(p, q) for p, q in zip(m0.parameters(), model.parameters()))
    with_remat, without = graph_of(f1).arena_bytes, graph_of(f2).arena_bytes
    assert with_remat < without * 0.75, (with_remat, without)
    dg.jit.config.rematerialize = True
    text = dg.jit.graph(step, *data[0], passes=True)
    note = next(line for line in text.splitlines() if line.startswith("=== rematerialize"))
    assert "computed again where they are read late" in note


def test_deterministic_mode_runs_the_rematerialize_pass():
    try:
        dg.use_deterministic_algorithms(True)
        _, l0, _, _, _ = mlp_run(False)
        _, l1, f1, step, data = mlp_run(True)
        text = dg.jit.graph(step, *data[0], passes=True)
    finally:
        dg.use_deterministic_algorithms(False)
    assert all(dg.equal(a, b) for a, b in zip(l0, l1))
    assert "=== rematerialize:" in text and "=== versions:" in text


def test_an_operand_written_after_its_use_is_not_read_again():
    # t = tanh(x) is read right away and again 20 ops later; the argument x is written in between, so computing t
    # again from x would read the new x: the pass must keep t (and the result stays eager's).
    def f(x):
        t = x.tanh()
        y = t * 2.0
        for _ in range(20):
            y = (y @ y.transpose(0, 1)) @ y * 0.01  # matmuls: not fusible, a gap
        x.add_(1.0)
        return y + t * 3.0

    x0 = dg.randn(16, 16)
    with dg.no_grad():
        want = f(x0.clone())
        g = dg.jit(f, jit_level="O1")
        for _ in range(3):
            got = g(x0.clone())
        text = dg.jit.graph(f, x0.clone(), passes=True)
    assert dg.equal(want, got)
    note = next(line for line in text.splitlines() if line.startswith("=== rematerialize"))
    assert "nothing held" in note


def test_a_result_read_late_is_computed_again_from_a_live_operand():
    def f(x):
        h = x * 1.5
        t = h.tanh()
        y = t * 2.0
        for _ in range(20):
            y = (y @ y.transpose(0, 1)) @ y * 0.01
        return y + t * 3.0 + h  # t and h, both read late, are computed again from x (an argument)

    x = dg.randn(16, 16)
    with dg.no_grad():
        want = f(x)
        g = dg.jit(f, jit_level="O1")
        for _ in range(3):
            got = g(x)
        text = dg.jit.graph(f, x, passes=True)
    assert dg.equal(want, got)
    note = next(line for line in text.splitlines() if line.startswith("=== rematerialize"))
    assert "2 result(s) computed again where they are read late (3 op(s))" in note  # h twice, t once


def test_a_gpt2_step_gives_its_reused_buffers_a_buffer_per_value_and_peaks_below_the_fused_model():
    from dygrad.models import gpt2
    GPT, _ = gpt2.build(dg)
    # activations dominate, as at the bench config (the arena and the escaping gradients are both allocated for a
    # whole replay: at a size where parameters dominate the fused eager step peaks lower)
    cfg = gpt2.GPTConfig(block_size=128, n_layer=2, n_head=2, n_embd=64, batch_size=8)
    x = dg.randint(0, 256, (8, 128))

    def peak(fused, jit):
        dg.manual_seed(0)
        m = GPT(cfg, fused=fused)
        opt = dg.optim.AdamW(m.parameters(), lr=1e-3)
        step = llama_step(m, opt)
        f = dg.jit(step, jit_level="O1") if jit else step
        for _ in range(3):
            f(x, x)
        dg.synchronize()
        dg.memory.reset_peak_memory_stats()
        before = dg.memory.memory_allocated()
        for _ in range(2):
            f(x, x)
        dg.synchronize()
        return dg.memory.max_memory_allocated(), before, step

    fused_peak, _, _ = peak(True, False)
    o1_peak, _, step = peak(False, True)
    assert o1_peak <= fused_peak, (o1_peak, fused_peak)
    text = dg.jit.graph(step, x, x, passes=True)
    note = next(line for line in text.splitlines() if line.startswith("=== versions"))
    assert "written whole after an earlier one" in note


# --- constant folding ------------------------------------------------------------------------------------------

def test_values_made_from_factories_alone_are_computed_once_when_optimized():
    w = dg.randn(10, 8)

    def f(x):
        pos = dg.arange(0, 10)                 # a position index: folded
        scale = dg.ones(8) * 0.5 + 0.25        # elementwise on a factory: folded
        z = dg.zeros(10, 8)
        z[2:5] = x[2:5]                        # written again by a copy: not a constant
        return dg.nn.functional.embedding(pos, w) * scale + z + x

    x = dg.randn(10, 8)
    text = dg.jit.graph(f, x, passes=True)
    note = next(line for line in text.splitlines() if line.startswith("=== fold"))
    assert "4 op(s) computed once, now: 2 constant buffer(s)" in note, note  # arange, fill, mul, add
    final = text.split("=== fusion")[1].split("\n===")[0]
    assert "arange" not in final and "embedding" in final
    want = f(x)
    g = dg.jit(f, jit_level="O1")
    for _ in range(3):
        got = g(x)
    assert dg.equal(want, got)
    x2 = dg.randn(10, 8)
    assert dg.equal(g(x2), f(x2))  # the folded values do not depend on the argument


def test_fold_leaves_random_factories_and_results_alone():
    def f(x):
        noise = dg.rand(4)  # random: drawn anew each call
        ones = dg.ones(4)   # a result: a new tensor each call
        return x + noise, ones

    x = dg.randn(4)
    text = dg.jit.graph(f, x, passes=True)
    note = next(line for line in text.splitlines() if line.startswith("=== fold"))
    assert "nothing constant" in note
    g = dg.jit(f, jit_level="O1")
    outs = [g(x) for _ in range(3)]
    assert not dg.equal(outs[1][0], outs[2][0]) and outs[1][1] is not outs[2][1]


# --- cat lowered into copies ------------------------------------------------------------------------------------

@pytest.mark.parametrize("interpreted", [False, True], ids=["generated", "interpreted"])
@pytest.mark.parametrize("dtype", [dg.float32, dg.float64], ids=["float32", "float64"])
def test_a_composed_rotary_embedding_writes_its_halves_interleaved_in_one_pass(dtype, interpreted, jit_config):
    # stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1): the cat becomes two copies into its output's slices
    # (strides 2, offsets 0 and 1: disjoint), which the run computing the halves absorbs.
    jit_config.codegen = not interpreted
    x = dg.randn(2, 3, 37, 16, dtype=dtype)
    cos, sin = dg.randn(37, 8, dtype=dtype), dg.randn(37, 8, dtype=dtype)

    def rope(x):
        x1, x2 = x[..., ::2], x[..., 1::2]
        return dg.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

    text = dg.jit.graph(rope, x, passes=True)
    final = text.split("=== fusion")[1].split("\n===")[0]
    header, *lines = final.splitlines()
    assert "1 cat(s) as copies into their slices" in header
    assert len(lines) == 1 and lines[0].split("(")[0].endswith("+copy+copy]")  # one fused pass, no cat
    g = dg.jit(rope, jit_level="O1")
    for _ in range(3):
        got = g(x)
    assert dg.equal(got, rope(x)) and g.stats["fused_kernels"] == 1


def test_a_cat_whose_pieces_overlap_a_read_stays_apart():
    # The run reads y (the cat's output) through a slice that overlaps both pieces: a store could change what it
    # reads, so the copies do not join a run that reads it.
    a, b = dg.randn(8, 4), dg.randn(8, 4)

    def f(a, b):
        y = dg.cat((a * 2, b * 3), 0)   # [16, 4]
        return y[4:12] + 1              # overlaps both halves

    text = dg.jit.graph(f, a, b, passes=True)
    g = dg.jit(f, jit_level="O1")
    for _ in range(4):  # new values each call: a stale arena would not pass for the right one
        a, b = dg.randn(8, 4), dg.randn(8, 4)
        assert dg.equal(g(a, b), f(a, b))
    assert "cat(s) as copies" in text
