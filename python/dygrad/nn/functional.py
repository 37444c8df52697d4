"""dygrad.nn.functional: the functional forms of the layers, each a direct call into a C++ op (fused where
dygrad has a fused kernel), with torch.nn.functional's names, arguments and defaults."""
import math
import warnings

from .. import _C


def linear(input, weight, bias=None):
    return _C.linear(input, weight, bias)


def relu(input, inplace=False):
    return _C.relu_(input) if inplace else _C.relu(input)


def silu(input, inplace=False):
    if inplace:  # x *= sigmoid(x): mul_ keeps what its backward needs (silu's saved input would be overwritten)
        return input.mul_(_C.sigmoid(input))
    return _C.silu(input)


def gelu(input, approximate="none"):
    return _C.gelu(input, approximate=approximate)


def tanh(input):
    return _C.tanh(input)


def sigmoid(input):
    return _C.sigmoid(input)


def _get_softmax_dim(name, ndim, stacklevel):
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                  "as an argument.", stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _get_softmax_dim("softmax", input.dim(), _stacklevel)
    return _C.softmax(input, dim, dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _get_softmax_dim("log_softmax", input.dim(), _stacklevel)
    return _C.log_softmax(input, dim, dtype)


# --- losses: torch's legacy size_average/reduce arguments map to a reduction string ------------------------------
def _legacy_reduction(size_average, reduce):
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if size_average and reduce:
        return "mean"
    return "sum" if reduce else "none"


def _check_reduction(reduction):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _warn_size(input, target):
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(f"Using a target size ({_size(target)}) that is different to the input size ({_size(input)}). "
                      "This will likely lead to incorrect results due to broadcasting. Please ensure they have the "
                      "same size.", stacklevel=3)


def _size(t):
    return t.size()


def _weighted_pointwise(errors, weight, input, reduction):
    """torch's weighted mse_loss / l1_loss, composed in Python as torch composes it."""
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    weighted = errors * weight
    if reduction == "none":
        return weighted
    if reduction == "sum":
        return weighted.sum()
    if reduction == "mean":
        return weighted.sum() / weight.sum()
    raise ValueError(f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.")


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _warn_size(input, target)
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    if weight is not None:
        difference = input - target
        return _weighted_pointwise(difference * difference, weight, input, reduction)
    _check_reduction(reduction)
    return _C.mse_loss(input, target, reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _warn_size(input, target)
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    if weight is not None:
        return _weighted_pointwise((input - target).abs(), weight, input, reduction)
    _check_reduction(reduction)
    return _C.l1_loss(input, target, reduction)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    _check_reduction(reduction)
    return _C.nll_loss(input, target, weight, ignore_index, reduction)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    _check_reduction(reduction)
    return _C.cross_entropy(input, target, weight=weight, ignore_index=ignore_index, reduction=reduction,
                            label_smoothing=label_smoothing)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    _check_reduction(reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({_size(target)}) must be the same as input size ({_size(input)})")
    return _C.binary_cross_entropy_with_logits(input, target, weight, pos_weight, reduction)


def pad(input, pad, mode="constant", value=None):
    return _C.pad(input, pad, mode, value)


def one_hot(tensor, num_classes=-1):
    return _C.one_hot(tensor, num_classes)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """input / max(||input||_p along dim, eps), as torch composes it (norm, clamp_min, expand_as, div)."""
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported (dygrad ops take no out= here)")
    p = float(p)
    magnitude = input.abs()
    if p == math.inf:
        norm = magnitude.amax(dim, keepdim=True)
    elif p == -math.inf:
        norm = magnitude.amin(dim, keepdim=True)
    elif p == 1.0:
        norm = magnitude.sum(dim, keepdim=True)
    elif p == 2.0:  # sqrt(clamp(sum x^2, eps^2)) = clamp(norm, eps), without sqrt's infinite slope at a zero row
        return input / _C.clamp((input * input).sum(dim, keepdim=True), min=eps * eps).sqrt()
    elif eps ** p > 0 and _C.tensor(eps ** p, dtype=input.dtype, device="cpu").item() > 0:  # (clamp before the root)
        return input / _C.clamp((magnitude ** p).sum(dim, keepdim=True), min=eps ** p) ** (1.0 / p)
    else:
        norm = (magnitude ** p).sum(dim, keepdim=True) ** (1.0 / p)
    return input / _C.clamp(norm, min=eps)


def embedding(input, weight, padding_idx=None):
    return _C.embedding(weight, input) if padding_idx is None else _C.embedding(weight, input, padding_idx)


def dropout(input, p=0.5, training=True, inplace=False):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    keep = _C.rand(tuple(input.shape), dtype=input.dtype, device=input.device) >= p
    out = input * keep.to(input.dtype) * (1.0 / (1.0 - p))
    if inplace:
        input.copy_(out)
        return input
    return out


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = tuple(range(-len(normalized_shape), 0))
    mean = input.mean(dims, keepdim=True)
    centered = input - mean
    var = (centered * centered).mean(dims, keepdim=True)
    out = centered * _C.rsqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def rms_norm(input, normalized_shape, weight=None, eps=None):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    if eps is None:
        eps = 2.220446049250313e-16 if input.dtype == _C.float64 else 1.1920928955078125e-07  # opmath epsilon
    if len(normalized_shape) == 1:
        return _C.rms_norm(input, weight, eps)
    dims = tuple(range(-len(normalized_shape), 0))
    out = input * _C.rsqrt((input * input).mean(dims, keepdim=True) + eps)
    return out * weight if weight is not None else out


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    return _C.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                           is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


def rotary_position_embedding(x, cos, sin, mode="interleaved"):
    return _C.rotary_position_embedding(x, cos, sin, mode)


def rotary_attention(qkv, cos, sin, heads, mode="interleaved", is_causal=False, scale=None):
    """dygrad's fused attention of a fused QKV projection qkv [B, T, 3 * heads * D]: q, k, v its thirds as
    [B, heads, T, D], q and k rotated as rotary_position_embedding(., cos, sin, mode), then
    scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale), returned as [B, T, heads * D].
    One op: only qkv is saved for backward, and the backward writes qkv's gradient whole (docs/ops.md)."""
    return _C.rotary_attention(qkv, cos, sin, heads, mode, is_causal, scale=scale)


def swiglu(gate, up=None):
    return _C.swiglu(gate) if up is None else _C.swiglu(gate, up)


# --- pointwise activations composed of dygrad's ops (issue 41): torch's formulas and its gradients, including at
# the points where the pieces meet (strict or inclusive comparisons as torch's backward kernels use them). The
# in-place forms overwrite the input with copy_, which autograd records, so a non-leaf input stays differentiable.
def leaky_relu(input, negative_slope=0.01, inplace=False):
    result = _C.where(input > 0, input, input * negative_slope)
    return input.copy_(result) if inplace else result


def leaky_relu_(input, negative_slope=0.01):
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    # min_val where input <= min_val, max_val where input >= max_val: the gradient is 0 at both ends, as torch's
    result = _C.where(input <= min_val, min_val, _C.where(input >= max_val, max_val, input))
    return input.copy_(result) if inplace else result


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input, inplace=False):
    result = hardtanh(input + 3.0, 0.0, 6.0) / 6.0
    return input.copy_(result) if inplace else result


class _Hardswish:
    """x * min(max(x + 3, 0), 6) / 6 with torch's gradient: 0 up to -3, x / 3 + 0.5 between, 1 from 3."""
    function = None

    @classmethod
    def apply(cls, input):
        if cls.function is None:
            from ..autograd import Function

            class HardswishBackward0(Function):
                @staticmethod
                def forward(ctx, x):
                    ctx.save_for_backward(x)
                    return x * hardtanh(x + 3.0, 0.0, 6.0) / 6.0

                @staticmethod
                def backward(ctx, grad):
                    (x,) = ctx.saved_tensors
                    slope = _C.where(x <= -3.0, 0.0, _C.where(x < 3.0, x / 3.0 + 0.5, 1.0))
                    return grad * slope

            cls.function = HardswishBackward0
        return cls.function.apply(input)


def hardswish(input, inplace=False):
    if inplace:  # its backward reads the input: computed from a copy, which the overwrite leaves intact
        return input.copy_(_Hardswish.apply(input.clone()))
    return _Hardswish.apply(input)


def softsign(input):
    return input / (input.abs() + 1)


def tanhshrink(input):
    return input - _C.tanh(input)


def softshrink(input, lambd=0.5):
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return _C.where(input > lambd, input - lambd, _C.where(input < -lambd, input + lambd, 0.0))


def hardshrink(input, lambd=0.5):
    return _C.where((input >= -lambd) & (input <= lambd), 0.0, input)


def threshold(input, threshold, value, inplace=False):  # noqa: A002 (torch's names)
    result = _C.where(input <= threshold, value, input)
    return input.copy_(result) if inplace else result


def threshold_(input, threshold, value):  # noqa: A002
    return globals()["threshold"](input, threshold, value, inplace=True)


def glu(input, dim=-1):
    if input.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    size = input.shape[dim]
    if size % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim % input.dim()} is size {size}")
    a, b = input.chunk(2, dim)
    return a * _C.sigmoid(b)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _get_softmax_dim("softmin", input.dim(), _stacklevel)
    return softmax(-input, dim, dtype=dtype)


def prelu(input, weight):
    if weight.numel() != 1:
        if input.dim() == 0:
            raise RuntimeError("Not allow zero-dim input tensor.")
        channels = input.shape[1] if input.dim() >= 2 else 1
        if weight.numel() != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               f"{weight.numel()} and channel size = {channels}.")
        weight = weight.reshape((channels,) + (1,) * (input.dim() - 2)) if input.dim() >= 2 else weight
    return _C.where(input > 0, input, weight * input)


# --- the exponential activations of issue 41 (ELU family, softplus, mish, logsigmoid): torch's formulas, with
# expm1 and log1p where torch's kernels use them. The branch not taken is fed a harmless value (where(x > 0, 0, x)),
# so an overflow there never reaches the gradient as inf * 0.
def _elu(input, alpha, scale, input_scale):
    """torch's elu kernel: x > 0 ? x * scale : expm1(x * input_scale) * alpha * scale. Its gradient is torch's,
    1 * scale above 0 and alpha * scale * input_scale * exp(x * input_scale) at and below 0."""
    negative = _C.where(input > 0, 0.0, input)
    return _C.where(input > 0, input * scale if scale != 1.0 else input,
                    _C.expm1(negative * input_scale if input_scale != 1.0 else negative) * (alpha * scale))


def elu(input, alpha=1.0, inplace=False):
    result = _elu(input, alpha, 1.0, 1.0)
    return input.copy_(result) if inplace else result


def elu_(input, alpha=1.0):
    return elu(input, alpha, inplace=True)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    result = _elu(input, _SELU_ALPHA, _SELU_SCALE, 1.0)
    return input.copy_(result) if inplace else result


def selu_(input):
    return selu(input, inplace=True)


def celu(input, alpha=1.0, inplace=False):
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    result = _elu(input, alpha, 1.0, 1.0 / alpha)
    return input.copy_(result) if inplace else result


def celu_(input, alpha=1.0):
    return celu(input, alpha, inplace=True)


def softplus(input, beta=1.0, threshold=20.0):
    """torch's: x * beta > threshold ? x : log1p(exp(x * beta)) / beta."""
    scaled = input * beta if beta != 1.0 else input
    linear = scaled > threshold
    smooth = _C.log1p(_C.exp(_C.where(linear, 0.0, scaled)))
    return _C.where(linear, input, smooth / beta if beta != 1.0 else smooth)


def mish(input, inplace=False):
    """x * tanh(softplus(x)). torch's kernel takes log1p(exp(x)) without softplus's threshold; above 20 both
    round tanh to 1 exactly, and the threshold keeps exp's overflow out of the gradient."""
    if inplace:  # the product's backward reads x: computed from a copy, which the overwrite leaves intact
        return input.copy_(mish(input.clone()))
    return input * _C.tanh(softplus(input))


def logsigmoid(input):
    """min(x, 0) - log1p(exp(-|x|)), as torch's kernel; minimum splits the gradient at 0 as torch's backward
    (0.5 there)."""
    return _C.minimum(input, _C.zeros((), dtype=input.dtype, device=input.device)) - _C.log1p(_C.exp(-input.abs()))


# The convolutions, batch and group norm and multi-head attention are defined beside their modules (conv.py,
# norms.py, multihead.py) and exported here under torch's names; last, since multihead.py imports this module.
from .conv import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d  # noqa: E402,F401
from .multihead import multi_head_attention_forward  # noqa: E402,F401
from .norms import batch_norm, group_norm  # noqa: E402,F401
