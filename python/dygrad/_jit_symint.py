"""Sizes Python reads during a capture with dynamic dims (docs/jit.md, "Python comparing sizes").

A symbolic graph is fitted from captures (jit/symbolic.h) and a replay runs no Python, so a branch Python takes on a
size (`if T > 1024:`) is invisible to the op records. While a capture of a guard key with dynamic dims runs, the sizes
Python reads from tensors (`shape`, `size()`, `numel()`, `stride()`) are `SymInt`s: ints that carry how they were
computed from the reads (a small expression tree), and whose comparisons and truth tests record a guard (the
expression, the comparison, its result at the capture, the line). The reads the guards name are fitted beside the
graph's own integers; an instance at new sizes predicts them, re-evaluates every guard, and is served only where
each comes out as it did at the captures. Where a size leaves this arithmetic (`int()`, `float()`, `hash()`, `len()`,
true division) it is specialised: a guard that its value stays what it was.

Only the capturing thread sees SymInts, and only while the capture runs: a SymInt kept past it is a plain int."""
import operator
import sys
import threading

from . import _C
from ._size import Size

_THIS_FILE = __file__
_current = None  # the active tracer (captures happen on one thread at a time)

_BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
    "mod": operator.mod, "pow": operator.pow, "and": operator.and_, "or": operator.or_, "xor": operator.xor,
    "lshift": operator.lshift, "rshift": operator.rshift,
}
_UNARY = {"neg": operator.neg, "abs": operator.abs, "invert": operator.invert}
_COMPARE = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
            "ne": operator.ne}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%", "pow": "**", "and": "&", "or": "|",
           "xor": "^", "lshift": "<<", "rshift": ">>", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==",
           "ne": "!="}


def _site():
    """file:line of the first frame outside this module and dygrad's own size plumbing."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename == _THIS_FILE:
        f = f.f_back
    return (f.f_code.co_filename, f.f_lineno) if f is not None else ("", 0)


def _node(x):
    return x._node if isinstance(x, SymInt) and x._live() else ("c", int(x) if isinstance(x, int) else x)


class SymInt(int):
    """An int read from a tensor's sizes (or computed from such) during a capture with dynamic dims."""

    def __new__(cls, value, node, tracer):
        self = int.__new__(cls, value)
        self._v = int.__int__(self)  # the plain value (int(self) specialises)
        self._node = node
        self._tracer = tracer
        return self

    def _live(self):
        t = self._tracer
        return t is _current and t.active and threading.get_ident() == t.thread

    def _specialise(self, how):
        if self._live():
            self._tracer.guard("eq", self._node, ("c", self._v), True, how)
        return self._v

    def __repr__(self):
        return int.__repr__(self._v)

    __str__ = __repr__

    def __format__(self, spec):
        return format(self._v, spec)

    def __int__(self):
        return self._specialise("int()")

    def __float__(self):
        return float(self._specialise("float()"))

    def __complex__(self):
        return complex(self._specialise("complex()"))

    def __hash__(self):
        return hash(self._specialise("hash()"))

    def __bool__(self):
        result = self._v != 0
        if self._live():
            self._tracer.guard("ne", self._node, ("c", 0), result, None)
        return result

    def __trunc__(self):
        return self

    __floor__ = __ceil__ = __pos__ = __trunc__

    def __round__(self, ndigits=None):
        return self if ndigits is None or ndigits >= 0 else round(self._specialise("round()"), ndigits)

    def __truediv__(self, other):
        if not isinstance(other, (int, float)):
            return NotImplemented
        other = other._specialise("true division") if isinstance(other, SymInt) else other
        return self._specialise("true division") / other

    def __rtruediv__(self, other):
        if not isinstance(other, (int, float)):
            return NotImplemented
        return other / self._specialise("true division")

    def __divmod__(self, other):
        return self // other, self % other

    def __rdivmod__(self, other):
        return other // self, other % self


def _make_binary(name, fn):
    def forward(self, other, mod=None):
        if mod is not None or isinstance(other, float):  # leaves int arithmetic: specialised
            return fn(self._specialise(f"'{_SYMBOL[name]}' with a float"), other) if mod is None else \
                pow(self._specialise("pow(.., mod)"), other, mod)
        if not isinstance(other, int):
            return NotImplemented
        b = other._v if isinstance(other, SymInt) else int(other)
        value = fn(self._v, b)
        if isinstance(value, int) and self._live():
            return SymInt(value, (name, self._node, _node(other)), self._tracer)
        if not isinstance(value, int):  # 2 ** -1
            self._specialise(f"'{_SYMBOL[name]}' with a fractional result")
            if isinstance(other, SymInt):
                other._specialise(f"'{_SYMBOL[name]}' with a fractional result")
        return value

    def reflected(self, other):
        if isinstance(other, float):
            return fn(other, self._specialise(f"'{_SYMBOL[name]}' with a float"))
        if not isinstance(other, int):
            return NotImplemented
        value = fn(int(other) if not isinstance(other, SymInt) else other._v, self._v)
        if isinstance(value, int) and self._live():
            return SymInt(value, (name, _node(other), self._node), self._tracer)
        if not isinstance(value, int):
            self._specialise(f"'{_SYMBOL[name]}' with a fractional result")
        return value

    return forward, reflected


def _make_unary(name, fn):
    def method(self):
        value = fn(self._v)
        return SymInt(value, (name, self._node), self._tracer) if self._live() else value
    return method


def _make_compare(name, fn):
    def method(self, other):
        if not isinstance(other, (int, float)):
            return NotImplemented
        b = other._v if isinstance(other, SymInt) else other
        result = fn(self._v, b)
        if self._live():
            self._tracer.guard(name, self._node, _node(other), result, None)
        return result
    return method


for _name, _fn in _BINARY.items():
    _f, _r = _make_binary(_name, _fn)
    setattr(SymInt, f"__{_name}__", _f)
    setattr(SymInt, f"__r{_name}__", _r)
for _name, _fn in _UNARY.items():
    setattr(SymInt, f"__{_name}__", _make_unary(_name, _fn))
for _name, _fn in _COMPARE.items():
    setattr(SymInt, f"__{_name}__", _make_compare(_name, _fn))


def evaluate(node, leaves):
    """An expression tree's value with the reads given by `leaves` (index -> value)."""
    kind = node[0]
    if kind == "l":
        return leaves[node[1]]
    if kind == "c":
        return node[1]
    if kind in _UNARY:
        return _UNARY[kind](evaluate(node[1], leaves))
    return _BINARY[kind](evaluate(node[1], leaves), evaluate(node[2], leaves))


def describe(node, reads):
    """An expression tree as text, each read named by what and where it was read."""
    kind = node[0]
    if kind == "l":
        return reads[node[1]]
    if kind == "c":
        return repr(node[1])
    if kind in _UNARY:
        return {"neg": "-", "abs": "abs ", "invert": "~"}[kind] + "(" + describe(node[1], reads) + ")"
    return f"({describe(node[1], reads)} {_SYMBOL[kind]} {describe(node[2], reads)})"


class Guards:
    """What a capture's Python compared: `structure` (the comparisons with their expressions and lines, the reads they
    name), `extras` (those reads' values, fitted beside the graph's integers) and `outcomes` (each comparison's result).
    Captures whose structure and outcomes agree share one symbolic graph (docs/jit.md)."""

    def __init__(self, structure, reads, extras, outcomes):
        self.structure = structure
        self.reads = reads
        self.extras = extras
        self.outcomes = outcomes

    def check(self, predicted):
        """None when every comparison comes out as at the captures with the reads `predicted`, else why not."""
        for (op, a, b, how, site), want in zip(self.structure[0], self.outcomes):
            try:
                got = _COMPARE[op](evaluate(a, predicted), evaluate(b, predicted))
                value = evaluate(a, predicted)
            except (ArithmeticError, ValueError):
                got = value = None
            if got != want:
                if how is not None:
                    return self._specialised(a, how, site, b[1], "the captures", value)
                return self._compared(op, a, b, site, want, "the captures", got)
        return None

    def _where(self, site):
        return f" at {site[0].rsplit('/', 1)[-1]}:{site[1]}" if site[0] else ""

    def _specialised(self, a, how, site, then, when, now):
        return (f"Python used the size {describe(a, self.reads)} as a plain number ({how}){self._where(site)}: it "
                f"was {then} at {when} and is {'not computable' if now is None else now} at these sizes")

    def _compared(self, op, a, b, site, then, when, now):
        return (f"Python compared sizes{self._where(site)}: {describe(a, self.reads)} {_SYMBOL[op]} "
                f"{describe(b, self.reads)} was {then} at {when} and "
                f"{'cannot be evaluated' if now is None else now} at these sizes")

    def difference(self, other):
        """Why `other` (a later capture) took another path through Python's comparisons; None if it did not."""
        if other.structure == self.structure and other.outcomes == self.outcomes:
            return None
        mine, theirs = self.structure[0], other.structure[0]
        for i in range(min(len(mine), len(theirs))):
            op, a, b, how, site = theirs[i]
            if how is not None and mine[i][:1] + mine[i][3:] == theirs[i][:1] + theirs[i][3:] and mine[i] != theirs[i]:
                return other._specialised(a, how, site, mine[i][2][1], "the first capture", b[1])
            if mine[i] != theirs[i]:
                return (f"Python compared sizes otherwise{other._where(site)} at these sizes than "
                        f"{self._where(mine[i][4]).strip() or 'elsewhere'} at the first capture")
            if self.outcomes[i] != other.outcomes[i]:
                return other._compared(op, a, b, site, self.outcomes[i], "the first capture", other.outcomes[i])
        return f"Python compared sizes {len(theirs)} times at these sizes, {len(mine)} times at the first capture"


class SizeTracer:
    """Installed around a capture with dynamic dims: the size accessors of Tensor hand the capturing thread SymInts."""

    def __init__(self):
        self.thread = threading.get_ident()
        self.active = False
        self.reads = []   # per read: (value, its description)
        self.guards = []  # (op, node a, node b, how (specialised by), site, result)

    def read(self, value, what):
        file, line = _site()
        self.reads.append((value, f"{what} (read at {file.rsplit('/', 1)[-1]}:{line})"))
        return SymInt(value, ("l", len(self.reads) - 1), self)

    def guard(self, op, a, b, result, how):
        self.guards.append((op, a, b, how, _site(), result))

    def __enter__(self):
        global _current
        if _current is not None:
            raise RuntimeError("[jit] a size tracer is already active")
        _current = self
        self.active = True
        _install()
        return self

    def __exit__(self, *exc):
        global _current
        self.active = False
        _current = None
        _uninstall()
        return False

    def result(self):
        """The capture's Guards: reads renumbered in order of first use by a comparison (unused reads dropped)."""
        order = {}

        def renumber(node):
            if node[0] == "l":
                if node[1] not in order:
                    order[node[1]] = len(order)
                return ("l", order[node[1]])
            if node[0] == "c":
                return node
            return (node[0],) + tuple(renumber(x) for x in node[1:])

        comparisons = tuple((op, renumber(a), renumber(b), how, site) for op, a, b, how, site, _ in self.guards)
        used = sorted(order, key=order.get)
        reads = [self.reads[i][1] for i in used]
        return Guards((comparisons, tuple(reads)), reads, [self.reads[i][0] for i in used],
                      tuple(r for *_, r in self.guards))


# -- the accessors ------------------------------------------------------------------------------------------------
_ORIGINAL = {}
_NAMES = ("shape", "size", "numel", "nelement", "stride", "__len__")


def _tracer():
    t = _current
    return t if t is not None and t.active and threading.get_ident() == t.thread else None


def _shape(self):
    s = _ORIGINAL["shape"].__get__(self)
    t = _tracer()
    return s if t is None else Size(t.read(v, f"shape[{i}]") for i, v in enumerate(s))


def _size(self, dim=None):
    s = _ORIGINAL["size"](self, dim)
    t = _tracer()
    if t is None:
        return s
    if dim is None:
        return Size(t.read(v, f"size({i})") for i, v in enumerate(s))
    return t.read(s, f"size({dim})")


def _stride(self, dim=None):
    s = _ORIGINAL["stride"](self, dim)
    t = _tracer()
    if t is None:
        return s
    if dim is None:
        return tuple(t.read(v, f"stride({i})") for i, v in enumerate(s))
    return t.read(s, f"stride({dim})")


def _numel(self):
    n = _ORIGINAL["numel"](self)
    t = _tracer()
    return n if t is None else t.read(n, "numel()")


def _nelement(self):
    n = _ORIGINAL["nelement"](self)
    t = _tracer()
    return n if t is None else t.read(n, "nelement()")


def _len(self):
    n = _ORIGINAL["__len__"](self)
    t = _tracer()
    if t is not None:  # len() makes its result a plain int: specialised
        t.read(n, "len()")._specialise("len()")
    return n


_WRAPPERS = {"shape": property(_shape), "size": _size, "numel": _numel, "nelement": _nelement, "stride": _stride,
             "__len__": _len}


def _install():
    for name in _NAMES:
        _ORIGINAL[name] = _C.Tensor.__dict__[name]
        setattr(_C.Tensor, name, _WRAPPERS[name])


def _uninstall():
    for name in _NAMES:
        if name in _ORIGINAL:
            setattr(_C.Tensor, name, _ORIGINAL[name])
