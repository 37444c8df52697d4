"""The profiler's outputs from a run directory: `python3 -m dygrad.profiler summary/diff/report` and the HTML
report, checked as text and, in headless Chromium, as a page whose script drew its charts (no JS error)."""
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest

from dygrad.profiler import report
from dygrad.profiler.__main__ import diff, main, summarize

BUCKETS = ("compute", "exposed_comm", "data_wait", "host_bound", "other_idle")
CSV_HEADER = ("name,input_shapes,count,ran,device_total_ns,device_mean_ns,device_min_ns,device_max_ns,device_percent,"
              "host_total_ns,host_mean_ns,flops,gflops_per_second,bytes,gbytes_per_second")
MS = 1_000_000  # ns


# --- a run directory written exactly as docs/profiler-python.md describes it ----------------------------------

def make_run(label, step_buckets_ms, ops, batch_size=8, seq_len=128, memory=True, advice=(), model_flops=True,
             timeline_points=120):
    """A synthetic run: step_buckets_ms is one {bucket: ms} per step; ops is (name, input_shapes, count,
    device_total_ns, host_total_ns, flops) over all steps."""
    steps = []
    begin = 0
    for index, buckets_ms in enumerate(step_buckets_ms):
        buckets = {b: int(buckets_ms.get(b, 0) * MS) for b in BUCKETS}
        total = sum(buckets.values())
        flops = sum(op[5] for op in ops) / len(step_buckets_ms)
        steps.append({"index": index, "begin_ns": begin, "step_ns": total, "buckets_ns": buckets,
                      "fractions": {b: buckets[b] / total for b in BUCKETS}, "overlapped_comm_ns": 250_000,
                      "host_dispatch_ns": 4 * MS, "num_ops": sum(op[2] for op in ops) / len(step_buckets_ms),
                      "flops": flops, "bytes": 3.0e8, "achieved_flops_per_second": flops / (total / 1e9),
                      "dominant": max(BUCKETS, key=lambda b: buckets[b])})
        begin += total
    n = len(steps)
    mean_buckets = {b: sum(s["buckets_ns"][b] for s in steps) / n for b in BUCKETS}
    mean_total = sum(mean_buckets.values())
    mean = {"index": -1, "begin_ns": 0, "step_ns": mean_total, "buckets_ns": mean_buckets,
            "fractions": {b: mean_buckets[b] / mean_total for b in BUCKETS}, "overlapped_comm_ns": 250_000,
            "host_dispatch_ns": 4 * MS, "num_ops": steps[0]["num_ops"], "flops": steps[0]["flops"], "bytes": 3.0e8,
            "achieved_flops_per_second": steps[0]["flops"] / (mean_total / 1e9),
            "dominant": max(BUCKETS, key=lambda b: mean_buckets[b])}
    breakdown = {"definitions": "buckets partition each step's wall time; see docs/profiler.md",
                 "from_markers": True, "steps": steps, "mean": mean}

    device_all = sum(op[3] for op in ops)
    rows = [CSV_HEADER]
    for name, shapes, count, device_ns, host_ns, flops in ops:
        rows.append(",".join([name, f'"{shapes}"', str(count), str(count), str(device_ns), repr(device_ns / count),
                              str(device_ns // count // 2), str(device_ns // count * 2),
                              repr(100 * device_ns / device_all), str(host_ns), repr(host_ns / count),
                              repr(float(flops)), repr(flops / device_ns), "1000000.0", repr(1e6 / device_ns)]))
    by_name = {}
    for name, _, count, device_ns, host_ns, flops in ops:
        e = by_name.setdefault(name, [0, 0, 0, 0.0])
        e[0] += count
        e[1] += device_ns
        e[2] += host_ns
        e[3] += flops
    summary_ops = sorted(({"name": name, "count": c, "device_total_ms": d / 1e6, "device_mean_us": d / c / 1e3,
                           "host_total_ms": h / 1e6, "gflops_per_s": f / d, "device_percent": 100 * d / device_all}
                          for name, (c, d, h, f) in by_name.items()), key=lambda o: -o["device_total_ms"])[:30]

    step_s = [s["step_ns"] / 1e9 for s in steps]
    step_mean = sum(step_s) / n
    peak = 1.2e13
    executed = steps[0]["flops"]
    model = executed * 0.9 if model_flops else None
    parameter, gradient, optimizer, activation = 110 * 2 ** 20, 110 * 2 ** 20, 220 * 2 ** 20, 340 * 2 ** 20
    memory_json = None
    if memory:
        base = parameter + gradient + optimizer
        timeline = []
        for i in range(timeline_points):  # activations rise over the forward, fall over the backward
            phase = (i % (timeline_points // n)) / (timeline_points // n)
            allocated = base + int(activation * (phase / 0.5 if phase < 0.5 else (1 - phase) / 0.5))
            timeline.append([round(i * sum(step_s) / timeline_points, 6), allocated,
                             int(max(allocated, base + activation) * 1.125)])
        peak_allocated = max(p[1] for p in timeline)
        memory_json = {"peak_allocated": peak_allocated, "peak_reserved": max(p[2] for p in timeline),
                       "at_peak": {"parameter": parameter, "gradient": gradient, "optimizer_state": optimizer,
                                   "activation": peak_allocated - base - 24 * 2 ** 20,
                                   "temporary": 16 * 2 ** 20, "other": 8 * 2 ** 20, "fragmentation": 41 * 2 ** 20},
                       "theoretical": {"parameter": parameter, "gradient": gradient, "optimizer_state": optimizer,
                                       "activation": 300 * 2 ** 20} if model_flops else None,
                       "timeline": timeline}
    summary = {
        "version": 1,
        "meta": {"created": "2026-11-30T09:15:00Z", "label": label,
                 "command": "python3 -m dygrad.train --config tiny --steps 20 --profile",
                 "dygrad_version": "0.1.0", "context": {"synchronize": False, "deterministic": True, "num_threads": 2}},
        "steps": {"count": n, "step_time_s": {"mean": step_mean, "median": sorted(step_s)[n // 2],
                                              "min": min(step_s), "max": max(step_s)}},
        "breakdown": mean,
        "throughput": {"batch_size": batch_size, "seq_len": seq_len, "ranks": 1,
                       "samples_per_s": batch_size / step_mean, "tokens_per_s": batch_size * seq_len / step_mean},
        "flops": {"executed_per_step": executed, "model_per_step": model, "peak_flops_per_s": peak,
                  "peak_source": "calibration GEMM float32 1024x1024x1024",
                  "mfu": model / step_mean / peak if model_flops else None, "hfu": executed / step_mean / peak},
        "memory": memory_json,
        "ops": summary_ops,
        "syncs": {"per_step": 2.0, "by_name": {"item": 2 * n}},
        "copies": {"bytes_per_step": 4096.0, "count_per_step": 1.0},
        "advice": list(advice),
    }
    return {"summary": summary, "breakdown": breakdown, "op_stats_csv": "\n".join(rows) + "\n"}


def write_run_dir(path, run):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "summary.json"), "w") as f:
        json.dump(run["summary"], f, indent=1)
    with open(os.path.join(path, "breakdown.json"), "w") as f:
        json.dump(run["breakdown"], f, indent=1)
    with open(os.path.join(path, "op_stats.csv"), "w") as f:
        f.write(run["op_stats_csv"])
    with open(os.path.join(path, "trace.json"), "w") as f:
        json.dump({"traceEvents": [], "displayTimeUnit": "ns"}, f)
    return str(path)


ADVICE = ({"rule": "data_wait", "title": "The input pipeline stalls the device", "severity": "high",
           "evidence": "data wait is 17.6% of the mean step", "numbers": {"data_wait_fraction": 0.176, "workers": 0},
           "expected_gain": "up to 1.21x step time", "fix": "DataLoader(num_workers=2, prefetch_factor=2)"},
          {"rule": "sync_in_loop", "title": "Host syncs inside the step", "severity": "medium",
           "evidence": "2 .item() calls per step", "numbers": {"per_step": 2.0},
           "expected_gain": "about 3% step time", "fix": "log the loss every 50 steps"})

# Run A: 4 steps, gelu; run B: 3 steps, fused_gelu instead and a faster input pipeline.
RUN_A = dict(label="baseline", advice=ADVICE, step_buckets_ms=[
    {"compute": 30 + 0.5 * i, "exposed_comm": 1.5, "data_wait": 10 - i, "host_bound": 5.5, "other_idle": 2}
    for i in range(4)], ops=[
    ("matmul", "[[8, 128], [128, 512]]", 48, 50 * MS, 6 * MS, 4.0e10),
    ("matmul", "[[8, 512], [512, 128]]", 48, 46 * MS, 6 * MS, 4.0e10),
    ("add", "[[8, 512], [512]]", 400, 8 * MS, 5 * MS, 1.0e7),
    ("softmax", "[[8, 4, 128, 128]]", 48, 6 * MS, 1 * MS, 2.0e7),
    ("gelu", "[[8, 128, 512]]", 48, 4 * MS, 1 * MS, 1.0e7),
    ("layer_norm", "[[8, 128, 128]]", 96, 2 * MS, 2 * MS, 1.0e7)])
RUN_B = dict(label="fused gelu", step_buckets_ms=[
    {"compute": 29, "exposed_comm": 1.5, "data_wait": 2, "host_bound": 5, "other_idle": 1.5} for _ in range(3)],
    ops=[("matmul", "[[8, 128], [128, 512]]", 72, 69 * MS, 9 * MS, 6.0e10),
         ("add", "[[8, 512], [512]]", 300, 4.5 * MS, 4 * MS, 7.5e6),
         ("softmax", "[[8, 4, 128, 128]]", 36, 4.5 * MS, 1 * MS, 1.5e7),
         ("fused_gelu", "[[8, 128, 512]]", 36, int(1.5 * MS), 1 * MS, 7.5e6),
         ("layer_norm", "[[8, 128, 128]]", 72, int(1.5 * MS), 1 * MS, 7.5e6)])


def _build(spec, **overrides):
    spec = dict(spec, **overrides)
    return make_run(spec.pop("label"), spec.pop("step_buckets_ms"), spec.pop("ops"), **spec)


@pytest.fixture
def run_a(tmp_path):
    return write_run_dir(tmp_path / "a", _build(RUN_A))


@pytest.fixture
def run_b(tmp_path):
    return write_run_dir(tmp_path / "b", _build(RUN_B))


@pytest.fixture
def bare_run(tmp_path):
    """No memory profile, no advice, no model config (MFU null), no op_stats.csv and no trace."""
    path = write_run_dir(tmp_path / "bare", _build(RUN_B, memory=False, model_flops=False))
    os.remove(os.path.join(path, "op_stats.csv"))
    os.remove(os.path.join(path, "trace.json"))
    return path


def line_with(text, start):
    lines = [line for line in text.splitlines() if line.startswith(start)]
    assert lines, f"no line starting with {start!r} in:\n{text}"
    return lines[0]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "dygrad.profiler", *args], capture_output=True, text=True,
                          timeout=300)


# --- summary --------------------------------------------------------------------------------------------------

def test_summary_prints_the_runs_numbers(run_a):
    text = summarize(run_a)
    # Mean step of A: compute 30.75, exposed comm 1.5, data wait 8.5, host-bound 5.5, other 2 = 48.25 ms.
    assert re.search(r"step time mean 48\.250 ms", text)
    assert re.search(r"^compute\s+30\.750\s+63\.7%$", line_with(text, "compute"))
    assert re.search(r"^data wait\s+8\.500\s+17\.6%$", line_with(text, "data wait"))
    assert re.search(r"^step\s+48\.250\s+100\.0%$", line_with(text, "step  "))
    assert "dominant: compute" in text
    assert f"{8 * 128 / 0.04825:,.1f} tokens/s" in text
    assert f"{8 / 0.04825:,.1f} samples/s" in text
    executed = (2 * 4.0e10 + 4 * 1.0e7 + 2.0e7) / 4  # the ops' flops over 4 steps; the model's is 0.9 of it
    assert f"MFU {100 * 0.9 * executed / 0.04825 / 1.2e13:.1f}%, HFU {100 * executed / 0.04825 / 1.2e13:.1f}%" in text
    assert "peak 12 TFLOP/s (source: calibration GEMM float32" in text
    assert "peak allocated 780.00 MiB" in text and "peak reserved" in text
    assert re.search(r"^optimizer state\s+220\.00 MiB\s+220\.00 MiB$", line_with(text, "optimizer state"))
    # Top ops: the two matmul rows merged in summary.ops, first by device time.
    ops = text.split("ops by device time")[1]
    assert re.search(r"^matmul\s+96\s+96\.000\s+1,000\.0\s+82\.8%", ops.splitlines()[3])
    assert "Host syncs per step: 2 (by API over the run: item 8)" in text
    assert "1. [high] The input pipeline stalls the device" in text
    assert "   fix: DataLoader(num_workers=2, prefetch_factor=2)" in text
    assert "numbers: data_wait_fraction=0.176, workers=0" in text


def test_summary_top_limits_the_ops(run_a):
    text = summarize(run_a, top=2)
    assert "Top 2 ops" in text and "softmax" not in text


def test_summary_of_a_bare_run_says_not_recorded(bare_run):
    text = summarize(bare_run)
    assert "MFU not recorded (no model config)" in text
    assert "Memory: not recorded" in text
    assert "Advice: none" in text
    assert "fused_gelu" in text  # the ops come from summary.ops without op_stats.csv


def test_ops_come_from_op_stats_csv_without_summary_ops(tmp_path):
    run = _build(RUN_A)
    del run["summary"]["ops"]
    path = write_run_dir(tmp_path / "csv", run)
    assert re.search(r"^matmul\s+96\s+96\.000\s+1,000\.0\s+82\.8%", line_with(summarize(path), "matmul"))
    page = report.render_html(path)
    assert page.count('<td class="op">') == 5 and '<td class="op">matmul</td>' in page


def test_empty_pieces_read_not_recorded(tmp_path):
    run = _build(RUN_B, model_flops=False)
    run["breakdown"]["steps"] = []
    run["summary"]["memory"]["timeline"] = []
    run["summary"]["ops"] = []
    run["summary"]["throughput"]["tokens_per_s"] = None
    path = write_run_dir(tmp_path / "empty", run)
    os.remove(os.path.join(path, "op_stats.csv"))
    text = summarize(path)
    assert "Throughput: tokens/s not recorded, 205.1 samples/s" in text
    assert "Top 0 ops by device time\nnot recorded" in text
    page = report.render_html(path)
    assert "Memory timeline not recorded" in page and "Op statistics not recorded" in page
    assert 'id="memory-chart"' not in page and "0 steps from step markers" in page


# --- diff -----------------------------------------------------------------------------------------------------

def test_diff_compares_ops_per_step_and_marks_one_sided_ops(run_a, run_b):
    text = diff(run_a, run_b)
    assert "A: baseline" in text and "B: fused gelu" in text
    # matmul: A 96 ms / 4 steps = 24 ms, 24 calls; B 69 ms / 3 = 23 ms, 24 calls; mean 1000 vs 958.3 us.
    assert re.search(r"^matmul\s+24\.0\s+24\.0\s+24\.000\s+23\.000\s+1,000\.0\s+958\.3\s+-1\.000\s+0\.96x$",
                     line_with(text, "matmul"))
    assert re.search(r"^add\s+100\.0\s+100\.0\s+2\.000\s+1\.500\s+20\.0\s+15\.0\s+-0\.500\s+0\.75x$",
                     line_with(text, "add"))
    assert re.search(r"^gelu\s+12\.0\s+-\s+1\.000\s+-\s+83\.3\s+-\s+-1\.000\s+-\s+only in A$", line_with(text, "gelu"))
    assert re.search(r"^fused_gelu\s+-\s+12\.0\s+-\s+0\.500\s+-\s+41\.7\s+\+0\.500\s+-\s+only in B$",
                     line_with(text, "fused_gelu"))
    assert "(A: 4 steps, B: 3 steps" in text


def test_diff_compares_buckets_step_time_and_throughput(run_a, run_b):
    text = diff(run_a, run_b)
    # B's step: 29 + 1.5 + 2 + 5 + 1.5 = 39 ms.
    assert re.search(r"^data wait\s+8\.500\s+17\.6%\s+2\.000\s+5\.1%\s+-6\.500\s+-12\.5 pt$",
                     line_with(text, "data wait"))
    assert re.search(r"^compute\s+30\.750\s+63\.7%\s+29\.000\s+74\.4%\s+-1\.750\s+\+10\.6 pt$",
                     line_with(text, "compute"))
    assert re.search(r"^step\s+48\.250\s+100\.0%\s+39\.000\s+100\.0%\s+-9\.250$", line_with(text, "step  "))
    assert re.search(r"^step time \(mean\)\s+48\.250 ms\s+39\.000 ms\s+-9\.250 ms\s+0\.81x$",
                     line_with(text, "step time"))
    assert re.search(rf"^tokens/s\s+{8 * 128 / 0.04825:,.1f}\s+{8 * 128 / 0.039:,.1f}\s+\S+\s+1\.24x$",
                     line_with(text, "tokens/s"))


def test_diff_top_still_names_one_sided_ops(run_a, run_b):
    # |delta| ms per step: gelu 1.0 and matmul 1.0 (ties by name), add 0.5, fused_gelu 0.5, softmax and layer_norm 0.
    text = diff(run_a, run_b, top=2)
    assert line_with(text, "gelu").endswith("only in A") and line_with(text, "matmul")
    assert "(4 more ops with a smaller delta; --top to show them)" in text
    assert "also only in B: fused_gelu" in text and "also only in A" not in text


# --- the command line -------------------------------------------------------------------------------------------

def test_cli_summary_diff_and_report(run_a, run_b):
    done = cli("summary", run_a, "--top", "3")
    assert done.returncode == 0, done.stderr
    assert done.stdout == summarize(run_a, top=3)
    done = cli("diff", run_a, run_b)
    assert done.returncode == 0, done.stderr
    assert done.stdout == diff(run_a, run_b)
    done = cli("report", run_a)
    assert done.returncode == 0, done.stderr
    assert os.path.isfile(os.path.join(run_a, "report.html"))
    with open(os.path.join(run_a, "report.html")) as f:
        assert f.read() == report.render_html(run_a)


def test_cli_help():
    done = cli("--help")
    assert done.returncode == 0
    assert all(command in done.stdout for command in ("summary", "diff", "report"))
    done = cli("diff", "--help")
    assert done.returncode == 0 and "--top" in done.stdout


@pytest.mark.parametrize("missing", ["summary.json", "breakdown.json"])
def test_missing_file_is_exit_2_naming_it(run_a, run_b, missing):
    os.remove(os.path.join(run_b, missing))
    for args in (["summary", run_b], ["diff", run_a, run_b], ["report", run_b]):
        done = cli(*args)
        assert done.returncode == 2, done
        assert os.path.join(run_b, missing) in done.stderr and "not found" in done.stderr
        assert "Traceback" not in done.stderr
    assert main(["summary", run_b]) == 2
    with pytest.raises(report.RunDirError, match=missing):
        summarize(run_b)


def test_unreadable_json_is_exit_2(run_a):
    with open(os.path.join(run_a, "breakdown.json"), "w") as f:
        f.write("{not json")
    done = cli("summary", run_a)
    assert done.returncode == 2 and "breakdown.json: cannot be read as JSON" in done.stderr


def test_not_a_directory_is_exit_2(tmp_path):
    done = cli("summary", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "nowhere: not a directory" in done.stderr


# --- the HTML report --------------------------------------------------------------------------------------------

def test_report_is_self_contained(run_a):
    page = report.render_html(run_a)
    assert not re.search(r"""\b(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.I)
    assert not re.search(r"<link\b", page, re.I)
    assert not re.search(r"@import|url\(", page, re.I)
    assert '<a href="trace.json">' in page  # linked, not embedded
    assert "traceEvents" not in page


def test_report_escapes_text(tmp_path):
    hostile = "<script>alert('x')</script>"
    run = _build(RUN_A, advice=[dict(ADVICE[0], title=hostile, evidence="a < b & c")])
    run["summary"]["meta"]["label"] = hostile
    run["summary"]["ops"][0]["name"] = "</script><b>op</b>"
    page = report.render_html(write_run_dir(tmp_path / "x", run))
    assert hostile not in page and "<b>op</b>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "a &lt; b &amp; c" in page
    assert page.count("</script>") == 3  # the error hook, the data and the drawing script: nothing injected


def test_write_html_default_path(run_a, tmp_path):
    assert report.write_html(run_a) == os.path.join(run_a, "report.html")
    assert report.write_html(run_a, tmp_path / "r.html") == str(tmp_path / "r.html")
    assert os.path.getsize(tmp_path / "r.html") > 10_000


def test_report_of_a_bare_run_says_not_recorded(bare_run):
    page = report.render_html(bare_run)
    assert 'id="memory-chart"' not in page and "Memory not recorded" in page
    assert "No advice" in page and "no model config" in page and "trace.json not recorded" in page
    assert 'id="ops-table"' in page  # from summary.ops


# --- in a browser -------------------------------------------------------------------------------------------

def chromium():
    """Debian's headless browser (make deps installs it): a missing one fails the test instead of skipping."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is not installed (apt-get install chromium; `make deps` does it)")


def run_chromium(tmp_path, *args):
    done = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           f"--user-data-dir={tmp_path / 'chromium-profile'}", *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


class Elements(html.parser.HTMLParser):
    """Every element of a page as (tag, attrs, ids of the enclosing elements)."""
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self, page):
        super().__init__()
        self.elements, self.open = [], []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs, [a.get("id") for _, a in self.open if a.get("id")]))
        if tag not in self.VOID:
            self.open.append((tag, attrs))

    def handle_endtag(self, tag):
        while self.open and self.open.pop()[0] != tag:
            pass

    def by_id(self, element_id):
        found = [attrs for _, attrs, _ in self.elements if attrs.get("id") == element_id]
        assert len(found) == 1, f"{element_id}: {len(found)} elements"
        return found[0]

    def inside(self, element_id, tag):
        return [attrs for t, attrs, ids in self.elements if t == tag and element_id in ids]


def dump_dom(tmp_path, run_dir):
    path = report.write_html(run_dir)
    return Elements(run_chromium(tmp_path, "--dump-dom", "file://" + os.path.abspath(path)))


def test_browser_draws_the_charts_and_tables(tmp_path, run_a):
    dom = dump_dom(tmp_path, run_a)
    body = [attrs for tag, attrs, _ in dom.elements if tag == "body"][0]
    assert "data-error" not in body, body["data-error"]
    chart = dom.by_id("breakdown-chart")
    assert chart["data-drawn"] == "true"
    assert chart["data-bars"] == "5"  # 4 steps and the mean, 5 buckets each
    assert chart["data-segments"] == "25" and len(dom.inside("breakdown-chart", "rect")) == 25
    memory = dom.by_id("memory-chart")
    assert memory["data-drawn"] == "true" and memory["data-points"] == "120"
    assert {p.get("data-series") for p in dom.inside("memory-chart", "path")} >= {"allocated", "reserved"}
    assert len(dom.inside("ops-table", "tr")) == 1 + 5  # header and the five ops (matmul rows merged)
    assert len(dom.inside("memory-split", "tr")) == 1 + 7
    assert len(dom.inside("advice-list", "li")) == 2


def test_browser_draws_a_bare_run(tmp_path, bare_run):
    dom = dump_dom(tmp_path, bare_run)
    body = [attrs for tag, attrs, _ in dom.elements if tag == "body"][0]
    assert "data-error" not in body, body["data-error"]
    assert dom.by_id("breakdown-chart")["data-bars"] == "4"
    assert not [attrs for _, attrs, _ in dom.elements if attrs.get("id") == "memory-chart"]


def test_browser_reports_a_script_error(tmp_path, run_a):
    """The error hook works, so the checks above would see a broken script."""
    path = report.write_html(run_a)
    with open(path) as f:
        page = f.read()
    with open(path, "w") as f:
        f.write(page.replace('document.getElementById("report-data").textContent', "missing_name()"))
    dom = Elements(run_chromium(tmp_path, "--dump-dom", "file://" + os.path.abspath(path)))
    body = [attrs for tag, attrs, _ in dom.elements if tag == "body"][0]
    assert "missing_name" in body.get("data-error", "")
    assert dom.by_id("breakdown-chart")["data-drawn"] == "false"


def test_browser_screenshot(tmp_path, run_a):
    path = report.write_html(run_a)
    png = tmp_path / "report.png"
    run_chromium(tmp_path, f"--screenshot={png}", "--window-size=1280,2000", "--hide-scrollbars",
                 "file://" + os.path.abspath(path))
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2000)
    assert len(data) > 50_000  # a blank or error page compresses to a few KB


# --- linearity ------------------------------------------------------------------------------------------------

def _with_ranks(path, ranks, samples_per_s):
    summary_path = os.path.join(path, "summary.json")
    with open(summary_path) as fh:
        summary = json.load(fh)
    summary["throughput"]["ranks"] = ranks
    summary["throughput"]["samples_per_s"] = samples_per_s
    with open(summary_path, "w") as fh:
        json.dump(summary, fh)
    return path


def test_linearity_over_runs_at_several_rank_counts(tmp_path):
    one = _with_ranks(write_run_dir(tmp_path / "r1", _build(RUN_A)), 1, 100.0)
    two = _with_ranks(write_run_dir(tmp_path / "r2", _build(RUN_A)), 2, 180.0)
    four = _with_ranks(write_run_dir(tmp_path / "r4", _build(RUN_A)), 4, 300.0)
    out = cli("linearity", one, two, four)
    assert out.returncode == 0, out.stderr
    assert line_with(out.stdout, str(two)).split()[-1] == "0.900"
    assert line_with(out.stdout, str(four)).split()[-1] == "0.750"
    assert line_with(out.stdout, str(one)).split()[-1] == "1.000"
    # Without a 1-rank run there is no baseline: a clear error, exit 2.
    bad = cli("linearity", two, four)
    assert bad.returncode == 2 and "1-rank" in bad.stderr
