"""torch.compiler: the queries and decorators torch code calls around compilation, on dygrad.jit (docs/jit.md).
is_compiling() is True while dygrad.jit captures a function or runs its segments (so code that skips host checks
under torch.compile skips them here too); the decorators return what they decorate (a dispatcher-level capture sees
every op whatever Python function issued it)."""
from . import _C
from .jit import compile_ as compile  # noqa: F401

__all__ = ["compile", "is_compiling", "is_dynamo_compiling", "is_exporting", "disable", "allow_in_graph",
           "assume_constant_result", "reset", "list_backends", "substitute_in_graph", "set_stance"]


def is_compiling():
    return _C._jit_active()


def is_dynamo_compiling():
    return _C._jit_active()


def is_exporting():
    return False


def disable(fn=None, recursive=True, *, reason=None):
    """Returns fn itself (also as @disable() with arguments): a capture at the dispatcher records the ops fn issues
    like any others (docs/jit.md, "torch.compiler's decorators")."""
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
    """Clears compilation caches: each dygrad.jit function keeps its own (its .reset() forgets them)."""


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
