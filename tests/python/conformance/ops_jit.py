"""Conformance entries of dygrad.jit's Tasks (jit/graph.cpp): jit_graph (a captured function replayed as one Task),
jit_segment (the ops between two host reads of a function that has them) and jit_fused (a run of elementwise ops
fused at O1, docs/jit-fusion.md), each against torch eager running the same function. Every other op also runs through capture and replay: test_conformance.py::test_capture_and_replay."""
from .spec import FLOATS, Entry, Input


def body(m, a, b):
    return ((a * b).exp() + a).sum(-1)


def replayed(m, a, b):
    """The third call of a compiled function: warm-up, capture, then the jit_graph Task."""
    import dygrad as dg
    f = dg.jit(lambda x, y: body(dg, x, y))
    for _ in range(2):
        f(a, b)
    return f(a, b)


def fused(m, a, b):
    """At O1, once its generated kernels are loaded: the chain and the row sum ending it run as a jit_fused sub-op."""
    import dygrad as dg
    f = dg.jit(lambda x, y: body(dg, x, y), jit_level="O1")
    for _ in range(2):
        f(a, b)
    f.wait_for_kernels()
    return f(a, b)


def segmented(m, a, b):
    """A function with a host read: its ops before and after the read run as jit_segment Tasks."""
    import warnings

    import dygrad as dg

    def g(x, y):
        s = body(dg, x, y)
        if s.sum().item() > 1e30:  # the cut
            s = s * 0
        return s + 1

    f = dg.jit(g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):  # warm-up, then two captures that find the cut (a cut may be one-time work)
            f(a, b)
        return f(a, b)


def segmented_ref(torch, a, b):
    return body(torch, a, b) + 1


CASES = ((Input((3, 5)), Input((3, 5))),)
# On the test device (test_on_test_device) both replay on the device's stream (docs/jit.md, "On a device").
ENTRIES = [
    Entry("jit_graph", replayed, ref=body, cases=CASES, dtypes=tuple(FLOATS), differentiable=False,
          note="a compiled function's replay: the same kernels as eager, so torch's values"),
    Entry("jit_fused", fused, ref=body, cases=CASES, dtypes=tuple(FLOATS), differentiable=False,
          note="a fused elementwise run at O1: eager's scalar functors in generated code, so eager's bits"),
    Entry("jit_segment", segmented, ref=segmented_ref, cases=CASES, dtypes=tuple(FLOATS), differentiable=False,
          note="a function with a cut: its segments"),
]
