"""torch.linalg's vector norm, bound to the C++ op (ops/norm.cpp): dg.linalg.vector_norm(x, ord=2, dim=None,
keepdim=False, *, dtype=None)."""
from . import _C

vector_norm = _C._linalg_vector_norm
