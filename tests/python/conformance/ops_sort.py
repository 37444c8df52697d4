"""Entries of the ordering and scan ops (ops/sort.cpp: sort, topk, cumsum, cumprod and its backward kernel, flip).
sort runs with stable=True, whose indices are torch's exactly even with ties; topk is checked against torch's stable
sort (torch leaves topk's order of tied indices unspecified)."""
from .spec import FLOATS, INTEGERS, Entry, Input

ALL = FLOATS + INTEGERS


def topk_reference(torch, x):
    def topk(k, dim, largest):
        s = torch.sort(x, dim=dim, descending=largest, stable=True)
        return s.values.narrow(dim, 0, k), s.indices.narrow(dim, 0, k)
    return (*topk(3, -1, True), *topk(2, 0, False))

ENTRIES = [
    Entry("sort", lambda m, x: (*m.sort(x, dim=-1, stable=True), *m.sort(x, dim=0, descending=True, stable=True)),
          dtypes=ALL + ("bool",), cases=((Input((4, 6)),), (Input((3, 1, 5)),), (Input((0, 3)),)),
          big=(Input((512, 160)),)),
    # Against torch's stable sort cut to k (ties by the lower index, as dygrad's topk): torch.topk's own order of
    # tied indices is unspecified (test_sort_ops.py checks torch.topk itself on distinct values).
    Entry("topk", lambda m, x: (*m.topk(x, 3), *m.topk(x, 2, 0, largest=False)), ref=topk_reference, dtypes=FLOATS,
          cases=((Input((4, 6)),), (Input((5, 3, 4), low=-4, high=4),)), big=(Input((256, 128)),)),
    Entry("cumsum", lambda m, x: (m.cumsum(x, 0), m.cumsum(x, -1)), dtypes=ALL + ("bool",),
          cases=((Input((4, 6)),), (Input((2, 3, 5)),), (Input((0, 3)),)), big=(Input((512, 160)),)),
    # Integer-valued inputs with zeros first (cumprod's backward has a path of its own for them), then no zeros. One
    # dim per entry: the gradients of two scans (sums of up to 512 terms) would cancel after their 16-bit rounding.
    *(Entry("cumprod", lambda m, x, d=dim: m.cumprod(x, d), dtypes=ALL, also_runs=("cumprod_backward",), variant=name,
            cases=((Input((4, 6), low=-1, high=3, kind="integers"),), (Input((3, 5), low=0.5, high=1.5),)),
            big=(Input((512, 160), low=0.98, high=1.02),))  # float16 holds 1.02 ** 512
      for dim, name in ((-1, ""), (0, "dim 0"))),
    Entry("flip", lambda m, x: (m.flip(x, [0]), m.flip(x, (0, 1)), m.flip(x, [-1])), dtypes=ALL + ("bool",),
          cases=((Input((4, 6)),), (Input((2, 3, 5)),)), big=(Input((512, 160)),)),
]
