"""ProfileResult: one finished profiling session as plain Python data (docs/profiler-python.md).

Built once from the C++ recorder after it stopped; the exports (Chrome trace, op-stats CSV, breakdown JSON) are
written by the C++ core from the same data.
"""
import json
import sys
from collections import namedtuple

MEMORY_CATEGORIES = ("activation", "parameter", "gradient", "optimizer_state", "temporary", "other", "scratch",
                     "communication")  # the C++ enum's order (core/allocator.h)

# seq: the Task's event (the CPU's Tasks: its stream's sequence number; another device's carry the stream's number in
# the top byte, docs/devices.md); device: the device whose stream ran it ("cpu", "test:0").
OpEvent = namedtuple("OpEvent", "seq name host_thread host_begin_ns enqueue_ns device_thread device_begin_ns "
                                "device_end_ns flops bytes failed file line input_shapes output_shapes stack device")
OpEvent.ran = property(lambda self: self.device_thread >= 0)
OpEvent.device_ns = property(lambda self: self.device_end_ns - self.device_begin_ns if self.device_thread >= 0 else 0)
OpEvent.host_ns = property(lambda self: self.enqueue_ns - self.host_begin_ns)

Range = namedtuple("Range", "kind name thread begin_ns end_ns async_")
Range.duration_ns = property(lambda self: self.end_ns - self.begin_ns)

StorageEvent = namedtuple("StorageEvent", "ts_ns kind id nbytes category thread module file line function")

MemorySample = namedtuple("MemorySample", "ts_ns allocated reserved by_category")

# torch.profiler's sort keys and dygrad's own, mapped to a row attribute (largest first).
_SORT_KEYS = {
    "device_time_total": "device_total_ns", "device_time": "device_mean_ns",
    "self_device_time_total": "device_total_ns",
    "cuda_time_total": "device_total_ns", "self_cuda_time_total": "device_total_ns", "cuda_time": "device_mean_ns",
    "cpu_time_total": "host_total_ns", "self_cpu_time_total": "host_total_ns", "cpu_time": "host_mean_ns",
    "host_time_total": "host_total_ns", "host_time": "host_mean_ns",
    "count": "count", "flops": "flops", "bytes": "bytes", "name": "name",
}


class OpStat(namedtuple("OpStat", "name input_shapes count ran device_total_ns device_min_ns device_max_ns "
                                  "host_total_ns flops bytes device_percent")):
    """One row of key_averages(): every Task of one op (and input shapes, when grouped by them)."""
    __slots__ = ()

    @property
    def key(self):
        return self.name

    @property
    def device_mean_ns(self):
        return self.device_total_ns / self.ran if self.ran else 0.0

    @property
    def host_mean_ns(self):
        return self.host_total_ns / self.count if self.count else 0.0

    @property
    def gflops_per_second(self):
        return self.flops / self.device_total_ns if self.device_total_ns else 0.0

    # torch.profiler's FunctionEventAvg names, in microseconds.
    @property
    def device_time_total(self):
        return self.device_total_ns / 1e3

    @property
    def cpu_time_total(self):
        return self.host_total_ns / 1e3


class OpStatsTable(list):
    """key_averages(): a list of OpStat rows, largest device time first, with torch's .table()."""

    def table(self, sort_by="device_time_total", row_limit=100, max_name_column_width=40):
        if sort_by not in _SORT_KEYS:
            raise ValueError(f"[key_averages.table] unknown sort_by {sort_by!r}; one of {sorted(_SORT_KEYS)}")
        attr = _SORT_KEYS[sort_by]
        rows = sorted(self, key=lambda r: getattr(r, attr), reverse=attr != "name")
        if row_limit is not None and row_limit > 0:
            rows = rows[:row_limit]
        grouped = any(r.input_shapes for r in self)
        w = max([len("Name")] + [min(len(r.name), max_name_column_width) for r in rows])
        head = (f"{'Name':<{w}}  {'Calls':>7}  {'Device total':>13}  {'Device %':>8}  {'Device avg':>11}  "
                f"{'Host total':>11}  {'Host avg':>9}  {'GFLOP/s':>9}")
        if grouped:
            head += "  Input shapes"
        line = "-" * len(head)
        out = [line, head, line]
        for r in rows:
            text = (f"{r.name[:w]:<{w}}  {r.count:>7}  {_ms(r.device_total_ns):>13}  {r.device_percent:>7.2f}%  "
                    f"{_us(r.device_mean_ns):>11}  {_ms(r.host_total_ns):>11}  {_us(r.host_mean_ns):>9}  "
                    f"{r.gflops_per_second:>9.2f}")
            if grouped:
                text += "  " + r.input_shapes
            out.append(text)
        out.append(line)
        device = sum(r.device_total_ns for r in self)
        host = sum(r.host_total_ns for r in self)
        out.append(f"Device time total: {_ms(device)}   Host dispatch total: {_ms(host)}   "
                   f"Ops: {sum(r.count for r in self)}")
        return "\n".join(out)

    def __str__(self):
        return self.table()


def _ms(ns):
    return f"{ns / 1e6:.3f} ms"


def _us(ns):
    return f"{ns / 1e3:.2f} us"


class ProfileResult:
    """Everything one session recorded (docs/profiler-python.md, "ProfileResult")."""

    def __init__(self, recorder, context, module_scopes=None):
        self._recorder = recorder
        self.context = dict(context)
        self.start_ns = recorder.start_ns
        self.stop_ns = recorder.stop_ns
        self.ops = [OpEvent(*t) for t in recorder.ops()]
        self.ranges = [Range(*t) for t in recorder.ranges()]
        self.step_markers = list(recorder.step_markers())
        self.memory = [MemorySample(ts, a, r, dict(zip(MEMORY_CATEGORIES, by))) for ts, a, r, by in recorder.memory()]
        self.memory_at_start = recorder.memory_at_start()
        self.memory_at_stop = recorder.memory_at_stop()
        self.threads = list(recorder.threads())
        self.breakdown = json.loads(recorder.breakdown_json())
        # Per-module costs and storage lifetimes (dygrad.profiler.memtools): the module scope of each op issued
        # in one (seq -> scope id, bit 31 set for a backward Task), the scopes (id -> (path, type, parent id)),
        # and every buffer's allocate / free / retag with its creation site (profile_memory).
        self.op_modules = dict(recorder.op_modules())
        self.module_scopes = dict(module_scopes or {})
        self.storage_events = [StorageEvent(*t) for t in recorder.storage_events()]
        self._key_averages = {}

    # --- views -------------------------------------------------------------------------------------------------
    @property
    def num_steps(self):
        return len(self.breakdown["steps"])

    def ranges_of(self, kind):
        return [r for r in self.ranges if r.kind == kind]

    def key_averages(self, group_by_input_shape=False):
        if group_by_input_shape not in self._key_averages:
            rows = self._recorder.op_stats(group_by_input_shape)
            self._key_averages[group_by_input_shape] = OpStatsTable(OpStat(*r) for r in rows)
        return self._key_averages[group_by_input_shape]

    def breakdown_table(self):
        return self._recorder.breakdown_table()

    # --- exports -----------------------------------------------------------------------------------------------
    def chrome_trace_json(self):
        return self._recorder.chrome_trace_json()

    # The files are written by C++ (profiler/format.cpp), which Python's audit hooks do not see: each export raises
    # the "open" event first, as Python's open does, so a hook (the tuner's scratch guard, docs/tune.md) sees it.
    def export_chrome_trace(self, path):
        sys.audit("open", str(path), "w", 0)
        self._recorder.export_chrome_trace(str(path))

    def export_op_stats_csv(self, path, group_by_input_shape=False):
        sys.audit("open", str(path), "w", 0)
        self._recorder.export_op_stats_csv(str(path), group_by_input_shape)

    def export_breakdown_json(self, path):
        sys.audit("open", str(path), "w", 0)
        self._recorder.export_breakdown_json(str(path))

    def __repr__(self):
        return (f"<ProfileResult {len(self.ops)} ops, {len(self.ranges)} ranges, {self.num_steps} steps, "
                f"{(self.stop_ns - self.start_ns) / 1e6:.1f} ms>")
