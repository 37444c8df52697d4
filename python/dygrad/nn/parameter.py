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
