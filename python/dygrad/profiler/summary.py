"""summary.json (docs/profiler-python.md): one profiling session's figures of merit, memory, top ops, syncs,
copies and the advisor's findings; and `write_run_dir`, which writes the whole run directory."""
import bisect
import datetime
import importlib
import importlib.util
import json
import os
import statistics

import dygrad as dg

from . import metrics
from ._result import Range

SUMMARY_VERSION = 1
TOP_OPS = 30
# Ops that only move bytes: `.contiguous()`, `.clone()`, `copy_`, dtype conversions.
COPY_OPS = frozenset({"copy"})


def step_windows(result):
    """[(begin_ns, end_ns)] of the steps: consecutive step markers, or the whole session with fewer than two."""
    markers = list(result.step_markers)
    if len(markers) < 2:
        return [(result.start_ns, result.stop_ns)]
    return list(zip(markers[:-1], markers[1:]))


def in_steps(windows, t):
    """Whether instant t lies in [first step begin, last step end)."""
    return windows[0][0] <= t < windows[-1][1]


def sync_ranges(result):
    """The host's blocking calls (item, numpy, tolist, synchronize, __bool__, ...) that began inside the steps,
    one Range per call: the "sync" ranges one API call recorded (it may wait on the stream more than once) are
    merged into one spanning them, found by the "host_op" range of the same name that contains them."""
    windows = step_windows(result)
    calls = {}  # (thread, name, begin of the enclosing API call) -> [begin, end]
    api = {}  # (thread, name) -> the host_op ranges of that API, by begin
    for r in result.ranges:
        if r.kind == "host_op":
            api.setdefault((r.thread, r.name), []).append(r)
    begins = {key: [r.begin_ns for r in ranges] for key, ranges in api.items()}
    for r in result.ranges:
        if r.kind != "sync" or not in_steps(windows, r.begin_ns):
            continue
        key = (r.thread, r.name)
        enclosing = _innermost_containing(api.get(key, []), begins.get(key, []), r)
        key = (r.thread, r.name, enclosing.begin_ns if enclosing else r.begin_ns)
        span = calls.setdefault(key, [r.begin_ns, r.end_ns])
        span[0], span[1] = min(span[0], r.begin_ns), max(span[1], r.end_ns)
    return sorted((Range("sync", name, thread, begin, end, False)
                   for (thread, name, _), (begin, end) in calls.items()), key=lambda r: r.begin_ns)


def _innermost_containing(ranges, begins, inner):
    """The latest-beginning of `ranges` (sorted by begin, `begins` their begins) that contains `inner`."""
    i = bisect.bisect_right(begins, inner.begin_ns)
    for r in reversed(ranges[max(0, i - 4):i]):
        if r.end_ns >= inner.end_ns:
            return r
    return None


def step_ops(result):
    """The ops enqueued inside the steps, in issue order."""
    windows = step_windows(result)
    return [op for op in result.ops if op.host_thread >= 0 and in_steps(windows, op.enqueue_ns)]


def _syncs(result, num_steps):
    by_name = {}
    for r in sync_ranges(result):
        by_name[r.name] = by_name.get(r.name, 0) + 1
    return {"per_step": sum(by_name.values()) / num_steps, "by_name": by_name}


def _copies(result, num_steps):
    copies = [op for op in step_ops(result) if op.name in COPY_OPS]
    return {"bytes_per_step": sum(op.bytes for op in copies) / num_steps, "count_per_step": len(copies) / num_steps}


def _top_ops(result):
    rows = sorted(result.key_averages(), key=lambda row: row.device_total_ns, reverse=True)[:TOP_OPS]
    return [{"name": row.name, "count": row.count, "device_total_ms": row.device_total_ns / 1e6,
             "device_mean_us": row.device_mean_ns / 1e3, "host_total_ms": row.host_total_ns / 1e6,
             "gflops_per_s": row.flops / row.device_total_ns if row.device_total_ns else 0.0,
             "device_percent": row.device_percent} for row in rows]


def _model_dtype(model):
    for p in (model.parameters() if model is not None else ()):
        return p.dtype
    return None


def _autocast_dtype(result):
    """The lower-precision dtype of the CPU autocast regions entered while `result` was recorded (the
    profiler's context "autocast_dtypes"), bfloat16 first; None when there were none."""
    names = (getattr(result, "context", None) or {}).get("autocast_dtypes") or []
    for name in ("bfloat16", "float16"):
        if name in names:
            return getattr(dg, name)
    return None


def build_summary(result, *, label="", command="", batch_size=None, seq_len=None, ranks=1, model_config=None,
                  model=None, optimizer=None, peak=None, dtype=None, advice=True, memory_estimate=None,
                  bandwidth=None):
    """The summary.json dict of one session. batch_size is per rank; seq_len defaults to the config's;
    model_config (a LlamaConfig, or the model's `.cfg`) gives the model-formula FLOPs for MFU; peak (FLOP/s)
    overrides the calibration GEMM of `dtype` (default: the autocast dtype when the recording ran CPU autocast
    regions, else the model's parameter dtype, else float32).
    advice=False leaves the advisor out (the advisor itself uses that). memory_estimate: a
    dygrad.memory.estimate() result, put beside the measured peak (summary.memory.estimate). bandwidth (bytes/s)
    overrides the measured memory bandwidth (the roofline of memory-bound ops, the slow-kernel rule's)."""
    steps = result.breakdown.get("steps") or []
    step_s = [s["step_ns"] / 1e9 for s in steps] or [(result.stop_ns - result.start_ns) / 1e9]
    num_steps = max(1, len(steps))
    mean_s = statistics.fmean(step_s)
    breakdown = result.breakdown.get("mean") or {}

    config = model_config if model_config is not None else getattr(model, "cfg", None)
    if seq_len is None and config is not None:
        seq_len = getattr(config, "seq_len", None)
    samples_per_s, tokens_per_s = metrics.throughput(batch_size, seq_len, mean_s, ranks)

    compute_dtype = dtype or _autocast_dtype(result) or _model_dtype(model) or dg.float32
    peak_value, peak_source = metrics.peak_flops(compute_dtype, given=peak)
    executed = float(breakdown.get("flops", 0.0))
    model_flops = None
    if config is not None and batch_size is not None and seq_len is not None:
        model_flops = float(metrics.llama_flops_per_token(config, seq_len) * batch_size * seq_len)

    summary = {
        "version": SUMMARY_VERSION,
        "meta": {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "label": label, "command": command, "dygrad_version": dg.__version__,
                 "context": dict(result.context)},
        "steps": {"count": len(steps), "step_time_s": {"mean": mean_s, "median": statistics.median(step_s),
                                                       "min": min(step_s), "max": max(step_s)}},
        "breakdown": breakdown,
        "throughput": {"batch_size": batch_size, "seq_len": seq_len, "ranks": ranks,
                       "samples_per_s": samples_per_s, "tokens_per_s": tokens_per_s},
        "flops": {"executed_per_step": executed, "model_per_step": model_flops, "peak_flops_per_s": peak_value,
                  "dtype": str(compute_dtype).replace("dygrad.", ""), "cpu": metrics.cpu_features(),
                  "peak_source": peak_source, "mfu": metrics.mfu(model_flops, mean_s, peak_value),
                  "hfu": metrics.hfu(executed, mean_s, peak_value) or 0.0,
                  "memory_bandwidth_bytes_per_s": bandwidth or metrics.measure_memory_bandwidth(),
                  "kernel_isa": list(dg.backends.cpu.kernel_isa()[:2]),
                  "kernel_levels": list(dg.backends.cpu.kernel_levels())},
        "memory": metrics.memory_report(result, model, optimizer, batch_size, seq_len),
        "ops": _top_ops(result),
        "syncs": _syncs(result, num_steps),
        "copies": _copies(result, num_steps),
        "advice": [],
    }
    _add_memtools(summary, result, num_steps, memory_estimate)
    _add_sharding(summary, model, optimizer, memory_estimate)
    if advice:
        from .advisor import advise
        summary["advice"] = advise(result, summary)
    return summary


def write_run_dir(result, run_dir, **summary_args):
    """Writes trace.json, op_stats.csv, breakdown.json, summary.json and (when dygrad.profiler.report exists)
    report.html into run_dir; returns the summary."""
    os.makedirs(run_dir, exist_ok=True)
    result.export_chrome_trace(os.path.join(run_dir, "trace.json"))
    result.export_op_stats_csv(os.path.join(run_dir, "op_stats.csv"))
    result.export_breakdown_json(os.path.join(run_dir, "breakdown.json"))
    summary = build_summary(result, **summary_args)
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    _write_report(run_dir)
    return summary


def _write_report(run_dir):
    if importlib.util.find_spec(__package__ + ".report") is None:
        return  # the HTML report is not part of this build
    report = importlib.import_module(__package__ + ".report")
    if hasattr(report, "write_html"):
        report.write_html(run_dir)
    else:
        with open(os.path.join(run_dir, "report.html"), "w") as f:
            f.write(report.render_html(run_dir))


def _add_sharding(summary, model, optimizer, memory_estimate):
    """summary.memory.sharding under several ranks, given the model and the unsharded step's dg.memory.estimate:
    the level the run trains at, the memory limit, and each level's estimated per-rank peak (distributed/sharding.py),
    which the advisor's sharding rule reads. A model already sharded by fully_shard has shards for parameters, so
    only the level is given there."""
    from .. import distributed as dist
    if model is None or not isinstance(summary.get("memory"), dict) or not dist.is_initialized():
        return
    world = dist.get_world_size()
    if world < 2:
        return
    from ..distributed import sharding
    level = sharding.current_level(model, optimizer)
    info = {"level": level, "world_size": world, "limit": dg.get_memory_limit() or None, "estimates": None}
    if memory_estimate is not None and level in ("none", "zero1") and hasattr(memory_estimate, "by_category"):
        info["estimates"] = {lv: e.peak for lv, e in
                             sharding.level_peaks(memory_estimate, model, world_size=world).items()}
    summary["memory"]["sharding"] = info


def _add_memtools(summary, result, num_steps, memory_estimate):
    """summary.json's "modules" (per-module costs per step), "leaks", "gc", and memory.estimate
    (docs/profiler-python.md)."""
    from . import memtools
    rows = memtools.module_costs(result)
    modules = []
    for r in rows[:400]:
        modules.append({"path": r["path"], "type": r["type"], "depth": r["depth"], "id": r["id"], "parent": r["parent"],
                        "forward_ms": r["forward_ns"] / 1e6 / num_steps, "backward_ms": r["backward_ns"] / 1e6 / num_steps,
                        "self_forward_ms": r["self_forward_ns"] / 1e6 / num_steps,
                        "self_backward_ms": r["self_backward_ns"] / 1e6 / num_steps,
                        "forward_tasks": r["forward_tasks"] / num_steps, "backward_tasks": r["backward_tasks"] / num_steps,
                        "forward_peak_bytes": r["forward_peak_bytes"], "backward_peak_bytes": r["backward_peak_bytes"]})
    summary["modules"] = modules
    summary["leaks"] = memtools.find_leaks(result)
    gc = memtools.gc_pauses(result)
    summary["gc"] = {"count": gc["count"], "total_ms": gc["total_ns"] / 1e6, "max_ms": gc["max_ns"] / 1e6,
                     "per_step_ms": gc["per_step_ns"] / 1e6,
                     "fraction_of_step": (gc["per_step_ns"] / summary["breakdown"]["step_ns"]
                                          if summary["breakdown"].get("step_ns") else 0.0),
                     "by_generation": gc["by_generation"]}
    if memory_estimate is not None and isinstance(summary.get("memory"), dict):
        e = memory_estimate._asdict() if hasattr(memory_estimate, "_asdict") else dict(memory_estimate)
        measured = summary["memory"].get("peak_allocated")
        e["error"] = (e["peak"] - measured) / measured if measured else None
        summary["memory"]["estimate"] = e
