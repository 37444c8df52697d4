"""The greedy search (docs/tune.md): measure the baseline, profile it, ask the advisor, then try the candidates in
order of estimated gain (memory goals first while the incumbent exceeds the limit), each A B A B against the
incumbent in fresh processes, keeping what is faster beyond the spread, fits and trains to the same losses, until
none is left or the budget would be overrun."""
import json
import os
import shlex
import time

from . import candidates as table
from .decide import MAX_EXTRA_ROUNDS, decide
from .settings import SETTINGS, train_flags
from .trial import run_trial

STRIPPED = ("--resume", "--profile")  # the trials start fresh; the tuner profiles the runs it chooses


def parse_duration(text):
    """'10m', '60s', '1h', '90' (seconds) -> seconds."""
    text = str(text).strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], None)
    try:
        return float(text[:-1]) * scale if scale else float(text)
    except ValueError:
        raise ValueError(f"[dygrad.tune] --budget {text!r}: expected seconds or a number with s, m or h") from None


def base_settings(base_args):
    """The user's command's settings (dygrad.train's parse of it), the micro-batch resolved from the config."""
    from dygrad import train
    from dygrad.models import llama
    args = train.parse_args(list(base_args))
    settings = {name: getattr(args, name) for name in SETTINGS}
    settings["batch_size"] = args.batch_size or llama.CONFIGS[args.config].batch_size
    return settings, args


def peak_estimator(args, anchor):
    """settings -> the step's estimated peak: dg.memory.estimate's difference from the incumbent's estimate, added
    to the incumbent's measured peak (what the dry run cannot see is common to both). `anchor`: [settings, peak]."""
    import dygrad as dg
    from dygrad.models import llama
    from dataclasses import replace

    def dry_run(settings):
        cfg = llama.CONFIGS[args.config]
        seq = args.seq_len or cfg.seq_len
        model = llama.Llama(replace(cfg, seq_len=seq), fused=not settings.get("unfused"))
        x = dg.zeros((settings["batch_size"], seq), dtype=dg.int64)
        opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
        return dg.memory.estimate(model, (x, x), optimizer=opt, steps=2).peak

    def estimate(settings):
        try:
            return anchor[1] + dry_run(settings) - dry_run(anchor[0])
        except Exception:  # noqa: BLE001 - no estimate: the trial measures it
            return None
    return estimate


def reproduce_command(base_args, settings, environment, baseline=None):
    """The command that trains under `settings`: the user's, then the options of the settings that differ from
    `baseline` (all of them without one)."""
    env = [f"{k}={v}" for k, v in sorted(environment.items())]
    changed = {k: v for k, v in settings.items() if baseline is None or baseline.get(k) != v}
    return " ".join(env + ["python3", "-m", "dygrad.train"] + [shlex.quote(a) for a in base_args]
                    + [shlex.quote(f) for f in train_flags(changed)])


def _fmt_time(s):
    return f"{int(s // 60)}m{int(s % 60):02d}s"


def search(base_args, *, budget_s, scratch, steps=8, warmup=3, rounds=2, memory_limit=0,
           allow_nondeterminism=False, allow_bf16=False, log=print):
    """Runs the search; returns the result dict that tune.json, trials.json and the report are written from."""
    t0 = time.perf_counter()
    base_args = [a for a in base_args if a not in STRIPPED]
    settings, args = base_settings(base_args)
    environment = {}
    counter = [0]

    def trial(label, s, env, profile=False):
        counter[0] += 1
        out = os.path.join(scratch, f"trial-{counter[0]:03d}")
        # a profiled run: 2 steps, then 3 profiled (trial.train_command), then 1 (the report is written before it)
        return run_trial(label, base_args, s, env, out, 6 if profile else steps, 2 if profile else warmup,
                         timeout_s=max(60.0, budget_s), profile=profile)

    def elapsed():
        return time.perf_counter() - t0

    log(f"tune: baseline: {reproduce_command(base_args, settings, environment, settings)}")
    first = trial("baseline", settings, environment)
    if not first.ok:
        raise RuntimeError(f"[dygrad.tune] the baseline run failed: {first.error}")
    profiled = trial("baseline (profiled)", settings, environment, profile=True)
    before = _read_summary(profiled)
    advice = before.get("advice", []) if before else []
    cost = max(first.wall_s, 1e-3)
    log(f"tune: baseline {first.tokens_per_s:,.0f} tok/s (median step {first.median_s * 1000:.1f} ms), peak "
        f"{first.peak_bytes / 2**20:.1f} MiB, {cost:.1f} s a trial; advice: "
        + (", ".join(a["rule"] for a in advice) or "none"))
    from dygrad.profiler.metrics import cpu_features
    anchor = [settings, first.peak_bytes]
    ctx = table.Context(settings=dict(settings), environment=environment, advice=advice,
                        allow_nondeterminism=allow_nondeterminism, allow_bf16=allow_bf16, memory_limit=memory_limit,
                        incumbent_peak=first.peak_bytes, cpu=cpu_features(), estimate_peak=peak_estimator(args, anchor))
    trials, refused = [], {}
    verdicts = {}  # (candidate, the incumbent it was measured against) -> its verdicts

    def measured(limit):
        """The candidates not to try against this incumbent: tried `limit` times, or refused for more than time."""
        return {name for (name, against), v in verdicts.items()
                if against == incumbent and (len(v) >= limit or not v[-1].on_time)}
    stop = "no candidate left"
    while True:
        # a candidate not kept is tried again once the incumbent has changed (the changes interact: more threads
        # lost to the inline step of synchronize mode and may win once it is off); when every candidate has been
        # measured against this incumbent, one not kept for its time alone gets a second measurement (on a loaded
        # machine one comparison can go the wrong way)
        incumbent = json.dumps([ctx.settings, environment], sort_keys=True)
        todo, refusals = table.plan(ctx, tried=measured(1))
        if not todo:
            todo, _ = table.plan(ctx, tried=measured(2))
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
                  "reproduce": reproduce_command(base_args, cand, env, settings),
                  "elapsed_s": elapsed()}
        trials.append(record)
        tok = max(record["tokens_per_s"]) if record["tokens_per_s"] else 0
        log(f"[{record['index']} {_fmt_time(elapsed())}] {c.name} ({', '.join(f'{k}={v}' for k, v in changes.items())}):"
            f" {tok:,.0f} tok/s, {verdict.speedup:.3f}x, peak {verdict.peak_bytes / 2**20:.1f} MiB, "
            f"losses {verdict.loss_difference:.1e}: {'KEPT' if verdict.kept else 'not kept'} - {verdict.reason}")
        if verdict.kept:
            ctx.settings, environment = cand, env
            ctx.environment = environment
            ctx.incumbent_peak = verdict.peak_bytes
            anchor[:] = [cand, verdict.peak_bytes]
            cost = max(sum(r.wall_s for r in cand_runs) / len(cand_runs), 1e-3)
    after = None
    if ctx.settings != settings or environment:
        if elapsed() + cost * 1.5 <= budget_s:
            after = _read_summary(trial("result (profiled)", ctx.settings, environment, profile=True))
        else:
            log("tune: no time left in the budget to profile the result: the report has no after breakdown")
    result = {"base_args": base_args, "baseline": settings, "settings": ctx.settings, "environment": environment,
              "baseline_tokens_per_s": first.tokens_per_s, "baseline_peak_bytes": first.peak_bytes,
              "memory_limit": memory_limit, "budget_s": budget_s, "elapsed_s": elapsed(), "stopped": stop,
              "trials": trials, "refused": list(refused.values()), "advice": advice, "before": before,
              "after": after, "steps": steps, "warmup": warmup, "rounds": rounds,
              "baseline_reproduce": reproduce_command(base_args, settings, {}, settings),
              "reproduce": reproduce_command(base_args, ctx.settings, environment, settings),
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
