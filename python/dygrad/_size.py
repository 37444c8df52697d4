"""dygrad.Size: the type of Tensor.shape, a tuple of ints printed as torch.Size is."""


class Size(tuple):
    __slots__ = ()

    def __repr__(self):
        return f"dygrad.Size({list(self)})"

    __str__ = __repr__

    def __getitem__(self, key):
        item = tuple.__getitem__(self, key)
        return Size(item) if isinstance(key, slice) else item

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(self, other))

    def __radd__(self, other):  # (1,) + size is a Size too, as torch's
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(other, self))

    def __mul__(self, count):
        result = tuple.__mul__(self, count)
        return result if result is NotImplemented else Size(result)

    __rmul__ = __mul__

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n
