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


class amp:  # noqa: N801 -- torch.cuda.amp, the deprecated spelling of torch.amp for CUDA
    @staticmethod
    def GradScaler(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,  # noqa: N802
                   enabled=True):
        return _amp.GradScaler("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    @staticmethod
    def autocast(enabled=True, dtype=None, cache_enabled=True):
        return _amp.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
