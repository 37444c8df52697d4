"""Entries of the index ops (ops/index.cpp: cat, gather, index_select, scatter_add, scatter, index_add, tril/triu) and
of indexing (ops/indexing.cpp: x[index], index_put, nonzero) and repeat_interleave's index form (ops/repeat.cpp). Index
operands draw integers in [0, n)."""
from .spec import FLOATS, INTEGERS, Entry, Input

ALL = FLOATS + INTEGERS
WRITABLE = ("transposed", "strided")


SCATTER_ADD_ROUNDING = ("dygrad bug: 16-bit scatter_add rounds after every accumulated addition where torch "
                        "accumulates in float32 and rounds once")


def index(n, shape, dtype="int64", kind="integers"):
    return Input(shape, dtype, 0, n, kind, grad=False)


ENTRIES = [
    Entry("cat", lambda m, a, b, c: (m.cat([a, b], 1), m.cat([a, c], 0)), dtypes=ALL + ("bool",),
          cases=((Input((3, 4)), Input((3, 2)), Input((1, 4))), (Input((2, 3)), Input((2, 5)), Input((4, 3)))),
          big=(Input((256, 200)), Input((256, 160)), Input((64, 200)))),
    Entry("gather", lambda m, x, i: m.gather(x, 1, i), dtypes=ALL,
          cases=((Input((3, 5)), index(5, (3, 4))), (Input((4, 3, 2)), index(3, (4, 2, 2)))),
          big=(Input((256, 400)), index(400, (256, 320)))),
    Entry("index_select", lambda m, x, i: (m.index_select(x, 0, i), m.index_select(x, 1, i)), dtypes=ALL,
          cases=((Input((4, 5)), index(4, (6,))), (Input((3, 3, 2)), index(3, (2,)))),
          big=(Input((400, 400)), index(400, (300,)))),
    # 16-bit scatter_add rounds after each accumulated addition, torch once (docs/dtypes.md: "rounded once"):
    # dg.scatter_add(bf16 [1.], 0, [0, 0, 0], bf16 [1., 0.005859375, 0.005859375]) is 2.0, torch 2.015625
    # (the sum 2.01171875 rounded once). Visible in the big case, where indices repeat.
    Entry("scatter_add", lambda m, x, i, s: m.scatter_add(x, 1, i, s), dtypes=FLOATS + ("int64",),
          xfail={f"{check}:{dtype}:case1": SCATTER_ADD_ROUNDING for check in ("values", "layouts")
                 for dtype in ("bfloat16", "float16")},
          inplace_call=lambda m, x, i, s: x.scatter_add_(1, i, s),
          cases=((Input((3, 5), layout=WRITABLE), index(5, (3, 4)), Input((3, 4))),),
          big=(Input((256, 400)), index(400, (256, 320)), Input((256, 320)))),
    Entry("index_add", lambda m, x, i, s: m.index_add(x, 0, i, s, alpha=2), dtypes=FLOATS + ("int64",),
          cases=((Input((4, 5), layout=WRITABLE), index(4, (6,)), Input((6, 5))),),
          big=(Input((256, 320)), index(256, (400,)), Input((400, 320))),
          inplace_call=lambda m, x, i, s: x.index_add_(0, i, s, alpha=2)),
    # Distinct indices along dim in the small cases: where an index repeats, torch's gradient (g gathered at every
    # index, dygrad's too) is not the derivative (an overwritten src element does not reach the output). The big
    # case repeats them: the last write along dim wins, in dygrad and in torch's serial CPU loop alike.
    Entry("scatter", lambda m, x, i, s: m.scatter(x, 0, i, s), dtypes=ALL + ("bool",),
          inplace_call=lambda m, x, i, s: x.scatter_(0, i, s),
          # src no larger than index: torch 2.13's backward fails otherwise ("ScatterBackward0 returned an invalid
          # gradient"); dygrad's (zeros where src was not read) is in tests/python/test_index_ops.py
          cases=((Input((5, 3), layout=WRITABLE), index(5, (4, 1), kind="permutation"), Input((4, 1))),
                 (Input((4, 3, 2), layout=WRITABLE), index(4, (3, 1, 1), kind="permutation"), Input((3, 1, 1)))),
          big=(Input((400, 256)), index(400, (320, 256)), Input((320, 256)))),
    # torch has no derivative for reduce=: these variants' inputs do not require grad.
    Entry("scatter", lambda m, x, i, s: m.scatter(x, 0, i, s, reduce="multiply"), variant="multiply",
          dtypes=FLOATS + ("int64",), inplace_call=lambda m, x, i, s: x.scatter_(0, i, s, reduce="multiply"),
          cases=((Input((3, 5), layout=WRITABLE, grad=False), index(3, (2, 5)), Input((2, 5), low=0.5, high=1.5, grad=False)),),
          big=(Input((256, 400), grad=False), index(256, (2, 400)), Input((2, 400), low=0.5, high=1.5, grad=False))),
    Entry("scatter_value", lambda m, x, i: m.scatter(x, 0, i, 1.5), dtypes=FLOATS + ("int64",),
          inplace_call=lambda m, x, i: x.scatter_(0, i, 1.5),
          cases=((Input((5, 3), layout=WRITABLE), index(5, (4, 2))),),
          big=(Input((400, 256)), index(400, (320, 256)))),
    Entry("scatter_value", lambda m, x, i: (m.scatter(x, 0, i, -2, reduce="add"), m.scatter(x, 0, i, 0.5, reduce="multiply")),
          variant="reduce", dtypes=FLOATS + ("int64",), xfail={"layouts:bfloat16:case1": SCATTER_ADD_ROUNDING}, inplace_call=lambda m, x, i: x.scatter_(0, i, 2, reduce="multiply"),
          cases=((Input((5, 3), layout=WRITABLE, grad=False), index(5, (4, 2))),),
          big=(Input((400, 256), grad=False), index(400, (320, 256)))),
    Entry("tril", lambda m, x: (m.tril(x), m.tril(x, 1)), dtypes=ALL + ("bool",),
          cases=((Input((4, 5)),), (Input((2, 3, 4)),)), big=(Input((320, 320)),)),
    Entry("triu", lambda m, x: (m.triu(x), m.triu(x, -1)), dtypes=ALL + ("bool",),
          cases=((Input((4, 5)),), (Input((2, 3, 4)),)), big=(Input((320, 320)),)),
    Entry("index", lambda m, x, i: (x[i], x[:, i]), dtypes=ALL + ("bool",),
          cases=((Input((4, 4)), index(4, (3,))), (Input((3, 3, 2)), index(3, (2, 2)))),
          big=(Input((400, 400)), index(400, (300,)))),
    Entry("index_put", lambda m, x, i, v: m.index_put(x, (i,), v), dtypes=ALL,
          inplace_call=lambda m, x, i, v: x.index_put_((i,), v),
          cases=((Input((5, 3), layout=WRITABLE), index(5, (3,), kind="permutation"), Input((3, 3))),),
          big=(Input((400, 256)), index(400, (300,), kind="permutation"), Input((300, 256)))),
    Entry("index_put", lambda m, x, i, v: m.index_put(x, (i,), v, accumulate=True), variant="accumulate",
          dtypes=FLOATS + ("int64",), inplace_call=lambda m, x, i, v: x.index_put_((i,), v, accumulate=True),
          cases=((Input((5, 3), layout=WRITABLE), index(5, (7,)), Input((7, 3))),),
          big=(Input((400, 256)), index(400, (600,)), Input((600, 256)))),
    Entry("nonzero", lambda m, x: m.nonzero(x), dtypes=ALL + ("bool",), differentiable=False,
          cases=((Input((4, 5), low=0, high=2, kind="integers"),), (Input((2, 3, 4), low=0, high=2, kind="integers"),)),
          big=(Input((256, 320), low=0, high=2, kind="integers"),), also_runs=()),
    # The index form: without output_size the call reads the counts on the host (the trait says so); with it, none.
    Entry("repeat_interleave", lambda m, r: m.repeat_interleave(r), dtypes=("int64", "int32"), differentiable=False,
          cases=((Input((6,), low=0, high=4, kind="integers"),), (Input((0,), low=0, high=4, kind="integers"),)),
          big=(Input((5000,), low=0, high=4, kind="integers"),)),
    Entry("repeat_interleave", lambda m, r: m.repeat_interleave(r, output_size=2 * r.shape[0]), variant="output_size",
          dtypes=("int64", "int32"), differentiable=False,
          cases=((Input((6,), low=2, high=3, kind="integers"),),), big=(Input((5000,), low=2, high=3, kind="integers"),)),
]
