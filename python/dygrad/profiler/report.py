"""The self-contained HTML report of a profiler run directory (docs/profiler-python.md, "Report and CLI").

Reads summary.json, breakdown.json and op_stats.csv (trace.json is only linked). Tables are rendered here with
every text escaped; the two charts are drawn into SVG by the inline script from data embedded as JSON, so the
file opens offline: no library, CDN or web font. The loaders and text formatters are shared with the CLI.
"""
import csv
import html
import json
import math
import os
import pickle

BUCKETS = ("compute", "exposed_comm", "data_wait", "host_bound", "other_idle")
BUCKET_LABELS = {"compute": "compute", "exposed_comm": "exposed comm", "data_wait": "data wait",
                 "host_bound": "host-bound idle", "other_idle": "other idle"}
BUCKET_COLORS = {"compute": "#2f6fd0", "exposed_comm": "#8e5cc2", "data_wait": "#e8912d",
                 "host_bound": "#d9493f", "other_idle": "#aab2bf"}
MEMORY_CATEGORIES = ("parameter", "gradient", "optimizer_state", "activation", "communication", "temporary",
                     "other", "scratch", "fragmentation")
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
NOT_RECORDED = "not recorded"

# op_stats.csv columns that hold numbers (op_stats_csv in src/dygrad/profiler/op_stats.cpp writes them).
_CSV_NUMBERS = ("count", "ran", "device_total_ns", "device_mean_ns", "device_min_ns", "device_max_ns",
                "device_percent", "host_total_ns", "host_mean_ns", "flops", "gflops_per_second", "bytes",
                "gbytes_per_second")


class RunDirError(Exception):
    """A run directory lacks a required file or holds one that cannot be read."""


# --- loading -------------------------------------------------------------------------------------------------

def _read_json(run_dir, name):
    path = os.path.join(run_dir, name)
    if not os.path.isfile(path):
        raise RunDirError(f"{path}: not found (is {run_dir} a profiler run directory?)")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise RunDirError(f"{path}: cannot be read as JSON ({e})") from None


def _read_op_stats(path):
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for key in _CSV_NUMBERS:
                try:
                    row[key] = float(row[key]) if row.get(key) not in (None, "") else None
                except ValueError:
                    row[key] = None
            rows.append(row)
    return rows


def load_run(run_dir):
    """{"dir", "summary", "breakdown", "op_rows" (op_stats.csv rows, or None), "has_trace"}; RunDirError when
    summary.json or breakdown.json is missing or unreadable."""
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise RunDirError(f"{run_dir}: not a directory")
    summary = _read_json(run_dir, "summary.json")
    breakdown = _read_json(run_dir, "breakdown.json")
    if not isinstance(summary, dict) or not isinstance(breakdown, dict):
        raise RunDirError(f"{run_dir}: summary.json and breakdown.json must each hold a JSON object")
    csv_path = os.path.join(run_dir, "op_stats.csv")
    try:
        op_rows = _read_op_stats(csv_path) if os.path.isfile(csv_path) else None
    except (OSError, csv.Error, UnicodeDecodeError) as e:
        raise RunDirError(f"{csv_path}: cannot be read as CSV ({e})") from None
    return {"dir": run_dir, "summary": summary, "breakdown": breakdown, "op_rows": op_rows,
            "has_trace": os.path.isfile(os.path.join(run_dir, "trace.json"))}


def get(data, *keys):
    """data[k0][k1]...; None as soon as a level is missing or not a dict."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def ops_by_name(run):
    """Every op of the run, one entry per name: {"count", "ran", "device_total_ns", "host_total_ns", "flops",
    "device_percent"}. From op_stats.csv (all ops, rows per input shape merged) or else summary.ops (top 30)."""
    ops = {}
    if run["op_rows"] is not None:
        for row in run["op_rows"]:
            entry = ops.setdefault(row.get("name") or "?", dict.fromkeys(
                ("count", "ran", "device_total_ns", "host_total_ns", "flops", "device_percent"), 0.0))
            for key in entry:
                entry[key] += row.get(key) or 0.0
        return ops
    for op in run["summary"].get("ops") or []:
        count = _number(op.get("count")) or 0
        device_ns = (_number(op.get("device_total_ms")) or 0) * 1e6
        gflops = _number(op.get("gflops_per_s"))
        ops[op.get("name") or "?"] = {
            "count": count, "ran": count, "device_total_ns": device_ns,
            "host_total_ns": (_number(op.get("host_total_ms")) or 0) * 1e6,
            "flops": gflops * device_ns if gflops is not None else 0.0,
            "device_percent": _number(op.get("device_percent")) or 0.0}
    return ops


def top_ops(run, limit):
    """The ops table: summary.ops when present, else built from op_stats.csv; sorted by device time."""
    ops = [op for op in run["summary"].get("ops") or [] if isinstance(op, dict)]
    if not ops:
        for name, e in ops_by_name(run).items():
            ran = e["ran"] or e["count"]
            ops.append({"name": name, "count": e["count"], "device_total_ms": e["device_total_ns"] / 1e6,
                        "device_mean_us": e["device_total_ns"] / ran / 1e3 if ran else None,
                        "host_total_ms": e["host_total_ns"] / 1e6,
                        "gflops_per_s": e["flops"] / e["device_total_ns"] if e["device_total_ns"] else None,
                        "device_percent": e["device_percent"]})
    ops = sorted(ops, key=lambda op: -(_number(op.get("device_total_ms")) or 0))
    return ops[:limit] if limit is not None else ops


def mean_step(run):
    """The mean step: breakdown.json's "mean", else summary.breakdown."""
    mean = run["breakdown"].get("mean")
    return mean if isinstance(mean, dict) else (run["summary"].get("breakdown") or {})


def bucket_ns(step, bucket):
    return _number(get(step, "buckets_ns", bucket)) or 0.0


def step_ns(step):
    total = _number(get(step, "step_ns"))
    return total if total is not None else sum(bucket_ns(step, b) for b in BUCKETS)


# --- text formatting (shared with the CLI) --------------------------------------------------------------------

def fmt_ms(ns, digits=3):
    ns = _number(ns)
    return NOT_RECORDED if ns is None else f"{ns / 1e6:,.{digits}f} ms"


def fmt_duration_s(seconds):
    seconds = _number(seconds)
    if seconds is None:
        return NOT_RECORDED
    if abs(seconds) >= 1:
        return f"{seconds:,.3f} s"
    if abs(seconds) >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def fmt_bytes(n):
    n = _number(n)
    if n is None:
        return NOT_RECORDED
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def fmt_si(value, unit, digits=3):
    """12.3 TFLOP/s style: value scaled by powers of 1000."""
    value = _number(value)
    if value is None:
        return NOT_RECORDED
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def fmt_pct(fraction, digits=1):
    fraction = _number(fraction)
    return NOT_RECORDED if fraction is None else f"{100 * fraction:.{digits}f}%"


def fmt_rate(value, unit):
    value = _number(value)
    if value is None:
        return f"{unit} {NOT_RECORDED}" if unit else NOT_RECORDED
    return f"{value:,.1f} {unit}".rstrip()


def fmt_value(value):
    """A number from an advice's "numbers": 4 significant digits, thousands separators for large ones."""
    if value is None:
        return NOT_RECORDED
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def sorted_advice(summary):
    advice = [a for a in summary.get("advice") or [] if isinstance(a, dict)]
    return sorted(advice, key=lambda a: SEVERITY_ORDER.get(a.get("severity"), 3))


# --- HTML ------------------------------------------------------------------------------------------------------

def _e(value):
    return html.escape(str(value), quote=True)


def _finite(data):
    """JSON-safe copy: NaN and infinities (which JSON.parse rejects) become null."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {str(k): _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def _embed_json(data):
    text = json.dumps(_finite(data), separators=(",", ":"))
    # Inside <script> only "</script" and "<!--" matter; escaping <, > and & rules both out.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _figure(label, value, note=""):
    note_html = f'<div class="note">{_e(note)}</div>' if note else ""
    missing = " missing" if value == NOT_RECORDED else ""
    return (f'<div class="figure"><div class="label">{_e(label)}</div>'
            f'<div class="value{missing}">{_e(value)}</div>{note_html}</div>')


def _header(run):
    summary = run["summary"]
    meta = summary.get("meta") or {}
    context = meta.get("context") or {}
    created = str(meta.get("created") or NOT_RECORDED).replace("T", " ")
    label = meta.get("label") or os.path.basename(os.path.abspath(run["dir"]))
    chips = "".join(f'<span class="chip">{_e(k)} = {_e(context[k])}</span>' for k in sorted(context)) \
        or f'<span class="chip">context {NOT_RECORDED}</span>'
    trace = ('<a href="trace.json">trace.json</a> (open it in Perfetto or chrome://tracing)'
             if run["has_trace"] else f"trace.json {NOT_RECORDED}")
    return (f'<header><h1>dygrad profile <span class="run-label">{_e(label)}</span></h1>'
            f'<div class="meta">recorded {_e(created)} &middot; dygrad {_e(meta.get("dygrad_version") or "?")}'
            f' &middot; {trace}</div>'
            f'<div class="meta command"><code>{_e(meta.get("command") or "")}</code></div>'
            f'<div class="chips">{chips}</div></header>')


def _overview(run):
    summary, mean = run["summary"], mean_step(run)
    times = get(summary, "steps", "step_time_s") or {}
    count = get(summary, "steps", "count")
    flops = summary.get("flops") or {}
    throughput = summary.get("throughput") or {}
    shape = [f"{k} {throughput[k]}" for k in ("batch_size", "seq_len", "ranks") if throughput.get(k) is not None]
    spread = [_number(times.get(k)) for k in ("median", "min", "max")]
    if all(v is not None and v < 1 for v in spread):  # one unit for the three: "median 49.3 · ... ms"
        spread = "median {:.3g} · min {:.3g} · max {:.3g} ms".format(*(v * 1e3 for v in spread))
    else:
        spread = " · ".join(f"{k} {fmt_duration_s(v)}" for k, v in zip(("median", "min", "max"), spread))
    peak_of = f"{flops['dtype']} peak" if flops.get("dtype") else "peak"  # the GEMM peak of the run's dtype
    mfu_note = f"model FLOPs / {peak_of}" if _number(flops.get("mfu")) is not None else "no model config"
    dominant = mean.get("dominant")
    step_total = step_ns(mean)
    dominant_note = (f"{fmt_pct(bucket_ns(mean, dominant) / step_total)} of the mean step"
                     if dominant in BUCKETS and step_total else "")
    figures = [
        _figure("step time (mean)", fmt_duration_s(times.get("mean")),
                f"{count if count is not None else '?'} steps · {spread}"),
        _figure("tokens/s", fmt_rate(throughput.get("tokens_per_s"), ""),
                " · ".join([fmt_rate(throughput.get("samples_per_s"), "samples/s")] + shape)),
        _figure("MFU", fmt_pct(flops.get("mfu")), mfu_note),
        _figure("HFU", fmt_pct(flops.get("hfu")), f"executed FLOPs / {peak_of}"),
        _figure("peak FLOP/s", fmt_si(flops.get("peak_flops_per_s"), "FLOP/s"),
                f"source: {flops.get('peak_source') or NOT_RECORDED}"),
        _figure("bottleneck", BUCKET_LABELS.get(dominant, dominant or NOT_RECORDED), dominant_note),
    ]
    return f'<section id="overview" class="figures">{"".join(figures)}</section>'


def _legend(items):
    return '<div class="legend">' + "".join(
        f'<span class="key"><span class="swatch" style="background:{color}"></span>{_e(label)}</span>'
        for label, color in items) + "</div>"


def _breakdown_section(run):
    mean = mean_step(run)
    total = step_ns(mean)
    rows = "".join(
        f'<tr><td><span class="swatch" style="background:{BUCKET_COLORS[b]}"></span>{_e(BUCKET_LABELS[b])}</td>'
        f'<td class="num">{_e(fmt_ms(bucket_ns(mean, b)))}</td>'
        f'<td class="num">{_e(fmt_pct(bucket_ns(mean, b) / total if total else None))}</td></tr>'
        for b in BUCKETS)
    extra = (f'<tr class="aside"><td>overlapped comm (hidden by compute)</td>'
             f'<td class="num">{_e(fmt_ms(mean.get("overlapped_comm_ns")))}</td><td></td></tr>'
             f'<tr class="aside"><td>host dispatch</td><td class="num">{_e(fmt_ms(mean.get("host_dispatch_ns")))}'
             f'</td><td></td></tr>'
             f'<tr class="aside"><td>achieved FLOP/s</td>'
             f'<td class="num">{_e(fmt_si(mean.get("achieved_flops_per_second"), "FLOP/s"))}</td><td></td></tr>')
    steps = run["breakdown"].get("steps") or []
    source = "step markers" if run["breakdown"].get("from_markers") else "the whole session (no step markers)"
    definitions = run["breakdown"].get("definitions")
    definitions_html = f'<p class="note">{_e(definitions)}</p>' if isinstance(definitions, str) else ""
    return (f'<section id="breakdown"><h2>Step breakdown</h2>'
            f'<p class="note">{len(steps)} steps from {_e(source)}; each bar is one step\'s wall time split into '
            f'five buckets, the last bar is the mean. Hover a segment for its numbers.</p>'
            f'<div class="chart-row"><div class="chart" id="breakdown-chart" data-drawn="false"></div>'
            f'<table class="numbers" id="breakdown-table"><thead><tr><th>mean step</th><th class="num">time</th>'
            f'<th class="num">% of step</th></tr></thead><tbody>{rows}'
            f'<tr class="total"><td>step</td><td class="num">{_e(fmt_ms(total))}</td><td class="num">100%</td>'
            f'</tr>{extra}</tbody></table></div>'
            f'{_legend((BUCKET_LABELS[b], BUCKET_COLORS[b]) for b in BUCKETS)}{definitions_html}</section>')


def _ops_section(run, limit):
    ops = top_ops(run, limit)
    if not ops:
        return f'<section id="ops"><h2>Top ops</h2><p class="missing">Op statistics {NOT_RECORDED}.</p></section>'
    widest = max(_number(op.get("device_percent")) or 0 for op in ops) or 1

    def cell(value, fmt):
        value = _number(value)
        return f'<td class="num">{_e(fmt(value)) if value is not None else "&ndash;"}</td>'

    rows = []
    for rank, op in enumerate(ops, 1):
        share = _number(op.get("device_percent")) or 0
        rows.append(
            f'<tr><td class="num rank">{rank}</td><td class="op">{_e(op.get("name"))}</td>'
            + cell(op.get("count"), lambda v: f"{v:,.0f}")
            + cell(op.get("device_total_ms"), lambda v: f"{v:,.3f}")
            + cell(op.get("device_mean_us"), lambda v: f"{v:,.1f}")
            + f'<td class="share"><span class="bar" style="width:{100 * share / widest:.1f}%"></span>'
              f'<span class="share-text">{share:.1f}%</span></td>'
            + cell(op.get("host_total_ms"), lambda v: f"{v:,.3f}")
            + cell(op.get("gflops_per_s"), lambda v: f"{v:,.2f}") + "</tr>")
    count = get(run["summary"], "steps", "count")
    return (f'<section id="ops"><h2>Top ops by device time</h2><p class="note">Totals over the '
            f'{_e(count if count is not None else "?")} recorded steps; % of the device time of all ops.</p>'
            f'<table id="ops-table" class="grid">'
            f'<thead><tr><th class="num">#</th><th>op</th><th class="num">calls</th>'
            f'<th class="num">device total (ms)</th><th class="num">device mean (&micro;s)</th>'
            f'<th>% of device time</th><th class="num">host total (ms)</th><th class="num">GFLOP/s</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></section>')


def _memory_split(memory):
    at_peak = memory.get("at_peak") or {}
    theoretical = memory.get("theoretical")
    categories = [c for c in MEMORY_CATEGORIES if c in at_peak or (theoretical and c in theoretical)]
    if not categories:
        return f'<p class="missing">Split at peak {NOT_RECORDED}.</p>'
    values = [_number(at_peak.get(c)) or 0 for c in categories]
    if theoretical:
        values += [_number(theoretical.get(c)) or 0 for c in categories]
    widest = max(values) or 1
    rows = []
    for c in categories:
        measured = _number(at_peak.get(c))
        expected = _number(theoretical.get(c)) if theoretical else None
        bars = f'<span class="bar measured" style="width:{100 * (measured or 0) / widest:.1f}%"></span>'
        if expected is not None:
            bars += f'<span class="bar theoretical" style="width:{100 * expected / widest:.1f}%"></span>'
        excess = _e(fmt_bytes(measured - expected)) if measured is not None and expected is not None else "&ndash;"
        rows.append(f'<tr><td>{_e(c.replace("_", " "))}</td><td class="num">{_e(fmt_bytes(measured))}</td>'
                    f'<td class="num">{_e(fmt_bytes(expected)) if expected is not None else "&ndash;"}</td>'
                    f'<td class="num">{excess}</td>'
                    f'<td class="bars">{bars}</td></tr>')
    theory_note = "" if theoretical else f'<p class="note">Theoretical sizes {NOT_RECORDED} (no model config).</p>'
    return (f'<table id="memory-split" class="grid"><thead><tr><th>category at peak</th><th class="num">measured</th>'
            f'<th class="num">theoretical</th><th class="num">measured &minus; theoretical</th>'
            f'<th>{_legend((("measured", "#2f6fd0"), ("theoretical", "#9bb9e8")))}</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>{theory_note}')


def _memory_section(run):
    memory = run["summary"].get("memory")
    if not isinstance(memory, dict):
        return (f'<section id="memory"><h2>Memory</h2><p class="missing">Memory {NOT_RECORDED} '
                f'(record with profile_memory=True).</p></section>')
    figures = (_figure("peak allocated", fmt_bytes(memory.get("peak_allocated")))
               + _figure("peak reserved", fmt_bytes(memory.get("peak_reserved")))
               + _estimate_figure(memory))
    if _timeline(run["summary"]):
        chart = ('<div class="chart" id="memory-chart" data-drawn="false"></div>'
                 + _legend((("allocated", "#2f6fd0"), ("reserved", "#e8912d"))))
    else:
        chart = f'<p class="missing">Memory timeline {NOT_RECORDED} (record with profile_memory=True).</p>'
    return (f'<section id="memory"><h2>Memory</h2><div class="figures">{figures}</div>{chart}'
            f'<h3>Split at the allocation peak</h3>{_memory_split(memory)}</section>')


# --- memory tools: the dry-run estimate, per-module costs, leaks, GC pauses (docs/profiler-python.md) ---------
def _estimate_figure(memory):
    e = memory.get("estimate")
    if not isinstance(e, dict) or _number(e.get("peak")) is None:
        return ""
    err = _number(e.get("error"))
    by = e.get("by_category") or {}
    parts = ", ".join(f"{c.replace('_', ' ')} {fmt_bytes(v)}" for c, v in by.items() if _number(v))
    note = (f"dygrad.memory.estimate before the run ({'%+.1f%%' % (100 * err) if err is not None else '?'} against "
            f"the measured peak): {parts}")
    return _figure("estimated peak (dry run)", fmt_bytes(e.get("peak")), note)


FLAME_COLORS = ("#2f6fd0", "#e8912d", "#3aa86b", "#c94f6d", "#7b61c4", "#23a3b5", "#b58a23", "#6d7b8d")


def _flame_svg(modules, key, chart_id, width=1000, row_h=18):
    """A flame chart of one phase (forward_ms or backward_ms), nested by module path: each module spans its
    inclusive time, its children laid out inside it in call order. Drawn here (no script needed)."""
    rows = [m for m in modules if isinstance(m, dict) and m.get("id") and (_number(m.get(key)) or 0) > 0]
    if not rows:
        return f'<p class="missing">No {key.split("_")[0]} time recorded in modules.</p>'
    children = {}
    for m in rows:
        children.setdefault(m.get("parent") or 0, []).append(m)
    ids = {m["id"] for m in rows}
    roots = [m for m in rows if (m.get("parent") or 0) not in ids]
    total = sum(m[key] for m in roots) or 1.0
    rects = []
    depth_max = [0]

    def place(m, x0, depth):
        w = width * m[key] / total
        depth_max[0] = max(depth_max[0], depth)
        color = FLAME_COLORS[sum(map(ord, m.get("type") or "")) % len(FLAME_COLORS)]
        name = (m.get("path") or "").split(".")[-1]
        label = _e(name) if w > 7 * len(name) else ""
        rects.append(f'<g><title>{_e(m.get("path"))} ({_e(m.get("type"))}): {m[key]:.3f} ms per step</title>'
                     f'<rect x="{x0:.2f}" y="{depth * row_h}" width="{max(w - 0.5, 0.5):.2f}" height="{row_h - 1}" '
                     f'fill="{color}" class="flame-rect"></rect>'
                     + (f'<text x="{x0 + 3:.2f}" y="{depth * row_h + row_h - 5}" font-size="11" fill="#fff">{label}'
                        f'</text>' if label else "") + '</g>')
        x = x0
        for c in children.get(m["id"], []):
            place(c, x, depth + 1)
            x += width * c[key] / total

    x = 0.0
    for r in roots:
        place(r, x, 0)
        x += width * r[key] / total
    height = (depth_max[0] + 1) * row_h
    return (f'<svg id="{chart_id}" class="flame" data-drawn="true" data-rects="{len(rects)}" viewBox="0 0 {width} '
            f'{height}" width="100%" preserveAspectRatio="none" style="height:{height}px">{"".join(rects)}</svg>')


def _modules_section(summary):
    modules = summary.get("modules")
    if not modules:
        return ('<section id="modules"><h2>Per-module costs</h2><p class="missing">Per-module costs '
                f'{NOT_RECORDED} (record with profile(with_modules=True)).</p></section>')
    rows = []
    for m in modules:
        if not isinstance(m, dict):
            continue
        indent = 12 * (_number(m.get("depth")) or 0)
        rows.append(f'<tr><td style="padding-left:{indent + 4}px">{_e(m.get("path"))}</td><td>{_e(m.get("type"))}</td>'
                    f'<td class="num">{_e(fmt_value(m.get("forward_ms")))}</td>'
                    f'<td class="num">{_e(fmt_value(m.get("backward_ms")))}</td>'
                    f'<td class="num">{_e(fmt_value(m.get("self_forward_ms")))}</td>'
                    f'<td class="num">{_e(fmt_value(m.get("self_backward_ms")))}</td>'
                    f'<td class="num">{_e(fmt_value(m.get("forward_tasks")))}</td>'
                    f'<td class="num">{_e(fmt_value(m.get("backward_tasks")))}</td>'
                    f'<td class="num">{_e(fmt_bytes(m.get("forward_peak_bytes")))}</td>'
                    f'<td class="num">{_e(fmt_bytes(m.get("backward_peak_bytes")))}</td></tr>')
    return ('<section id="modules"><h2>Per-module costs</h2><p class="note">Device time per step of the Tasks each '
            'module\'s forward enqueued and of the backward Tasks of the autograd nodes it recorded (measured on the '
            'stream worker, children included; "self" excludes them), and the highest allocated bytes reached '
            'while it allocated.</p>'
            f'<h3>Forward</h3>{_flame_svg(modules, "forward_ms", "flame-forward")}'
            f'<h3>Backward</h3>{_flame_svg(modules, "backward_ms", "flame-backward")}'
            '<table id="modules-table" class="grid"><thead><tr><th>module</th><th>type</th>'
            '<th class="num">forward ms</th><th class="num">backward ms</th><th class="num">self fwd ms</th>'
            '<th class="num">self bwd ms</th><th class="num">fwd Tasks</th><th class="num">bwd Tasks</th>'
            '<th class="num">fwd peak</th><th class="num">bwd peak</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></section>')


def _leaks_section(summary):
    leaks = summary.get("leaks")
    if leaks is None:
        return ""
    if not leaks:
        return ('<section id="leaks"><h2>Leaks</h2><p class="note" id="no-leaks">No tensor outlived its step '
                'repeatedly (with profile_memory and at least three steps).</p></section>')
    rows = []
    for k in leaks:
        if not isinstance(k, dict):
            continue
        others = ", ".join(f"{site} {fmt_bytes(b)}" for site, b in (k.get("other_sites") or []))
        rows.append(f'<tr><td>{_e(k.get("site"))}</td><td>{_e(k.get("function"))}</td><td>{_e(k.get("kind"))}</td>'
                    f'<td class="num">{_e(fmt_bytes(k.get("bytes_per_step")))}</td>'
                    f'<td class="num">{_e(fmt_bytes(k.get("bytes")))}</td>'
                    f'<td class="num">{_e(fmt_value(k.get("tensors_per_step")))}</td><td>{_e(others)}</td></tr>')
    return ('<section id="leaks"><h2>Leaks</h2><table id="leaks-table" class="grid"><thead><tr><th>made at</th>'
            '<th>function</th><th>kind</th><th class="num">kept per step</th><th class="num">held at end</th>'
            '<th class="num">tensors per step</th><th>also kept (made at)</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></section>')


def _gc_section(summary):
    gc = summary.get("gc")
    if not isinstance(gc, dict):
        return ""
    gens = ", ".join(f"gen {g}: {v.get('count')} ({fmt_value(v.get('ns', 0) / 1e6)} ms)"
                     for g, v in (gc.get("by_generation") or {}).items() if isinstance(v, dict))
    figures = (_figure("GC pauses per step", f"{fmt_value(gc.get('per_step_ms'))} ms",
                       f"{fmt_pct(gc.get('fraction_of_step'))} of the step; {gc.get('count')} pauses" +
                       (f" ({gens})" if gens else ""))
               + _figure("longest GC pause", f"{fmt_value(gc.get('max_ms'))} ms"))
    return (f'<section id="gc"><h2>Python garbage collector</h2><div class="figures">{figures}</div>'
            '<p class="note">Pauses recorded from gc.callbacks on the host track of the trace '
            '("python gc (generation N)").</p></section>')


# --- the allocator snapshot's timeline (dg.memory.dump_snapshot into the run directory) ----------------------------
SNAPSHOT_FILE = "memory_snapshot.pickle"
SNAPSHOT_COLORS = {"parameter": "#2f6fd0", "gradient": "#8e5cc2", "optimizer_state": "#e8912d",
                   "activation": "#3aa37a", "temporary": "#d9493f", "other": "#aab2bf",
                   "scratch": "#c9b037", "communication": "#c25c9b"}


class _PlainUnpickler(pickle.Unpickler):
    """A snapshot holds only dicts, lists, tuples, strings and numbers: refuse anything else (a pickle can run
    code when it names a class)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"a memory snapshot holds no objects of {module}.{name}")


def load_snapshot(path):
    """The snapshot dict of dg.memory.dump_snapshot (torch.cuda.memory's schema), read without running code."""
    with open(path, "rb") as f:
        return _PlainUnpickler(f).load()


def snapshot_timeline(snapshot, max_points=600):
    """Allocated bytes over time by category from a snapshot's trace: (times_s, {category: [bytes]}, allocated),
    downsampled to about max_points points (the maximum of each bucket kept, so the peak shows)."""
    entries = [e for e in (snapshot.get("device_traces") or [[]])[0]
               if isinstance(e, dict) and e.get("action") in ("alloc", "free_completed")]
    if not entries:
        return [], {}, []
    running, rows = {}, []
    for e in entries:
        c = e.get("category", "other")
        running[c] = running.get(c, 0) + (e["size"] if e["action"] == "alloc" else -e["size"])
        rows.append((e.get("time_ns", e.get("time_us", 0) * 1000), e.get("allocated", 0), dict(running)))
    # Bytes live before the oldest entry cannot be attributed: they count as "other".
    base = rows[0][1] - sum(rows[0][2].values())
    step = max(1, math.ceil(len(rows) / max_points))
    picked = [max(rows[i:i + step], key=lambda r: r[1]) for i in range(0, len(rows), step)]
    t0 = picked[0][0]
    cats = [c for c in SNAPSHOT_COLORS if any(c in r[2] for r in picked)] or ["other"]
    if "other" not in cats:
        cats.append("other")
    series = {c: [r[2].get(c, 0) + (base if c == "other" else 0) for r in picked] for c in cats}
    return [(r[0] - t0) / 1e9 for r in picked], series, [r[1] for r in picked]


def _snapshot_svg(times, series, width=900, height=220):
    top = max((sum(v[i] for v in series.values()) for i in range(len(times))), default=0) or 1
    span = (times[-1] - times[0]) or 1
    x = [8 + (width - 16) * (t - times[0]) / span for t in times]
    paths, below = [], [0] * len(times)
    for c, values in series.items():
        above = [b + v for b, v in zip(below, values)]
        pts = [f"{x[i]:.1f},{height - 4 - (height - 8) * above[i] / top:.1f}" for i in range(len(times))]
        back = [f"{x[i]:.1f},{height - 4 - (height - 8) * below[i] / top:.1f}" for i in reversed(range(len(times)))]
        paths.append(f'<polygon points="{" ".join(pts + back)}" fill="{SNAPSHOT_COLORS.get(c, "#777")}" '
                     f'fill-opacity="0.85"><title>{_e(c)}</title></polygon>')
        below = above
    return (f'<svg id="snapshot-chart" viewBox="0 0 {width} {height}" width="100%" role="img" '
            f'aria-label="allocated bytes over time by category">{"".join(paths)}</svg>')


def snapshot_section(snapshot):
    """The report's section for an allocator snapshot: totals (which equal dg.memory_stats() at the dump) and the
    allocated timeline by category, stacked, from its trace."""
    segments = [s for s in snapshot.get("segments") or [] if isinstance(s, dict)]
    reserved = sum(s.get("total_size", 0) for s in segments)
    allocated = sum(b.get("requested_size", 0) for s in segments for b in s.get("blocks") or []
                    if b.get("state") == "active_allocated")
    cached = sum(b.get("size", 0) for s in segments for b in s.get("blocks") or [] if b.get("state") == "inactive")
    figures = (_figure("segments", fmt_value(len(segments))) + _figure("reserved at the dump", fmt_bytes(reserved))
               + _figure("allocated at the dump", fmt_bytes(allocated)) + _figure("cached blocks", fmt_bytes(cached)))
    times, series, _ = snapshot_timeline(snapshot)
    if times:
        peak = max(sum(v[i] for v in series.values()) for i in range(len(times)))
        chart = (_snapshot_svg(times, series) + _legend((c.replace("_", " "), SNAPSHOT_COLORS.get(c, "#777"))
                                                         for c in series)
                 + f'<p class="note">{len(times)} points over {times[-1]:.3f} s; peak {_e(fmt_bytes(peak))} '
                   f'allocated in the trace.</p>')
    else:
        chart = (f'<p class="missing">Allocation trace {NOT_RECORDED} (dg.memory.record_history(enabled="all") '
                 f'before the run).</p>')
    return (f'<section id="snapshot"><h2>Allocator snapshot</h2><p class="note">{_e(SNAPSHOT_FILE)}: '
            f'dg.memory.dump_snapshot; also opens in PyTorch\'s memory viewer.</p><div class="figures">{figures}'
            f'</div>{chart}</section>')


def _snapshot_file_section(run):
    path = os.path.join(run["dir"], SNAPSHOT_FILE)
    if not os.path.isfile(path):
        return ""
    try:
        return snapshot_section(load_snapshot(path))
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, AttributeError) as e:
        return (f'<section id="snapshot"><h2>Allocator snapshot</h2><p class="missing">{_e(path)}: cannot be read '
                f'({_e(e)}).</p></section>')


def _advice_section(summary):
    advice = sorted_advice(summary)
    if not advice:
        return ('<section id="advice"><h2>Advice</h2><p class="missing">No advice: no rule fired '
                '(or the advisor did not run).</p></section>')
    items = []
    for a in advice:
        severity = a.get("severity") if a.get("severity") in SEVERITY_ORDER else "low"
        numbers = a.get("numbers") if isinstance(a.get("numbers"), dict) else {}
        numbers_html = "".join(f'<span class="chip">{_e(k)} = {_e(fmt_value(v))}</span>' for k, v in numbers.items())
        parts = [("evidence", a.get("evidence")), ("expected gain", a.get("expected_gain")), ("fix", a.get("fix"))]
        body = "".join(f'<dt>{_e(k)}</dt><dd>{_e(v)}</dd>' for k, v in parts if v)
        items.append(f'<li class="advice {severity}"><div class="advice-head"><span class="severity {severity}">'
                     f'{_e(severity)}</span><span class="advice-title">{_e(a.get("title") or a.get("rule") or "?")}'
                     f'</span><span class="rule">{_e(a.get("rule") or "")}</span></div><dl>{body}</dl>'
                     f'<div class="chips">{numbers_html}</div></li>')
    return f'<section id="advice"><h2>Advice</h2><ol id="advice-list">{"".join(items)}</ol></section>'


def _host_section(summary):
    syncs, copies = summary.get("syncs"), summary.get("copies")
    if not isinstance(syncs, dict) and not isinstance(copies, dict):
        return ""
    syncs, copies = syncs or {}, copies or {}
    by_name = syncs.get("by_name") or {}
    names = ", ".join(f"{k} {fmt_value(v)}" for k, v in sorted(by_name.items(), key=lambda kv: -(kv[1] or 0)))
    figures = (_figure("host syncs per step", fmt_value(_number(syncs.get("per_step"))),
                       f"by API over the run: {names}" if names else "")
               + _figure("copies per step", fmt_value(_number(copies.get("count_per_step"))),
                         f"{fmt_bytes(copies.get('bytes_per_step'))} per step"))
    return f'<section id="host"><h2>Host synchronisation and copies</h2><div class="figures">{figures}</div></section>'


def _timeline(summary):
    """summary.memory.timeline as [t_s, allocated, reserved] rows of numbers (anything else dropped)."""
    points = get(summary, "memory", "timeline") or []
    return [list(p[:3]) for p in points
            if isinstance(p, (list, tuple)) and len(p) >= 3 and all(_number(v) is not None for v in p[:3])]


def _chart_data(run):
    steps = [{"label": str(s.get("index", i)), "step_ns": step_ns(s),
              "buckets_ns": {b: bucket_ns(s, b) for b in BUCKETS}}
             for i, s in enumerate(run["breakdown"].get("steps") or []) if isinstance(s, dict)]
    mean = mean_step(run)
    return {"buckets": list(BUCKETS), "labels": BUCKET_LABELS, "colors": BUCKET_COLORS,
            "steps": steps, "mean": {"label": "mean", "step_ns": step_ns(mean),
                                     "buckets_ns": {b: bucket_ns(mean, b) for b in BUCKETS}},
            "memory": _timeline(run["summary"])}


def render_html(run_dir, top=30):
    """The report of run_dir as one self-contained HTML page (no network: inline CSS and script)."""
    run = load_run(run_dir)
    summary = run["summary"]
    label = get(summary, "meta", "label") or os.path.basename(os.path.abspath(run["dir"]))
    body = "".join((_header(run), _overview(run), _breakdown_section(run), _ops_section(run, top),
                    _memory_section(run), _snapshot_file_section(run), _modules_section(summary),
                    _leaks_section(summary), _advice_section(summary), _host_section(summary), _gc_section(summary)))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>dygrad profile: {_e(label)}</title><style>{_CSS}</style></head>\n<body>'
            f'<script>{_ERROR_HOOK}</script><main>{body}'
            f'<footer>Generated by dygrad.profiler.report from summary.json, breakdown.json and op_stats.csv '
            f'(docs/profiler-python.md).</footer></main>\n'
            f'<script type="application/json" id="report-data">{_embed_json(_chart_data(run))}</script>\n'
            f'<script>{_SCRIPT}</script>\n</body></html>\n')


def write_html(run_dir, path=None, top=30):
    """Writes render_html(run_dir) to path (default RUN_DIR/report.html) and returns the path."""
    path = os.fspath(path) if path is not None else os.path.join(os.fspath(run_dir), "report.html")
    text = render_html(run_dir, top=top)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


_ERROR_HOOK = """window.onerror = function (message, source, line) {
  document.body.setAttribute("data-error", String(message) + " (line " + line + ")");
};"""

_CSS = """
:root { --ink: #1d2430; --muted: #5d6878; --line: #dde2ea; --panel: #ffffff; --page: #f3f5f8; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--page); color: var(--ink);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 40px; }
header { margin-bottom: 16px; }
h1 { font-size: 24px; margin: 0 0 4px; font-weight: 650; }
h1 .run-label { color: #2f6fd0; }
h2 { font-size: 17px; margin: 0 0 10px; font-weight: 650; }
h3 { font-size: 14px; margin: 18px 0 8px; font-weight: 600; color: var(--muted); }
.meta { color: var(--muted); font-size: 13px; }
.meta.command code { font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace;
                     word-break: break-all; }
a { color: #2f6fd0; }
.chips { margin-top: 8px; display: flex; flex-wrap: wrap; gap: 6px; }
.chip { background: #e8edf5; border-radius: 11px; padding: 2px 10px; font-size: 12px; color: #34405a; }
section { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 16px 18px;
          margin-top: 16px; }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 12px; }
section.figures { background: transparent; border: 0; padding: 0; }
.figure { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
section#memory .figure, section#host .figure { background: #f8f9fb; }
.figure .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.figure .value { font-size: 20px; white-space: nowrap; font-weight: 650; margin: 2px 0; }
.figure .value.missing { font-size: 15px; color: #8a94a6; font-weight: 500; font-style: italic; }
.figure .note, p.note { color: var(--muted); font-size: 12px; }
p.note { margin: 0 0 8px; }
.missing { color: #8a94a6; font-style: italic; }
.chart-row { display: flex; gap: 18px; align-items: flex-start; }
.chart-row .chart { flex: 1 1 auto; min-width: 0; }
.chart svg { display: block; width: 100%; height: auto; }
.chart text { font: 12px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: #4a5466; }
.chart .axis-title { fill: var(--muted); font-size: 12px; }
.chart .bar-total { fill: var(--ink); font-size: 11px; }
.chart .mean-label { font-weight: 700; fill: var(--ink); }
.legend { display: flex; flex-wrap: wrap; gap: 16px; margin: 8px 0 4px; font-size: 13px; }
.legend .key { display: inline-flex; align-items: center; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 6px;
          vertical-align: -1px; }
table { border-collapse: collapse; font-size: 13px; }
table.numbers { flex: 0 0 auto; }
table.numbers td, table.numbers th { padding: 4px 8px; border-bottom: 1px solid var(--line); }
table.numbers tr.total td { font-weight: 650; border-top: 2px solid #b9c2cf; }
table.numbers tr.aside td { color: var(--muted); font-size: 12px; border-bottom: 0; }
table.grid { width: 100%; }
table.grid th, table.grid td { padding: 5px 8px; border-bottom: 1px solid var(--line); text-align: left; }
th { color: var(--muted); font-weight: 600; font-size: 12px; text-align: left; white-space: nowrap; }
td.num, th.num, table.grid td.num, table.grid th.num { text-align: right; font-variant-numeric: tabular-nums;
                                                      white-space: nowrap; }
td.rank { color: #8a94a6; }
td.op { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; }
table.grid tbody tr:hover { background: #f5f8fd; }
td.share { width: 190px; position: relative; }
td.share .bar { display: block; height: 14px; background: #c9daf5; border-radius: 2px; }
td.share .share-text { position: absolute; left: 12px; top: 5px; font-size: 12px;
                       font-variant-numeric: tabular-nums; }
td.bars { width: 300px; }
td.bars .bar { display: block; height: 7px; border-radius: 2px; margin: 1px 0; }
.bar.measured { background: #2f6fd0; }
.bar.theoretical { background: #9bb9e8; }
table#memory-split th .legend { margin: 0; font-weight: 400; }
ol#advice-list { list-style: none; margin: 0; padding: 0; }
li.advice { border: 1px solid var(--line); border-left: 4px solid #aab2bf; border-radius: 6px;
            padding: 10px 14px; margin-bottom: 10px; }
li.advice.high { border-left-color: #d9493f; }
li.advice.medium { border-left-color: #e8912d; }
li.advice.low { border-left-color: #2f6fd0; }
.advice-head { display: flex; align-items: baseline; gap: 10px; }
.advice-title { font-weight: 650; font-size: 15px; }
.advice-head .rule { margin-left: auto; color: #8a94a6; font-size: 12px; font-family: ui-monospace, monospace; }
.severity { text-transform: uppercase; font-size: 11px; font-weight: 700; letter-spacing: .05em; color: #fff;
            border-radius: 3px; padding: 1px 7px; background: #aab2bf; }
.severity.high { background: #d9493f; }
.severity.medium { background: #e8912d; }
.severity.low { background: #2f6fd0; }
dl { display: grid; grid-template-columns: 110px 1fr; gap: 3px 12px; margin: 8px 0 4px; }
dt { color: var(--muted); font-size: 12px; padding-top: 1px; }
dd { margin: 0; }
footer { color: #8a94a6; font-size: 12px; margin-top: 18px; }
"""

# Draws the two charts from #report-data into SVG; each chart gets data-drawn="true" and the count of what it
# drew (data-bars / data-points) so a test can tell the script really ran.
_SCRIPT = r"""
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var data = JSON.parse(document.getElementById("report-data").textContent);

  function node(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function label(parent, x, y, text, attrs) {
    var t = node("text", Object.assign({x: x, y: y}, attrs || {}), parent);
    t.textContent = text;
    return t;
  }
  // A "nice" tick step (1, 2 or 5 times a power of ten) giving about `count` ticks up to `max`.
  function niceStep(max, count) {
    if (!(max > 0)) return 1;
    var raw = max / count, power = Math.pow(10, Math.floor(Math.log10(raw))), r = raw / power;
    return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * power;
  }
  function trim(v) { return String(Number(v.toPrecision(6))); }
  function ms(ns) { return (ns / 1e6).toFixed(ns >= 1e8 ? 1 : ns >= 1e6 ? 2 : 3) + " ms"; }
  function byteUnit(max) {
    var units = [["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]];
    for (var i = 0; i < units.length; i++) if (max >= units[i][1]) return units[i];
    return ["B", 1];
  }
  function svgFor(host, width, height) {
    host.textContent = "";
    return node("svg", {viewBox: "0 0 " + width + " " + height, role: "img"}, host);
  }

  function drawBreakdown(host) {
    var bars = data.steps.concat([data.mean]);
    var W = Math.max(480, host.clientWidth || 860), H = 340, m = {left: 58, right: 8, top: 24, bottom: 44};
    var svg = svgFor(host, W, H), plotW = W - m.left - m.right, plotH = H - m.top - m.bottom;
    var maxNs = Math.max.apply(null, bars.map(function (b) { return b.step_ns; }).concat([0]));
    var step = niceStep(maxNs / 1e6, 5) * 1e6, top = Math.max(step, Math.ceil(maxNs / step - 1e-9) * step);
    var y = function (ns) { return m.top + plotH * (1 - ns / top); };
    for (var v = 0; v <= top + step / 2; v += step) {
      node("line", {x1: m.left, x2: W - m.right, y1: y(v), y2: y(v), stroke: v ? "#e6e9ef" : "#9aa3b2"}, svg);
      label(svg, m.left - 8, y(v) + 4, trim(v / 1e6), {"text-anchor": "end"});
    }
    label(svg, 16, m.top + plotH / 2, "ms per step", {"class": "axis-title", "text-anchor": "middle",
          transform: "rotate(-90 16 " + (m.top + plotH / 2) + ")"});
    // The steps, a gap, then the mean.
    var slots = bars.length + (bars.length > 1 ? 0.6 : 0), slot = plotW / slots;
    var barW = Math.max(2, Math.min(56, slot * 0.68)), every = Math.max(1, Math.ceil(34 / slot));
    var segments = 0;
    bars.forEach(function (bar, i) {
      var isMean = i === bars.length - 1, center = m.left + slot * (i + (isMean && bars.length > 1 ? 1.1 : 0.5));
      var base = 0, total = bar.step_ns || 1;
      data.buckets.forEach(function (b) {
        var ns = bar.buckets_ns[b] || 0;
        if (ns <= 0) return;
        var r = node("rect", {x: center - barW / 2, y: y(base + ns), width: barW,
                              height: Math.max(0, y(base) - y(base + ns)), fill: data.colors[b],
                              "data-bucket": b}, svg);
        node("title", {}, r).textContent = (isMean ? "mean step" : "step " + bar.label) + ": " +
            data.labels[b] + " " + ms(ns) + " (" + (100 * ns / total).toFixed(1) + "%)";
        base += ns;
        segments++;
      });
      if (isMean && bars.length > 1)
        node("line", {x1: center - slot * 0.6, x2: center - slot * 0.6, y1: m.top, y2: m.top + plotH,
                      stroke: "#9aa3b2", "stroke-dasharray": "4 3"}, svg);
      if (isMean || slot >= 34)  // the axis says ms: step bars carry the bare number
        label(svg, center, y(bar.step_ns) - 5, isMean ? ms(bar.step_ns) : trim(+(bar.step_ns / 1e6).toFixed(1)),
              {"class": isMean ? "bar-total mean-label" : "bar-total", "text-anchor": "middle"});
      if (isMean || i % every === 0)
        label(svg, center, m.top + plotH + 16, isMean ? "mean" : bar.label,
              {"text-anchor": "middle", "class": isMean ? "mean-label" : ""});
    });
    label(svg, m.left + (plotW - (bars.length > 1 ? slot * 1.6 : 0)) / 2, H - 6, "step",
          {"class": "axis-title", "text-anchor": "middle"});
    host.setAttribute("data-bars", bars.length);
    host.setAttribute("data-segments", segments);
    host.setAttribute("data-drawn", "true");
  }

  function drawMemory(host) {
    var points = data.memory, W = Math.max(480, host.clientWidth || 1100), H = 300;
    var m = {left: 72, right: 16, top: 18, bottom: 40};
    var svg = svgFor(host, W, H), plotW = W - m.left - m.right, plotH = H - m.top - m.bottom;
    var t0 = points[0][0], t1 = points[points.length - 1][0], span = t1 > t0 ? t1 - t0 : 1;
    var maxBytes = Math.max.apply(null, points.map(function (p) { return Math.max(p[1], p[2]); }).concat([1]));
    var unit = byteUnit(maxBytes), ystep = niceStep(maxBytes / unit[1], 5) * unit[1];
    var top = Math.max(ystep, Math.ceil(maxBytes / ystep - 1e-9) * ystep);
    var x = function (t) { return m.left + plotW * (t - t0) / span; };
    var y = function (b) { return m.top + plotH * (1 - b / top); };
    for (var v = 0; v <= top + ystep / 2; v += ystep) {
      node("line", {x1: m.left, x2: W - m.right, y1: y(v), y2: y(v), stroke: v ? "#e6e9ef" : "#9aa3b2"}, svg);
      label(svg, m.left - 8, y(v) + 4, trim(v / unit[1]) + " " + unit[0], {"text-anchor": "end"});
    }
    var tstep = niceStep(span, 8);
    for (var t = Math.ceil(t0 / tstep) * tstep; t <= t1 + tstep * 1e-6; t += tstep) {
      node("line", {x1: x(t), x2: x(t), y1: m.top + plotH, y2: m.top + plotH + 5, stroke: "#9aa3b2"}, svg);
      label(svg, x(t), m.top + plotH + 18, trim(t), {"text-anchor": "middle"});
    }
    label(svg, m.left + plotW / 2, H - 4, "time since the start of recording (s)",
          {"class": "axis-title", "text-anchor": "middle"});
    function path(index) {
      return points.map(function (p, i) { return (i ? "L" : "M") + x(p[0]).toFixed(1) + "," + y(p[index]).toFixed(1); })
                   .join("");
    }
    var base = y(0).toFixed(1);
    node("path", {d: path(1) + "L" + x(t1).toFixed(1) + "," + base + "L" + x(t0).toFixed(1) + "," + base + "Z",
                  fill: "#2f6fd0", "fill-opacity": 0.12, stroke: "none"}, svg);
    node("path", {d: path(2), fill: "none", stroke: "#e8912d", "stroke-width": 2, "data-series": "reserved"}, svg);
    node("path", {d: path(1), fill: "none", stroke: "#2f6fd0", "stroke-width": 2, "data-series": "allocated"}, svg);
    var peak = points.reduce(function (best, p) { return p[1] > best[1] ? p : best; }, points[0]);
    node("circle", {cx: x(peak[0]), cy: y(peak[1]), r: 4, fill: "#2f6fd0", stroke: "#fff"}, svg);
    var right = x(peak[0]) > m.left + plotW * 0.75;
    label(svg, x(peak[0]) + (right ? -8 : 8), Math.max(y(peak[1]) - 8, m.top + 10),
          "peak allocated " + (peak[1] / unit[1]).toFixed(2) + " " + unit[0] + " at " + +peak[0].toPrecision(3) + " s",
          {"text-anchor": right ? "end" : "start", "class": "bar-total"});
    host.setAttribute("data-points", points.length);
    host.setAttribute("data-series", 2);
    host.setAttribute("data-drawn", "true");
  }

  [["breakdown-chart", drawBreakdown], ["memory-chart", drawMemory]].forEach(function (chart) {
    var host = document.getElementById(chart[0]);
    if (!host) return;
    try {
      chart[1](host);
    } catch (err) {
      host.setAttribute("data-drawn", "false");
      document.body.setAttribute("data-error", chart[0] + ": " + err);
    }
  });
})();
"""
