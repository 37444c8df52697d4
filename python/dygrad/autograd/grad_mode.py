"""Grad mode switches (no_grad, enable_grad, set_grad_enabled, inference_mode), usable as context managers
and as decorators, thread-local as in torch."""
import functools
import inspect
import threading

from .. import _C

is_grad_enabled = _C.is_grad_enabled

_inference = threading.local()


def is_inference_mode_enabled():
    """True inside `dg.inference_mode()` (torch.is_inference_mode_enabled)."""
    return getattr(_inference, "enabled", False)


class _DecoratorContextManager:
    """A context manager that also decorates a function (or a generator function): each call runs inside a
    fresh copy of the manager (`clone`), as torch's."""

    def __call__(self, func):
        if inspect.isclass(func):
            raise RuntimeError("Decorating classes is deprecated and will be disabled in future versions. You should "
                               "only decorate functions or methods.")
        if inspect.isgeneratorfunction(func):
            @functools.wraps(func)
            def generator_wrapper(*args, **kwargs):
                generator = func(*args, **kwargs)
                with self.clone():
                    response = generator.send(None)
                while True:
                    try:
                        request = yield response
                    except GeneratorExit:
                        with self.clone():
                            generator.close()
                        raise
                    except BaseException as error:  # noqa: BLE001 -- forwarded to the generator
                        with self.clone():
                            response = generator.throw(error)
                    else:
                        try:
                            with self.clone():
                                response = generator.send(request)
                        except StopIteration as stop:
                            return stop.value

            return generator_wrapper

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self.clone():
                return func(*args, **kwargs)

        return wrapper

    def clone(self):
        return self.__class__()


class _GradModeBase(_DecoratorContextManager):
    _mode = True

    def __new__(cls, orig_func=None):
        # Also usable bare, as `@dg.no_grad` (torch accepts it too).
        if orig_func is not None and callable(orig_func):
            return cls()(orig_func)
        return super().__new__(cls)

    def __init__(self, orig_func=None):
        pass

    def __enter__(self):
        self._previous = _C.is_grad_enabled()
        _C._set_grad_enabled(self._mode)
        return None

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._previous)
        return False


class no_grad(_GradModeBase):  # noqa: N801 -- torch's spelling
    """Ops inside record no autograd history: `with dg.no_grad(): ...`, `@dg.no_grad()` or `@dg.no_grad`."""

    _mode = False


class enable_grad(_GradModeBase):  # noqa: N801
    """Turns grad mode back on inside a no_grad region (also as a decorator)."""

    _mode = True


class set_grad_enabled(_DecoratorContextManager):  # noqa: N801
    """Sets grad mode now (so a plain call works) and restores the previous mode on exit when used with `with`.
    As a decorator (`@dg.set_grad_enabled(False)`), the mode is restored at decoration time and set around
    each call instead, as torch does."""

    def __init__(self, mode):
        self.prev = _C.is_grad_enabled()
        self.mode = bool(mode)
        _C._set_grad_enabled(self.mode)

    def __call__(self, orig_func):
        _C._set_grad_enabled(self.prev)
        return super().__call__(orig_func)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)
        return False

    def clone(self):
        return self.__class__(self.mode)


class inference_mode(_DecoratorContextManager):  # noqa: N801
    """torch.inference_mode(mode=True): no autograd history is recorded inside (grad mode off), and
    is_inference_mode_enabled() is True. inference_mode(False) turns grad mode on, as torch's does.
    Difference from torch: dygrad does not mark tensors made inside as inference tensors (there is no
    Tensor.is_inference() and no error for saving them for backward later); see docs/autograd.md."""

    def __new__(cls, mode=True):
        if isinstance(mode, bool):
            return super().__new__(cls)
        return cls()(mode)  # bare decorator: @dg.inference_mode

    def __init__(self, mode=True):
        self.mode = mode

    def __enter__(self):
        self._previous = (_C.is_grad_enabled(), is_inference_mode_enabled())
        _inference.enabled = self.mode
        _C._set_grad_enabled(not self.mode)
        return None

    def __exit__(self, *exc):
        grad, inference = self._previous
        _C._set_grad_enabled(grad)
        _inference.enabled = inference
        return False

    def clone(self):
        return self.__class__(self.mode)
