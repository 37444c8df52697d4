"""dygrad.jit's symbolic shapes on the Python side (docs/jit.md, "Symbolic shapes"): which dims of a call are dynamic,
the marks of mark_dynamic, and a guard key's family of captures whose C++ SymbolicGraph (jit/symbolic.h) serves new
sizes. The call logic that uses them is _Compiled's (jit.py)."""
from . import _C

MAX_DYNAMIC_DIMS = 16  # beyond, every size specialises
MAX_SAMPLES = 8  # captures a symbolic graph may take before each new size is a recompile
MAX_REGIMES = 4  # paths through Python's comparisons of sizes with a symbolic graph each
MAX_INSTANCES = 8  # instances (each with its arena) a symbolic graph keeps, the least recently used dropped first


class _Regime:
    """The captures of one guard key that took one path through Python's comparisons of sizes (docs/jit.md, "Python
    comparing sizes"): the samples teach `symbolic` (C++, jit/symbolic.h) how every size follows the symbols."""

    def __init__(self, symbols, guards):
        self.symbolic = _C._JitSymbolic(symbols)
        self.guards = guards   # the first capture's _jit_symint.Guards: the comparisons every sample made alike
        self.proto = None      # the first sample's entry: what every instance returns, and where
        self.disabled = None   # why its captures cannot share a graph: each of its sizes is then captured alone
        self.symbols = symbols
        self.fb = False        # a compiled forward whose backward runs outside: its samples join with their backward
        self.backward = None   # then the symbolic graph of the backward, fitted on the same samples
        self.backward_spec = None
        self.backward_proto = None  # the first joined sample's backward state

    def join_backward(self, state, sample, graph, args):
        """A sample of a compiled forward joins when its backward first ran (captured then as `graph`, with `args`):
        the forward's graph the forward fits, the backward's the backward fits; both or neither."""
        if self.disabled is not None:
            return
        if graph is None:
            self.disabled = f"its backward cannot be replayed: {state.failed}"
            return
        targets = tuple(w if isinstance(w, tuple) else id(w) for w in state.target_spec)
        spec = (state.num_results, tuple(state.diff), targets, state.num_flats, tuple(state.grad_slots))
        if self.backward is None:
            self.backward, self.backward_spec = _C._JitSymbolic(self.symbols), spec
        elif spec != self.backward_spec:
            self.disabled = "its backward returns other gradients at the sizes " + str(tuple(sample[1]))
            return
        why = self.symbolic.add(*sample) or self.backward.add(graph, sample[1], args)
        if why:
            self.disabled = f"{why} (a compiled forward and its backward)"
        else:
            self.backward_proto = state

    def backward_at(self, point, tensors):
        """The backward state of an instance of a compiled forward at `point`: its backward graph instantiated from
        the backward's fits before the gradients exist (their geometry predicted, checked when they arrive).
        Returns (state, reason, more)."""
        from .jit import _Backward
        proto = self.backward_proto
        k = len(proto.diff) + proto.num_flats
        graph, reason, more, _, geometry = self.backward.instantiate(list(point), [None] * k + list(tensors))
        if graph is None:
            return None, f"its backward: {reason}", more
        state = _Backward(proto.name, proto.num_results, proto.diff, proto.target_spec)
        state.num_flats, state.grad_slots, state.backward = proto.num_flats, proto.grad_slots, graph
        state.expect = [tuple(g) for g in geometry[:k]]
        return state, None, False

    def same_layout(self, entry):
        """Whether a sample returns what the first did, where it did (else it cannot join)."""
        def ids(slots):
            return [(w if isinstance(w, tuple) else id(w), s) for w, s in slots]
        p = self.proto
        return (ids(entry.grad_slots) == ids(p.grad_slots) and entry.arg_results == p.arg_results
                and str(entry.spec) == str(p.spec) and entry.identity == p.identity)


class _Family:
    """The captures of one guard key whose dynamic dims vary, in regimes: one per path Python took through its
    comparisons of sizes (a branch on `T > 1024` makes two), each with its own symbolic graph."""

    def __init__(self, symbols):
        self.symbols = symbols
        self.regimes = []
        self.disabled = None   # why this function cannot have a symbolic graph: each size is then captured
        self.instances = {}    # point -> its guard key in _Compiled._entries (in use order)
        self.refused = set()   # points whose instance failed at launch

    @property
    def proto(self):
        return self.regimes[0].proto if self.regimes else None

    def regime_of(self, guards):
        for r in self.regimes:
            if r.guards.difference(guards) is None:
                return r
        return None


def _dynamic_dims(tensors, dynamic):
    """Per tensor argument, the dims a symbolic graph may serve: every dim (dynamic=True) or those marked with
    mark_dynamic (dynamic=None). Sizes 0 and 1 always specialise, as torch's do (broadcasting depends on them)."""
    out = []
    for t in tensors:
        dims = range(t.dim()) if dynamic is True else _marked_dims(t)
        out.append([d for d in dims if t.shape[d] >= 2])
    return out


# Marks of mark_dynamic: id(tensor) -> (its identity check, its dims). A Tensor takes no Python attributes and no weak
# references, so a mark is found by id and checked against the tensor's storage and geometry (an id reused by another
# tensor misses); the oldest marks go past MAX_MARKS. A mark only ever allows a symbolic graph, which is guarded itself.
_marks = {}
MAX_MARKS = 4096


def _mark_identity(t):
    return (_C._storage_address(t), t.storage_offset(), tuple(t.shape), tuple(t.stride()))


def _marked_dims(t):
    mark = _marks.get(id(t))
    return sorted(mark[1]) if mark is not None and mark[0] == _mark_identity(t) else ()


def mark_dynamic(t, dim, **kwargs):
    """torch._dynamo.mark_dynamic: the size of `t`'s dim `dim` (an int or a list) is symbolic in the functions `t` is
    passed to (docs/jit.md, "Symbolic shapes"), unless compiled with dynamic=False. `min`/`max` are accepted."""
    if not isinstance(t, _C.Tensor):
        raise TypeError(f"[mark_dynamic] expected a Tensor, got {type(t).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    for d in dims:
        if not isinstance(d, int) or not -t.dim() <= d < t.dim():
            raise IndexError(f"[mark_dynamic] dim {d!r} is out of range for a tensor of shape {tuple(t.shape)}")
    identity = _mark_identity(t)
    mark = _marks.pop(id(t), None)
    if mark is None or mark[0] != identity:
        mark = (identity, set())
    mark[1].update(d % t.dim() for d in dims)
    _marks[id(t)] = mark
    while len(_marks) > MAX_MARKS:
        del _marks[next(iter(_marks))]
