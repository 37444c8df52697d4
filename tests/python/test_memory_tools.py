"""Memory tools (issue 15, items 2, 4, 5): dg.memory.estimate (the dry run) against the measured peak, the leak
finder's two planted leaks and a clean loop, per-module device time and memory (forward and backward), GC pauses
on the host track, and their report sections. docs/memory.md "Dry run", docs/profiler-python.md."""
import gc
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dygrad as dg
import dygrad.nn as nn
import dygrad.nn.functional as F
from dygrad.models import llama
from dygrad.profiler import _scopes, memtools, report, summary as profiler_summary

HERE = os.path.abspath(__file__)


@pytest.fixture(autouse=True)
def _collect_earlier_tests_garbage():
    """The estimate and the measured peaks count every live buffer of the process: models of earlier tests that
    sit in reference cycles (a module and its hooks) must be collected first."""
    gc.collect()
    dg._C.synchronize()


def _line(marker):
    """The line number in this file of the line ending with `# <marker>`."""
    with open(HERE) as f:
        for i, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# <{marker}>"):
                return i
    raise AssertionError(marker)


class MLP(nn.Module):
    def __init__(self, d=256, h=1024, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(h, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = x + self.fc2(self.act(self.fc1(x)))
        return self.head(h)  # <logits>


class Net(nn.Module):
    """Nested modules (blocks in a ModuleList) and the loss inside the model."""

    def __init__(self, d=128, blocks=2):
        super().__init__()
        self.blocks = nn.ModuleList([MLP(d, 2 * d, d) for _ in range(blocks)])
        self.head = nn.Linear(d, 10)

    def forward(self, x, y):
        for b in self.blocks:
            x = b(x)
        return F.cross_entropy(self.head(x), y)  # <net-loss>


def _measured_step(model, opt, batch, loss_fn=None):
    dg.synchronize()
    dg.reset_peak_memory_stats()
    if loss_fn is None:
        loss = model(*batch)
    else:
        loss = loss_fn(model(batch[0]), batch[1])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del loss
    dg.synchronize()
    return dg.max_memory_allocated()


# --- the dry run ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("synchronize", [False, True])
def test_estimate_mlp_within_10_percent_first_and_steady_step(synchronize):
    saved = dg.get_context()
    dg.set_context(synchronize=synchronize)
    # Parameters and states other tests keep alive (module-level models) count too: compare what this one adds.
    held = dg.memory_stats()
    try:
        dg.manual_seed(0)
        model = MLP(512, 2048)
        opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = dg.randn(256, 512), dg.randint(0, 10, (256,))
        dg.synchronize()
        first = dg.memory.estimate(model, (x, y), loss_fn=F.cross_entropy, optimizer=opt)
        steady = dg.memory.estimate(model, (x, y), loss_fn=F.cross_entropy, optimizer=opt, steps=2)
        measured_first = _measured_step(model, opt, (x, y), F.cross_entropy)
        measured_steady = _measured_step(model, opt, (x, y), F.cross_entropy)
    finally:
        dg.set_context(saved)
    assert abs(first.peak - measured_first) <= 0.10 * measured_first, (first, measured_first)
    assert abs(steady.peak - measured_steady) <= 0.10 * measured_steady, (steady, measured_steady)
    assert steady.peak > first.peak  # the optimizer's states exist in the steady step
    params = sum(p.numel() * 4 for p in model.parameters())
    assert steady.by_category["parameter"] - held["allocated_bytes.parameter"] == params
    # AdamW's exp_avg and exp_avg_sq
    assert steady.by_category["optimizer_state"] - held["allocated_bytes.optimizer_state"] == 2 * params
    assert sum(steady.by_category.values()) == steady.peak


def _llama_batch(c, batch=None):
    rng = np.random.default_rng(0)
    data = rng.integers(0, c.vocab_size, size=(batch or c.batch_size, c.seq_len + 1))
    return dg.tensor(data[:, :-1].copy()), dg.tensor(data[:, 1:].copy())


@pytest.mark.parametrize("config,fused", [("tiny", True), ("tiny", False), ("bench", True)])
def test_estimate_llama_within_10_percent(config, fused):
    c = llama.CONFIGS[config]
    dg.manual_seed(0)
    model = llama.Llama(c, fused=fused)
    opt = dg.optim.AdamW(model.parameters(), lr=3e-4)
    x, y = _llama_batch(c)
    dg.synchronize()
    before = dg.memory_stats()["allocated_bytes"]
    dg.reset_peak_memory_stats()
    estimate = dg.memory.estimate(model, (x, y), optimizer=opt, steps=2)
    # Nothing was allocated for real: the allocator's peak did not move, and nothing stayed.
    assert dg.max_memory_allocated() == before
    assert dg.memory_stats()["allocated_bytes"] == before
    assert not opt.state and all(p.grad is None for p in model.parameters())
    _measured_step(model, opt, (x, y))  # step 1 makes the optimizer's states
    measured = _measured_step(model, opt, (x, y))
    assert abs(estimate.peak - measured) <= 0.10 * measured, (estimate, measured)
    assert estimate.by_category["activation"] > estimate.by_category["parameter"]


@pytest.mark.parametrize("fused", [True, False])
def test_async_peak_equals_synchronize_mode_and_the_estimate(fused):
    """Stream-ordered reuse (docs/memory.md): a buffer goes back to the allocator when the program drops it, not when
    the queued Tasks that use it have run, so however far the host runs ahead the asynchronous step's peak is the
    synchronize-mode peak to the byte, and the dry run predicts it exactly."""
    c = llama.CONFIGS["tiny"]
    dg.manual_seed(0)
    model = llama.Llama(c, fused=fused)
    opt = dg.optim.AdamW(model.parameters(), lr=3e-4)
    x, y = _llama_batch(c, batch=4)
    _measured_step(model, opt, (x, y))  # the optimizer's states
    estimate = dg.memory.estimate(model, (x, y), optimizer=opt, steps=2)
    peaks, categories = [], []
    saved = dg.get_context()
    try:
        for sync in (False, True, False, True):
            dg.set_context(synchronize=sync)
            peaks.append(_measured_step(model, opt, (x, y)))
            categories.append({k[len("peak_bytes."):]: v for k, v in dg.memory_stats().items()
                               if k.startswith("peak_bytes.") and v})
    finally:
        dg.set_context(saved)
    # A full suite once measured the first asynchronous step 512 KiB above the others (not reproduced alone, in its
    # file, after the files before it, or in 15 trials under load): each step's per-category peaks and the threads
    # alive go into the message, so a recurrence says where the bytes were.
    import threading
    why = (peaks, categories, [t.name for t in threading.enumerate()])
    assert len(set(peaks)) == 1, why
    assert estimate.peak == peaks[0], (estimate.peak, why)


def test_estimate_leaves_training_unchanged():
    def losses(with_estimate):
        dg.manual_seed(0)
        model = Net()
        opt = dg.optim.AdamW(model.parameters(), lr=1e-2)
        x, y = dg.randn(64, 128), dg.randint(0, 10, (64,))
        out = []
        for _ in range(3):
            if with_estimate:
                dg.memory.estimate(model, (x, y), optimizer=opt)
            loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out
    assert losses(True) == losses(False)


def test_estimate_errors():
    model = MLP()
    with pytest.raises(TypeError):
        dg.memory.estimate(model, (dg.randn(4, 256), dg.randn(4, 3)), loss_fn=lambda out: out)  # wrong arity
    assert not dg._C._meta_active()  # the failed run ended meta evaluation


# --- the leak finder -------------------------------------------------------------------------------------------------
def _profile_loop(body, steps=5):
    dg.synchronize()
    with dg.profiler.profile(profile_memory=True, with_modules=True) as prof:
        for i in range(steps):
            body(i)
            prof.step()
    return prof.result


def test_leak_case1_output_kept_in_a_list():
    dg.manual_seed(0)
    model = MLP()
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    x, y = dg.randn(32, 256), dg.randint(0, 10, (32,))
    outs = []

    def step(i):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        outs.append(logits)  # the leak
        loss.item()

    result = _profile_loop(step)
    leaks = memtools.find_leaks(result)
    assert len(leaks) == 1, leaks
    leak = leaks[0]
    assert leak["file"] == HERE and leak["line"] == _line("logits")
    assert leak["kind"] == "output kept"
    assert leak["bytes_per_step"] == 32 * 10 * 4
    assert leak["steps"] == [0, 1, 2, 3]  # every step but the last (whose outputs are still in use)
    advice = [a for a in profiler_summary.build_summary(result, peak=1.0)["advice"] if a["rule"] == "memory_leak"]
    assert len(advice) == 1 and f"test_memory_tools.py:{_line('logits')}" in advice[0]["title"]


def test_leak_case2_graph_kept_by_a_stored_loss():
    dg.manual_seed(0)
    model = Net()
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    x, y = dg.randn(64, 128), dg.randint(0, 10, (64,))
    xv, yv = dg.randn(64, 128), dg.randint(0, 10, (64,))
    val_losses = []

    def step(i):
        loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        val_losses.append(model(xv, yv))  # evaluation under grad mode, its loss stored: the graph stays

    result = _profile_loop(step)
    leaks = memtools.find_leaks(result)
    assert len(leaks) == 1, leaks
    leak = leaks[0]
    assert leak["file"] == HERE and leak["line"] == _line("net-loss")  # the stored loss, root of the kept graph
    assert leak["kind"] == "graph kept alive"
    # The graph holds what backward would read: at least each block's fc1 output and GELU output (64 x 256 each).
    assert leak["bytes_per_step"] >= 2 * 2 * 64 * 256 * 4
    # ... and nothing that is not this step's: the bytes kept equal what stayed allocated.
    assert leak["bytes"] == sum(b["nbytes"] for b in memtools.live_at_stop(result)
                                if b["ts_ns"] < result.step_markers[-2] and b["category"] == "activation")


def test_no_leak_in_a_clean_loop():
    dg.manual_seed(0)
    model = Net()
    opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = dg.randn(64, 128), dg.randint(0, 10, (64,))
    history = []
    pending = [None]

    def step(i):
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if pending[0] is not None:  # the loss of the previous step, read one step late (as dygrad.train does)
            history.append(pending[0].item())
        pending[0] = loss

    result = _profile_loop(step)
    assert memtools.find_leaks(result) == []
    advice = profiler_summary.build_summary(result, peak=1.0)["advice"]
    assert not [a for a in advice if a["rule"] == "memory_leak"]


def test_no_leak_on_a_clean_train_profile(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "dygrad.train", "--config", "tiny", "--steps", "7", "--batch-size", "2",
           "--seq-len", "64", "--out", str(out), "--profile", "--profile-wait", "1", "--profile-steps", "4", "--quiet",
           "--sample-tokens", "0", "--eval-interval", "1000", "--save-interval", "1000"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    summary = json.loads((out / "profile" / "summary.json").read_text())
    assert summary["leaks"] == []
    assert not [a for a in summary["advice"] if a["rule"] == "memory_leak"]
    e = summary["memory"]["estimate"]
    assert abs(e["error"]) <= 0.10, e
    assert summary["modules"] and summary["modules"][0]["path"] == "Llama"
    assert "Llama.blocks.0.qkv" in {m["path"] for m in summary["modules"]}
    html = (out / "profile" / "report.html").read_text()
    assert 'id="flame-forward"' in html and 'id="no-leaks"' in html and "estimated peak" in html


# --- per-module costs ------------------------------------------------------------------------------------------------
def test_module_costs_sum_to_the_step_and_nest():
    dg.manual_seed(0)
    model = Net(d=256, blocks=3)
    x, y = dg.randn(256, 256), dg.randint(0, 10, (256,))
    model(x, y).backward()  # warm-up, outside the profile
    dg.synchronize()

    def step(i):
        model(x, y).backward()
        dg.synchronize()  # the step's Tasks run inside the step (the breakdown counts device time per step)

    result = _profile_loop(step, steps=3)
    rows = memtools.module_costs(result)
    by_path = {r["path"]: r for r in rows}
    top = by_path["Net"]
    compute = sum(s["buckets_ns"]["compute"] for s in result.breakdown["steps"])
    total = top["forward_ns"] + top["backward_ns"]
    assert abs(total - compute) <= 0.05 * compute, (total, compute)
    assert top["backward_ns"] > 0 and top["forward_ns"] > 0
    # Nested modules sum into their parent, in both phases.
    for r in rows:
        if not r["id"]:
            continue
        kids = [c for c in rows if c["parent"] == r["id"] and c["id"]]
        for phase in ("forward", "backward"):
            assert r[f"{phase}_ns"] == r[f"self_{phase}_ns"] + sum(c[f"{phase}_ns"] for c in kids)
    assert {"Net.blocks.0", "Net.blocks.2.fc1", "Net.head"} <= set(by_path)
    # Backward attribution: a Linear's backward GEMMs land on it, not on its parent.
    fc1 = by_path["Net.blocks.0.fc1"]
    assert fc1["backward_tasks"] >= 2 * 3 and fc1["self_backward_ns"] > 0
    assert by_path["Net.blocks.0"]["self_backward_ns"] < by_path["Net.blocks.0"]["backward_ns"]
    # Peak memory per module, per phase.
    assert fc1["forward_peak_bytes"] > 0 and fc1["backward_peak_bytes"] > 0
    assert by_path["Net"]["forward_peak_bytes"] >= fc1["forward_peak_bytes"]


def test_a_module_at_a_freed_modules_address_gets_its_own_scope():
    # CPython reuses the id() of a freed object; the scope tables are keyed by id(), so a Net built where a freed
    # MLP lived once inherited the MLP's scope and path (the suite's order made test_module_costs... fail on it).
    def rows_of(model, *args):
        with dg.profiler.profile(with_modules=True) as prof:
            model(*args)
            prof.step()
        return {r["path"] for r in memtools.module_costs(prof.result)}

    old = MLP()
    assert "MLP" in rows_of(old, dg.randn(2, 256))
    old_id, old_sid = id(old), _scopes._by_key[(0, id(old))]
    del old
    gc.collect()
    new = Net()
    # What the address reuse leaves behind, made certain: the new module's id() keys the dead one's entries.
    _scopes._by_key[(0, id(new))] = old_sid
    _scopes._first_scope[id(new)] = old_sid
    for key in [k for k in _scopes._names if k[0] == old_id]:
        _scopes._names[(id(new), key[1])] = _scopes._names[key]
    paths = rows_of(new, dg.randn(4, 128), dg.randint(0, 10, (4,)))
    assert "Net" in paths and "MLP" not in paths and "Net.blocks.0.fc1" in paths, paths


def test_module_scopes_cost_nothing_when_off():
    model = MLP()
    with dg.profiler.profile() as prof:  # without with_modules: no scope
        model(dg.randn(2, 256))
        prof.step()
    assert not prof.result.op_modules and memtools.module_costs(prof.result) == []
    assert _scopes.TRACKING[0] is False and dg._C._profiler_module_scope() == 0
    assert not prof.result.storage_events  # buffers are followed only with profile_memory


# --- GC pauses -------------------------------------------------------------------------------------------------------
def test_gc_pauses_on_the_host_track(tmp_path):
    model = MLP()

    def step(i):
        model(dg.randn(4, 256)).sum().item()
        gc.collect()

    result = _profile_loop(step, steps=3)
    pauses = memtools.gc_pauses(result)
    assert pauses["count"] >= 3 and pauses["by_generation"]["2"]["count"] >= 3
    assert all(p["count"] >= 1 for p in pauses["per_step"])
    trace = json.loads(result.chrome_trace_json())
    names = [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert "python gc (generation 2)" in names
    summary = dg.profiler.write_run_dir(result, str(tmp_path / "gc"), peak=1.0)
    assert summary["gc"]["count"] == pauses["count"] and summary["gc"]["per_step_ms"] > 0
    assert gc.callbacks.count(_scopes._gc_callback) == 0  # removed when the session ended


def test_report_sections(tmp_path):
    dg.manual_seed(0)
    model = MLP()
    x, y = dg.randn(16, 256), dg.randint(0, 10, (16,))
    kept = []
    estimate = dg.memory.estimate(model, (x, y), loss_fn=F.cross_entropy)

    def step(i):
        logits = model(x)
        F.cross_entropy(logits, y).backward()
        kept.append(logits)

    result = _profile_loop(step, steps=4)
    run = tmp_path / "run"
    dg.profiler.write_run_dir(result, str(run), peak=1.0, memory_estimate=estimate)
    html = report.render_html(str(run))
    for needle in ('id="modules-table"', 'id="flame-forward"', 'id="flame-backward"', 'id="leaks-table"',
                   "estimated peak (dry run)", "MLP.fc1", 'id="gc"'):
        assert needle in html, needle
