"""dygrad.tune's decision logic on synthetic trial runs (keep/refuse by median and spread, memory limit, loss
tolerance), its candidate table's checks, the settings file and its round trip through dygrad.train --settings,
and dg.tune.run on a small loop of its own (docs/tune.md)."""
import json
import os

import pytest

import dygrad as dg
from dygrad import train
from dygrad.tune import candidates as table
from dygrad.tune import settings as tune_settings
from dygrad.tune.decide import decide, spread
from dygrad.tune.trial import Run

MIB = 1 << 20


def run(times, losses=(2.0, 1.9, 1.8), peak=100 * MIB, rc=0):
    r = Run(label="x", command=["x"], returncode=rc, step_times=list(times), losses=list(losses),
            steps=list(range(4, 4 + len(losses))), peak_bytes=peak)
    r.error = "exit status 1: boom" if rc else ""
    return r


A1, A2 = run([1.00, 1.01, 0.99]), run([1.02, 1.00, 1.01])


def test_a_candidate_faster_beyond_the_spread_is_kept():
    d = decide([A1, A2], [run([0.80, 0.81, 0.79]), run([0.80, 0.82, 0.80])], numerics="exact")
    # the rounds' ratios 1.00 / 0.80 and 1.01 / 0.80: their median, +- half their range
    assert d.kept and d.speedup == pytest.approx(1.25625) and d.spread == pytest.approx(0.00625)
    assert "faster (median of 2 A B pairs)" in d.reason


def test_a_gain_within_the_measured_spread_is_not_kept():
    # the candidate won one round by 10% and lost the other by 2%: the median 1.04x is within +-6%
    d = decide([run([1.0] * 3), run([1.0] * 3)], [run([1 / 1.10] * 3), run([1 / 0.98] * 3)], numerics="exact")
    assert not d.kept and d.inconclusive and d.spread == pytest.approx(0.06) and "spread" in d.reason
    assert spread([1.10, 0.98]) == pytest.approx(0.06)
    # a slow change of the machine's load hits both sides of a round: the paired ratios still decide
    drift = decide([run([1.0] * 3), run([1.5] * 3)], [run([0.9] * 3), run([1.35] * 3)], numerics="exact")
    assert drift.kept and drift.spread == pytest.approx(0.0)
    floor = decide([A1, A2], [run([1.0] * 3), run([1.0] * 3)], numerics="exact")
    assert not floor.kept and not floor.inconclusive and "1% floor" in floor.reason
    slower = decide([A1, A2], [run([1.1] * 3), run([1.1] * 3)], numerics="exact")
    assert not slower.kept and slower.reason.startswith("slower")


def test_losses_must_match_within_the_numerics_class():
    off = (2.0, 1.9 * (1 + 1e-6), 1.8)
    fast = [run([0.8] * 3, off), run([0.8] * 3, off)]
    exact = decide([A1, A2], fast, numerics="exact")
    assert not exact.kept and "losses differ" in exact.reason and exact.loss_difference == pytest.approx(1e-6)
    assert decide([A1, A2], fast, numerics="rounding").kept
    far = (2.0, 1.95, 1.8)  # 2.6e-2: beyond rounding, within bf16's
    assert not decide([A1, A2], [run([0.8] * 3, far)] * 2, numerics="rounding").kept
    assert decide([A1, A2], [run([0.8] * 3, far)] * 2, numerics="bf16").kept
    unseeded = decide([A1, run([1.0] * 3, far)], [run([0.8] * 3, far)] * 2, numerics="rounding")
    assert not unseeded.kept and "the incumbent's own runs differ by 2.63e-02: the run is not reproducible" in \
        unseeded.reason


def test_a_peak_over_the_memory_limit_is_refused_and_a_fitting_one_kept_for_memory():
    big = [run([0.8] * 3, peak=120 * MIB)] * 2
    d = decide([A1, A2], big, numerics="exact", memory_limit=110 * MIB)
    assert not d.kept and "exceeds the 110.0 MiB limit" in d.reason
    slower_but_fits = [run([1.3] * 3, peak=90 * MIB)] * 2
    d = decide([A1, A2], slower_but_fits, numerics="exact", memory_limit=95 * MIB, goal="memory")
    assert d.kept and "fits the limit" in d.reason and d.speedup < 1


def test_failures_and_early_stops():
    d = decide([A1], [run([0.5], rc=1)], numerics="exact", final=False)
    assert not d.kept and d.reason.startswith("failed: exit status 1")
    d = decide([A1], [run([1.6] * 3)], numerics="exact", final=False)
    assert not d.kept and d.reason.startswith("early stop: 1.60x slower") and d.on_time
    assert decide([A1], [run([1.3] * 3)], numerics="exact", final=False).reason == ""  # within one pair's noise
    assert decide([A1], [run([0.9] * 3)], numerics="exact", final=False).reason == ""  # measure on
    assert not decide([A1], [run([0.9] * 3, (2.0, 1.8, 1.8))], numerics="exact").on_time  # losses: not retried


def ctx(**kw):
    base = {"threads": 1, "synchronize": True, "deterministic": True, "unfused": True, "jit": False,
            "recompute": "none", "recompute_budget": "60%", "dtype": "fp32", "batch_size": 2, "grad_accum": 4,
            "bucket_cap_mb": None, "gradient_as_bucket_view": False, "batch_split": False, "ranks": 0}
    options = {k: kw.pop(k) for k in list(kw) if k not in base}
    options = {"cores": 2, "cpu": {"model": "test CPU", "avx512_bf16": False, "amx": []}, "mpi_problem": "",
               **options}
    return table.Context(settings={**base, **kw}, **options)


def test_the_plan_orders_by_estimated_gain_and_explains_refusals():
    advice = [{"rule": "synchronize_mode", "expected_gain": "up to 1.50x faster step (33.3% of step time)"},
              {"rule": "unfused_rms_norm", "expected_gain": "x", "numbers": {"saved_fraction": 0.1}}]
    todo, refused = table.plan(ctx(advice=advice))
    names = [c.name for c, _, _ in todo]
    assert names[:3] == ["threads: all cores", "synchronize off", "fused ops"]  # 0.8 * (1 - 1/2), 0.333, 0.1
    assert "deterministic off" not in names and "larger micro-batch" in names
    reasons = {c.name: r for c, r in refused}
    assert "--allow-nondeterminism" in reasons["deterministic off"]
    assert "neither AVX512-BF16 nor AMX" in reasons["bf16 autocast"]
    assert "ranks per machine" in names  # two ranks x one thread at the same global batch
    assert "no DDP buckets" in reasons["DDP bucket size"]
    assert not any(c.goal == "memory" for c, _, _ in todo)  # no limit: no memory candidate
    todo, refused = table.plan(ctx(allow_nondeterminism=True, cpu={"avx512_bf16": True, "amx": []}))
    names = [c.name for c, _, _ in todo]
    assert "deterministic off" in names and "bf16 autocast" not in names  # bf16 needs consent too
    jit_o1 = {c.name: (ch, c.numerics) for c, ch, _ in todo}["jit O1"]  # the JIT's passes: within rounding
    assert jit_o1 == ({"jit": True, "jit_level": "O1"}, "rounding")
    assert tune_settings.train_flags({"jit": True, "jit_level": "O1"}) == ["--jit", "--jit-level", "O1"]
    assert "--allow-bf16" in dict((c.name, r) for c, r in refused)["bf16 autocast"]


def test_memory_candidates_come_first_over_the_limit_and_merging_respects_the_estimate():
    over = ctx(memory_limit=100 * MIB, incumbent_peak=150 * MIB)
    todo, _ = table.plan(over)
    assert [c.goal for c, _, _ in todo[:4]] == ["memory"] * 4
    assert todo[0][1] == {"recompute": "selective"}
    assert {"batch_size": 1, "grad_accum": 8} in [ch for _, ch, _ in todo]
    fits = ctx(memory_limit=100 * MIB, incumbent_peak=80 * MIB, estimate_peak=lambda s: s["batch_size"] * 60 * MIB)
    todo, refused = table.plan(fits)
    assert "larger micro-batch" not in [c.name for c, _, _ in todo]
    assert "above the 100.0 MiB limit" in dict((c.name, r) for c, r in refused)["larger micro-batch"]
    merged = {c.name: ch for c, ch, _ in table.plan(ctx())[0]}["larger micro-batch"]
    assert merged == {"batch_size": 8, "grad_accum": 1}  # no limit: every accumulation step merged
    half = ctx(memory_limit=300 * MIB, incumbent_peak=80 * MIB, estimate_peak=lambda s: s["batch_size"] * 60 * MIB)
    assert {c.name: ch for c, ch, _ in table.plan(half)[0]}["larger micro-batch"] == {"batch_size": 4,
                                                                                       "grad_accum": 2}


def test_ranks_per_machine_splits_the_global_batch_and_says_why_not(monkeypatch):
    todo, _ = table.plan(ctx())
    c, changes, _ = next(t for t in todo if t[0].name == "ranks per machine")
    assert changes == {"ranks": 2, "batch_split": True, "threads": 1} and c.numerics == "rounding"
    assert tune_settings.train_flags(changes) == ["--ranks", "2", "--batch-split", "--threads", "1"]
    from dygrad.tune.targets import reproduce_command
    assert reproduce_command(["--config", "tiny"], changes, {}).startswith(
        "python3 -m dygrad.distributed.run --nproc-per-node 2 -m dygrad.train --config tiny --ranks 2 --batch-split")

    def refusal(**kw):
        return dict((c.name, r) for c, r in table.plan(ctx(**kw))[1]).get("ranks per machine")
    assert "has 1 core" in refusal(cores=1)
    assert "ranks per machine: mpirun was not found" in refusal(mpi_problem="mpirun was not found")
    assert "--batch-size 3 does not divide by 2 ranks" in refusal(batch_size=3)
    assert "each draw their own batches (weak scaling)" in refusal(ranks=2)
    # two ranks of one thread on two cores: nothing more to try; each rank's threads are its share of the cores
    split = ctx(ranks=2, batch_split=True, threads=1)
    todo, refused = table.plan(split)
    names = {c.name for c, _, _ in todo}
    assert refusal(ranks=2, batch_split=True, threads=1) is None and "ranks per machine" not in names
    assert "threads: all cores" not in names and {"DDP bucket size", "DDP gradient_as_bucket_view"} <= names
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert table.mpi_problem().startswith("mpirun was not found")


def test_a_script_is_offered_only_what_can_be_set_from_outside_it():
    todo, refused = table.plan(ctx(), where="script")
    assert {c.name for c, _, _ in todo} <= {"synchronize off", "deterministic off", "threads: all cores",
                                             "allocator: keep cached segments"}
    reasons = dict((c.name, r) for c, r in refused)
    assert "needs dygrad.train's --no-unfused" in reasons["fused ops"] and "--jit" in reasons["jit"]
    assert "--ranks and --batch-split" in reasons["ranks per machine"]
    assert "bf16 autocast" in reasons and "larger micro-batch" in reasons


def test_split_batches_are_checked_and_a_settings_files_ranks_are_not_started(tmp_path, capsys):
    assert train.batch_rows(6, 2, True) == (3, 6) and train.batch_rows(6, 2, False) == (6, 12)
    with pytest.raises(SystemExit, match=r"--batch-split: --batch-size 5 does not divide by the 2 ranks"):
        train.batch_rows(5, 2, True)
    path = str(tmp_path / "tune.json")
    tune_settings.save(path, {"ranks": 2, "batch_split": True, "threads": 1})
    assert tune_settings.load(path)["settings"]["ranks"] == 2
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as err:
        train.main(["--settings", path, "--out", str(out)])
    message = str(err.value)
    assert f"--ranks 2 (from {path}): the run is meant for 2 ranks per machine, but this process is alone" in message
    assert f"python3 -m dygrad.distributed.run --nproc-per-node 2 -m dygrad.train --settings {path}" in message
    assert not out.exists()  # refused before any work
    assert train.parse_args(["--settings", path, "--ranks", "0"]).ranks == 0  # the override the message names


def test_settings_file_round_trip_and_checks(tmp_path):
    path = str(tmp_path / "tune.json")
    tune_settings.save(path, {"threads": 2, "unfused": False, "grad_accum": 2, "bucket_cap_mb": 5},
                       {"DYGRAD_ALLOC_RELEASE_FRACTION": -1}, kept=["x"])
    data = tune_settings.load(path)
    assert data["settings"] == {"threads": 2, "unfused": False, "grad_accum": 2, "bucket_cap_mb": 5.0}
    assert data["environment"] == {"DYGRAD_ALLOC_RELEASE_FRACTION": "-1"} and data["kept"] == ["x"]
    assert tune_settings.train_flags(data["settings"]) == ["--threads", "2", "--no-unfused", "--grad-accum", "2",
                                                           "--bucket-cap-mb", "5.0"]
    assert tune_settings.without_settings(["--config", "tiny", "--threads", "1", "--unfused", "--no-jit",
                                           "--batch-size=2", "--out", "x", "--synchronize"]) == ["--config", "tiny",
                                                                                                 "--out", "x"]
    with pytest.raises(ValueError, match="unknown setting 'thread'"):
        tune_settings.save(path, {"thread": 2})
    with pytest.raises(ValueError, match="'threads' must be int, got True"):
        tune_settings.save(path, {"threads": True})
    with pytest.raises(ValueError, match="not a tunable one"):
        tune_settings.save(path, {}, {"PATH": "/"})
    (tmp_path / "bad.json").write_text('{"settings": {}}')
    with pytest.raises(ValueError, match="not a settings file"):
        tune_settings.load(str(tmp_path / "bad.json"))


def test_train_settings_are_defaults_and_options_override_them(tmp_path):
    path = str(tmp_path / "tune.json")
    tune_settings.save(path, {"threads": 1, "unfused": True, "synchronize": True, "batch_size": 3, "grad_accum": 2})
    args = train.parse_args(["--settings", path])
    assert (args.threads, args.unfused, args.synchronize, args.batch_size, args.grad_accum) == (1, True, True, 3, 2)
    args = train.parse_args(["--settings", path, "--no-unfused", "--grad-accum", "1"])
    assert (args.unfused, args.grad_accum, args.threads) == (False, 1, 1)


SMALL = ["--config", "tiny", "--seq-len", "32", "--lr", "3e-3", "--warmup", "1", "--eval-interval", "100",
         "--eval-batches", "1", "--sample-tokens", "0", "--quiet", "--steps", "4"]


def losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as fh:
        return [r["loss"] for r in map(json.loads, fh)]


def test_a_settings_file_trains_as_its_options_do(tmp_path):
    """tune.json through dygrad.train --settings: bitwise the run of the same options given on the command line;
    micro-batches with accumulation train to the whole batch's losses within rounding."""
    path = str(tmp_path / "tune.json")
    tune_settings.save(path, {"threads": 1, "synchronize": True, "batch_size": 2, "grad_accum": 2})
    train.main(SMALL + ["--settings", path, "--out", str(tmp_path / "settings")])
    train.main(SMALL + ["--threads", "1", "--synchronize", "--batch-size", "2", "--grad-accum", "2",
                        "--out", str(tmp_path / "options")])
    train.main(SMALL + ["--batch-size", "4", "--out", str(tmp_path / "whole")])
    train.main(SMALL + ["--batch-size", "2", "--out", str(tmp_path / "half")])
    assert losses(tmp_path / "settings") == losses(tmp_path / "options")
    whole, accumulated = losses(tmp_path / "whole"), losses(tmp_path / "options")
    assert max(abs(a - b) / a for a, b in zip(whole, accumulated)) < table.NUMERICS["rounding"]
    assert losses(tmp_path / "half") != pytest.approx(whole, rel=1e-3)  # other rows: the check can fail
    record = json.loads(open(os.path.join(tmp_path / "options", "metrics.jsonl")).readline())
    assert record["max_allocated_bytes"] > 0 and record["tokens_per_s"] * record["step_time_s"] == pytest.approx(4 * 32)


def test_apply_sets_the_context_and_returns_the_settings(tmp_path, monkeypatch):
    path = str(tmp_path / "tune.json")
    tune_settings.save(path, {"synchronize": True, "unfused": False}, {"DYGRAD_ALLOC_RELEASE_FRACTION": "0.5"})
    saved = dg.get_context()
    monkeypatch.delenv("DYGRAD_ALLOC_RELEASE_FRACTION", raising=False)
    try:
        with pytest.warns(UserWarning, match="DYGRAD_ALLOC_RELEASE_FRACTION=0.5 is read when dygrad loads"):
            got = dg.tune.apply(path)
        assert got == {"synchronize": True, "unfused": False} and dg.get_context().synchronize
    finally:
        dg.set_context(saved)
    monkeypatch.delenv("DYGRAD_TUNE_SETTINGS", raising=False)
    with pytest.raises(ValueError, match="DYGRAD_TUNE_SETTINGS is not set"):
        dg.tune.apply()


def test_run_tunes_a_loop_of_its_own(tmp_path):
    """dg.tune.run in-process: the poor start (synchronize on) is measured A B A B against each candidate;
    every trial has a verdict with its reason, and the settings file it writes loads."""
    def make_step():
        model = dg.nn.Linear(64, 64)
        opt = dg.optim.SGD(model.parameters(), lr=0.1)
        x = dg.randn(32, 64)

        def step():
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.detach()
        return step
    saved = dg.get_context()
    dg.set_context(synchronize=True)
    try:
        out = str(tmp_path / "loop.json")
        result = dg.tune.run(make_step, steps=5, warmup=1, budget="30s", output=out, log=lambda *a: None)
    finally:
        dg.set_context(saved)
    assert result["trials"] and result["trials"][0]["candidate"] in ("synchronize off", "threads: all cores", "jit")
    assert all(t["reason"] for t in result["trials"])
    exact = [t for t in result["trials"] if t["candidate"] == "synchronize off"]
    assert not exact or exact[0]["loss_difference"] == 0.0  # where ops run, not what they compute
    assert "allocator: keep cached segments" in {r["candidate"] for r in result["refused"]}  # read at load
    assert dg.tune.load(out)["source"] == "dg.tune.run"


def test_the_environment_of_a_settings_file_needs_a_fresh_process(monkeypatch, capsys):
    data = {"settings": {}, "environment": {"DYGRAD_ALLOC_RELEASE_FRACTION": "-1"}}
    monkeypatch.delenv("DYGRAD_ALLOC_RELEASE_FRACTION", raising=False)
    tune_settings.run_with_environment(data, "dygrad.train", ["--steps", "1"])  # in-process: said, not applied
    assert "DYGRAD_ALLOC_RELEASE_FRACTION=-1 is read when dygrad loads: not applied" in capsys.readouterr().err
    assert tune_settings.environment_missing(data) == {}  # set for the processes this one starts
    tune_settings.run_with_environment(data, "dygrad.train", None)  # present: returns (no re-execution)


def test_the_search_runs_any_target_and_bounds_a_trial_by_the_baselines_time(tmp_path):
    """search.search with a target of its own (the interface TrainTarget and ScriptTarget implement): the baseline
    may take the budget, every later trial at most 10 times the baseline's wall time (a hung trial costs that)."""
    from dygrad.tune import search

    class Target:
        where, rate_unit, profiles, base_args = "script", "steps/s", False, ["train.py"]
        timeouts = []

        def initial_settings(self):
            return {}

        def settle(self, settings, first):
            return {"threads": os.cpu_count() or 1, "synchronize": True, "deterministic": False}

        def estimate_peak(self, anchor):
            return None

        def run(self, label, settings, environment, out, steps, warmup, timeout_s=None, profile=False):
            self.timeouts.append(timeout_s)
            fast = 0.5 if settings.get("synchronize") is False else 1.0
            r = run([fast] * 3)
            r.wall_s, r.tokens_per_step = 30.0, 1.0
            return r

        def reproduce(self, settings, environment, baseline=None):
            return "python3 train.py"

    target = Target()
    result = search.search([], budget_s=600, scratch=str(tmp_path), target=target, log=lambda *a: None)
    assert target.timeouts[0] == 600 and set(target.timeouts[1:]) == {300.0}
    verdicts = {t["candidate"]: t["kept"] for t in result["trials"]}
    assert verdicts["synchronize off"] and not verdicts["allocator: keep cached segments"]  # 2x faster; the same
    assert result["settings"]["synchronize"] is False and result["rate_unit"] == "steps/s"
    assert "fused ops" in {r["candidate"] for r in result["refused"]}  # a script's refusals
