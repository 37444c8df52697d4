"""Entries of the elementwise families: arithmetic (ops/arithmetic.cpp), math (ops/math.cpp) and compare
(ops/compare.cpp). Each lambda runs unchanged on dygrad and on torch."""
from .spec import FLOATS, INTEGERS, Entry, Input

# Full mode adds, to every elementwise entry, an odd-sized case (vector loops' tails) and an empty one.
ODD, EMPTY = (17, 31), (0, 5)

ALL = FLOATS + INTEGERS
BIG = (Input((256, 320)),)           # 81920 elements: more than 2 elementwise grains (32768)
BIG2 = (Input((256, 320)), Input((320,)))
POSITIVE = dict(low=0.25, high=3.0)


def unary(op, low=-2.0, high=2.0, dtypes=FLOATS, also=(), call=None, **kw):
    call = call or (lambda m, x: getattr(m, op)(x))
    return Entry(op, call, cases=tuple((Input(shape, low=low, high=high),) for shape in ((4, 5), (2, 3, 7), (), ODD, EMPTY)),
                 dtypes=dtypes, big=(Input((256, 320), low=low, high=high),), also_runs=also, **kw)


def binary(op, call, dtypes=ALL, low=-2.0, high=2.0, rhs=None, kind="uniform", **kw):
    rhs = {"kind": kind, **(rhs or {})}
    return Entry(op, call, cases=(
        (Input((4, 5), low=low, high=high, kind=kind), Input((4, 5), **{"low": low, "high": high, **rhs})),
        (Input((3, 1, 5), low=low, high=high, kind=kind), Input((4, 1), **{"low": low, "high": high, **rhs})),  # broadcast
        (Input((6,), low=low, high=high, kind=kind), Input((), **{"low": low, "high": high, **rhs})),
        (Input(ODD, low=low, high=high, kind=kind), Input((ODD[1],), **{"low": low, "high": high, **rhs})),
        (Input(EMPTY, low=low, high=high, kind=kind), Input((5,), **{"low": low, "high": high, **rhs}))),
        dtypes=dtypes, big=(Input((256, 320), low=low, high=high, kind=kind), Input((320,), **{"low": low, "high": high, **rhs})),
        **kw)


def scalar(op, call, dtypes=ALL, low=-2.0, high=2.0, kind="uniform", **kw):
    return Entry(op, call, cases=((Input((4, 5), low=low, high=high, kind=kind),),
                                  (Input((2, 3, 4), low=low, high=high, kind=kind),),
                                  (Input(ODD, low=low, high=high, kind=kind),), (Input(EMPTY, low=low, high=high, kind=kind),)),
                 dtypes=dtypes, big=(Input((256, 320), low=low, high=high, kind=kind),), **kw)


NONZERO = dict(low=0.5, high=3.0)  # divisors (sign-symmetric draws would cross zero)

ARITHMETIC = [
    binary("add", lambda m, a, b: m.add(a, b, alpha=2)),
    binary("mul", lambda m, a, b: a * b),
    binary("div", lambda m, a, b: a / b, dtypes=FLOATS, rhs=NONZERO),
    scalar("add_scalar", lambda m, a: a + 1.5, dtypes=FLOATS + ("int64", "int32", "int16", "int8")),
    scalar("mul_scalar", lambda m, a: a * -3),
    scalar("div_scalar", lambda m, a: a / 4.0, dtypes=FLOATS + ("int64",)),
    scalar("rsub_scalar", lambda m, a: 2 - a, dtypes=FLOATS + ("int64", "int32", "int16", "int8")),
    scalar("rdiv_scalar", lambda m, a: 3.0 / a, dtypes=FLOATS, **NONZERO),
    scalar("neg", lambda m, a: -a, dtypes=FLOATS + ("int64", "int32", "int16", "int8")),
    scalar("copy", lambda m, a: a.clone(), dtypes=ALL + ("bool",)),
    Entry("fill", lambda m, a: m.full_like(a, 2.5), cases=((Input((4, 5), grad=False),), (Input((7,), grad=False),)),
          differentiable=False, dtypes=ALL, big=(Input((256, 320)),)),
]

MATH = [
    unary("exp"), unary("log", **POSITIVE), unary("sqrt", **POSITIVE), unary("rsqrt", **POSITIVE),
    # expm1 and log1p: across 0, where exp(x) - 1 and log(1 + x) would cancel; log1p down to -0.75
    unary("expm1", -3, 3), unary("log1p", -0.75, 3),
    # the activations nn/functional.py composes over them (issue 41): the ELU family on expm1, softplus, mish and
    # logsigmoid on log1p; float32 and float64 (16-bit operands would round at every composed step)
    *[unary("expm1", -3, 3, variant=name, dtypes=("float32", "float64"), call=call) for name, call in (
        ("elu", lambda m, x: m.nn.functional.elu(x, 0.7)), ("selu", lambda m, x: m.nn.functional.selu(x)),
        ("celu", lambda m, x: m.nn.functional.celu(x, 1.5)))],
    *[unary("log1p", -4, 4, variant=name, dtypes=("float32", "float64"), call=call, xfail=xfail)
      for name, call, xfail in (
        ("softplus", lambda m, x: m.nn.functional.softplus(x, 2.0, 6.0), {}),
        ("mish", lambda m, x: m.nn.functional.mish(x), {}),
        ("logsigmoid", lambda m, x: m.nn.functional.logsigmoid(x), {}))],
    unary("abs", dtypes=FLOATS + ("int64", "int32", "int16", "int8")),
    unary("floor", low=-3.0, high=3.0, dtypes=FLOATS + ("int64", "int32", "int16", "int8")),
    unary("ceil", low=-3.0, high=3.0, dtypes=FLOATS + ("int64", "int32")),
    unary("trunc", low=-3.0, high=3.0, dtypes=FLOATS + ("int64", "int32")),
    # [-3, 3] in bfloat16 and float16 holds the halves (2.5, -1.5 ...): ties, rounded to even as torch
    unary("round", low=-3.0, high=3.0, dtypes=FLOATS + ("int64", "int32")),
    unary("round", low=-30.0, high=30.0, variant="decimals",
          call=lambda m, x: (m.round(x, decimals=1), x.round(decimals=2), m.round(x, decimals=-1))),
    unary("sign", dtypes=FLOATS + ("int64", "int32", "int16", "int8")),
    unary("reciprocal", **POSITIVE),
    unary("isnan", dtypes=ALL, differentiable=False),
    unary("isinf", dtypes=ALL, differentiable=False),
    unary("isfinite", dtypes=ALL, differentiable=False),
    unary("sin", -3, 3), unary("cos", -3, 3),
    unary("tanh", -3, 3, also=("tanh_backward",)),
    unary("sigmoid", -4, 4, also=("sigmoid_backward",)),
    unary("silu", -4, 4, also=("silu_backward",), call=lambda m, x: m.nn.functional.silu(x)),
    unary("relu", also=("relu_backward",), dtypes=FLOATS + ("int64",)),
    unary("gelu", -3, 3, also=("gelu_backward",), call=lambda m, x: m.nn.functional.gelu(x)),
    unary("gelu", -3, 3, also=("gelu_backward",), variant="tanh",
          call=lambda m, x: m.nn.functional.gelu(x, approximate="tanh")),
    binary("pow", lambda m, a, b: m.pow(a, b), dtypes=FLOATS, low=0.25, high=2.5, rhs=dict(low=-1.5, high=2.0)),
    scalar("pow_scalar", lambda m, a: a ** 2.5, dtypes=FLOATS, **POSITIVE),
    scalar("rpow_scalar", lambda m, a: 1.5 ** a, dtypes=FLOATS),
    binary("maximum", lambda m, a, b: m.maximum(a, b)),
    binary("minimum", lambda m, a, b: m.minimum(a, b)),
    binary("logaddexp", lambda m, a, b: m.logaddexp(a, b), dtypes=FLOATS, low=-6.0, high=6.0),
    # weights on both sides of 0.5 (torch's two formulas) and outside [0, 1]
    Entry("lerp", lambda m, a, b, w: m.lerp(a, b, w), dtypes=FLOATS,
          cases=((Input((4, 5)), Input((4, 5)), Input((5,), low=-0.5, high=1.5)),
                 (Input((3, 1, 5)), Input((4, 1)), Input((), low=-0.5, high=1.5)),
                 (Input(ODD), Input((ODD[1],)), Input(ODD, low=-0.5, high=1.5)), (Input(EMPTY), Input((5,)), Input((5,)))),
          big=(Input((256, 320)), Input((320,)), Input((256, 320), low=-0.5, high=1.5))),
    scalar("lerp_scalar", lambda m, a: (m.lerp(a, a * 0.5 + 1, 0.25), m.lerp(a, a * -1, 0.75)),
           dtypes=FLOATS),
]

COMPARE = [binary(op, (lambda name: lambda m, a, b: getattr(m, name)(a, b))(op), dtypes=ALL, differentiable=False,
                  low=-2, high=3, kind="integers") for op in ("eq", "ne", "lt", "le", "gt", "ge")]
COMPARE += [scalar(op + "_scalar", (lambda name: lambda m, a: getattr(m, name)(a, 1))(op), differentiable=False,
                  kind="integers", low=-2, high=3)
            for op in ("eq", "ne", "lt", "le", "gt", "ge")]
COMPARE += [
    scalar("logical_not", lambda m, a: m.logical_not(a), dtypes=ALL + ("bool",), differentiable=False,
           kind="integers", low=-1, high=2),
    binary("logical_and", lambda m, a, b: m.logical_and(a, b), dtypes=ALL + ("bool",), differentiable=False,
           kind="integers", low=-1, high=2),
    binary("logical_or", lambda m, a, b: m.logical_or(a, b), dtypes=ALL + ("bool",), differentiable=False,
           kind="integers", low=-1, high=2),
    # Bitwise ops: integral and bool dtypes, values across the sign and (shifts) counts past the width.
    *[binary(op, (lambda name: lambda m, a, b: getattr(m, name)(a, b))(op), dtypes=INTEGERS + ("bool",),
             differentiable=False, kind="integers", low=-100, high=100)
      for op in ("bitwise_and", "bitwise_or", "bitwise_xor")],
    *[scalar(op + "_scalar", (lambda name: lambda m, a: getattr(m, name)(a, 6))(op), dtypes=INTEGERS + ("bool",),
             differentiable=False, kind="integers", low=-100, high=100)
      for op in ("bitwise_and", "bitwise_or", "bitwise_xor")],
    *[binary(op, (lambda name: lambda m, a, b: getattr(m, name)(a, b))(op), dtypes=INTEGERS,
             differentiable=False, kind="integers", low=-100, high=100, rhs=dict(low=-2, high=70))
      for op in ("bitwise_left_shift", "bitwise_right_shift")],
    *[scalar(op + "_scalar", (lambda name: lambda m, a: getattr(m, name)(a, 3))(op), dtypes=INTEGERS,
             differentiable=False, kind="integers", low=-100, high=100)
      for op in ("bitwise_left_shift", "bitwise_right_shift")],
    scalar("bitwise_not", lambda m, a: m.bitwise_not(a), dtypes=INTEGERS + ("bool",), differentiable=False,
           kind="integers", low=-100, high=100),
    Entry("where", lambda m, c, a, b: m.where(c, a, b),
          cases=((Input((4, 5), kind="mask", high=0.5), Input((4, 5)), Input((4, 5))),
                 (Input((4, 1), kind="mask", high=0.5), Input((3, 1, 5)), Input((5,)))),
          dtypes=ALL, big=(Input((256, 320), kind="mask", high=0.5), Input((256, 320)), Input((320,)))),
    Entry("where_scalar", lambda m, c, a: m.where(c, a, 0.5),
          cases=((Input((4, 5), kind="mask", high=0.5), Input((4, 5))),
                 (Input((4, 1), kind="mask", high=0.5), Input((3, 1, 5)))),
          dtypes=FLOATS + ("int64",), big=(Input((256, 320), kind="mask", high=0.5), Input((256, 320)))),
    Entry("masked_fill", lambda m, a, c: a.masked_fill(c, -1.5),
          cases=((Input((4, 5)), Input((4, 5), kind="mask", high=0.5)), (Input((3, 4, 5)), Input((4, 1), kind="mask", high=0.5))),
          dtypes=FLOATS + ("int64",), big=(Input((256, 320)), Input((256, 320), kind="mask", high=0.5))),
    scalar("clamp_scalar", lambda m, a: m.clamp(a, -0.5, 1.0), dtypes=FLOATS + ("int64",)),
    # torch 2.13's clamp backward fails when `a` broadcasts ("output with shape [3, 1, 5] doesn't match the
    # broadcast shape"): the reference clamps `a` expanded to the result's shape
    Entry("clamp_tensor", lambda m, a, lo, hi: m.clamp(a, lo, hi),
          ref=lambda torch, a, lo, hi: torch.clamp(a.expand(torch.broadcast_shapes(a.shape, lo.shape, hi.shape)), lo, hi),
          cases=((Input((4, 5)), Input((4, 5), low=-2, high=-0.25), Input((5,), low=0.25, high=2)),
                 (Input((3, 1, 5)), Input((4, 1), low=-2, high=-0.25), Input((), low=0.25, high=2))),
          dtypes=FLOATS + ("int64",),
          big=(Input((256, 320)), Input((256, 320), low=-2, high=-0.25), Input((320,), low=0.25, high=2))),
]

# atan2, fmod and remainder (ops/binary_math.cpp): divisors away from 0 (an integer 0 raises), both signs in fmod
MODULO = [
    binary("atan2", lambda m, a, b: m.atan2(a, b), dtypes=FLOATS, rhs=dict(low=0.25, high=2.0)),
    binary("fmod", lambda m, a, b: m.fmod(a, b), dtypes=ALL, low=-5.0, high=5.0, rhs=dict(low=1, high=4)),
    binary("remainder", lambda m, a, b: a % b, dtypes=ALL, low=-5.0, high=5.0, rhs=dict(low=1, high=4)),
    binary("remainder", lambda m, a, b: m.remainder(a, -b), dtypes=FLOATS + ("int64", "int32"), low=-5.0, high=5.0,
           rhs=dict(low=1, high=4), variant="negative divisor"),
]


# Complex operands (ops/complex.cpp composes each complex op of real ones): float pairs [..., 2] viewed as complex64
# (float32) or complex128 (float64) and read back as pairs, so that values, layouts, float64 finite differences,
# gradcheck and the 1-vs-2-thread check all run on the real harness. The pairs' last dim must keep stride 1
# (view_as_complex), so the only other layout is the expanded one.
def as_complex(m, x):
    # torch's copies are made from NumPy reads of dygrad's operands and may come in any layout; dygrad's keep the
    # layout the sweep gives them
    return m.view_as_complex(x.contiguous() if m.__name__ == "torch" else x)


def as_pairs(m, z):
    return m.view_as_real(z)


def complex_entry(op, variant, call, shapes, low=-2.0, high=2.0, **kw):
    # a (2,) operand is one complex number: its only dim is the pair's, which no layout may change
    cases = tuple(tuple(Input(s, low=low, high=high, layout=("expanded",) if len(s) > 1 else False) for s in case)
                  for case in shapes)
    return Entry(op, call, cases=cases, dtypes=("float32", "float64"), variant=variant, **kw)


PAIRS = (((4, 5, 2), (4, 5, 2)), ((3, 1, 5, 2), (4, 1, 2)), ((6, 2), (2,)))
ONE = (((4, 5, 2),), ((2, 3, 2),))
COMPLEX = [
    complex_entry("add", "complex", lambda m, a, b: as_pairs(m, m.add(as_complex(m, a), as_complex(m, b), alpha=2)),
                  PAIRS),
    complex_entry("mul", "complex", lambda m, a, b: as_pairs(m, as_complex(m, a) * as_complex(m, b)), PAIRS),
    complex_entry("div", "complex", lambda m, a, b: as_pairs(m, as_complex(m, a) / as_complex(m, b)), PAIRS,
                  low=0.5, high=2.0),
    complex_entry("neg", "complex", lambda m, a: as_pairs(m, -as_complex(m, a)), ONE),
    complex_entry("neg", "conj", lambda m, a: as_pairs(m, as_complex(m, a).conj() * 1), ONE),
    complex_entry("add", "complex_scalar", lambda m, a: as_pairs(m, (as_complex(m, a) + 1.5) - (0.5 - 2j)), ONE),
    complex_entry("mul_scalar", "complex", lambda m, a: as_pairs(m, as_complex(m, a) * -3), ONE),
    complex_entry("div_scalar", "complex", lambda m, a: as_pairs(m, as_complex(m, a) / 4.0), ONE),
    complex_entry("add", "complex_rsub", lambda m, a: as_pairs(m, 2 - as_complex(m, a)), ONE),
    complex_entry("div", "complex_rdiv", lambda m, a: as_pairs(m, 3.0 / as_complex(m, a)), ONE, low=0.5),
    complex_entry("exp", "complex", lambda m, a: as_pairs(m, m.exp(as_complex(m, a))), ONE),
    complex_entry("sqrt", "complex_abs", lambda m, a: as_complex(m, a).abs(), ONE),
    complex_entry("atan2", "complex_angle", lambda m, a: as_complex(m, a).angle(), ONE, low=0.25),
    complex_entry("cos", "polar", lambda m, r, t: as_pairs(m, m.polar(r, t)), (((4, 5), (4, 5)), ((3,), (3,))),
                  low=0.25),
    complex_entry("sum", "complex", lambda m, a: (as_pairs(m, as_complex(m, a).sum(0)),
                                                  as_pairs(m, as_complex(m, a).mean(-1))), ONE),
    complex_entry("copy", "complex", lambda m, a: as_pairs(m, as_complex(m, a).to(m.complex128)),
                  ONE),
]

ENTRIES = ARITHMETIC + MATH + COMPARE + MODULO + COMPLEX
