"""dygrad.cuda: torch.cuda's probes, streams, events and memory statistics over dygrad's CUDA backend (docs/cuda.md).

The backend is a plugin (libdygrad_cuda.so) that the library loads when it is built; GPUs come up on first use, as
torch initialises CUDA lazily. Without a GPU every probe answers as torch does: is_available() is False,
device_count() 0, and the calls that need a GPU raise torch's errors - AssertionError "Torch not compiled with CUDA
enabled" when the plugin is not built, RuntimeError with torch's reason (no driver, no GPU) when it is.
Differences from torch: each GPU has one stream (dygrad's stream per device, docs/devices.md), so Stream() is that
stream, wait_stream/wait_event order nothing further, and Event.elapsed_time is not provided."""
from . import _C
from . import amp as _amp

OutOfMemoryError = _C.OutOfMemoryError  # torch.cuda.OutOfMemoryError is torch.OutOfMemoryError


def _status():
    return _C._cuda_status()


def _built():
    """Whether this build has the CUDA backend (its plugin loaded)."""
    return _status()["built"]


def is_available():
    """True when the CUDA backend is built and the driver reports a GPU."""
    return device_count() > 0


def device_count():
    status = _status()
    return status["available"] if status["built"] else 0


def is_initialized():
    """Whether the GPUs are up (a CUDA tensor or call brought them up)."""
    return _status()["up"] > 0


def _lazy_init(name):
    """Brings the GPUs up, or raises torch's error for why there are none."""
    status = _status()
    if not status["built"]:
        # torch built without CUDA raises AssertionError from these calls; dygrad without the plugin does the same.
        raise AssertionError(f"torch.cuda.{name}: dygrad was built without a CUDA backend (Torch not compiled with "
                             "CUDA enabled)")
    if status["available"] == 0:
        raise RuntimeError(f"[cuda.{name}] {status['unavailable'] or 'No CUDA GPUs are available'}")
    if status["up"] == 0:
        _C._check_device(f"cuda.{name}", "cuda:0")  # the first use brings every GPU up


def _device(device=None):
    """'cuda:N' for None (GPU 0: dygrad has no current-device setting), an int, a str or a device."""
    if device is None:
        return "cuda:0"
    if isinstance(device, int) and not isinstance(device, bool):
        return f"cuda:{device}"
    text = str(device)
    return "cuda:0" if text == "cuda" else text


def manual_seed(seed):
    """A no-op: dygrad's generator is one for every device (torch seeds CUDA's lazily, only once initialised)."""


def manual_seed_all(seed):
    """A no-op, as manual_seed."""


def synchronize(device=None):
    """Waits for every Task enqueued on the GPU's stream; raises its deferred error (docs/async-errors.md)."""
    _lazy_init("synchronize")
    _C._device_synchronize(_device(device))


def current_device():
    _lazy_init("current_device")
    return 0


def get_device_name(device=None):
    _lazy_init("get_device_name")
    index = int(_device(device).split(":")[1])
    return _status()["names"][index]


def get_device_properties(device=None):
    _lazy_init("get_device_properties")
    raise NotImplementedError("[cuda.get_device_properties] dygrad does not report a GPU's properties yet")


def is_bf16_supported(including_emulation=True):
    """True with a GPU (every GPU the backend is compiled for, sm_90 by default, computes in bfloat16)."""
    return is_available()


def memory_allocated(device=None):
    """The GPU pool's allocated bytes (dygrad.memory's statistics); 0 before CUDA is up, as torch's."""
    return _C.memory_allocated(_device(device)) if is_initialized() else 0


def max_memory_allocated(device=None):
    return _C.max_memory_allocated(_device(device)) if is_initialized() else 0


def memory_reserved(device=None):
    return _C.memory_reserved(_device(device)) if is_initialized() else 0


def max_memory_reserved(device=None):
    return _C.max_memory_reserved(_device(device)) if is_initialized() else 0


def memory_stats(device=None):
    return _C.memory_stats(_device(device)) if is_initialized() else {}


def reset_peak_memory_stats(device=None):
    if is_initialized():
        _C.reset_peak_memory_stats(_device(device))


def empty_cache():
    """Returns every GPU pool's unused cached segments to the driver; a no-op before CUDA is up, as torch's."""
    status = _status()
    for index in range(status["up"] if status["built"] else 0):
        _C.empty_cache(f"cuda:{index}")


class amp:  # noqa: N801 -- torch.cuda.amp, the deprecated spelling of torch.amp for CUDA
    @staticmethod
    def GradScaler(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,  # noqa: N802
                   enabled=True):
        return _amp.GradScaler("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    @staticmethod
    def autocast(enabled=True, dtype=None, cache_enabled=True):
        return _amp.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


# --- streams and events. Each GPU has one stream (dygrad's, docs/devices.md): Stream() is that stream, and every
# Task on it runs in order, so waits between streams of one GPU order nothing further. Without a GPU constructing one
# raises, as torch's does.
class Stream:
    def __init__(self, device=None, priority=0, **kwargs):
        _lazy_init("Stream")
        self.device = _device(device)
        self.priority = priority

    def synchronize(self):
        _C._device_synchronize(self.device)

    def query(self):
        return _C._device_event_done(self.device, _C._device_event(self.device))

    def record_event(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event):
        """Orders nothing further: the event's Tasks come before this stream's later ones (one stream per GPU)."""

    def wait_stream(self, stream):
        """Orders nothing further (one stream per GPU)."""

    def __eq__(self, other):
        return isinstance(other, Stream) and other.device == self.device

    def __hash__(self):
        return hash(self.device)

    def __repr__(self):
        return f"<dygrad.cuda.Stream device={self.device}>"


class Event:
    """A point on a GPU's stream: the last Task enqueued when it was recorded."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        _lazy_init("Event")
        self._device, self._seq = None, 0

    def record(self, stream=None):
        self._device = stream.device if stream is not None else _device(None)
        self._seq = _C._device_event(self._device)

    def query(self):
        return self._device is None or _C._device_event_done(self._device, self._seq)

    def synchronize(self):
        if self._device is not None:
            _C._device_event_wait(self._device, self._seq)

    def wait(self, stream=None):
        """Orders nothing further (one stream per GPU)."""

    def elapsed_time(self, end_event):
        raise NotImplementedError("[cuda.Event.elapsed_time] dygrad's CUDA events carry no timestamps yet")


class CUDAGraph:
    def __new__(cls, *args, **kwargs):
        raise RuntimeError("torch.cuda.CUDAGraph requires CUDA support (dygrad replays graphs through dygrad.jit)")


class graph:  # noqa: N801 (torch's name; a context manager)
    def __init__(self, cuda_graph, *args, **kwargs):
        raise RuntimeError("torch.cuda.graph requires CUDA support (dygrad replays graphs through dygrad.jit)")


def is_current_stream_capturing():
    """False: nothing is captured into a CUDA graph (dygrad.jit replays graphs itself)."""
    return False


def current_stream(device=None):
    return Stream(device)


def default_stream(device=None):
    return Stream(device)


class StreamContext:
    """`with torch.cuda.stream(s)`: selects stream s (the GPU's one stream; a no-op for None, as torch's)."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        return False


def stream(stream):
    return StreamContext(stream)
