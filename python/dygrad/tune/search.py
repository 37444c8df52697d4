"""The greedy search (docs/tune.md): measure the baseline, profile it, ask the advisor, then try the candidates in
order of estimated gain (memory goals first while the incumbent exceeds the limit), each A B A B against the
incumbent in fresh processes, keeping what is faster beyond the spread, fits and trains to the same losses, until
none is left or the budget would be overrun."""
import json
import os
import time

from . import candidates as table
from .decide import MAX_EXTRA_ROUNDS, decide
from .targets import STRIPPED, TrainTarget, base_settings, peak_estimator, reproduce_command  # noqa: F401

TIMEOUT_FACTOR = 10  # a trial is stopped after this many times the baseline's wall time (at least a minute)


def parse_duration(text):
    """'10m', '60s', '1h', '90' (seconds) -> seconds."""
    text = str(text).strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], None)
    try:
        return float(text[:-1]) * scale if scale else float(text)
    except ValueError:
        raise ValueError(f"[dygrad.tune] --budget {text!r}: expected seconds or a number with s, m or h") from None


def _fmt_time(s):
    return f"{int(s // 60)}m{int(s % 60):02d}s"


def search(base_args, *, budget_s, scratch, steps=8, warmup=3, rounds=2, memory_limit=0,
           allow_nondeterminism=False, allow_bf16=False, log=print, target=None):
    """Runs the search; returns the result dict that tune.json, trials.json and the report are written from.
    `target`: what is tuned (targets.py); default dygrad.train with the options `base_args`."""
    t0 = time.perf_counter()
    target = target or TrainTarget(base_args)
    settings = target.initial_settings()
    environment = {}
    counter = [0]
    unit = target.rate_unit

    baseline_wall = [None]  # after the baseline, a trial 10 times as long is stopped (a hung process, ranks that
    # never leave: docs/distributed.md) rather than let it eat the budget; an early stop needs only 1.5x

    def trial(label, s, env, profile=False):
        counter[0] += 1
        out = os.path.join(scratch, f"trial-{counter[0]:03d}")
        timeout = max(60.0, budget_s)
        if baseline_wall[0] is not None:
            timeout = min(timeout, max(60.0, TIMEOUT_FACTOR * baseline_wall[0]))
        # a profiled run: 2 steps, then 3 profiled (trial.train_command), then 1 (the report is written before it)
        return target.run(label, s, env, out, 6 if profile else steps, 2 if profile else warmup,
                          timeout_s=timeout, profile=profile)

    def elapsed():
        return time.perf_counter() - t0

    log(f"tune: baseline: {target.reproduce(settings, environment, settings)}")
    first = trial("baseline", settings, environment)
    if not first.ok:
        raise RuntimeError(f"[dygrad.tune] the baseline run failed: {first.error}")
    settings = target.settle(settings, first)
    baseline_wall[0] = first.wall_s
    before = None
    if target.profiles:
        before = _read_summary(trial("baseline (profiled)", settings, environment, profile=True))
    advice = before.get("advice", []) if before else []
    cost = max(first.wall_s, 1e-3)
    log(f"tune: baseline {first.tokens_per_s:,.{0 if unit == 'tok/s' else 2}f} {unit} (median step "
        f"{first.median_s * 1000:.1f} ms), peak {first.peak_bytes / 2**20:.1f} MiB, {cost:.1f} s a trial; advice: "
        + (", ".join(a["rule"] for a in advice) or ("none" if target.profiles else "not profiled (a script)")))
    from dygrad.profiler.metrics import cpu_features
    anchor = [settings, first.peak_bytes]
    ctx = table.Context(settings=dict(settings), environment=environment, advice=advice,
                        allow_nondeterminism=allow_nondeterminism, allow_bf16=allow_bf16, memory_limit=memory_limit,
                        incumbent_peak=first.peak_bytes, cpu=cpu_features(), estimate_peak=target.estimate_peak(anchor))
    trials, refused = [], {}
    verdicts = {}  # (candidate, the incumbent it was measured against) -> its verdicts

    fixed = set()  # candidates whose setting the script sets itself: no incumbent can change that

    def measured(limit):
        """The candidates not to try against this incumbent: tried `limit` times, or refused for more than time."""
        return fixed | {name for (name, against), v in verdicts.items()
                        if against == incumbent and (len(v) >= limit or not v[-1].on_time)}
    stop = "no candidate left"
    while True:
        # a candidate not kept is tried again once the incumbent has changed (the changes interact: more threads
        # lost to the inline step of synchronize mode and may win once it is off); when every candidate has been
        # measured against this incumbent, one not kept for its time alone gets a second measurement (on a loaded
        # machine one comparison can go the wrong way)
        incumbent = json.dumps([ctx.settings, environment], sort_keys=True)
        todo, refusals = table.plan(ctx, where=target.where, tried=measured(1))
        if not todo:
            todo, _ = table.plan(ctx, where=target.where, tried=measured(2))
        for c, reason in refusals:
            refused.setdefault(c.name, {"candidate": c.name, "rules": list(c.rules), "reason": reason})
        if not todo:
            break
        needed = 2 * rounds * cost
        if elapsed() + needed > budget_s:
            stop = (f"budget: {_fmt_time(budget_s - elapsed())} left, a comparison takes ~{_fmt_time(needed)}; "
                    f"still to measure: {', '.join(c.name for c, _, _ in todo)}")
            break
        c, changes, gain = todo[0]
        env = {**environment, **changes.get("environment", {})}
        cand = {**ctx.settings, **{k: v for k, v in changes.items() if k != "environment"}}
        inc_runs, cand_runs, verdict = [], [], None
        i = 0
        while True:  # A B A B, and up to MAX_EXTRA_ROUNDS more pairs while inconclusive
            inc_runs.append(trial(f"incumbent for {c.name}", ctx.settings, environment))
            cand_runs.append(trial(c.name, cand, env))
            i += 1
            verdict = decide(inc_runs, cand_runs, numerics=c.numerics, memory_limit=memory_limit, goal=c.goal,
                             final=i >= rounds)
            if i < rounds and not verdict.reason:
                continue
            if not (verdict.inconclusive and i < rounds + MAX_EXTRA_ROUNDS and elapsed() + 2 * cost <= budget_s):
                break
        verdicts.setdefault((c.name, incumbent), []).append(verdict)
        if any(getattr(r, "overridden", None) for r in cand_runs):
            fixed.add(c.name)
        record = {"index": len(trials) + 1, "candidate": c.name, "rules": list(c.rules),
                  "advised_by": [a["rule"] for a in ctx.fired(*c.rules)], "why": c.why, "changes": changes,
                  "numerics": c.numerics, "goal": c.goal, "estimated_gain": gain, "kept": verdict.kept,
                  "reason": verdict.reason, "speedup": verdict.speedup, "spread": verdict.spread,
                  "loss_difference": verdict.loss_difference, "peak_bytes": verdict.peak_bytes,
                  "tokens_per_s": [r.tokens_per_s for r in cand_runs],
                  "incumbent_tokens_per_s": [r.tokens_per_s for r in inc_runs],
                  "mfu": max((r.mfu for r in cand_runs), default=0.0),
                  "incumbent_mfu": max((r.mfu for r in inc_runs), default=0.0),
                  "incumbent_peak_bytes": max((r.peak_bytes for r in inc_runs), default=0),
                  "rounds": len(cand_runs), "settings": cand, "environment": env,
                  "reproduce": target.reproduce(cand, env, settings),
                  "elapsed_s": elapsed()}
        trials.append(record)
        tok = max(record["tokens_per_s"]) if record["tokens_per_s"] else 0
        log(f"[{record['index']} {_fmt_time(elapsed())}] {c.name} ({', '.join(f'{k}={v}' for k, v in changes.items())}):"
            f" {tok:,.{0 if unit == 'tok/s' else 2}f} {unit}, {verdict.speedup:.3f}x, peak "
            f"{verdict.peak_bytes / 2**20:.1f} MiB, "
            f"losses {verdict.loss_difference:.1e}: {'KEPT' if verdict.kept else 'not kept'} - {verdict.reason}")
        if verdict.kept:
            ctx.settings, environment = cand, env
            ctx.environment = environment
            ctx.incumbent_peak = verdict.peak_bytes
            anchor[:] = [cand, verdict.peak_bytes]
            cost = max(sum(r.wall_s for r in cand_runs) / len(cand_runs), 1e-3)
    after = None
    if (ctx.settings != settings or environment) and target.profiles:
        if elapsed() + cost * 1.5 <= budget_s:
            after = _read_summary(trial("result (profiled)", ctx.settings, environment, profile=True))
        else:
            log("tune: no time left in the budget to profile the result: the report has no after breakdown")
    result = {"target": target.where, "rate_unit": unit, "base_args": target.base_args,
              "baseline": settings, "settings": ctx.settings, "environment": environment,
              "baseline_tokens_per_s": first.tokens_per_s, "baseline_peak_bytes": first.peak_bytes,
              "memory_limit": memory_limit, "budget_s": budget_s, "elapsed_s": elapsed(), "stopped": stop,
              "trials": trials, "refused": list(refused.values()), "advice": advice, "before": before,
              "after": after, "steps": steps, "warmup": warmup, "rounds": rounds,
              "baseline_reproduce": target.reproduce(settings, {}, settings),
              "reproduce": target.reproduce(ctx.settings, environment, settings),
              "cpu": (before or {}).get("flops", {}).get("cpu", {}).get("model", "")}
    log(f"tune: stopped ({stop}) after {_fmt_time(elapsed())}; {sum(t['kept'] for t in trials)} of {len(trials)} "
        f"changes kept")
    for r in result["refused"]:
        log(f"tune: refused {r['candidate']}: {r['reason']}")
    return result


def _read_summary(run):
    path = os.path.join(run.out, "profile", "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        summary = json.load(f)
    return {k: summary.get(k) for k in ("breakdown", "advice", "throughput", "flops", "steps")} | {
        "memory_peak": (summary.get("memory") or {}).get("peak_allocated")}
