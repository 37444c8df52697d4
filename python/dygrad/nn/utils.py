"""torch.nn.utils' training-loop helpers: clip_grad_norm_ (the total norm of all gradients, then every gradient
scaled by min(1, max_norm / (total + 1e-6)): two multi-tensor Tasks on the stream, the returned 0-d norm read
only when the caller asks), clip_grad_value_, parameters_to_vector and vector_to_parameters."""
import math

from .. import _C
from .._C import Tensor
from ..autograd import no_grad


def _grads(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _finite_on_host(total):
    """The non-finite check reads the norm on the host (a sync, as torch): the op sinks see it as clip_grad_norm_'s."""
    with _C._HostReader("clip_grad_norm_"):
        return math.isfinite(total.item())


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The norm_type-norm of all the tensors' elements together: one Task (grad_norm), no host sync unless
    error_if_nonfinite (which reads the norm, as torch)."""
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return _C.tensor(0.0)
    total = _C._grad_norm(tensors, norm_type)
    if error_if_nonfinite and not _finite_on_host(total):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    grads = _grads(parameters)
    if grads:
        _C._clip_grads_with_norm_(grads, float(max_norm), total_norm)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """torch.nn.utils.clip_grad_norm_: two Tasks over all gradients (their total norm, then the scaling by
    min(1, max_norm / (norm + 1e-6)) read from it on the stream); returns the norm, a 0-d tensor. foreach is
    accepted and ignored (the one path is already multi-tensor)."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return _C.tensor(0.0)
    if any(getattr(p, "_fsdp", None) is not None for p in params):  # fully_shard's shards: the norm of the whole
        from ..distributed.fsdp import _grad_norm_sharded
        total_norm = _grad_norm_sharded(params, float(norm_type))
        if error_if_nonfinite and not _finite_on_host(total_norm):
            raise RuntimeError(f"The total norm of order {float(norm_type)} for gradients from `parameters` is "
                               "non-finite, so it cannot be clipped. To disable this error and scale the gradients by "
                               "the non-finite norm anyway, set `error_if_nonfinite=False`")
    else:
        total_norm = get_total_norm(grads, norm_type, error_if_nonfinite)
    _C._clip_grads_with_norm_(grads, float(max_norm), total_norm)
    return total_norm


def clip_grad_value_(parameters, clip_value, foreach=None):
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(min=-clip_value, max=clip_value)


def _check_same_device(param, old_param_device):
    return old_param_device  # one device (the cpu): nothing to check yet


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one 1-D tensor (a copy; differentiable, as torch)."""
    if isinstance(parameters, Tensor):
        raise TypeError(f"expected an iterable of Tensors, but got {type(parameters).__name__}")
    return _C.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Slices of vec become the parameters' data (views of vec, as torch's `param.data = ...`)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    pointer = 0
    for param in parameters:
        n = param.numel()
        param.data = vec[pointer:pointer + n].view(tuple(param.shape)).data
        pointer += n
