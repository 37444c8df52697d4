"""dygrad.cpu: torch.cpu's device-agnostic helpers (torch.cpu.amp.autocast, deprecated in torch 2.13 as here).

dygrad's CPU runs ops asynchronously on one stream (docs/stream.md), so where torch's CPU helpers are placeholders for
device-agnostic code, dygrad's act: `synchronize()` waits for the stream, an `Event` marks a point in it, and an
`Event(enable_timing=True)` times the stream between two marks as torch.cuda.Event does (docs/stream.md, "Timing
marks"; docs/pytorch-api.md lists the differences).
"""
from .. import _C
from . import amp  # noqa: F401


def is_available():
    return True


def device_count():
    return 1


def current_device():
    """Always 'cpu' (torch's)."""
    return "cpu"


def set_device(device):
    """Does nothing: there is one CPU device (torch's)."""


def is_initialized():
    return True


def synchronize(device=None):
    """Waits until every op enqueued on the CPU's stream has run; raises a deferred kernel error (`device` is ignored,
    as torch's)."""
    _C.synchronize()


class Event:
    """A point in the CPU's stream. `record()` marks it (an op that runs once every op enqueued before it has run),
    `query()` tells whether the stream has passed it, `synchronize()` waits for it, and with `enable_timing=True`,
    `elapsed_time(end)` is the stream's wall time from this mark to `end`'s in milliseconds, as torch.cuda.Event's.

    torch.cpu.Event takes no arguments and does nothing (torch's CPU is synchronous); dygrad's takes torch.cuda.Event's
    (`enable_timing`, `blocking`, `interprocess`: the last two have no effect on one CPU process).
    `device_time(end)`, dygrad's own, is the time the stream spent running ops between the two marks (its busy
    time, never more than elapsed_time)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = bool(enable_timing)
        self.blocking = bool(blocking)
        self.interprocess = bool(interprocess)
        self._mark = None  # the record_time op's result: [monotonic ns, stream busy ns] once it has run
        self._seq = 0      # its position on the stream

    def record(self, stream=None):
        """Marks the point the stream has reached (after every op enqueued so far)."""
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"Event.record: expected a torch.cpu.Stream or None, got {type(stream).__name__}")
        self._mark = _C._record_time()
        self._seq = _C._stream_mark()

    def query(self):
        """Whether the stream has run every op enqueued before the mark (True when never recorded, as torch's)."""
        return self._mark is None or _C._stream_done(self._seq)

    def synchronize(self):
        """Waits until the stream has reached the mark; raises a deferred kernel error of the ops before it."""
        if self._mark is not None:
            _C._stream_wait(self._seq)

    def wait(self, stream=None):
        """Makes `stream`'s later ops wait for the mark: the CPU has one stream, whose ops already run in order."""

    def _times(self, end, what):
        for event, name in ((self, "start"), (end, "end")):
            if not isinstance(event, Event):
                raise TypeError(f"Event.{what}: expected a torch.cpu.Event, got {type(event).__name__}")
            if not event.enable_timing:
                raise RuntimeError(f"Event.{what}: the {name} event was created without enable_timing=True")
            if event._mark is None:
                raise RuntimeError(f"Event.{what}: the {name} event has not been recorded")
        self.synchronize()
        end.synchronize()
        return self._mark.tolist(), end._mark.tolist()

    def elapsed_time(self, end_event):
        """Milliseconds of the stream's wall time from this mark to `end_event`'s (waits for both)."""
        (t0, _), (t1, _) = self._times(end_event, "elapsed_time")
        return (t1 - t0) / 1e6

    def device_time(self, end_event):
        """Milliseconds the stream spent running ops between this mark and `end_event`'s (waits for both)."""
        (_, b0), (_, b1) = self._times(end_event, "device_time")
        return (b1 - b0) / 1e6

    def __repr__(self):
        return f"torch.cpu.Event(enable_timing={self.enable_timing}, recorded={self._mark is not None})"


class Stream:
    """The CPU's one stream (torch.cpu.Stream, for device-agnostic code: every instance is that stream)."""

    def __init__(self, priority=-1):
        self.priority = priority

    def wait_stream(self, stream):
        pass

    def record_event(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event):
        pass

    def synchronize(self):
        synchronize()

    def query(self):
        return _C._stream_done(_C._stream_mark())


_default_stream = Stream()
_current_stream = _default_stream


def current_stream(device=None):
    """The selected Stream (`device` is ignored, as torch's)."""
    return _current_stream


class StreamContext:
    """`with torch.cpu.stream(s)`: selects s (None: no change), as torch's."""

    def __init__(self, stream):
        self.stream = stream
        self.prev_stream = _default_stream

    def __enter__(self):
        global _current_stream
        if self.stream is None:
            return None
        self.prev_stream = _current_stream
        _current_stream = self.stream
        return None

    def __exit__(self, *exc):
        global _current_stream
        if self.stream is not None:
            _current_stream = self.prev_stream
        return False


def stream(stream):
    return StreamContext(stream)
