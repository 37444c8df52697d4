"""Host settings and probes a PyTorch CPU script reads, with torch's names: dygrad.device,
set/get_float32_matmul_precision, and dygrad.compile as a pass-through until dygrad has a JIT.
(get_num_threads/set_num_threads are the extension's; dygrad.cuda, dygrad.backends and dygrad.amp are
modules of their own.)"""
import functools
import warnings

_PRECISIONS = ("highest", "high", "medium")
_matmul_precision = "highest"


def set_float32_matmul_precision(precision):
    """Accepted as torch accepts it; dygrad's float32 GEMM is full float32 at every setting (no TF32 on CPU).
    An unknown value warns and changes nothing, as torch's."""
    global _matmul_precision
    if precision not in _PRECISIONS:
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      "set_float32_matmul_precision call has no effect.")
        return
    _matmul_precision = precision


def get_float32_matmul_precision():
    return _matmul_precision


class device(str):  # noqa: N801 -- torch's spelling
    """torch.device: 'cpu' (the only device dygrad has) or a name probed and not used, such as 'cuda'.
    A str, so tensor.device == dygrad.device('cpu') and .to(device) take it as they take 'cpu'."""

    def __new__(cls, type, index=None):  # noqa: A002 -- torch's argument name
        if isinstance(type, device):
            return type
        if not isinstance(type, str):
            raise TypeError(f"device() received an invalid combination of arguments - got ({type!r})")
        name, _, number = type.partition(":")
        if number:
            if index is not None:
                raise RuntimeError(f"type (string) must not include an index because index was passed explicitly: {type}")
            index = int(number)
        if name not in ("cpu", "cuda", "mps", "meta", "xpu"):
            raise RuntimeError(f"Expected one of cpu, cuda, mps, meta, xpu device type at start of device string: {type}")
        self = super().__new__(cls, name if index is None else f"{name}:{index}")
        self.type, self.index = name, index
        return self

    def __repr__(self):
        return f"device(type='{self.type}')" if self.index is None else f"device(type='{self.type}', index={self.index})"
