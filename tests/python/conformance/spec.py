"""The conformance sweep's data model: one Entry per OpDef, its inputs as Input specs (plain dataclasses a fuzzer
can read), and the helpers that turn specs into dygrad and torch tensors holding the same values."""
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

# DYGRAD_SWEEP=full: every case, layout and dtype of every entry (`make sweep`); else the fast subset (`make test`).
FULL = os.environ.get("DYGRAD_SWEEP", "fast") == "full"

FLOATS = ("float32", "float64", "bfloat16", "float16")
INTEGERS = ("int64", "int32", "uint8", "int16", "int8")
# Tolerances of values against the float64 reference, per dtype of the op: (rtol, atol). 16-bit floats are
# computed in float32 and rounded once (docs/dtypes.md), so their error is about one rounding of the result.
TOLERANCE = {"float64": (1e-10, 1e-12), "float32": (2e-5, 2e-6), "bfloat16": (1.6e-2, 1e-2),
             "float16": (2e-3, 1e-3)}
GRAD_TOLERANCE = {"float64": (1e-9, 1e-11), "float32": (1e-4, 1e-5), "bfloat16": (5e-2, 3e-2),
                  "float16": (8e-3, 4e-3)}


@dataclass(frozen=True)
class Input:
    """One tensor operand. dtype None follows the case's dtype (the dtype the sweep runs the op in).

    kind: how values are drawn in [low, high):
      "uniform"      real values, uniform
      "integers"     integer values (stored in the operand's dtype: exact in every dtype)
      "distinct"     pairwise distinct values on a grid of 1/8 (exact in bfloat16: no ties for max/argmax)
      "permutation"  distinct integers in [low, high) (indices of index_put, index_select without duplicates)
      "mask"         booleans, True with probability `high` (low unused)
    grad: differentiate with respect to it (float operands of differentiable entries).
    layout: may be given as a non-contiguous view (transposed, strided, expanded).
    """
    shape: tuple
    dtype: Optional[str] = None
    low: float = -2.0
    high: float = 2.0
    kind: str = "uniform"
    grad: bool = True
    layout: bool = True


@dataclass(frozen=True)
class Entry:
    """How the sweep runs one OpDef `op`.

    call(m, *tensors) runs the op with m = dygrad or torch (the same lambda both sides); ref(torch, *tensors)
    replaces it on the torch side where the names differ. cases[0] is the fast-mode case; `big` is a case large
    enough that the kernels split work over 2 threads (the 1-vs-2-threads check). also_runs: other OpDefs the
    forward and backward execute (backward-only primitives such as softmax_backward); the sweep checks that
    they really run. check: "reference" (values, layouts, gradients against torch), "random" (seeded
    determinism and moments, `moments(values) -> list of (name, got, expected, tolerance)`), or "error" (the
    call must raise `raises`).
    """
    op: str
    call: Callable
    cases: tuple
    dtypes: tuple = FLOATS
    differentiable: bool = True
    ref: Optional[Callable] = None
    big: Optional[tuple] = None
    also_runs: tuple = ()
    check: str = "reference"
    inplace_call: Optional[Callable] = None  # for in-place OpDefs (alias_of): call(m, *tensors) writing tensors[0]
    inplace_unchecked: str = ""  # why an in-place OpDef has no inplace_call (no public in-place form)
    tolerance: dict = field(default_factory=dict)        # dtype -> (rtol, atol), overriding TOLERANCE
    grad_tolerance: dict = field(default_factory=dict)   # dtype -> (rtol, atol), overriding GRAD_TOLERANCE
    fd_step: float = 1e-6
    moments: Optional[Callable] = None
    raises: Optional[type] = None
    variant: str = ""  # tells apart several entries of one op (gelu "tanh")
    xfail: dict = field(default_factory=dict)  # check name ("values", "layouts", "gradients", "threads") -> reason
    note: str = ""

    def fast_cases(self):
        """fast: the first case; full: every case, then the big one (vectorised loops, tails, split work)."""
        return self.cases + ((self.big,) if self.big else ()) if FULL else self.cases[:1]

    def fast_dtypes(self):
        return self.dtypes if FULL else tuple(d for d in self.dtypes if d != "float16") or self.dtypes[:1]


def rounded(values, dtype_name):
    """float64 values rounded to dtype_name (round to nearest even, as dygrad and torch store them)."""
    import torch
    return torch.tensor(values).to(getattr(torch, dtype_name)).to(torch.float64).numpy()


def draw(spec, dtype, rng, shape=None):
    """NumPy values for `spec` in the dtype `dtype` (a name), already representable in it."""
    shape = spec.shape if shape is None else shape
    n = int(np.prod(shape, dtype=np.int64))
    if spec.kind == "mask":
        return rng.random(shape) < spec.high
    if spec.kind == "permutation":
        values = rng.permutation(np.arange(int(spec.low), int(spec.high)))[:n]
        assert values.size == n, f"permutation of [{spec.low}, {spec.high}) has fewer than {n} values"
        return values.reshape(shape).astype(np.int64)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if spec.kind == "integers" or dtype in INTEGERS:
        low = max(int(spec.low), 0) if dtype == "uint8" else int(spec.low)
        values = rng.integers(low, max(int(spec.high), low + 1), size=shape)
        return values if dtype in INTEGERS else values.astype(np.float64)
    if spec.kind == "distinct":
        grid = np.arange(int(spec.low * 8), int(spec.high * 8)) / 8.0
        assert grid.size >= n, f"distinct values in [{spec.low}, {spec.high}) on a 1/8 grid: fewer than {n}"
        return rng.permutation(grid)[:n].reshape(shape)
    values = rng.uniform(spec.low, spec.high, size=shape)
    return rounded(values, dtype) if dtype in FLOATS else values


def dtype_of(spec, case_dtype):
    if spec.kind == "mask":
        return "bool"
    if spec.kind == "permutation":
        return spec.dtype or "int64"
    return spec.dtype or case_dtype


LAYOUTS = ("contiguous", "transposed", "strided", "expanded")


def allows(spec, layout):
    """Whether the operand `spec` may take `layout` (layout=True: any, False: contiguous only, a tuple: those)."""
    if layout == "contiguous" or spec.layout is True:
        return True
    return bool(spec.layout) and layout in spec.layout


def applies(spec, layout):
    rank = len(spec.shape)
    return allows(spec, layout) and {"contiguous": True, "transposed": rank >= 2, "strided": rank >= 1,
                                     "expanded": rank >= 1 and spec.shape[0] > 1}[layout]


def layouts_for(specs):
    """The non-contiguous layouts that change at least one operand of a case; fast mode: transposed (else
    strided) and expanded."""
    out = [layout for layout in LAYOUTS[1:] if any(applies(s, layout) for s in specs)]
    if not FULL and "transposed" in out and "strided" in out:
        out.remove("strided")
    return out


def build(lib, values, dtype, layout="contiguous", requires_grad=False, device=None):
    """`values` (NumPy) as a tensor of lib (dygrad or torch) in `dtype`, laid out as `layout`.

    transposed: the last two dims of a contiguous tensor swapped back; strided: every other element of a tensor
    twice as long in the last dim; expanded: row 0 broadcast along dim 0 (stride 0; the values repeat, and
    the caller reads the values back from the tensor it got). requires_grad: returns (view, the leaf it views).
    device: the leaf is copied there and the view taken on that device (the layout is the device tensor's own).
    """
    dt = getattr(lib, dtype)
    shape = values.shape

    def leaf(array):
        t = lib.tensor(np.ascontiguousarray(array), dtype=dt)
        if device is not None:
            t = t.to(device)
        return t.requires_grad_(True) if requires_grad else t

    if layout == "transposed" and len(shape) >= 2:
        base = leaf(np.swapaxes(values, -1, -2))
        view = base.transpose(-1, -2)
    elif layout == "strided" and len(shape) >= 1:
        wide = np.zeros(shape[:-1] + (2 * shape[-1],), dtype=values.dtype)
        wide[..., ::2] = values
        base = leaf(wide)
        view = base[..., ::2]
    elif layout == "expanded" and len(shape) >= 1 and shape[0] > 1:
        base = leaf(values[:1])
        view = base.expand(*shape)
    else:
        base = view = leaf(values)
    return (view, base) if requires_grad else view
