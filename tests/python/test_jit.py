"""dygrad.jit (docs/jit.md): capture at the dispatcher, replay as one Task, segments at host reads, guards and
recompiles, and bitwise equality with eager on training steps."""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import dygrad as dg
import dygrad.nn as nn
import dygrad.nn.functional as F
from dygrad.models import llama
from jit_steps import llama_step, mlp_sgd


def run_steps(step, make_batch, n):
    dg.manual_seed(1)
    return [step(*make_batch()) for _ in range(n)]


# --- plain functions ----------------------------------------------------------------------------------------------
def test_function_replays_equal_eager_and_one_task_per_call():
    def f(a, b):
        return (a * b + 1).relu().sum(0), a - b

    jf = dg.jit(f)
    for i in range(5):
        a, b = dg.randn(4, 3), dg.randn(4, 3)
        got, want = jf(a, b), f(a, b)
        assert all(dg.equal(x, y) for x, y in zip(got, want))
    assert jf.stats["captures"] == 1 and jf.stats["replays"] == 3 and jf.stats["eager_calls"] == 1
    with dg.profiler.profile() as prof:
        jf(dg.randn(4, 3), dg.randn(4, 3))
    names = [o.name for o in prof.result.ops]
    assert names == ["randn", "randn", "jit_graph"]


def test_the_profiler_shows_one_span_with_its_sub_ops_and_their_lines():
    def f(a):
        b = a.exp()  # line A
        return (b * a).sum()  # line B

    jf = dg.jit(f)
    x = dg.randn(64)
    for _ in range(2):
        jf(x)
    with dg.profiler.profile() as prof:
        jf(x)
    graph = [o for o in prof.result.ops if o.name == "jit_graph"]
    assert len(graph) == 1 and graph[0].line > 0
    subs = [r for r in prof.result.ranges if r.kind == "sub_op"]
    code = open(__file__).read().splitlines()
    assert [r.name.split(" ")[0] for r in subs] == ["exp", "mul", "sum"]
    for r in subs:
        line = int(r.name.rsplit(":", 1)[1].rstrip(")"))
        assert __file__ in r.name and ("line A" in code[line - 1] or "line B" in code[line - 1])
        assert graph[0].device_begin_ns <= r.begin_ns <= r.end_ns <= graph[0].device_end_ns


def test_decorator_forms_and_mindspore_signature():
    @dg.jit
    def f(x):
        return x * 2

    @dg.jit(jit_level="O1", fullgraph=True)
    def g(x):
        return x + 1

    x = dg.randn(3)
    for _ in range(3):
        assert dg.equal(f(x), x * 2) and dg.equal(g(x), x + 1)
    assert dg.jit(capture_mode="trace")(f) is f  # already compiled
    for mode in ("ast", "bytecode"):
        with pytest.raises(NotImplementedError, match="capture_mode='trace'"):
            dg.jit(lambda x: x, capture_mode=mode)
    with pytest.raises(ValueError, match="jit_level"):
        dg.jit(lambda x: x, jit_level="O3")
    import inspect
    params = inspect.signature(dg.jit.jit).parameters
    assert list(params) == ["function", "capture_mode", "jit_level", "dynamic", "fullgraph", "backend", "options"]
    assert params["capture_mode"].default == "trace" and params["jit_level"].default == "O0"


def test_arguments_are_bound_by_storage_offset():
    data = dg.randn(10, 4)

    @dg.jit
    def f(x):
        return x * 3 + 1

    for i in range(6):
        x = data[i:i + 2]  # a view at a new offset each call
        assert dg.equal(f(x), x * 3 + 1)
    assert f.stats["replays"] == 4


def test_an_argument_returned_is_the_same_object():
    @dg.jit
    def f(x, y):
        return x, y * 2

    x, y = dg.randn(2), dg.randn(2)
    for _ in range(3):
        a, b = f(x, y)
        assert a is x and dg.equal(b, y * 2)


def test_rng_draws_differ_between_calls_exactly_as_eager():
    def f(x):
        return F.dropout(x, 0.5, True) + dg.randn(4)

    jf = dg.jit(f)
    x = dg.ones(4)
    dg.manual_seed(3)
    eager = [f(x) for _ in range(6)]
    dg.manual_seed(3)
    got = [jf(x) for _ in range(6)]
    assert jf.stats["replays"] == 4
    assert all(dg.equal(a, b) for a, b in zip(eager, got))
    assert not dg.equal(got[3], got[4])


# --- training steps, bitwise against eager ----------------------------------------------------------------------
def mlp_run(jit):
    m, opt, step = mlp_sgd(0)

    step = dg.jit(step) if jit else step
    losses = run_steps(step, lambda: (dg.randn(5, 8), dg.randn(5, 4)), 20)
    return m, opt, losses, step


def test_mlp_sgd_momentum_step_is_bitwise_eager():
    m1, o1, l1, _ = mlp_run(False)
    m2, o2, l2, step = mlp_run(True)
    assert step.stats["replays"] >= 17
    assert all(dg.equal(a, b) for a, b in zip(l1, l2))
    assert all(dg.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))
    for p, q in zip(m1.parameters(), m2.parameters()):
        assert dg.equal(o1.state[p]["momentum_buffer"], o2.state[q]["momentum_buffer"])
        assert dg.equal(p.grad, q.grad)  # the last step's gradients, re-applied to .grad by the replay


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_llama_step_with_dropout_clipping_and_cosine_schedule_is_bitwise_eager(fused):
    cfg = llama.LlamaConfig(n_layers=2, dim=64, n_heads=4, ffn_dim=172, seq_len=16, batch_size=2, dropout=0.1)

    def run(jit):
        dg.manual_seed(0)
        m = llama.Llama(cfg, fused=fused)
        opt = dg.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)
        sched = dg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)

        step = llama_step(m, opt)

        step = dg.jit(step) if jit else step
        dg.manual_seed(1)
        losses, lrs = [], []
        for _ in range(20):
            losses.append(step(dg.randint(0, 256, (2, 16)), dg.randint(0, 256, (2, 16))))
            sched.step()  # outside the compiled function: the replay reads the new rate
            lrs.append(opt.param_groups[0]["lr"])
        return m, losses, lrs, step

    m1, l1, lr1, _ = run(False)
    m2, l2, lr2, step = run(True)
    assert step.stats["recompiles"] == 0 and step.stats["captures"] == 1 and step.stats["replays"] == 18
    assert lr1 == lr2 and len(set(lr2)) == 20  # the schedule moved every step
    assert all(dg.equal(a, b) for a, b in zip(l1, l2))
    assert all(dg.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))


def test_version_counters_are_bumped_as_eager_bumps_them():
    w = nn.Parameter(dg.randn(3))
    opt = dg.optim.SGD([w], lr=0.1)

    def step(x):
        loss = (w * x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()

    jstep = dg.jit(step)
    x = dg.randn(3)
    step(x)
    before = w._version
    step(x)
    per_step = w._version - before
    for _ in range(4):
        before = w._version
        jstep(x)
        assert w._version - before == per_step
    assert jstep.stats["replays"] == 2


# --- cuts --------------------------------------------------------------------------------------------------------
def three_reads(x):
    y = x * 2
    if y.sum().item() > 1e9:  # a host read: .item()
        y = y + 1
    if bool((y > 100).any()):  # a host read: bool(t)
        y = y - 1
    idx = dg.nonzero(y > 0)  # a data-dependent shape
    return y.sum() + idx.shape[0]


def test_explain_names_every_cut_with_file_and_line():
    x = dg.randn(8)
    out = dg.jit.explain(three_reads, x)
    assert out.graph_break_count == 3 and out.graph_count == 4
    readers = [r.split(" at ")[0] for r in out.break_reasons]
    assert readers == ["item", "__bool__", "nonzero"]
    source = __file__
    lines = [int(r.rsplit(":", 1)[1]) for r in out.break_reasons]
    code = open(source).read().splitlines()
    assert ".item()" in code[lines[0] - 1] and "bool(" in code[lines[1] - 1] and "nonzero" in code[lines[2] - 1]
    assert all(source in r for r in out.break_reasons)
    assert "Graph Break Count: 3" in str(out)


def test_a_function_with_cuts_runs_as_segments_and_warns_once():
    jf = dg.jit(three_reads)
    x = dg.randn(8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [jf(x) for _ in range(5)]
    cut_warnings = [w for w in caught if issubclass(w.category, dg.jit.JitGraphBreakWarning)]
    assert len(cut_warnings) == 1 and "item at" in str(cut_warnings[0].message)
    assert all(dg.equal(r, three_reads(x)) for r in results)
    assert jf.stats["captures"] == 2 and jf.stats["segment_calls"] == 2  # a cut is recaptured once (one-time work)
    with dg.profiler.profile() as prof:
        jf(x)
    names = [o.name for o in prof.result.ops]
    assert "jit_segment" in names and "mul" not in names  # the ops between cuts ran as segments


def test_fullgraph_raises_at_the_first_cut():
    jf = dg.jit(three_reads, fullgraph=True)
    x = dg.randn(8)
    jf(x)  # the warm-up call is eager
    with pytest.raises(RuntimeError, match=r"\[item\] reads a tensor's values on the host .*fullgraph=True"):
        jf(x)


def test_graph_lists_each_op_with_its_source_line():
    def f(a):
        b = a.exp()
        return b * a

    text = dg.jit.graph(f, dg.randn(2, 3))
    lines = text.splitlines()
    assert len(lines) == 2 and "exp((2, 3):argument) -> ((2, 3)) float32" in lines[0]
    assert f"{__file__}:" in lines[0] and "mul" in lines[1]
    assert "--- cut: item" in dg.jit.graph(three_reads, dg.randn(8))


def test_what_only_python_can_compute_is_not_replayed():
    made = []

    def host_data(x):
        return x + dg.tensor([1.0, 2.0])  # values from Python, made inside

    def keeps(x):
        y = x * 2
        made.append(y)  # stored outside: the replay could not hand it over
        return y + 1

    def python_value(x):
        return x * 2, 3

    for f, reason in ((host_data, "host data"), (keeps, "still referenced"), (python_value, "Python int")):
        jf = dg.jit(f)
        x = dg.randn(2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(5):
                r = jf(x)
        assert jf.stats["replays"] == 0 and jf.stats["segment_calls"] == 2, f.__name__
        assert any(reason in str(w.message) for w in caught), (f.__name__, [str(w.message) for w in caught])
        assert dg.equal(r[0] if isinstance(r, tuple) else r, f(x)[0] if isinstance(r, tuple) else f(x))


# --- guards and recompiles ---------------------------------------------------------------------------------------
def test_a_failed_guard_recompiles_with_the_reason_logged(capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")

    @dg.jit
    def f(x):
        return x.relu() * 2

    for n in (4, 4, 4, 8, 8, 8):
        x = dg.randn(n, 3)
        assert dg.equal(f(x), x.relu() * 2)
    err = capfd.readouterr().err
    assert "recompiling" in err and "shape (4, 3) -> (8, 3)" in err
    assert f.stats["recompiles"] == 1 and f.stats["captures"] == 2 and f.stats["replays"] == 3


def test_guards_see_grad_mode_training_flags_and_replaced_parameters(capfd, monkeypatch):
    monkeypatch.setenv("DG_JIT_LOG", "recompiles")
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    f = dg.compile(m)
    x = dg.randn(2, 3)
    with dg.no_grad():
        for _ in range(3):
            f(x)
        m.eval()
        for _ in range(3):
            assert dg.equal(f(x), m(x))
        m[0].weight = nn.Parameter(dg.randn(3, 3))
        for _ in range(3):
            assert dg.equal(f(x), m(x))
    err = capfd.readouterr().err
    assert "training flag" in err and "a parameter was replaced" in err


def test_past_the_recompile_limit_it_runs_eagerly_with_a_warning():
    f = dg.jit(lambda x: x + 1, recompile_limit=2)
    with pytest.warns(dg.jit.JitRecompileWarning, match="recompile limit is 2.*tensor argument 0: shape"):
        for n in range(1, 6):
            for _ in range(2):
                x = dg.randn(n)
                assert dg.equal(f(x), x + 1)
    assert f.stats["eager_calls"] > 0


def test_module_forward_compiled():
    m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    cm = dg.compile(m)
    assert list(cm.state_dict()) == ["_orig_mod." + k for k in m.state_dict()]
    assert getattr(cm, "0") is m[0] and cm.training  # attributes reach the original
    x = dg.randn(3, 4)
    with dg.no_grad():
        for _ in range(4):
            assert dg.equal(cm(x), m(x))
    assert cm._compiled_forward.stats["replays"] == 2
    # With grad, the outputs carry an autograd graph whose backward runs outside: the forward replays, and the
    # backward (captured at its first run) replays too; gradients of parameters and of the input as eager's.
    for _ in range(4):
        x = dg.randn(3, 4).requires_grad_()
        m.zero_grad()
        cm(x).pow(2).sum().backward()
        got = [p.grad.clone() for p in m.parameters()] + [x.grad.clone()]
        m.zero_grad()
        x.grad = None
        m(x).pow(2).sum().backward()
        assert all(dg.equal(a, p.grad) for a, p in zip(got, list(m.parameters()) + [x]))
    assert cm._compiled_forward.stats["replays"] == 2 + 3 and cm._compiled_forward.stats["segment_calls"] == 0


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_a_compiled_model_trained_eagerly_is_bitwise_eager(fused):
    """nanoGPT's `model = torch.compile(model)`: the forward (with its loss) is compiled, backward, clipping and the
    optimizer run eagerly around it."""
    cfg = llama.LlamaConfig(n_layers=2, dim=64, n_heads=4, ffn_dim=172, seq_len=16, batch_size=2, dropout=0.1)

    def run(compiled):
        dg.manual_seed(0)
        m = llama.Llama(cfg, fused=fused)
        model = dg.compile(m) if compiled else m
        opt = dg.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)
        dg.manual_seed(1)
        losses = []
        for _ in range(12):
            loss = model(dg.randint(0, 256, (2, 16)), dg.randint(0, 256, (2, 16)))
            loss.backward()
            nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        return m, losses, model

    m1, l1, _ = run(False)
    m2, l2, model = run(True)
    assert model._compiled_forward.stats["replays"] == 10
    assert all(dg.equal(a, b) for a, b in zip(l1, l2))
    assert all(dg.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))


def test_a_compiled_forward_refuses_double_backward_and_allows_retain_graph():
    lin = nn.Linear(3, 3)
    f = dg.compile(lin)
    x = dg.randn(2, 3)
    for _ in range(3):
        y = f(x).sum()
        y.backward(retain_graph=True)
        y.backward()  # the replayed backward runs again on the same saved buffers
    g = lin.weight.grad.clone()
    lin.zero_grad()
    for _ in range(2):
        lin(x).sum().backward()
    assert dg.allclose(g / 6, lin.weight.grad / 2)  # six backwards, then two
    with pytest.raises(RuntimeError, match="double backward"):
        dg.autograd.grad(f(x).sum(), [lin.weight], create_graph=True)


def test_nested_and_synchronize_mode_run_inline():
    inner = dg.jit(lambda x: x * 2)
    outer = dg.jit(lambda x: inner(x) + 1)
    x = dg.randn(3)
    for _ in range(4):
        assert dg.equal(outer(x), x * 2 + 1)
    assert inner.stats["eager_calls"] >= 2 and outer.stats["replays"] == 2
    f = dg.jit(lambda x: x - 1)
    with dg.set_context(synchronize=True) if False else _synchronized():
        for _ in range(3):
            assert dg.equal(f(x), x - 1)
    assert f.stats["eager_calls"] == 3


class _synchronized:
    def __enter__(self):
        self.saved = dg.get_context()
        dg.set_context(synchronize=True)

    def __exit__(self, *exc):
        dg.set_context(self.saved)


# --- failures ----------------------------------------------------------------------------------------------------
def test_a_failing_sub_op_leaves_parameters_and_state_as_they_were():
    w = nn.Parameter(dg.randn(4))
    opt = dg.optim.SGD([w], lr=0.1, momentum=0.9)

    def step(x, fail):
        if fail:
            x = dg._C._deferred_failure(x, 9)  # its kernel fails: what is computed from it is poisoned
        loss = (w * x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    jstep = dg.jit(step)
    x = dg.randn(4)
    for _ in range(3):
        jstep(x, False)
    for _ in range(3):  # warm-up, capture (eager: its failure raises at the sync), replay
        before = w.detach().clone()
        buf = opt.state[w]["momentum_buffer"].clone()
        jstep(x, True)
        with pytest.raises(IndexError, match=r"\[_deferred_failure\] index 9 is out of range"):
            dg.synchronize()
        assert dg.equal(w, before) and dg.equal(opt.state[w]["momentum_buffer"], buf)
    assert jstep.stats["replays"] >= 2
    jstep(x, False)  # the model goes on
    dg.synchronize()
    assert not dg.equal(w, before)


# --- torch.compile's names ---------------------------------------------------------------------------------------
def test_compiler_is_compiling_is_true_while_capturing():
    seen = []

    def f(x):
        seen.append(dg.compiler.is_compiling())
        return x + 1

    jf = dg.compile(f)
    for _ in range(3):
        jf(dg.randn(2))
    assert seen == [False, True]  # warm-up, capture; the replay runs no Python
    assert dg.compiler.is_compiling() is False


def test_jit_under_as_torch_imports_as_torch_jit():
    script = textwrap.dedent("""
        import dygrad.as_torch
        dygrad.as_torch.install()
        import torch, torch.jit
        from torch.jit import is_scripting
        assert not is_scripting()
        f = torch.compile(lambda x: x * 2)
        for _ in range(3):
            y = f(torch.ones(2))
        assert y.tolist() == [2.0, 2.0]
        print("ok")
    """)
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_a_host_read_made_once_is_captured_again():
    calls = {"n": 0}

    def f(x):
        calls["n"] += 1
        if calls["n"] == 2:  # one-time work at the second call (as DDP's bucket rebuild), reading a value
            float(x.sum())
        return x * 2

    jf = dg.jit(f)
    x = dg.randn(3)
    for _ in range(5):
        assert dg.equal(jf(x), x * 2)
    assert jf.stats["captures"] == 2 and jf.stats["replays"] == 2 and calls["n"] == 3


def test_a_step_returning_its_loss_after_backward_replays_plainly():
    lin = nn.Linear(3, 1)
    opt = dg.optim.SGD(lin.parameters(), lr=0.1)

    @dg.jit
    def step(x):
        loss = lin(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss  # its graph was consumed by backward: nothing is saved for a later backward

    x = dg.randn(4, 3)
    for _ in range(4):
        loss = step(x)
    assert step.stats["replays"] == 2 and not loss.requires_grad


def test_replayed_gradients_are_counted_as_gradients():
    lin = nn.Linear(64, 64)

    @dg.jit
    def step(x):
        lin.zero_grad()
        lin(x).sum().backward()

    x = dg.randn(8, 64)
    for _ in range(3):
        step(x)
        dg.synchronize()
        assert dg.memory_stats()["allocated_bytes.gradient"] >= 64 * 64 * 4, dg.memory_stats()


def test_one_thread_captures_at_a_time():
    import threading
    errors = []
    capture = dg._C._JitCapture([])
    try:
        def other():
            try:
                dg._C._JitCapture([])
            except RuntimeError as e:
                errors.append(str(e))
        t = threading.Thread(target=other)
        t.start()
        t.join()
    finally:
        capture.end()
        capture.close()
    assert len(errors) == 1 and "another thread is capturing" in errors[0]
    jf = dg.jit(lambda x: x + 1)
    for _ in range(3):
        assert dg.equal(jf(dg.ones(2)), dg.full((2,), 2.0))  # the log was given back: captures work again

