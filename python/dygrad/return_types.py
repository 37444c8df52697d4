"""dygrad.return_types: the named tuples (values, indices) that ops return where torch returns torch.return_types.X,
so `isinstance(r, dygrad.return_types.sort)` works as torch's does. The types are made by the extension."""
from . import _C

max = type(_C.max(_C.zeros(1), 0))  # noqa: A001 (torch's names)
min = type(_C.min(_C.zeros(1), 0))  # noqa: A001
sort = type(_C.sort(_C.zeros(1)))
topk = type(_C.topk(_C.zeros(1), 1))

__all__ = ["max", "min", "sort", "topk"]
