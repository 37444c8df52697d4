"""What the CLI tunes (docs/tune.md): dygrad.train's command (TrainTarget: its options are the settings) or a
training script of the user's own (ScriptTarget: run unchanged by `python3 -m dygrad.tune.script`, only the settings
that can be applied from outside it). Each knows its baseline settings, how one trial runs and how to reproduce a
result; the search (search.py) is the same for both."""
import json
import os
import shlex
import shutil
import sys

from . import candidates as table
from .scratch import link_entries
from .settings import SETTINGS, train_flags
from .trial import Run, launch_prefix, run_process, run_trial

STRIPPED = ("--resume", "--profile")  # the trials start fresh; the tuner profiles the runs it chooses


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

    def dry_run(settings):  # ranks on one machine: each holds the model and its share of the batch
        cfg = llama.CONFIGS[args.config]
        seq = args.seq_len or cfg.seq_len
        ranks = table.ranks_of(settings) if settings.get("batch_split") else 1
        model = llama.Llama(replace(cfg, seq_len=seq), fused=not settings.get("unfused"))
        x = dg.zeros((settings["batch_size"] // ranks, seq), dtype=dg.int64)
        opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
        return table.ranks_of(settings) * dg.memory.estimate(model, (x, x), optimizer=opt, steps=2).peak

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
    return " ".join(env + launch_prefix(settings, python="python3") + [shlex.quote(a) for a in base_args]
                    + [shlex.quote(f) for f in train_flags(changed)])


class TrainTarget:
    """`-- -m dygrad.train [options]`: the options are the settings; trials are dygrad.train processes."""
    where = "train"
    rate_unit = "tok/s"
    profiles = True

    def __init__(self, train_args):
        self.base_args = [a for a in train_args if a not in STRIPPED]
        self.settings, self.args = base_settings(self.base_args)

    def initial_settings(self):
        return dict(self.settings)

    def settle(self, settings, first):
        return settings

    def estimate_peak(self, anchor):
        return peak_estimator(self.args, anchor)

    def run(self, label, settings, environment, out, steps, warmup, timeout_s=None, profile=False):
        return run_trial(label, self.base_args, settings, environment, out, steps, warmup, timeout_s=timeout_s,
                         profile=profile)

    def reproduce(self, settings, environment, baseline=None):
        return reproduce_command(self.base_args, settings, environment, baseline)

    def with_file(self, path):
        from .settings import without_settings
        return f"python3 -m dygrad.train {' '.join(without_settings(self.base_args))} --settings {path}"


class ScriptTarget:
    """`-- SCRIPT.py ARGS` or `-- -m MODULE ARGS`: a training script of the user's own, run unchanged by
    `python3 -m dygrad.tune.script --trial` in an overlay of the user's directory; its settings are those that can
    be applied from outside (threads, synchronize, deterministic, the allocator's environment), its rate optimizer
    steps per second."""
    where = "script"
    rate_unit = "steps/s"
    profiles = False

    def __init__(self, command, cwd=None, scratch=None):
        from .script import split_program
        self.command = self.base_args = list(command)
        self.script, self.module, self.args = split_program(self.command)
        self.cwd = os.path.realpath(cwd or os.getcwd())
        self.scratch = os.path.realpath(scratch) if scratch else None
        if self.script is not None:
            path = os.path.realpath(os.path.join(self.cwd, self.script))
            if not os.path.isfile(path):
                raise SystemExit(f"[dygrad.tune] {self.script}: no such script (relative to {self.cwd})")
            self.script_path = path

    def initial_settings(self):
        return {}  # the baseline applies nothing: the script's own settings are what it measures

    def settle(self, settings, first):
        """The baseline's settings: the context its steps ran in (threads, synchronize, deterministic)."""
        return {**first.context, **settings}

    def estimate_peak(self, anchor):
        return None

    def program(self, overlay):
        """The script's command line in the trial: the script through the overlay when it lies in the user's
        directory (so paths it builds from __file__ land in the scratch directory too)."""
        if self.script is None:
            return ["-m", self.module, *self.args]
        relative = os.path.relpath(self.script_path, self.cwd)
        inside = not relative.startswith(os.pardir + os.sep) and relative != os.pardir
        return [os.path.join(overlay, relative) if inside else self.script_path, *self.args]

    def run(self, label, settings, environment, out, steps, warmup, timeout_s=None, profile=False):
        os.makedirs(out, exist_ok=True)
        overlay, tmp = os.path.join(out, "run"), os.path.join(out, "tmp")
        link_entries(self.cwd, overlay, skip=(self.scratch or os.path.realpath(os.path.dirname(out)),))
        os.makedirs(tmp, exist_ok=True)
        trial_file, results = os.path.join(out, "trial.json"), os.path.join(out, "results.json")
        with open(trial_file, "w") as f:
            json.dump({"settings": settings, "steps": steps, "results": results, "root": out}, f)
        cmd = [sys.executable, "-m", "dygrad.tune.script", "--trial", trial_file, "--", *self.program(overlay)]
        env = {**environment, "TMPDIR": tmp, "PYTHONDONTWRITEBYTECODE": "1"}
        rc, wall = run_process(cmd, out, env, timeout_s, label, cwd=overlay)
        run = Run(label=label, command=cmd, out=out, returncode=rc, wall_s=wall)
        run.environment = dict(environment or {})
        run.context = {}
        data = None
        if os.path.exists(results):
            with open(results) as f:
                data = json.load(f)
        shutil.rmtree(overlay, ignore_errors=True)  # the script's writes (links are removed, never followed)
        shutil.rmtree(tmp, ignore_errors=True)
        if data is not None:
            measured = [s for s in data["steps"] if s["step"] > warmup and s["step_time_s"] is not None]
            run.step_times = [s["step_time_s"] for s in measured]
            run.steps = [s["step"] for s in measured if s["loss"] is not None]
            run.losses = [s["loss"] for s in measured if s["loss"] is not None]
            run.peak_bytes, run.context, run.tokens_per_step = data["peak_bytes"], data["context"], 1.0
        if rc != 0:
            with open(os.path.join(out, "trial.log"), errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
            run.error = f"exit status {rc}: " + (lines[-1] if lines else "no output")
        elif data is None:
            run.returncode, run.error = 1, "the script ended without the trial's results"
        elif data["overridden"]:
            run.returncode, run.overridden = 1, data["overridden"]
            run.error = "the script sets " + ", ".join(
                f"{k} itself (to {v}, not the trial's {settings.get(k)})" for k, v in data["overridden"].items()) + \
                ": the tuner cannot vary it from outside (docs/tune.md)"
        elif not run.step_times:
            run.returncode = 1
            run.error = (f"the script made {len(data['steps'])} optimizer step(s) ({data['ended']}): none after the "
                         f"{warmup} warm-up step(s) to measure (a dygrad optimizer's step() is a step; one inside "
                         "dg.jit runs no Python after its capture)")
        return run

    def reproduce(self, settings, environment, baseline=None):
        env = [f"{k}={v}" for k, v in sorted(environment.items())]
        changed = {k: v for k, v in settings.items() if baseline is None or baseline.get(k) != v}
        return " ".join(env + ["python3", "-m", "dygrad.tune.script"] + [shlex.quote(f) for f in train_flags(changed)]
                        + ["--"] + [shlex.quote(a) for a in self.command])

    def with_file(self, path):
        return f"python3 -m dygrad.tune.script --settings {path} -- {' '.join(shlex.quote(a) for a in self.command)}"
