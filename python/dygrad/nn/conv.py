"""Convolutions (torch.nn.functional.conv1d/2d/3d, conv_transpose1d/2d/3d and the Conv / ConvTranspose modules),
composed of dygrad's ops: an im2col of strided slices, stacked, then one batched matmul per group.

Why composed and not a C++ op: every piece (pad, slice views, stack, matmul) already has its kernel and backward,
so the convolution is differentiable to any order without a line of C++, and its gradients are the adjoints of
those views (a strided slice's backward scatters into the padded input; the stack's backward splits). The cost
is memory: the stacked columns hold K = prod(kernel) copies of the input, as any im2col does, and the slices'
backward allocates one padded-input-sized gradient per kernel offset. The models this serves (issue 41: Mamba's
and Whisper's short 1-d kernels, a few vision stems) are small there; a kernel of its own is the next step if a
benchmark asks for it.

Shapes (S spatial sizes, K = prod(k) kernel offsets, L = prod(out) output positions, g groups):
  input [N, C, *S] -> padded [N, C, *S'] -> columns [N, C, K, *out] -> [N, g, C/g * K, L]
  weight [O, C/g, *k] -> [g, O/g, C/g * K];  out = weight @ columns: [N, g, O/g, L] -> [N, O, *out]
A transposed convolution is the convolution of the input dilated by the stride (s - 1 zeros between elements),
padded by d (k - 1) - p on each side (plus output_padding at the end), with the weight's two channel dims swapped
per group and its kernel flipped."""
import itertools
import math

from .. import _C
from . import init
from .module import Module
from .parameter import Parameter

def _tuple(name, value, n):
    """An int or a sequence of n ints, as torch's conv arguments."""
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {n} values to match the "
                           f"convolution dimensions, but got {name}={list(value)}")
    return value


def _check_conv(call, input, weight, spatial, transposed, groups):
    if weight.dim() < 3:
        raise RuntimeError("weight should have at least three dimensions")
    if input.dim() not in (spatial + 1, spatial + 2):
        raise RuntimeError(f"Expected {spatial + 1}D (unbatched) or {spatial + 2}D (batched) input to {call}, but "
                           f"got input of size: {list(input.shape)}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    weight_size = list(weight.shape)
    if not transposed and weight_size[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{weight_size}] instead")


def _check_channels(input, weight, bias, groups, transposed):
    weight_size = list(weight.shape)
    expected = weight_size[0] if transposed else weight_size[1] * groups
    if input.shape[1] != expected:
        if transposed:
            raise RuntimeError(f"Given transposed=1, weight of size {weight_size}, expected input{list(input.shape)} "
                               f"to have {expected} channels, but got {input.shape[1]} channels instead")
        raise RuntimeError(f"Given groups={groups}, weight of size {weight_size}, expected input{list(input.shape)} to "
                           f"have {expected} channels, but got {input.shape[1]} channels instead")
    out_channels = weight_size[1] * groups if transposed else weight_size[0]
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != out_channels):
        raise RuntimeError(f"Given weight of size {weight_size}, expected bias to be 1-dimensional with {out_channels} "
                           f"elements, but got bias of size {list(bias.shape)} instead")


def _check_positive(stride, padding, dilation):
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("non-positive dilation is not supported")


def _pad_spatial(x, before, after):
    """x [N, C, *S] padded by before[i] and after[i] zeros on spatial dim i (F.pad's order: last dim first)."""
    if not any(before) and not any(after):
        return x
    pads = []
    for b, a in zip(reversed(before), reversed(after)):
        pads += [b, a]
    return _C.pad(x, pads, "constant", 0.0)


def _columns_matmul(x, weight, bias, stride, dilation, groups):
    """The convolution of an already padded x [N, C, *S] (im2col of strided slices, then matmul)."""
    spatial = x.dim() - 2
    n, channels, sizes = x.shape[0], x.shape[1], tuple(x.shape[2:])
    kernel, out_channels = tuple(weight.shape[2:]), weight.shape[0]
    dilated = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    if any(s < k for s, k in zip(sizes, dilated)):
        raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, sizes))}). Kernel size: "
                           f"({' x '.join(map(str, dilated))}). Kernel size can't be greater than actual input size")
    out = [(s - k) // st + 1 for s, k, st in zip(sizes, dilated, stride)]
    slices = []
    for offsets in itertools.product(*(range(k) for k in kernel)):
        index = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + st * (m - 1) + 1, st) for o, d, st, m in zip(offsets, dilation, stride, out))
        slices.append(x[index])
    taps = len(slices)
    positions = math.prod(out)
    columns = (_C.stack(slices, 2) if taps > 1 else slices[0].unsqueeze(2))  # [N, C, K, *out]
    columns = columns.reshape(n, groups, channels // groups * taps, positions)
    result = _C.matmul(weight.reshape(groups, out_channels // groups, channels // groups * taps), columns)
    result = result.reshape((n, out_channels) + tuple(out))
    if bias is not None:
        result = result + bias.reshape((out_channels,) + (1,) * spatial)
    return result


def _conv(call, spatial, input, weight, bias, stride, padding, dilation, groups):
    _check_conv(call, input, weight, spatial, False, groups)
    stride, dilation = _tuple("stride", stride, spatial), _tuple("dilation", dilation, spatial)
    kernel = tuple(weight.shape[2:])
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise RuntimeError(f"Invalid padding string: '{padding}'")
        if padding == "same" and any(s != 1 for s in stride):
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        total = [d * (k - 1) if padding == "same" else 0 for d, k in zip(dilation, kernel)]
        before, after = [t // 2 for t in total], [t - t // 2 for t in total]
    else:
        before = after = _tuple("padding", padding, spatial)
    _check_positive(stride, before, dilation)
    batched = input.dim() == spatial + 2
    x = input if batched else input.unsqueeze(0)
    _check_channels(x, weight, bias, groups, False)
    result = _columns_matmul(_pad_spatial(x, before, after), weight, bias, stride, dilation, groups)
    return result if batched else result.squeeze(0)


def _dilate(x, dim, stride):
    """x with stride - 1 zeros between consecutive elements of dim: size (n - 1) * stride + 1."""
    if stride == 1:
        return x
    shape = tuple(x.shape)
    gaps = _C.zeros(shape[:dim + 1] + (stride - 1,) + shape[dim + 1:], dtype=x.dtype, device=x.device)
    spread = _C.cat([x.unsqueeze(dim + 1), gaps], dim + 1)  # [..., n, stride, ...]
    spread = spread.reshape(shape[:dim] + (shape[dim] * stride,) + shape[dim + 1:])
    return spread.narrow(dim, 0, (shape[dim] - 1) * stride + 1)


def _conv_transpose(call, spatial, input, weight, bias, stride, padding, output_padding, groups, dilation):
    _check_conv(call, input, weight, spatial, True, groups)
    stride, dilation = _tuple("stride", stride, spatial), _tuple("dilation", dilation, spatial)
    padding = _tuple("padding", padding, spatial)
    output_padding = _tuple("output_padding", output_padding, spatial)
    _check_positive(stride, padding, dilation)
    if any(op < 0 for op in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(op >= s and op >= d for op, s, d in zip(output_padding, stride, dilation)):
        names = ("depth", "height", "width")[3 - spatial:] if spatial > 1 else ("width",)
        detail = " ".join(f"output_padding_{n}: {v}" for n, v in zip(names, output_padding)) + " " + \
            " ".join(f"stride_{n}: {v}" for n, v in zip(names, stride)) + " " + \
            " ".join(f"dilation_{n}: {v}" for n, v in zip(names, dilation))
        raise RuntimeError(f"output padding must be smaller than either stride or dilation, but got {detail}")
    batched = input.dim() == spatial + 2
    x = input if batched else input.unsqueeze(0)
    _check_channels(x, weight, bias, groups, True)
    in_channels, out_per_group, kernel = weight.shape[0], weight.shape[1], tuple(weight.shape[2:])
    for i, s in enumerate(stride):
        x = _dilate(x, 2 + i, s)
    before = [d * (k - 1) - p for d, k, p in zip(dilation, kernel, padding)]
    after = [b + op for b, op in zip(before, output_padding)]
    for i, (b, a) in enumerate(zip(before, after)):  # padding beyond d (k - 1) crops instead
        if b < 0 or a < 0:
            size = x.shape[2 + i]
            start, stop = max(-b, 0), size - max(-a, 0)
            x = x.narrow(2 + i, start, stop - start)
    x = _pad_spatial(x, [max(b, 0) for b in before], [max(a, 0) for a in after])
    # [C_in, C_out/g, *k] -> [g, C_in/g, C_out/g, *k] -> [g, C_out/g, C_in/g, *k] -> [C_out, C_in/g, *k], flipped
    swapped = weight.reshape((groups, in_channels // groups, out_per_group) + kernel).transpose(1, 2)
    swapped = swapped.reshape((groups * out_per_group, in_channels // groups) + kernel)
    swapped = swapped.flip(list(range(2, 2 + spatial)))
    result = _columns_matmul(x, swapped, bias, (1,) * spatial, dilation, groups)
    return result if batched else result.squeeze(0)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose("conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


# --- modules ----------------------------------------------------------------------------------------------------
_PADDING_MODES = {"zeros", "reflect", "replicate", "circular"}


class _ConvNd(Module):
    """torch.nn.modules.conv._ConvNd: the attributes, parameter layout, initialisation and repr of torch's."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, transposed, output_padding,
                 groups, bias, padding_mode, device=None, dtype=None):
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'same', 'valid'}}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {_PADDING_MODES}, but got padding_mode='{padding_mode}'")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.transposed, self.output_padding, self.groups = transposed, output_padding, groups
        self.padding_mode = padding_mode
        if isinstance(padding, str):
            self._reversed_padding_repeated_twice = [0, 0] * len(kernel_size)
            if padding == "same":
                for d, k, i in zip(dilation, kernel_size, range(len(kernel_size) - 1, -1, -1)):
                    total = d * (k - 1)
                    self._reversed_padding_repeated_twice[2 * i] = total // 2
                    self._reversed_padding_repeated_twice[2 * i + 1] = total - total // 2
        else:
            self._reversed_padding_repeated_twice = tuple(p for p in reversed(padding) for _ in range(2))
        shape = (in_channels, out_channels // groups) if transposed else (out_channels, in_channels // groups)
        self.weight = Parameter(_C.empty(shape + tuple(kernel_size), device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(_C.empty((out_channels,), device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * len(self.padding):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


def _ntuple(value, n):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


class _ConvForward(_ConvNd):
    _spatial = 0
    _functional = None

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", device=None, dtype=None):
        n = self._spatial
        super().__init__(in_channels, out_channels, _ntuple(kernel_size, n), _ntuple(stride, n),
                         padding if isinstance(padding, str) else _ntuple(padding, n), _ntuple(dilation, n), False,
                         (0,) * n, groups, bias, padding_mode, device, dtype)

    def _conv_forward(self, input, weight, bias):
        if self.padding_mode != "zeros":
            padded = _C.pad(input, list(self._reversed_padding_repeated_twice), self.padding_mode, None)
            return type(self)._functional(padded, weight, bias, self.stride, 0, self.dilation, self.groups)
        return type(self)._functional(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)


class Conv1d(_ConvForward):
    _spatial, _functional = 1, conv1d


class Conv2d(_ConvForward):
    _spatial, _functional = 2, conv2d


class Conv3d(_ConvForward):
    _spatial, _functional = 3, conv3d


class _ConvTransposeNd(_ConvNd):
    _spatial = 0
    _functional = None

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        n = self._spatial
        super().__init__(in_channels, out_channels, _ntuple(kernel_size, n), _ntuple(stride, n), _ntuple(padding, n),
                         _ntuple(dilation, n), True, _ntuple(output_padding, n), groups, bias, padding_mode, device,
                         dtype)

    def _output_padding(self, input, output_size):
        """torch's: the output_padding that makes the output output_size (its last spatial entries)."""
        if output_size is None:
            return self.output_padding
        n = self._spatial
        output_size = list(output_size)[-n:]
        if len(output_size) != n:
            raise ValueError(f"ConvTranspose{n}D: for {input.dim()}D input, output_size must have {n} or "
                             f"{n + 2} elements (got {len(output_size)})")
        result = []
        for d in range(n):
            size = input.shape[input.dim() - n + d]
            smallest = ((size - 1) * self.stride[d] - 2 * self.padding[d]
                        + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            largest = smallest + self.stride[d] - 1
            if not smallest <= output_size[d] <= largest:
                raise ValueError(f"requested an output size of {output_size}, but valid sizes range from "
                                 f"{[smallest]} to {[largest]} (for an input of {list(input.shape)[2:]})")
            result.append(output_size[d] - smallest)
        return tuple(result)

    def forward(self, input, output_size=None):
        output_padding = self._output_padding(input, output_size)
        return type(self)._functional(input, self.weight, self.bias, self.stride, self.padding, output_padding,
                                      self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    _spatial, _functional = 1, conv_transpose1d


class ConvTranspose2d(_ConvTransposeNd):
    _spatial, _functional = 2, conv_transpose2d


class ConvTranspose3d(_ConvTransposeNd):
    _spatial, _functional = 3, conv_transpose3d
