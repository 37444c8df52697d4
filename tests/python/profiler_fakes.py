"""Synthetic ProfileResult-shaped objects (docs/profiler-python.md) for unit tests of metrics, summary and
advisor: the contract's named tuples and a result built from a list of ops, ranges, markers and samples."""
import itertools
from collections import namedtuple

OpEvent = namedtuple("OpEvent", "seq name host_thread host_begin_ns enqueue_ns device_thread device_begin_ns "
                                "device_end_ns flops bytes failed file line input_shapes output_shapes stack device")
Range = namedtuple("Range", "kind name thread begin_ns end_ns async_")
MemorySample = namedtuple("MemorySample", "ts_ns allocated reserved by_category")
Row = namedtuple("Row", "name input_shapes count ran device_total_ns device_mean_ns host_total_ns flops bytes "
                        "device_percent")
_seq = itertools.count(1)
BUCKETS = ("compute", "exposed_comm", "data_wait", "host_bound", "other_idle")


def op(name, host_begin, enqueue, device_begin, device_end, flops=0.0, nbytes=0.0, thread=0):
    return OpEvent(next(_seq), name, thread, host_begin, enqueue, 1, device_begin, device_end, flops, nbytes, False, "",
                   0, None, None, None, "cpu")


def sync(name, begin, end):
    return Range("sync", name, 0, begin, end, False)


def sample(ts, allocated, reserved, **by_category):
    full = {c: 0 for c in ("activation", "parameter", "gradient", "optimizer_state", "temporary", "other")}
    full.update(by_category)
    return MemorySample(ts, allocated, reserved, full)


def step_record(index, begin, step_ns, buckets=None, flops=0.0, num_ops=0, host_dispatch_ns=0):
    buckets_ns = {b: 0 for b in BUCKETS}
    buckets_ns.update(buckets or {})
    buckets_ns["other_idle"] += step_ns - sum(buckets_ns.values())
    return {"index": index, "begin_ns": begin, "step_ns": step_ns, "buckets_ns": buckets_ns,
            "fractions": {b: v / step_ns for b, v in buckets_ns.items()}, "overlapped_comm_ns": 0,
            "host_dispatch_ns": host_dispatch_ns, "num_ops": num_ops, "flops": flops, "bytes": 0.0,
            "achieved_flops_per_second": flops / (step_ns / 1e9), "dominant": max(buckets_ns, key=buckets_ns.get)}


class FakeResult:
    """A ProfileResult stand-in: steps of equal length from step_markers, one mean breakdown step."""

    def __init__(self, ops=(), ranges=(), step_markers=(0, 1_000_000), memory=(), context=None, buckets=None,
                 flops_per_step=0.0, host_dispatch_ns=0):
        self.ops, self.ranges, self.memory = list(ops), list(ranges), list(memory)
        self.step_markers = list(step_markers)
        self.start_ns = self.step_markers[0] if self.step_markers else 0
        self.stop_ns = self.step_markers[-1] if self.step_markers else 1_000_000
        self.context = {"synchronize": False, "deterministic": False, "num_threads": 2, **(context or {})}
        self.memory_at_start = self.memory_at_stop = {"allocated": 0, "reserved": 0, "peak_allocated": 0,
                                                      "peak_reserved": 0, "allocated_by_category": {}}
        steps = [step_record(i, b, e - b, {k: v * (e - b) for k, v in (buckets or {}).items()},
                             flops_per_step, num_ops=len(self.ops), host_dispatch_ns=host_dispatch_ns)
                 for i, (b, e) in enumerate(zip(self.step_markers[:-1], self.step_markers[1:]))]
        mean = dict(steps[0]) if steps else {}
        self.breakdown = {"definitions": {}, "from_markers": len(steps) > 0, "steps": steps, "mean": mean}

    def key_averages(self, group_by_input_shape=False):
        rows = {}
        for o in self.ops:
            rows.setdefault(o.name, []).append(o)
        total = sum(o.device_end_ns - o.device_begin_ns for o in self.ops) or 1
        out = []
        for name, ops in rows.items():
            device = sum(o.device_end_ns - o.device_begin_ns for o in ops)
            out.append(Row(name, None, len(ops), len(ops), device, device / len(ops),
                           sum(o.enqueue_ns - o.host_begin_ns for o in ops), sum(o.flops for o in ops),
                           sum(o.bytes for o in ops), 100 * device / total))
        return out

    def export_chrome_trace(self, path):
        open(path, "w").write("{}")

    def export_op_stats_csv(self, path):
        open(path, "w").write("name\n")

    def export_breakdown_json(self, path):
        import json
        with open(path, "w") as f:
            json.dump(self.breakdown, f)


def ops_from_names(names, begin=0, gap=10, length=100, thread=0, nbytes=1000.0):
    """Ops named `names` issued back to back from `begin`, each `length` ns on the device."""
    out, t = [], begin
    for name in names:
        out.append(op(name, t, t + gap, t + gap, t + gap + length, nbytes=nbytes, thread=thread))
        t += gap + length
    return out
