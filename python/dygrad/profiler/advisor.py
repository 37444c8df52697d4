"""The advisor: rules from the seed's tuning checklist, each firing only on evidence in one profiling session and
stating its numbers, an expected gain estimated from the measurement, and the fix
(docs/profiler-python.md, "Metrics and advisor").

advise(result, summary) -> [{"rule", "title", "severity", "evidence", "numbers", "expected_gain", "fix"}],
most severe first. `summary` is build_summary's dict (its breakdown, syncs, copies and memory sections).
"""
import bisect
import re

from .summary import step_ops, step_windows, sync_ranges

# --- thresholds -------------------------------------------------------------------------------------------------
# Host-bound idle (the device waited for the host to enqueue) as a fraction of the mean step.
HOST_BOUND_FRACTION = 0.20
# Waiting for the data loader as a fraction of the mean step.
DATA_WAIT_FRACTION = 0.10
EXPOSED_COMM_FRACTION = 0.03  # issue 16's budget: communication within 3% of the step
# Composed-op patterns a fused kernel replaces: occurrences per step needed to fire (any is evidence).
FUSION_MIN_PER_STEP = 1
# The patterns are matched in the forward; when the step runs a backward, the composed ops' backward costs about
# twice their forward (as 6N vs 2N FLOPs), and the fused op's backward is fused too. On the tiny LLaMA the
# four unfused-path findings then add up to 10-25% of the step (a noisy 2-core machine), the order of
# fused/unfused = 1.27x on the bench config in bench/RESULTS.md.
BACKWARD_FACTOR = 3.0
# Bytes moved by copy ops (.contiguous(), clone, copy_) as a fraction of all bytes the step's ops move, and the
# least copy volume per step worth a finding.
COPY_BYTES_FRACTION = 0.10
COPY_MIN_BYTES_PER_STEP = 1 << 20
# Copies between the host and a device (docs/devices.md): advised from this many a step, or this share of it.
DEVICE_COPIES_PER_STEP = 8
DEVICE_COPY_SHARE = 0.05
# Host syncs (item, numpy, tolist, synchronize, ...) per step above which the pipeline drain is worth a finding
# (one loss.item() per step for logging is common and cheap).
MAX_SYNCS_PER_STEP = 2
# Scalar reads (item, tolist, __bool__, __float__, ...) per step that mean a reduction done in Python.
SCALAR_READS_PER_STEP = 32
# Per-element indexing feeding Python arithmetic (Python's sum() over a tensor): per step, at least this many
# tiny ops (at most TINY_OP_BYTES moved) and as many element selections (t[i]: "select" host-op ranges) or an
# iteration over a tensor (`for x in t`, `sum(t)`: one "unbind" host-op range).
ELEMENT_OPS_PER_STEP = 128
TINY_OP_BYTES = 64
# Activations at the peak allocated instant as a share of it, and the least peak worth a finding.
ACTIVATION_SHARE = 0.50
ACTIVATION_MIN_BYTES = 4 << 20
# Fragmentation (reserved - allocated at the peak) as a share of reserved, and the least amount worth a finding.
FRAGMENTATION_SHARE = 0.25
FRAGMENTATION_MIN_BYTES = 8 << 20
# Sharding: without a memory limit, model state (parameters, gradients, optimizer state) at least this share of a
# data-parallel peak makes a sharded level worth naming.
MODEL_STATE_SHARE = 0.50
# bf16 rule: the GEMMs' share of the step needed to recommend bfloat16, and the bf16 / float32 GEMM speed it
# assumes (measured on the AVX512-BF16 EPYC VMs: oneDNN's bf16 GEMM 2.0x its sgemm, issue 17).
BF16_GEMM_SHARE = 0.20
BF16_GEMM_SPEEDUP = 2.0
GEMM_OPS = frozenset({"matmul", "addmm"})
# Slow-kernel rule: an op whose device time is this far above its roofline time (its FLOPs at the measured GEMM
# peak or its bytes at the measured memory bandwidth, whichever takes longer) and that takes at least this share
# of the step. The expected gain assumes it would reach SLOW_KERNEL_TARGET of its roofline.
SLOW_KERNEL_EFFICIENCY = 0.25
SLOW_KERNEL_SHARE = 0.05
SLOW_KERNEL_TARGET = 0.5
# Severity from the expected saving (fraction of step time or of memory).
HIGH_GAIN, MEDIUM_GAIN = 0.25, 0.08

SCALAR_READS = frozenset({"item", "tolist", "__bool__", "__float__", "__int__", "__index__"})
ELEMENT_SELECTIONS = frozenset({"select"})
# Python iteration over a tensor (`for x in t`, `sum(t)`): one host op that yields every element as a view.
ITERATIONS = frozenset({"unbind"})
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
MIB = 1 << 20


def _severity(gain_fraction):
    return "high" if gain_fraction >= HIGH_GAIN else "medium" if gain_fraction >= MEDIUM_GAIN else "low"


def _speedup(saved_fraction):
    saved_fraction = min(saved_fraction, 0.99)
    return f"up to {1 / (1 - saved_fraction):.2f}x faster step ({saved_fraction:.1%} of step time)"


def _advice(rule, title, severity, evidence, numbers, expected_gain, fix):
    return {"rule": rule, "title": title, "severity": severity, "evidence": evidence, "numbers": numbers,
            "expected_gain": expected_gain, "fix": fix}


def _total_step_ns(result):
    return sum(end - begin for begin, end in step_windows(result))


def _op_cost_ns(op):
    """An op's share of the step: its device span or its host span, whichever is longer (the bottleneck)."""
    device = op.device_end_ns - op.device_begin_ns if op.device_thread >= 0 else 0
    return max(device, op.enqueue_ns - op.host_begin_ns)


# --- context rules ----------------------------------------------------------------------------------------------

def rule_synchronize(result, summary):
    if not result.context.get("synchronize"):
        return None
    bd = summary["breakdown"]
    step, compute = bd.get("step_ns", 0), bd.get("buckets_ns", {}).get("compute", 0)
    # Inline, the step is host work + kernels in series; async overlaps them: the step nears the larger one.
    saved = min(compute, step - compute) / step if step else 0.0
    return _advice(
        "synchronize_mode", "Per-op synchronisation is on", "high" if saved >= HIGH_GAIN else "medium",
        "recorded with dg.set_context(synchronize=True): every op runs inline on the host thread, so the host's "
        f"own work ({(step - compute) / 1e6:.2f} ms a step) and the kernels ({compute / 1e6:.2f} ms) never overlap",
        {"step_ms": step / 1e6, "compute_ms": compute / 1e6, "host_only_ms": (step - compute) / 1e6},
        "async execution overlaps them: " + _speedup(saved),
        "dg.set_context(synchronize=False) outside debugging (it is for locating errors at their call)")


def rule_deterministic(result, summary):
    if not result.context.get("deterministic"):
        return None
    return _advice(
        "deterministic_mode", "Deterministic mode is on", "low",
        "recorded with dg.set_context(deterministic=True)",
        {"deterministic": True},
        "no op in this build has a faster non-reproducible path yet (docs/threading.md), so ~0% today; ops "
        "flagged kOpNondeterministic will be slower under it",
        "dg.set_context(deterministic=False) unless bitwise reproducibility is required")


# --- time rules -------------------------------------------------------------------------------------------------

def rule_host_bound(result, summary):
    fraction = summary["breakdown"].get("fractions", {}).get("host_bound", 0.0)
    if fraction < HOST_BOUND_FRACTION:
        return None
    bd = summary["breakdown"]
    return _advice(
        "host_bound", "The device waits for the host", _severity(fraction),
        f"host-bound idle is {fraction:.0%} of the step: the device finished its queue and waited for Python to "
        f"enqueue the next op",
        {"host_bound_fraction": fraction, "host_dispatch_ms": bd.get("host_dispatch_ns", 0) / 1e6,
         "ops_per_step": bd.get("num_ops", 0), "step_ms": bd.get("step_ns", 0) / 1e6},
        _speedup(fraction),
        "issue fewer, larger ops: batch work into tensors instead of Python loops, use the fused ops "
        "(F.rms_norm, F.swiglu, F.scaled_dot_product_attention, F.cross_entropy), avoid syncs that drain the queue")


def rule_jit(result, summary):
    """Host-bound and not compiled: dygrad.jit replays the step as one Task with no Python (docs/jit.md)."""
    fraction = summary["breakdown"].get("fractions", {}).get("host_bound", 0.0)
    names = {o.name for o in result.ops}
    if fraction < HOST_BOUND_FRACTION or "jit_graph" in names:
        return None
    ops = summary["breakdown"].get("num_ops", 0)
    if "jit_segment" in names:
        title = "The compiled step runs as segments"
        evidence = "the step ran as jit_segment Tasks: dygrad.jit found host reads in it, so its Python runs every call"
        fix = ("dg.jit.explain(step, *args) names each cut with its line: move those reads (.item(), bool(t), "
               "printing, nonzero) out of the step or every N steps, and the step replays with no Python")
    else:
        title = "Compile the step with dygrad.jit"
        evidence = (f"over {ops:.0f} ops a step, each is a Python call and a dispatch, while dygrad.jit would replay "
                    "the step as one Task")
        fix = ("wrap the whole step (forward, backward, optimizer step, zero_grad) in dg.jit(step) or "
               "dg.compile(step), or train with --jit (docs/jit.md)")
    return _advice("jit", title, _severity(fraction), f"host-bound idle is {fraction:.0%} of the step; " + evidence,
                   {"host_bound_fraction": fraction, "ops_per_step": ops}, _speedup(fraction), fix)


def rule_data_wait(result, summary):
    fraction = summary["breakdown"].get("fractions", {}).get("data_wait", 0.0)
    if fraction < DATA_WAIT_FRACTION:
        return None
    return _advice(
        "data_wait", "The step waits for the data loader", _severity(fraction),
        f"data wait is {fraction:.0%} of the step", {"data_wait_fraction": fraction,
                                                    "data_wait_ms": summary["breakdown"].get("buckets_ns", {})
                                                    .get("data_wait", 0) / 1e6},
        _speedup(fraction),
        "prefetch batches (DataLoader num_workers / prefetch), pre-tokenise the corpus, and build batches with "
        "from_numpy (shares memory) instead of Python lists")


def rule_exposed_comm(result, summary):
    """Communication the compute did not hide (data parallel's all-reduces after backward ended)."""
    bd = summary["breakdown"]
    fraction = bd.get("fractions", {}).get("exposed_comm", 0.0)
    if fraction < EXPOSED_COMM_FRACTION:
        return None
    comms = [r for r in result.ranges if r.kind == "comm"]
    exposed = bd.get("buckets_ns", {}).get("exposed_comm", 0)
    overlapped = bd.get("overlapped_comm_ns", 0)
    hidden = overlapped / (overlapped + exposed) if overlapped + exposed else 0.0
    last = max(comms, key=lambda r: r.end_ns) if comms else None
    evidence = (f"exposed communication is {fraction:.0%} of the step ({exposed / 1e6:.2f} ms); compute hid "
                f"{hidden:.0%} of the communication time")
    if last is not None:
        evidence += f"; the last operation to finish was {last.name} ({last.duration_ns / 1e6:.2f} ms)"
    return _advice(
        "exposed_comm", "Communication is not hidden by compute", _severity(fraction), evidence,
        {"exposed_comm_fraction": fraction, "exposed_comm_ms": exposed / 1e6, "overlapped_comm_ms": overlapped / 1e6,
         "comm_ops": len(comms), "last_comm": last.name if last else None},
        _speedup(fraction),
        "DistributedDataParallel: a smaller bucket_cap_mb so buckets start while backward still runs (the bucket "
        "launched last, after the whole backward, is exposed), gradient_as_bucket_view=True (no copies into and out "
        "of the buckets), no_sync() on accumulation micro-steps, or a larger micro-batch per rank (more compute per "
        "byte communicated)")


# Composed forms of the fused ops, as regular expressions over the step's op names joined by spaces (one host
# thread, issue order). Views (slicing, transpose) issue no op and do not appear.
FUSION_PATTERNS = {
    # RMSNorm: mean of squares, + eps, rsqrt, scale (LayerNorm, which subtracts the mean first, is not one).
    "rms_norm": ("F.rms_norm (or nn.RMSNorm)",
                 r"(?<!sum div_scalar add )(?:pow_scalar|mul) sum (?:div_scalar |mul_scalar )?add_scalar rsqrt mul"),
    "rope": ("F.rotary_position_embedding", r"mul mul (?:add|sub|rsub_scalar|neg) (?:\S+ ){0,1}mul mul add cat"),
    "swiglu": ("F.swiglu", r"silu (?:matmul )?mul"),
    "attention": ("F.scaled_dot_product_attention",
                  r"matmul (?:div_scalar |mul_scalar )?(?:masked_fill |add |where )?softmax (?:\S+ ){0,1}matmul"),
    "cross_entropy": ("F.cross_entropy", r"log_softmax (?:\S+ ){0,2}(?:gather|index|index_select)"),
}


def _find_composed(ops, pattern):
    """Matches of `pattern` in each host thread's op-name sequence: a list of op lists."""
    by_thread = {}
    for op in ops:
        by_thread.setdefault(op.host_thread, []).append(op)
    found = []
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda op: op.seq)
        starts, text = [], []
        offset = 0
        for op in thread_ops:
            starts.append(offset)
            text.append(op.name)
            offset += len(op.name) + 1
        joined = " ".join(text)
        for m in re.finditer(r"(?:^| )(" + pattern + r")(?= |$)", joined):
            first = bisect.bisect_right(starts, m.start(1)) - 1
            count = len(m.group(1).split(" "))
            found.append(thread_ops[first:first + count])
    return found


def rule_unfused(result, summary):
    ops = step_ops(result)
    num_steps = max(1, summary["steps"]["count"])
    step_ns = _total_step_ns(result)
    with_backward = any(op.name.endswith("_backward") for op in ops)
    factor = BACKWARD_FACTOR if with_backward else 1.0
    found = []
    for name, (fused, pattern) in FUSION_PATTERNS.items():
        matches = _find_composed(ops, pattern)
        per_step = len(matches) / num_steps
        if per_step < FUSION_MIN_PER_STEP:
            continue
        # The fused op still does the GEMMs; it saves the other ops' passes over memory (k of them become one).
        passes = [[op for op in match if op.name != "matmul"] for match in matches]
        cost = sum(_op_cost_ns(op) for match in matches for op in match)
        reducible = sum(_op_cost_ns(op) for ops_of in passes for op in ops_of)
        passes_each = sum(len(p) for p in passes) / len(passes)
        ops_each = sum(len(m) for m in matches) / len(matches)
        share = cost / step_ns if step_ns else 0.0
        saved = min(0.99, factor * reducible * (1 - 1 / passes_each) / step_ns) if step_ns else 0.0
        found.append(_advice(
            f"unfused_{name}", f"{name} composed from {ops_each:.0f} ops: use {fused}", _severity(saved),
            f"{per_step:.3g} composed {name} per step ({ops_each:.0f} ops each: "
            f"{' '.join(op.name for op in matches[0])}) take {share:.1%} of the step",
            {"per_step": per_step, "ops_each": ops_each, "share_of_step": share, "ms_per_step": cost / 1e6 / num_steps,
             "saved_fraction": saved},
            f"one pass over memory instead of {passes_each:.0f} (GEMMs unchanged)"
            + (", backward included" if with_backward else "") + ": " + _speedup(saved),
            f"call {fused}" + (" (dygrad.models.llama: fused=True)" if name != "cross_entropy" else "")))
    return found


def rule_copies(result, summary):
    copies = summary["copies"]
    num_steps = max(1, summary["steps"]["count"])
    ops = step_ops(result)
    total_bytes = sum(op.bytes for op in ops) / num_steps
    if not total_bytes or copies["bytes_per_step"] < COPY_MIN_BYTES_PER_STEP:
        return None
    fraction = copies["bytes_per_step"] / total_bytes
    if fraction < COPY_BYTES_FRACTION:
        return None
    copy_cost = sum(_op_cost_ns(op) for op in ops if op.name == "copy") / _total_step_ns(result)
    return _advice(
        "copies", "Copies move a large share of the bytes", _severity(copy_cost),
        f"copy ops move {copies['bytes_per_step'] / MIB:.1f} MiB per step ({fraction:.0%} of all bytes the ops "
        f"move) in {copies['count_per_step']:.3g} copies, {copy_cost:.1%} of the step",
        {"copy_bytes_per_step": copies["bytes_per_step"], "copy_fraction_of_bytes": fraction,
         "copies_per_step": copies["count_per_step"], "copy_share_of_step": copy_cost},
        _speedup(copy_cost),
        "drop needless .contiguous() (dygrad kernels take strided inputs; check is_contiguous() first), update in "
        "place (add_, mul_), build tensors with from_numpy (no copy)")


def rule_device_copies(result, summary):
    """Copies between the host and a device (copy_device Tasks, docs/devices.md) every step: on a GPU each crosses
    PCIe at a fraction of device memory's bandwidth, and a copy to the host is a sync the program then waits for."""
    ops = [op for op in step_ops(result) if op.name == "copy_device"]
    if not ops:
        return None
    num_steps = max(1, summary["steps"]["count"])
    step_ns = _total_step_ns(result)
    per_step = len(ops) / num_steps
    nbytes = sum(op.bytes for op in ops) / 2 / num_steps  # the cost counts each byte read and written
    share = sum(_op_cost_ns(op) for op in ops) / step_ns if step_ns else 0.0
    if per_step < DEVICE_COPIES_PER_STEP and share < DEVICE_COPY_SHARE:
        return None
    return _advice(
        "device_copies", "Tensors cross between the host and a device every step", _severity(share),
        f"{per_step:.3g} copies between devices a step ({nbytes / MIB:.2f} MiB), {share:.1%} of the step; "
        "small ones cost a launch and a transfer each, and a copy to the host is a sync point",
        {"device_copies_per_step": per_step, "device_copy_bytes_per_step": nbytes, "device_copy_share_of_step": share},
        _speedup(share),
        "create tensors on the device (device= in the factories, Module.to(device) once), move each batch with one "
        ".to(device, non_blocking=True) from pinned memory (DataLoader(pin_memory=True)), and read values back "
        "(.item(), .cpu()) every N steps instead of every step")


def _idle_after_syncs(result, syncs):
    """Device idle from each sync's end to the next device span's begin (at most to its step's end): the refill of
    the queue the sync drained."""
    begins = sorted(op.device_begin_ns for op in result.ops if op.device_thread >= 0)
    step_ends = [end for _, end in step_windows(result)]
    idle = 0
    for r in syncs:
        i = bisect.bisect_left(begins, r.end_ns)
        step = bisect.bisect_right(step_ends, r.end_ns)
        limit = step_ends[step] if step < len(step_ends) else r.end_ns
        if i < len(begins):
            idle += max(0, min(begins[i], limit) - r.end_ns)
    return idle


def _scalar_reads(result, summary):
    return sum(n for name, n in summary["syncs"]["by_name"].items() if name in SCALAR_READS)


def rule_python_reductions(result, summary):
    num_steps = max(1, summary["steps"]["count"])
    reads_per_step = _scalar_reads(result, summary) / num_steps
    windows = step_windows(result)
    selections = sum(1 for r in result.ranges if r.kind == "host_op" and r.name in ELEMENT_SELECTIONS
                     and windows[0][0] <= r.begin_ns < windows[-1][1]) / num_steps
    iterations = sum(1 for r in result.ranges if r.kind == "host_op" and r.name in ITERATIONS
                     and windows[0][0] <= r.begin_ns < windows[-1][1])
    tiny = [op for op in step_ops(result) if op.bytes <= TINY_OP_BYTES]
    tiny_per_step = len(tiny) / num_steps
    many_reads = reads_per_step >= SCALAR_READS_PER_STEP
    element_wise = tiny_per_step >= ELEMENT_OPS_PER_STEP and (selections >= ELEMENT_OPS_PER_STEP or iterations > 0)
    if not (many_reads or element_wise):
        return None
    step_ns = _total_step_ns(result)
    reads = [r for r in sync_ranges(result) if r.name in SCALAR_READS]
    cost = sum(r.end_ns - r.begin_ns for r in reads) + _idle_after_syncs(result, reads) + \
        (sum(_op_cost_ns(op) for op in tiny) if element_wise else 0)
    saved = min(cost / step_ns, 0.99) if step_ns else 0.0
    return _advice(
        "python_reductions", "A reduction is done in Python, element by element", _severity(saved),
        f"per step: {reads_per_step:.3g} scalar reads (item/tolist/bool/float), {selections:.3g} element selections "
        f"t[i] and {tiny_per_step:.3g} tiny ops (<= {TINY_OP_BYTES} bytes); with their waits {saved:.0%} of the step",
        {"scalar_reads_per_step": reads_per_step, "element_selections_per_step": selections,
         "tiny_ops_per_step": tiny_per_step, "share_of_step": saved},
        _speedup(saved),
        "reduce with tensor ops (t.sum(), t.amax(), dg.where) and read one scalar at the end, not Python's "
        "sum()/max() over a tensor or a loop of .item()")


def rule_syncs(result, summary):
    syncs = summary["syncs"]
    num_steps = max(1, summary["steps"]["count"])
    non_scalar = syncs["per_step"] - _scalar_reads(result, summary) / num_steps
    # Many scalar reads are the python_reductions finding, and in synchronize mode every op syncs (that finding
    # is synchronize_mode's); this one is about the other syncs, or a few reads.
    if result.context.get("synchronize"):
        return None
    if syncs["per_step"] <= MAX_SYNCS_PER_STEP or (non_scalar <= MAX_SYNCS_PER_STEP and
                                                   rule_python_reductions(result, summary)):
        return None
    idle = _idle_after_syncs(result, sync_ranges(result))
    step_ns = _total_step_ns(result)
    fraction = idle / step_ns if step_ns else 0.0
    names = ", ".join(f"{name} x{n / num_steps:.3g}" for name, n in sorted(syncs["by_name"].items(),
                                                                        key=lambda kv: -kv[1]))
    return _advice(
        "syncs_in_step", "The host blocks on the device inside the step", _severity(fraction),
        f"{syncs['per_step']:.3g} syncs per step ({names}); each drains the queue, and the device then idles "
        f"until the host refills it: {fraction:.1%} of the step",
        {"syncs_per_step": syncs["per_step"], "by_name_per_step": {k: v / num_steps for k, v in
                                                                   syncs["by_name"].items()},
         "idle_after_syncs_fraction": fraction},
        _speedup(fraction),
        "keep values on the device until the step ends (accumulate the loss as a tensor, log every N steps), "
        "and remove dg.synchronize() / .item() / .numpy() / if tensor: from the step")


# --- memory rules -----------------------------------------------------------------------------------------------

def rule_activations(result, summary):
    memory = summary["memory"]
    peak, activation = memory["peak_allocated"], memory["at_peak"].get("activation", 0)
    if peak < ACTIVATION_MIN_BYTES or activation / peak < ACTIVATION_SHARE:
        return None
    share = activation / peak
    numbers = {"peak_allocated": peak, "activation_at_peak": activation, "activation_share": share}
    evidence = f"activations are {activation / MIB:.1f} MiB, {share:.0%} of the {peak / MIB:.1f} MiB peak"
    fix = ("activation checkpointing (recompute) of the transformer blocks, a smaller micro-batch with gradient "
           "accumulation, or the fused ops (they save fewer intermediates)")
    theoretical = (memory.get("theoretical") or {}).get("activation")
    if theoretical:
        numbers["activation_theoretical"] = theoretical
        evidence += f" (the model's saved-for-backward estimate: {theoretical / MIB:.1f} MiB)"
    saved = min(activation, theoretical) if theoretical else activation
    return _advice(
        "activation_memory", "Activations dominate peak memory", _severity(share / 2), evidence, numbers,
        f"recomputing each block in backward keeps only block inputs: up to ~{saved / MIB:.0f} MiB "
        f"({saved / peak:.0%} of the peak) less, for about one extra forward (HFU rises, MFU falls ~25%)", fix)


def rule_sharding(result, summary):
    """Several ranks, given the model: the sharding level (distributed/sharding.py) the memory calls for. With a memory
    limit the measured peak is above the headroom suggest_sharding keeps: the least sharded level whose estimate fits
    it. Without one: data parallel whose peak is mostly model state, and what each level would take off it. The
    estimates come from the unsharded step's dry run; they are anchored on the measured peak: each level's is the
    measured peak plus its estimated difference from the current level's (what the dry run cannot see - a host
    running ahead, the process's other tensors, another moment of the peak - is common to every level)."""
    from ..distributed.sharding import HEADROOM, LEVELS, suggest_sharding
    memory = summary.get("memory") or {}
    info = memory.get("sharding")
    if not info or not info.get("estimates"):
        return None
    level, limit = info["level"], info["limit"]
    peak, at_peak = memory["peak_allocated"], memory.get("at_peak") or {}
    shift = peak - info["estimates"][level]
    estimates = {lv: max(0, e + shift) for lv, e in info["estimates"].items()}
    state = sum(at_peak.get(c, 0) for c in ("parameter", "gradient", "optimizer_state"))
    described = ", ".join(f"{lv} {estimates[lv] / MIB:.1f}" for lv in LEVELS)
    numbers = {"level": level, "world_size": info["world_size"], "peak_allocated": peak, "limit": limit,
               "model_state_at_peak": state, "estimates": estimates, "measured_minus_estimate": shift}
    fix_tail = ("(dg.distributed.optim.ZeroRedundancyOptimizer for zero1; dg.distributed.fsdp.fully_shard per "
                "block then the root for zero2 (reshard_after_forward=False) and fsdp; the training CLI's --shard)")
    if limit:
        if peak <= HEADROOM * limit:
            return None
        suggested, why = suggest_sharding(estimates, limit)
        evidence = (f"the per-rank peak {peak / MIB:.1f} MiB is {peak / limit:.0%} of the {limit / MIB:.1f} MiB "
                    f"memory limit (training at level {level}, {info['world_size']} ranks)")
        if suggested is None:
            return _advice("sharding", "No sharding level fits the memory limit", "high", evidence + "; " + why,
                           numbers, "fitting the limit", "more ranks, a smaller micro-batch with gradient "
                           "accumulation, recompute or bf16 " + fix_tail)
        if LEVELS.index(suggested) <= LEVELS.index(level):
            return None  # a more sharded level is not what the estimate says: leave it to the other memory rules
        numbers["suggested"] = suggested
        return _advice("sharding", f"Shard at level {suggested} to fit the memory limit", "high", evidence, numbers,
                       f"per-rank peak ~{estimates[suggested] / MIB:.1f} MiB (estimated; {why})",
                       f"train at level {suggested} " + fix_tail)
    if level != "none" or not peak or state / peak < MODEL_STATE_SHARE:
        return None
    smallest = min(LEVELS[1:], key=lambda lv: estimates[lv])
    saved = max(0, peak - estimates[smallest])
    if saved <= 0:
        return None
    numbers["suggested"] = smallest
    # no limit is at stake: an opportunity (a larger micro-batch per rank, a larger model), never "high"
    return _advice("sharding", "Model state dominates the per-rank peak",
                   "medium" if saved / peak >= MEDIUM_GAIN else "low",
                   f"parameters, gradients and optimizer state are {state / MIB:.1f} MiB, {state / peak:.0%} of the "
                   f"{peak / MIB:.1f} MiB per-rank peak of data parallel over {info['world_size']} ranks "
                   f"(estimated per-rank peaks, MiB: {described})",
                   numbers, f"up to ~{saved / MIB:.0f} MiB ({saved / peak:.0%}) less per rank at level {smallest}, for "
                   f"more communication (an all-gather of each block's parameters per pass)",
                   "shard the optimizer state (zero1), also gradients (zero2) or also parameters (fsdp) " + fix_tail)


def rule_fragmentation(result, summary):
    at_peak = summary["memory"]["at_peak"]
    fragmentation = at_peak.get("fragmentation", 0)
    reserved = summary["memory"]["peak_allocated"] + fragmentation
    if fragmentation < FRAGMENTATION_MIN_BYTES or not reserved or fragmentation / reserved < FRAGMENTATION_SHARE:
        return None
    share = fragmentation / reserved
    return _advice(
        "fragmentation", "The allocator holds much more than is in use", _severity(share),
        f"at the peak {fragmentation / MIB:.1f} MiB of the {reserved / MIB:.1f} MiB reserved ({share:.0%}) are "
        f"cached blocks no live tensor uses",
        {"fragmentation_bytes": fragmentation, "reserved_at_peak": reserved, "fragmentation_share": share},
        f"reserved memory could shrink by up to {fragmentation / MIB:.0f} MiB ({share:.0%})",
        "keep tensor shapes constant across steps (pad variable lengths to buckets), release large temporaries "
        "before the peak, or dg.empty_cache() after a phase with different shapes (e.g. evaluation)")


def rule_leaks(result, summary):
    """Tensors kept across steps that should not be (dygrad.profiler.memtools.find_leaks): one finding each."""
    leaks = summary.get("leaks")
    if leaks is None:
        from .memtools import find_leaks
        leaks = find_leaks(result)
    out = []
    peak = summary.get("memory", {}).get("peak_allocated") or 0
    for leak in leaks:
        grows = leak["bytes_per_step"]
        share = grows / peak if peak else 0.0
        others = ", ".join(f"{site} ({b / MIB:.2f} MiB)" for site, b in leak["other_sites"][:3])
        what = ("the output made here is kept alive from every step (appended to a list or stored)"
                if leak["kind"] == "output kept" else
                "the tensor made here is kept from every step and keeps alive the graph behind it: "
                f"{leak['tensors_per_step']:.0f} buffers per step" + (f", made at {others}" if others else ""))
        out.append(_advice(
            "memory_leak", f"Memory grows every step: {leak['site']}",
            "high" if share >= 0.05 else "medium" if share >= 0.01 else "low",
            f"{leak['site']} ({leak['function']}): {what}; {leak['bytes_per_step'] / MIB:.2f} MiB kept per step, "
            f"{leak['bytes'] / MIB:.2f} MiB held at the end of the profile (steps {leak['steps']})",
            {"bytes_per_step": leak["bytes_per_step"], "bytes_held": leak["bytes"], "steps": len(leak["steps"]),
             "tensors_per_step": leak["tensors_per_step"]},
            f"{leak['bytes_per_step'] / MIB:.2f} MiB less per step, and no out-of-memory after enough steps",
            "keep numbers, not tensors: loss.item() (or .detach()) before storing a loss, output.detach() (or a "
            "host copy) before appending an output; compute evaluation losses under dg.no_grad()"))
    return out


def rule_bf16(result, summary):
    """float32 GEMMs on a CPU with AVX512-BF16 or AMX: recommend bfloat16 autocast; bfloat16 on a CPU without
    either: warn (its GEMMs convert to float32 there and run slower than float32's)."""
    flops = summary.get("flops", {})
    cpu, dtype = flops.get("cpu"), flops.get("dtype")
    if not cpu or dtype not in ("float32", "bfloat16"):
        return None
    native = cpu["avx512_bf16"] or any(f.startswith("amx_bf16") for f in cpu["amx"])
    # below the avx512 kernel level (DYGRAD_CPU_ISA) bf16 GEMMs convert to float32, as on a CPU without those
    native = native and (flops.get("kernel_isa") or ["avx512"])[0] in ("avx512", "native")
    total = _total_step_ns(result)
    gemm = sum(_op_cost_ns(op) for op in step_ops(result) if op.name in GEMM_OPS)
    share = gemm / total if total else 0.0
    features = f"{cpu['model']}: avx512_bf16 {'yes' if cpu['avx512_bf16'] else 'no'}, amx {', '.join(cpu['amx']) or 'none'}"
    numbers = {"gemm_share_of_step": share, "dtype": dtype, "avx512_bf16": cpu["avx512_bf16"], "amx": cpu["amx"]}
    if dtype == "float32" and native and share >= BF16_GEMM_SHARE:
        saving = share * (1 - 1 / BF16_GEMM_SPEEDUP)
        return _advice(
            "bf16", "GEMMs run in float32 on a CPU with bfloat16 instructions", _severity(saving),
            f"GEMMs take {share:.0%} of the step in float32; {features}", numbers, _speedup(saving),
            "train under dg.autocast('cpu', dtype=dg.bfloat16) (python3 -m dygrad.train --dtype bf16), or "
            "model.to(dg.bfloat16) with an AdamW master-weights group (--dtype bf16-pure); docs/mixed-precision.md")
    if dtype == "bfloat16" and not native:
        return _advice(
            "bf16", "bfloat16 on a CPU without bfloat16 instructions", "medium" if share >= BF16_GEMM_SHARE else "low",
            f"the run computes in bfloat16 but the CPU has neither AVX512-BF16 nor AMX ({features}): its GEMMs "
            f"({share:.0%} of the step) convert every tile to float32", numbers,
            "float32 avoids the conversions (no estimate: measure both)",
            "train in float32 on this machine (drop dg.autocast / model.to(dg.bfloat16))")
    return None


def slow_kernels(result, summary):
    """Per op name over the profiled steps, the ops that run far below the machine's roofline: a list of
    {"op", "share", "efficiency", "flops_per_s", "bytes_per_s", "bound", "device_ns", "roofline_ns"}, largest share
    first (empty without a peak and a bandwidth in the summary)."""
    flops = summary.get("flops", {})
    peak, bandwidth = flops.get("peak_flops_per_s"), flops.get("memory_bandwidth_bytes_per_s")
    total = _total_step_ns(result)
    if not peak or not bandwidth or not total:
        return []
    per_op = {}
    for op in step_ops(result):
        if op.device_thread < 0 or op.name.startswith("comm_"):  # communication waits; it does not compute
            continue
        entry = per_op.setdefault(op.name, [0, 0.0, 0.0])
        entry[0] += op.device_end_ns - op.device_begin_ns
        entry[1] += op.flops
        entry[2] += op.bytes
    slow = []
    for name, (device_ns, op_flops, op_bytes) in per_op.items():
        compute_ns, memory_ns = op_flops / peak * 1e9, op_bytes / bandwidth * 1e9
        roofline_ns = max(compute_ns, memory_ns)
        if device_ns <= 0 or device_ns / total < SLOW_KERNEL_SHARE or roofline_ns >= SLOW_KERNEL_EFFICIENCY * device_ns:
            continue
        slow.append({"op": name, "share": device_ns / total, "efficiency": roofline_ns / device_ns,
                     "flops_per_s": op_flops / device_ns * 1e9, "bytes_per_s": op_bytes / device_ns * 1e9,
                     "bound": "compute" if compute_ns >= memory_ns else "memory", "device_ns": device_ns,
                     "roofline_ns": roofline_ns})
    return sorted(slow, key=lambda k: -k["share"])


def rule_slow_kernels(result, summary):
    """Ops whose kernels run far below the roofline (the GEMM peak the summary measured, and the memory bandwidth),
    named with their share of the step: on a CPU whose kernels run below its level (DYGRAD_CPU_ISA, a plugin that
    did not load) the fix is the level; else the kernel itself."""
    slow = slow_kernels(result, summary)
    if not slow:
        return None
    flops = summary["flops"]
    peak, bandwidth = flops["peak_flops_per_s"], flops["memory_bandwidth_bytes_per_s"]
    total = _total_step_ns(result)
    saving = sum(max(0.0, k["device_ns"] - k["roofline_ns"] / SLOW_KERNEL_TARGET) for k in slow) / total

    def describe(k):
        speed = (f"{k['flops_per_s'] / 1e9:.1f} GFLOP/s, {k['efficiency']:.0%} of the {peak / 1e9:.0f} GFLOP/s GEMM peak"
                 if k["bound"] == "compute" else
                 f"{k['bytes_per_s'] / 1e9:.1f} GB/s, {k['efficiency']:.0%} of the {bandwidth / 1e9:.1f} GB/s memory bandwidth")
        return f"{k['op']} ({k['share']:.0%} of the step at {speed})"

    isa, note = (flops.get("kernel_isa") or ["", ""])[:2]
    levels = flops.get("kernel_levels") or []
    below = bool(levels) and isa in levels and isa != levels[-1]
    if below:
        fix = (f"the kernels run at the {isa} level, and this CPU runs {levels[-1]} ({note}): unset DYGRAD_CPU_ISA, or "
               f"reinstall dygrad so that its kernel plugins sit beside libdygrad (docs/ops.md, 'One binary for every CPU')")
    else:
        fix = ("the kernels themselves are slow on this CPU: measure each against torch with python3 bench/sweep_perf.py "
               "--filter OP and report it; meanwhile the unfused path (model fused=False) may be faster for those ops")
    numbers = {"ops": slow, "peak_flops_per_s": peak, "memory_bandwidth_bytes_per_s": bandwidth, "kernel_isa": isa,
               "kernel_levels": levels}
    return _advice("slow_kernels", "Kernels far below the machine's roofline", _severity(saving),
                   "; ".join(describe(k) for k in slow) + f" (kernel level: {isa or 'unknown'})", numbers,
                   _speedup(saving) + f" if they reached {SLOW_KERNEL_TARGET:.0%} of it", fix)


RULES = (rule_synchronize, rule_deterministic, rule_host_bound, rule_jit, rule_data_wait, rule_exposed_comm,
         rule_unfused, rule_copies, rule_device_copies, rule_python_reductions, rule_syncs, rule_activations, rule_sharding, rule_fragmentation, rule_leaks, rule_bf16,
         rule_slow_kernels)


def advise(result, summary=None):
    """The findings for one session, most severe first. Without a summary it is built (no model information)."""
    if summary is None:
        from .summary import build_summary
        summary = build_summary(result, advice=False, peak=1.0)
    advice = []
    for rule in RULES:
        found = rule(result, summary)
        advice.extend(found if isinstance(found, list) else [found] if found else [])
    advice.sort(key=lambda a: SEVERITY_ORDER[a["severity"]])
    return advice
