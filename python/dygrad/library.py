"""torch.library's Python custom operators, run eagerly (issue 41): `@custom_op("ns::name", mutates_args=...)`
makes a callable operator that is also reachable as `dg.ops.ns.name` (torch.ops.ns.name under as_torch);
register_autograd gives it a gradient (an autograd Function around it), register_fake records the shape
function (dygrad runs the real one eagerly; the JIT will use the fake one). Without a registered formula, a
backward through it raises as torch's does."""
import inspect

from . import _C

__all__ = ["custom_op", "register_fake", "register_autograd", "register_kernel", "CustomOpDef", "opcheck"]

_OPS = {}  # "ns::name" -> CustomOpDef


def _split(qualname):
    ns, sep, name = qualname.partition("::")
    if not sep or not ns or not name or "." in name:
        raise ValueError(f"expected a name of the form 'namespace::name', got {qualname!r}")
    return ns, name


class CustomOpDef:
    """A custom operator: calling it runs its function (through an autograd Function when a formula is
    registered and an input requires grad)."""

    def __init__(self, qualname, fn, mutates_args):
        self._namespace, self._name = _split(qualname)
        self._qualname = qualname
        self._fn = fn
        self._mutates_args = mutates_args
        self._fake = None
        self._backward = None
        self._setup_context = None
        self._function = None
        self.__name__ = self._name
        self.__doc__ = fn.__doc__
        self._signature = inspect.signature(fn)

    def __repr__(self):
        return f"<CustomOpDef({self._qualname})>"

    def register_fake(self, fn=None, /):
        def register(f):
            self._fake = f
            return f
        return register(fn) if fn is not None else register

    def register_kernel(self, device_types, fn=None, /):
        """A device-specific implementation: the CPU's replaces the function; others are kept for their device."""
        def register(f):
            types = [device_types] if isinstance(device_types, str) or device_types is None else list(device_types)
            if None in types or "cpu" in types:
                self._fn = f
            return f
        return register(fn) if fn is not None else register

    def register_autograd(self, backward, /, *, setup_context=None):
        self._backward, self._setup_context, self._function = backward, setup_context, None

    def _autograd_function(self):
        if self._function is None:
            from .autograd import Function
            op = self

            class Generated(Function):
                @staticmethod
                def forward(ctx, *args):
                    from .autograd import no_grad
                    with no_grad():
                        output = op._fn(*args)
                    if op._setup_context is not None:
                        op._setup_context(ctx, args, output)
                    return output

                @staticmethod
                def backward(ctx, *grads):
                    if op._backward is None:
                        raise RuntimeError(f"Trying to backward through {op._namespace}.{op._name}.default but no "
                                           f"autograd formula was registered. Please use register_autograd to add "
                                           f"one.")
                    result = op._backward(ctx, *grads)
                    return result if isinstance(result, tuple) else (result,)

            Generated.__name__ = f"GeneratedBackwardFor_{self._namespace}_{self._name}_default"
            self._function = Generated
        return self._function

    def __call__(self, *args, **kwargs):
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = list(bound.arguments.values())
        needs_grad = _C.is_grad_enabled() and any(isinstance(v, _C.Tensor) and v.requires_grad for v in values)
        if not needs_grad:
            return self._fn(*values)
        return self._autograd_function().apply(*values)


def custom_op(name, fn=None, /, *, mutates_args, device_types=None, schema=None):
    """Makes fn a custom operator named "namespace::name" (a decorator when fn is not given)."""
    def register(f):
        op = CustomOpDef(name, f, mutates_args)
        _OPS[name] = op
        return op
    return register(fn) if fn is not None else register


def _op(target):
    if isinstance(target, CustomOpDef):
        return target
    if target not in _OPS:
        raise RuntimeError(f"{target!r} is not a custom operator registered with dygrad.library.custom_op")
    return _OPS[target]


def register_fake(op, fn=None, /, *, lib=None, _stacklevel=1):
    """register_fake("ns::name")(fn): the op's shape function."""
    return _op(op).register_fake(fn)


def register_autograd(op, backward, /, *, setup_context=None, lib=None):
    _op(op).register_autograd(backward, setup_context=setup_context)


def register_kernel(op, device_types, fn=None, /, *, lib=None):
    return _op(op).register_kernel(device_types, fn)


def opcheck(op, args, kwargs=None, *, test_utils=None, raise_exception=True):
    """torch.library.opcheck: dygrad checks that the op runs and that its fake function (when registered) gives
    outputs of the same shapes and dtypes."""
    op = _op(op)
    kwargs = kwargs or {}
    real = op(*args, **kwargs)
    result = {"test_schema": "SUCCESS", "test_autograd_registration": "SUCCESS", "test_faketensor": "SUCCESS"}
    if op._fake is not None:
        fake = op._fake(*args, **kwargs)
        reals = real if isinstance(real, (tuple, list)) else (real,)
        fakes = fake if isinstance(fake, (tuple, list)) else (fake,)
        for r, f in zip(reals, fakes):
            if tuple(r.shape) != tuple(f.shape) or r.dtype != f.dtype:
                message = f"{op._qualname}: the fake function gives {tuple(f.shape)} {f.dtype}, the op " \
                          f"{tuple(r.shape)} {r.dtype}"
                if raise_exception:
                    raise AssertionError(message)
                result["test_faketensor"] = message
    return result


class _Namespace:
    """dg.ops.<namespace>: the custom operators of one namespace, by name (`.default` is the op itself)."""

    def __init__(self, ns):
        self._ns = ns

    def __getattr__(self, name):
        op = _OPS.get(f"{self._ns}::{name}")
        if op is None:
            raise AttributeError(f"'_OpNamespace' '{self._ns}' object has no attribute '{name}'")
        return op


def namespace(ns):
    """The namespace object of `ns` when some custom op lives in it, else None."""
    return _Namespace(ns) if any(k.split("::")[0] == ns for k in _OPS) else None
