"""torch functions composed of dygrad's ops in Python, as torch composes them (CompositeImplicitAutograd): the
stacking family, atleast_Nd and prod. Gradients flow through the ops they call."""
from . import _C


def _tensors(name, tensors):
    if isinstance(tensors, _C.Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{name}(): argument 'tensors' must be a tuple or list of Tensors, not "
                        f"{type(tensors).__name__}")
    if not tensors:
        raise RuntimeError(f"{name} expects a non-empty TensorList")
    return tensors


def _atleast(name, rank, shape_of, tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return tuple(_atleast(name, rank, shape_of, (t,)) for t in tensors[0])
    out = []
    for t in tensors:
        if not isinstance(t, _C.Tensor):
            raise TypeError(f"{name}(): expected a Tensor, got {type(t).__name__}")
        out.append(t if t.dim() >= rank else t.reshape(shape_of(tuple(t.shape))))
    return out[0] if len(out) == 1 else tuple(out)


def atleast_1d(*tensors):
    """Each tensor with at least one dimension (a 0-dim tensor becomes shape (1,)); a view where possible."""
    return _atleast("atleast_1d", 1, lambda s: (1,), tensors)


def atleast_2d(*tensors):
    """Each tensor with at least two dimensions: () -> (1, 1), (n,) -> (1, n)."""
    return _atleast("atleast_2d", 2, lambda s: (1,) + s if len(s) == 1 else (1, 1), tensors)


def atleast_3d(*tensors):
    """Each tensor with at least three dimensions: () -> (1, 1, 1), (n,) -> (1, n, 1), (m, n) -> (m, n, 1)."""
    return _atleast("atleast_3d", 3, lambda s: {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}[len(s)], tensors)


def hstack(tensors):
    """Concatenates horizontally: along dim 0 for 1-dim tensors, dim 1 otherwise (0-dim ones become (1,))."""
    parts = [atleast_1d(t) for t in _tensors("hstack", tensors)]
    return _C.cat(parts, 0 if parts[0].dim() == 1 else 1)


def vstack(tensors):
    """Concatenates vertically (dim 0) after atleast_2d."""
    return _C.cat([atleast_2d(t) for t in _tensors("vstack", tensors)], 0)


row_stack = vstack


def dstack(tensors):
    """Concatenates along the third dimension after atleast_3d."""
    return _C.cat([atleast_3d(t) for t in _tensors("dstack", tensors)], 2)


def column_stack(tensors):
    """Stacks 0- and 1-dim tensors as columns ((n,) -> (n, 1)) and concatenates along dim 1."""
    parts = [t.reshape(t.numel(), 1) if t.dim() <= 1 else t for t in _tensors("column_stack", tensors)]
    return _C.cat(parts, 1)


def prod(input, dim=None, keepdim=False, *, dtype=None):
    """The product of the elements, of all (prod(input, *, dtype)) or along one dim (prod(input, dim, keepdim,
    *, dtype)): the last entry of cumprod, so the dtype rules (integers and bool give int64) and the zero-safe
    gradient are cumprod's. An empty product is 1."""
    if not isinstance(input, _C.Tensor):
        raise TypeError(f"prod(): argument 'input' must be Tensor, not {type(input).__name__}")
    if dim is None:
        if keepdim:
            raise TypeError("prod(): keepdim needs a dim (prod(input, dim, keepdim=True))")
        input, dim = input.reshape(-1), 0
    elif not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"prod(): argument 'dim' must be int, not {type(dim).__name__}")
    rank = max(input.dim(), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"[prod] dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but "
                         f"got {dim})")
    running = _C.cumprod(input, dim, dtype=dtype)
    if running.dim() == 0:
        return running
    dim = dim % running.dim()
    length = running.shape[dim]
    if length == 0:
        shape = list(running.shape)
        shape[dim] = 1
        last = _C.ones(shape, dtype=running.dtype, device=running.device)
    else:
        last = running.narrow(dim, length - 1, 1)
    return last if keepdim else last.squeeze(dim)
