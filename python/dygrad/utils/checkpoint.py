"""dygrad.utils.checkpoint: activation checkpointing with torch.utils.checkpoint's API (docs/recompute.md).

`checkpoint(function, *args, ...)` runs `function` once with saved-tensor hooks whose pack hook keeps only a
handle (and the tensor's shape/dtype/device): the region saves no activation. When the backward first unpacks
one of them, the function is run again (inside that unpack hook, as torch's) under the RNG state it saw in
the forward, with hooks that capture what it saves, in order; each handle is then unpacked into its
recomputed tensor, which the frame drops at that moment. The recomputation stops as soon as the last saved
tensor is recomputed (`early_stop`).

Selective recompute (`create_selective_checkpoint_contexts(policy)`): the forward context watches every op
issued in the region (an op observer at enqueue, src/dygrad/ops/dispatch.h) and caches the outputs of the
ops the policy saves; in the recomputation those ops are not run: their outputs adopt the cached storage.
Presets: `policies.memory_bound`, `policies.memory_bound_and_qkv`. Budget mode: `plan(...)`.
"""
import contextlib
import enum
import threading
import warnings
import weakref
from collections import defaultdict

import dygrad as dg

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError", "noop_context_fn", "CheckpointPolicy",
           "SelectiveCheckpointContext", "create_selective_checkpoint_contexts", "policies", "recompute_tag"]

_DEFAULT_DETERMINISM_MODE = "default"


def noop_context_fn():
    return contextlib.nullcontext(), contextlib.nullcontext()


class CheckpointError(RuntimeError):
    pass


class _StopRecomputationError(Exception):
    pass


def _default_meta_extractor(x):
    return {"shape": tuple(x.shape), "dtype": x.dtype, "device": x.device}


_allowed_determinism_checks_to_fns = {
    _DEFAULT_DETERMINISM_MODE: _default_meta_extractor,
    "none": lambda _: None,
}

_debug_tip_msg = """
Tip: To see a more detailed error message, either pass `debug=True` to
`torch.utils.checkpoint.checkpoint(...)` or wrap the code block
with `with torch.utils.checkpoint.set_checkpoint_debug_enabled(True):` to
enable checkpoint-debug mode globally.
"""


class _Holder:
    __slots__ = ("__weakref__",)


class _Frame:
    def __init__(self, function, args, kwargs, preserve_rng_state, recompute_context_fn, metadata_fn, early_stop):
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self.rng_state = dg.get_rng_state() if preserve_rng_state else None
        self.recompute_context_fn = recompute_context_fn
        self.metadata_fn = metadata_fn
        self.early_stop = early_stop
        self.holders = []  # weak references, in the order the forward saved them
        self.metadatas = []
        self.recomputed = {}  # holder -> recomputed tensor, until it is unpacked
        self.unpacked = weakref.WeakSet()  # holders unpacked since the last recomputation
        self.forward_completed = False
        self.tracker = None  # a plain checkpoint's recomputation context that skips the last matmul

    # --- original forward -------------------------------------------------------------------------------------
    def pack(self, x):
        holder = _Holder()
        self.holders.append(weakref.ref(holder))
        if self.metadata_fn is not None:
            self.metadatas.append(self.metadata_fn(x))
        return holder

    def unpack(self, holder):
        if dg.is_grad_enabled():
            # A create_graph backward: the recomputed tensors come back detached and dygrad's Node::saved does not
            # re-attach the saved tensor's history as torch's SavedVariable does, so a second derivative would be
            # silently wrong (docs/autograd.md, "Known gaps"): refuse it.
            raise RuntimeError("[checkpoint] double backward (create_graph=True) through a non-reentrant checkpoint "
                               "is not supported by dygrad yet; run the region without checkpoint for higher-order "
                               "gradients")
        tensor = self.recomputed.pop(holder, None)
        if tensor is None:
            # The first unpack of this backward (or of a later one, with retain_graph): recompute here, as
            # torch does. The hook floor (src/dygrad/autograd/node.cpp) lets the recomputation's own hooks apply.
            self.recompute()
            tensor = self.recomputed.pop(holder, None)
            if tensor is None:
                raise CheckpointError(
                    "torch.utils.checkpoint: Unpack is being triggered for a tensor that was already unpacked "
                    "once. If you are calling ctx.saved_tensors in backward, make sure to do so only once. "
                    "Otherwise please open an issue with details on your use case.")
        self.unpacked.add(holder)
        return tensor

    def recompute(self):
        self.unpacked = weakref.WeakSet()
        recomputed = {}
        counter = [0]
        n = len(self.holders)

        def pack(x):
            x = x.detach() if x.requires_grad else x
            i = counter[0]
            counter[0] += 1
            if i >= n:
                raise CheckpointError("torch.utils.checkpoint: trying to save more tensors during recomputation "
                                      "than during the original forward pass.\n" + _debug_tip_msg)
            holder = self.holders[i]()
            if holder is not None:
                recomputed[holder] = x
            if self.early_stop and counter[0] == n:
                raise _StopRecomputationError
            return x

        def unpack(x):
            return x

        saved_rng = dg.get_rng_state() if self.rng_state is not None else None
        try:
            if self.rng_state is not None:
                dg.set_rng_state(self.rng_state)
            with dg.autograd.graph.saved_tensors_hooks(pack, unpack), dg.enable_grad(), self.recompute_context_fn(), \
                    (self.tracker or contextlib.nullcontext()):
                self.function(*self.args, **self.kwargs)
        except _StopRecomputationError:
            pass
        finally:
            if saved_rng is not None:
                dg.set_rng_state(saved_rng)
        self.check(counter[0], recomputed)
        self.recomputed = recomputed

    def check(self, count, recomputed):
        if count != len(self.holders):
            raise CheckpointError(
                "torch.utils.checkpoint: A different number of tensors was saved during the original forward and "
                f"recomputation.\nNumber of tensors saved during forward: {len(self.holders)}\n"
                f"Number of tensors saved during recomputation: {count}.\n" + _debug_tip_msg)
        if self.metadata_fn is None:
            return
        different = []
        for idx, ref in enumerate(self.holders):
            holder = ref()
            if holder is None or holder not in recomputed:
                continue
            meta = self.metadata_fn(recomputed[holder])
            if meta != self.metadatas[idx]:
                different.append((idx, self.metadatas[idx], meta))
        if different:
            text = "".join(f"tensor at position {idx}:\nsaved metadata: {a}\nrecomputed metadata: {b}\n"
                           for idx, a, b in different)
            raise CheckpointError("torch.utils.checkpoint: Recomputed values for the following tensors have "
                                  f"different metadata than during the forward pass.\n{text}.\n" + _debug_tip_msg)


def _checkpoint(function, args, kwargs, preserve_rng_state, context_fn, determinism_check, early_stop):
    if determinism_check not in _allowed_determinism_checks_to_fns:
        raise ValueError(f"determinism_check should be one of {list(_allowed_determinism_checks_to_fns.keys())}, "
                         f"but got {determinism_check}")
    forward_context, recompute_context = context_fn()
    # context_fn is called once per checkpoint call (as torch); the recompute context is entered at most once
    # per recomputation: re-call context_fn for later ones.
    contexts = [recompute_context]

    def recompute_context_fn():
        # A context that can be entered again (selective recompute's) serves every recomputation, as torch's;
        # others are used once and context_fn is called again for later recomputations.
        if getattr(recompute_context, "_dg_reenterable", False):
            return recompute_context
        if contexts:
            return contexts.pop()
        return context_fn()[1]

    frame = _Frame(function, args, kwargs, preserve_rng_state, recompute_context_fn,
                   _allowed_determinism_checks_to_fns[determinism_check], early_stop)
    if isinstance(forward_context, _CachingMode):
        tracker = forward_context
    else:  # a plain checkpoint records its ops too, to skip the last matmul in the recomputation
        storage = defaultdict(dict)
        tracker = _CachingMode(None, storage)
        frame.tracker = _CachedMode(storage, tracking=True)
    tracker.frame = frame
    with dg.autograd.graph.saved_tensors_hooks(frame.pack, frame.unpack), forward_context, \
            (contextlib.nullcontext() if tracker is forward_context else tracker):
        result = function(*args, **kwargs)
    frame.forward_completed = True
    if not frame.holders:
        frame.function = frame.args = frame.kwargs = None  # nothing to recompute: keep no inputs alive
    return result


def checkpoint(function, *args, use_reentrant=None, context_fn=noop_context_fn, determinism_check=_DEFAULT_DETERMINISM_MODE,
               debug=False, early_stop=True, **kwargs):
    """torch.utils.checkpoint.checkpoint: runs `function(*args, **kwargs)` without keeping its activations;
    the backward recomputes them. `preserve_rng_state` (default True) is taken from kwargs, as torch's."""
    if use_reentrant is None:
        warnings.warn(
            "torch.utils.checkpoint: the use_reentrant parameter should be "
            "passed explicitly. Starting in PyTorch 2.9, calling checkpoint "
            "without use_reentrant will raise an exception. use_reentrant=False is "
            "recommended, but if you need to preserve the current default "
            "behavior, you can pass use_reentrant=True. Refer to docs for more "
            "details on the differences between the two variants.",
            stacklevel=2,
        )
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs and use_reentrant:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
    if use_reentrant:
        if context_fn is not noop_context_fn or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when use_reentrant=False.")
        if not any(a.requires_grad for a in args if isinstance(a, dg.Tensor)):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)
    # use_reentrant=True runs by the same (non-reentrant) machinery; debug adds no operator log in dygrad.
    return _checkpoint(function, args, kwargs, preserve, context_fn, determinism_check, early_stop)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """torch.utils.checkpoint.checkpoint_sequential: all segments but the last are checkpointed."""
    if use_reentrant is None:
        warnings.warn(
            "torch.utils.checkpoint.checkpoint_sequential: the use_reentrant "
            "parameter should be passed explicitly. "
            "In version 2.9 we will raise an exception if use_reentrant "
            "is not passed. use_reentrant=False is "
            "recommended, but if you need to preserve the current default "
            "behavior, you can pass use_reentrant=True. Refer to docs for more "
            "details on the differences between the two variants.",
            stacklevel=2,
        )
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))

    def run_function(start, end, functions):
        def forward(input):
            for j in range(start, end + 1):
                input = functions[j](input)
            return input
        return forward

    if isinstance(functions, dg.nn.Sequential):
        functions = list(functions.children())
    segment_size = len(functions) // segments
    end = -1
    for start in range(0, segment_size * (segments - 1), segment_size):
        end = start + segment_size - 1
        input = checkpoint(run_function(start, end, functions), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run_function(end + 1, len(functions) - 1, functions)(input)


# --- selective recompute (torch's create_selective_checkpoint_contexts) --------------------------------------------
class CheckpointPolicy(enum.Enum):
    """torch.utils.checkpoint.CheckpointPolicy: {MUST,PREFER}_SAVE keep the op's outputs from the forward (the
    recomputation does not run the op); {MUST,PREFER}_RECOMPUTE run it again. The CPU_OFFLOAD values are
    accepted and save (dygrad's tensors are on the CPU already)."""
    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3
    MUST_CPU_OFFLOAD = 4
    PREFER_CPU_OFFLOAD = 5


_SAVING = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE, CheckpointPolicy.MUST_CPU_OFFLOAD,
           CheckpointPolicy.PREFER_CPU_OFFLOAD)


def _policy_from_bool(b):
    return CheckpointPolicy.MUST_SAVE if b else CheckpointPolicy.PREFER_RECOMPUTE


class SelectiveCheckpointContext:
    """What a policy function receives first: `is_recompute` (always False: torch 2.13 calls the policy only in
    the forward), `op_output` (the op's output, or a tuple of them). dygrad adds `tags`: the
    `recompute_tag(...)` names active where the op was issued (the LLaMA block tags its QKV projection)."""

    def __init__(self, *, is_recompute, op_output=None, tags=()):
        self.is_recompute = is_recompute
        self.op_output = op_output
        self.tags = tags


def _tag_stack():
    tags = getattr(_local, "tags", None)
    if tags is None:
        tags = _local.tags = []
    return tags


class recompute_tag:  # noqa: N801 -- a context manager, like torch's lower-case ones
    """Names the ops issued inside (ctx.tags in a policy): `with recompute_tag("qkv"): qkv = self.qkv(h)`."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        _tag_stack().append(self.name)

    def __exit__(self, *exc):
        _tag_stack().pop()
        return False


_RECOMPUTE = object()
_CONSUMED = object()
_SAC_MISMATCH_MSG = ("This can happen if the operations in the checkpointed region are nondeterministic or depend "
                     "on global state that changed between forward and backward.")
_local = threading.local()  # per thread, as the C++ observer: the active observers (innermost last), the tags


def _observer_stack():
    stack = getattr(_local, "observers", None)
    if stack is None:
        stack = _local.observers = []
    return stack


def _push_observer(fn):
    _observer_stack().append(fn)
    dg._C._set_op_observer(fn)


def _pop_observer():
    stack = _observer_stack()
    stack.pop()
    dg._C._set_op_observer(stack[-1] if stack else None)


class _SACStats:
    """Bytes and op counts of one selective region (the memory report and the planner read them)."""
    __slots__ = ("saved_bytes", "saved_ops", "recomputed_ops", "trimmed_bytes")

    def __init__(self):
        self.saved_bytes = 0
        self.saved_ops = 0
        self.recomputed_ops = 0
        self.trimmed_bytes = 0


def _nbytes(t):
    return t.numel() * t.element_size()


_SKIP = object()
# Ops whose node saves only its inputs, after the Task is enqueued (ops/linalg.cpp): when such an op's saves are
# the region's last, the early-stopping recomputation needs none of its outputs and may skip its Task.
_SKIPPABLE = ("matmul", "addmm")


class _CachingMode:
    """The forward context: asks the policy about each op issued and caches the outputs of those it saves.
    With policy_fn None (a plain checkpoint) it only records the ops, for the skip of the last one."""
    _dg_reenterable = False

    def __init__(self, policy_fn, storage):
        self.policy_fn = policy_fn
        self.storage = storage
        self.counter = defaultdict(int)
        self.frame = None  # set by checkpoint: its pack count dates each op
        self.order = []  # (op, idx, packs before it) of every op observed
        self.stats = _SACStats()

    def observe(self, name, inputs, outputs):
        op = dg.ops.by_name(name)
        idx = self.counter[op]
        self.counter[op] += 1
        self.order.append((op, idx, len(self.frame.holders) if self.frame is not None else None))
        if self.policy_fn is None:
            self.storage[op][idx] = _RECOMPUTE
            return None
        out = outputs[0] if len(outputs) == 1 else tuple(outputs)
        policy = self.policy_fn(SelectiveCheckpointContext(is_recompute=False, op_output=out, tags=tuple(_tag_stack())),
                                op, *inputs)
        if isinstance(policy, bool):
            policy = _policy_from_bool(policy)
        if policy in _SAVING:
            # the version now: ops bump a written tensor's version before they enqueue (ops/*.cpp)
            self.storage[op][idx] = [[o.detach(), o._version] for o in outputs]
        else:
            self.storage[op][idx] = _RECOMPUTE
        return None

    def __enter__(self):
        _push_observer(self.observe)
        return self

    def __exit__(self, *exc):
        _pop_observer()
        frame, self.frame = self.frame, None
        if frame is not None and frame.early_stop:
            # The early-stopping recomputation ends at the region's last save: ops issued after it are never
            # reached (their cached outputs would only be held: drop them), and when that save is the node of
            # a matmul saving its inputs, the matmul's output is not needed either: skip its Task.
            last = len(frame.holders)
            for op, idx, packs in self.order:
                if packs is not None and packs >= last:
                    entry = self.storage[op][idx]
                    if entry is not _RECOMPUTE:
                        self.stats.trimmed_bytes += sum(_nbytes(t) for t, _ in entry)
                    self.storage[op][idx] = _RECOMPUTE
            reached = [e for e in self.order if e[2] is not None and e[2] < last]
            if reached and reached[-1][0].name in _SKIPPABLE and last > 0:
                op, idx, _ = reached[-1]
                entry = self.storage[op][idx]
                if entry is not _RECOMPUTE:
                    self.stats.trimmed_bytes += sum(_nbytes(t) for t, _ in entry)
                self.storage[op][idx] = _SKIP
        for op, idx, _ in self.order:
            entry = self.storage[op][idx]
            if entry is _RECOMPUTE or entry is _SKIP:
                continue
            self.stats.saved_ops += 1
            self.stats.saved_bytes += sum(_nbytes(t) for t, _ in entry)
        self.order = []
        return False


class _CachedMode:
    """The recomputation context: ops the forward cached are not run; their outputs adopt the cached storage.
    `tracking` (a plain checkpoint): ops not found are run, nothing is consumed (retain_graph recomputes)."""
    _dg_reenterable = True

    def __init__(self, storage, allow_cache_entry_mutation=False, stats=None, tracking=False):
        self.storage = storage
        self.allow_cache_entry_mutation = allow_cache_entry_mutation
        self.counter = defaultdict(int)
        self.stats = stats
        self.tracking = tracking
        self.skipped = None

    def observe(self, name, inputs, outputs):
        op = dg.ops.by_name(name)
        if self.skipped is not None:
            raise CheckpointError(f"torch.utils.checkpoint: {op} ran in the recomputation after {self.skipped}, "
                                  f"whose Task was skipped as the region's last save. {_SAC_MISMATCH_MSG}")
        idx = self.counter[op]
        self.counter[op] += 1
        func_storage = self.storage.get(op)
        entry = None if func_storage is None else func_storage.get(idx)
        if entry is None:
            if self.tracking:
                return None
            if func_storage is None:
                raise RuntimeError(f"{op} encountered during backward but not found in storage. {_SAC_MISMATCH_MSG}")
            raise RuntimeError(f"{op} invocation index {idx} encountered during backward but not found in storage. "
                               f"{_SAC_MISMATCH_MSG}")
        if entry is _SKIP:
            self.skipped = op
            return []
        if entry is _CONSUMED:
            raise RuntimeError("Trying to backward an extra time. You are only allowed to backward once on any "
                               "region computed under selective activation checkpoint.")
        if entry is _RECOMPUTE:
            if self.stats is not None:
                self.stats.recomputed_ops += 1
            return None
        func_storage[idx] = _CONSUMED
        if not self.allow_cache_entry_mutation:
            for t, version in entry:
                if version is not None and t._version != version:
                    raise RuntimeError("Tensor cached during selective activation checkpoint has been mutated")
        return [t for t, _ in entry]

    def __enter__(self):
        self.counter.clear()
        self.skipped = None
        _push_observer(self.observe)
        return self

    def __exit__(self, *exc):
        _pop_observer()
        return False


def create_selective_checkpoint_contexts(policy_fn_or_list, allow_cache_entry_mutation=False):
    """torch.utils.checkpoint.create_selective_checkpoint_contexts: the (forward, recompute) contexts of a
    selective checkpoint, for `context_fn=functools.partial(create_selective_checkpoint_contexts, policy)`.
    `policy_fn(ctx, op, *args, **kwargs)` gets a `dg.ops` handle and the op's input tensors; a list of ops means
    MUST_SAVE those and PREFER_RECOMPUTE the rest."""
    if isinstance(policy_fn_or_list, list):
        for op in policy_fn_or_list:
            if not isinstance(op, (dg.ops.OpOverload, dg.ops.OpGroup)):
                extra = ("Please update the OpOverloadPacket to a specific OpOverload."
                         "For example, if you have `torch.ops.aten.mm`, change it to `torch.ops.aten.mm.default`."
                         if isinstance(op, dg.ops._AtenPacket) else "")
                raise ValueError(f"Expected op in `op_list` to be an OpOverload but got: {op} of type {type(op)}. "
                                 f"{extra}")
        ops = list(policy_fn_or_list)

        def policy_fn(ctx, op, *args, **kwargs):
            return CheckpointPolicy.MUST_SAVE if op in ops else CheckpointPolicy.PREFER_RECOMPUTE
    elif callable(policy_fn_or_list):
        policy_fn = policy_fn_or_list
    else:
        raise TypeError("policy_fn_or_list must be either a function or a list of ops.")
    storage = defaultdict(dict)
    caching = _CachingMode(policy_fn, storage)
    return caching, _CachedMode(storage, allow_cache_entry_mutation, caching.stats)


class policies:  # noqa: N801 -- a namespace
    """Presets (docs/recompute.md). Both save the outputs of the matmuls and of attention and recompute every
    other op (norms, rotary, SwiGLU, copies, elementwise: memory-bound, cheap to run again);
    `memory_bound_and_qkv` also recomputes the matmul issued under `recompute_tag("qkv")` (LLaMA's fused QKV
    projection)."""
    _compute_bound = None

    @staticmethod
    def _saved_ops():
        if policies._compute_bound is None:
            policies._compute_bound = frozenset(
                (dg.ops.matmul, dg.ops.addmm, dg.ops.scaled_dot_product_attention, dg.ops.rotary_attention))
        return policies._compute_bound

    @staticmethod
    def memory_bound(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in policies._saved_ops() else CheckpointPolicy.PREFER_RECOMPUTE

    @staticmethod
    def memory_bound_and_qkv(ctx, op, *args, **kwargs):
        if op in policies._saved_ops() and "qkv" not in ctx.tags:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE


# --- budget mode: recompute="auto" -----------------------------------------------------------------------------------
_OPTIONS = ("none", "memory_bound", "memory_bound_and_qkv", "full")
# A LLaMA block's attention half only (its MLP half plain): what the planner may give the last block.
_ATTENTION_OPTIONS = tuple("attention:" + m for m in _OPTIONS[1:])
_COMPUTE_BOUND_NAMES = ("matmul", "addmm", "scaled_dot_product_attention", "rotary_attention")


def _split_mode(mode):
    """"attention:<option>" -> (option, ("attention",)); "<option>" -> (option, None: the whole layer)."""
    if mode.startswith("attention:"):
        return mode[len("attention:"):], ("attention",)
    return mode, None


def apply_recompute(layers, modes):
    """Sets each layer's recompute mode: "none", "full", "memory_bound" or "memory_bound_and_qkv", or
    "attention:<one of those>" (a LLaMA block's attention half only: Block.recompute(parts=...))."""
    for layer, mode in zip(layers, modes):
        option, parts = _split_mode(mode)
        if option not in _OPTIONS:
            raise ValueError(f"[apply_recompute] unknown recompute mode {mode!r}; expected one of {_OPTIONS} "
                             f"or 'attention:<mode>'")
        kwargs = {} if parts is None else {"parts": parts}
        if option == "none":
            layer.recompute(False)
        elif option == "full":
            layer.recompute(**kwargs)
        else:
            layer.recompute(policy=getattr(policies, option), **kwargs)


class RecomputePlan:
    """What plan() chose: a mode per layer, with the predicted peak (bytes) and step time (s) and the figures
    they came from. `apply(layers)` sets it; `report(measured_peak, measured_time)` compares."""

    def __init__(self, modes, predicted_peak, predicted_time, budget, plain_peak, plain_time, saved, cost):
        self.modes, self.predicted_peak, self.predicted_time = list(modes), predicted_peak, predicted_time
        self.budget, self.plain_peak, self.plain_time = budget, plain_peak, plain_time
        self.saved_bytes_per_layer, self.recompute_s_per_layer = saved, cost
        self.measured_peak = None  # plan(verify=...): the chosen modes' peak, measured in one step

    def apply(self, layers):
        apply_recompute(layers, self.modes)
        return self

    def __str__(self):
        mib = 1 << 20
        counts = {m: self.modes.count(m) for m in dict.fromkeys(self.modes)}
        lines = [f"recompute plan (budget {self.budget / mib:.1f} MiB, plain peak {self.plain_peak / mib:.1f} MiB, "
                 f"plain step {self.plain_time * 1e3:.1f} ms): " + ", ".join(f"{n} x {m}" for m, n in counts.items()),
                 "  per layer: " + " ".join(self.modes),
                 "  option: saved MiB/layer, recompute ms/layer: " + "; ".join(
                     f"{m} {self.saved_bytes_per_layer[m] / mib:.2f}, {self.recompute_s_per_layer[m] * 1e3:.2f}"
                     for m in self.saved_bytes_per_layer),
                 f"  predicted peak {self.predicted_peak / mib:.1f} MiB"
                 + ("" if self.measured_peak is None else f" (measured {self.measured_peak / mib:.1f} MiB)")
                 + f", predicted step {self.predicted_time * 1e3:.1f} ms"]
        return "\n".join(lines)

    def report(self, measured_peak, measured_time):
        mib = 1 << 20
        return (f"recompute plan: peak predicted {self.predicted_peak / mib:.1f} MiB, "
                f"measured {measured_peak / mib:.1f} MiB ({measured_peak / self.predicted_peak - 1:+.1%}); "
                f"step predicted {self.predicted_time * 1e3:.1f} ms, "
                f"measured {measured_time * 1e3:.1f} ms ({measured_time / self.predicted_time - 1:+.1%}); "
                f"budget {self.budget / mib:.1f} MiB: {'kept' if measured_peak <= self.budget else 'EXCEEDED'}")


def _parse_budget(budget, plain_peak):
    if isinstance(budget, str) and budget.endswith("%"):
        return float(budget[:-1]) / 100.0 * plain_peak
    return float(budget)


class RecomputeCosts:
    """What measure() found: the plain step's peak (bytes above what was allocated before it) and time (s); per
    option, per layer: `held` (bytes a layer keeps after the forward), `saved` (bytes it stops keeping against
    plain), `recompute_s` and `recompute_flops` (what the backward runs again, from the profiler's per-op
    figures); `scratch`: the most kernel scratch the plain step held at once (bytes: the stream takes each Task's
    from the allocator, docs/ops.md "Scratch space is declared")."""

    def __init__(self, n_layers, plain_peak, plain_time, held, saved, recompute_s, recompute_flops, scratch=0):
        self.n_layers, self.plain_peak, self.plain_time = n_layers, plain_peak, plain_time
        self.held, self.saved, self.recompute_s, self.recompute_flops = held, saved, recompute_s, recompute_flops
        self.scratch = scratch

    def recomputed_flops(self, modes):
        return sum(self.recompute_flops[m] for m in modes)

    def memory_report(self, modes, names=None):
        """Per layer: what is saved and what is recomputed (bytes), as the memory report prints it."""
        mib = 1 << 20
        rows = [f"{'layer':12s} {'recompute':22s} {'saved MiB':>10s} {'recomputed MiB':>15s} {'recomputed GFLOP':>17s}"]
        for i, m in enumerate(modes):
            name = names[i] if names else f"blocks.{i}"
            rows.append(f"{name:12s} {m:22s} {self.held[m] / mib:10.2f} {self.saved[m] / mib:15.2f} "
                        f"{self.recompute_flops[m] / 1e9:17.3f}")
        return "\n".join(rows)


def _timed_step(model, step_fn):
    import gc
    import time
    for p in model.parameters():
        p.grad = None
    gc.collect()
    dg._C.synchronize()
    base = dg.memory_allocated()
    dg.reset_peak_memory_stats()
    t0 = time.perf_counter()
    step_fn()
    dg._C.synchronize()  # the backward's last Tasks too
    return dg.max_memory_allocated() - base, time.perf_counter() - t0


def measure(model, step_fn, layers=None, repeats=1):
    """The figures plan() decides from (RecomputeCosts). `step_fn()` runs one step's forward and backward (no
    optimizer step) and waits for it (loss.item()). Leaves every layer plain and the gradients unset."""
    import gc
    layers = list(model.blocks if layers is None else layers)
    n = len(layers)
    apply_recompute(layers, ["none"] * n)
    _timed_step(model, step_fn)  # warm-up
    plain = [_timed_step(model, step_fn) for _ in range(max(1, repeats))]
    scratch = dg.memory_stats().get("peak_bytes.scratch", 0)  # since the last step's reset: its largest
    plain_peak = min(p for p, _ in plain)
    plain_time = min(t for _, t in plain)
    for p in model.parameters():
        p.grad = None
    # bytes held after the forward, per option (forward only: the graph is dropped unused)
    _forward_only(step_fn)
    held_total = {}
    options = _OPTIONS + (_ATTENTION_OPTIONS if all(hasattr(layer, "attention") for layer in layers) else ())
    for option in options:
        apply_recompute(layers, [option] * n)
        gc.collect()
        dg._C.synchronize()
        base = dg.memory_allocated()
        out = _forward_only(step_fn)
        gc.collect()
        held_total[option] = dg.memory_allocated() - base
        del out
    saved = {m: max(0.0, (held_total["none"] - held_total[m]) / n) for m in options}
    held = {m: saved["full"] - saved[m] for m in options}
    # recomputed time and FLOPs per layer, from the profiler's per-op figures of one plain forward
    apply_recompute(layers, ["none"] * n)
    cost_s, cost_flops = _recompute_cost_per_layer(model, step_fn, layers)
    return RecomputeCosts(n, plain_peak, plain_time, held, saved, cost_s, cost_flops, scratch)


def plan(model, step_fn, budget, layers=None, repeats=1, costs=None, verify=3):
    """Budget mode (recompute="auto"): chooses per layer what to recompute so that the step's allocator peak
    stays under `budget` (bytes, or "60%" of the plain step's peak) at the least recomputed time. Returns a
    RecomputePlan; `plan.apply(model.blocks)` sets it.

    From measure(): the plain step's peak and time; for each option (memory_bound, memory_bound_and_qkv, full)
    the bytes a layer stops holding after the forward (the allocator, all layers set to it); from one profiled
    forward, the device time and FLOPs of the ops each option runs again (dygrad's profiler, per op).
    Predicted peak: the plain peak less what the layers before the one in backward save (the maximum over the
    backward); predicted time = plain time + the recomputed ops' time. The choice enumerates how many layers
    take each option (layers alike: the same cost each), the least time among those under the budget (or the
    least peak if none is).

    The sum is a model: where a recomputed half's own backward or its transients set the peak, it can be a few
    percent low. So the `verify` best choices (by the model) are run for one step each, in order, and the first
    whose measured peak is within the budget is taken (`plan.measured_peak`); if none is, the one of least
    measured peak. `verify=0` takes the model's choice unmeasured. The layers are left plain."""
    import itertools
    layers = list(model.blocks if layers is None else layers)
    n = len(layers)
    costs = costs or measure(model, step_fn, layers, repeats)
    plain_peak, plain_time, saved, cost = costs.plain_peak, costs.plain_time, costs.saved, costs.recompute_s
    budget = _parse_budget(budget, plain_peak)
    layer_bytes = saved["full"]  # what a layer holds plainly (a fully recomputed one keeps only its input)

    def attention_saved(mode):
        # what a layer's attention half stops holding: the part of it that stays reduced while the layer's MLP
        # half runs its backward (a layer without halves holds everything again)
        option = _split_mode(mode)[0]
        return 0.0 if option == "none" else saved.get("attention:" + option, 0.0)

    def predicted_peak(modes):
        # The backward runs the layers last to first; while layer i's MLP half runs its backward, the layers
        # after it are freed, that half holds all its activations again (recomputed or not), the layer's
        # attention half holds what its option keeps, and the layers before it hold what theirs keep. The
        # plain peak is the i = n-1 case with nothing saved. It includes the kernel scratch of the Task running
        # at it; a case below it may peak at another Task's, bounded by the step's largest (costs.scratch).
        def case(i):
            below = sum(saved[m] for m in modes[:i]) + attention_saved(modes[i]) + (n - 1 - i) * layer_bytes
            return plain_peak - below + (costs.scratch if below > 0 else 0)
        return max(case(i) for i in range(n))

    candidates = []
    # the last layer's backward comes first: recomputing its MLP half saves nothing at the peak, so that stays
    # plain; its attention half may be recomputed (its backward comes after the MLP half's)
    last_options = ("none",) + tuple(m for m in _ATTENTION_OPTIONS if m in saved)
    for counts in itertools.product(range(n), repeat=3):
        if sum(counts) > n - 1:
            continue
        for last in last_options:
            modes = ["full"] * counts[2] + ["memory_bound_and_qkv"] * counts[1] + ["memory_bound"] * counts[0]
            modes += ["none"] * (n - 1 - len(modes)) + [last]
            peak = predicted_peak(modes)
            t = plain_time + sum(cost[m] for m in modes)
            candidates.append(((peak > budget, t if peak <= budget else peak), modes, peak, t))
    candidates.sort(key=lambda c: c[0])
    chosen, measured = candidates[0], None
    tried = []
    for candidate in candidates[:max(0, verify)]:
        apply_recompute(layers, candidate[1])
        peak_measured, _ = _timed_step(model, step_fn)
        tried.append((peak_measured, candidate))
        if peak_measured <= budget:
            break
    if tried:
        measured, chosen = min(tried, key=lambda m: (m[0] > budget, 0 if m[0] <= budget else m[0]))
        apply_recompute(layers, ["none"] * n)
        for p in model.parameters():
            p.grad = None
    _, modes, peak, t = chosen
    result = RecomputePlan(modes, peak, t, budget, plain_peak, plain_time, saved, cost)
    result.costs = costs
    result.measured_peak = measured
    return result


class _ForwardOnly(Exception):
    pass


def _forward_only(step_fn):
    # Runs step_fn up to its backward: Tensor.backward raises, so the forward's graph (and what it holds) is live
    # at that point; returns the loss so the caller can read the allocator before dropping it.
    holder = []
    original = dg.Tensor.backward

    def stop(self, *args, **kwargs):
        holder.append(self)
        dg._C.synchronize()  # the stream has run the forward: what it freed is freed
        raise _ForwardOnly

    dg.Tensor.backward = stop
    try:
        step_fn()
    except _ForwardOnly:
        pass
    finally:
        dg.Tensor.backward = original
    return holder


def _recompute_cost_per_layer(model, step_fn, layers):
    import dygrad.profiler as prof_mod
    marks = []
    hooks = [layer.register_forward_pre_hook(lambda m, a, i=i: marks.append(("begin", i, prof_mod.now_ns())))
             for i, layer in enumerate(layers)]
    hooks += [layer.register_forward_hook(lambda m, a, o, i=i: marks.append(("end", i, prof_mod.now_ns())))
              for i, layer in enumerate(layers)]
    split = all(hasattr(layer, "attention") and hasattr(layer, "mlp") for layer in layers)
    if split:  # a LLaMA block: mark where its MLP half starts
        for i, layer in enumerate(layers):
            def mlp(*args, _i=i, _fn=layer.mlp, **kwargs):
                marks.append(("mid", _i, prof_mod.now_ns()))
                return _fn(*args, **kwargs)
            object.__setattr__(layer, "mlp", mlp)
    dg._C.synchronize()
    try:
        with prof_mod.profile(record_shapes=True) as prof:
            _forward_only(step_fn)
    finally:
        for h in hooks:
            h.remove()
        if split:
            for layer in layers:
                layer.__dict__.pop("mlp", None)
    result = prof.result
    spans = {}
    for kind, i, ts in marks:
        spans.setdefault(i, {})[kind] = ts
    options = _OPTIONS + (_ATTENTION_OPTIONS if split else ())
    cost = {m: 0.0 for m in options}
    flops = {m: 0.0 for m in options}
    for i, span in spans.items():
        b, e = span["begin"], span["end"]
        mid = span.get("mid", e + 1)
        events = [ev for ev in result.ops if b <= ev.host_begin_ns <= e and ev.ran]
        halves = [[ev for ev in events if ev.host_begin_ns < mid], [ev for ev in events if ev.host_begin_ns >= mid]]
        for h, part in enumerate(halves):
            attention = split and h == 0
            matmuls = [k for k, ev in enumerate(part) if ev.name == "matmul"]
            for k, ev in enumerate(part):
                sec, fl = ev.device_ns * 1e-9, ev.flops
                targets = []
                # each checkpoint's last matmul saves its inputs last: the recomputation skips it
                if not (matmuls and k == matmuls[-1]):
                    targets.append("full")
                if ev.name in _COMPUTE_BOUND_NAMES:
                    if h == 0 and matmuls and k == matmuls[0]:  # a LLaMA block's first matmul: its QKV projection
                        targets.append("memory_bound_and_qkv")
                else:
                    targets += ["memory_bound", "memory_bound_and_qkv"]
                for m in targets:
                    for key in ((m, "attention:" + m) if attention else (m,)):
                        cost[key] += sec
                        flops[key] += fl
    k = max(1, len(spans))
    return {m: v / k for m, v in cost.items()}, {m: v / k for m, v in flops.items()}
