"""dygrad.autograd.Function: custom ops written in Python, with torch's API (forward/backward static methods,
ctx.save_for_backward, needs_input_grad, mark_dirty, mark_non_differentiable, set_materialize_grads,
setup_context, once_differentiable).

`apply` runs forward under no_grad, then records one engine Node for the call (python/src/autograd.cpp,
`_function_record`): the C++ engine runs it like any built-in node, calling `ctx._run_backward` with the GIL
held, so a Function mixes with built-in ops in one graph, works with retain_graph, autograd.grad, hooks and
anomaly mode, and its backward's ops show in the profiler like any others. See docs/autograd.md.
"""
import functools
import inspect

from .. import _C
from .grad_mode import no_grad

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The `ctx` of a Function call: what forward leaves for backward."""

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, _C.Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument {len(self._to_save or ())} "
                                f"is of type {type(t).__name__}")
        self._to_save = tensors

    def save_for_forward(self, *tensors):
        self._saved_for_forward = tensors

    def mark_dirty(self, *args):
        self._dirty = args

    def mark_non_differentiable(self, *args):
        self._non_differentiable = args

    def set_materialize_grads(self, value):
        self._materialize_grads = bool(value)

    @property
    def saved_tensors(self):
        access = self.__dict__.get("_saved_access")
        if access is not None:
            return access.unpack()  # raises once the graph was freed (retain_graph=False)
        if self.__dict__.get("_recorded"):
            raise RuntimeError("saved_tensors: the saved tensors of a Function are readable only in its backward")
        return tuple(self.__dict__.get("_to_save") or ())

    # torch's name for the same thing
    @property
    def saved_variables(self):
        return self.saved_tensors

    def _run_backward(self, saved_access, *grads):
        """Called by the engine (C++) with one gradient per output (None where none arrived); returns one
        gradient (or None) per tensor input."""
        if self._materialize_grads:
            grads = tuple(_C.zeros(shape, dtype=dtype, device=device) if g is None else g
                          for g, (shape, dtype, device) in zip(grads, self._output_meta))
        self._saved_access = saved_access
        try:
            result = self._function_class.backward(self, *grads)
        finally:
            self._saved_access = None
        if not isinstance(result, tuple):
            result = (result,)
        name = self._function_class.__name__ + "Backward"
        expected = len(self._tensor_positions_mask)
        if len(result) < expected or any(g is not None for g in result[expected:]):
            raise RuntimeError(f"function {name} returned an incorrect number of gradients (expected {expected}, "
                               f"got {len(result)})")
        out = []
        for i, (is_tensor, g) in enumerate(zip(self._tensor_positions_mask, result)):
            if not is_tensor:
                if g is not None:
                    raise RuntimeError(f"function {name} returned a gradient different than None at position {i + 1}, "
                                       "but the corresponding forward input was not a Variable")
                continue
            if g is not None and not isinstance(g, _C.Tensor):
                raise TypeError(f"function {name} returned a {type(g).__name__} as the gradient at position {i + 1}; "
                                "expected a Tensor or None")
            out.append(g)
        return tuple(out)


def _setup_context_defined(cls):
    return cls.setup_context is not _SingleLevelFunction.setup_context


class _SingleLevelFunction:
    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    vjp = backward


class Function(_SingleLevelFunction):
    """Subclass it with static `forward(ctx, *args)` and `backward(ctx, *grads)` (or torch 2's `forward(*args)`
    plus `setup_context(ctx, inputs, output)`), and call `MyFunction.apply(*args)`."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is deprecated. Please use new-style "
                           "autograd function with static forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is deprecated.")

    generate_vmap_rule = False

    @classmethod
    def apply(cls, *args, **kwargs):
        setup_context = _setup_context_defined(cls)
        if setup_context:
            # torch binds forward's defaults and keywords into its positional arguments in this style only;
            # the old style passes keywords straight to forward (they get no gradient and no needs_input_grad).
            args, kwargs = _bind_arguments(cls, args, kwargs), {}
        ctx = FunctionCtx()
        ctx._to_save = None
        ctx._dirty = ()
        ctx._non_differentiable = ()
        ctx._materialize_grads = True
        ctx._function_class = cls
        is_tensor = tuple(isinstance(a, _C.Tensor) for a in args)
        # torch: requires_grad per argument whatever the grad mode; a node is recorded only under grad mode.
        ctx.needs_input_grad = tuple(t and a.requires_grad for a, t in zip(args, is_tensor))
        record = _C.is_grad_enabled() and any(ctx.needs_input_grad)
        ctx._tensor_positions_mask = is_tensor

        with no_grad():
            if setup_context:
                output = cls.forward(*args)
                cls.setup_context(ctx, args, output)
            else:
                output = cls.forward(ctx, *args, **kwargs)

        if not record:
            ctx._to_save = None
            return output

        single = not isinstance(output, tuple)
        outputs = (output,) if single else output
        inputs = [a for a, t in zip(args, is_tensor) if t]
        input_ids = {id(a) for a in inputs}
        dirty_ids = {id(t) for t in ctx._dirty}
        non_diff_ids = {id(t) for t in ctx._non_differentiable}
        output_ids = {id(o) for o in outputs}
        if not dirty_ids <= output_ids:
            raise RuntimeError("Some elements marked as dirty during the forward method were not returned as output. "
                               "The inputs that are modified inplace must all be outputs of the Function.")
        recorded = []
        wrapped = []
        for o in outputs:
            if not isinstance(o, _C.Tensor):
                recorded.append(None)
                wrapped.append(o)
                continue
            if id(o) in input_ids and id(o) not in dirty_ids:
                o = o.detach()  # an input returned as is: a new tensor sharing its data gets the history (torch: a view)
            wrapped.append(o)
            recorded.append(None if id(o) in non_diff_ids or not o.is_floating_point() else o)
        ctx._output_meta = tuple((tuple(o.shape), o.dtype, None if o.is_meta else o.device) if isinstance(o, _C.Tensor)
                                 else ((), _C.float32, None) for o in wrapped)
        to_save = ctx._to_save or ()
        ctx._to_save = None  # the node keeps them (and frees them after backward), not the ctx
        _C._function_record(ctx, cls.__name__ + "Backward", tuple(inputs), tuple(recorded), tuple(to_save),
                            tuple(ctx._dirty))
        ctx._recorded = True
        return wrapped[0] if single else tuple(wrapped)


def _bind_arguments(cls, args, kwargs):
    bound = inspect.signature(cls.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple(bound.args)


class _OnceDifferentiableError(Function):
    """Wraps the gradients of a once_differentiable backward under create_graph: differentiating them raises."""

    @staticmethod
    def forward(ctx, *grads):
        return tuple(g.detach() if isinstance(g, _C.Tensor) else g for g in grads)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")


def once_differentiable(fn):
    """Marks a Function's backward as not differentiable: it runs under no_grad, and its gradients, if the
    caller asked for a graph (create_graph=True), raise when differentiated."""

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            outputs = fn(ctx, *args)
        if not _C.is_grad_enabled():
            return outputs
        requires_grad = any(isinstance(a, _C.Tensor) and a.requires_grad for a in args)
        if not requires_grad:
            return outputs
        single = not isinstance(outputs, tuple)
        items = (outputs,) if single else outputs
        tensors = [o for o in items if isinstance(o, _C.Tensor)]
        if not tensors:
            return outputs
        guarded = _OnceDifferentiableError.apply(*[a for a in args if isinstance(a, _C.Tensor) and a.requires_grad],
                                                 *tensors)
        guarded = guarded if isinstance(guarded, tuple) else (guarded,)
        replaced = iter(guarded[len(guarded) - len(tensors):])
        items = tuple(next(replaced) if isinstance(o, _C.Tensor) else o for o in items)
        return items[0] if single else items

    return wrapper
