"""torch.finfo and torch.iinfo: the numerical properties of dygrad's floating and integer dtypes, with torch's
attribute names, values and repr."""
from . import _C


class finfo:  # noqa: N801 (torch's name)
    """Machine limits of a floating dtype (the default dtype, float32, when none is given)."""

    # bits, eps, max, smallest normal, resolution (10 ** -decimal digits), for each floating dtype
    _TABLE = {
        "float64": (64, 2.0 ** -52, (2 - 2.0 ** -52) * 2.0 ** 1023, 2.0 ** -1022, 1e-15),
        "float32": (32, 2.0 ** -23, (2 - 2.0 ** -23) * 2.0 ** 127, 2.0 ** -126, 1e-06),
        "float16": (16, 2.0 ** -10, 65504.0, 2.0 ** -14, 0.001),
        "bfloat16": (16, 2.0 ** -7, (2 - 2.0 ** -7) * 2.0 ** 127, 2.0 ** -126, 0.01),
        # the float8 dtypes dygrad names but has no storage for yet (libraries read their limits at import)
        "float8_e4m3fn": (8, 2.0 ** -3, 448.0, 2.0 ** -6, 1.0),
        "float8_e5m2": (8, 2.0 ** -2, 57344.0, 2.0 ** -14, 1.0),
        "float8_e4m3fnuz": (8, 2.0 ** -3, 240.0, 2.0 ** -7, 1.0),
        "float8_e5m2fnuz": (8, 2.0 ** -3, 57344.0, 2.0 ** -15, 1.0),
        "float8_e8m0fnu": (8, 1.0, 2.0 ** 127, 2.0 ** -127, 1.0),
    }
    _COMPLEX_PARTS = {"complex64": "float32", "complex128": "float64"}  # a complex dtype's limits are its parts'

    def __init__(self, type=None):  # noqa: A002 (torch's argument name)
        name = _dtype_name(type if type is not None else _C.float32)
        name = self._COMPLEX_PARTS.get(name, name)
        if name not in self._TABLE:
            raise TypeError(f"torch.finfo() requires a floating point input type. Use torch.iinfo to handle "
                            f"'torch.finfo' (got {name})")
        self.bits, self.eps, self.max, self.smallest_normal, self.resolution = self._TABLE[name]
        self.min = -self.max if name != "float8_e8m0fnu" else self.smallest_normal  # e8m0 has no sign
        self.tiny = self.smallest_normal
        self.dtype = name

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})")

    def __eq__(self, other):
        return isinstance(other, finfo) and other.dtype == self.dtype

    __hash__ = object.__hash__


class iinfo:  # noqa: N801 (torch's name)
    """Machine limits of an integer dtype."""

    def __init__(self, type):  # noqa: A002 (torch's argument name)
        name = _dtype_name(type)
        if name == "bool" or not name.startswith(("int", "uint")):
            raise TypeError(f"torch.{name} is not supported by torch.iinfo")
        signed = name.startswith("int")
        self.bits = int(name.lstrip("uint"))
        self.min = -(1 << (self.bits - 1)) if signed else 0
        self.max = (1 << (self.bits - 1)) - 1 if signed else (1 << self.bits) - 1
        self.dtype = name

    def __repr__(self):
        return f"iinfo(min={float(self.min):g}, max={float(self.max):g}, dtype={self.dtype})"

    def __eq__(self, other):
        return isinstance(other, iinfo) and other.dtype == self.dtype

    __hash__ = object.__hash__


def _dtype_name(dtype):
    from ._not_provided import NotProvidedDtype
    if not isinstance(dtype, (_C.dtype, NotProvidedDtype)):
        raise TypeError(f"expected a dtype, got {type(dtype).__name__}")
    return str(dtype).rpartition(".")[2]
