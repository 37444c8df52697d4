"""python3 -m dygrad.tune [options] -- -m dygrad.train [its options] (or -- SCRIPT.py ARGS, -- -m MODULE ARGS: a
training script of your own): tunes a training command's settings (docs/tune.md); writes tune.json (load it with
`dygrad.train --settings tune.json`, `python3 -m dygrad.tune.script --settings tune.json -- SCRIPT.py` or
dg.tune.apply) and an HTML report. Trials run in a scratch directory: the command's own outputs are never written."""
import argparse
import json
import os
import shutil
import signal
import sys
import tempfile

from . import report, settings as settings_file
from .search import parse_duration, search
from .targets import ScriptTarget, TrainTarget
from .trial import kill_all

TRAIN_MODULE = "dygrad.train"


def split_command(command):
    """("train", dygrad.train's options) or ("script", [SCRIPT ARGS] or [-m MODULE ARGS]) of the training command
    given after `--` (a leading python interpreter is dropped)."""
    if command and command[0] == "--":
        command = command[1:]
    i = 0
    if command and os.path.basename(command[0]).startswith("python"):
        i = 1
    if command[i:i + 2] == ["-m", TRAIN_MODULE]:
        return "train", command[i + 2:]
    if not command[i:] or command[i:] == ["-m"]:
        raise SystemExit(f"[dygrad.tune] expected a training command after `--`: `-m {TRAIN_MODULE} [options]`, "
                         f"`SCRIPT.py [args]` or `-m MODULE [args]`; got {' '.join(command) or 'nothing'}")
    if command[i].startswith("-") and command[i] != "-m":
        raise SystemExit(f"[dygrad.tune] {command[i]}: the interpreter's options are not supported in the training "
                         "command; give `SCRIPT.py [args]` or `-m MODULE [args]`")
    return "script", command[i:]


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m dygrad.tune", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--budget", default="10m", help="wall-clock time for the whole search (s, m or h)")
    p.add_argument("--memory-limit", default=None, help="the training steps' peak allocated bytes must fit this "
                   "(K/M/G/KiB/MiB/GiB); a baseline above it is made to fit first")
    p.add_argument("--allow-nondeterminism", action="store_true", help="may turn deterministic mode off")
    p.add_argument("--allow-bf16", action="store_true", help="may train under bf16 autocast (losses within 3e-2)")
    p.add_argument("--steps", type=int, default=8, help="steps per trial process")
    p.add_argument("--warmup", type=int, default=3, help="first steps of each trial not measured")
    p.add_argument("--rounds", type=int, default=2, help="A B rounds per candidate (2: A B A B)")
    p.add_argument("--output", default="tune.json", help="the settings file")
    p.add_argument("--report", default="tune-report.html", help="the HTML report (trials.json beside it)")
    p.add_argument("--scratch", default=None, help="where trials run (default: a temporary directory, removed)")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- -m dygrad.train [options], or -- SCRIPT.py [args], or -- -m MODULE [args]")
    args = p.parse_args(argv)
    if args.steps <= args.warmup:
        p.error(f"--steps {args.steps} must exceed --warmup {args.warmup}")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    args.target, args.train_args = split_command(args.command)
    if args.target == "script" and args.warmup < 1:
        p.error("--warmup must be at least 1 for a script (its first step has no timing mark before it)")
    return args


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    args = parse_args(argv)
    limit = 0
    if args.memory_limit:
        from dygrad import _C
        limit = _C._parse_size(args.memory_limit)
    scratch = args.scratch or tempfile.mkdtemp(prefix="dygrad-tune-")
    os.makedirs(scratch, exist_ok=True)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        if args.target == "train":
            target = TrainTarget(args.train_args)
        else:
            target = ScriptTarget(args.train_args, scratch=scratch)
        result = search(args.train_args, budget_s=parse_duration(args.budget), scratch=scratch, steps=args.steps,
                        warmup=args.warmup, rounds=args.rounds, memory_limit=limit,
                        allow_nondeterminism=args.allow_nondeterminism, allow_bf16=args.allow_bf16, target=target)
    except KeyboardInterrupt:
        kill_all()
        print("\ntune: interrupted; every trial process was stopped, nothing written", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    settings_file.save(args.output, result["settings"], result["environment"], target=result["target"],
                       baseline=result["baseline"], command=result["reproduce"],
                       baseline_tokens_per_s=result["baseline_tokens_per_s"],
                       kept=[t["candidate"] for t in result["trials"] if t["kept"]],
                       refused=result["refused"], memory_limit=result["memory_limit"])
    with open(args.report, "w") as f:
        f.write(report.render(result))
    with open(os.path.splitext(args.report)[0] + ".trials.json", "w") as f:
        json.dump(result, f, indent=1)
    print(f"tune: settings {args.output}; report {args.report}\ntune: run it with {result['reproduce']}\n"
          f"       or {target.with_file(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
