"""dygrad.profiler: where does step time go, and is the host or the device the bottleneck?

PyTorch-aligned recording API (docs/profiler-python.md)::

    with dg.profiler.profile(schedule=dg.profiler.schedule(wait=1, warmup=1, active=3),
                             on_trace_ready=dg.profiler.trace_handler("runs/x/profile")) as prof:
        for batch in loader:
            with dg.profiler.record_function("forward"):
                ...
            prof.step()
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=10))

The recorder is the C++ core (docs/profiler.md): op host spans (Python entry to enqueue) and device spans linked
by flows, user ranges, data-loader waits, sync points, allocator counters. Off, it costs one branch per op.
"""
import enum
import functools
import os

from .. import _C
from .. import amp as _amp
from ..runtime import get_context
from . import _scopes
from ._result import MEMORY_CATEGORIES, MemorySample, OpEvent, OpStat, OpStatsTable, ProfileResult, Range  # noqa: F401

__all__ = ["profile", "export_merged_trace", "schedule", "ProfilerAction", "ProfilerActivity", "record_function", "record_data_wait",
           "record_comm", "data_wait", "trace_handler", "ProfileResult", "now_ns", "is_recording"]


class ProfilerActivity(enum.Enum):
    """Accepted for PyTorch compatibility: dygrad always records the host and its stream."""
    CPU = "cpu"
    CUDA = "cuda"


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait, warmup, active, repeat=0, skip_first=0):
    """torch.profiler.schedule: skip `skip_first` steps, then cycles of `wait` idle, `warmup` and `active`
    recorded steps, `repeat` times (0: forever). Returns step -> ProfilerAction."""
    for name, v in (("wait", wait), ("warmup", warmup), ("active", active), ("repeat", repeat),
                    ("skip_first", skip_first)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"[profiler.schedule] {name} must be a non-negative int, got {v!r}")
    if active < 1:
        raise ValueError(f"[profiler.schedule] active must be at least 1, got {active}")
    cycle = wait + warmup + active

    def action(step):
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        pos = step % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD_AND_SAVE if pos == cycle - 1 else ProfilerAction.RECORD

    action.cycle = (skip_first, wait, warmup, active, repeat)
    return action


def now_ns():
    """The profiler's clock (steady, ns): pass its readings to record_data_wait / record_comm."""
    return _C._profiler_now_ns()


def is_recording():
    return _C._profiler_recording()


def record_data_wait(begin_ns, end_ns):
    """The training loop waited for its data from begin_ns to end_ns (now_ns() readings)."""
    _C._record_data_wait(int(begin_ns), int(end_ns))


def record_comm(name, begin_ns, end_ns, async_=False):
    """A collective or transfer; async_: it ran beside compute (only its exposed part costs step time)."""
    _C._record_comm(str(name), int(begin_ns), int(end_ns), bool(async_))


class data_wait:
    """`with data_wait():` marks the enclosed wait for data (the DataLoader uses it)."""
    __slots__ = ("_begin",)

    def __enter__(self):
        self._begin = _C._profiler_now_ns() if _C._profiler_recording() else None
        return self

    def __exit__(self, *exc):
        if self._begin is not None:
            _C._record_data_wait(self._begin, _C._profiler_now_ns())
        return False


class record_function:
    """A named user range on the host track; as a context manager or a decorator. Ranges nest."""

    def __init__(self, name, args=None):
        self.name = str(name)
        self._engaged = []

    def __enter__(self):
        engaged = _C._profiler_recording()
        if engaged:
            _C._record_function_enter(self.name)
        self._engaged.append(engaged)
        return self

    def __exit__(self, *exc):
        if self._engaged.pop():
            _C._record_function_exit()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with record_function(self.name):
                return fn(*args, **kwargs)
        return wrapped


class profile:
    """torch.profiler.profile for dygrad.

    Without a schedule the whole block is recorded, with a step marker at the start and at every step().
    With one, each cycle's active steps are recorded (warmup steps run unrecorded: dygrad's recorder needs no
    warm-up) and on_trace_ready(prof) is called when a cycle ends, with prof.result holding it.
    """

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=True, with_modules=False,
                 host_bound_tolerance_ns=None, experimental_config=None):
        if schedule is not None and not callable(schedule):
            raise TypeError(f"[profiler.profile] schedule must be callable, got {type(schedule).__name__}")
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError(f"[profiler.profile] on_trace_ready must be callable, got {type(on_trace_ready).__name__}")
        self.activities = activities
        self.schedule = schedule
        self.on_trace_ready = on_trace_ready
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.with_stack = bool(with_stack)
        self.with_modules = bool(with_modules)
        self.host_bound_tolerance_ns = -1 if host_bound_tolerance_ns is None else int(host_bound_tolerance_ns)
        self.step_num = 0
        self.result = None    # the last finished cycle's ProfileResult
        self.results = []     # every finished cycle
        self._recorder = None
        self._context = None
        self._started = False

    # --- the session ------------------------------------------------------------------------------------------
    def _action(self, step):
        return self.schedule(step) if self.schedule is not None else ProfilerAction.RECORD

    def _begin_recording(self):
        self._recorder = _C._Profiler(self.record_shapes, self.profile_memory, self.with_stack,
                                      self.host_bound_tolerance_ns)
        c = get_context()
        self._context = {"synchronize": c.synchronize, "deterministic": c.deterministic, "num_threads": c.num_threads}
        self._autocast_at_start = _amp.autocast_regions_entered()
        self._recorder.start()
        _scopes.start(self.with_modules)  # module scopes (with_modules) and gc pauses
        self._recorder.step()  # the first step begins now

    def _end_recording(self, save):
        recorder, self._recorder = self._recorder, None
        _scopes.stop()
        recorder.stop()
        # the dtypes of the CPU autocast regions entered while recording (a bf16 autocast run's MFU is against
        # the bf16 GEMM peak, summary.build_summary)
        before = self._autocast_at_start
        self._context["autocast_dtypes"] = sorted(d for d, n in _amp.autocast_regions_entered().items()
                                                  if n > before.get(d, 0))
        self.result = ProfileResult(recorder, self._context, module_scopes=_scopes.scopes())
        self.results.append(self.result)
        if save and self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def start(self):
        if self._started:
            raise RuntimeError("[profiler.profile] start() called twice")
        self._started = True
        self.step_num = 0
        if self._action(0) in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            self._begin_recording()
        return self

    def stop(self):
        if not self._started:
            return
        self._started = False
        if self._recorder is not None:
            self._end_recording(save=True)

    def step(self):
        """Ends the current step: a step marker, and the schedule's transitions."""
        if not self._started:
            raise RuntimeError("[profiler.profile] step() outside the profiling session")
        prev = self._action(self.step_num)
        self.step_num += 1
        nxt = self._action(self.step_num)
        recording = self._recorder is not None
        if recording:
            self._recorder.step()
        if prev == ProfilerAction.RECORD_AND_SAVE and recording:
            self._end_recording(save=True)
            recording = False
        if nxt in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE) and not recording:
            self._begin_recording()

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        return False

    # --- results (of the last finished cycle) ------------------------------------------------------------------
    def _require_result(self, what):
        if self.result is None:
            raise RuntimeError(f"[profiler.profile] {what}: nothing recorded yet (the session or its first active "
                               "cycle has not finished)")
        return self.result

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        return self._require_result("key_averages").key_averages(group_by_input_shape)

    def export_chrome_trace(self, path):
        self._require_result("export_chrome_trace").export_chrome_trace(path)

    def export_op_stats_csv(self, path):
        self._require_result("export_op_stats_csv").export_op_stats_csv(path)

    def export_breakdown_json(self, path):
        self._require_result("export_breakdown_json").export_breakdown_json(path)

    @property
    def breakdown(self):
        return self._require_result("breakdown").breakdown

    def events(self):
        return self._require_result("events").ops


def export_merged_trace(prof, path, group=None):
    """One Chrome trace of every rank (a collective: every rank calls it; rank 0 writes it): see profiler/merge.py."""
    from .merge import export_merged_trace as export
    return export(prof, path, group)


def trace_handler(dir_name, **summary_options):
    """on_trace_ready that writes a run directory (trace.json, op_stats.csv, breakdown.json, summary.json,
    report.html) per finished cycle into dir_name (cycle k > 0 into dir_name/cycle_k). summary_options go to
    dygrad.profiler.summary.write_run_dir (batch_size=, seq_len=, model_config=, label=, ...)."""

    def handler(prof):
        index = len(prof.results) - 1
        out = dir_name if index == 0 else os.path.join(dir_name, f"cycle_{index}")
        write_run_dir(prof.result, out, **summary_options)
    return handler


def write_run_dir(result, run_dir, **summary_options):
    """Writes the run directory of docs/profiler-python.md for one ProfileResult."""
    from . import summary
    return summary.write_run_dir(result, run_dir, **summary_options)

