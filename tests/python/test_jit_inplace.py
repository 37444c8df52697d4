"""dygrad.jit O1's in-place reuse (docs/jit-fusion.md, "In-place reuse"): after fusion, an elementwise sub-op's output
is written over an input that dies with it (as eager's `x.mul_(2)` would), so the arena holds one buffer where it
held two. Eager's bits (the same functors on the same values), generated and interpreted; the refusals: an input read
after the output's first store, a broadcast input, a float32 exp (its guarded fast form needs a loop that can run
twice), an input still read later."""
import pytest

import dygrad as dg
from dygrad import nn
from jit_steps import assert_trained_alike, graph_of, regression_run


pytestmark = pytest.mark.usefixtures("jit_config")  # conftest.py


def note(fn, *args, which="inplace"):
    text = dg.jit.graph(fn, *args, passes=True)
    return next(line for line in text.splitlines() if line.startswith(f"=== {which}"))


def compare(fn, *args, calls=4):
    """fn at O1 with the pass and without: (arena bytes with it, without it); each call's results eager's bits."""
    want = fn(*args)
    arenas = []
    for inplace in (True, False):
        dg.jit.config.inplace = inplace
        f = dg.jit(fn, jit_level="O1")
        for _ in range(calls):
            got = f(*args)
            pairs = zip(got, want) if isinstance(want, tuple) else [(got, want)]
            assert all(dg.equal(a, b) for a, b in pairs), inplace
        assert f.stats["replays"] == calls - 2  # the first call runs eagerly, the second captures
        arenas.append(graph_of(f).arena_bytes)
    dg.jit.config.inplace = True
    return arenas


def chain(x, w):
    h = x @ w                           # internal, dies in the fused run below
    y = (h * 2 + 1).tanh() * 0.5        # one fused run: its output written over h
    return y @ w.t()


def lone(x, w):
    return (x @ w).sigmoid() @ w.t()    # a lone elementwise op between two matmuls: written over its input


@pytest.mark.parametrize("codegen", [True, False])
@pytest.mark.parametrize("dtype", [dg.float32, dg.float64])
def test_a_fused_run_writes_over_its_dying_input_bitwise_in_a_smaller_arena(codegen, dtype):
    dg.jit.config.codegen = codegen
    dg.manual_seed(0)
    x, w = dg.randn(64, 96, dtype=dtype), dg.randn(96, 128, dtype=dtype)
    item = 4 if dtype == dg.float32 else 8
    assert f"1 output(s) written over a dying input ({64 * 128 * item} bytes" in note(chain, x, w)
    with_it, without = compare(chain, x, w)
    # without: h and y alive at once at the fused run ([64, 128] each); with it: one buffer
    assert without == 2 * 64 * 128 * item and with_it == 64 * 128 * item


def test_a_lone_elementwise_op_writes_over_its_first_input():
    dg.manual_seed(0)
    x, w = dg.randn(32, 48), dg.randn(48, 80)
    assert "1 output(s) written over a dying input (10240 bytes" in note(lone, x, w)
    with_it, without = compare(lone, x, w)
    assert with_it < without


def test_only_the_output_stored_after_the_last_read_of_the_input_takes_it():
    def f(x, w):
        h = x @ w
        a = h * 2          # stored (the matmul below reads it), then h is read again: a may not take h (the
        c = h + 1          # program would read a where it reads h); c, stored after every read of h, takes it
        return a @ w.t(), c @ w.t()

    dg.manual_seed(0)
    x, w = dg.randn(16, 24), dg.randn(24, 40)
    text = dg.jit.graph(f, x, w, passes=True)
    assert "1 output(s) written over a dying input" in note(f, x, w)
    fused = [line for line in text.split("=== inplace")[1].splitlines() if "jit_fused" in line]
    assert len(fused) == 1
    compare(f, x, w)


@pytest.mark.parametrize("case", ["read later", "broadcast", "exp", "argument"])
def test_refusals(case):
    dg.manual_seed(0)
    x, w = dg.randn(16, 24), dg.randn(24, 40)
    if case == "read later":      # h is read after the run: it does not die there
        def f(x, w):
            h = x @ w
            return ((h * 2 + 1).tanh() @ w.t()) + (h @ w.t())
    elif case == "broadcast":     # the run's dying input is [1, 40], its output [16, 40]: other geometries
        def f(x, w, z):
            h = x[:1] @ w
            return (z * 2 + h).tanh() @ w.t()
    elif case == "exp":           # float32 exp: the run keeps its guarded fast form
        def f(x, w):
            h = x @ w
            return ((h * 2).exp() + 1) @ w.t()
    else:                         # the input is the function's argument: never the arena's
        def f(x, w):
            return ((x * 2 + 1).tanh()) @ w
    args = (x, w, dg.randn(16, 40)) if case == "broadcast" else (x, w)
    assert "nothing to reuse" in note(f, *args)
    compare(f, *args)


def test_the_switch_and_deterministic_mode():
    dg.manual_seed(0)
    x, w = dg.randn(64, 96), dg.randn(96, 128)
    dg.jit.config.inplace = False
    assert "=== inplace" not in dg.jit.graph(chain, x, w, passes=True)
    dg.jit.config.inplace = True
    dg.use_deterministic_algorithms(True)  # it keeps eager's bits: deterministic mode runs it
    try:
        assert "1 output(s) written over" in note(chain, x, w)
    finally:
        dg.use_deterministic_algorithms(False)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(48, 192), nn.Linear(192, 48)

    def forward(self, x, y):
        h = self.a(x)
        h = h * dg.sigmoid(h * 1.702)   # composed quick-GELU
        return ((self.b(h) - y) ** 2).mean()


def test_a_training_step_is_bitwise_eager_over_steps():
    sgd = lambda ps: dg.optim.SGD(ps, lr=0.05, momentum=0.9)  # noqa: E731
    eager = regression_run(Mlp, sgd, (32, 48))
    with_it = regression_run(Mlp, sgd, (32, 48), jit_level="O1")
    dg.jit.config.inplace = False
    without = regression_run(Mlp, sgd, (32, 48), jit_level="O1")
    dg.jit.config.inplace = True
    assert_trained_alike(eager, with_it)
    assert_trained_alike(eager, without)
    assert graph_of(with_it[2]).arena_bytes <= graph_of(without[2]).arena_bytes


def test_generated_kernels_are_measured_against_the_interpreter():
    """Each generated kernel's first launches alternate it with the interpreter (timed); the faster runs after. Which
    one won depends on the machine, never on the results: every launch is eager's bits."""
    def f(x):
        return (x * 3 + 1).tanh() * x - 2

    x = dg.randn(384, 256)
    want = f(x)
    g = dg.jit(f, jit_level="O1")
    assert dg.equal(g(x), want) and dg.equal(g(x), want)  # the capture, then the first replay (measuring)
    assert graph_of(g).kernel_choices == ["measuring"]
    outs = [g(x) for _ in range(8)]
    assert all(dg.equal(o, want) for o in outs)
    assert graph_of(g).kernel_choices in (["generated"], ["interpreted"])
    dg.jit.config.measure = False
    g2 = dg.jit(f, jit_level="O1")
    assert all(dg.equal(g2(x), want) for _ in range(3))
    assert graph_of(g2).kernel_choices == ["generated"]
    dg.jit.config.codegen = False
    g3 = dg.jit(f, jit_level="O1")
    assert all(dg.equal(g3(x), want) for _ in range(3))
    assert graph_of(g3).kernel_choices == ["interpreted"]
