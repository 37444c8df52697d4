"""Tensor methods written in Python: the ones no hot path calls (copying, pickling support)."""
from . import _C


def _deepcopy(self, memo):
    if id(self) in memo:
        return memo[id(self)]
    data = self.detach().clone()
    if type(self) is _C.Tensor:
        copy = data.requires_grad_(self.requires_grad) if self.is_floating_point() else data
    else:  # a subclass such as nn.Parameter keeps its class
        copy = _C.Tensor._make_subclass(type(self), data, self.requires_grad)
        copy.__dict__.update({k: v for k, v in getattr(self, "__dict__", {}).items()})
    if self.grad is not None:
        copy.grad = self.grad.detach().clone()
    memo[id(self)] = copy
    return copy


def _reduce_ex(self, protocol):
    # Pickled through NumPy (a copy of the data); autograd history is not kept, requires_grad is, and so is the
    # device (a device's tensor is pickled from its host copy and unpickled onto its device, as torch's).
    from . import _rebuild_tensor

    host = self.detach() if self.is_cpu else self.detach().cpu()
    # NumPy has no bfloat16 or float8: those travel as float32, which holds each of their values exactly.
    widened = self.dtype in (_C.bfloat16, _C.float8_e4m3fn, _C.float8_e5m2)
    array = host.float().numpy() if widened else host.contiguous().numpy().copy()
    if self.is_cpu:
        return (_rebuild_tensor, (array, str(self.dtype), self.requires_grad))
    return (_rebuild_tensor, (array, str(self.dtype), self.requires_grad, str(self.device)))


def _iter(self):
    # Iterating a tensor walks its first dimension, as torch does: views from one unbind node, so that
    # `q, k, v = qkv` has one backward (a single stack) rather than one select backward per piece.
    if self.dim() == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(_C.unbind(self, 0))


_TYPE_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
               "bfloat16": "BFloat16Tensor", "int64": "LongTensor", "int32": "IntTensor", "int16": "ShortTensor",
               "int8": "CharTensor", "uint8": "ByteTensor", "bool": "BoolTensor", "complex64": "ComplexFloatTensor",
               "complex128": "ComplexDoubleTensor", "uint16": "UInt16Tensor", "uint32": "UInt32Tensor",
               "uint64": "UInt64Tensor", "float8_e4m3fn": "Float8_e4m3fnTensor", "float8_e5m2": "Float8_e5m2Tensor"}
# The module Tensor.type() names: "dygrad", or "torch" once dygrad.as_torch's hook is installed, so that a script
# comparing x.type() == 'torch.FloatTensor' branches as under torch.
TYPE_MODULE = "dygrad"


def _type(self, dtype=None, non_blocking=False, **kwargs):
    """Tensor.type(): the type name ('dygrad.FloatTensor'; 'torch.FloatTensor' under dygrad.as_torch);
    Tensor.type(dtype, a legacy type such as FloatTensor, or a name 'torch.FloatTensor' / 'dygrad.FloatTensor'):
    the cast, self itself when the dtype is already that (torch's)."""
    if dtype is None:
        return f"{TYPE_MODULE}.{_TYPE_NAMES.get(str(self.dtype).split('.')[-1], 'Tensor')}"
    if isinstance(dtype, str):
        module, _, name = dtype.rpartition(".")
        if module in ("torch.cuda", "dygrad.cuda"):
            raise RuntimeError(f"[type] {dtype}: dygrad was built without the cuda backend "
                               "(dygrad.cuda.is_available() is False)")
        matches = [d for d, n in _TYPE_NAMES.items() if n == name] if module in ("torch", "dygrad") else []
        if not matches:
            raise ValueError(f"invalid type: '{dtype}'")
        dtype = getattr(_C, matches[0])
    elif isinstance(dtype, type) and isinstance(getattr(dtype, "dtype", None), _C.dtype):
        dtype = dtype.dtype  # a legacy type: FloatTensor, LongTensor, ...
    return self.to(dtype, non_blocking=non_blocking)


def _new_tensor(self, data, *, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
    # A copy of data with self's dtype and device unless dtype= / device= are given (torch.Tensor.new_tensor).
    dtype = dtype if dtype is not None else self.dtype
    if device is not None:
        device = _C._check_device("new_tensor", device)
    elif not self.is_meta:  # (a meta tensor's copy is made as the default device says)
        device = str(self.device)
    if isinstance(data, _C.Tensor):
        out = data.detach()
        if device is not None and str(out.device) != device:
            out = out.to(device)  # the copy between devices is the copy
            out = out.to(dtype)
        else:
            out = out.to(dtype, copy=True)
    else:
        out = _C.tensor(data, dtype=dtype, device=device)
    if pin_memory:
        if out.device.type != "cpu":
            raise RuntimeError(f"only dense CPU tensors can be pinned, not {out.device} ones")
        out = out.pin_memory()
    return out.requires_grad_(True) if requires_grad else out


def _cuda(self, device=None, non_blocking=False, memory_format=None):
    from . import cuda
    if not cuda._built():
        raise RuntimeError("[cuda] dygrad was built without the cuda backend (dygrad.cuda.is_available() is False)")
    return self.to(cuda._device(device), non_blocking=non_blocking)


def _register_post_accumulate_grad_hook(self, hook):
    """hook(tensor) -> None, called after backward has accumulated this leaf's gradient into .grad."""
    from .utils.hooks import RemovableHandle

    class _Handle(RemovableHandle):  # the hook lives in the tensor's C++ autograd data, not in a dict
        def __init__(self):
            self.id = hook_id

        def remove(self):
            _C._remove_post_accumulate_grad_hook(tensor, hook_id)

    tensor = self
    hook_id = _C._register_post_accumulate_grad_hook(self, hook)
    return _Handle()


def _format(self, format_spec):
    """format(t, spec) as torch's: a 0-dim tensor formats its value (f"{loss:.4f}"), any other tensor as object
    does (its str() for an empty spec, else TypeError)."""
    if self.dim() == 0 and type(self) is _C.Tensor:
        return self.item().__format__(format_spec)
    return object.__format__(self, format_spec)


def _part(view):
    """Tensor.real / Tensor.imag: views of a complex tensor's parts (writes go through), assignable as torch's."""
    def get(self):
        return view(self)

    def set(self, value):
        view(self).copy_(value if isinstance(value, _C.Tensor) else _C.tensor(value))
    return property(get, set, doc=f"{view.__name__} part (a view)")


def install():
    _C.Tensor.real = _part(_C.real)
    _C.Tensor.imag = _part(_C.imag)
    _C.Tensor.__format__ = _format
    _C.Tensor.__deepcopy__ = _deepcopy
    _C.Tensor.__reduce_ex__ = _reduce_ex
    _C.Tensor.__iter__ = _iter
    _C.Tensor.type = _type
    _C.Tensor.new_tensor = _new_tensor
    _C.Tensor.cuda = _cuda
    _C.Tensor.register_post_accumulate_grad_hook = _register_post_accumulate_grad_hook
