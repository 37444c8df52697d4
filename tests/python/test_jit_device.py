"""dygrad.jit on a device (docs/jit.md, "On a device"): functions, Modules and whole training steps whose tensors are on
the asynchronous test device replay as one jit_graph Task on that device's stream, bitwise eager on the CPU; errors,
host reads, segments and symbolic shapes as on the CPU; a function that copies between devices runs as segments."""
import warnings

import numpy as np
import pytest

import dygrad as dg
import dygrad.nn as nn
from dygrad.models import llama
from jit_steps import llama_step

DEVICE = "test:0"


@pytest.fixture(scope="module", autouse=True)
def test_devices():
    assert dg.testing.enable_test_device(2) >= 2


def bits(t):
    t = t.detach().cpu().contiguous()
    return t.view(dg.int32).numpy().copy() if t.dtype == dg.float32 else t.numpy().copy()


def graph_tasks(prof):
    return [o for o in prof.result.ops if o.name in ("jit_graph", "jit_segment")]


# --- functions and Modules ---------------------------------------------------------------------------------------
def test_a_function_replays_on_the_devices_stream_with_the_cpus_bits():
    def f(a, b):
        return (a * b + 1).relu().sum(0), (a - b).exp()

    jf = dg.jit(f)
    for i in range(4):
        a, b = dg.randn(4, 3), dg.randn(4, 3)
        got = jf(a.to(DEVICE), b.to(DEVICE))
        want = f(a, b)
        assert all(str(x.device) == DEVICE for x in got)
        assert all(np.array_equal(bits(x), bits(y)) for x, y in zip(got, want))
    assert jf.stats["captures"] == 1 and jf.stats["replays"] == 2
    a, b = dg.randn(4, 3).to(DEVICE), dg.randn(4, 3).to(DEVICE)
    dg.synchronize()
    with dg.profiler.profile() as prof:
        jf(a, b)
    assert [(o.name, o.device) for o in prof.result.ops] == [("jit_graph", DEVICE)]
    # The same function given CPU tensors is another key: a CPU graph beside the device's.
    x, y = dg.randn(4, 3), dg.randn(4, 3)
    for _ in range(2):
        got = jf(x, y)
    assert all(str(t.device) == "cpu" for t in got) and jf.stats["captures"] == 2
    dg.synchronize()
    with dg.profiler.profile() as prof:
        jf(x, y)
    assert [(o.name, o.device) for o in prof.result.ops] == [("jit_graph", "cpu")]


def test_the_arena_and_new_buffers_come_from_the_devices_pool():
    jf = dg.jit(lambda a: ((a * 2).exp() * a).sum(1))
    a = dg.randn(256, 64).to(DEVICE)
    for _ in range(2):
        jf(a)
    dg.synchronize()
    graph = jf._entries[next(iter(jf._entries))].graph
    assert graph.arena_bytes >= 256 * 64 * 4
    cpu_before = dg.memory.memory_allocated()
    dev_before = dg.memory.memory_allocated(DEVICE)
    out = jf(a)
    dg.synchronize()
    assert str(out.device) == DEVICE
    assert dg.memory.memory_allocated(DEVICE) - dev_before >= 256 * 4  # the escaping result, on the device
    assert dg.memory.memory_allocated() == cpu_before  # nothing of the replay on the host
    jf.reset()
    del graph, out
    dg.synchronize()
    assert dg.memory.memory_allocated(DEVICE) < dev_before  # the arena was the device's


def test_a_modules_forward_and_a_forward_whose_backward_runs_outside():
    dg.manual_seed(0)
    ref = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.2), nn.Linear(16, 4))
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.2), nn.Linear(16, 4))
    model.load_state_dict(ref.state_dict())
    model.to(DEVICE)
    compiled = dg.compile(model)
    for step in range(5):
        x = dg.randn(6, 8)
        dg.manual_seed(100 + step)
        want = ref(x)
        want.sum().backward()
        dg.manual_seed(100 + step)
        got = compiled(x.to(DEVICE))
        got.sum().backward()  # the backward graph, replayed on the device too
        assert np.array_equal(bits(got), bits(want))
        for p, q in zip(ref.parameters(), model.parameters()):
            assert str(q.grad.device) == DEVICE and np.array_equal(bits(q.grad), bits(p.grad))
    assert compiled._compiled_forward.stats["replays"] >= 3
    with dg.no_grad():
        model.eval(), ref.eval()
        x = dg.randn(6, 8)
        for _ in range(3):
            got = compiled(x.to(DEVICE))
        assert np.array_equal(bits(got), bits(ref(x)))


# --- a whole training step ---------------------------------------------------------------------------------------
def llama_run(device, compiled, steps=20, fused=True, jit_level="O0"):
    cfg = llama.LlamaConfig(n_layers=2, dim=64, n_heads=4, ffn_dim=172, seq_len=16, batch_size=2, dropout=0.1)
    dg.manual_seed(0)
    m = llama.Llama(cfg, fused=fused).to(device)
    opt = dg.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)
    sched = dg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)

    step = llama_step(m, opt)

    run = dg.jit(step, jit_level=jit_level) if compiled else step
    dg.manual_seed(1)
    losses, tasks = [], []
    for i in range(steps):
        x, y = dg.randint(0, 256, (2, 16)).to(device), dg.randint(0, 256, (2, 16)).to(device)
        if compiled and i == steps - 1:
            dg.synchronize()
            with dg.profiler.profile() as prof:
                losses.append(run(x, y))
            tasks = [(o.name, o.device) for o in prof.result.ops]
        else:
            losses.append(run(x, y))
        sched.step()
    return m, losses, run, tasks


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_a_llama_step_compiled_on_the_device_gives_the_cpus_parameters(fused, restore_context):
    dg.set_context(deterministic=True)
    cpu_model, cpu_losses, _, _ = llama_run("cpu", False, fused=fused)
    dev_model, dev_losses, step, tasks = llama_run(DEVICE, True, fused=fused)
    assert step.stats["captures"] == 1 and step.stats["replays"] == 18 and step.stats["recompiles"] == 0
    assert tasks == [("jit_graph", DEVICE)]  # one Task per call, on the device's stream
    assert all(str(p.device) == DEVICE for p in dev_model.parameters())
    assert [bits(l).tolist() for l in dev_losses] == [bits(l).tolist() for l in cpu_losses]
    for (name, p), (_, q) in zip(cpu_model.named_parameters(), dev_model.named_parameters()):
        assert np.array_equal(bits(p), bits(q)), name


def test_o1_on_the_device_runs_the_passes_that_need_no_generated_code(restore_context, jit_config):
    # docs/jit-fusion.md: the passes are backend-neutral; a backend without a generator (the test device, CUDA until
    # it has one) gets every pass but fusion and in-place reuse. Deterministic mode (no pattern): the CPU's bits.
    dg.set_context(deterministic=True)
    cpu_model, cpu_losses, _, _ = llama_run("cpu", False, steps=6, fused=False)
    dev_model, dev_losses, step, tasks = llama_run(DEVICE, True, steps=6, fused=False, jit_level="O1")
    assert step.stats["replays"] == 4 and step.stats["fused_kernels"] == 0 and tasks == [("jit_graph", DEVICE)]
    assert [bits(l).tolist() for l in dev_losses] == [bits(l).tolist() for l in cpu_losses]
    for (name, p), (_, q) in zip(cpu_model.named_parameters(), dev_model.named_parameters()):
        assert np.array_equal(bits(p), bits(q)), name
    x, y = dg.randint(0, 256, (2, 16)).to(DEVICE), dg.randint(0, 256, (2, 16)).to(DEVICE)

    def forward_backward(x, y):
        loss = dev_model(x, y)
        loss.backward()
        dev_model.zero_grad(set_to_none=True)
        return loss.detach()

    text = dg.jit.graph(forward_backward, x, y, passes=True)
    notes = {line.split(":")[0].strip("= "): line for line in text.splitlines() if line.startswith("===")}
    assert "no fusion on this device" in notes["fusion"] and "not on this device" in notes["inplace"]
    assert "computed again" in notes["rematerialize"] and "removed" in notes["dce"] and "computed once" in notes["fold"]
    # Outside deterministic mode the attention pattern runs there too (sdpa's device kernel), within rounding.
    dg.set_context(deterministic=False)
    assert "2 attention(s) into scaled_dot_product_attention (2 with its backward)" in dg.jit.graph(
        forward_backward, x, y, passes=True)


def test_version_counters_and_grads_are_eager_on_the_device():
    w = nn.Parameter(dg.randn(3).to(DEVICE))
    opt = dg.optim.SGD([w], lr=0.1, momentum=0.9)

    def step(x):
        (w * x).sum().backward()
        opt.step()
        return w.grad.clone()  # .grad is kept (no zero_grad): a replay reads the fixed buffer it accumulates into

    js = dg.jit(step)
    x = dg.randn(3).to(DEVICE)
    versions = []
    for _ in range(4):
        before = w._version
        g = js(x)
        versions.append(w._version - before)
    assert len(set(versions)) == 1 and versions[0] > 0  # the replays bump as eager did
    assert js.stats["replays"] == 2
    assert str(g.device) == DEVICE and np.array_equal(bits(g), bits(w.grad))
    assert np.array_equal(bits(w.grad), bits(((x + x) + x) + x))  # accumulated over four calls, replays included


# --- errors and the poisoned-input rule --------------------------------------------------------------------------
def test_a_device_side_error_in_a_replay_surfaces_at_the_next_sync_and_the_next_step_runs():
    table = nn.Parameter(dg.randn(10, 4).to(DEVICE))
    opt = dg.optim.SGD([table], lr=0.1, momentum=0.9)

    def step(index):
        loss = table.index_select(0, index).sum()  # the failing sub-op's line
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    js = dg.jit(step)
    good = dg.tensor([1, 2, 3]).to(DEVICE)
    for _ in range(3):
        js(good)
    dg.synchronize()
    assert js.stats["replays"] == 1
    before, momentum = bits(table), bits(opt.state[table]["momentum_buffer"])
    out = js(dg.tensor([1, 12, 3]).to(DEVICE))  # returns: the launcher finds the index later
    assert js.stats["replays"] == 2
    with pytest.raises(IndexError, match=r"\[index_select\][\s\S]*test_jit_device.py:\d+, in a graph dygrad.jit "
                                         r"replayed"):
        dg.synchronize()
    with pytest.raises(RuntimeError, match="invalid"):
        out.item()
    assert np.array_equal(bits(table), before)  # parameters and momentum as they were
    assert np.array_equal(bits(opt.state[table]["momentum_buffer"]), momentum)
    js(good)  # the next step runs
    dg.synchronize()
    assert not np.array_equal(bits(table), before) and js.stats["replays"] == 3


def test_a_cpu_replay_waits_for_the_devices_copy_into_its_argument():
    """A jit_graph Task on the CPU's stream whose argument a device's copy writes (non-blocking, into pinned memory)
    waits for that copy's event, as an eager Task does; a missed wait is caught by the buffer ("missed sync")."""
    jf = dg.jit(lambda h: h * 2 + 1)
    src = dg.arange(4096, dtype=dg.float32).to(DEVICE)
    for _ in range(2):
        jf(src.to("cpu"))
    dg.synchronize()
    with dg.testing.paused(DEVICE):
        host = src.to("cpu", non_blocking=True)  # queued on the held device: not written yet
        out = jf(host)  # the replay's Task waits for the copy's event
        assert jf.stats["replays"] == 1
        # A host read that skips the wait (planted) is still caught.
        dg._C._set_host_waits_skipped(True)
        try:
            with pytest.raises(RuntimeError, match="missed sync"):
                host.numpy()
        finally:
            dg._C._set_host_waits_skipped(False)
    assert np.array_equal(out.numpy(), np.arange(4096, dtype=np.float32) * 2 + 1)


# --- host reads, copies between devices, symbolic shapes ---------------------------------------------------------
def test_a_function_with_a_host_read_runs_as_segments_on_the_devices_stream():
    def f(x):
        s = (x * 3).sum()
        if s.item() > 1e30:  # the cut: a copy to the host, then the read
            x = x * 0
        return (x + 1).exp()

    jf = dg.jit(f)
    x = dg.randn(5, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.jit.JitGraphBreakWarning)
        for _ in range(4):
            got = jf(x.to(DEVICE))
    assert jf.stats["segment_calls"] >= 1
    assert np.array_equal(bits(got), bits(f(x)))
    dg.synchronize()
    with dg.profiler.profile() as prof:
        jf(x.to(DEVICE))
    segments = [o.device for o in prof.result.ops if o.name == "jit_segment"]
    assert DEVICE in segments  # the device's ops, gathered on its stream (the host copy's own on the CPU's)
    report = dg.jit.explain(f, x.to(DEVICE))
    assert any(r.startswith("item at ") for r in report.break_reasons)


def test_a_function_that_copies_between_devices_runs_as_segments_and_says_so():
    def f(a):
        return (a.to(DEVICE) * 2).cpu() + a  # cpu -> test:0 -> cpu inside

    jf = dg.jit(f)
    x = dg.randn(3, 4)
    with pytest.warns(dg.jit.JitGraphBreakWarning, match=r"\[copy_device\] copies from cpu to test:0"):
        for _ in range(4):
            got = jf(x)
    assert np.array_equal(bits(got), bits(f(x))) and jf.stats["segment_calls"] >= 1
    with dg.profiler.profile() as prof:
        jf(x)
    devices = [(o.name, o.device) for o in prof.result.ops if o.name != "copy_device"]
    assert ("jit_segment", DEVICE) in devices and ("jit_segment", "cpu") in devices
    report = dg.jit.explain(f, x)
    assert any("copies from test:0 to cpu" in p for p in report.problems)
    with pytest.raises(RuntimeError, match=r"fullgraph=True[\s\S]*copy_device\] copies from cpu to test:0"):
        g = dg.jit(f, fullgraph=True)
        for _ in range(2):
            g(x)


def test_symbolic_shapes_on_the_device():
    w_cpu = dg.randn(16)
    w = w_cpu.to(DEVICE)

    def f(x):
        return (x * (w if str(x.device) == DEVICE else w_cpu)).softmax(-1).mean(0)

    jf = dg.jit(f, dynamic=True)
    for batch in (4, 8, 12, 5, 9, 16, 33):
        x = dg.randn(batch, 16)
        got = jf(x.to(DEVICE))
        assert str(got.device) == DEVICE
        assert np.array_equal(bits(got), bits(f(x)))
    stats = jf.stats
    assert stats["recompiles"] == 0 and stats["symbolic_instances"] >= 3, stats  # sizes never captured, replayed
