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


def _flatten_tensors(obj, out):
    if isinstance(obj, dg.Tensor):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            _flatten_tensors(item, out)
    elif isinstance(obj, dict):
        for item in obj.values():
            _flatten_tensors(item, out)
    return out


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

    # --- original forward -------------------------------------------------------------------------------------
    def pack(self, x):
        holder = _Holder()
        self.holders.append(weakref.ref(holder))
        if self.metadata_fn is not None:
            self.metadatas.append(self.metadata_fn(x))
        return holder

    def unpack(self, holder):
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
            with dg.autograd.graph.saved_tensors_hooks(pack, unpack), dg.enable_grad(), self.recompute_context_fn():
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
        if contexts:
            return contexts.pop()
        return context_fn()[1]

    frame = _Frame(function, args, kwargs, preserve_rng_state, recompute_context_fn,
                   _allowed_determinism_checks_to_fns[determinism_check], early_stop)
    with dg.autograd.graph.saved_tensors_hooks(frame.pack, frame.unpack), forward_context:
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
