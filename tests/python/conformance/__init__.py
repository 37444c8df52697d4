"""The conformance sweep: one Entry per OpDef in dygrad's op table (`dygrad._C._op_table()`), run against torch
by tests/python/test_conformance.py and timed by bench/sweep_perf.py. See README.md."""
from . import ops_device, ops_dist, ops_elementwise, ops_index, ops_jit, ops_nn, ops_random, ops_reduce, ops_sort
from .spec import FLOATS, FULL, GRAD_TOLERANCE, INTEGERS, TOLERANCE, Entry, Input, build, draw, dtype_of  # noqa: F401

ENTRIES = (ops_elementwise.ENTRIES + ops_reduce.ENTRIES + ops_nn.ENTRIES + ops_index.ENTRIES + ops_random.ENTRIES +
           ops_sort.ENTRIES + ops_device.ENTRIES + ops_dist.ENTRIES + ops_jit.ENTRIES)


def entry_id(entry):
    return entry.op + (f"[{entry.variant}]" if entry.variant else "")
