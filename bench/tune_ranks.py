"""The tuner's ranks-per-machine candidate on one machine (docs/tune.md, "Ranks per machine"): dygrad.train at the
same global batch as N ranks x cores/N threads with --batch-split against one process on all cores, interleaved.

    python3 bench/tune_ranks.py [--config bench] [--ranks 2] [--rounds 5] [--steps 8] [--warmup 3] [-- TRAIN OPTIONS]

Each round runs both configurations once, each a fresh process (the tuner's trial: dygrad.train in a scratch
directory, the ranks under dygrad.distributed.run), alternating which goes first. Prints per round the tokens/s
of each and their ratio, then the median ratio (ranks / one process) with half the range of the rounds' ratios,
the largest relative loss difference between the two (the candidate's numerics: within rounding), both peaks and
the CPU model.
"""
import argparse
import os
import statistics
import sys
import tempfile

from dygrad.profiler.metrics import cpu_description
from dygrad.tune.decide import loss_difference
from dygrad.tune.trial import run_trial


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="bench")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("train", nargs=argparse.REMAINDER, help="-- more dygrad.train options (both configurations)")
    a = p.parse_args()
    extra = a.train[1:] if a.train[:1] == ["--"] else a.train
    cores = os.cpu_count() or 1
    base = ["--config", a.config, *extra]
    configs = {"one process": {"threads": cores},
               f"{a.ranks} ranks": {"ranks": a.ranks, "batch_split": True, "threads": max(1, cores // a.ranks)}}
    names = list(configs)
    runs = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="tune-ranks-") as work:
        for r in range(a.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                run = run_trial(name, base, configs[name], {}, os.path.join(work, f"{r}-{name.replace(' ', '-')}"),
                                a.steps, a.warmup, timeout_s=300)
                if not run.ok:
                    sys.exit(f"{name}: {run.error}")
                runs[name].append(run)
            one, many = runs[names[0]][-1], runs[names[1]][-1]
            print(f"round {r + 1} ({' first, '.join(order)} second): one process {one.tokens_per_s:,.0f} tok/s, "
                  f"{names[1]} {many.tokens_per_s:,.0f} tok/s, ratio {one.median_s / many.median_s:.3f}", flush=True)
    ratios = [a_.median_s / b.median_s for a_, b in zip(runs[names[0]], runs[names[1]])]
    difference = max(loss_difference(runs[names[0]][0], b) for b in runs[names[1]])
    print(f"\n{a.config}, global batch of the config, {cores} cores: {names[1]} x {configs[names[1]]['threads']} "
          f"thread(s) with --batch-split / one process x {cores} threads: median {statistics.median(ratios):.3f}x "
          f"(+-{(max(ratios) - min(ratios)) / 2:.3f}, rounds {', '.join(f'{x:.3f}' for x in ratios)})")
    for name in names:
        tok = statistics.median(r.tokens_per_s for r in runs[name])
        print(f"  {name}: median {tok:,.0f} tok/s, peak {max(r.peak_bytes for r in runs[name]) / 2**20:.1f} MiB"
              + (" (the ranks' together)" if "ranks" in configs[name] else ""))
    print(f"  losses: largest relative difference {difference:.2e}; CPU {cpu_description()}")


if __name__ == "__main__":
    main()
