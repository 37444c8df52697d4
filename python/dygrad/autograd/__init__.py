"""dygrad.autograd: grad mode (no_grad, enable_grad, set_grad_enabled, inference_mode), backward and grad,
Function (custom ops in Python), anomaly detection and saved-tensor hooks (autograd.graph), gradcheck and
gradgradcheck, and autograd.functional (vjp, jvp, jacobian, hessian, hvp, vhp)."""
from .. import _C
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad,  # noqa: F401
                        set_grad_enabled)
from . import function, graph  # noqa: F401
from . import functional  # noqa: F401
from .gradcheck import GradcheckError, gradcheck, gradgradcheck  # noqa: F401 -- gradcheck: the function, as torch
from .function import Function, once_differentiable  # noqa: F401
from .anomaly_mode import (detect_anomaly, is_anomaly_check_nan_enabled, is_anomaly_enabled,  # noqa: F401
                           set_detect_anomaly)


def _as_sequence(x):
    if x is None:
        return None
    return (x,) if isinstance(x, _C.Tensor) else tuple(x)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False):
    """Accumulates the gradients of `tensors` into the leaves' .grad (torch.autograd.backward)."""
    if retain_graph is None:
        retain_graph = create_graph
    _C._backward(_as_sequence(tensors), _as_sequence(grad_tensors), bool(retain_graph), bool(create_graph))


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
    """The gradients of `outputs` with respect to `inputs`, as a tuple; .grad is left alone."""
    if retain_graph is None:
        retain_graph = create_graph
    return _C._grad(_as_sequence(outputs), _as_sequence(inputs), _as_sequence(grad_outputs), bool(retain_graph),
                    bool(create_graph), bool(allow_unused))
