"""The main job end to end on a small setting: the loss falls, metrics.jsonl and the checkpoint are written,
and a run stopped mid-way and resumed reproduces the uninterrupted run's losses exactly."""
import json
import os

import dygrad as dg
from dygrad import train

SMALL = ["--config", "tiny", "--seq-len", "32", "--batch-size", "2", "--lr", "3e-3", "--warmup", "1",
         "--eval-interval", "3", "--eval-batches", "1", "--sample-tokens", "8", "--quiet"]


def losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as fh:
        return {r["step"]: r["loss"] for r in map(json.loads, fh)}


def test_train_loss_falls_and_writes_outputs(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert train.main(SMALL + ["--steps", "8", "--out", out]) == 0
    rec = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert [r["step"] for r in rec] == list(range(1, 9))
    assert rec[-1]["loss"] < rec[0]["loss"] - 0.5
    assert all(r["tokens_per_s"] > 0 and 0 < r["mfu"] for r in rec)
    assert "val_loss" in rec[2] and "val_loss" in rec[-1]
    assert os.path.exists(os.path.join(out, "checkpoint.safetensors"))
    assert "sample:" in capsys.readouterr().out


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    full, split = str(tmp_path / "full"), str(tmp_path / "split")
    train.main(SMALL + ["--steps", "6", "--out", full, "--sample-tokens", "0"])
    train.main(SMALL + ["--steps", "6", "--out", split, "--save-interval", "1", "--halt-after", "3",
                        "--sample-tokens", "0"])
    assert sorted(losses(split)) == [1, 2, 3]
    train.main(SMALL + ["--steps", "6", "--out", split, "--resume", "--sample-tokens", "0"])
    assert losses(split) == losses(full)  # bitwise: same batches, weights, optimizer state and RNG


def test_resume_drops_a_cut_last_record(tmp_path, capsys):
    """A kill while a record was written leaves metrics.jsonl's last line cut (issue 32): --resume drops it and
    says so, so the next record starts on its own line and every complete record stays readable."""
    full, split = str(tmp_path / "full"), str(tmp_path / "split")
    train.main(SMALL + ["--steps", "5", "--out", full, "--sample-tokens", "0"])
    train.main(SMALL + ["--steps", "5", "--out", split, "--save-interval", "1", "--halt-after", "3",
                        "--sample-tokens", "0"])
    with open(os.path.join(split, "metrics.jsonl"), "a") as fh:
        fh.write('{"step": 4, "loss": 3.14')  # the record being written when the process was killed
    capsys.readouterr()
    train.main(SMALL + ["--steps", "5", "--out", split, "--resume", "--sample-tokens", "0"])
    assert "dropped a cut last record (24 bytes)" in capsys.readouterr().err
    assert losses(split) == losses(full)  # every line parses, steps 1-5 as in the uninterrupted run
    assert train.repair_metrics(os.path.join(split, "metrics.jsonl")) == 0
    assert train.repair_metrics(str(tmp_path / "absent.jsonl")) == 0
    only_cut = tmp_path / "cut.jsonl"
    only_cut.write_bytes(b'{"step": 1')
    assert train.repair_metrics(str(only_cut)) == 10 and only_cut.read_bytes() == b""


def test_the_first_step_and_the_one_after_an_evaluation_count_their_whole_time(tmp_path):
    # The loop reads a step's loss one iteration late and times each step on the stream (timing marks, docs/stream.md;
    # test_step_timing.py checks each step against its busy time). The first step, and the step after an evaluation
    # (which synchronizes), count their whole time rather than their host enqueue time (1 ms against ~100 ms steps,
    # and an MFU above 100%, when they were timed by the host's clock alone). Not the MFU itself: its peak is
    # calibrated at the start, and on a loaded machine a low calibration puts quieter steps above 100%.
    out = str(tmp_path / "timed")
    assert train.main(["--config", "tiny", "--seq-len", "128", "--batch-size", "4", "--warmup", "1", "--steps", "5",
                       "--eval-interval", "2", "--eval-batches", "1", "--sample-tokens", "0", "--quiet",
                       "--out", out]) == 0
    rec = {r["step"]: r for r in map(json.loads, open(os.path.join(out, "metrics.jsonl")))}
    steady = sorted(rec[s]["step_time_s"] for s in (2, 4, 5))[1]
    for step in (1, 3):  # the first one, and the one after step 2's evaluation
        assert rec[step]["step_time_s"] > 0.3 * steady, (step, rec[step]["step_time_s"], steady)


def test_help_lists_the_options(capsys):
    try:
        train.main(["--help"])
    except SystemExit as e:
        assert e.code == 0
    text = capsys.readouterr().out
    for opt in ("--config", "--steps", "--data", "--out", "--resume", "--profile"):
        assert opt in text


def test_profile_writes_the_report_and_its_steps_match_the_run(tmp_path, capsys):
    out = str(tmp_path / "prof")
    args = ["--config", "tiny", "--seq-len", "64", "--batch-size", "4", "--warmup", "1", "--eval-interval", "100",
            "--save-interval", "100", "--sample-tokens", "0", "--quiet", "--steps", "9", "--out", out,
            "--profile", "--profile-wait", "3", "--profile-steps", "4"]
    assert train.main(args) == 0
    text = capsys.readouterr().out
    run_dir = os.path.join(out, "profile")
    for name in ("trace.json", "op_stats.csv", "breakdown.json", "summary.json", "report.html"):
        assert os.path.getsize(os.path.join(run_dir, name)) > 0, name
    with open(os.path.join(run_dir, "breakdown.json")) as fh:
        bd = json.load(fh)
    with open(os.path.join(run_dir, "summary.json")) as fh:
        summary = json.load(fh)
    assert len(bd["steps"]) == 4 and summary["steps"]["count"] == 4
    # The profiled steps are the host's intervals between the profiler marks of iterations 3..7 (after
    # --profile-wait 3 and one warm-up step); the loop times each step on the stream, from the timing mark after the
    # step before to the one after it (docs/stream.md, "Timing marks"). The loop enqueues step i + 1 before it reads
    # step i's loss, and the run-ahead bound keeps the host within the bound of the stream, so the host's interval
    # from iteration i's mark to the next is the stream running step i + 1 (metrics.jsonl's step i + 2), shifted by at
    # most the bound at each end. Over the profiled window the two agree within that, and the buckets sum to the
    # steps.
    with open(os.path.join(out, "metrics.jsonl")) as fh:
        measured = {r["step"]: r["step_time_s"] for r in map(json.loads, fh)}
    for s in bd["steps"]:
        assert abs(sum(s["buckets_ns"].values()) - s["step_ns"]) <= 1e-6 * s["step_ns"]
    profiled = sum(s["step_ns"] for s in bd["steps"]) * 1e-9
    loop = sum(measured[5 + k] for k in range(len(bd["steps"])))
    assert abs(profiled - loop) <= 0.05 * loop + 2 * dg.get_run_ahead_limit(), (profiled, loop, bd["steps"], measured)
    assert summary["throughput"]["tokens_per_s"] > 0 and summary["flops"]["mfu"] > 0
    assert "advice" in summary
    assert "compute" in text and "report.html" in text  # the breakdown and where the report is


def test_a_failed_step_is_logged_and_skipped_or_stops_the_run(tmp_path):
    # docs/async-errors.md: the failed step changes no parameter; the loop logs it and goes on or stops.
    import pytest
    out = str(tmp_path / "skip")
    assert train.main(SMALL + ["--steps", "6", "--out", out, "--sample-tokens", "0", "--inject-bad-step", "3",
                               "--on-error", "skip"]) == 0
    rec = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    errors = [r for r in rec if "error" in r]
    assert [r["step"] for r in errors] == [3] and "[embedding]" in errors[0]["error"] and errors[0]["skipped"]
    assert sorted(r["step"] for r in rec if "loss" in r) == [1, 2, 4, 5, 6]
    assert all(r["loss"] == r["loss"] for r in rec if "loss" in r)  # finite: the model was not poisoned
    with pytest.raises(IndexError, match=r"\[embedding\]"):
        train.main(SMALL + ["--steps", "6", "--out", str(tmp_path / "stop"), "--sample-tokens", "0",
                            "--inject-bad-step", "3"])


def test_jit_trains_bitwise_as_eager_and_skips_a_failed_step(tmp_path):
    """--jit (docs/jit.md): the compiled step's losses are eager's bit for bit (the learning rate changes every
    step outside the compiled function), and a bad batch in a replayed step fails and changes no parameter."""
    eager, jit = str(tmp_path / "eager"), str(tmp_path / "jit")
    common = SMALL + ["--steps", "7", "--sample-tokens", "0", "--inject-bad-step", "5", "--on-error", "skip"]
    assert train.main(common + ["--out", eager]) == 0
    assert train.main(common + ["--out", jit, "--jit"]) == 0
    recs = {}
    for name, out in (("eager", eager), ("jit", jit)):
        rec = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
        assert [r["step"] for r in rec if "error" in r] == [5], name
        recs[name] = {r["step"]: r["loss"] for r in rec if "loss" in r}
    assert recs["jit"] == recs["eager"] and sorted(recs["jit"]) == [1, 2, 3, 4, 6, 7]
