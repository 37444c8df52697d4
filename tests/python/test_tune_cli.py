"""python3 -m dygrad.tune end to end on a micro setting (the tiny LLaMA at 32 tokens, batch 2 x 2 accumulated):
a poor start under --budget 60s, a memory limit the default step exceeds, and Ctrl-C mid-trial (docs/tune.md)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import dygrad as dg
from dygrad.tune import load
from dygrad.tune.candidates import NUMERICS
from dygrad.tune.settings import without_settings
from dygrad.tune.trial import read_metrics, run_trial

MICRO = ["--config", "tiny", "--seq-len", "32", "--lr", "3e-3", "--warmup", "1"]


def tune(tmp_path, *options, timeout=240):
    cmd = [sys.executable, "-m", "dygrad.tune", "--output", str(tmp_path / "tune.json"),
           "--report", str(tmp_path / "report.html"), "--steps", "6", "--warmup", "2", *options]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout)


def test_a_poor_start_is_tuned_within_the_budget(tmp_path):
    user_out = tmp_path / "user-run"
    command = ["--", "-m", "dygrad.train", *MICRO, "--threads", "1", "--synchronize", "--deterministic", "--unfused",
               "--batch-size", "2", "--grad-accum", "2", "--out", str(user_out)]
    started = time.perf_counter()
    done = tune(tmp_path, "--budget", "60s", *command)
    assert done.returncode == 0, done.stderr + done.stdout
    assert time.perf_counter() - started < 60 + 45  # the budget, plus the baseline's profile and the outputs
    assert not user_out.exists()  # trials run in the scratch directory, never in the command's --out
    trials = json.load(open(tmp_path / "report.trials.json"))
    assert trials["trials"], done.stdout
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert len(lines) == len(trials["trials"])  # a progress line per trial
    for t in trials["trials"]:
        assert t["reason"] and "-m dygrad.train --config tiny" in t["reproduce"]  # ranks: under the launcher
        if t["numerics"] == "exact" and not t["reason"].startswith("failed"):
            assert t["loss_difference"] == 0.0, t  # the class is right: bitwise the incumbent's losses
    refused = {r["candidate"] for r in trials["refused"]}
    assert "deterministic off" in refused  # no consent given
    tried = {t["candidate"] for t in trials["trials"]}  # ranks: refused without MPI, else tried or left to try
    assert "ranks per machine" in refused | tried or "ranks per machine" in trials["stopped"]
    data = load(tmp_path / "tune.json")
    kept = [t for t in trials["trials"] if t["kept"]]
    assert data["settings"] == (kept[-1]["settings"] if kept else trials["baseline"])
    html = open(tmp_path / "report.html").read()
    assert html.count('class="track"><span class="bar"') == len(trials["trials"])  # one bar per trial
    assert "Step breakdown, before and after" in html and "Refused settings" in html


def test_a_memory_limit_the_default_exceeds_is_met_with_the_same_losses(tmp_path):
    base = ["--config", "tiny", "--seq-len", "128", "--lr", "3e-3", "--warmup", "1", "--batch-size", "4"]
    first = run_trial("default", base, {}, {}, str(tmp_path / "default"), steps=5, warmup=1)
    half = run_trial("half", base, {"batch_size": 2, "grad_accum": 2}, {}, str(tmp_path / "half"), steps=5, warmup=1)
    assert first.ok and half.ok and half.peak_bytes < first.peak_bytes * 0.95, (first.error, half.error)
    limit = (first.peak_bytes + half.peak_bytes) // 2  # the default step exceeds it, half its micro-batch fits
    done = tune(tmp_path, "--budget", "35s", "--memory-limit", str(limit), "--", "-m", "dygrad.train", *base)
    assert done.returncode == 0, done.stderr + done.stdout
    data = load(tmp_path / "tune.json")
    assert data["kept"], done.stdout  # a memory candidate was kept
    with_file = without_settings(base) + ["--settings", str(tmp_path / "tune.json")]  # what the tuner prints
    assert with_file[-4:-2] == ["--warmup", "1"] and f"dygrad.train {' '.join(with_file)}" in done.stdout
    fitted = run_trial("check", with_file, {}, {}, str(tmp_path / "check"), steps=5, warmup=1)
    assert fitted.ok and fitted.peak_bytes <= limit, (fitted.error, fitted.peak_bytes, limit)
    diff = max(abs(a - b) / a for a, b in zip(first.losses, fitted.losses))
    assert len(fitted.losses) == 4 and diff <= NUMERICS["rounding"]


def _trial_processes(scratch):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if str(scratch) in cmdline and "dygrad.train" in cmdline:
            found.append(int(pid))
    return found


def test_ctrl_c_stops_every_trial_process(tmp_path):
    scratch = tmp_path / "scratch"
    cmd = [sys.executable, "-m", "dygrad.tune", "--scratch", str(scratch), "--output", str(tmp_path / "t.json"),
           "--report", str(tmp_path / "r.html"), "--steps", "40", "--", "-m", "dygrad.train", *MICRO]
    tuner = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not _trial_processes(scratch) and time.time() < deadline:
        time.sleep(0.2)
    assert _trial_processes(scratch), "no trial started"
    time.sleep(1.0)
    tuner.send_signal(signal.SIGINT)
    _, err = tuner.communicate(timeout=30)
    assert tuner.returncode == 130 and "every trial process was stopped" in err
    assert _trial_processes(scratch) == []
    assert not (tmp_path / "t.json").exists()


SPLIT = {"ranks": 2, "batch_split": True, "threads": 1}


@pytest.mark.skipif(shutil.which("mpirun") is None or not dg.distributed.is_available(), reason="needs MPI")
def test_split_batch_ranks_train_as_one_process(tmp_path):
    """dygrad.train --batch-split under 2 ranks (as the tuner launches them): the single process's losses within
    rounding, the global batch's tokens counted once, both ranks' peaks; a batch that does not split is an error."""
    base = MICRO + ["--batch-size", "4", "--grad-accum", "2"]
    one = run_trial("one", base, {}, {}, str(tmp_path / "one"), steps=4, warmup=1)
    two = run_trial("two", base, SPLIT, {}, str(tmp_path / "two"), steps=4, warmup=1)
    assert one.ok and two.ok, (one.error, two.error)
    assert "dygrad.distributed.run" in two.command and len(two.losses) == 3
    assert max(abs(a - b) / a for a, b in zip(one.losses, two.losses)) < 1e-5
    assert two.tokens_per_step == pytest.approx(8 * 32) and one.tokens_per_step == pytest.approx(8 * 32)
    last = read_metrics(str(tmp_path / "two"))[-1]
    per_rank = last["max_allocated_bytes_per_rank"]
    assert len(per_rank) == 2 and min(per_rank) > 0 and two.peak_bytes == sum(per_rank)
    odd = run_trial("odd", MICRO + ["--batch-size", "3"], SPLIT, {}, str(tmp_path / "odd"), steps=4, warmup=1)
    assert not odd.ok and "--batch-size 3 does not divide by the 2 ranks" in open(tmp_path / "odd" / "trial.log").read()


@pytest.mark.skipif(shutil.which("mpirun") is None or not dg.distributed.is_available(), reason="needs MPI")
def test_the_tuner_tries_ranks_per_machine(tmp_path, monkeypatch):
    """The search with the ranks line alone: 2 ranks x 1 thread against 1 x 2 at the same global batch, A B, the
    losses within rounding; its reproduction starts the ranks with the launcher."""
    from dygrad.tune import candidates, search
    only = tuple(c for c in candidates.CANDIDATES if c.name == "ranks per machine")
    monkeypatch.setattr(candidates, "CANDIDATES", only)
    result = search.search(MICRO + ["--batch-size", "4"], budget_s=90, scratch=str(tmp_path), steps=5, warmup=2,
                           rounds=1, log=lambda *a: None)
    assert 1 <= len(result["trials"]) <= 2  # a second measurement when the first was not kept for its time alone
    for trial in result["trials"]:
        assert trial["candidate"] == "ranks per machine" and trial["reason"], trial
        assert not trial["reason"].startswith("failed") and trial["loss_difference"] <= NUMERICS["rounding"]
        assert trial["changes"] == {"ranks": 2, "batch_split": True, "threads": (os.cpu_count() or 1) // 2}
        assert trial["reproduce"].startswith("python3 -m dygrad.distributed.run --nproc-per-node 2 -m dygrad.train")
    assert (result["settings"].get("ranks") == 2) == any(t["kept"] for t in result["trials"])
