"""Runtime flags: dygrad.set_context / get_context (deterministic, synchronize, num_threads, inline_small_ops)."""
from dataclasses import dataclass

from . import _C


@dataclass(frozen=True)
class Context:
    deterministic: bool = False  # bitwise-identical results across runs and thread counts
    synchronize: bool = False  # run each op inline on the calling thread (errors raised at the call)
    num_threads: int = 0  # intra-op pool size, the stream worker included
    inline_small_ops: bool = True  # tiny ops run on the calling thread when the stream is idle (docs/stream.md)


def get_context():
    """The current flags, as a Context."""
    deterministic, synchronize, num_threads = _C._get_context()
    return Context(deterministic, synchronize, num_threads, _C._inline_small_ops())


def set_context(context=None, *, deterministic=None, synchronize=None, num_threads=None, inline_small_ops=None):
    """Changes the flags given (a Context, or keywords); the others keep their values."""
    current = get_context() if context is None else context
    if not isinstance(current, Context):
        raise TypeError(f"[set_context] expected a dygrad.Context, got {type(current).__name__}")
    values = {
        "deterministic": current.deterministic if deterministic is None else deterministic,
        "synchronize": current.synchronize if synchronize is None else synchronize,
        "num_threads": current.num_threads if num_threads is None else num_threads,
        "inline_small_ops": current.inline_small_ops if inline_small_ops is None else inline_small_ops,
    }
    for name in ("deterministic", "synchronize", "inline_small_ops"):
        if not isinstance(values[name], bool):
            raise TypeError(f"[set_context] {name} must be bool, not {type(values[name]).__name__}")
    n = values["num_threads"]
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"[set_context] num_threads must be int, not {type(n).__name__}")
    if n < 0:
        raise ValueError(f"[set_context] num_threads must be positive (got {n})")
    # 0 keeps the pool as it is (resizing drains the stream and restarts the helper threads).
    _C._set_context(values["deterministic"], values["synchronize"], 0 if n == _C._get_context()[2] else n)
    _C._set_inline_small_ops(values["inline_small_ops"])


_warn_only = False


def use_deterministic_algorithms(mode, *, warn_only=False):
    """torch.use_deterministic_algorithms: dygrad's deterministic mode (set_context(deterministic=mode)), under which
    every op is bitwise reproducible across runs and thread counts, so no op raises or warns for being
    nondeterministic; warn_only is recorded for is_deterministic_algorithms_warn_only_enabled()."""
    global _warn_only
    if not isinstance(mode, bool):
        raise TypeError(f"use_deterministic_algorithms(): argument 'mode' (position 1) must be bool, not "
                        f"{type(mode).__name__}")
    if not isinstance(warn_only, bool):
        raise TypeError(f"use_deterministic_algorithms(): argument 'warn_only' must be bool, not "
                        f"{type(warn_only).__name__}")
    set_context(deterministic=mode)
    _warn_only = warn_only


def are_deterministic_algorithms_enabled():
    return get_context().deterministic


def is_deterministic_algorithms_warn_only_enabled():
    return _warn_only
