"""Collation as torch's default_collate (same rules: tensors and arrays stacked, numbers to 0-d-per-sample
tensors, mappings and sequences collated field by field, strings kept), built on NumPy: a batch is stacked
into one array and becomes a tensor with from_numpy, without a further copy.

The NumPy stage (`to_arrays`) is what a worker process computes and sends: it holds no dygrad tensor, so a
worker never hands tensors across processes; `materialize` turns it into tensors in the parent."""
import collections.abc
import re

import numpy as np

from ... import _C
from ..._C import Tensor

_STRING_DTYPES = re.compile(r"[SaUO]")
_ERROR = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


class TensorData:
    """A tensor in transit: its values as a NumPy array (and its dtype when NumPy has none, e.g. bfloat16)."""
    __slots__ = ("array", "dtype")

    def __init__(self, array, dtype=None):
        self.array, self.dtype = array, dtype

    def __reduce__(self):
        return (TensorData, (self.array, self.dtype))


def _contiguous(a):
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)  # (ascontiguousarray makes 0-d arrays 1-d)


def _tensor_array(t):
    t = t.detach()
    if t.dtype == _C.bfloat16:
        return _contiguous(t.float().numpy()), "bfloat16"
    return t.numpy(), None


def to_arrays(batch):
    """default_collate's rules, producing TensorData leaves (NumPy) instead of tensors."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        arrays = [_tensor_array(t) for t in batch]
        return TensorData(np.stack([a for a, _ in arrays]), arrays[0][1])
    if isinstance(elem, TensorData):
        return TensorData(np.stack([b.array for b in batch]), elem.dtype)
    if type(elem).__module__ == "numpy" and not isinstance(elem, (np.str_, np.bytes_)):
        if isinstance(elem, np.ndarray) or type(elem).__name__ == "memmap":
            if _STRING_DTYPES.search(elem.dtype.str) is not None:
                raise TypeError(_ERROR.format(elem.dtype))
            return TensorData(np.stack(batch))
        if elem.shape == ():  # a NumPy scalar
            return TensorData(np.asarray(batch))
    if isinstance(elem, bool):
        return TensorData(np.asarray(batch, dtype=np.bool_))
    if isinstance(elem, float):
        return TensorData(np.asarray(batch, dtype=np.float64))
    if isinstance(elem, int):
        return TensorData(np.asarray(batch, dtype=np.int64))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        try:
            return type(elem)({key: to_arrays([d[key] for d in batch]) for key in elem})
        except TypeError:
            return {key: to_arrays([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(to_arrays(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [to_arrays(samples) for samples in transposed]
        try:
            return type(elem)([to_arrays(samples) for samples in transposed])
        except TypeError:
            return [to_arrays(samples) for samples in transposed]
    raise TypeError(_ERROR.format(type(elem)))


def detach_tensors(obj):
    """A custom collate_fn's output made transferable: every dygrad tensor in it becomes TensorData."""
    if isinstance(obj, Tensor):
        return TensorData(*_tensor_array(obj))
    if isinstance(obj, dict):
        return type(obj)({k: detach_tensors(v) for k, v in obj.items()})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(detach_tensors(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(detach_tensors(v) for v in obj)
    return obj


def materialize(obj):
    """TensorData leaves -> tensors (from_numpy: the batch array becomes the tensor's storage)."""
    if isinstance(obj, TensorData):
        t = _C.from_numpy(_contiguous(obj.array))
        return t.to(getattr(_C, obj.dtype)) if obj.dtype else t
    if isinstance(obj, dict):
        return type(obj)({k: materialize(v) for k, v in obj.items()})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(materialize(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(materialize(v) for v in obj)
    return obj


def default_collate(batch):
    """torch.utils.data.default_collate: a list of samples -> a batch of tensors."""
    return materialize(to_arrays(batch))


def default_convert(data):
    """torch's default_convert (batch_size=None): NumPy arrays and scalars inside `data` become tensors."""
    if isinstance(data, np.ndarray) and _STRING_DTYPES.search(data.dtype.str) is None:
        return _C.from_numpy(_contiguous(data))
    if isinstance(data, np.generic) and not isinstance(data, (np.str_, np.bytes_)):
        return _C.tensor(data.item(), dtype=getattr(_C, str(data.dtype), None))
    if isinstance(data, collections.abc.Mapping):
        return type(data)({k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data
