"""Entries of the copies between devices (ops/device.cpp: copy_device, behind Tensor.to(device) and .cpu()), run
through the test device (dygrad.testing): on the CPU a round trip to test:1 and back, on a test device one to the
other test device and back; torch: a copy. And the CPU stream's timing marks (ops/timing.cpp: record_time, behind
dygrad.cpu.Event)."""
from .spec import FLOATS, INTEGERS, Entry, Input


def round_trip(m, x):
    """x copied to test:1 (from test:1: to test:0) and back to x's device: two copy_device Tasks, differentiable (the
    gradient is copied back the same way). Compiled, it runs as segments with the copies between them (docs/jit.md,
    "On a device")."""
    m.testing.enable_test_device(2)
    there = "test:0" if str(x.device) == "test:1" else "test:1"
    return x.to(there).to(x.device)


def timed_double(m, x):
    """x * 2 between two timing marks (record_time Tasks, docs/stream.md "Timing marks"; their readings are
    tests/python/test_step_timing.py's). torch: x * 2 (torch.cpu.Event is a placeholder that records nothing)."""
    start, end = m.cpu.Event(enable_timing=True), m.cpu.Event(enable_timing=True)
    start.record()
    y = x * 2
    end.record()
    return y


ENTRIES = [
    Entry("record_time", timed_double, ref=lambda torch, x: x * 2, dtypes=FLOATS, differentiable=False,
          cases=((Input((4, 5)),),), note="a side effect: the time the stream reached the mark, and its busy time"),
    Entry("copy_device", round_trip, ref=lambda torch, x: x.clone(), dtypes=FLOATS + INTEGERS + ("bool",),
          cases=((Input((4, 5)),), (Input((2, 3, 7)),), (Input(()),), (Input((0, 5)),)), big=(Input((256, 320)),),
          note="contiguous copies of the bytes; a non-contiguous operand is made contiguous on its own device first"),
]
