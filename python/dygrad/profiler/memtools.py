"""Per-module costs, the leak finder and GC pauses, computed from one ProfileResult (docs/profiler-python.md,
"Per-module costs", "Leak finder", "GC pauses"). Plain Python over the recorded data: nothing here runs while
the program is profiled.
"""
import bisect
import os
from collections import defaultdict

from ._scopes import GC_RANGE_PREFIX

BACKWARD_BIT = 0x80000000
# Buffers meant to outlive a step: parameters (and what load_state_dict made) and optimizer states.
PERSISTENT_CATEGORIES = ("parameter", "optimizer_state")


# --- per-module costs ----------------------------------------------------------------------------------------
def module_costs(result):
    """One row per module scope, in call order (a parent before its children): device time (ns, summed over the
    session) of the Tasks its forward and its backward enqueued, inclusive of children and self, Task counts,
    and the peak allocated bytes while its forward / backward allocated (with profile_memory), plus a row
    "(outside modules)" for the Tasks no module issued. Empty without profile(with_modules=True)."""
    scopes = getattr(result, "module_scopes", None)
    op_modules = getattr(result, "op_modules", None)
    if not scopes or not op_modules:
        return []
    device = {op.seq: op.device_ns for op in result.ops}
    self_ns = defaultdict(lambda: [0, 0])
    self_tasks = defaultdict(lambda: [0, 0])
    for seq, scope in op_modules.items():
        sid, phase = scope & ~BACKWARD_BIT, 1 if scope & BACKWARD_BIT else 0
        self_ns[sid][phase] += device.get(seq, 0)
        self_tasks[sid][phase] += 1
    used = set(self_ns)
    for sid in list(used):  # the ancestors of every scope that issued Tasks
        parent = scopes.get(sid, ("", "", 0))[2]
        while parent and parent not in used:
            used.add(parent)
            parent = scopes.get(parent, ("", "", 0))[2]
    peak = _module_peaks(result, scopes)
    rows = {}
    for sid in sorted(used):
        path, tname, parent = scopes.get(sid, (f"scope {sid}", "?", 0))
        rows[sid] = {"id": sid, "path": path, "type": tname, "parent": parent if parent in used else 0,
                     "depth": path.count("."),
                     "self_forward_ns": self_ns[sid][0], "self_backward_ns": self_ns[sid][1],
                     "forward_ns": 0, "backward_ns": 0, "forward_tasks": 0, "backward_tasks": 0,
                     "forward_peak_bytes": peak.get((sid, 0)), "backward_peak_bytes": peak.get((sid, 1))}
    for sid in rows:
        node = sid
        while node:
            r = rows[node]
            r["forward_ns"] += self_ns[sid][0]
            r["backward_ns"] += self_ns[sid][1]
            r["forward_tasks"] += self_tasks[sid][0]
            r["backward_tasks"] += self_tasks[sid][1]
            node = r["parent"]
    out = list(rows.values())
    outside = sum(op.device_ns for op in result.ops if op.seq not in op_modules)
    out.append({"id": 0, "path": "(outside modules)", "type": "", "parent": 0, "depth": 0,
                "self_forward_ns": outside, "self_backward_ns": 0, "forward_ns": outside, "backward_ns": 0,
                "forward_tasks": sum(1 for op in result.ops if op.seq not in op_modules and op.ran),
                "backward_tasks": 0, "forward_peak_bytes": None, "backward_peak_bytes": None})
    return out


def _module_peaks(result, scopes):
    """(scope, phase) -> the highest allocated bytes reached by an allocation the scope (or a child) made."""
    events = getattr(result, "storage_events", None)
    if not events:
        return {}
    current = result.memory_at_start.get("allocated", 0)
    own = {}
    for e in events:
        if e.kind == "allocate":
            current += e.nbytes
            if e.module:
                key = (e.module & ~BACKWARD_BIT, 1 if e.module & BACKWARD_BIT else 0)
                if current > own.get(key, -1):
                    own[key] = current
        elif e.kind == "free":
            current -= e.nbytes
    peak = dict(own)
    for (sid, phase), value in own.items():
        parent = scopes.get(sid, ("", "", 0))[2]
        while parent:
            if value > peak.get((parent, phase), -1):
                peak[(parent, phase)] = value
            parent = scopes.get(parent, ("", "", 0))[2]
    return peak


# --- the leak finder -----------------------------------------------------------------------------------------
def live_at_stop(result):
    """The buffers allocated during the session and still alive when it stopped: dicts with ts_ns, nbytes,
    category, file, line, function, module."""
    live = {}
    for e in getattr(result, "storage_events", None) or ():
        if e.kind == "allocate":
            live[e.id] = {"ts_ns": e.ts_ns, "nbytes": e.nbytes, "category": e.category, "file": e.file,
                          "line": e.line, "function": e.function, "module": e.module}
        elif e.kind == "free":
            live.pop(e.id, None)
        elif e.kind == "retag" and e.id in live:
            live[e.id]["category"] = e.category
    return sorted(live.values(), key=lambda b: b["ts_ns"])


def find_leaks(result, min_steps=2):
    """Buffers that outlive their step and should not: made in step k (every step but the last), still alive
    when the session stopped, not parameters or optimizer states, and the same pattern in at least `min_steps`
    steps (a cache filled once is not a leak; memory that grows every step is). A step's kept buffers are one
    group, named by the buffer made last (the root that keeps the rest: the loss holding its graph, or the
    output appended to a list); groups with the same root line over several steps are one finding.

    Returns a list of dicts, largest first: file, line, function, site ("file:line"), kind ("output kept" when
    each step keeps one buffer, else "graph kept alive"), steps, tensors_per_step, bytes_per_step (mean),
    bytes (held at stop), other_sites (the other creation lines of the kept buffers, by bytes).
    Needs profile_memory and at least min_steps + 1 recorded steps."""
    markers = result.step_markers
    if len(markers) < min_steps + 2 or not getattr(result, "storage_events", None):
        return []
    first, last_begin = markers[0], markers[-2]
    kept = []
    for b in live_at_stop(result):
        if b["category"] in PERSISTENT_CATEGORIES or not (first <= b["ts_ns"] < last_begin):
            continue
        b["step"] = bisect.bisect_right(markers, b["ts_ns"]) - 1
        kept.append(b)
    # A line whose buffers survive from one step only made them once (lazy state, a cache): not a leak.
    steps_of_site = defaultdict(set)
    for b in kept:
        steps_of_site[(b["file"], b["line"])].add(b["step"])
    by_step = defaultdict(list)
    for b in kept:
        if len(steps_of_site[(b["file"], b["line"])]) >= min_steps:
            by_step[b["step"]].append(b)
    groups = defaultdict(list)  # root site -> [(step, buffers)]
    for step, buffers in sorted(by_step.items()):
        root = buffers[-1]
        groups[(root["file"], root["line"], root["function"])].append((step, buffers))
    findings = []
    for (file, line, function), steps in groups.items():
        if len(steps) < min_steps:
            continue
        total = sum(b["nbytes"] for _, bufs in steps for b in bufs)
        sites = defaultdict(int)
        for _, bufs in steps:
            for b in bufs:
                if (b["file"], b["line"]) != (file, line):
                    sites[f"{_short(b['file'])}:{b['line']}"] += b["nbytes"]
        single = all(len(bufs) == 1 for _, bufs in steps)
        findings.append({
            "file": file, "line": line, "function": function, "site": f"{_short(file)}:{line}" if file else "?",
            "kind": "output kept" if single else "graph kept alive",
            "steps": [s for s, _ in steps],
            "tensors_per_step": sum(len(b) for _, b in steps) / len(steps),
            "bytes_per_step": total / len(steps), "bytes": total,
            "other_sites": sorted(sites.items(), key=lambda kv: -kv[1])[:5],
        })
    findings.sort(key=lambda f: -f["bytes"])
    return findings


def _short(path):
    if not path:
        return "?"
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path
    except ValueError:
        return path


# --- GC pauses -----------------------------------------------------------------------------------------------
def gc_pauses(result):
    """The Python garbage collector's pauses on the host (gc.callbacks while recording): per step (by the step
    its pause began in) the count and total ns, and over the session the total, the longest and by generation."""
    pauses = [r for r in result.ranges if r.kind == "user" and r.name.startswith(GC_RANGE_PREFIX)]
    markers = result.step_markers
    steps = max(len(markers) - 1, 1)
    per_step = [[0, 0] for _ in range(steps)]
    by_gen = defaultdict(lambda: [0, 0])
    for r in pauses:
        i = min(max(bisect.bisect_right(markers, r.begin_ns) - 1, 0), steps - 1)
        per_step[i][0] += 1
        per_step[i][1] += r.duration_ns
        gen = r.name[len(GC_RANGE_PREFIX):].strip(" ()").replace("generation ", "")
        by_gen[gen][0] += 1
        by_gen[gen][1] += r.duration_ns
    total = sum(r.duration_ns for r in pauses)
    return {"count": len(pauses), "total_ns": total, "max_ns": max((r.duration_ns for r in pauses), default=0),
            "per_step_ns": total / steps, "per_step": [{"count": c, "ns": ns} for c, ns in per_step],
            "by_generation": {g: {"count": c, "ns": ns} for g, (c, ns) in sorted(by_gen.items())}}
