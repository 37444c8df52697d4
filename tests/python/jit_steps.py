"""The training steps the JIT tests compile and compare with eager (test_jit.py, test_jit_symbolic.py,
test_jit_device.py): one definition, so every test exercises the same step."""
import numpy as np

import dygrad as dg
import dygrad.nn as nn
import dygrad.nn.functional as F


def llama_step(model, opt, clip=0.5):
    """forward, backward, gradient clipping, the optimizer step and zero_grad; returns the detached loss."""
    def step(x, y):
        loss = model(x, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def adamw_run(make_model, T, steps, jit_level=None, lr=1e-3, weight_decay=0.01):
    """A token model made after manual_seed(0), trained `steps` AdamW steps (llama_step) on random tokens [2, T]
    drawn after manual_seed(1), eagerly or under dg.jit at `jit_level`: (model, losses, step function, optimizer)."""
    dg.manual_seed(0)
    model = make_model()
    opt = dg.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    step = llama_step(model, opt)
    step = dg.jit(step, jit_level=jit_level) if jit_level else step
    dg.manual_seed(1)
    losses = [step(dg.randint(0, 256, (2, T)), dg.randint(0, 256, (2, T))) for _ in range(steps)]
    return model, losses, step, opt


def regression_run(make_model, make_opt, shape, steps=5, jit_level=None):
    """A regression model made after manual_seed(0) with make_opt(parameters), trained `steps` llama_step steps on
    random (x, y) of `shape` drawn after manual_seed(1), eagerly or under dg.jit: (model, losses, step function)."""
    dg.manual_seed(0)
    model = make_model()
    step = llama_step(model, make_opt(model.parameters()))
    step = dg.jit(step, jit_level=jit_level) if jit_level else step
    dg.manual_seed(1)
    losses = [step(dg.randn(*shape), dg.randn(*shape)) for _ in range(steps)]
    return model, losses, step


def graph_of(f):
    """The graph a dg.jit function replays (its first entry with one)."""
    return next(e.graph for e in f._entries.values() if getattr(e, "graph", None) is not None)


def assert_trained_alike(a, b):
    """Two regression_run results: the same losses and parameters, bit for bit."""
    assert [float(x) for x in a[1]] == [float(y) for y in b[1]]
    assert all(dg.equal(p, q) for p, q in zip(a[0].parameters(), b[0].parameters()))


def mlp_sgd(seed=0):
    """An MLP with dropout and SGD (momentum, Nesterov, weight decay), seeded: (model, optimizer, step)."""
    dg.manual_seed(seed)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 4))
    opt = dg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return m, opt, step


def assert_close(got, want, dtype):
    """Within float rounding of eager (the patterns): float64 1e-10 relative, float32 2e-5, of the largest value."""
    got, want = got.numpy(), want.numpy()
    rtol = 1e-10 if dtype == dg.float64 else 2e-5
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * float(np.abs(want).max()))


def after_passes(fn, *args):
    """dg.jit.graph(fn, *args, passes=True) and its fusion section alone (the graph fusion left)."""
    text = dg.jit.graph(fn, *args, passes=True)
    return text, text.split("=== fusion")[-1].split("\n===")[0]


# The integer view of each dtype a fused program reads or writes: bits compared exactly (NaN payloads included).
BITS = {dg.float32: dg.int32, dg.float64: dg.int64, dg.bfloat16: dg.int16, dg.float16: dg.int16, dg.bool: dg.uint8}


def bits(t):
    """A tensor's elements as their bits (a list of integers)."""
    return t.contiguous().view(BITS[t.dtype]).tolist()


def check_bits(fn, *args, calls=4, fused=1):
    """fn at O1 gives eager's dtypes and bits at every call (NaN payloads included), its O1 graph holds `fused` fused
    sub-ops, and its kernels run as dg.jit.config.codegen says. Returns the graph."""
    want = fn(*args)
    want = want if isinstance(want, tuple) else (want,)
    f = dg.jit(fn, jit_level="O1")
    for _ in range(calls):
        got = f(*args)
        got = got if isinstance(got, tuple) else (got,)
        assert [g.dtype for g in got] == [w.dtype for w in want]
        assert [bits(g) for g in got] == [bits(w) for w in want]
    graph = graph_of(f)
    assert graph.num_fused == fused, dg.jit.graph(fn, *args, passes=True)
    loaded = {"measuring", "generated", "interpreted"}  # a few replays: the first launches may still be measuring
    assert set(graph.kernel_choices) <= (loaded if dg.jit.config.codegen else {"interpreted"})
    return graph
