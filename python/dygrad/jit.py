"""torch.jit: what eager code queries and decorates with. dygrad has no TorchScript: is_tracing() and
is_scripting() are False (nothing is ever traced or scripted), ignore/unused/export return what they decorate,
and script/trace/save/load raise the not-provided error naming what was asked. "JIT (1 of 2)" gives dygrad its
own capture, which this module will expose."""

__all__ = ["is_tracing", "is_scripting", "ignore", "unused", "export", "script", "trace", "annotate", "Final",
           "save", "load", "ScriptModule"]


class _NotProvided(RuntimeError):
    pass


def _not_provided(name):
    return _NotProvided(f"torch.jit.{name} is not provided by dygrad: it has no TorchScript (dygrad runs the "
                        f"model eagerly; see docs/pytorch-api.md)")


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


from typing import Final  # noqa: E402,F401  (torch.jit.Final[int]: only TorchScript reads it)


class ScriptModule:
    def __init__(self, *args, **kwargs):
        raise _not_provided("ScriptModule")


def script(obj=None, *args, **kwargs):
    raise _not_provided("script")


def trace(func, *args, **kwargs):
    raise _not_provided("trace")


def save(m, f, *args, **kwargs):
    raise _not_provided("save")


def load(f, *args, **kwargs):
    raise _not_provided("load")
