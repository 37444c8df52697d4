"""The tuner's candidate table: one line per setting to try, as data (docs/tune.md). A new feature adds a line.

Each line names the advisor rules that suggest it (docs/profiler-python.md; none: always considered), where it
applies ("train": dygrad.train's command; "script": a script of the user's own run by the CLI, settings applied
from outside it; "loop": dg.tune.run's in-process loop), the change it proposes from the
incumbent settings, its estimated gain (a fraction of the step time the advisor's numbers say it saves), its
numerics class (how closely its losses must match the incumbent's: NUMERICS) and its goal (speed, or memory: fit
a limit the incumbent exceeds). `propose(ctx)` returns the settings to change ({} or None: nothing to try), or a
Refused with the reason the tuner reports.
"""
import os
import re
from dataclasses import dataclass, field

# Losses of the measured steps against the incumbent's: the largest relative difference allowed per class.
#   exact: the same ops in the same order (threads: GEMM tiling and partial sums are fixed by the shape,
#     docs/threading.md; synchronize: where a Task runs, not what it computes; allocator: where buffers live).
#   rounding: the same math in another order or fused (fused ops, micro-batches summed, nondeterministic kernels):
#     measured 6e-8 to 1.9e-7 of the loss over a trial's steps (docs/tune.md); 1e-3 leaves room for longer trials
#     and still catches a wrong change (other rows move the loss ~1e-1).
#   bf16: autocast's bfloat16 (8-bit mantissa, 4e-3 per rounding) moves the loss ~1e-3-1e-2 in a few steps.
NUMERICS = {"exact": 0.0, "rounding": 1e-3, "bf16": 3e-2}


@dataclass
class Refused:
    reason: str


@dataclass
class Context:
    """What a candidate's check sees: the incumbent, the advice on the baseline and the user's limits."""
    settings: dict
    environment: dict = field(default_factory=dict)
    advice: list = field(default_factory=list)
    cores: int = os.cpu_count() or 1
    allow_nondeterminism: bool = False
    allow_bf16: bool = False
    memory_limit: int = 0
    incumbent_peak: int = 0
    cpu: dict = field(default_factory=dict)
    ranks: int = 1  # processes of the run (the incumbent's settings' "ranks" counts too)
    mpi_problem: object = None  # why this machine cannot start ranks ("" none; None: found out by mpi_problem())
    estimate_peak: object = None  # settings -> estimated peak bytes (dg.memory.estimate), or None

    def fired(self, *rules):
        return [a for a in self.advice if any(a["rule"] == r or a["rule"].startswith(r + "_") for r in rules)]

    @property
    def over_limit(self):
        return bool(self.memory_limit) and self.incumbent_peak > self.memory_limit


@dataclass
class Candidate:
    name: str
    rules: tuple
    where: tuple
    numerics: str
    goal: str
    propose: object
    gain: object
    why: str
    option: str = ""  # dygrad.train's option(s) it sets, for a script's refusal (applied from outside: none)


def saved_fraction(advice):
    """The share of the step an advice says it saves ("... (12.3% of step time)"), else its saved_fraction."""
    m = re.search(r"\(([\d.]+)% of step time\)", advice.get("expected_gain", ""))
    if m:
        return float(m.group(1)) / 100
    return float(advice.get("numbers", {}).get("saved_fraction", 0.0))


def _advised_gain(*rules):
    return lambda ctx: sum(saved_fraction(a) for a in ctx.fired(*rules))


def ranks_of(settings):
    """The ranks per machine of a run's settings (0 or absent: one process)."""
    return settings.get("ranks") or 1


def _cores_per_rank(ctx):
    return max(1, ctx.cores // ranks_of(ctx.settings))


def _threads(ctx):
    full = _cores_per_rank(ctx)
    now = ctx.settings.get("threads") or full
    if now >= full:
        return None
    return {"threads": full}


def _threads_gain(ctx):
    full = _cores_per_rank(ctx)
    now = ctx.settings.get("threads") or full
    return max(0.0, 1 - now / full) * 0.8  # Amdahl with 80% of the step parallel (GEMMs, elementwise)


def _flag_off(name, consent=None, consent_option=None):
    def propose(ctx):
        if not ctx.settings.get(name):
            return None
        if consent is not None and not getattr(ctx, consent):
            return Refused(f"{name} is on and turning it off gives up bitwise reproducibility: "
                           f"not tried without {consent_option}")
        return {name: False}
    return propose


def _fused(ctx):
    return {"unfused": False} if ctx.settings.get("unfused") else None


def _jit(ctx):
    if ctx.settings.get("jit"):
        return None
    return {"jit": True}


def _jit_o1(ctx):
    if ctx.settings.get("jit_level") == "O1":
        return None
    return {"jit": True, "jit_level": "O1"}


def _bf16_native(cpu):
    return bool(cpu.get("avx512_bf16") or any(str(f).startswith("amx_bf16") for f in cpu.get("amx", [])))


def _bf16(ctx):
    if ctx.settings.get("dtype", "fp32") != "fp32":
        return None
    if not _bf16_native(ctx.cpu):
        return Refused(f"bf16 autocast: this CPU ({ctx.cpu.get('model', '?')}) has neither AVX512-BF16 nor AMX, "
                       "so bf16 GEMMs would convert to float32 and run slower")
    if not ctx.allow_bf16:
        return Refused("bf16 autocast changes the numerics (losses within ~3e-2, not bitwise): not tried without "
                       "--allow-bf16")
    return {"dtype": "bf16"}


def _fits(ctx, changes):
    """None when the changed settings' estimated peak fits the limit (or nothing is known), else a Refused."""
    if not ctx.memory_limit or ctx.estimate_peak is None:
        return None
    peak = ctx.estimate_peak({**ctx.settings, **changes})
    if peak is not None and peak > ctx.memory_limit:
        return Refused(f"{changes}: dg.memory.estimate puts the step's peak at {peak / 2**20:.1f} MiB, above the "
                       f"{ctx.memory_limit / 2**20:.1f} MiB limit")
    return None


def _merge_micro_batches(ctx):
    """The largest micro-batch at the same global batch whose estimated peak fits: all the accumulation steps
    merged, else half of them, and so on."""
    accum, batch = ctx.settings.get("grad_accum", 1), ctx.settings.get("batch_size")
    if accum < 2 or not batch or ctx.over_limit:
        return None
    refused, factor = None, accum
    while factor > 1:
        if accum % factor == 0:
            changes = {"batch_size": batch * factor, "grad_accum": accum // factor}
            refused = _fits(ctx, changes)
            if refused is None:
                return changes
        factor //= 2
    return refused


def _merge_gain(ctx):
    # fewer micro-steps: their per-op host cost and the small GEMMs' inefficiency (the advisor's host-bound share,
    # halved, plus a floor for the GEMMs' better blocking)
    share = ctx.fired("host_bound")
    return 0.05 + (saved_fraction(share[0]) / 2 if share else 0.0)


def _split_micro_batch(ctx):
    batch = ctx.settings.get("batch_size")
    split_over = ranks_of(ctx.settings) if ctx.settings.get("batch_split") else 1
    if not ctx.over_limit or not batch or batch % (2 * split_over):  # the ranks' shares stay equal
        return None
    return {"batch_size": batch // 2, "grad_accum": ctx.settings.get("grad_accum", 1) * 2}


def _recompute(mode):
    def propose(ctx):
        if not ctx.over_limit or ctx.settings.get("recompute", "none") != "none":
            return None
        if mode == "auto":
            return {"recompute": "auto", "recompute_budget": str(int(ctx.memory_limit * 0.9))}
        return {"recompute": mode}
    return propose


def _memory_gain(order):
    return lambda ctx: 1.0 - order / 10  # memory candidates: tried before speed ones, cheapest in time first


def _ddp(name, value):
    def propose(ctx):
        if max(ctx.ranks, ranks_of(ctx.settings)) < 2:
            return Refused(f"{name}: the run is one process, so it has no DDP buckets")
        if ctx.settings.get(name) == value:
            return None
        return {name: value}
    return propose


def mpi_problem():
    """Why this machine cannot start ranks of dygrad.train ("" when it can): mpirun and an MPI build."""
    import shutil
    if shutil.which("mpirun") is None:
        return "mpirun was not found (OpenMPI's openmpi-bin; `make deps` installs it)"
    from dygrad import _C
    if not _C._mpi_built():
        return "this dygrad was built without MPI (CMake found no MPI)"
    return ""


def _ranks(ctx):
    """Twice the incumbent's ranks on this machine, cores / ranks threads each, the same global batch split over
    them (dygrad.train --batch-split: strong scaling, so the losses are the single process's within rounding)."""
    now = ranks_of(ctx.settings)
    if ctx.cores < 2:
        return Refused("ranks per machine: this machine has 1 core, so a second rank would only share it")
    problem = mpi_problem() if ctx.mpi_problem is None else ctx.mpi_problem
    if problem:
        return Refused(f"ranks per machine: {problem}")
    if now > 1 and not ctx.settings.get("batch_split"):
        return Refused(f"ranks per machine: the command's {now} ranks each draw their own batches (weak scaling), so "
                       "a run at another rank count trains on other rows; tune it with --batch-split")
    ranks = 2 * now
    if ranks > ctx.cores:
        return None  # a rank per core already
    batch = ctx.settings.get("batch_size")
    if not batch or batch % ranks:
        return Refused(f"ranks per machine: --batch-size {batch} does not divide by {ranks} ranks, so the global "
                       "batch cannot be split into equal shares (--batch-split)")
    return {"ranks": ranks, "batch_split": True, "threads": max(1, ctx.cores // ranks)}


def _ranks_gain(ctx):
    # the ranks run their Python and their ops' host work in parallel: half the advisor's host-bound share, plus
    # the small ops that one process's threads do not split well
    share = ctx.fired("host_bound")
    return 0.02 + (saved_fraction(share[0]) / 2 if share else 0.0)


def _allocator(ctx):
    if ctx.environment.get("DYGRAD_ALLOC_RELEASE_FRACTION") == "-1":
        return None
    return {"environment": {"DYGRAD_ALLOC_RELEASE_FRACTION": "-1"}}


CANDIDATES = (
    Candidate("synchronize off", ("synchronize_mode",), ("train", "script", "loop"), "exact", "speed",
              _flag_off("synchronize"), _advised_gain("synchronize_mode"),
              "every op ran inline on the host: async execution overlaps the host's work with the kernels"),
    Candidate("deterministic off", ("deterministic_mode",), ("train", "script", "loop"), "rounding", "speed",
              _flag_off("deterministic", "allow_nondeterminism", "--allow-nondeterminism"),
              lambda ctx: 0.01, "lets ops take non-reproducible fast paths"),
    Candidate("threads: all cores", (), ("train", "script", "loop"), "exact", "speed", _threads, _threads_gain,
              "intra-op threads on every core"),
    Candidate("fused ops", ("unfused",), ("train",), "rounding", "speed", _fused, _advised_gain("unfused"),
              "F.rms_norm, F.rotary_position_embedding, F.swiglu, SDPA and F.cross_entropy instead of their "
              "composed forms", option="--no-unfused"),
    Candidate("jit", ("jit", "host_bound"), ("train", "loop"), "exact", "speed", _jit, _advised_gain("jit"),
              "dygrad.jit replays the step as one Task with no Python (docs/jit.md)", option="--jit"),
    Candidate("jit O1", ("jit", "host_bound", "unfused"), ("train",), "rounding", "speed", _jit_o1,
              _advised_gain("jit"), "dygrad.jit at O1: the captured step after fusion, the attention pattern and "
              "rematerialization (docs/jit-fusion.md); within rounding of eager (the attention pattern)",
              option="--jit --jit-level O1"),
    Candidate("larger micro-batch", ("host_bound",), ("train",), "rounding", "speed", _merge_micro_batches,
              _merge_gain, "the largest micro-batch that fits, fewer accumulation steps: the same global batch "
              "in fewer, larger ops", option="--batch-size and --grad-accum"),
    Candidate("bf16 autocast", ("bf16",), ("train", "loop"), "bf16", "speed", _bf16,
              lambda ctx: _advised_gain("bf16")(ctx) or 0.02, "the GEMMs in bfloat16 under dg.autocast",
              option="--dtype bf16"),
    Candidate("allocator: keep cached segments", ("fragmentation",), ("train", "script", "loop"), "exact", "speed",
              _allocator, lambda ctx: 0.005,
              "DYGRAD_ALLOC_RELEASE_FRACTION=-1: cached pages are never unmapped (no unmap/map per step)"),
    Candidate("recompute selective", ("activation_memory",), ("train",), "exact", "memory",
              _recompute("selective"), _memory_gain(1), "recompute the memory-bound ops of each block in backward",
              option="--recompute selective"),
    Candidate("smaller micro-batch", ("activation_memory",), ("train",), "rounding", "memory", _split_micro_batch,
              _memory_gain(2), "half the micro-batch, twice the accumulation steps: the same global batch",
              option="--batch-size and --grad-accum"),
    Candidate("recompute full", ("activation_memory",), ("train",), "exact", "memory", _recompute("full"),
              _memory_gain(3), "recompute each whole block in backward", option="--recompute full"),
    Candidate("recompute auto", ("activation_memory",), ("train",), "exact", "memory", _recompute("auto"),
              _memory_gain(4), "per-block recompute planned to a budget of 90% of the limit",
              option="--recompute auto --recompute-budget"),
    Candidate("DDP bucket size", ("exposed_comm",), ("train",), "exact", "speed", _ddp("bucket_cap_mb", 5.0),
              _advised_gain("exposed_comm"), "5 MiB buckets start while backward runs", option="--bucket-cap-mb"),
    Candidate("DDP gradient_as_bucket_view", ("exposed_comm",), ("train",), "exact", "speed",
              _ddp("gradient_as_bucket_view", True), _advised_gain("exposed_comm"),
              "gradients are views of the buckets: no copies in and out", option="--gradient-as-bucket-view"),
    Candidate("ranks per machine", ("host_bound",), ("train",), "rounding", "speed", _ranks, _ranks_gain,
              "twice the ranks on this machine, cores / ranks threads each, under dygrad.distributed.run, the same "
              "global batch split over them (--batch-split); within rounding (the gradients' all-reduce order)",
              option="--ranks and --batch-split under dygrad.distributed.run"),
)


def plan(ctx, where="train", tried=()):
    """[(candidate, changes, gain)] to try, memory goals first while the incumbent exceeds the limit, then by
    estimated gain; and [(candidate, reason)] refused. Candidates named in `tried` are left out."""
    todo, refused = [], []
    for c in CANDIDATES:
        if c.name in tried or (c.goal == "memory" and not ctx.over_limit):
            continue
        if where not in c.where:
            if where == "script":  # the CLI tuning a script says why the train-only settings were not tried
                refused.append((c, f"{c.name} needs dygrad.train's {c.option}: the model and the loop are the "
                                   "script's own, set in its code (dg.tune.apply hands it a settings file)"))
            continue
        changes = c.propose(ctx)
        if isinstance(changes, Refused):
            refused.append((c, changes.reason))
        elif changes:
            todo.append((c, changes, c.gain(ctx)))
    todo.sort(key=lambda t: (t[0].goal != "memory", -t[2]))
    return todo, refused
