"""dygrad.testing: the asynchronous test device (docs/devices.md, "The test device").

A second device built into every dygrad, off until a program turns it on: `enable_test_device(n)` (or
DYGRAD_TEST_DEVICES=n in the environment before import) makes devices "test:0" .. "test:n-1". Each has memory of its own
that the host never touches (a read goes through a copy: `.cpu()`, `.to("cpu")`, `.item()`, `.tolist()`), a stream
whose launcher thread runs the CPU's kernels asynchronously, and errors that surface at the next sync point. It
exercises every path a GPU backend takes, on any machine; it is not faster than the CPU.
"""
import contextlib
import os

from .. import _C

__all__ = ["enable_test_device", "test_device_count", "paused"]


def enable_test_device(count=1):
    """Makes test devices 0..count-1 (at most 4; they stay for the process). Returns how many there are."""
    return _C._enable_test_device(count)


enable_test_device.__test__ = False  # not a pytest test


def test_device_count():
    """How many test devices are on (0 until enable_test_device)."""
    return _C._device_count("test")


test_device_count.__test__ = False  # not a pytest test


def _enable_from_environment():
    """DYGRAD_TEST_DEVICES=n in the environment before import turns test devices 0..n-1 on (dygrad/__init__.py)."""
    count = os.environ.get("DYGRAD_TEST_DEVICES")
    if count:
        enable_test_device(int(count))


@contextlib.contextmanager
def paused(device="test:0"):
    """Holds the device's launcher inside the block: Tasks queue up without running, so a test sees what a host
    that did not wait for them would see. Do not wait for the device inside the block (it would wait forever)."""
    _C._set_stream_paused(str(device), True)
    try:
        yield
    finally:
        _C._set_stream_paused(str(device), False)
