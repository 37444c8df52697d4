"""The profiler's command line: read run directories (docs/profiler-python.md) and print or compare them.

    python3 -m dygrad.profiler summary RUN_DIR [--top N]
    python3 -m dygrad.profiler diff RUN_A RUN_B [--top N]
    python3 -m dygrad.profiler report RUN_DIR [--output PATH]
    python3 -m dygrad.profiler linearity RUN_DIR [RUN_DIR ...]
    python3 -m dygrad.profiler linearity --ranks 1,2 -- python3 train.py ARGS   (runs it under mpirun at each)
"""
import argparse
import os
import re
import sys

from .report import (BUCKET_LABELS, BUCKETS, MEMORY_CATEGORIES, NOT_RECORDED, RunDirError, bucket_ns, fmt_bytes,
                     fmt_duration_s, fmt_ms, fmt_pct, fmt_rate, fmt_si, fmt_value, get, load_run, mean_step,
                     ops_by_name, sorted_advice, step_ns, top_ops, write_html)


def _table(headers, rows, right=()):
    """Plain-text table; columns whose index is in `right` are right-aligned."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]])


def _num(value, fmt):
    return fmt.format(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _label(run):
    return get(run["summary"], "meta", "label") or os.path.basename(os.path.abspath(run["dir"]))


def _breakdown_rows(step):
    total = step_ns(step)
    rows = [[BUCKET_LABELS[b], f"{bucket_ns(step, b) / 1e6:.3f}",
             fmt_pct(bucket_ns(step, b) / total if total else None)] for b in BUCKETS]
    return rows + [["step", f"{total / 1e6:.3f}", "100.0%"]]


def summarize(run_dir, top=10):
    """The run's summary as text: step time, breakdown, throughput, MFU/HFU, memory, top ops, advice."""
    run = load_run(run_dir)
    summary, mean = run["summary"], mean_step(run)
    meta = summary.get("meta") or {}
    context = meta.get("context") or {}
    times = get(summary, "steps", "step_time_s") or {}
    out = [f"dygrad profile: {_label(run)} ({run['dir']})",
           f"recorded {meta.get('created') or NOT_RECORDED}, dygrad {meta.get('dygrad_version') or '?'}"]
    if meta.get("command"):
        out.append(f"command: {meta['command']}")
    out.append("context: " + (", ".join(f"{k}={context[k]}" for k in sorted(context)) or NOT_RECORDED))
    out.append(f"steps: {get(summary, 'steps', 'count')}, step time mean {fmt_duration_s(times.get('mean'))} "
               f"(median {fmt_duration_s(times.get('median'))}, min {fmt_duration_s(times.get('min'))}, "
               f"max {fmt_duration_s(times.get('max'))})")

    dominant = mean.get("dominant")
    out += ["", f"Step breakdown (mean step; dominant: {BUCKET_LABELS.get(dominant, dominant or NOT_RECORDED)})",
            _table(["bucket", "ms", "% of step"], _breakdown_rows(mean), right=(1, 2)),
            f"overlapped comm {fmt_ms(mean.get('overlapped_comm_ns'))}, host dispatch "
            f"{fmt_ms(mean.get('host_dispatch_ns'))}, "
            f"achieved {fmt_si(mean.get('achieved_flops_per_second'), 'FLOP/s')}"]

    throughput, flops = summary.get("throughput") or {}, summary.get("flops") or {}
    shape = ", ".join(f"{k}={throughput[k]}" for k in ("batch_size", "seq_len", "ranks")
                      if throughput.get(k) is not None)
    out += ["", f"Throughput: {fmt_rate(throughput.get('tokens_per_s'), 'tokens/s')}, "
                f"{fmt_rate(throughput.get('samples_per_s'), 'samples/s')}" + (f" ({shape})" if shape else ""),
            f"FLOPs per step: executed {fmt_si(flops.get('executed_per_step'), 'FLOP')}, "
            f"model {fmt_si(flops.get('model_per_step'), 'FLOP')}; "
            f"peak {fmt_si(flops.get('peak_flops_per_s'), 'FLOP/s')}"
            f" (source: {flops.get('peak_source') or NOT_RECORDED})",
            f"MFU {fmt_pct(flops.get('mfu'))}" + ("" if flops.get("mfu") is not None else " (no model config)")
            + f", HFU {fmt_pct(flops.get('hfu'))}"
            + (f" (against the {flops['dtype']} GEMM peak)" if flops.get("dtype") else "")]

    memory = summary.get("memory")
    out.append("")
    if isinstance(memory, dict):
        out.append(f"Memory: peak allocated {fmt_bytes(memory.get('peak_allocated'))}, "
                   f"peak reserved {fmt_bytes(memory.get('peak_reserved'))}")
        at_peak, theory = memory.get("at_peak") or {}, memory.get("theoretical") or {}
        rows = [[c.replace("_", " "), fmt_bytes(at_peak.get(c)), fmt_bytes(theory.get(c)) if c in theory else "-"]
                for c in MEMORY_CATEGORIES if c in at_peak or c in theory]
        if rows:
            out.append(_table(["at peak", "measured", "theoretical"], rows, right=(1, 2)))
        estimate = memory.get("estimate")
        if isinstance(estimate, dict) and estimate.get("peak") is not None:
            err = estimate.get("error")
            out.append(f"Dry-run estimate (dg.memory.estimate): peak {fmt_bytes(estimate.get('peak'))}"
                       + (f" ({100 * err:+.1f}% against the measured peak)" if isinstance(err, (int, float)) else ""))
    else:
        out.append(f"Memory: {NOT_RECORDED} (profile_memory=False)")

    modules = [m for m in summary.get("modules") or [] if isinstance(m, dict)]
    if modules:
        shown = [m for m in modules if m.get("depth", 0) <= 2][:top]
        out += ["", "Per-module device time per step (children included; depth <= 2)"]
        out.append(_table(["module", "type", "forward ms", "backward ms", "fwd peak", "bwd peak"], [
            [m.get("path"), m.get("type"), _num(m.get("forward_ms"), "{:,.3f}"), _num(m.get("backward_ms"), "{:,.3f}"),
             fmt_bytes(m.get("forward_peak_bytes")) if m.get("forward_peak_bytes") is not None else "-",
             fmt_bytes(m.get("backward_peak_bytes")) if m.get("backward_peak_bytes") is not None else "-"]
            for m in shown], right=range(2, 6)))
    leaks = summary.get("leaks")
    if isinstance(leaks, list):
        out += ["", "Leaks: none" if not leaks else "Leaks (tensors kept across steps)"]
        for k in leaks:
            out.append(f"  {k.get('site')} ({k.get('function')}): {k.get('kind')}, {fmt_bytes(k.get('bytes_per_step'))} "
                       f"per step, {fmt_bytes(k.get('bytes'))} held at the end")
    gc = summary.get("gc")
    if isinstance(gc, dict):
        out += ["", f"Python GC pauses per step: {_num(gc.get('per_step_ms'), '{:,.3f}')} ms "
                f"({_num(100 * (gc.get('fraction_of_step') or 0), '{:.1f}')}% of the step), {gc.get('count')} over the run, "
                f"longest {_num(gc.get('max_ms'), '{:,.3f}')} ms"]

    ops = top_ops(run, top)
    out += ["", f"Top {len(ops)} ops by device time"]
    if ops:
        out.append(_table(["op", "calls", "device ms", "mean us", "% device", "host ms", "GFLOP/s"], [
            [op.get("name"), _num(op.get("count"), "{:,.0f}"), _num(op.get("device_total_ms"), "{:,.3f}"),
             _num(op.get("device_mean_us"), "{:,.1f}"), _num(op.get("device_percent"), "{:.1f}%"),
             _num(op.get("host_total_ms"), "{:,.3f}"), _num(op.get("gflops_per_s"), "{:,.2f}")] for op in ops],
            right=range(1, 7)))
    else:
        out.append(NOT_RECORDED)

    syncs, copies = summary.get("syncs") or {}, summary.get("copies") or {}
    if syncs or copies:
        names = ", ".join(f"{k} {fmt_value(v)}" for k, v in sorted((syncs.get("by_name") or {}).items()))
        out += ["", f"Host syncs per step: {fmt_value(syncs.get('per_step'))}"
                + (f" (by API over the run: {names})" if names else ""),
                f"Copies per step: {fmt_value(copies.get('count_per_step'))}, "
                f"{fmt_bytes(copies.get('bytes_per_step'))}"]

    advice = sorted_advice(summary)
    out += ["", "Advice" if advice else "Advice: none (no rule fired)"]
    for i, a in enumerate(advice, 1):
        out.append(f"{i}. [{a.get('severity', '?')}] {a.get('title') or a.get('rule')}")
        for key in ("evidence", "expected_gain", "fix"):
            if a.get(key):
                out.append(f"   {key.replace('_', ' ')}: {a[key]}")
        if isinstance(a.get("numbers"), dict) and a["numbers"]:
            out.append("   numbers: " + ", ".join(f"{k}={fmt_value(v)}" for k, v in a["numbers"].items()))
    return "\n".join(out) + "\n"


def _ratio(a, b):
    """b / a as '1.23x', or '-' when either is missing or a is 0."""
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not a:
        return "-"
    return f"{b / a:.2f}x"


def _signed(value, fmt="{:+,.3f}"):
    return fmt.format(value) if isinstance(value, (int, float)) else "-"


def diff(run_a, run_b, top=20):
    """Compares run B against run A: step time, throughput, buckets of the mean step, and ops per step."""
    a, b = load_run(run_a), load_run(run_b)
    out = [f"A: {_label(a)} ({a['dir']})", f"B: {_label(b)} ({b['dir']})", ""]

    def s(run, *keys):
        return get(run["summary"], *keys)

    mean_a, mean_b = mean_step(a), mean_step(b)
    ta, tb = s(a, "steps", "step_time_s", "mean"), s(b, "steps", "step_time_s", "mean")
    rows = [["step time (mean)", fmt_duration_s(ta), fmt_duration_s(tb),
             _signed((tb - ta) * 1e3, "{:+,.3f} ms") if ta is not None and tb is not None else "-", _ratio(ta, tb)]]
    for key, unit in (("tokens_per_s", "tokens/s"), ("samples_per_s", "samples/s")):
        va, vb = s(a, "throughput", key), s(b, "throughput", key)
        rows.append([unit, fmt_rate(va, ""), fmt_rate(vb, ""),
                     _signed(vb - va, "{:+,.1f}") if va is not None and vb is not None else "-", _ratio(va, vb)])
    for key in ("mfu", "hfu"):
        va, vb = s(a, "flops", key), s(b, "flops", key)
        rows.append([key.upper(), fmt_pct(va), fmt_pct(vb),
                     _signed(100 * (vb - va), "{:+.1f} pt") if va is not None and vb is not None else "-",
                     _ratio(va, vb)])
    pa, pb = s(a, "memory", "peak_allocated"), s(b, "memory", "peak_allocated")
    rows.append(["peak allocated", fmt_bytes(pa), fmt_bytes(pb),
                 fmt_bytes(pb - pa) if pa is not None and pb is not None else "-", _ratio(pa, pb)])
    out += ["Overview (ratio = B / A)", _table(["", "A", "B", "delta", "ratio"], rows, right=(1, 2, 3, 4)), ""]

    total_a, total_b = step_ns(mean_a), step_ns(mean_b)
    rows = []
    for bucket in BUCKETS:
        na, nb = bucket_ns(mean_a, bucket), bucket_ns(mean_b, bucket)
        fa, fb = (na / total_a if total_a else 0.0), (nb / total_b if total_b else 0.0)
        rows.append([BUCKET_LABELS[bucket], f"{na / 1e6:.3f}", f"{100 * fa:.1f}%", f"{nb / 1e6:.3f}",
                     f"{100 * fb:.1f}%", f"{(nb - na) / 1e6:+.3f}", f"{100 * (fb - fa):+.1f} pt"])
    rows.append(["step", f"{total_a / 1e6:.3f}", "100.0%", f"{total_b / 1e6:.3f}", "100.0%",
                 f"{(total_b - total_a) / 1e6:+.3f}", ""])
    out += ["Step breakdown (mean step)",
            _table(["bucket", "A ms", "A %", "B ms", "B %", "delta ms", "delta %"], rows, right=range(1, 7)), ""]

    # Ops per step, so runs that recorded different numbers of steps compare fairly.
    steps_a, steps_b = s(a, "steps", "count") or 1, s(b, "steps", "count") or 1
    ops_a, ops_b = ops_by_name(a), ops_by_name(b)
    rows = []
    for name in set(ops_a) | set(ops_b):
        ea, eb = ops_a.get(name), ops_b.get(name)
        ms_a = ea["device_total_ns"] / 1e6 / steps_a if ea else None
        ms_b = eb["device_total_ns"] / 1e6 / steps_b if eb else None
        delta = (ms_b or 0.0) - (ms_a or 0.0)
        rows.append((abs(delta), name, ea, eb, ms_a, ms_b, delta))
    rows.sort(key=lambda r: (-r[0], r[1]))

    def mean_us(e):
        runs = e["ran"] or e["count"] if e else 0
        return e["device_total_ns"] / runs / 1e3 if runs else None

    shown = rows[:top] if top is not None else rows
    table = []
    for _, name, ea, eb, ms_a, ms_b, delta in shown:
        note = "only in A" if eb is None else "only in B" if ea is None else ""
        table.append([name, _num(ea and ea["count"] / steps_a, "{:,.1f}"),
                      _num(eb and eb["count"] / steps_b, "{:,.1f}"),
                      _num(ms_a, "{:,.3f}"), _num(ms_b, "{:,.3f}"), _num(mean_us(ea), "{:,.1f}"),
                      _num(mean_us(eb), "{:,.1f}"), f"{delta:+,.3f}", _ratio(ms_a, ms_b) if note == "" else "-", note])
    out += [f"Ops per step (A: {steps_a} steps, B: {steps_b} steps; device time, sorted by |delta|)",
            _table(["op", "A calls", "B calls", "A ms", "B ms", "A mean us", "B mean us", "delta ms", "ratio",
                    "note"], table, right=range(1, 9)) if table else NOT_RECORDED]
    hidden = rows[len(shown):]
    if hidden:
        out.append(f"({len(hidden)} more ops with a smaller delta; --top to show them)")
        for side, missing in (("A", 3), ("B", 2)):
            names = [r[1] for r in hidden if r[missing] is None]
            if names:
                out.append(f"  also only in {side}: {', '.join(names)}")
    return "\n".join(out) + "\n"


def linearity_report(run_dirs):
    """Scaling efficiency over runs of one job at several rank counts: each run's total throughput over the
    1-rank run's throughput times its ranks (metrics.linearity), from the runs' summary.json."""
    from .metrics import linearity

    runs = []
    for d in run_dirs:
        summary = load_run(d)["summary"]
        ranks = get(summary, "throughput", "ranks") or 1
        rate = get(summary, "throughput", "samples_per_s")
        if not rate:
            raise RunDirError(f"{d}: summary.json has no throughput.samples_per_s (profile with batch_size=)")
        runs.append((d, int(ranks), float(rate)))
    try:
        values = linearity([(r, t) for _, r, t in runs])
    except ValueError as e:
        raise RunDirError(str(e)) from None
    rows = [[d, r, f"{t:,.2f}", f"{lin:.3f}"] for (d, r, t), (_, lin) in zip(runs, values)]
    return ("Linearity: total throughput / (1-rank throughput x ranks)\n" +
            _table(["run", "ranks", "samples/s (total)", "linearity"], rows, right=(1, 2, 3)) + "\n")


THROUGHPUT = re.compile(r"([\d,]+(?:\.\d+)?)\s*(?:tok(?:ens)?|samples|rows)/s\b|"
                        r"(?:tokens|samples)(?:/s|_per_s)\s+([\d,]+(?:\.\d+)?)")


def linearity_of_command(ranks, command, timeout=3600, hosts=None, rsh_agent=None, mca=()):
    """Runs `command` (its Python entry is a dygrad program) under mpirun at each rank count and reports the
    throughput it prints last (a "N tok/s" or "tokens/s N" line: dygrad.train's, bench scripts'), the linearity
    against the 1-rank run, and rank 0's communication totals (DYGRAD_COMM_STATS: the time compute waited for
    communication, i.e. the exposed part, and all of it). `hosts`: machines to spread the ranks over (one rank per
    machine in turn: a 2-rank run on two machines crosses the network), with mpirun's `rsh_agent` and `mca` settings
    (docs/distributed.md, "Across hosts")."""
    import json
    import subprocess
    import tempfile

    from ..distributed.run import mpirun_prefix
    from .metrics import linearity

    if 1 not in ranks:
        raise RunDirError("--ranks must include 1 (the baseline)")
    command = list(command)
    if command and os.path.basename(command[0]) in ("python", "python3"):
        command[0] = sys.executable  # this interpreter (the one with dygrad), not whatever mpirun's PATH finds
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in ranks:
            stats_path = os.path.join(tmp, f"comm{n}.json")
            env = dict(os.environ, DYGRAD_COMM_STATS=stats_path)
            where = {}
            if hosts:
                slots = -(-max(ranks) // len(hosts))
                where = {"hosts": [f"{h}:{slots}" for h in hosts], "rsh_agent": rsh_agent, "mca": mca}
            prefix = mpirun_prefix(n, **where) + (["--map-by", "node"] if hosts else [])
            result = subprocess.run(prefix + list(command), capture_output=True, text=True, env=env,
                                    timeout=timeout)
            if result.returncode != 0:
                raise RunDirError(f"the command failed at {n} rank(s):\n{result.stderr[-3000:]}")
            rates = [m.group(1) or m.group(2) for m in THROUGHPUT.finditer(result.stdout)]
            if not rates:
                raise RunDirError(f"the command printed no throughput (a 'N tok/s', 'tokens/s N' or 'tokens_per_s N' "
                                  f"line) at {n} rank(s):\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
            stats = {}
            if os.path.exists(stats_path):
                with open(stats_path) as f:
                    stats = json.load(f)
            runs.append((n, float(rates[-1].replace(",", "")), stats))
    values = linearity([(n, rate) for n, rate, _ in runs])
    rows = []
    for (n, rate, stats), (_, lin) in zip(runs, values):
        wall = stats.get("wall_s") or 0
        exposed = stats.get("exposed_s")
        rows.append([n, f"{rate:,.1f}", f"{lin:.3f}",
                     "-" if exposed is None or n == 1 else f"{exposed:.3f} s ({exposed / wall:.1%})" if wall else "-",
                     "-" if not stats or n == 1 else f"{stats['comm_s']:.3f} s ({stats['operations']} ops)"])
    return ("Linearity: throughput at N ranks / (1-rank throughput x N); exposed communication: the time compute "
            "waited for it on rank 0 (share of its run)\n" +
            _table(["ranks", "throughput (total)", "linearity", "exposed comm", "all comm"], rows,
                   right=(0, 1, 2, 3, 4)) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m dygrad.profiler",
                                     description="Read dygrad profiler run directories (summary.json, "
                                                 "breakdown.json, op_stats.csv): print, compare, report.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = commands.add_parser("summary", help="print the run's summary")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--top", type=int, default=10, metavar="N", help="ops to list (default 10)")
    p = commands.add_parser("diff", help="compare run B against run A, bucket by bucket and op by op")
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument("--top", type=int, default=20, metavar="N", help="ops to list (default 20)")
    p = commands.add_parser("report", help="(re)write the self-contained HTML report")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--output", "-o", metavar="PATH", help="where to write it (default RUN_DIR/report.html)")
    p.add_argument("--top", type=int, default=30, metavar="N", help="ops to list (default 30)")
    p = commands.add_parser("linearity", help="scaling efficiency over runs at several rank counts (run "
                                              "directories, or --ranks 1,2 -- COMMAND to run it at each)")
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="*")
    p.add_argument("--ranks", default=None, help="comma-separated rank counts to run COMMAND at (after --)")
    p.add_argument("--hosts", default=None, help="machines to spread the ranks over, comma-separated (mpirun -H)")
    p.add_argument("--rsh-agent", default=None, help="what starts mpirun's daemons on the other machines (ssh)")
    p.add_argument("--mca", action="append", default=[], metavar="KEY=VALUE", help="an OpenMPI setting (repeatable)")
    p.set_defaults(top=0)
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    args = parser.parse_args(argv)
    if args.top < 0:
        parser.error("--top must be >= 0")
    try:
        if args.command == "summary":
            sys.stdout.write(summarize(args.run_dir, top=args.top))
        elif args.command == "diff":
            sys.stdout.write(diff(args.run_a, args.run_b, top=args.top))
        elif args.command == "linearity" and args.ranks:
            if not command:
                parser.error("linearity --ranks needs a command after --")
            ranks = [int(r) for r in args.ranks.split(",")]
            hosts = [h for h in (args.hosts or "").split(",") if h]
            sys.stdout.write(linearity_of_command(ranks, command, hosts=hosts, rsh_agent=args.rsh_agent,
                                                  mca=args.mca))
        elif args.command == "linearity":
            if not args.run_dirs:
                parser.error("linearity needs RUN_DIRs, or --ranks N,M -- COMMAND")
            sys.stdout.write(linearity_report(args.run_dirs))
        else:
            print(f"wrote {write_html(args.run_dir, args.output, top=args.top)}")
    except RunDirError as e:
        print(f"python3 -m dygrad.profiler {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
