"""dygrad.cpu.amp: torch.cpu.amp.autocast, deprecated in torch 2.13 for torch.amp.autocast('cpu', ...)."""
import warnings

from .. import amp as _amp


class autocast(_amp.autocast):  # noqa: N801 -- torch's spelling
    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        warnings.warn("`torch.cpu.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cpu', "
                      "args...)` instead.", FutureWarning, stacklevel=2)
        from .. import _C
        super().__init__("cpu", dtype=_C.bfloat16 if dtype is None else dtype, enabled=enabled,
                         cache_enabled=cache_enabled)
