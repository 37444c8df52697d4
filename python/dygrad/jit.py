"""dygrad.jit: capture eager code at the dispatcher and replay it as one Task (docs/jit.md).

`dg.jit(fn)` (MindSpore's signature) and `dg.compile(fn)` (torch.compile's) wrap a function, a Module's forward or a
whole training step. The first call with a set of guards runs eagerly (lazily made optimizer state and DDP buckets
come to exist), the second is captured (it runs eagerly too, while an op sink records every op it issues), and the
calls after it replay the captured graph as one Task with no Python at all. A function that reads values on the host
(`.item()`, `bool(t)`, printing, a data-dependent shape) is cut there: Python runs it on every call, and the ops
between two cuts go to the stream as one Task each. `dg.jit.explain` and a one-time warning name every cut.

On a device (the test device, later CUDA) a graph replays on that device's stream, its arena and new buffers in the
device's memory; a function that copies between devices inside runs as segments, one device's ops each, with the
copies between them (docs/jit.md, "On a device").

It is also `torch.jit` under `dygrad.as_torch`: is_scripting/is_tracing are False, ignore/unused/export return what
they decorate, script and trace return the function or module unchanged (it runs eagerly, as TorchScript's semantics
are Python's), save/load raise the not-provided error.
"""
import functools
import inspect
import logging
import os
import sys
import types
import warnings
import weakref
from typing import Final  # noqa: F401  (torch.jit.Final[int]: only TorchScript reads it)

from . import _C
from .autograd.function import Function
from .nn.module import Module
from ._jit_symbolic import (MAX_DYNAMIC_DIMS, MAX_INSTANCES, MAX_REGIMES, MAX_SAMPLES, _dynamic_dims, _Family, _Regime,
                            mark_dynamic)
from ._jit_symint import SizeTracer
from . import _jit_fusion
from ._jit_fusion import JitFusionWarning, config  # noqa: F401 (dygrad.jit.config, dygrad.jit.JitFusionWarning)

__all__ = ["jit", "explain", "graph", "mark_dynamic", "reset", "is_tracing", "is_scripting", "ignore", "unused",
           "export", "script", "trace", "annotate", "Final", "save", "load", "ScriptModule", "OptimizedModule",
           "JitRecompileWarning", "JitGraphBreakWarning"]

RECOMPILE_LIMIT = 8  # torch._dynamo.config.recompile_limit's default
_log = logging.getLogger("dygrad.jit")


def _log_enabled(kind):
    return kind in os.environ.get("DG_JIT_LOG", "").replace(" ", "").split(",")


def _emit(kind, message):
    """DG_JIT_LOG=recompiles (or graph_breaks, captures; comma-separated) prints these on stderr."""
    if _log_enabled(kind):
        sys.stderr.write(f"[dygrad.jit {kind}] {message}\n")
    _log.debug("%s: %s", kind, message)


class JitRecompileWarning(UserWarning):
    """A compiled function went past its recompile limit and runs eagerly from now on."""


class JitGraphBreakWarning(UserWarning):
    """A compiled function reads values on the host: it runs as segments with Python between them."""


class _NotProvided(RuntimeError):
    pass


def _not_provided(name):
    return _NotProvided(f"torch.jit.{name} is not provided by dygrad: it has no TorchScript (dygrad runs the "
                        f"model eagerly, and dygrad.jit captures it; see docs/jit.md)")


# --- torch.jit's names -----------------------------------------------------------------------------------------
def is_tracing():
    return False


def is_scripting():
    return False


def ignore(drop=False, **kwargs):
    if callable(drop):
        return drop
    return lambda fn: fn


def unused(fn):
    return fn


def export(fn):
    return fn


def annotate(the_type, the_value):
    return the_value


class ScriptModule:
    def __init__(self, *args, **kwargs):
        raise _not_provided("ScriptModule")


def script(obj=None, *args, **kwargs):
    """torch.jit.script: TorchScript's semantics are Python's, so the function or module is returned as it is (it
    runs eagerly; wrap it in dygrad.jit to capture it)."""
    if obj is None:
        return lambda o: o
    return obj


def trace(func, example_inputs=None, *args, **kwargs):
    """torch.jit.trace: returns `func` unchanged (see script)."""
    return func


def save(m, f, *args, **kwargs):
    raise _not_provided("save")


def load(f, *args, **kwargs):
    raise _not_provided("load")


# --- what a compiled function is guarded on ------------------------------------------------------------------------
def _flatten(tree):
    from .utils._pytree import tree_flatten
    return tree_flatten(tree)


def _is_tensor(x):
    return isinstance(x, _C.Tensor)


_SIMPLE = (bool, int, float, str, bytes, type(None), complex)


def _discover(fn, args, kwargs):
    """The Modules and Optimizers a function reaches: its own object (a bound method's self, a Module), its closure
    cells, the globals its code names, one level of attributes of those objects, and its arguments."""
    from .optim.optimizer import Optimizer
    found, seen = [], set()

    def add(obj, depth=0):
        if id(obj) in seen:
            return
        if isinstance(obj, (Module, Optimizer)):
            seen.add(id(obj))
            found.append(obj)
            return
        if depth == 0 and hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType, types.FunctionType)):
            seen.add(id(obj))
            for v in list(vars(obj).values()):
                add(v, 1)

    target = fn
    while isinstance(target, functools.partial):
        for a in target.args:
            add(a)
        target = target.func
    if inspect.ismethod(target):
        add(target.__self__)
        target = target.__func__
    if isinstance(target, Module):
        add(target)
        target = type(target).forward
    code = getattr(target, "__code__", None)
    if code is not None:
        for cell in target.__closure__ or ():
            try:
                add(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
        g = getattr(target, "__globals__", {})
        names = set(code.co_names)
        for const in code.co_consts:  # names used by nested functions and comprehensions
            if isinstance(const, types.CodeType):
                names.update(const.co_names)
        for name in names:
            if name in g:
                add(g[name])
    for a in list(args) + list(kwargs.values()):
        add(a)
    modules = [m for m in found if isinstance(m, Module)]
    optimizers = [o for o in found if not isinstance(o, Module)]
    return modules, optimizers


def _leaves_of(modules, optimizers):
    """The leaf tensors whose .grad the function may set: parameters of the modules and of the optimizers."""
    params, seen = [], set()
    for m in modules:
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    for o in optimizers:
        for group in o.param_groups:
            for p in group["params"]:
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
    return params


def _structure(tree, leaves):
    """Flattens lists, tuples and dicts (and namedtuples) into `leaves`; returns the structure as a hashable value."""
    t = type(tree)
    if t is tuple or t is list:
        return (t.__name__, tuple(_structure(x, leaves) for x in tree))
    if t is dict:
        return ("dict", tuple(tree.keys()), tuple(_structure(x, leaves) for x in tree.values()))
    if isinstance(tree, tuple) and hasattr(t, "_fields"):
        return (t, tuple(_structure(x, leaves) for x in tree))
    leaves.append(tree)
    return None


class _Guards:
    """What a capture depends on beyond the ops it recorded, as one hashable key: the arguments' structure, Python
    values and tensor geometry, grad mode, autocast, and (walked in C++, every call) the modules' training flags,
    parameters, .grad states and buffers and the optimizers' groups and state sizes."""

    def __init__(self, fn, args, kwargs, dynamic=False):
        from . import amp
        from .autograd import is_grad_enabled
        leaves = []
        structure = _structure((args, kwargs), leaves)
        self.tensors, values = [], []
        for x in leaves:
            if _is_tensor(x):
                self.tensors.append(x)
                values.append(0)
            elif isinstance(x, _SIMPLE):
                values.append((type(x), x))
            else:
                values.append(("object", id(x)))
        self.modules, self.optimizers = _discover(fn, args, kwargs)
        self.leaves = []
        # Symbolic shapes (docs/jit.md): the dynamic dims' sizes leave the key and are the point the key's symbolic
        # graph serves (one name per dim, for its messages).
        dims = _dynamic_dims(self.tensors, dynamic) if dynamic is not False else None
        self.point, self.symbols = (), []
        if dims and 0 < sum(map(len, dims)) <= MAX_DYNAMIC_DIMS:
            self.point = tuple(self.tensors[i].shape[d] for i, ds in enumerate(dims) for d in ds)
            self.symbols = [f"tensor argument {i} dim {d}" for i, ds in enumerate(dims) for d in ds]
        else:
            dims = None
        state = _C._jit_guard_state(self.tensors, self.modules, self.optimizers, self.leaves, dims)
        seen = {id(p) for p in self.leaves}
        # Tensor arguments whose .grad the function may set: by position, as each call passes new ones.
        self.arg_leaves = [i for i, t in enumerate(self.tensors) if t.requires_grad and t.is_leaf and id(t) not in seen]

        self.key = (structure, tuple(values), is_grad_enabled(), amp.is_autocast_enabled(),
                    amp.get_autocast_dtype("cpu"), _C._get_context()[0], state)

    def target_spec(self):
        """What gradients a compiled forward's backward computes: parameters that require grad (by identity) and
        tensor arguments that require grad (by position)."""
        return [p for p in self.leaves if p.requires_grad] + \
               [("arg", i) for i, t in enumerate(self.tensors) if t.requires_grad]

    def target_tensors(self):
        return [self.tensors[w[1]] if isinstance(w, tuple) else w for w in self.target_spec()]

    def targets(self):
        """(how to find the leaf at a replay, the leaf now): parameters by identity, arguments by position."""
        return [(p, p) for p in self.leaves] + [(("arg", i), self.tensors[i]) for i in self.arg_leaves]


class _Detail:
    """The same guards spelled out, to say in words why a call missed (computed only on a miss)."""

    def __init__(self, guards):
        from . import amp
        from .autograd import is_grad_enabled
        parts = []
        for i, x in enumerate(guards.tensors):
            parts.append(("tensor", tuple(x.shape), tuple(x.stride()), str(x.dtype), x.requires_grad,
                          str(x.device)))
        self.parts = tuple(parts)
        self.values = guards.key[1]
        self.structure = guards.key[0]
        state = [("grad mode", is_grad_enabled()), ("autocast", amp.is_autocast_enabled(),
                                                      str(amp.get_autocast_dtype("cpu"))),
                 ("deterministic mode (dygrad.set_context)", _C._get_context()[0])]
        for m in guards.modules:
            state.append(("a module's training flag (train()/eval())", tuple(sub.training for sub in m.modules())))
            state.append(("a module's buffers", tuple(_C._storage_address(b) if b is not None else 0
                                                      for b in m.buffers())))
        for p in guards.leaves:
            g = p.grad
            state.append(("a parameter", id(p), _C._storage_address(p), tuple(p.shape)))
            state.append(("a parameter's .grad", None if g is None else (tuple(g.shape), tuple(g.stride()))))
        for o in guards.optimizers:
            state.append(("an optimizer's groups", len(o.param_groups),
                          tuple(len(g["params"]) for g in o.param_groups)))
            state.append(("an optimizer's state", len(o.state)))
        self.state = tuple(state)

    def difference(self, other):
        """Why `self` (this call) does not match `other` (an earlier call), in words."""
        if self.structure != other.structure:
            return "the arguments' structure changed"
        for i, (a, b) in enumerate(zip(self.parts, other.parts)):
            if a != b:
                for n, x, y in zip(["kind", "shape", "stride", "dtype", "requires_grad", "device"], a, b):
                    if x != y:
                        return f"tensor argument {i}: {n} {y} -> {x}"
        if self.values != other.values:
            for i, (a, b) in enumerate(zip(self.values, other.values)):
                if a != b:
                    return f"argument {i} changed: {b[1] if isinstance(b, tuple) else b!r} -> " \
                           f"{a[1] if isinstance(a, tuple) else a!r}"
        if len(self.state) != len(other.state):
            return "the set of parameters changed"
        for a, b in zip(self.state, other.state):
            if a != b:
                if a[0] == "a parameter's .grad":
                    return f"a parameter's .grad is {'None' if a[1] is None else 'defined'} now" \
                        if (a[1] is None) != (b[1] is None) else "a parameter's .grad changed shape"
                if a[0] == "a parameter":
                    return "a parameter was replaced"
                return f"{a[0]} changed: {b[1:]} -> {a[1:]}"
        return "tensor aliasing between the arguments changed"


class _Backward:
    """A compiled forward's backward: captured at its first run, then replayed."""

    def __init__(self, name, num_results, diff, target_spec):
        self.name = name
        self.num_results = num_results
        self.diff = diff              # which results carry gradients
        self.target_spec = target_spec
        self.backward = None          # the backward graph, once captured
        self.grad_slots = None        # per target: its index among the backward graph's results, or None
        self.failed = None            # why the backward could not be captured
        self.num_flats = 0            # the saved buffers the forward graph returns after its results
        self.sample = None            # a sample of a symbolic graph: (its _Regime, its point): the backward joins
        self.expect = None            # an instance's: the geometry its backward graph binds (gradients, saved)
        self.level = "O0"             # the compiled function's jit_level: O1 optimizes the backward graph too
        self.pending = None           # O1: the optimized backward whose generated kernels are compiling


def entry_failed_reason(entry):
    return f"its backward cannot be replayed: {entry.fb.failed}" if entry.fb else "its backward cannot be replayed"


def _check_once_differentiable(name):
    from .autograd import is_grad_enabled
    if is_grad_enabled():
        raise RuntimeError(f"dygrad.jit: {name}: a double backward (create_graph=True) through a compiled forward is "
                           f"not supported; call the function eagerly for it")


class _CaptureBackward(Function):
    """The captured call's outputs: their backward runs the eager autograd graph of the capture under a capture of
    its own, which becomes the backward graph of the later replays."""

    @staticmethod
    def forward(ctx, state, eager_outs, saved, *targets):
        ctx.state, ctx.eager_outs, ctx.saved, ctx.targets = state, eager_outs, saved, targets
        return tuple(o.detach() for o in eager_outs)

    @staticmethod
    def backward(ctx, *grads):
        from .autograd import grad as autograd_grad
        state = ctx.state
        _check_once_differentiable(state.name)
        grads = [g.contiguous() for g in grads]
        if state.backward is not None:  # a second backward of the captured call (retain_graph)
            return (None, None, None) + _run_backward(state, grads, ctx.saved)
        capture = _C._JitCapture(grads + list(ctx.saved))
        try:
            try:
                got = autograd_grad(ctx.eager_outs, ctx.targets, grads, retain_graph=True, allow_unused=True)
            finally:
                capture.end()
            results = [g for g in got if g is not None]
            graph = capture.build(results) if not capture.cuts else None
            if graph is None:
                cuts = [f"{reader} at {file}:{line}" for _, reader, file, line in capture.cuts]
                state.failed = "; ".join(cuts + list(capture.problems)) or "its backward reads the host"
            else:
                slots, k = [], 0
                for g in got:
                    slots.append(None if g is None else k)
                    k += g is not None
                state.backward, state.grad_slots = graph, slots
                if state.level != "O0":  # docs/jit-fusion.md: the captured backward replays until its kernels load
                    state.backward, state.pending = _jit_fusion.optimize(graph, state.name + " (backward)")
            if state.sample is not None:  # a symbolic graph's sample: its forward and backward join the fits
                regime, sample = state.sample
                state.sample = None
                regime.join_backward(state, sample, graph, grads + list(ctx.saved))
        finally:
            capture.close()
        return (None, None, None) + tuple(got)


def _run_backward(state, grads, flats):
    if state.expect is not None:  # an instance's backward: bound only where its geometry is the predicted one
        got = [(tuple(t.shape), tuple(t.stride())) for t in list(grads) + list(flats)[:state.num_flats]]
        if got != state.expect:
            raise RuntimeError(f"dygrad.jit: {state.name}: the backward of its symbolic instance expected gradients "
                               f"and saved buffers laid out as {state.expect}, got {got}; compile it with "
                               f"dynamic=False")
    if state.pending is not None:
        graph = _jit_fusion.finish(state.pending, state.name + " (backward)")
        if graph is not None:
            state.backward, state.pending = graph, None
    out = state.backward.launch(list(grads) + list(flats))
    return tuple(None if slot is None else out[slot] for slot in state.grad_slots)


class _ReplayBackward(Function):
    """A replayed forward's outputs: their backward replays the captured backward on this call's saved buffers."""

    @staticmethod
    def forward(ctx, state, outs, flats, *targets):
        ctx.state, ctx.flats = state, flats
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        _check_once_differentiable(ctx.state.name)
        return (None, None, None) + _run_backward(ctx.state, [g.contiguous() for g in grads], ctx.flats)


class _Entry:
    """One guard key's state: how many eager calls it has seen, then its graph or its segments."""
    __slots__ = ("guards", "calls", "graph", "segments", "grad_slots", "arg_results", "spec", "cuts", "problems",
                 "describe", "identity", "attempts", "fb", "sample", "instance", "size_guards", "pending")

    def __init__(self, guards):
        self.guards = guards
        self.calls = 0
        self.graph = None
        self.segments = False
        self.cuts = []
        self.problems = []
        self.describe = []
        self.attempts = 0  # captures that found cuts or problems
        self.fb = None  # a forward whose backward runs outside: its _Backward
        self.identity = []  # (leaf, address): a .grad the graph reads or accumulates into must still be that buffer
        self.sample = False  # captured to teach a symbolic graph (not a recompile)
        self.instance = None  # an instance of a symbolic graph at these sizes: (its family, its point)
        self.size_guards = None  # what Python compared of the sizes during its capture (_jit_symint.Guards)
        self.pending = None  # O1: the optimized graph whose generated kernels are compiling (_jit_fusion.Pending)


class _Compiled:
    """A function compiled by dygrad.jit / dygrad.compile."""

    def __init__(self, fn, *, fullgraph=False, dynamic=None, recompile_limit=None, name=None, jit_level="O0"):
        # dynamic: True makes every dim of the tensor arguments symbolic, False none, None (and 0) those marked with
        # mark_dynamic (docs/jit.md, "Symbolic shapes"); jit_level: "O0" replays the captured sub-ops, "O1" and "O2"
        # the graph after the passes (docs/jit-fusion.md).
        self._level = jit_level
        self._dynamic = True if dynamic_requested(dynamic) else False if dynamic is False else None
        self._families = {}  # guard key -> _Family, for keys with dynamic dims
        self._fn = fn
        self._fullgraph = fullgraph
        self._limit = RECOMPILE_LIMIT if recompile_limit is None else int(recompile_limit)
        self._name = name or getattr(fn, "__qualname__", None) or type(fn).__name__
        self._entries = {}
        self._order = []  # guard keys in capture order
        self._eager_reason = None
        self._warned_cuts = False
        self._warmed_up = False
        self.stats = {"captures": 0, "replays": 0, "segment_calls": 0, "eager_calls": 0, "recompiles": 0,
                      "samples": 0, "symbolic_instances": 0, "fused_kernels": 0}
        functools.update_wrapper(self, fn, updated=())

    def __get__(self, obj, objtype=None):
        return self if obj is None else types.MethodType(self, obj)

    def __repr__(self):
        return f"<dygrad.jit compiled {self._name}>"

    # -- the call ---------------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self._eager_reason is not None or _C._jit_active() or _C._meta_active() or _C._get_context()[1]:
            self.stats["eager_calls"] += 1
            return self._fn(*args, **kwargs)
        guards = _Guards(self._fn, args, kwargs, self._dynamic)
        key = (guards.key, guards.point)
        entry = self._entries.get(key)
        if entry is None:
            family = self._families.get(guards.key)
            if family is not None:
                entry = self._new_point(family, guards, key)
                if entry is None:
                    self.stats["eager_calls"] += 1
                    return self._fn(*args, **kwargs)
            else:
                if not self._new_key(guards):
                    self.stats["eager_calls"] += 1
                    return self._fn(*args, **kwargs)
                entry = self._entries[key] = _Entry(_Detail(guards))
                self._order.append(key)
                if guards.point:
                    self._families[guards.key] = _Family(guards.symbols)
        elif entry.instance is not None:  # most recently used last
            family, point = entry.instance
            family.instances[point] = family.instances.pop(point)
        entry.calls += 1
        if entry.graph is not None:
            for where, address in entry.identity:
                p = guards.tensors[where[1]] if isinstance(where, tuple) else where
                if p.grad is None or _C._storage_address(p.grad) != address:
                    self.stats["recompiles"] += 1
                    _emit("recompiles", f"recompiling {self._name}: a .grad the graph accumulates into was replaced")
                    entry.graph = None
                    break
        if entry.fb is not None and entry.fb.backward is None:
            if entry.fb.failed:  # its backward could not be captured: Python runs it each call
                entry.graph, entry.fb, entry.segments = None, None, True
                entry.problems.append(entry_failed_reason(entry))
                self._warn_segments(entry)
            else:  # the backward of the captured call has not run yet: capture again (eagerly)
                entry.graph, entry.fb = None, None
        if entry.graph is not None:
            try:
                return self._replay(entry, guards)
            except Exception as e:  # an argument that cannot be bound: run this call eagerly
                _emit("recompiles", f"{self._name}: replay refused ({e}); running eagerly")
                entry.graph = None
                if entry.instance is not None:  # the next call at these sizes is captured
                    family, point = entry.instance
                    family.refused.add(point)
                    self._drop_instance(family, point)
                self.stats["eager_calls"] += 1
                return self._fn(*args, **kwargs)
        if entry.segments:
            return self._run_segments(args, kwargs)
        if entry.calls == 1 and not self._warmed_up:
            # The function's first call runs eagerly (optimizer state, DDP buckets and caches made lazily come to
            # exist); a later guard key is captured at its first call.
            self._warmed_up = True
            self.stats["eager_calls"] += 1
            return self._fn(*args, **kwargs)
        return self._capture(entry, guards, args, kwargs)

    def _captured_keys(self):
        """Keys captured as a recompile: the samples of a symbolic graph do not count."""
        return [k for k in self._order if (self._entries[k].graph is not None or self._entries[k].segments)
                and not self._entries[k].sample]

    def _new_key(self, guards, reason=None):
        """A guard key not seen before: a recompile once something was captured. False past the recompile limit (the
        function runs eagerly from then on)."""
        captured = self._captured_keys()
        if not self._order:
            return True
        # A new guard key after a capture is a recompile (a key that only ever had its warm-up call, such as the
        # first step's before the optimizer made its state, is not).
        last = self._entries[(captured or self._order)[-1]].guards
        reason = reason or _Detail(guards).difference(last)
        if captured:
            self.stats["recompiles"] += 1
            _emit("recompiles", f"recompiling {self._name}: {reason}")
        return not self._past_limit(captured, reason, stacklevel=4)

    def _past_limit(self, captured, reason, stacklevel):
        """Past the recompile limit the function runs eagerly from now on, with a warning saying why."""
        if len(captured) >= self._limit or len(self._order) >= 2 * self._limit + 2 * MAX_REGIMES * MAX_SAMPLES + 2:
            self._eager_reason = (f"{self._name} was recompiled {len(captured)} times (the recompile "
                                  f"limit is {self._limit}); the last reason: {reason}")
            warnings.warn(f"dygrad.jit: {self._eager_reason}. It runs eagerly from now on.",
                          JitRecompileWarning, stacklevel=stacklevel)
            return True
        return False

    def _new_point(self, family, guards, key):
        """New sizes of a guard key with dynamic dims: an instance of a symbolic graph of one of its regimes whose
        comparisons of sizes come out at these sizes as at its captures, else an entry to capture (a sample when a
        symbolic graph needs one more, else a recompile with the reason). None: run eagerly."""
        point = guards.point
        sizes = ", ".join(f"{name} = {v}" for name, v in zip(family.symbols, point))
        reasons, more = [], False
        if family.disabled is not None:
            reasons.append(family.disabled)
        elif point in family.refused:
            reasons.append("its symbolic instance at these sizes was refused at launch")
        else:
            for regime in family.regimes:
                if regime.disabled is not None or regime.proto is None:
                    reasons.append(regime.disabled or "its capture did not join")
                    continue
                graph, reason, need, extras, _ = regime.symbolic.instantiate(list(point), guards.tensors)
                if graph is not None:
                    reason = regime.guards.check(extras)
                if graph is not None and reason is None and regime.fb:
                    fb, reason, backward_needs = regime.backward_at(point, guards.tensors)
                    need = need or backward_needs
                    if fb is not None:
                        return self._serve(family, regime, graph, point, key, sizes, fb)
                elif graph is not None and reason is None:
                    return self._serve(family, regime, graph, point, key, sizes)
                more = more or (need and regime.symbolic.num_samples < MAX_SAMPLES)
                reasons.append(reason)
        if more:
            _emit("captures", f"capturing {self._name} at {sizes} as a sample of its symbolic graph: "
                  + "; ".join(dict.fromkeys(reasons)))
            entry = self._entries[key] = _Entry(_Detail(guards))
            entry.sample = True
            self._order.append(key)
            return entry
        reason = "; ".join(dict.fromkeys(reasons))
        if family.proto is not None:
            reason = f"{_Detail(guards).difference(family.proto.guards)}; no symbolic graph serves it: {reason}"
        if not self._new_key(guards, reason):
            return None
        entry = self._entries[key] = _Entry(_Detail(guards))
        self._order.append(key)
        return entry

    def _serve(self, family, regime, graph, point, key, sizes, fb=None):
        proto = regime.proto
        entry = _Entry(proto.guards)
        entry.calls = 1  # past the warm-up
        entry.fb = fb
        entry.graph, entry.grad_slots, entry.arg_results = graph, proto.grad_slots, proto.arg_results
        entry.spec, entry.identity, entry.describe = proto.spec, proto.identity, proto.describe
        entry.instance = (family, point)
        self._entries[key] = entry
        if fb is None:  # O1: the instance at these sizes after the passes, its kernels compiled in the background
            self._optimize(entry)
        family.instances[point] = key
        while len(family.instances) > MAX_INSTANCES:
            self._drop_instance(family, next(iter(family.instances)))
        self.stats["symbolic_instances"] += 1
        _emit("captures", f"{self._name}: its symbolic graph serves {sizes}")
        return entry

    def _drop_instance(self, family, point):
        key = family.instances.pop(point, None)
        if key is not None:
            self._entries.pop(key, None)

    def _join(self, entry, guards, graph=None, why=None, fb=None):
        """A capture of a guard key with dynamic dims joins the regime of its path through Python's comparisons of
        sizes as a sample (a new path is a new regime: a recompile when the capture was meant as a sample), or says
        why none can serve this function (each size is then captured on its own, a recompile)."""
        family = self._families.get(guards.key)
        if family is None or family.disabled is not None:
            return
        if why is not None:
            family.disabled = why
            _emit("recompiles", f"{self._name}: no symbolic graph: {why}; each size is captured on its own")
            return
        regime = family.regime_of(entry.size_guards)
        if regime is None:
            first = family.regimes[0] if family.regimes else None
            if len(family.regimes) >= MAX_REGIMES:
                return self._alone(entry, f"{first.guards.difference(entry.size_guards)}, and {MAX_REGIMES} paths "
                                          f"have a symbolic graph already")
            regime = _Regime(family.symbols, entry.size_guards)
            family.regimes.append(regime)
            if first is not None and entry.sample:
                self._alone(entry, first.guards.difference(entry.size_guards))
        if regime.disabled is not None:
            return self._alone(entry, regime.disabled)
        if regime.proto is None:
            regime.proto = entry
        elif not regime.same_layout(entry):
            why = "its results or the .grad it sets are laid out otherwise at these sizes"
        if why is None and fb is not None:  # a compiled forward: it joins with its backward, once that has run
            regime.fb = True
            fb.sample = (regime, (graph, list(guards.point), list(guards.tensors), entry.size_guards.extras))
            if entry.sample:
                self.stats["samples"] += 1
            return
        if why is None:
            why = regime.symbolic.add(graph, list(guards.point), guards.tensors, entry.size_guards.extras) or None
        if why is None:
            if entry.sample:
                self.stats["samples"] += 1
            return
        regime.disabled = why
        self._alone(entry, why)
        _emit("recompiles", f"{self._name}: no symbolic graph: {why}; each size is captured on its own")

    def _alone(self, entry, reason):
        """A capture meant as a sample that serves only its own sizes: a recompile, with its reason."""
        if not entry.sample:
            return
        entry.sample = False
        self.stats["recompiles"] += 1
        _emit("recompiles", f"recompiling {self._name}: {reason}")
        self._past_limit(self._captured_keys(), reason, stacklevel=5)

    def _run_segments(self, args, kwargs):
        self.stats["segment_calls"] += 1
        with _C._JitSegments():
            return self._fn(*args, **kwargs)

    def _capture(self, entry, guards, args, kwargs):
        targets = guards.targets()
        grads_before = [p.grad for _, p in targets]
        capture = _C._JitCapture(guards.tensors, fullgraph=self._fullgraph)
        try:
            try:
                if guards.point:  # Python's comparisons of the sizes are guards of the symbolic graph
                    with SizeTracer() as tracer:
                        out = self._fn(*args, **kwargs)
                    entry.size_guards = tracer.result()
                else:
                    out = self._fn(*args, **kwargs)
            finally:
                capture.end()
            self.stats["captures"] += 1
            _emit("captures", f"captured {self._name}: {capture.num_ops} ops, {len(capture.cuts)} cuts")
            entry.cuts = list(capture.cuts)
            entry.describe = capture.describe()
            out_leaves, out_spec = _flatten(out)
            results, layout, problems = [], [], []
            arg_ids = {id(t): i for i, t in enumerate(guards.tensors)}
            for x in out_leaves:
                if _is_tensor(x):
                    if id(x) in arg_ids:
                        layout.append(("arg", arg_ids[id(x)]))
                    else:
                        layout.append(("result", len(results)))
                        results.append(x)
                elif x is None:
                    layout.append(("none", None))
                else:
                    layout.append(("none", None))
                    problems.append(f"it returns a Python {type(x).__name__}, which only Python can compute")
            from .autograd import is_grad_enabled
            # Outputs with an autograd graph not yet run (a forward whose backward runs outside the function); a step
            # that ran its backward returns a loss whose graph is consumed: a plain replay.
            if not entry.cuts and is_grad_enabled() and any(
                    x.requires_grad and x.grad_fn is not None and not x.grad_fn._released for x in results):
                return self._capture_forward(entry, guards, capture, out_spec, layout, results, problems)
            grad_slots = []
            for i, (where, p) in enumerate(targets):
                g = p.grad
                if g is grads_before[i]:
                    continue
                if g is None:
                    grad_slots.append((where, None))
                else:
                    grad_slots.append((where, len(results)))
                    results.append(g)
            graph = capture.build(results) if not entry.cuts else None
            entry.problems = list(capture.problems) + problems
            if self._fullgraph and (entry.cuts or entry.problems):
                raise RuntimeError(f"dygrad.jit(fullgraph=True): {self._name} cannot be captured whole: "
                                   + "; ".join(self._reasons(entry)))
            if graph is None or problems:
                entry.attempts += 1
                if entry.attempts < 2:
                    # One more capture first: a host read or a cached tensor may be one-time work of the second
                    # call (DDP rebuilds its buckets from the first backward's order at the second step).
                    _emit("graph_breaks", f"{self._name}: capture {entry.attempts} found " +
                          "; ".join(self._reasons(entry)) + "; capturing once more")
                    return out
                entry.segments = True
                if guards.point:
                    self._join(entry, guards, why="it runs as segments (Python runs between its host reads)")
                if not self._warned_cuts:
                    self._warned_cuts = True
                    warnings.warn(f"dygrad.jit: {self._name} runs as compiled segments with Python between them "
                                  f"(docs/jit.md): " + "; ".join(self._reasons(entry)), JitGraphBreakWarning,
                                  stacklevel=3)
                _emit("graph_breaks", f"{self._name}: " + "; ".join(self._reasons(entry)))
                return out
            entry.graph = graph
            self._optimize(entry)  # a sample of a symbolic graph joins below with the captured graph itself
            fixed = set(graph.fixed_addresses())
            entry.identity = [(where, _C._storage_address(g)) for (where, _), g in zip(targets, grads_before)
                              if g is not None and _C._storage_address(g) in fixed]
            entry.grad_slots = grad_slots
            entry.arg_results = layout
            entry.spec = out_spec
            if guards.point:
                self._join(entry, guards, graph)
            return out
        finally:
            capture.close()

    def _capture_forward(self, entry, guards, capture, out_spec, layout, results, problems):
        """A forward whose backward runs outside the function (a compiled Module's forward under grad mode): the
        forward graph also returns what its autograd graph saved; the backward is captured when it first runs
        (through _CaptureBackward), and later calls replay both (docs/jit.md, "A forward whose backward runs
        outside")."""
        from .utils._pytree import tree_unflatten
        built = capture.build_with_saved(results) if not problems else None
        entry.problems = list(capture.problems) + problems
        leaves = [results[i] if kind == "result" else guards.tensors[i] if kind == "arg" else None
                  for kind, i in layout]
        if built is None:
            if self._fullgraph:
                raise RuntimeError(f"dygrad.jit(fullgraph=True): {self._name} cannot be captured whole: "
                                   + "; ".join(self._reasons(entry)))
            entry.attempts += 1
            if entry.attempts >= 2:
                entry.segments = True
                self._warn_segments(entry)
            return tree_unflatten(leaves, out_spec)
        graph, saved = built
        state = _Backward(self._name, len(results), [i for i, x in enumerate(results) if x.requires_grad],
                          guards.target_spec())
        state.num_flats = len(saved)
        state.level = "O0" if guards.point else self._level
        entry.graph, entry.fb, entry.arg_results, entry.spec = graph, state, layout, out_spec
        entry.grad_slots = []
        if guards.point:  # a sample of the forward's and the backward's fits, joined when its backward runs
            self._join(entry, guards, graph, fb=state)
        else:
            self._optimize(entry)
        # What the backward may read besides its gradients: the forward's saved buffers and its tensor arguments.
        wrapped = _CaptureBackward.apply(state, [results[i] for i in state.diff], saved + list(guards.tensors),
                                         *guards.target_tensors())
        for k, i in enumerate(state.diff):
            results[i] = wrapped[k] if isinstance(wrapped, tuple) else wrapped
        leaves = [results[i] if kind == "result" else guards.tensors[i] if kind == "arg" else None
                  for kind, i in layout]
        return tree_unflatten(leaves, out_spec)

    def _warn_segments(self, entry):
        if not self._warned_cuts:
            self._warned_cuts = True
            warnings.warn(f"dygrad.jit: {self._name} runs as compiled segments with Python between them "
                          f"(docs/jit.md): " + "; ".join(self._reasons(entry)), JitGraphBreakWarning, stacklevel=4)
        _emit("graph_breaks", f"{self._name}: " + "; ".join(self._reasons(entry)))

    @staticmethod
    def _reasons(entry):
        reasons = [f"{reader} at {file}:{line}" if file else reader for _, reader, file, line in entry.cuts]
        return reasons + list(entry.problems)

    def _optimize(self, entry):
        """O1: the captured graph after the passes; where it has fused kernels still compiling, the captured graph
        replays until they are loaded (docs/jit-fusion.md). With dynamic dims each size's graph (a capture, or an
        instance of the symbolic graph) is optimized: one compile per size, in the background. A compiled forward
        whose backward runs outside replays O0 at dynamic sizes."""
        if self._level == "O0":
            return
        entry.graph, entry.pending = _jit_fusion.optimize(entry.graph, self._name)
        if entry.pending is None:
            self.stats["fused_kernels"] += entry.graph.num_fused

    def _take_kernels(self, entry, wait=False):
        graph = _jit_fusion.finish(entry.pending, self._name, wait=wait)
        if graph is not None:
            entry.graph, entry.pending = graph, None
            self.stats["fused_kernels"] += graph.num_fused

    def wait_for_kernels(self):
        """Waits for the generated kernels still compiling; the next calls replay the optimized graphs."""
        for entry in self._entries.values():
            if entry.pending is not None:
                self._take_kernels(entry, wait=True)
            fb = entry.fb
            if fb is not None and fb.pending is not None:
                fb.backward = _jit_fusion.finish(fb.pending, fb.name + " (backward)", wait=True)
                fb.pending = None

    def _replay(self, entry, guards):
        from .utils._pytree import tree_unflatten
        if entry.pending is not None:
            self._take_kernels(entry)
        if entry.fb is not None:
            return self._replay_forward(entry, guards)
        results = entry.graph.launch(guards.tensors)
        for where, slot in entry.grad_slots:
            leaf = guards.tensors[where[1]] if isinstance(where, tuple) else where
            leaf.grad = None if slot is None else results[slot]
        leaves = []
        for kind, i in entry.arg_results:
            leaves.append(results[i] if kind == "result" else guards.tensors[i] if kind == "arg" else None)
        self.stats["replays"] += 1
        return tree_unflatten(leaves, entry.spec)

    def _replay_forward(self, entry, guards):
        from .utils._pytree import tree_unflatten
        state = entry.fb
        launched = entry.graph.launch(guards.tensors)
        results, flats = launched[:state.num_results], launched[state.num_results:]
        if state.diff:
            wrapped = _ReplayBackward.apply(state, [results[i] for i in state.diff], flats + list(guards.tensors),
                                            *guards.target_tensors())
            for k, i in enumerate(state.diff):
                results[i] = wrapped[k] if isinstance(wrapped, tuple) else wrapped
        leaves = [results[i] if kind == "result" else guards.tensors[i] if kind == "arg" else None
                  for kind, i in entry.arg_results]
        self.stats["replays"] += 1
        return tree_unflatten(leaves, entry.spec)

    # -- introspection -------------------------------------------------------------------------------------------
    def graphs(self):
        """The captured graphs' descriptions, one list of lines per guard key."""
        return [e.describe for e in self._entries.values() if e.describe]

    def reset(self):
        """Forgets every capture (the next call starts over with a warm-up call)."""
        self._entries.clear()
        self._order.clear()
        self._families.clear()
        self._eager_reason = None
        self._warned_cuts = False
        self._warmed_up = False


def _check_options(capture_mode, jit_level, backend):
    if capture_mode not in ("trace",):
        raise NotImplementedError(f"dygrad.jit: capture_mode={capture_mode!r} is not implemented; dygrad captures "
                                  f"at the dispatcher: use capture_mode='trace' (docs/jit.md)")
    if jit_level not in ("O0", "O1", "O2"):
        raise ValueError(f"dygrad.jit: jit_level must be 'O0', 'O1' or 'O2', got {jit_level!r}")
    if callable(backend):
        raise NotImplementedError("dygrad.jit/compile: a callable backend is not supported (dygrad has no FX graph "
                                  "to hand it); use the default backend")


def jit(function=None, *, capture_mode="trace", jit_level="O0", dynamic=0, fullgraph=False, backend="", **options):
    """mindspore.jit's signature: a decorator (with or without arguments) or a call, on a function, a Module (its
    forward is compiled: an OptimizedModule is returned) or a whole training step. See docs/jit.md."""
    _check_options(capture_mode, jit_level, backend)
    recompile_limit = options.pop("recompile_limit", None)
    if options:
        raise TypeError(f"dygrad.jit got unexpected options {sorted(options)}")
    if function is None:
        return functools.partial(jit, capture_mode=capture_mode, jit_level=jit_level, dynamic=dynamic,
                                 fullgraph=fullgraph, backend=backend, recompile_limit=recompile_limit)
    return _wrap(function, fullgraph=bool(fullgraph), dynamic=dynamic, recompile_limit=recompile_limit,
                 jit_level=jit_level)


def _wrap(function, **kw):
    if isinstance(function, Module):
        return OptimizedModule(function, **kw)
    if isinstance(function, _Compiled):
        return function
    if not callable(function):
        raise TypeError(f"dygrad.jit: expected a function or a Module, got {type(function).__name__}")
    return _Compiled(function, **kw)


def dynamic_requested(dynamic):
    return dynamic is True or (isinstance(dynamic, int) and not isinstance(dynamic, bool) and dynamic > 0)


def compile_(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None, name=None,
             disable=False, recompile_limit=None, isolate_recompiles=False, shapes_spec=None):
    """torch.compile's signature on dygrad.jit's machinery; works called and as a decorator with or without
    arguments. `disable=True` returns the model unchanged; `mode` and `options` are accepted and change nothing
    (dygrad has one replay)."""
    if model is None:
        return functools.partial(compile_, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                 options=options, name=name, disable=disable, recompile_limit=recompile_limit,
                                 isolate_recompiles=isolate_recompiles, shapes_spec=shapes_spec)
    if not callable(model):
        raise RuntimeError("torch.compile: the model or function to compile must be callable")
    if disable:
        return model
    if mode not in (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: default, reduce-overhead, max-autotune, "
                           f"max-autotune-no-cudagraphs")
    _check_options("trace", "O1", backend)
    return _wrap(model, fullgraph=bool(fullgraph), dynamic=dynamic, recompile_limit=recompile_limit, jit_level="O1")


class OptimizedModule(Module):
    """torch._dynamo's OptimizedModule: the compiled wrapper of a Module. Attribute reads go to the original
    (`_orig_mod`); its state_dict keys carry the `_orig_mod.` prefix, as torch's."""

    def __init__(self, mod, **kw):
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_compiled_forward", _Compiled(mod, **kw))

    def forward(self, *args, **kwargs):
        return self._compiled_forward(*args, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)


# --- seeing what was captured -------------------------------------------------------------------------------------
class ExplainOutput:
    """What dygrad.jit.explain found: graphs (compiled segments), the cuts between them with their reasons, and the
    problems that keep the function from replaying without Python."""

    def __init__(self, ops, cuts, problems, lines):
        self.ops_per_graph = []
        start = 0
        for before, *_ in cuts:
            self.ops_per_graph.append(before - start)
            start = before
        self.ops_per_graph.append(ops - start)
        self.graph_count = len(self.ops_per_graph)
        self.graph_break_count = len(cuts)
        self.break_reasons = [f"{reader} at {file}:{line}" if file else reader for _, reader, file, line in cuts]
        self.problems = list(problems)
        self.lines = list(lines)

    def __str__(self):
        out = [f"Graph Count: {self.graph_count}", f"Graph Break Count: {self.graph_break_count}",
               f"Op Count: {sum(self.ops_per_graph)}"]
        if self.break_reasons:
            out.append("Break Reasons:")
            out += [f"  Break Reason {i + 1}: host read: {r}" for i, r in enumerate(self.break_reasons)]
        if self.problems:
            out.append("Replays need Python because:")
            out += [f"  {p}" for p in self.problems]
        return "\n".join(out)

    __repr__ = __str__


def _run_captured(fn, args, kwargs):
    """Runs fn (a compiled function or Module is unwrapped) once under a capture, eagerly: (ops captured, cuts,
    problems, one line per op)."""
    if isinstance(fn, _Compiled):
        fn = fn._fn
    if isinstance(fn, Module) and hasattr(fn, "_compiled_forward"):
        fn = fn._compiled_forward._fn
    guards = _Guards(fn, args, kwargs)
    capture = _C._JitCapture(guards.tensors)
    try:
        try:
            out = fn(*args, **kwargs)
        finally:
            capture.end()
        lines = capture.describe()
        num_ops = capture.num_ops
        out_leaves, _ = _flatten(out)
        problems = [f"it returns a Python {type(x).__name__}, which only Python can compute"
                    for x in out_leaves if not _is_tensor(x) and x is not None]
        cuts = list(capture.cuts)
        built = None
        if not cuts:
            built = capture.build([x for x in out_leaves if _is_tensor(x)])  # finds what only Python can compute
        return num_ops, cuts, list(capture.problems) + problems, lines, built
    finally:
        capture.close()


def explain(fn, *args, **kwargs):
    """Runs `fn(*args, **kwargs)` once under a capture (eagerly: its effects happen) and returns an ExplainOutput:
    the compiled segments, every cut with its reader, file and line, and why a replay would need Python."""
    return ExplainOutput(*_run_captured(fn, args, kwargs)[:4])


def graph(fn, *args, passes=False, **kwargs):
    """Runs `fn(*args, **kwargs)` once under a capture and returns its graph as text: one line per op (its name,
    input and output shapes, dtype, and the source line that issued it), cuts marked where they fall. With
    `passes=True`, the graph as captured and after each O1 pass that `dygrad.jit.config` enables (docs/jit-fusion.md):
    a fused sub-op reads `jit_fused[mul_scalar+add+rsqrt]`."""
    _, cut_list, problems, lines, built = _run_captured(fn, args, kwargs)
    if passes:
        if built is None:
            why = "; ".join([f"{r} at {f}:{ln}" for _, r, f, ln in cut_list] + list(problems))
            raise RuntimeError(f"dygrad.jit.graph(passes=True): the function cannot be replayed as one graph: {why}")
        return _jit_fusion.describe_passes(built)
    cuts = {before: (reader, file, line) for before, reader, file, line in cut_list}
    out = []
    for i, line in enumerate(lines):
        if i in cuts:
            reader, file, ln = cuts[i]
            out.append(f"--- cut: {reader} at {file}:{ln} ---")
        out.append(f"{i:4d}  {line}")
    if len(lines) in cuts:
        reader, file, ln = cuts[len(lines)]
        out.append(f"--- cut: {reader} at {file}:{ln} ---")
    return "\n".join(out)


def source(fn, *args, **kwargs):
    """Runs `fn(*args, **kwargs)` once under a capture (eagerly: its effects happen) and returns the C++ that O1
    generates for its fused kernels: one translation unit, a commented function per fused group naming the ops and
    lines it replaced (docs/jit-fusion.md)."""
    _, cut_list, problems, _, built = _run_captured(fn, args, kwargs)
    if built is None:
        why = "; ".join([f"{r} at {f}:{ln}" for _, r, f, ln in cut_list] + list(problems))
        raise RuntimeError(f"dygrad.jit.source: the function cannot be replayed as one graph: {why}")
    return _jit_fusion.source(built)


def reset():
    """torch._dynamo.reset: nothing global to forget (each compiled function keeps its own captures)."""


class _JitModule(types.ModuleType):
    """The module is callable: `dygrad.jit(fn)` is `dygrad.jit.jit(fn)`."""

    def __call__(self, function=None, **kwargs):
        return jit(function, **kwargs)


sys.modules[__name__].__class__ = _JitModule
