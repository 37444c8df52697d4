"""Which sharding level a training step needs (docs/distributed.md, "Choosing the sharding level"): each level's
per-rank peak derived from one dry run of the unsharded step (dg.memory.estimate), and the least sharded level that
fits a memory limit (less sharding communicates less: DDP all-reduces the gradients; ZeRO-1 adds a broadcast of
the parameters; ZeRO-2 and fully_shard add an all-gather of every module's parameters per pass)."""
from collections import namedtuple

LEVELS = ("none", "zero1", "zero2", "fsdp")
HEADROOM = 0.9  # of the limit: the allocator's cached segments and fragmentation sit above the allocated peak

ShardingEstimate = namedtuple("ShardingEstimate", "level peak world_size unsharded")
ShardingEstimate.__doc__ = """A level's predicted per-rank peak allocated bytes (`peak`) at `world_size` ranks, and the
unsharded step's MemoryEstimate it was derived from."""


def _tensor_bytes(t):
    return t.numel() * t.element_size()


def estimate_sharding(model, batch, *, world_size, optimizer=None, loss_fn=None, step_fn=None, blocks=None,
                      run_ahead=True):
    """Per level (none = DDP, zero1, zero2, fsdp), the per-rank peak of the step at `world_size` ranks. One dry run of
    the unsharded step (steady state: `steps=2`) gives the peak and its split by category (parameters P, gradients
    G, optimizer state O at the peak); then, per rank, from how each level works here:
    - none (DDP): + G, the buckets beside the local gradients until the all-reduce has read them;
    - zero1 (ZeroRedundancyOptimizer under DDP): as DDP, less O (1 - 1/world);
    - zero2 (fully_shard without resharding after forward): P, G and O at 1/world, plus every module's gathered
      parameters (kept from its forward to its backward) and one module's whole gradients being reduce-scattered
      (two with the stream's run-ahead bound off);
    - fsdp (fully_shard): P, G and O at 1/world, plus two modules' gathered parameters (the bound on the host's
      run-ahead), the root's, and one module's whole gradients being reduce-scattered (two with the bound off).
    `run_ahead`: the host runs ahead of the stream (the default of a training loop): DDP's local gradients, handed
    to the all-reduces, stay until those have run, one more G beside the buckets (fully_shard bounds its own run-ahead;
    False: each phase waited for, as dg.memory.estimate counts). `blocks`: the modules fully_shard would wrap (default:
    the items of the model's ModuleLists). An estimate: the peak's moment is the unsharded step's; measured against
    2-rank runs within 15% (docs/distributed.md)."""
    from .. import memory
    if world_size < 1:
        raise ValueError(f"[estimate_sharding] world_size must be at least 1, got {world_size}")
    import dygrad as dg
    dg.synchronize()
    before = dg.memory_stats()
    base = memory.estimate(model, batch, optimizer=optimizer, loss_fn=loss_fn, step_fn=step_fn, steps=2)
    # The estimate counts what the process holds besides this step (another model, a test's tensors): leave it out.
    own_params = sum(_tensor_bytes(p) for p in model.parameters())
    own_grads = sum(_tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None)
    own_state = 0 if optimizer is None else sum(
        _tensor_bytes(v) for st in optimizer.state.values() for v in st.values() if isinstance(v, dg.Tensor))
    own = {"parameter": own_params, "gradient": own_grads, "optimizer_state": own_state}
    cat = {c: base.by_category[c] - max(0, before.get(f"allocated_bytes.{c}", 0) - own.get(c, 0))
           for c in base.by_category}
    step_peak = sum(cat.values())
    base = base._replace(peak=step_peak, by_category=cat)
    return level_peaks(base, model, world_size=world_size, blocks=blocks, run_ahead=run_ahead)


def level_peaks(base, model, *, world_size, blocks=None, run_ahead=True):
    """estimate_sharding's arithmetic on an unsharded step's MemoryEstimate `base` (dg.memory.estimate: its peak and
    by_category), for a step already dry-run (the profiler's summary passes the trainer's own estimate)."""
    from ..nn.layers import ModuleList
    if world_size == 1:
        return {level: ShardingEstimate(level, int(base.peak), 1, base) for level in LEVELS}
    cat = base.by_category
    if blocks is None:
        blocks = [m for sub in model.modules() if isinstance(sub, ModuleList) for m in sub]
    in_blocks = {id(p) for b in blocks for p in b.parameters()}
    block_bytes = sorted((sum(_tensor_bytes(p) for p in b.parameters()) for b in blocks), reverse=True)
    root_bytes = sum(_tensor_bytes(p) for p in model.parameters() if id(p) not in in_blocks)
    two_blocks = sum(block_bytes[:2])
    # Gradients being reduce-scattered beside the next module's backward: one module's while the stream's run-ahead
    # bound holds the host (the default, docs/stream.md), two when it is off (measured at 2 ranks: with the bound the
    # fully_shard levels' peaks are one module's gradients lower).
    import dygrad as dg
    scattering = sum(block_bytes[:1] if dg.get_run_ahead_limit() > 0 else block_bytes[:2])
    keep = 1.0 - 1.0 / world_size
    state, grads, params = cat["optimizer_state"], cat["gradient"], cat["parameter"]
    sharded = base.peak - (state + grads + params) * keep
    # DDP's buckets (and, running ahead, the local gradients handed to the all-reduces) are each one copy of the
    # trainable parameters' gradients, not of the gradient bytes at the unsharded peak (a backward's own transient
    # gradients may be among those)
    buckets = sum(_tensor_bytes(p) for p in model.parameters() if p.requires_grad)
    ddp = base.peak + buckets * (2 if run_ahead else 1)
    peaks = {
        "none": ddp,
        "zero1": ddp - state * keep,
        "zero2": sharded + params + scattering,
        "fsdp": sharded + two_blocks + root_bytes + scattering,
    }
    return {level: ShardingEstimate(level, int(peaks[level]), world_size, base) for level in LEVELS}


def current_level(model, optimizer=None):
    """The level a model and its optimizer train at: fsdp / zero2 (fully_shard, with / without resharding after
    forward), zero1 (ZeroRedundancyOptimizer), else none."""
    group = getattr(model, "_fsdp_group", None)
    if group is not None:
        return "fsdp" if any(getattr(m, "_fsdp_group", group).reshard_after_forward
                             for m in model.modules() if m is not model) else "zero2"
    from .optim import ZeroRedundancyOptimizer
    return "zero1" if isinstance(optimizer, ZeroRedundancyOptimizer) else "none"


def _peak(estimate):
    return getattr(estimate, "peak", estimate)


def suggest_sharding(estimates, memory_limit):
    """The least sharded level whose estimated peak fits `memory_limit` bytes (with headroom for the allocator's
    cache), as (level, why). Without a limit (0 or None): "none". No level fits: (None, why). `estimates`: level ->
    ShardingEstimate (estimate_sharding) or peak bytes."""
    if not memory_limit:
        return "none", "no memory limit: data parallel (DDP), which communicates least"
    budget = memory_limit * HEADROOM
    mib = 1 << 20
    described = ", ".join(f"{lv} {_peak(estimates[lv]) / mib:.1f}" for lv in LEVELS)
    for level in LEVELS:
        if _peak(estimates[level]) <= budget:
            return level, (f"the least sharded level whose estimated per-rank peak fits {HEADROOM:.0%} of the "
                           f"{memory_limit / mib:.1f} MiB limit (MiB per rank: {described})")
    return None, (f"no level fits {HEADROOM:.0%} of the {memory_limit / mib:.1f} MiB limit (MiB per rank: "
                  f"{described}): more ranks, a smaller batch, recompute or bf16")
