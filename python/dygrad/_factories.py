"""torch factories and pointwise functions composed of dygrad's ops in Python (issues 37, 41): eye, as_tensor,
asarray, normal, scalar_tensor, randint_like, addcmul/addcdiv (and their Tensor methods), isin, the default device
and the memory_format objects.

device= as torch's: an available device (cpu, test:N when the test device is on, docs/devices.md), torch's error for
a device type it does not know, and the default device (set_default_device, `with dygrad.device(d):`) for the
factories torch's DeviceContext gives it to (eye, as_tensor, asarray, scalar_tensor; not randint_like, which takes its
input's, nor normal). These factories build on the host, then copy to the device (_placed)."""
import numbers

import numpy as np

from . import _C
from ._probes import device as _device


class _TorchConstant:
    """A named torch constant object: prints as torch's (`torch.<name>`) and pickles by name."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return f"torch.{self._name}"

    def __reduce__(self):
        return self._name


class memory_format(_TorchConstant):  # noqa: N801 (torch's name)
    """A memory layout request (torch.contiguous_format ...). dygrad's dense tensors are row-major: every format is
    accepted where torch accepts one and gives a contiguous result (docs/pytorch-api.md)."""


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")


class layout(_TorchConstant):  # noqa: N801 (torch's name)
    """How a tensor's elements are stored: dygrad's tensors are all dense (strided); the sparse layouts are names
    libraries compare against, which no tensor has."""


strided = layout("strided")
sparse_coo = layout("sparse_coo")
sparse_csr = layout("sparse_csr")


def _layout(tensor):
    return strided


def _check_device(name, device):
    """For what lives in host memory only (UntypedStorage): the CPU, or None."""
    if device is not None and _device(_C._check_device(name, device)).type != "cpu":
        raise RuntimeError(f"[{name}] device {str(device)!r}: a {name} is host memory (the cpu device only)")


def _factory_device(name, device, default=None):
    """The device a factory builds on: device= (checked: torch's error for an unknown device type, a RuntimeError for
    one not available), else `default`, else the default device."""
    if device is None:
        return default if default is not None else get_default_device()
    return _device(_C._check_device(name, device))


def _placed(t, device, requires_grad=False, pin_memory=False):
    """t (built on the host, no history) on `device`, pinned with pin_memory=True (a CPU tensor only, as torch's),
    then requires_grad: the result is a leaf. Under `with device("meta")` the tensor is a meta tensor already."""
    if pin_memory:
        if device.type != "cpu":
            raise RuntimeError(f"only dense CPU tensors can be pinned, not {device} ones")
        t = t.pin_memory()
    if device.type != "meta" and str(t.device) != str(device):
        t = t.to(device)
    return t.requires_grad_(True) if requires_grad else t


def get_default_device():
    """The device factories create tensors on (torch's: per thread): "meta" inside `with torch.device("meta")`, else
    the one `with torch.device(d)` or set_default_device gave, else the CPU."""
    from ._probes import _default_devices
    return _default_devices[-1] if _default_devices else _device(_C._get_default_device())


def set_default_device(device):
    """This thread's default device of the factories that are given none (torch's; None: the CPU again). Unlike torch,
    which fails at the next factory, a device that is not available raises here."""
    _C._set_default_device("cpu" if device is None else device)


def get_default_dtype():
    """The dtype floating factories and Python floats take: float32 (dygrad's factories are fixed to it)."""
    return _C.float32


def set_default_dtype(d):
    """float32 is accepted (the default: nothing changes); a non-floating dtype raises TypeError as torch's; another
    floating dtype raises NotProvidedError: dygrad's factories cannot take a different default yet."""
    if not getattr(d, "is_floating_point", False):
        raise TypeError("only floating-point types are supported as the default type")
    if d != _C.float32:
        from ._not_provided import not_provided
        raise not_provided(f"torch.set_default_dtype({d})", "the default dtype is float32; pass dtype= to factories")


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False, out=None):
    """The n x m identity matrix (m defaults to n), float32 unless dtype is given."""
    if out is not None:
        raise TypeError("eye(): out= is not supported by dygrad")
    device = _factory_device("eye", device)
    m = n if m is None else m
    for name, v in (("n", n), ("m", m)):
        if not isinstance(v, numbers.Integral) or isinstance(v, bool):
            raise TypeError(f"eye(): argument '{name}' must be int, not {type(v).__name__}")
        if v < 0:
            raise RuntimeError(f"{name} must be greater or equal to 0, got {v}")
    rows, cols = _C.arange(n, device="cpu").reshape(n, 1), _C.arange(m, device="cpu").reshape(1, m)
    return _placed((rows == cols).to(dtype if dtype is not None else _C.float32), device, requires_grad, pin_memory)


def _shared_or_converted(data, dtype):
    """(tensor, whether it shares data's memory) for a tensor or NumPy array: a tensor of the dtype is itself, a
    NumPy array of a dtype dygrad has shares its buffer (from_numpy); anything else is converted (a copy)."""
    if isinstance(data, _C.Tensor):
        return (data, True) if dtype is None or data.dtype == dtype else (data.to(dtype), False)
    try:
        shared = _C.from_numpy(data)
    except (TypeError, ValueError, RuntimeError):
        return _C.tensor(data, dtype=dtype), False
    return (shared, True) if dtype is None or shared.dtype == dtype else (shared.to(dtype), False)


def _source_device(name, data, device):
    """Where as_tensor/asarray put `data`: device=, else a tensor's own device while the default device is the CPU (no
    copy, as torch without a default device), else the default device."""
    if device is None and isinstance(data, _C.Tensor) and _C._get_default_device() == "cpu":
        return _device(str(data.device))
    return _factory_device(name, device)


def as_tensor(data, dtype=None, device=None):
    """data as a tensor, sharing memory where it can: a tensor of the dtype on the device is itself, a NumPy array of a
    dtype dygrad has shares its buffer (from_numpy) on the CPU; anything else is copied."""
    device = _source_device("as_tensor", data, device)
    if isinstance(data, (_C.Tensor, np.ndarray)):
        result = _shared_or_converted(data, dtype)[0]
    else:
        result = _C.tensor(data, dtype=dtype, device="cpu")
    return _placed(result, device)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """obj as a tensor: shares memory with a tensor or NumPy array unless copy=True or a conversion is needed
    (copy=False then raises, as torch)."""
    device = _source_device("asarray", obj, device)
    from .storage import UntypedStorage, _tensor_of
    if isinstance(obj, UntypedStorage):  # its bytes read as dtype, sharing its memory
        obj, dtype = _tensor_of(obj, dtype), None
    if isinstance(obj, (_C.Tensor, np.ndarray)):
        result, shares = _shared_or_converted(obj, dtype)
        source = str(obj.device) if isinstance(obj, _C.Tensor) else "cpu"
        if device.type != "meta" and source != str(device):
            if copy is False:
                raise ValueError(f"can't alias tensor from device '{source}' to '{device}'.")
            return _placed(result, device, requires_grad)  # the copy between devices is the copy
        if copy is False and not shares:
            raise ValueError(f"asarray(): can't alias the input of dtype {obj.dtype} as {dtype} without a copy")
        if copy and shares:
            result = result.clone()
    else:
        if copy is False:
            raise ValueError("asarray(): can't alias a Python sequence (copy=False)")
        result = _C.tensor(obj, dtype=dtype, device="cpu")
    return _placed(result, device, requires_grad)


def scalar_tensor(s, *, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
    """A 0-dim tensor of value s, float32 unless dtype is given (torch: the default dtype, whatever s is)."""
    device = _factory_device("scalar_tensor", device)
    if isinstance(s, int) and not isinstance(s, bool) and not -(2 ** 63) <= s < 2 ** 64:  # torch's Scalar refuses it
        raise OverflowError("int too big to convert" if s > 0 else "can't convert negative int to unsigned")
    return _placed(_C.tensor(s, dtype=dtype if dtype is not None else _C.float32, device="cpu"), device, requires_grad,
                   pin_memory)


def randint_like(input, low=0, high=None, *, dtype=None, device=None, requires_grad=False, layout=None,  # noqa: A002
                 memory_format=None, generator=None):
    """Random integers in [low, high) of input's shape, dtype and device (unless given); randint_like(x, high) reads
    the bound as high, as torch's."""
    device = _factory_device("randint_like", device, default=_device(str(input.device)))
    if high is None:
        low, high = 0, low
    return _C.randint(low, high, tuple(input.shape), dtype=dtype if dtype is not None else input.dtype,
                      requires_grad=requires_grad, device=device)


class _Sampled:
    """torch's normal(mean, std) is differentiable with a zero gradient for tensor mean and std (the sample is
    not reparameterized): the same here, through an autograd Function."""

    _function = None

    @classmethod
    def apply(cls, value, *inputs):
        if cls._function is None:
            from .autograd import Function

            class NormalBackward(Function):
                @staticmethod
                def forward(ctx, value, *inputs):
                    ctx.shapes = [(tuple(t.shape), t.dtype, t.device) for t in inputs]
                    return value.clone()

                @staticmethod
                def backward(ctx, grad):
                    return (None,) + tuple(_C.zeros(shape, dtype=dtype, device=device)
                                           for shape, dtype, device in ctx.shapes)

            cls._function = NormalBackward
        return cls._function.apply(value, *inputs)


def normal(mean, std=1.0, size=None, *, generator=None, out=None, dtype=None, device=None, requires_grad=False):
    """Samples of N(mean, std): tensor mean and/or std (broadcast against each other; on their device), or float mean
    and std with a size (on device=, else the CPU: torch's normal does not take the default device). The numbers are
    dygrad's generator's (not torch's stream); generator= a dygrad.Generator seeds them (docs/rng.md)."""
    if out is not None:
        raise TypeError("normal(): out= is not supported by dygrad")
    device = _factory_device("normal", device, default=_device("cpu"))
    tensors = [t for t in (mean, std) if isinstance(t, _C.Tensor)]
    if tensors:
        if size is not None:
            raise TypeError("normal(): size is given only with a float mean and std")
        if isinstance(std, numbers.Number) and std < 0 or isinstance(std, _C.Tensor) and bool((std < 0).any()):
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        shape = np.broadcast_shapes(*(tuple(t.shape) for t in tensors))
        from .autograd import no_grad
        with no_grad():
            value = _C.randn(shape, dtype=tensors[0].dtype, device=tensors[0].device, generator=generator) * std + mean
        grad_inputs = [t for t in tensors if t.requires_grad]
        return _Sampled.apply(value, *grad_inputs) if grad_inputs else value
    if size is None:
        raise TypeError("normal(): with a float mean and std, size is required")
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    shape = (size,) if isinstance(size, int) else tuple(size)
    draws = _C.randn(shape, dtype=dtype if dtype is not None else _C.float32, device="cpu", generator=generator)
    result = draws * std + mean
    return _placed(result, device, requires_grad)


def _pointwise_check(name, input, tensor1, tensor2):  # noqa: A002
    for t in (input, tensor1, tensor2):
        if not isinstance(t, _C.Tensor):
            raise TypeError(f"{name}(): expected Tensors, got {type(t).__name__}")


def addcmul(input, tensor1, tensor2, *, value=1, out=None):  # noqa: A002
    """input + value * tensor1 * tensor2, evaluated as torch's kernel does: (value * tensor1) * tensor2, then
    added (broadcasting and promotion as the ops'; differentiable)."""
    if out is not None:
        raise TypeError("addcmul(): out= is not supported by dygrad")
    _pointwise_check("addcmul", input, tensor1, tensor2)
    return input + (tensor1 * value if value != 1 else tensor1) * tensor2


def addcdiv(input, tensor1, tensor2, *, value=1, out=None):  # noqa: A002
    """input + value * tensor1 / tensor2, evaluated as torch's kernel does: (value * tensor1) / tensor2, then
    added. Integer tensor1 and tensor2 raise, as torch."""
    if out is not None:
        raise TypeError("addcdiv(): out= is not supported by dygrad")
    _addcdiv_check("addcdiv", input, tensor1, tensor2)
    return input + (tensor1 * value if value != 1 else tensor1) / tensor2


def _addcdiv_check(name, input, tensor1, tensor2):  # noqa: A002
    _pointwise_check(name, input, tensor1, tensor2)
    if not tensor1.is_floating_point() and not tensor2.is_floating_point():
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a future  release addcdiv "
                           "will perform a true division of tensor1 and tensor2. The historic addcdiv behavior can "
                           "be implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
                           "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
                           "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), "
                           "for all dtypes.")


def _addcmul_(self, tensor1, tensor2, *, value=1):
    _pointwise_check("addcmul_", self, tensor1, tensor2)
    return self.add_((tensor1 * value if value != 1 else tensor1) * tensor2)


def _addcdiv_(self, tensor1, tensor2, *, value=1):
    _addcdiv_check("addcdiv_", self, tensor1, tensor2)
    return self.add_((tensor1 * value if value != 1 else tensor1) / tensor2)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element of `elements` is in `test_elements` (either may be a scalar): a boolean tensor of
    elements' shape. Compares in chunks, so memory stays bounded."""
    if not isinstance(elements, _C.Tensor) and not isinstance(test_elements, _C.Tensor):
        raise TypeError("isin(): at least one of elements and test_elements must be a Tensor")
    a = elements if isinstance(elements, _C.Tensor) else _C.tensor(elements, dtype=test_elements.dtype)
    b = (test_elements if isinstance(test_elements, _C.Tensor) else _C.tensor(test_elements, dtype=a.dtype)).reshape(-1)
    flat = a.reshape(-1)
    found = []
    chunk = max(1, (1 << 22) // max(1, b.numel()))  # at most ~4M comparisons at once
    for start in range(0, max(flat.numel(), 1), chunk):
        part = flat[start:start + chunk]
        found.append((part.reshape(-1, 1) == b.reshape(1, -1)).any(1) if b.numel() else
                     _C.zeros(part.numel(), dtype=_C.bool))
    result = _C.cat(found, 0).reshape(tuple(a.shape)) if found else _C.zeros(tuple(a.shape), dtype=_C.bool)
    return result.logical_not() if invert else result


def install():
    _C.Tensor.layout = property(_layout)
    _C.Tensor.addcmul = addcmul
    _C.Tensor.addcdiv = addcdiv
    _C.Tensor.addcmul_ = _addcmul_
    _C.Tensor.addcdiv_ = _addcdiv_


class _LegacyTensorType(type):
    """torch.LongTensor and its kin: a type whose instances are the tensors of its dtype (isinstance checks the
    dtype), and whose call builds one: from data (a sequence: torch.LongTensor([1, 2])), or uninitialized of a
    size (ints or a torch.Size: torch.FloatTensor(2, 3)). They are the CPU's types, as torch's: the default device
    does not move them, and device= names the CPU or raises torch's error."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, _C.Tensor) and obj.dtype == cls.dtype

    def __call__(cls, *args, device=None):
        requested = None if device is None else _device(_C._check_device(cls.__name__, device))
        if requested is not None and requested.type != "cpu":
            raise RuntimeError(f"legacy constructor expects device type: cpu but device type: {requested.type} was "
                               f"passed")
        if not args:
            return _C.empty((0,), dtype=cls.dtype, device="cpu")
        from ._size import Size
        if len(args) == 1 and not isinstance(args[0], (int, _C.Tensor, Size)) and not isinstance(args[0], bool):
            data = args[0]
            if isinstance(data, (tuple, list)) and not cls.dtype.is_floating_point and cls.dtype != _C.bool:
                data = np.asarray(data)
                if data.dtype.kind == "f":
                    data = np.trunc(data)  # torch.LongTensor([1.7]) is tensor([1])
            return _C.tensor(data, dtype=cls.dtype, device="cpu")
        if len(args) == 1 and isinstance(args[0], _C.Tensor):
            if args[0].dtype != cls.dtype:
                raise TypeError(f"expected {cls.__name__} (got {args[0].dtype})")
            return args[0]
        size = args[0] if len(args) == 1 and isinstance(args[0], Size) else args
        return _C.empty(tuple(int(s) for s in size), dtype=cls.dtype, device="cpu")


def _legacy(name, dtype):
    return _LegacyTensorType(name, (), {"dtype": dtype, "__module__": "torch"})


FloatTensor = _legacy("FloatTensor", _C.float32)
DoubleTensor = _legacy("DoubleTensor", _C.float64)
HalfTensor = _legacy("HalfTensor", _C.float16)
BFloat16Tensor = _legacy("BFloat16Tensor", _C.bfloat16)
LongTensor = _legacy("LongTensor", _C.int64)
IntTensor = _legacy("IntTensor", _C.int32)
ShortTensor = _legacy("ShortTensor", _C.int16)
CharTensor = _legacy("CharTensor", _C.int8)
ByteTensor = _legacy("ByteTensor", _C.uint8)
BoolTensor = _legacy("BoolTensor", _C.bool)
