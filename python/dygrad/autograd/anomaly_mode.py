"""Anomaly detection (torch.autograd.detect_anomaly / set_detect_anomaly): while on, every node records its
forward call site (the user's file:line) and the engine checks each gradient a backward formula returns for
NaN, raising RuntimeError("Function 'DivBackward0' returned nan values in its 0th output. The forward call
that created it: model.py:12, in forward"). Each check is a sync: a debugging mode, as torch's."""
import warnings

from .. import _C
from .grad_mode import _DecoratorContextManager

__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled", "is_anomaly_check_nan_enabled"]

is_anomaly_enabled = _C.is_anomaly_enabled
is_anomaly_check_nan_enabled = _C.is_anomaly_check_nan_enabled


class detect_anomaly(_DecoratorContextManager):  # noqa: N801 -- torch's spelling
    def __init__(self, check_nan=True):
        self.prev = _C.is_anomaly_enabled()
        self.check_nan = check_nan
        self.prev_check_nan = _C.is_anomaly_check_nan_enabled()
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
                      "enabled for debugging.", stacklevel=2)

    def __enter__(self):
        _C._set_anomaly_enabled(True, self.check_nan)

    def __exit__(self, *exc):
        _C._set_anomaly_enabled(self.prev, self.prev_check_nan)
        return False

    def clone(self):
        return self.__class__(self.check_nan)


class set_detect_anomaly(_DecoratorContextManager):  # noqa: N801
    """Sets anomaly mode now (a plain call works) and restores the previous setting on exit of a `with`."""

    def __init__(self, mode, check_nan=True):
        self.prev = _C.is_anomaly_enabled()
        self.prev_check_nan = _C.is_anomaly_check_nan_enabled()
        self.mode, self.check_nan = bool(mode), bool(check_nan)
        _C._set_anomaly_enabled(self.mode, self.check_nan)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _C._set_anomaly_enabled(self.prev, self.prev_check_nan)
        return False

    def clone(self):
        return self.__class__(self.mode, self.check_nan)
