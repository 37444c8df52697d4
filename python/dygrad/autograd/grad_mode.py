"""Grad mode switches, usable as context managers and as decorators (thread-local, as in torch)."""
import functools

from .. import _C

is_grad_enabled = _C.is_grad_enabled


class _GradModeBase:
    _mode = True

    def __enter__(self):
        self._previous = _C.is_grad_enabled()
        _C._set_grad_enabled(self._mode)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._previous)
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return func(*args, **kwargs)

        return wrapper


class no_grad(_GradModeBase):
    """Ops inside record no autograd history: `with dg.no_grad(): ...` or `@dg.no_grad()`."""

    _mode = False

    def __new__(cls, func=None):
        # Also usable bare, as `@dg.no_grad`.
        if callable(func):
            return cls()(func)
        return super().__new__(cls)

    def __init__(self, func=None):
        pass


class enable_grad(_GradModeBase):
    """Turns grad mode back on inside a no_grad region."""

    _mode = True

    def __new__(cls, func=None):
        if callable(func):
            return cls()(func)
        return super().__new__(cls)

    def __init__(self, func=None):
        pass


class set_grad_enabled(_GradModeBase):
    """Sets grad mode now (a function call) and restores it on exit when used with `with`."""

    def __init__(self, mode):
        self._previous = _C.is_grad_enabled()
        self._mode = bool(mode)
        _C._set_grad_enabled(self._mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._previous)
        return False
