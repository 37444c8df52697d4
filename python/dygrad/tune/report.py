"""The tuner's HTML report (docs/tune.md, "Outputs"): one bar per trial (tokens/s against its incumbent's, MFU,
peak memory, kept or why not), the before/after step breakdowns, the refused settings and a command that
reproduces each trial. Self-contained: CSS bars, no script, no library, every text escaped."""
import html

from ..profiler.report import BUCKET_COLORS, BUCKET_LABELS, BUCKETS

CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d232b;max-width:1300px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:26px 0 8px}.note{color:#5b6572}
table{border-collapse:collapse;width:100%}td,th{padding:5px 8px;border-bottom:1px solid #e3e7ec;text-align:left;
vertical-align:top}th{font-weight:600;background:#f5f7f9}.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{height:14px;border-radius:2px;display:inline-block;vertical-align:middle}.track{width:260px;background:#eef1f4;
display:inline-block;border-radius:2px;position:relative}.ref{position:absolute;top:-3px;bottom:-3px;width:2px;
background:#1d232b}.kept{color:#1e7d3a;font-weight:600}.not{color:#a23b32}code{font-size:12px;word-break:break-all;
background:#f5f7f9;padding:1px 3px}.stack{display:flex;height:22px;width:560px;border-radius:2px;overflow:hidden}
.figs{display:flex;gap:28px;margin:12px 0}.fig b{display:block;font-size:20px}"""


def _e(x):
    return html.escape(str(x))


def _mib(n):
    return f"{(n or 0) / 2**20:.1f} MiB"


def _rate(x, unit):
    return f"{x:,.0f} {unit}" if unit == "tok/s" else f"{x:,.2f} {unit}"  # tokens, or a script's steps


def _trial_rows(result):
    trials = result["trials"]
    unit = result.get("rate_unit", "tok/s")
    top = max([max(t["tokens_per_s"] + t["incumbent_tokens_per_s"] + [1]) for t in trials] + [1])
    peak_top = max([t["peak_bytes"] for t in trials] + [result.get("memory_limit") or 0, 1])
    rows = []
    for t in trials:
        tok = max(t["tokens_per_s"]) if t["tokens_per_s"] else 0
        inc = max(t["incumbent_tokens_per_s"]) if t["incumbent_tokens_per_s"] else 0
        color = "#2f9e4f" if t["kept"] else "#c4574d"
        bar = (f'<span class="track"><span class="bar" style="width:{260 * tok / top:.0f}px;background:{color}">'
               f'</span><span class="ref" style="left:{260 * inc / top:.0f}px" title="incumbent {_rate(inc, unit)}">'
               f'</span></span>')
        mem = (f'<span class="track" style="width:120px"><span class="bar" style="width:{120 * t["peak_bytes"] / peak_top:.0f}px;'
               f'background:#8e5cc2"></span></span> {_mib(t["peak_bytes"])}')
        changes = ", ".join(f"{k}={v}" for k, v in t["changes"].items())
        verdict = f'<span class="{"kept" if t["kept"] else "not"}">{"kept" if t["kept"] else "not kept"}</span>'
        rows.append(
            f'<tr><td class="num">{t["index"]}</td><td><b>{_e(t["candidate"])}</b><br><span class="note">{_e(changes)}'
            f'</span><br><span class="note">advised by: {_e(", ".join(t["advised_by"]) or "(always considered)")}; '
            f'numerics {_e(t["numerics"])}; estimated gain {t["estimated_gain"]:.1%}</span></td>'
            f'<td>{bar}<br><span class="note">{_rate(tok, unit)} vs {_rate(inc, unit)} ({t["speedup"]:.3f}x +-'
            f'{t["spread"]:.1%}, {t["rounds"]} rounds)</span></td><td class="num">{t["mfu"]:.1%}<br><span class="note">was '
            f'{t["incumbent_mfu"]:.1%}</span></td><td>{mem}</td><td>{verdict}<br>{_e(t["reason"])}<br>'
            f'<span class="note">losses differ by {t["loss_difference"]:.1e}</span></td></tr>'
            f'<tr><td></td><td colspan="5"><span class="note">reproduce:</span> <code>{_e(t["reproduce"])}</code></td></tr>')
    return "".join(rows)


def _breakdown(title, summary):
    if not summary or not summary.get("breakdown"):
        return f"<h3>{_e(title)}</h3><p class='note'>not measured</p>"
    bd = summary["breakdown"]
    buckets = bd.get("buckets_ns", {})
    total = sum(buckets.get(b, 0) for b in BUCKETS) or 1
    parts = "".join(f'<span title="{_e(BUCKET_LABELS[b])} {buckets.get(b, 0) / 1e6:.2f} ms" style="width:'
                    f'{100 * buckets.get(b, 0) / total:.2f}%;background:{BUCKET_COLORS[b]}"></span>' for b in BUCKETS)
    rows = "".join(f'<tr><td><span class="bar" style="width:12px;background:{BUCKET_COLORS[b]}"></span> '
                   f'{_e(BUCKET_LABELS[b])}</td><td class="num">{buckets.get(b, 0) / 1e6:.2f} ms</td>'
                   f'<td class="num">{buckets.get(b, 0) / total:.1%}</td></tr>' for b in BUCKETS)
    tput = (summary.get("throughput") or {}).get("tokens_per_s")
    return (f'<h3>{_e(title)}: {bd.get("step_ns", 0) / 1e6:.1f} ms a step'
            + (f', {tput:,.0f} tok/s (profiled)' if tput else "") + '</h3>'
            f'<div class="stack">{parts}</div><table style="width:560px">{rows}</table>')


def render(result):
    unit = result.get("rate_unit", "tok/s")
    kept = [t for t in result["trials"] if t["kept"]]
    final = result["trials"] and max((t for t in kept), key=lambda t: t["index"], default=None)
    final_tok = max(final["tokens_per_s"]) if final else result["baseline_tokens_per_s"]
    refused = "".join(f'<tr><td>{_e(r["candidate"])}</td><td>{_e(r["reason"])}</td></tr>' for r in result["refused"])
    advice = "".join(f'<tr><td>{_e(a["rule"])}</td><td>{_e(a["title"])}</td><td>{_e(a["expected_gain"])}</td></tr>'
                     for a in result["advice"])
    changed = {k: v for k, v in result["settings"].items() if result["baseline"].get(k) != v}
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>dygrad.tune report</title>
<style>{CSS}</style></head><body>
<h1>dygrad.tune</h1>
<p class="note">{_e(result.get("cpu", ""))}; budget {result["budget_s"]:.0f} s, used {result["elapsed_s"]:.0f} s;
stopped: {_e(result["stopped"])}. Each trial ran at least {result["rounds"]} rounds of incumbent and candidate
alternately (A B A B; up to two more while the verdict was within the spread), each a fresh process of
{result["steps"]} steps ({result["warmup"]} warm-up steps not measured).</p>
<div class="figs"><div class="fig">baseline<b>{_rate(result["baseline_tokens_per_s"], unit)}</b></div>
<div class="fig">last kept change (its rounds)<b>{_rate(final_tok, unit)}</b></div>
<div class="fig">baseline peak<b>{_mib(result["baseline_peak_bytes"])}</b></div>
<div class="fig">memory limit<b>{_mib(result["memory_limit"]) if result["memory_limit"] else "none"}</b></div></div>
<p>Settings changed: <b>{_e(", ".join(f"{k}={v}" for k, v in changed.items()) or "none")}</b>
{_e(" ".join(f"{k}={v}" for k, v in result["environment"].items()))}</p>
<p class="note">baseline: <code>{_e(result["baseline_reproduce"])}</code><br>result: <code>{_e(result["reproduce"])}</code></p>
<h2>Trials</h2><p class="note">Bar: the candidate's best {unit}; the black mark is its incumbent's, measured in the same
rounds. Green: kept, red: not kept.</p>
<table><thead><tr><th>#</th><th>candidate</th><th>{unit}</th><th class="num">MFU</th><th>peak memory</th>
<th>verdict</th></tr></thead><tbody>{_trial_rows(result) or '<tr><td colspan="6">no trial ran</td></tr>'}</tbody></table>
<h2>Step breakdown, before and after</h2>{_breakdown("before", result["before"])}{_breakdown("after", result["after"])}
<h2>Refused settings</h2><table><tbody>{refused or '<tr><td>none</td></tr>'}</tbody></table>
<h2>The advisor on the baseline</h2><table><tbody>{advice or '<tr><td>no advice</td></tr>'}</tbody></table>
</body></html>"""
