"""The auto-tuner against hand tuning (issue 39's Done-when; docs/tune.md), on one machine in one run.

    python3 bench/tune.py [--config bench] [--budget 10m] [--rounds 5] [--steps 10] [--skip-default] [--skip-poor]

1. From a deliberately poor start (--threads 1 --synchronize --deterministic --unfused --batch-size 2
   --grad-accum 4: the default's global batch) python3 -m dygrad.tune runs with --budget (its own A B A B trials).
2. The tuner's result, the best hand-written configurations (the default fused eager step on all cores, and the
   same under --jit) are re-measured interleaved, --rounds rounds of fresh processes: median
   tokens/s per configuration and the ratio of the tuner's to the best hand-written one's.
3. Unless --skip-default: the tuner from the default configuration, and its result re-measured interleaved against
   the default (never slower: the ratio at least 0.98).
Prints the ratios and the CPU model; bench/RESULTS.md records them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from dygrad.profiler.metrics import cpu_description
from dygrad.tune.settings import train_flags
from dygrad.tune.trial import run_trial

POOR = ["--threads", "1", "--synchronize", "--deterministic", "--unfused", "--batch-size", "2", "--grad-accum", "4"]


def tune(base, budget, work, name):
    out = os.path.join(work, name)
    os.makedirs(out, exist_ok=True)
    cmd = [sys.executable, "-m", "dygrad.tune", "--budget", budget, "--output", os.path.join(out, "tune.json"),
           "--report", os.path.join(out, "report.html"), "--", "-m", "dygrad.train", *base]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    with open(os.path.join(out, "tune.json")) as f:
        return json.load(f)


def interleaved(configs, rounds, steps, work):
    """{name: [tokens/s of each round]}: each round runs every configuration once, in a fresh process."""
    got = {name: [] for name in configs}
    for r in range(rounds):
        for name, (args, env) in configs.items():
            run = run_trial(name, args, {}, env, os.path.join(work, f"{name}-{r}"), steps, 3)
            if not run.ok:
                raise RuntimeError(f"{name}: {run.error}")
            got[name].append(run.tokens_per_s)
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:,.0f}" for n, v in got.items()), flush=True)
    return got


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="bench")
    p.add_argument("--budget", default="10m")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--skip-default", action="store_true")
    p.add_argument("--skip-poor", action="store_true")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="dygrad-tune-bench-")
    base = ["--config", a.config]
    print(f"CPU: {cpu_description()}")
    if not a.skip_poor:
        poor = tune(base + POOR, a.budget, work, "poor")
        tuned = (base + POOR + train_flags(poor["settings"]), poor["environment"])
        print(f"tuned from the poor start: kept {poor['kept']}; {poor['command']}")
        configs = {"tuned": tuned, "hand": (base, {}), "hand-jit": (base + ["--jit"], {})}
        got = interleaved(configs, a.rounds, a.steps, work)
        med = {n: statistics.median(v) for n, v in got.items()}
        best = max(("hand", "hand-jit"), key=med.get)
        print(f"medians tok/s: " + ", ".join(f"{n} {v:,.0f}" for n, v in med.items()))
        print(f"tuned / best hand-written ({best}): {med['tuned'] / med[best]:.3f}x; the poor start's own baseline "
              f"(the tuner's measure): {poor['baseline_tokens_per_s']:,.0f} tok/s")
    if not a.skip_default:
        default = tune(base, a.budget, work, "default")
        got = interleaved({"default": (base, {}), "tuned-default": (base + train_flags(default["settings"]),
                                                                   default["environment"])}, a.rounds, a.steps, work)
        ratio = statistics.median(got["tuned-default"]) / statistics.median(got["default"])
        print(f"from the default: kept {default['kept']}; tuned / default {ratio:.3f}x")


if __name__ == "__main__":
    main()
