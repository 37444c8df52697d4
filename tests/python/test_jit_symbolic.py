"""dygrad.jit's symbolic shapes (docs/jit.md, "Symbolic shapes"; src/dygrad/jit/symbolic.{h,cpp}): dims marked dynamic
are served by one symbolic graph at sizes never captured, bitwise equal to eager, with no recompile; what a symbolic
replay cannot re-derive is a logged recompile naming the reason."""
import math

import pytest

import dygrad as dg
import dygrad.nn as nn
import dygrad.nn.functional as F
from dygrad.models import llama
from jit_steps import llama_step, mlp_sgd


def recompile_lines(capfd):
    return [line for line in capfd.readouterr().err.splitlines() if "recompil" in line]


def run_sizes(fn, sizes, make_args, seed=1):
    dg.manual_seed(seed)
    return [fn(*make_args(*s)) for s in sizes]


def same(a, b):
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and dg.equal(a, b)


# --- plain functions ----------------------------------------------------------------------------------------------
def test_sizes_never_captured_replay_bitwise_eager_with_no_recompile(capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles,captures")

    def f(x, w):  # a mean's divisor, a T x T product, a softmax over a dynamic dim and a view by the sizes
        B, T, C = x.shape
        s = (x @ x.transpose(1, 2)).softmax(-1) @ x                     # [B, T, C], through [B, T, T]
        return (s.reshape(B * T, C) @ w).relu().mean(0), s.sum(1).exp()

    jf = dg.jit(f, dynamic=True)
    w = dg.randn(16, 8)
    sizes = [(2, 8), (2, 8), (2, 16), (4, 8), (4, 16), (3, 40), (6, 24), (2, 8), (5, 40)]
    got = run_sizes(jf, sizes, lambda b, t: (dg.randn(b, t, 16), w))
    want = run_sizes(f, sizes, lambda b, t: (dg.randn(b, t, 16), w))
    assert all(same(a, b) for a, b in zip(got, want))
    # (2, 8) warm-up and capture, (2, 16) and (4, 8) teach it T and B; the others are instances
    assert jf.stats["captures"] == 3 and jf.stats["samples"] == 2 and jf.stats["recompiles"] == 0
    assert jf.stats["symbolic_instances"] == 4 and jf.stats["replays"] == 5
    err = capfd.readouterr().err
    assert "recompiling" not in err and "its symbolic graph serves" in err


def test_mark_dynamic_makes_only_the_marked_dim_symbolic(capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")

    def f(x):
        return (x * 3).sum(0)

    jf = dg.jit(f)
    for n in (4, 4, 8, 16, 12):
        x = dg.randn(n, 5)
        dg.jit.mark_dynamic(x, 0)
        assert same(jf(x), f(x))
    assert jf.stats["recompiles"] == 0 and jf.stats["symbolic_instances"] == 2
    x = dg.randn(12, 7)  # dim 1 is not marked: a recompile
    dg.jit.mark_dynamic(x, 0)
    assert same(jf(x), f(x))
    assert jf.stats["recompiles"] == 1 and "shape" in "".join(recompile_lines(capfd))
    with pytest.raises(IndexError, match=r"\[mark_dynamic\] dim 2 is out of range for a tensor of shape \(12, 7\)"):
        dg.jit.mark_dynamic(x, 2)
    # dynamic=False specialises, marks or not
    sf = dg.jit(f, dynamic=False)
    for n in (4, 4, 8, 8):
        x = dg.randn(n, 5)
        dg.jit.mark_dynamic(x, 0)
        assert same(sf(x), f(x))
    assert sf.stats["recompiles"] == 1 and sf.stats["symbolic_instances"] == 0


def test_rng_draws_at_new_sizes_are_eagers(capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")

    def f(x):
        return F.dropout(x, 0.5, True) + dg.randn(x.shape[0], 1) + dg.rand(3)

    jf = dg.jit(f, dynamic=True)
    sizes = [(4,), (4,), (8,), (12,), (20,), (12,), (6,)]
    got = run_sizes(jf, sizes, lambda n: (dg.ones(n, 3),), seed=5)
    want = run_sizes(f, sizes, lambda n: (dg.ones(n, 3),), seed=5)
    # 12 and 20 are instances; at 6 the dropout draws ceil(18 / 4) counters, which the fit 18 / 4 cannot say
    assert jf.stats["symbolic_instances"] == 2 and jf.stats["recompiles"] == 1
    assert "no whole number" in "".join(recompile_lines(capfd))
    assert all(same(a, b) for a, b in zip(got, want))
    assert not dg.equal(got[3][:8], got[5][:8])  # draws differ between calls at one size
    dg.manual_seed(5)
    [jf(dg.ones(n, 3)) for n, in sizes]
    after_jit = dg.rand(4)
    dg.manual_seed(5)
    [f(dg.ones(n, 3)) for n, in sizes]
    assert dg.equal(after_jit, dg.rand(4))  # a replay reserves what eager draws at its sizes


def test_an_affine_size_needs_a_third_capture_and_a_half_size_refuses_odd_lengths(capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles,captures")

    def diff(x):  # sizes T - 1: two terms, fitted from three captures
        return x[:, 1:] - x[:, :-1]

    jd = dg.jit(diff, dynamic=True)
    for t in (8, 8, 16, 32, 24, 100):
        x = dg.randn(2, t)
        assert same(jd(x), diff(x))
    assert jd.stats["samples"] == 2 and jd.stats["symbolic_instances"] == 2 and jd.stats["recompiles"] == 0

    def trim(x):  # sizes T - 6: at T = 7 a size would be 1, where ops take other paths: a recompile
        return x[:, : x.shape[1] - 6].exp()

    jt = dg.jit(trim, dynamic=True)
    for t in (8, 8, 16, 32, 9, 7):
        x = dg.randn(2, t)
        assert same(jt(x), trim(x))
    assert jt.stats["symbolic_instances"] == 1 and jt.stats["recompiles"] == 1
    assert "would be 1 at these sizes" in "".join(recompile_lines(capfd))

    def half(x):  # sizes T / 2: served at even lengths, an odd one is a recompile naming why
        return x[:, : x.shape[1] // 2] * 2

    jh = dg.jit(half, dynamic=True)
    for t in (8, 8, 16, 12, 11):
        x = dg.randn(2, t)
        assert same(jh(x), half(x))
    assert jh.stats["symbolic_instances"] == 1 and jh.stats["recompiles"] == 1
    assert "no whole number" in "".join(recompile_lines(capfd))


# --- what a symbolic replay cannot re-derive: recompiles, each with its reason ------------------------------------
def test_a_value_python_computed_from_a_size_is_a_logged_recompile(capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")

    def scaled(x):
        return x * (1.0 / math.sqrt(x.shape[-1]))

    js = dg.jit(scaled, dynamic=True)
    for t in (4, 4, 9, 16, 16, 25):
        x = dg.randn(3, t)
        assert same(js(x), scaled(x))
    lines = recompile_lines(capfd)
    # float() of a size specialises it: each size is its own path through Python, a logged recompile
    assert any("Python used the size shape[1]" in line and "as a plain number (float())" in line
               and "it was 4 at the first capture and is 9" in line for line in lines)
    assert js.stats["symbolic_instances"] == 0 and js.stats["recompiles"] == 3  # 9, 16 and 25

    def branchy(x):  # Python chooses its ops by the size: two paths, each with its own symbolic graph
        return x.exp() if x.shape[0] > 4 else x.relu()

    jb = dg.jit(branchy, dynamic=True)
    for n in (4, 4, 8, 12, 16, 3, 2, 20):
        x = dg.randn(n)
        assert same(jb(x), branchy(x))
    assert any("Python compared sizes at test_jit_symbolic.py:" in line and "shape[0]" in line and "> 4 was False "
               "at the first capture and True at these sizes" in line for line in recompile_lines(capfd))
    # 8 is the recompile (the other path), 12 and 3 samples, 16, 2 and 20 instances (of either path)
    assert jb.stats["recompiles"] == 1 and jb.stats["samples"] == 2 and jb.stats["symbolic_instances"] == 3


# --- Python comparing sizes (docs/jit.md): guards a symbolic instance re-evaluates ---------------------------------
def test_a_branch_on_a_size_with_the_same_ops_is_never_replayed_the_wrong_way(capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")

    def f(x):  # the same op either way: only the comparison tells the paths apart
        k = 2 if x.shape[0] > 8 else 3
        return x * k

    jf = dg.jit(f, dynamic=True)
    for n in (4, 4, 6, 8, 16, 5, 7, 32, 12, 3):
        x = dg.randn(n)
        assert same(jf(x), f(x)), n
    lines = recompile_lines(capfd)
    assert len(lines) == 1 and "shape[0] (read at test_jit_symbolic.py:" in lines[0]
    assert "> 8 was False at the captures and True at these sizes" in lines[0]
    assert jf.stats["recompiles"] == 1 and jf.stats["symbolic_instances"] == 5


@pytest.mark.parametrize("case", ["min", "mod", "bool", "int", "len", "hash", "size(dim)", "numel"])
def test_what_python_does_with_a_size_is_guarded(case, capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")
    cache = {}

    def f(x):
        t = x.size(0) if case == "size(dim)" else x.numel() if case == "numel" else x.shape[0]
        if case == "min":
            k = min(t, 10)                       # min compares: a guard
            return x * (2 if k == t else 3)
        if case == "mod":
            return x * (2 if (t * 3 + 1) % 4 == 1 else 3)
        if case == "bool":
            return x * (2 if t - 8 else 3)       # truth of an expression
        if case == "int":
            return x * (2 if int(t) > 8 else 3)  # int() specialises
        if case == "len":
            return x * (2 if len(x) > 8 else 3)  # len() specialises
        if case == "hash":
            cache.setdefault(t, len(cache))     # a dict keyed by the size specialises
            return x * (2 if cache[t] else 3)
        return x * (2 if t > 8 else 3)

    jf = dg.jit(f, dynamic=True)
    sizes = (4, 4, 6, 8, 9, 12, 16, 5, 20, 7)
    for n in sizes:
        x = dg.randn(n)
        cache_before = dict(cache)
        want = f(x)
        cache.clear(), cache.update(cache_before)
        assert same(jf(x), want), (case, n)
    stats = jf.stats
    lines = recompile_lines(capfd)
    if case in ("int", "len", "hash"):  # each size its own path: recompiles up to the limit, then eager
        assert stats["symbolic_instances"] == 0 and stats["recompiles"] >= 6 and "as a plain number" in lines[0]
    else:
        assert stats["symbolic_instances"] >= 3 and stats["recompiles"] == 1 and "Python compared sizes" in lines[0]


def test_sizes_read_outside_a_capture_are_plain_ints():
    kept = []

    def f(x):
        kept.append(x.shape[0])
        return x + 1

    jf = dg.jit(f, dynamic=True)
    for n in (4, 4, 6):
        jf(dg.randn(n))
    s = kept[1]  # read during the capture
    assert type(s).__name__ == "SymInt" and s == 4 and s + 1 == 5 and type(s + 1) is int and not s._live()
    assert type(dg.randn(3).shape[0]) is int and dg.Tensor.__dict__["shape"].fget.__module__ != "dygrad._jit_symint"

    import threading
    seen = []

    def g(x):  # another thread reading sizes while this one captures sees plain ints
        th = threading.Thread(target=lambda: seen.append(type(x.shape[0])))
        th.start(), th.join()
        return x * 2

    jg = dg.jit(g, dynamic=True)
    for n in (4, 4):
        jg(dg.randn(n))
    assert seen == [int, int]


def test_a_compiled_forward_whose_backward_runs_outside_is_served_with_its_backward(capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")

    def run(jit):
        dg.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Dropout(0.1), nn.Linear(8, 3))
        opt = dg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        cm = dg.compile(m, dynamic=True) if jit else m
        dg.manual_seed(1)
        losses, grads = [], []
        for n in (2, 2, 5, 7, 9, 3, 12, 5, 30):
            x = dg.randn(n, 4, requires_grad=True)
            loss = (cm(x) ** 2).mean()
            loss.backward()
            grads.append(x.grad)
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        return m, losses, grads, cm

    m1, l1, g1, _ = run(False)
    m2, l2, g2, cm = run(True)
    assert all(dg.equal(a, b) for a, b in zip(l1, l2)) and all(dg.equal(a, b) for a, b in zip(g1, g2))
    assert all(dg.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))
    # (2, 4) and (5, 4) captured with their backward; 7, 9, 3, 12 and 30 are instances of both graphs
    stats = cm._compiled_forward.stats
    assert stats["captures"] == 2 and stats["symbolic_instances"] == 5 and stats["recompiles"] == 0
    assert recompile_lines(capfd) == []
    m2.eval()  # no dropout: the eager call and the compiled one below draw no random numbers
    with dg.no_grad():  # without grad mode the forward is one graph: served symbolically too
        cf = dg.compile(m2, dynamic=True)
        for n in (2, 2, 5, 7, 9):
            x = dg.randn(n, 4)
            assert same(cf(x), m2(x))
        assert cf._compiled_forward.stats["symbolic_instances"] == 2


def test_a_compiled_forward_whose_backward_cannot_join_is_captured_per_size(capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")
    m = nn.Linear(4, 3)

    def f(x):  # the backward reads the host: it cannot be replayed, so the forward runs as segments
        y = m(x)
        return y * y.detach().sum().item()

    jf = dg.jit(f, dynamic=True)
    for n in (2, 2, 2, 2, 5, 7):  # at 2: the warm-up, two captures finding the cut, then segments
        x = dg.randn(n, 4)
        y = jf(x)
        assert same(y, f(x))
        y.sum().backward()
    assert jf.stats["symbolic_instances"] == 0 and jf.stats["segment_calls"] >= 1


# --- training steps -----------------------------------------------------------------------------------------------
def test_mlp_step_at_batches_never_captured_is_bitwise_eager(capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")

    def run(jit):
        m, opt, step = mlp_sgd(0)

        step = dg.jit(step, dynamic=True) if jit else step
        dg.manual_seed(1)
        losses = [step(dg.randn(b, 8), dg.randn(b, 4)) for b in [4, 4, 8, 4, 16, 12, 8, 33, 4, 6]]
        return m, opt, losses, step

    m1, o1, l1, _ = run(False)
    m2, o2, l2, step = run(True)
    assert step.stats["recompiles"] == 0 and step.stats["captures"] == 2 and step.stats["symbolic_instances"] == 4
    assert all(dg.equal(a, b) for a, b in zip(l1, l2))
    assert all(dg.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))
    for p, q in zip(m1.parameters(), m2.parameters()):
        assert dg.equal(o1.state[p]["momentum_buffer"], o2.state[q]["momentum_buffer"])
    assert recompile_lines(capfd) == []


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
@pytest.mark.parametrize("marking", ["dynamic=True", "mark_dynamic"])
def test_llama_step_over_seq_64_128_256_and_batch_4_8_is_one_symbolic_graph(fused, marking, capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")
    cfg = llama.LlamaConfig(n_layers=2, dim=32, n_heads=2, ffn_dim=64, seq_len=256, batch_size=4, dropout=0.1,
                            vocab_size=64)
    shapes = [(4, 64), (4, 64), (4, 128), (4, 256), (8, 64), (8, 128), (8, 256), (4, 64), (4, 256)]

    def run(jit):
        dg.manual_seed(0)
        m = llama.Llama(cfg, fused=fused)
        opt = dg.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)

        step = llama_step(m, opt)

        if jit:
            step = dg.jit(step, dynamic=True) if marking == "dynamic=True" else dg.jit(step)
        dg.manual_seed(1)
        losses = []
        for b, t in shapes:
            x, y = dg.randint(0, 64, (b, t)), dg.randint(0, 64, (b, t))
            if marking == "mark_dynamic":
                dg.jit.mark_dynamic(x, [0, 1])
                dg.jit.mark_dynamic(y, [0, 1])
            losses.append(step(x, y))
        return m, losses, step

    m1, l1, _ = run(False)
    m2, l2, step = run(True)
    assert all(dg.equal(a, b) for a, b in zip(l1, l2))
    assert all(dg.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))
    # captures at (4, 64), (4, 128) and (8, 64); (4, 256), (8, 128), (8, 256) are instances of the symbolic graph
    assert step.stats["recompiles"] == 0 and step.stats["captures"] == 3 and step.stats["symbolic_instances"] == 3
    assert recompile_lines(capfd) == []
    # the instance at (8, 256) plans its own arena, larger than any capture's
    captured = [e.graph.arena_bytes for e in step._entries.values() if e.graph is not None and e.instance is None]
    instances = {e.instance[1]: e.graph for e in step._entries.values() if e.instance is not None}
    assert instances[(8, 256, 8, 256)].arena_bytes > 2 * max(captured)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_llama_compiled_model_trained_eagerly_over_seq_and_batch_is_served_symbolically(fused, capfd, monkeypatch):
    """dg.compile(model, dynamic=True) with the loss's backward, clipping and AdamW outside: the forward and its
    backward are instances of their symbolic graphs at sizes never captured, bitwise eager."""
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")
    cfg = llama.LlamaConfig(n_layers=2, dim=32, n_heads=2, ffn_dim=64, seq_len=256, batch_size=4, dropout=0.1,
                            vocab_size=64)
    shapes = [(4, 64), (4, 64), (4, 128), (8, 64), (4, 256), (8, 128), (8, 256), (4, 64)]

    def run(jit):
        dg.manual_seed(0)
        m = llama.Llama(cfg, fused=fused)
        opt = dg.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)
        cm = dg.compile(m, dynamic=True) if jit else m
        dg.manual_seed(1)
        losses = []
        for b, t in shapes:
            x, y = dg.randint(0, 64, (b, t)), dg.randint(0, 64, (b, t))
            loss = cm(x, y)
            loss.backward()
            nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        return m, losses, cm

    m1, l1, _ = run(False)
    m2, l2, cm = run(True)
    assert all(dg.equal(a, b) for a, b in zip(l1, l2))
    assert all(dg.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))
    stats = cm._compiled_forward.stats
    assert stats["recompiles"] == 0 and stats["captures"] == 3 and stats["symbolic_instances"] == 3
    assert recompile_lines(capfd) == []
