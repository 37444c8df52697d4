"""dygrad.cuda: the probes a CPU script reads (torch.cuda.is_available() and friends). dygrad has no CUDA
backend yet, so every probe answers as torch does on a machine without a GPU."""
from . import _C
from . import amp as _amp

OutOfMemoryError = _C.OutOfMemoryError  # torch.cuda.OutOfMemoryError is torch.OutOfMemoryError


def is_available():
    """False until a CUDA backend is built."""
    return False


def device_count():
    return 0


def is_initialized():
    return False


def manual_seed(seed):
    """A no-op without a GPU, as torch's (which seeds lazily, only once CUDA is initialised)."""


def manual_seed_all(seed):
    """A no-op without a GPU, as torch's."""


def empty_cache():
    """A no-op without a GPU, as torch's."""


def _no_cuda(name):
    # torch built without CUDA raises AssertionError from these calls; dygrad answers the same way.
    raise AssertionError(f"torch.cuda.{name}: dygrad was built without a CUDA backend (torch.cuda.is_available() is "
                         "False)")


def synchronize(device=None):
    _no_cuda("synchronize")


def current_device():
    _no_cuda("current_device")


def get_device_name(device=None):
    _no_cuda("get_device_name")


def get_device_properties(device=None):
    _no_cuda("get_device_properties")


def is_bf16_supported(including_emulation=True):
    """False without a GPU, as torch's."""
    return False


def memory_allocated(device=None):
    """0 without a GPU, as torch's (dygrad.memory_allocated() reports the CPU allocator)."""
    return 0


def max_memory_allocated(device=None):
    return 0


def memory_reserved(device=None):
    return 0


class amp:  # noqa: N801 -- torch.cuda.amp, the deprecated spelling of torch.amp for CUDA
    @staticmethod
    def GradScaler(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,  # noqa: N802
                   enabled=True):
        return _amp.GradScaler("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    @staticmethod
    def autocast(enabled=True, dtype=None, cache_enabled=True):
        return _amp.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


# --- classes and context managers torch code names without a GPU (isinstance, annotations, `with` guards):
# usable for those checks; constructing one raises, as torch built without CUDA does.
class Stream:
    def __new__(cls, *args, **kwargs):
        raise RuntimeError("torch.cuda.Stream requires CUDA support (dygrad has no CUDA backend yet)")


class Event:
    def __new__(cls, *args, **kwargs):
        raise RuntimeError("torch.cuda.Event requires CUDA support (dygrad has no CUDA backend yet)")


class CUDAGraph:
    def __new__(cls, *args, **kwargs):
        raise RuntimeError("torch.cuda.CUDAGraph requires CUDA support (dygrad has no CUDA backend yet)")


class graph:  # noqa: N801 (torch's name; a context manager)
    def __init__(self, cuda_graph, *args, **kwargs):
        raise RuntimeError("torch.cuda.graph requires CUDA support (dygrad has no CUDA backend yet)")


def is_current_stream_capturing():
    """False: nothing is being captured into a CUDA graph (no CUDA backend)."""
    return False


def current_stream(device=None):
    _no_cuda("current_stream")


class StreamContext:
    """`with torch.cuda.stream(s)`: selects stream s; a no-op for None (as torch's), the only stream a CPU-only build
    can be given (a Stream cannot be constructed)."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        if self.stream is not None:
            _no_cuda("StreamContext")
        return self.stream

    def __exit__(self, *exc):
        return False


def stream(stream):
    return StreamContext(stream)
