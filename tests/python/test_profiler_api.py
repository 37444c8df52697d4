"""dygrad.profiler's recording API: profile / schedule / record_function / key_averages / export_chrome_trace,
the records (host and device spans, flows, sync points, data waits, shapes, stacks, memory) and the breakdown."""
import json

import numpy as np
import pytest

import dygrad as dg
from dygrad import profiler as P


def test_schedule_matches_torch():
    torch_profiler = pytest.importorskip("torch.profiler")
    for kw in [dict(wait=1, warmup=1, active=3, repeat=1), dict(wait=0, warmup=0, active=1, repeat=0),
               dict(wait=2, warmup=1, active=2, repeat=2, skip_first=3), dict(wait=1, warmup=0, active=4)]:
        ours, theirs = P.schedule(**kw), torch_profiler.schedule(**kw)
        assert [ours(s).name for s in range(40)] == [theirs(s).name for s in range(40)], kw


def test_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="active"):
        P.schedule(wait=0, warmup=0, active=0)
    with pytest.raises(ValueError, match="wait"):
        P.schedule(wait=-1, warmup=0, active=1)
    with pytest.raises(TypeError, match="schedule"):
        P.profile(schedule=3)


def test_ops_have_host_and_device_spans_and_stats():
    a = dg.ones(64, 64)
    with P.profile() as prof:
        for _ in range(5):
            b = dg.add(a, a)
            c = b.mul(2.0)
            prof.step()
        dg.synchronize()
    r = prof.result
    adds = [o for o in r.ops if o.name == "add"]
    muls = [o for o in r.ops if o.name.startswith("mul")]
    assert len(adds) == 5 and len(muls) == 5
    for o in adds + muls:
        assert o.ran and o.host_thread >= 0
        assert o.host_begin_ns <= o.enqueue_ns <= o.device_end_ns
        assert o.device_begin_ns <= o.device_end_ns
        assert o.bytes > 0
        assert o.file.endswith("test_profiler_api.py") and o.line > 0
    rows = {row.name: row for row in prof.key_averages()}
    assert rows["add"].count == 5 and sum(v.count for k, v in rows.items() if k.startswith("mul")) == 5
    assert rows["add"].device_total_ns == sum(o.device_ns for o in adds)
    table = prof.key_averages().table(sort_by="count", row_limit=5)
    assert "add" in table and "mul" in table and "Calls" in table
    with pytest.raises(ValueError, match="sort_by"):
        prof.key_averages().table(sort_by="nonsense")
    np.testing.assert_allclose(c.numpy(), 4.0)


def test_host_span_begins_at_python_entry():
    # matmul validates, infers the shape and allocates before it enqueues: with the entry noted by the
    # binding, the host span is longer than the enqueue instant.
    a = dg.ones(8, 8)
    with P.profile() as prof:
        for _ in range(50):
            dg.matmul(a, a)
    spans = [o.host_ns for o in prof.result.ops if o.name == "matmul"]
    assert len(spans) == 50 and all(s >= 0 for s in spans)
    assert sum(1 for s in spans if s > 0) == 50


def test_multi_task_op_is_a_host_op_range():
    x = dg.randn(4, 8, requires_grad=True)
    with P.profile() as prof:
        y = dg.nn.functional.layer_norm(x, (8,))
        y.sum().backward()
    names = {o.name for o in prof.result.ops}
    assert "sum" in names
    host_ops = prof.result.ranges_of("host_op")
    for rg in host_ops:
        assert rg.end_ns >= rg.begin_ns


def test_record_function_nests_and_decorates():
    @P.record_function("decorated")
    def inner(t):
        return t * 3

    a = dg.ones(4)
    with P.profile() as prof:
        with P.record_function("outer"):
            with P.record_function("inner"):
                inner(a)
    users = {r.name: r for r in prof.result.ranges_of("user")}
    assert set(users) == {"outer", "inner", "decorated"}
    o, i, d = users["outer"], users["inner"], users["decorated"]
    assert o.begin_ns <= i.begin_ns <= d.begin_ns <= d.end_ns <= i.end_ns <= o.end_ns
    # Outside a session record_function is free and records nothing.
    with P.record_function("ignored"):
        pass


def test_sync_points_are_named_by_the_api_that_blocked():
    a = dg.ones(3)
    with P.profile() as prof:
        (a + 1).sum().item()
        (a + 2).numpy()
        (a + 3).tolist()
        bool((a + 4).sum() > 0)
        dg.synchronize()
    names = [r.name for r in prof.result.ranges_of("sync")]
    for api in ("item", "numpy", "tolist", "__bool__", "synchronize"):
        assert api in names, (api, names)
    for r in prof.result.ranges_of("sync"):
        assert r.end_ns >= r.begin_ns


def test_backpressure_is_a_range_outside_the_host_spans():
    saved, bound = dg.get_inflight_allocation_limit(), dg.get_run_ahead_limit()
    big = dg.randn(256, 256)
    try:
        dg.set_inflight_allocation_limit(1 << 20)  # 1 MiB: four 256x256 float32 outputs
        dg.set_run_ahead_limit(0)  # only the allocation window holds the host back (on a loaded machine 20 of these
        with P.profile() as prof:  # matmuls queued pass the 50 ms run-ahead bound too)
            for _ in range(20):
                big = (big @ big) * (1.0 / 256)
        dg.synchronize()
    finally:
        dg.set_inflight_allocation_limit(saved)
        dg.set_run_ahead_limit(bound)
    waits = prof.result.ranges_of("backpressure")
    assert waits and all(w.name == "allocation window" for w in waits)
    for o in prof.result.ops:
        if o.host_thread < 0:
            continue  # queued before the session: no host span
        for w in waits:
            assert o.enqueue_ns <= w.begin_ns or o.host_begin_ns >= w.end_ns, (o, w)


def test_data_loader_wait_is_recorded(tmp_path):
    tokens = np.arange(5000, dtype=np.uint16) % 256
    path = tmp_path / "t.bin"
    tokens.tofile(path)
    ds = dg.data.TokenDataset(str(path), seq_len=16)
    loader = dg.data.DataLoader(ds, batch_size=2, seed=0)
    try:
        with P.profile() as prof:
            for _ in range(3):
                x, y = next(loader)
                prof.step()
    finally:
        loader.close()
    waits = prof.result.ranges_of("data_wait")
    assert len(waits) == 3


def test_record_shapes_and_stack():
    a = dg.ones(2, 3)
    b = dg.ones(3, 4)

    def issue():
        return a @ b

    with P.profile(record_shapes=True, with_stack=True) as prof:
        issue()
    mm = [o for o in prof.result.ops if o.name == "matmul"]
    assert len(mm) == 1
    assert mm[0].input_shapes == [(2, 3), (3, 4)] and mm[0].output_shapes == [(2, 4)]
    assert "issue" in mm[0].stack and "test_record_shapes_and_stack" in mm[0].stack
    grouped = prof.key_averages(group_by_input_shape=True)
    assert any(r.name == "matmul" and "[2, 3]" in r.input_shapes for r in grouped)
    with P.profile() as prof2:
        issue()
    assert prof2.result.ops[0].input_shapes is None and prof2.result.ops[0].stack is None


def test_profile_memory_samples_by_category():
    with P.profile(profile_memory=True) as prof:
        x = dg.zeros(1024, 1024)
        y = x + 1
        del x
        dg.synchronize()
    r = prof.result
    assert len(r.memory) >= 3
    assert max(m.allocated for m in r.memory) >= 2 * 4 * 1024 * 1024
    assert set(r.memory[0].by_category) == set(P.MEMORY_CATEGORIES)
    assert all(m.reserved >= m.allocated for m in r.memory)
    del y


def test_schedule_cycles_and_on_trace_ready():
    seen = []
    a = dg.ones(16)
    sched = P.schedule(wait=1, warmup=1, active=2, repeat=2)
    with P.profile(schedule=sched, on_trace_ready=lambda p: seen.append(p.result)) as prof:
        for step in range(12):
            with P.record_function(f"step{step}"):
                a = a + 1
            prof.step()
    assert len(seen) == 2 and prof.results == seen
    for k, res in enumerate(seen):
        assert res.num_steps == 2
        users = sorted(r.name for r in res.ranges_of("user"))
        first = 4 * k + 2  # wait, warmup, then the two active steps
        assert users == sorted([f"step{first}", f"step{first + 1}"])
        assert [o.name for o in res.ops if o.host_thread >= 0] == ["add_scalar", "add_scalar"]


def test_breakdown_partitions_each_step():
    a = dg.randn(128, 128)
    with P.profile() as prof:
        for _ in range(4):
            for _ in range(3):
                a = dg.tanh(a @ a * 0.01)
            a.sum().item()
            prof.step()
    bd = prof.result.breakdown
    assert len(bd["steps"]) == 4
    for s in bd["steps"] + [bd["mean"]]:
        total = sum(s["buckets_ns"].values())
        assert abs(total - s["step_ns"]) <= 1e-6 * s["step_ns"] + 1
    assert "host-bound" in prof.result.breakdown_table()


def test_host_bound_and_device_bound_programs_are_classified():
    tiny = dg.ones(1)
    with P.profile() as host_bound:
        for _ in range(3):
            for _ in range(400):
                tiny = tiny + 1
            host_bound.step()
    assert host_bound.result.breakdown["mean"]["dominant"] in ("host_bound", "other_idle")
    assert host_bound.result.breakdown["mean"]["fractions"]["compute"] < 0.5

    big = dg.randn(512, 512)
    with P.profile() as device_bound:
        for _ in range(3):
            for _ in range(4):
                big = (big @ big) * (1.0 / 512)
            dg.synchronize()  # the step ends when its work is done (steps are marked on the host)
            device_bound.step()
    mean = device_bound.result.breakdown["mean"]
    assert mean["dominant"] == "compute", mean


def test_chrome_trace_is_valid_trace_event_format(tmp_path):
    a = dg.ones(32, 32)
    with P.profile(profile_memory=True) as prof:
        for _ in range(3):
            with P.record_function("fwd"):
                b = a @ a
            b.sum().item()
            prof.step()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    check_trace_event_format(events)
    names = {e.get("name") for e in events}
    assert {"matmul", "fwd", "sync (item)"} <= names
    assert any(e["ph"] == "C" for e in events)  # memory counters


def check_trace_event_format(events):
    """Required fields per phase, complete events nested per track, every flow start matched by an end."""
    flows = {}
    per_track = {}
    for e in events:
        assert "ph" in e and "pid" in e, e
        ph = e["ph"]
        if ph == "M":
            assert "name" in e and "args" in e
            continue
        assert "ts" in e and isinstance(e["ts"], (int, float)), e
        if ph == "X":
            assert "name" in e and "tid" in e and e["dur"] >= 0, e
            per_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
        elif ph in ("s", "f"):
            assert "id" in e and "tid" in e
            flows.setdefault(e["id"], []).append(ph)
        elif ph == "C":
            assert "name" in e and isinstance(e.get("args"), dict)
    for fid, phases in flows.items():
        assert sorted(phases) == ["f", "s"], (fid, phases)
    eps = 1e-3
    for track, spans in per_track.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for b, e in spans:
            while stack and stack[-1][1] <= b + eps:
                stack.pop()
            if stack:
                assert e <= stack[-1][1] + eps, (track, (b, e), stack[-1])
            stack.append((b, e))


def test_misuse_gives_clear_errors():
    prof = P.profile()
    with pytest.raises(RuntimeError, match="step"):
        prof.step()
    with pytest.raises(RuntimeError, match="nothing recorded"):
        prof.key_averages()
    with P.profile():
        with pytest.raises(RuntimeError, match="another profiler"):
            with P.profile():
                pass


def test_profiling_changes_no_results():
    dg.manual_seed(0)
    x = dg.randn(16, 16)
    ref = ((x @ x).softmax(-1) * 3).sum(0).numpy().copy()
    with P.profile(record_shapes=True, profile_memory=True, with_stack=True):
        got = ((x @ x).softmax(-1) * 3).sum(0).numpy().copy()
    np.testing.assert_array_equal(ref, got)
    assert not P.is_recording()
