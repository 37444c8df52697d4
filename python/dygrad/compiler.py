"""torch.compiler: the queries and decorators torch code calls around compilation. dygrad runs eagerly until its
JIT lands ("JIT (1 of 2)"): nothing is ever being compiled, so is_compiling() is False and the decorators return
what they decorate; dg.compile is the pass-through of docs/pytorch-api.md."""
from ._probes import compile  # noqa: F401

__all__ = ["compile", "is_compiling", "is_dynamo_compiling", "is_exporting", "disable", "allow_in_graph",
           "assume_constant_result", "reset", "list_backends", "substitute_in_graph", "set_stance"]


def is_compiling():
    return False


def is_dynamo_compiling():
    return False


def is_exporting():
    return False


def disable(fn=None, recursive=True, *, reason=None):
    """Marks fn as never compiled: dygrad never compiles, so fn itself (also as @disable() with arguments)."""
    if fn is None:
        return lambda f: f
    return fn


def allow_in_graph(fn):
    return fn


def assume_constant_result(fn):
    return fn


def substitute_in_graph(original_fn, *, can_constant_fold_through=False, skip_signature_check=False):
    return lambda fn: fn


def reset():
    """Clears compilation caches: dygrad keeps none yet."""


def list_backends(exclude_tags=("debug", "experimental")):
    return []


class set_stance:  # noqa: N801 (torch's name; a context manager and decorator)
    def __init__(self, stance="default", *, skip_guard_eval_unsafe=False, force_backend=None):
        self.stance = stance

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        return fn
