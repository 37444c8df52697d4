"""nn.Parameter: a Tensor subclass that a Module registers as a parameter (a leaf that requires grad)."""
from .. import _C
from .._C import Tensor


class Parameter(Tensor):
    """A leaf tensor sharing `data`'s storage, registered by Module.__setattr__.

    Parameter(data=None, requires_grad=True), as torch.nn.Parameter.
    """

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = _C.empty((0,))
        return Tensor._make_subclass(cls, data, requires_grad)

    def __init__(self, data=None, requires_grad=True):  # state lives in the C++ tensor
        pass

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, proto):
        return (Parameter, (self.detach(), self.requires_grad))


class Buffer(Tensor):
    """A tensor to register as a module's buffer on assignment (torch.nn.Buffer): `self.inv_freq =
    nn.Buffer(t, persistent=False)` registers a buffer that state_dict leaves out. It shares data's storage, as
    detach() does, and keeps its requires_grad."""

    def __new__(cls, data=None, *, persistent=True):
        if data is None:
            data = _C.empty((0,))
        t = Tensor._make_subclass(cls, data.detach(), data.requires_grad)
        t.persistent = persistent
        return t

    def __init__(self, data=None, *, persistent=True):  # state set in __new__
        pass

    def __reduce_ex__(self, proto):
        return (_rebuild_buffer, (self.detach(), self.persistent))


def _rebuild_buffer(data, persistent):
    return Buffer(data, persistent=persistent)
