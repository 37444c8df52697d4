"""Entries of the ordering and scan ops (ops/sort.cpp: sort, topk, cumsum, cumprod and its backward kernel, flip).
sort runs with stable=True, whose indices are torch's exactly even with ties; topk draws distinct values (torch
leaves the order of tied indices unspecified)."""
from .spec import FLOATS, INTEGERS, Entry, Input

ALL = FLOATS + INTEGERS
UNTIED = ("transposed", "strided")
TOPK_TIES = ("the big case has ties in 16-bit dtypes (a 1/8 grid over [-2048, 2048) rounds to repeated values): "
             "dygrad breaks them by the lower index, torch's order is unspecified")

ENTRIES = [
    Entry("sort", lambda m, x: (*m.sort(x, dim=-1, stable=True), *m.sort(x, dim=0, descending=True, stable=True)),
          dtypes=ALL + ("bool",), cases=((Input((4, 6)),), (Input((3, 1, 5)),), (Input((0, 3)),)),
          big=(Input((512, 160)),)),
    # Not expanded: equal rows tie along dim 0.
    Entry("topk", lambda m, x: (*m.topk(x, 3), *m.topk(x, 2, 0, largest=False)), dtypes=FLOATS,
          cases=((Input((4, 6), kind="distinct", layout=UNTIED),),
                 (Input((5, 3, 4), low=-4, high=4, kind="distinct", layout=UNTIED),)),
          big=(Input((256, 128), low=-2048, high=2048, kind="distinct"),),
          xfail={f"{check}:{dtype}:case2": TOPK_TIES for check in ("values", "layouts")
                 for dtype in ("bfloat16", "float16")}),
    Entry("cumsum", lambda m, x: (m.cumsum(x, 0), m.cumsum(x, -1)), dtypes=ALL + ("bool",),
          cases=((Input((4, 6)),), (Input((2, 3, 5)),), (Input((0, 3)),)), big=(Input((512, 160)),)),
    # Integer-valued inputs with zeros first (cumprod's backward has a path of its own for them), then no zeros.
    Entry("cumprod", lambda m, x: (m.cumprod(x, 0), m.cumprod(x, -1)), dtypes=ALL, also_runs=("cumprod_backward",),
          cases=((Input((4, 6), low=-1, high=3, kind="integers"),), (Input((3, 5), low=0.5, high=1.5),)),
          big=(Input((512, 160), low=0.9, high=1.1),)),
    Entry("flip", lambda m, x: (m.flip(x, [0]), m.flip(x, (0, 1)), m.flip(x, [-1])), dtypes=ALL + ("bool",),
          cases=((Input((4, 6)),), (Input((2, 3, 5)),)), big=(Input((512, 160)),)),
]
