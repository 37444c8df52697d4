"""Batch and group normalization (torch.nn.functional.batch_norm / group_norm, nn.BatchNorm1d/2d/3d, nn.GroupNorm),
composed of reductions and elementwise ops, with torch's running statistics, arguments, buffers and errors.

Shapes: input [N, C, *S]; batch norm reduces over N and S per channel, group norm over C/G channels and S per
sample and group. Both use the biased variance to normalize; batch norm's running variance takes the unbiased one
(n / (n - 1)), as torch's."""
import math

from .. import _C
from ..autograd import no_grad
from . import init
from .module import Module
from .parameter import Parameter


def _verify_batch_size(size):
    if math.prod(size[:1] + size[2:]) == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {size}")


def _channel_shape(input):
    """Where a per-channel vector broadcasts against input [N, C, *S]: [C, 1, ...]."""
    return (input.shape[1],) + (1,) * (input.dim() - 2)


def _affine(out, input, weight, bias):
    if weight is not None:
        out = out * weight.reshape(_channel_shape(input))
    if bias is not None:
        out = out + bias.reshape(_channel_shape(input))
    return out


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    if training:
        _verify_batch_size(input.size())
    channels = input.shape[1] if input.dim() > 1 else 1
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and t.numel() != channels:
            raise RuntimeError(f"{name} should contain {channels} elements not {t.numel()}")
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError(f"{'running_mean' if running_mean is None else 'running_var'} must be defined in "
                           "evaluation mode")
    shape = _channel_shape(input)
    if training:
        dims = (0,) + tuple(range(2, input.dim()))
        mean = input.mean(dims, keepdim=True)
        centered = input - mean
        var = (centered * centered).mean(dims, keepdim=True)
        if running_mean is not None or running_var is not None:
            count = input.numel() // channels
            with no_grad():
                if running_mean is not None:
                    running_mean.mul_(1.0 - momentum).add_(mean.detach().reshape((channels,)).to(running_mean.dtype)
                                                           * momentum)
                if running_var is not None:
                    unbiased = var.detach().reshape((channels,)) * (count / max(count - 1, 1))
                    running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype) * momentum)
    else:
        mean = running_mean.reshape(shape).to(input.dtype)
        var = running_var.reshape(shape).to(input.dtype)
        centered = input - mean
    return _affine(centered * _C.rsqrt(var + eps), input, weight, bias)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.dim()}")
    size = list(input.shape)
    _verify_batch_size([size[0] * size[1] // num_groups, num_groups] + size[2:])
    if size[1] % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {size} and num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dim() != 1 or t.numel() != size[1]):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, "
                               f"but got {name} of shape {list(t.shape)} and input of shape {size}")
    grouped = input.reshape((size[0], num_groups, -1))  # [N, G, C/G * prod(S)]
    mean = grouped.mean(-1, keepdim=True)
    centered = grouped - mean
    var = (centered * centered).mean(-1, keepdim=True)
    out = (centered * _C.rsqrt(var + eps)).reshape(size)
    return _affine(out, input, weight, bias)


class _NormBase(Module):
    """torch.nn.modules.batchnorm._NormBase: affine parameters and the running-statistics buffers."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(_C.empty((num_features,), device=device, dtype=dtype))
            if bias:
                self.bias = Parameter(_C.empty((num_features,), device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", _C.zeros((num_features,), device=device, dtype=dtype))
            self.register_buffer("running_var", _C.ones((num_features,), device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked", _C.tensor(0, dtype=_C.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self):
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def _check_input_dim(self, input):
        raise NotImplementedError

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            # momentum None: the cumulative average (the count is read on the host, as torch's float())
            factor = 1.0 / float(self.num_batches_tracked.item()) if self.momentum is None else self.momentum
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        return batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                          self.weight, self.bias, use_batch, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    def _check_input_dim(self, input):
        if input.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input)")


class BatchNorm2d(_BatchNorm):
    def _check_input_dim(self, input):
        if input.dim() != 4:
            raise ValueError(f"expected 4D input (got {input.dim()}D input)")


class BatchNorm3d(_BatchNorm):
    def _check_input_dim(self, input):
        if input.dim() != 5:
            raise ValueError(f"expected 5D input (got {input.dim()}D input)")


class GroupNorm(Module):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            self.weight = Parameter(_C.empty((num_channels,), device=device, dtype=dtype))
            if bias:
                self.bias = Parameter(_C.empty((num_channels,), device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")
