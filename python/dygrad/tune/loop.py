"""dg.tune.run: the tuner for a user's own loop, in-process (docs/tune.md, "Your own loop").

A user callable cannot be re-run in a fresh process, so each run happens in this process: `make_step()` is called
afresh after dg.manual_seed(seed) (a fresh model and optimizer: every run starts from the same state, so losses
compare), and the step it returns is timed for `steps` steps. Runs alternate A B A B as the CLI's processes do,
and the same decision (decide.py) keeps a change. What it varies: threads, synchronize, deterministic (with
consent), dygrad.jit of the step, bf16 autocast (with consent, on a CPU with bf16 instructions). Allocator
settings are read when dygrad loads: not variable in-process (the refusal says so)."""
import time

import dygrad as dg

from . import candidates as table
from .decide import MAX_EXTRA_ROUNDS, decide
from .search import parse_duration
from .settings import save
from .trial import Run

LOOP_SETTINGS = ("threads", "synchronize", "deterministic", "jit", "dtype")


def _current():
    c = dg.get_context()
    return {"threads": c.num_threads, "synchronize": c.synchronize, "deterministic": c.deterministic,
            "jit": False, "dtype": "fp32"}


def measure(make_step, settings, *, steps, warmup, seed, label=""):
    """One in-process run of `steps` steps under `settings`; the context is restored afterwards."""
    saved = dg.get_context()
    run = Run(label=label, command=["dg.tune.run", label])
    try:
        if settings.get("threads"):
            dg.set_context(num_threads=settings["threads"])
        dg.set_context(synchronize=settings["synchronize"], deterministic=settings["deterministic"])
        dg.manual_seed(seed)
        step = make_step()
        autocast = dg.autocast("cpu", dtype=dg.bfloat16, enabled=settings.get("dtype") == "bf16")

        def one_step():
            with autocast:
                return step()
        run_step = dg.jit(one_step) if settings.get("jit") else one_step
        dg.memory.reset_peak_memory_stats()
        for i in range(steps):
            begin = time.perf_counter()
            loss = run_step()
            value = float(loss)  # waits for the step: its time is the stream's too
            if i >= warmup:
                run.step_times.append(time.perf_counter() - begin)
                run.losses.append(value)
                run.steps.append(i + 1)
        run.peak_bytes = dg.memory.max_memory_allocated()
    except Exception as e:  # noqa: BLE001 - a failed candidate is reported, not raised
        run.returncode, run.error = 1, f"{type(e).__name__}: {e}"
    finally:
        dg.set_context(saved)
    return run


def run(make_step, *, steps=6, warmup=2, rounds=2, budget="60s", memory_limit=0, allow_nondeterminism=False,
        allow_bf16=False, seed=0, output=None, log=print):
    """Tunes a loop: `make_step()` builds the model and optimizer and returns `step()`, one training step that
    returns its loss. Returns {"settings", "trials", "refused", "baseline_s", "final_s"}; writes them to `output`
    (a settings file dg.tune.apply loads) when given."""
    budget_s = parse_duration(budget)
    t0 = time.perf_counter()
    settings = _current()
    from ..profiler.metrics import cpu_features
    first = measure(make_step, settings, steps=steps, warmup=warmup, seed=seed, label="baseline")
    if not first.ok:
        raise RuntimeError(f"[dygrad.tune.run] the baseline failed: {first.error}")
    advice = _advice(make_step, settings, seed)
    ctx = table.Context(settings=dict(settings), advice=advice, allow_nondeterminism=allow_nondeterminism,
                        allow_bf16=allow_bf16, memory_limit=memory_limit, incumbent_peak=first.peak_bytes,
                        cpu=cpu_features())
    cost = sum(first.step_times) / len(first.step_times) * steps * 1.2 + 0.05
    trials, refused, tried = [], {}, set()
    while True:
        todo, refusals = table.plan(ctx, where="loop", tried=tried)
        for c, reason in refusals:
            refused.setdefault(c.name, reason)
        todo = [t for t in todo if not _environment(t, refused)]
        if not todo or time.perf_counter() - t0 + 2 * rounds * cost > budget_s:
            break
        c, changes, gain = todo[0]
        tried.add(c.name)
        cand = {**ctx.settings, **changes}
        inc_runs, cand_runs = [], []
        i = 0
        while True:  # A B A B, and up to MAX_EXTRA_ROUNDS more pairs while inconclusive (as the CLI)
            inc_runs.append(measure(make_step, ctx.settings, steps=steps, warmup=warmup, seed=seed, label="A"))
            cand_runs.append(measure(make_step, cand, steps=steps, warmup=warmup, seed=seed, label=c.name))
            i += 1
            verdict = decide(inc_runs, cand_runs, numerics=c.numerics, memory_limit=memory_limit, goal=c.goal,
                             final=i >= rounds)
            if i < rounds and not verdict.reason:
                continue
            if not (verdict.inconclusive and i < rounds + MAX_EXTRA_ROUNDS
                    and time.perf_counter() - t0 + 2 * cost <= budget_s):
                break
        trials.append({"candidate": c.name, "changes": changes, "kept": verdict.kept, "reason": verdict.reason,
                       "speedup": verdict.speedup, "spread": verdict.spread,
                       "loss_difference": verdict.loss_difference, "peak_bytes": verdict.peak_bytes})
        log(f"[{len(trials)}] {c.name} {changes}: {verdict.speedup:.3f}x: "
            f"{'KEPT' if verdict.kept else 'not kept'} - {verdict.reason}")
        if verdict.kept:
            ctx.settings, ctx.incumbent_peak = cand, verdict.peak_bytes
    result = {"settings": ctx.settings, "trials": trials,
              "refused": [{"candidate": k, "reason": v} for k, v in refused.items()],
              "baseline_s": first.median_s}
    if output:
        file_settings = {k: v for k, v in ctx.settings.items() if k in ("threads", "synchronize", "deterministic",
                                                                     "jit", "dtype")}
        save(output, file_settings, {}, kept=[t["candidate"] for t in trials if t["kept"]],
             refused=result["refused"], source="dg.tune.run")
    return result


def _environment(todo_item, refused):
    c, changes, _ = todo_item
    if "environment" in changes:
        refused.setdefault(c.name, "allocator settings are read when dygrad loads: an in-process trial cannot "
                                   "vary them (the CLI's fresh processes can)")
        return True
    return False


def _advice(make_step, settings, seed):
    """The advisor's findings on two profiled steps of the baseline."""
    from ..profiler.summary import build_summary
    saved = dg.get_context()
    try:
        dg.set_context(synchronize=settings["synchronize"], deterministic=settings["deterministic"])
        dg.manual_seed(seed)
        step = make_step()
        float(step())
        with dg.profiler.profile() as prof:
            for _ in range(2):
                float(step())
                prof.step()
        return build_summary(prof.result, peak=1.0).get("advice", [])
    except Exception:  # noqa: BLE001 - no advice: candidates without advice rules are still tried
        return []
    finally:
        dg.set_context(saved)
