"""Step timing that tells the truth (issue 37 item 5; docs/stream.md, "Run-ahead bound" and "Timing marks").

Invariants, not timings: the queued estimate an enqueue leaves never exceeds the run-ahead bound, a loop that never
synchronizes keeps the host within the bound of the stream, timing marks never report less wall time than the stream
spent running the ops between them, and the trainer's step times hold that around validations and checkpoints.
"""
import json
import os
import time

import pytest

import dygrad as dg
from dygrad import train


@pytest.fixture
def bound():
    """Restores the CPU stream's run-ahead bound after a test that changes it."""
    saved = dg.get_run_ahead_limit()
    yield
    dg.set_run_ahead_limit(saved)


def _matmul_chain(n, size=192):
    a = dg.randn(size, size)
    b = dg.randn(size, size) / size ** 0.5
    for _ in range(n):
        a = a @ b
    return a


def test_the_bound_defaults_on_and_takes_seconds(bound):
    assert 0 < dg.get_run_ahead_limit() <= 0.05
    dg.set_run_ahead_limit(0.002)
    assert dg.get_run_ahead_limit() == pytest.approx(0.002)
    dg.set_run_ahead_limit(0)
    assert dg.get_run_ahead_limit() == 0
    with pytest.raises(ValueError, match=r"\[set_run_ahead_limit\] expected seconds in \[0, 3600\]"):
        dg.set_run_ahead_limit(-1)
    with pytest.raises(RuntimeError, match="set_run_ahead_limit"):
        dg.set_run_ahead_limit(0.001, device="nonsense")


def test_the_queued_estimate_never_exceeds_the_bound_at_an_enqueue(bound):
    _matmul_chain(8)  # the op's rate measured
    dg.synchronize()
    limit_s = 0.002
    # Unbounded, the host enqueues the whole chain ahead of the stream: more than the bound is queued at some
    # enqueue, so the bounded run below has something to bound.
    dg.set_run_ahead_limit(0)
    dg._C._run_ahead_stats(reset=True)
    _matmul_chain(300)
    dg.synchronize()
    assert dg._C._run_ahead_stats()["max_queued_ns"] > limit_s * 1e9
    dg.set_run_ahead_limit(limit_s)
    dg._C._run_ahead_stats(reset=True)
    out = _matmul_chain(300)
    dg.synchronize()
    stats = dg._C._run_ahead_stats()
    assert stats["limit_ns"] == int(limit_s * 1e9)
    assert stats["waits"] > 0
    assert 0 < stats["max_queued_ns"] <= stats["limit_ns"]
    assert stats["queued_ns"] == 0  # nothing queued after a synchronize
    assert dg.isfinite(out).all().item()


def test_a_loop_that_never_synchronizes_stays_within_the_bound(bound):
    """What a wall-clock-timed loop relies on: at the end of each step's enqueues, the work the stream still has to
    run is at most the bound (estimated), so the step's wall time is the stream's within it."""
    model = dg.nn.Sequential(dg.nn.Linear(256, 512), dg.nn.GELU(), dg.nn.Linear(512, 256))
    opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
    x = dg.randn(64, 256)
    dg.set_run_ahead_limit(0.003)

    def step():
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step()
    dg.synchronize()
    queued = []
    for _ in range(20):
        step()
        queued.append(dg._C._run_ahead_stats()["queued_ns"])
    dg.synchronize()
    assert max(queued) <= dg._C._run_ahead_stats()["limit_ns"]


def test_a_loop_that_syncs_every_step_gets_a_bound_of_a_tenth_of_its_step(bound):
    """A loop that reads each step's loss (a sync) runs steps the set bound would not keep honest (a 50 ms bound on a
    60 ms step): the bound in force is a tenth of the work enqueued between the last two syncs, at least 1 ms, and
    the queued estimate stays within it."""
    dg.set_run_ahead_limit(0.05)
    x = dg.randn(192, 192)
    w = dg.randn(192, 192) / 14

    def step(n):
        y = x
        for _ in range(n):
            y = (y @ w).tanh()
        return y.sum().item()  # the sync

    for _ in range(3):
        step(200)
    stats = dg._C._run_ahead_stats(reset=True)
    bounds = [stats["bound_ns"]]  # the bound in force for the next step's enqueues
    assert 1_000_000 <= bounds[0] < stats["limit_ns"]  # a tenth of a step's estimated work, not the set 50 ms
    for _ in range(3):
        step(200)
        bounds.append(dg._C._run_ahead_stats()["bound_ns"])
    stats = dg._C._run_ahead_stats()
    assert stats["waits"] > 0 and 0 < stats["max_queued_ns"] <= max(bounds[:-1]), (stats, bounds)
    dg.synchronize()
    for _ in range(2):
        step(4)  # tiny steps: the bound never goes below 1 ms
    assert dg._C._run_ahead_stats()["bound_ns"] == 1_000_000


def test_timing_marks_report_the_stream_wall_and_busy_time():
    start, end = dg.cpu.Event(enable_timing=True), dg.cpu.Event(enable_timing=True)
    assert start.query()  # never recorded: complete, as torch's
    start.record()
    y = _matmul_chain(40)
    end.record()
    wall, busy = start.elapsed_time(end), start.device_time(end)
    assert end.query()
    assert wall >= busy > 0  # the ops between the marks ran one after another on the stream
    # Marks are stream positions: one recorded later reads a later time, and the stream was busy meanwhile.
    later = dg.cpu.Event(enable_timing=True)
    (y @ y).sum()
    later.record()
    assert end.elapsed_time(later) >= end.device_time(later) > 0
    assert start.elapsed_time(later) >= wall
    # A mark's clock is the host's monotonic clock (time.monotonic_ns), taken when the stream reached it.
    before = time.monotonic_ns()
    mark = dg.cpu.Event(enable_timing=True)
    mark.record()
    mark.synchronize()
    assert before <= int(mark._mark[0].item()) <= time.monotonic_ns()


def test_timing_marks_raise_as_torch_cuda_events_do():
    plain, timed = dg.cpu.Event(), dg.cpu.Event(enable_timing=True)
    plain.record()
    plain.synchronize()
    assert plain.query()
    with pytest.raises(RuntimeError, match="created without enable_timing=True"):
        plain.elapsed_time(timed)
    with pytest.raises(RuntimeError, match="end event has not been recorded"):
        _recorded().elapsed_time(timed)
    with pytest.raises(TypeError, match="expected a torch.cpu.Event"):
        _recorded().elapsed_time(3)
    # torch.cpu's device-agnostic helpers
    s = dg.cpu.current_stream()
    with dg.cpu.stream(dg.cpu.Stream()) as entered:
        assert entered is None and dg.cpu.current_stream() is not s
    assert dg.cpu.current_stream() is s
    assert dg.cpu.current_device() == "cpu" and dg.cpu.is_initialized()
    dg.cpu.synchronize()
    event = s.record_event()
    event.synchronize()
    assert event.query() and s.query()


def _recorded():
    e = dg.cpu.Event(enable_timing=True)
    e.record()
    return e


def test_a_mark_raises_the_deferred_error_of_the_ops_before_it():
    idx = dg.tensor([0, 7])
    table = dg.randn(4, 3)
    bad = dg.nn.functional.embedding(idx, table)  # index 7 out of range: the kernel fails, deferred
    mark = dg.cpu.Event(enable_timing=True)
    mark.record()
    with pytest.raises(IndexError):
        mark.synchronize()
    del bad


def test_the_trainer_step_time_is_never_below_its_busy_time(tmp_path):
    """Around a validation (every 2 steps) and a checkpoint save (every 3), with and without the bound: every step's
    reported time is at least the time the stream spent running its ops, and the tokens/s and MFU are the step
    time's."""
    for limit in ("0", None):
        out = str(tmp_path / f"run{limit}")
        args = ["--config", "tiny", "--seq-len", "64", "--batch-size", "4", "--warmup", "1", "--steps", "7",
                "--eval-interval", "2", "--eval-batches", "1", "--save-interval", "3", "--sample-tokens", "0",
                "--quiet", "--out", out]
        saved = dg.get_run_ahead_limit()
        if limit is not None:
            dg.set_run_ahead_limit(float(limit))
        try:
            assert train.main(args) == 0
        finally:
            dg.set_run_ahead_limit(saved)
        rec = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
        assert [r["step"] for r in rec] == list(range(1, 8))
        for r in rec:
            assert r["step_time_s"] >= r["device_busy_s"] > 0, r
            assert r["tokens_per_s"] == pytest.approx(4 * 64 / r["step_time_s"])
        # MFU is the step time's: tokens/s times the model's FLOPs per token over the peak, one factor for the run.
        per_token = {round(r["mfu"] * r["peak_flops_per_s"] / r["tokens_per_s"], 3) for r in rec}
        assert len(per_token) == 1
