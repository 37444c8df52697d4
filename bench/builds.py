"""Two builds of dygrad side by side: the training step (fused and composed) and the per-op host cost.

    python3 bench/builds.py --old /path/to/old/python --new /path/to/new/python [--rounds 5] [--steps 5]

Each interpreter must import its own build of dygrad (a venv with that build installed). Every measurement is a
fresh process, alternating old and new for --rounds rounds: training runs `bench/train.py --worker` (the tokens/s
of its median step), dispatch runs `bench/dispatch.py` (dygrad's microseconds per op of each row; torch's column
is printed too as a check that the machine's load did not move between the two). The figure is the median over
rounds; the ratio new/old (tokens/s: > 1 is faster; microseconds: < 1 is faster), with the range over rounds.
"""
import argparse
import os
import re
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout


def train(python, cfg, steps, fused):
    out = run([python, os.path.join(HERE, "train.py"), "--worker", "fused" if fused else "unfused",
               "--config", cfg, "--steps", str(steps)])
    return float(re.search(r"tokens_per_s (\S+)", out).group(1))


def dispatch(python, calls, repeats):
    rows = {}
    for line in run([python, os.path.join(HERE, "dispatch.py"), "--calls", str(calls), "--repeats", str(repeats)]).splitlines():
        m = re.match(r"(.{58}) +([\d.]+) +([\d.]+) +([\d.]+)$", line)
        if m:
            rows[m.group(1).strip()] = (float(m.group(2)), float(m.group(3)))
    return rows


def summary(name, old, new, higher_is_better):
    ratios = [n / o for o, n in zip(old, new)]
    om, nm = statistics.median(old), statistics.median(new)
    print(f"{name:58s} old {om:10.3f} new {nm:10.3f} new/old {nm / om:5.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})"
          f"{'' if higher_is_better else '  [us: lower is better]'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="python of the old build")
    ap.add_argument("--new", required=True, help="python of the new build")
    ap.add_argument("--config", default="bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--only", default="train,dispatch")
    args = ap.parse_args()
    parts = args.only.split(",")
    results = {}
    for r in range(args.rounds):
        order = [("old", args.old), ("new", args.new)] if r % 2 == 0 else [("new", args.new), ("old", args.old)]
        for label, python in order:
            if "train" in parts:
                for fused in (True, False):
                    key = f"train {args.config} {'fused' if fused else 'unfused'} tokens/s"
                    results.setdefault(key, {}).setdefault(label, []).append(train(python, args.config, args.steps, fused))
            if "dispatch" in parts:
                for row, (dg_us, torch_us) in dispatch(python, args.calls, args.repeats).items():
                    results.setdefault(f"dispatch {row}", {}).setdefault(label, []).append(dg_us)
                    results.setdefault(f"torch    {row}", {}).setdefault(label, []).append(torch_us)
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    for key, by in results.items():
        if key.startswith("torch") or len(by) < 2:  # rows only one build has (ops the old one lacks)
            continue
        summary(key, by["old"], by["new"], key.startswith("train"))
    if "dispatch" in parts:
        torch_ratios = [statistics.median(by["new"]) / statistics.median(by["old"])
                        for key, by in results.items() if key.startswith("torch") and len(by) == 2]
        print(f"torch's own rows, new-run/old-run medians: {min(torch_ratios):.3f}-{max(torch_ratios):.3f} "
              "(1.0 when the load was the same)")


if __name__ == "__main__":
    main()
