"""The op-sink chain seen from Python (docs/ops.md, "Op sinks"): ops with their typed attributes, host reads with
the reader and the user's line, a refused read, and the sinks the runtime itself runs (recompute, meta evaluation,
the profiler) side by side with a recorder."""
import inspect

import numpy as np
import pytest

import dygrad as dg
from dygrad import _C


def _line():
    return inspect.currentframe().f_back.f_lineno


def test_ops_are_recorded_with_their_attributes():
    x = dg.ones(3)
    with _C._OpRecorder() as rec:
        y = x.add(x, alpha=2)
        z = y.mul(3.0)
    assert [name for name, *_ in rec.ops] == ["add", "mul_scalar"]
    assert "alpha=2" in rec.ops[0][1]
    assert "3" in rec.ops[1][1]
    assert z.tolist() == [9.0, 9.0, 9.0]  # recorded, not consumed: the stream ran both


def test_host_reads_name_the_reader_and_the_line():
    x = dg.arange(4, dtype=dg.float32)
    idx = dg.tensor([0, 2])
    mask = x > 1
    with _C._OpRecorder() as rec:
        lines = [_line() + 1]
        x.sum().item()
        lines.append(_line() + 1)
        x.tolist()
        lines.append(_line() + 1)
        x.numpy()
        lines.append(_line() + 1)
        bool(x[0] > 0)
        lines.append(_line() + 1)
        dg.nn.functional.one_hot(idx)
        lines.append(_line() + 1)
        x[mask]
        lines.append(_line() + 1)
        dg.equal(x, x)
        lines.append(_line() + 1)
        x.repeat_interleave(dg.tensor([1, 2, 1, 1]))
        lines.append(_line() + 1)
        dg.nn.functional.one_hot(idx, num_classes=3)  # still checks the class values on the host, as torch does
        lines.append(_line() + 1)
        print(x, end="\r")
    readers = [r for r, _, _ in rec.host_reads]
    assert readers == ["item", "tolist", "numpy", "__bool__", "one_hot", "one_hot", "nonzero", "equal",
                       "repeat_interleave", "one_hot", "one_hot", "print"]
    files = {f for _, f, _ in rec.host_reads}
    assert files == {__file__}
    by_reader_line = [(r, ln) for r, _, ln in rec.host_reads]
    expected = [("item", lines[0]), ("tolist", lines[1]), ("numpy", lines[2]), ("__bool__", lines[3]),
                ("one_hot", lines[4]), ("one_hot", lines[4]), ("nonzero", lines[5]), ("equal", lines[6]),
                ("repeat_interleave", lines[7]), ("one_hot", lines[8]),
                ("one_hot", lines[8]), ("print", lines[9])]
    assert by_reader_line == expected


def test_a_refused_host_read_raises_with_the_line_and_reads_nothing():
    x = dg.ones(2) * 3
    with _C._OpRecorder(refuse_host_reads=True):
        line = _line() + 2
        with pytest.raises(RuntimeError, match=rf"\[item\] reads a tensor's values on the host .*:{line}\)"):
            x.sum().item()
        with pytest.raises(RuntimeError, match=r"\[tolist\]"):
            x.tolist()
    assert x.sum().item() == 6.0  # outside, reads go ahead


def test_recompute_meta_and_profiler_run_beside_a_recorder():
    from dygrad.utils.checkpoint import checkpoint
    lin = dg.nn.Linear(8, 8)
    x = dg.randn(4, 8, requires_grad=True)
    with _C._OpRecorder() as rec:
        out = checkpoint(lambda t: lin(t).relu(), x, use_reentrant=False)
        out.sum().backward()
    names = [n for n, *_ in rec.ops]
    assert names.count("relu") == 2  # the forward and its recomputation, both issued on this thread
    assert x.grad is not None and np.isfinite(x.grad.numpy()).all()

    # Meta evaluation is a process sink, after the thread's: the recorder sees each op the meta sink then consumes.
    model = dg.nn.Linear(16, 16)
    batch = (dg.randn(2, 16),)
    with _C._OpRecorder() as rec:
        est = dg.memory.estimate(model, batch)
    assert est.peak > 0 and est.tasks > 0
    assert "matmul" in {n for n, *_ in rec.ops} or "addmm" in {n for n, *_ in rec.ops}
    assert len(rec.ops) >= est.tasks


def test_profiler_records_the_ops_no_sink_consumed():
    from dygrad.profiler import profile
    x = dg.ones(64)
    with profile() as prof:
        with _C._OpRecorder() as rec:
            (x * 2 + 1).sum()
        dg.synchronize()
    names = {e.name for e in prof.events()}
    assert {n for n, *_ in rec.ops} <= names


def test_host_reads_in_dygrads_python_are_reported_as_the_api_at_the_users_line():
    p = dg.nn.Parameter(dg.ones(4))
    p.grad = dg.full((4,), 0.5)
    opt = dg.optim.Adam([p], lr=0.1, amsgrad=True)  # amsgrad: the composed path, which reads the step count
    with _C._OpRecorder() as rec:
        line = _line() + 1
        opt.step()
        dg.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
        fused = dg.optim.AdamW([p], lr=0.1)
        fused.step()  # the fused Task reads nothing on the host
    assert [(r, f, ln) for r, f, ln in rec.host_reads] == [("Adam.step", __file__, line),
                                                           ("clip_grad_norm_", __file__, line + 1)]
