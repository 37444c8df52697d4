"""One trace of all ranks (docs/profiler.md, "One trace of all ranks"): each rank's Chrome trace, on one clock, as
its own processes in one file that Perfetto opens, with each collective's wait for the slowest rank drawn on a track
of its own, and the straggler named.

    with dg.profiler.profile() as prof:
        ...                                          # every rank profiles the same steps
    summary = dg.profiler.export_merged_trace(prof, "all_ranks.json")   # a collective: every rank calls it

Clocks: ranks on one machine share its steady clock; a rank on another machine is put on rank 0's clock by the
median, over several barriers, of the difference between the two clocks read as each leaves the barrier (its error
is the barrier's exit skew: tens of microseconds on a LAN). Collectives are matched by their order on each rank (every
rank issues the same sequence); a collective's wait on a rank is from its start there to its start on the rank that
started it last (the slowest to arrive), which is where the time a collective spends waiting for a straggler goes."""
import json
import socket
import statistics
import time

from .advisor import _advice

PID_STRIDE = 100        # rank r's processes are pid + 100 r
WAIT_TID = 900          # the track of a rank's waits for the slowest rank (in its device process)
FLOW_STRIDE = 10 ** 12  # flow ids made unique across ranks
SYNC_ROUNDS = 7


def _clock_offsets(dist, group):
    """Per rank, the nanoseconds to add to its steady clock to read rank 0's (0 on rank 0's machine)."""
    world = dist.get_world_size(group)
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname(), group=group)
    rounds = []
    for _ in range(SYNC_ROUNDS):
        dist.barrier(group=group)
        stamps = [None] * world
        dist.all_gather_object(stamps, time.monotonic_ns(), group=group)
        rounds.append(stamps)
    offsets = []
    for r in range(world):
        if hosts[r] == hosts[0]:
            offsets.append(0)
        else:
            offsets.append(int(statistics.median(s[0] - s[r] for s in rounds)))
    return offsets, hosts


def merge_traces(traces, offsets_ns=None, hosts=None):
    """traces: each rank's Chrome trace (a dict, as the profiler writes it), in rank order. Returns (the merged
    trace, a summary: the collectives matched, each rank's waits, the straggler)."""
    world = len(traces)
    offsets_ns = offsets_ns or [0] * world
    hosts = hosts or [""] * world
    origins = [t["otherData"]["origin_steady_ns"] + offsets_ns[r] for r, t in enumerate(traces)]
    start = min(origins)
    events, comm = [], []
    for r, trace in enumerate(traces):
        shift_us = (origins[r] - start) / 1000.0
        mine = []
        for e in trace["traceEvents"]:
            e = dict(e)
            e["pid"] = e["pid"] + PID_STRIDE * r
            if e["ph"] == "M":
                if e["name"] == "process_name":
                    where = f" on {hosts[r]}" if hosts[r] else ""
                    e["args"] = {"name": f"rank {r}{where}: {e['args']['name']}"}
                elif e["name"] == "process_sort_index":
                    e["args"] = {"sort_index": e["args"]["sort_index"] + PID_STRIDE * r}
            else:
                e["ts"] = round(e["ts"] + shift_us, 3)
                if e["ph"] in ("s", "f", "t") and "id" in e:
                    e["id"] = e["id"] + FLOW_STRIDE * r if isinstance(e["id"], int) else f"{r}:{e['id']}"
            if e.get("cat") == "comm" and e["ph"] == "X":
                mine.append(e)
            events.append(e)
        comm.append(sorted(mine, key=lambda e: e["ts"]))
    summary = _collective_waits(comm, events)
    summary["ranks"] = world
    summary["hosts"] = hosts
    summary["clock_offsets_ns"] = offsets_ns
    merged = {"traceEvents": events, "displayTimeUnit": "ns",
              "otherData": {"producer": "dygrad profiler (all ranks)", "ranks": world,
                            "origin_steady_ns": start, "straggler": summary.get("straggler")}}
    return merged, summary


def _collective_waits(comm, events):
    """Each matched collective's wait on every rank for the one that started it last; the waits as slices."""
    world = len(comm)
    n = min(len(c) for c in comm) if comm else 0
    matched = 0
    waited_us = [0.0] * world      # per rank: its time waiting for slower ranks
    caused_us = [0.0] * world      # per rank: the others' time waiting for it (it arrived last)
    last_count = [0] * world
    for i in range(n):
        group = [comm[r][i] for r in range(world)]
        if len({e["name"] for e in group}) != 1:
            break  # the sequences diverge (the profiled windows differ): stop matching
        matched += 1
        starts = [e["ts"] for e in group]
        last = max(range(world), key=lambda r: starts[r])
        last_count[last] += 1
        for r in range(world):
            wait = starts[last] - starts[r]
            if wait <= 0:
                continue
            waited_us[r] += wait
            caused_us[last] += wait
            events.append({"name": f"waiting for rank {last}", "cat": "comm_wait", "ph": "X",
                           "ts": round(starts[r], 3), "dur": round(wait, 3), "pid": group[r]["pid"], "tid": WAIT_TID,
                           "args": {"collective": group[r]["name"], "slowest_rank": last}})
    for r in range(world):
        if waited_us[r] > 0:
            pid = 2 + PID_STRIDE * r
            events.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": WAIT_TID,
                           "args": {"name": "waiting for the slowest rank"}})
            events.append({"name": "thread_sort_index", "ph": "M", "ts": 0, "pid": pid, "tid": WAIT_TID,
                           "args": {"sort_index": 100500}})
    straggler = None
    if matched and max(caused_us) > 0:
        straggler = max(range(world), key=lambda r: caused_us[r])
    return {"collectives": matched, "waited_ms": [w / 1000 for w in waited_us],
            "caused_wait_ms": [c / 1000 for c in caused_us], "last_arrivals": last_count, "straggler": straggler}


def rule_straggler(summary, min_share=0.5):
    """An advisor rule over a merged trace's summary: one rank arrives last at most collectives and the others wait
    for it. None when no rank stands out."""
    k = summary.get("straggler")
    if k is None or not summary["collectives"]:
        return None
    share = summary["last_arrivals"][k] / summary["collectives"]
    if share < min_share:
        return None
    caused = summary["caused_wait_ms"][k]
    return _advice(
        "straggler", f"Rank {k} is the straggler", "high" if share >= 0.8 else "medium",
        f"rank {k} started {summary['last_arrivals'][k]} of the {summary['collectives']} collectives last; the other "
        f"ranks waited {caused:.2f} ms for it in all",
        {"straggler": k, "last_share": share, "caused_wait_ms": caused},
        None,
        f"look at rank {k}'s own trace in the merged file: a slower machine or core (other load, a throttled CPU), "
        f"more work (an unbalanced batch or shard), or host time before its collectives (data loading, logging, a "
        f"checkpoint on that rank only); balance the work or move the extra work off the step")


def export_merged_trace(prof, path, group=None):
    """Writes every rank's trace of `prof` (a profile or its result) into one Chrome trace at `path` on rank 0, clocks
    aligned, and returns the summary (every rank gets it): a collective, every rank calls it."""
    from .. import distributed as dist
    result = getattr(prof, "result", prof)
    own = json.loads(result._recorder.chrome_trace_json())
    offsets, hosts = _clock_offsets(dist, group)
    gathered = [None] * dist.get_world_size(group) if dist.get_rank(group) == 0 else None
    dist.gather_object(own, gathered, group_dst=0, group=group)
    summary = [None]
    if gathered is not None:
        merged, summary[0] = merge_traces(gathered, offsets, hosts)
        advice = rule_straggler(summary[0])
        summary[0]["advice"] = [advice] if advice else []
        with open(path, "w") as f:
            json.dump(merged, f)
    dist.broadcast_object_list(summary, group_src=0, group=group)
    return summary[0]
