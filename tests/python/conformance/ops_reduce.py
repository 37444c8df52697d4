"""Entries of the reductions (ops/reduce.cpp): sum, amax/amin, max/min over a dim, argmax/argmin, logsumexp,
var/std, and the backward-only primitives their gradients run."""
from .spec import FLOATS, Entry, Input



# big: 120000 elements, several full-reduction chunks (16384) and reduce grains; distinct values need a wider range
def reduction(op, call, dtypes=FLOATS, kind="uniform", also=(), differentiable=True, extra=(), **kw):
    r = dict(low=-8, high=8) if kind == "distinct" else {}  # 128 distinct values, exact in bfloat16
    return Entry(op, call, cases=((Input((4, 6), kind=kind, **r),), (Input((3, 4, 5), kind=kind, **r),),
                                  (Input((7,), kind=kind, **r),)) + extra,
                 dtypes=dtypes, big=(Input((300, 400), kind=kind, **({"low": -8000, "high": 8000} if kind == "distinct" else {})),), also_runs=also, differentiable=differentiable, **kw)


ENTRIES = [
    reduction("sum", lambda m, x: (m.sum(x), x.sum(-1), x.sum(0, keepdim=True)),
              dtypes=FLOATS + ("int64", "int32", "uint8", "int16", "int8", "bool"), extra=((Input((0, 5)),), (Input((33, 65)),)),
              # the big case's full sum of 120000 terms cancels to ~20: float32 error ~ sqrt(n) eps sum|x| ~ 1e-3
              tolerance={"float32": (2e-5, 2e-3)}),
    # distinct values: no ties, so the gradient (which goes to the extremum) is the same in both libraries
    reduction("amax", lambda m, x: (m.amax(x), m.amax(x, -1)), kind="distinct", also=("extremum_backward",)),
    reduction("amin", lambda m, x: (m.amin(x), m.amin(x, 0, keepdim=True)), kind="distinct",
              also=("extremum_backward",)),
    reduction("max_dim", lambda m, x: tuple(m.max(x, -1)), kind="distinct", also=("extremum_index_backward",),
              dtypes=FLOATS + ("int64",)),
    reduction("min_dim", lambda m, x: tuple(m.min(x, 0, keepdim=True)), kind="distinct",
              also=("extremum_index_backward",), dtypes=FLOATS + ("int64",)),
    reduction("argmax", lambda m, x: (m.argmax(x), m.argmax(x, -1)), kind="distinct", differentiable=False,
              dtypes=FLOATS + ("int64",)),
    reduction("argmin", lambda m, x: (m.argmin(x), m.argmin(x, 0, keepdim=True)), kind="distinct",
              differentiable=False, dtypes=FLOATS + ("int64",)),
    reduction("logsumexp", lambda m, x: (m.logsumexp(x, -1), m.logsumexp(x, 0, keepdim=True)),
              also=("logsumexp_backward",)),
    reduction("var", lambda m, x: (m.var(x), m.var(x, -1), m.var(x, 0, correction=0, keepdim=True))),
    reduction("std", lambda m, x: (m.std(x), m.std(x, -1, keepdim=True))),
]
