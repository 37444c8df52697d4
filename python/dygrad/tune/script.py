"""python3 -m dygrad.tune.script [--settings tune.json] [options] -- SCRIPT.py ARGS (or -m MODULE ARGS): runs a
training script of your own, unchanged, under tuned settings; the tuner runs each of its trials the same way, with
`--trial FILE` (docs/tune.md, "A script of your own").

A trial: the script runs in a fresh process whose working directory is an overlay of the user's (tune/scratch.py:
relative reads find the user's files, writes land in the scratch directory), with the trial's settings applied
before it starts. Each optimizer step (a global Optimizer step hook) records a timing mark on the stream, the loss
(the scalar roots of the backward() calls since the previous step, their mean) and the allocator's peak; after the
trial's steps the stream is drained, the results written and the process ended at once (os._exit: the script's
own end - saving, evaluating - neither runs nor counts).
"""
import argparse
import json
import os
import runpy
import sys

CONTEXT = ("threads", "synchronize", "deterministic")  # what can be set from outside a script


def split_program(command):
    """(script path or None, module name or None, its arguments) of `[--] SCRIPT ARGS` or `[--] -m MODULE ARGS`."""
    if command and command[0] == "--":
        command = command[1:]
    if command and command[0] == "-m":
        if len(command) < 2:
            raise SystemExit("[dygrad.tune.script] -m needs a module name")
        return None, command[1], command[2:]
    if not command:
        raise SystemExit("[dygrad.tune.script] no script given: expected `-- SCRIPT.py ARGS` or `-- -m MODULE ARGS`")
    return command[0], None, command[1:]


def apply_context(settings):
    """Sets the context settings a script cannot see from outside: threads, synchronize, deterministic."""
    import dygrad as dg
    if settings.get("threads"):
        dg.set_context(num_threads=settings["threads"])
    dg.set_context(**{k: settings[k] for k in ("synchronize", "deterministic") if settings.get(k) is not None})


def context_now():
    import dygrad as dg
    c = dg.get_context()
    return {"threads": c.num_threads, "synchronize": c.synchronize, "deterministic": c.deterministic}


def run_program(script, module, args):
    """Runs the script (or module) as `python SCRIPT ARGS` would: as __main__, with its argv and its directory
    first on sys.path (for a module, the working directory, as `python -m`)."""
    if module is not None:
        sys.argv = [module, *args]
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        path = os.path.abspath(script)
        if not os.path.isfile(path):
            raise SystemExit(f"[dygrad.tune.script] {script}: no such file")
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(path)
        runpy.run_path(path, run_name="__main__")


class Recorder:
    """Per optimizer step of a trial: a timing mark on the stream, the loss, the peak; ends the process after
    `steps` steps with its results written to `results`. Only the first optimizer that steps counts (a script with
    several optimizers steps each once per iteration)."""

    def __init__(self, steps, results, settings):
        import dygrad as dg
        self.dg = dg
        self.steps, self.results, self.settings = steps, results, settings
        self.records = []  # (timing mark, backward roots) per step
        self.roots = []
        self.peak = 0
        self.overridden = {}
        self.optimizer = None
        self.depth = 0  # a subclass's step calling its base's runs the hooks at both levels: the outermost counts

    def install(self):
        from dygrad import _C
        from dygrad.optim import optimizer
        plain_backward, plain_autograd_backward = _C.Tensor.backward, self.dg.autograd.backward
        recorder = self

        def backward(tensor, *args, **kwargs):
            recorder.root(tensor)
            return plain_backward(tensor, *args, **kwargs)

        def autograd_backward(tensors, *args, **kwargs):
            tensors = (tensors,) if isinstance(tensors, _C.Tensor) else tuple(tensors)
            for t in tensors:
                recorder.root(t)
            return plain_autograd_backward(tensors, *args, **kwargs)
        _C.Tensor.backward = backward
        self.dg.autograd.backward = autograd_backward
        optimizer.register_optimizer_step_pre_hook(self.enter)
        optimizer.register_optimizer_step_post_hook(self.step)
        return self

    def enter(self, optimizer, args, kwargs):
        self.depth += 1

    def root(self, tensor):
        if tensor.numel() == 1:  # a loss; a backward from a non-scalar with its gradient is not one
            self.roots.append(tensor.detach())

    def step(self, optimizer, args, kwargs):
        self.depth -= 1
        if self.depth:
            return
        if self.optimizer is None:
            self.optimizer = optimizer
        if optimizer is not self.optimizer:
            return
        mark = self.dg.cpu.Event(enable_timing=True)
        mark.record()
        self.records.append((mark, self.roots))
        self.roots = []
        self.peak = max(self.peak, self.dg.memory.max_memory_allocated())
        now = context_now()
        for name in CONTEXT:  # the script set it itself: the trial's value was not what ran
            wanted = self.settings.get(name)
            if wanted is not None and not (name == "threads" and wanted == 0) and now[name] != wanted:
                self.overridden.setdefault(name, now[name])
        if len(self.records) >= self.steps:
            self.finish("steps")

    def finish(self, ended):
        self.dg.synchronize()
        steps = []
        for i, (mark, roots) in enumerate(self.records):
            elapsed = self.records[i - 1][0].elapsed_time(mark) / 1000 if i else None  # ms -> s
            loss = sum(float(r.float().item()) for r in roots) / len(roots) if roots else None
            steps.append({"step": i + 1, "loss": loss, "step_time_s": elapsed})
        data = {"steps": steps, "peak_bytes": max(self.peak, self.dg.memory.max_memory_allocated()),
                "context": context_now(), "overridden": self.overridden, "ended": ended}
        tmp = self.results + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.results)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def run_trial(path, command):
    """The tuner's trial (its file: settings, steps, results path, the trial's directory)."""
    with open(path) as f:
        trial = json.load(f)
    script, module, args = split_program(command)
    from .scratch import ScratchGuard
    ScratchGuard(trial["root"]).install()  # before the script's first line
    from dygrad import _checkpoint_files  # the script imports dygrad too; its settings apply before it runs
    _checkpoint_files.FOLLOW_LINKS = False  # a save replaces the overlay's link, never the user's file
    apply_context(trial["settings"])
    recorder = Recorder(trial["steps"], trial["results"], trial["settings"]).install()
    try:
        run_program(script, module, args)
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    recorder.finish("the script ended")  # fewer optimizer steps than the trial's


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m dygrad.tune.script", description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", default=None, help="a settings file from python3 -m dygrad.tune (tune.json): its "
                   "threads, synchronize and deterministic settings and its environment (this process re-executes "
                   "itself with the allocator's variables)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (overrides the file's)")
    p.add_argument("--synchronize", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--trial", default=None, help=argparse.SUPPRESS)  # the tuner's: a trial file
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- SCRIPT.py ARGS, or -- -m MODULE ARGS")
    a = p.parse_args(argv)
    if a.trial:
        return run_trial(a.trial, a.command)
    settings = {}
    if a.settings:
        from .settings import load, run_with_environment
        data = load(a.settings)
        run_with_environment(data, "dygrad.tune.script", argv)
        settings = {k: v for k, v in data["settings"].items() if k in CONTEXT}
        other = sorted(k for k in data["settings"] if k not in CONTEXT)
        if other:
            print(f"[dygrad.tune.script] {a.settings}: {', '.join(other)} shape the model or the loop, which the "
                  "script decides: not applied (dygrad.train's options; a script reads them with dg.tune.apply)",
                  file=sys.stderr)
    settings.update({k: getattr(a, k) for k in CONTEXT if getattr(a, k) is not None})
    script, module, args = split_program(a.command)
    apply_context(settings)
    run_program(script, module, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
