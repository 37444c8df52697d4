"""One trial: dygrad.train in a fresh process, in its own scratch directory and process group, for a bounded
number of steps; its metrics.jsonl read back as step times, losses and the peak (docs/tune.md, "Trials")."""
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .settings import train_flags

_LIVE = set()  # the process groups of trials running now (killed on Ctrl-C or any exit)


@dataclass
class Run:
    """One process's measurement. step_times and losses are of the measured steps (after `warmup`)."""
    label: str
    command: list
    out: str = ""
    returncode: int = 0
    step_times: list = field(default_factory=list)
    losses: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    peak_bytes: int = 0
    tokens_per_step: float = 0.0
    mfu: float = 0.0
    wall_s: float = 0.0
    error: str = ""

    @property
    def ok(self):
        return self.returncode == 0 and bool(self.step_times)

    @property
    def median_s(self):
        return statistics.median(self.step_times)

    @property
    def tokens_per_s(self):
        return self.tokens_per_step / self.median_s if self.ok else 0.0

    def reproduce(self):
        env = [f"{k}={v}" for k, v in self.environment.items()] if getattr(self, "environment", None) else []
        return " ".join(env + [shlex.quote(a) for a in self.command])


def train_command(base_args, settings, out, steps, profile=False):
    """python -m dygrad.train with the user's options, then the settings (the last of an option wins), then the
    trial's own: its scratch directory, its length, no sample, no evaluation or checkpoint before its last step."""
    args = [*base_args, *train_flags(settings), "--out", out, "--steps", str(steps), "--quiet", "--sample-tokens",
            "0", "--eval-interval", str(10**9), "--save-interval", str(10**9), "--eval-batches", "1"]
    if profile:
        args += ["--profile", "--profile-wait", "2", "--profile-steps", str(max(1, steps - 3))]
    return launch_prefix(settings) + args


def launch_prefix(settings, python=None):
    """How dygrad.train starts under `settings`: one process, or their ranks per machine under the launcher
    (dygrad.distributed.run, as `make train RANKS=N`)."""
    python = python or sys.executable
    ranks = settings.get("ranks") or 1
    if ranks > 1:
        return [python, "-m", "dygrad.distributed.run", "--nproc-per-node", str(ranks), "-m", "dygrad.train"]
    return [python, "-m", "dygrad.train"]


def kill_group(proc, grace_s=2.0):
    """SIGTERM to the trial's process group, SIGKILL after `grace_s`; waits for it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    _LIVE.discard(proc)


def kill_all():
    for proc in list(_LIVE):
        kill_group(proc)


def run_process(cmd, out, environment=None, timeout_s=None, label="", cwd=None):
    """Runs `cmd` in `cwd` (default `out`, created) in a new session (its own process group), its output in
    out/trial.log; returns (returncode, wall seconds). Any exception (KeyboardInterrupt included) kills the whole
    group."""
    os.makedirs(out, exist_ok=True)
    env = {**os.environ, **(environment or {})}
    start = time.perf_counter()
    with open(os.path.join(out, "trial.log"), "w") as log:
        proc = subprocess.Popen(cmd, cwd=cwd or out, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        _LIVE.add(proc)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            rc = -signal.SIGKILL
        except BaseException:
            kill_group(proc)
            raise
        _LIVE.discard(proc)
    return rc, time.perf_counter() - start


def read_metrics(out):
    path = os.path.join(out, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_trial(label, base_args, settings, environment, out, steps, warmup, timeout_s=None, profile=False):
    """One fresh process of dygrad.train under `settings`: a Run of its steps after `warmup`."""
    cmd = train_command(base_args, settings, out, steps, profile=profile)
    rc, wall = run_process(cmd, out, environment, timeout_s, label)
    run = Run(label=label, command=cmd, out=out, returncode=rc, wall_s=wall)
    run.environment = dict(environment or {})
    records = [r for r in read_metrics(out) if "loss" in r]
    measured = [r for r in records if r["step"] > warmup]
    run.step_times = [r["step_time_s"] for r in measured]
    run.losses = [r["loss"] for r in measured]
    run.steps = [r["step"] for r in measured]
    run.peak_bytes = max((r.get("max_allocated_bytes", 0) for r in records), default=0)
    per_rank = [r["max_allocated_bytes_per_rank"] for r in records if "max_allocated_bytes_per_rank" in r]
    if per_rank:  # ranks on one machine share its memory: their peaks add up
        run.peak_bytes = max(run.peak_bytes, sum(per_rank[-1]))
    if measured:
        run.tokens_per_step = measured[0]["tokens_per_s"] * measured[0]["step_time_s"]
        run.mfu = statistics.median(r["mfu"] for r in measured)
    # what the trial wrote besides its log, metrics and profile is scratch: the checkpoint and the corpus
    shutil.rmtree(os.path.join(out, "data"), ignore_errors=True)
    for name in os.listdir(out):
        if name.startswith("checkpoint.safetensors"):
            os.remove(os.path.join(out, name))
    if rc != 0 or not measured:
        with open(os.path.join(out, "trial.log"), errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        run.error = (f"exit status {rc}: " if rc else "no measured step: ") + (lines[-1] if lines else "no output")
        if rc == 0:
            run.returncode = 1
    return run
