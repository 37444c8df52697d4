"""torch.nn.attention: SDPBackend and the sdpa_kernel context manager, on the switches of
dygrad.backends.cuda (recorded and reported as torch does; dygrad's attention has one implementation)."""
import enum

from ...backends import cuda as _cuda

__all__ = ["SDPBackend", "sdpa_kernel", "WARN_FOR_UNFUSED_KERNELS"]

WARN_FOR_UNFUSED_KERNELS = False


class SDPBackend(enum.IntEnum):
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


_SWITCH = {SDPBackend.MATH: "math", SDPBackend.FLASH_ATTENTION: "flash",
           SDPBackend.EFFICIENT_ATTENTION: "mem_efficient", SDPBackend.CUDNN_ATTENTION: "cudnn"}


class sdpa_kernel:  # noqa: N801 (torch's name; a context manager)
    """Enables exactly the given backend(s) for the block (torch.nn.attention.sdpa_kernel) and restores the
    switches after."""

    def __init__(self, backends, set_priority=False):
        backends = [backends] if isinstance(backends, SDPBackend) else list(backends)
        for b in backends:
            if not isinstance(b, SDPBackend):
                raise AssertionError("Backend must be an instance of SDPBackend")
        self._enabled = {_SWITCH[b] for b in backends if b in _SWITCH}

    def __enter__(self):
        self._saved = dict(_cuda._sdp)
        for name in _cuda._sdp:
            _cuda._sdp[name] = name in self._enabled
        return self

    def __exit__(self, *exc):
        _cuda._sdp.update(self._saved)
        return False
