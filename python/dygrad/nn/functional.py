"""dygrad.nn.functional: the functional forms of the layers, each a direct call into a C++ op (fused where
dygrad has a fused kernel), with torch.nn.functional's names, arguments and defaults."""
from .. import _C


def linear(input, weight, bias=None):
    return _C.linear(input, weight, bias)


def relu(input, inplace=False):
    return _C.relu_(input) if inplace else _C.relu(input)


def silu(input, inplace=False):
    return _C.silu(input)


def gelu(input, approximate="none"):
    return _C.gelu(input, approximate=approximate)


def softmax(input, dim=None, dtype=None):
    if dim is None:
        raise TypeError("softmax() missing required argument 'dim' (dygrad does not guess the dimension)")
    if dtype is not None:
        input = input.to(dtype)
    return _C.softmax(input, dim)


def log_softmax(input, dim=None, dtype=None):
    if dim is None:
        raise TypeError("log_softmax() missing required argument 'dim' (dygrad does not guess the dimension)")
    if dtype is not None:
        input = input.to(dtype)
    return _C.log_softmax(input, dim)


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    if weight is not None:
        raise NotImplementedError("cross_entropy: class weights are not supported yet")
    if label_smoothing != 0.0:
        raise NotImplementedError("cross_entropy: label_smoothing is not supported yet")
    return _C.cross_entropy(input, target, ignore_index=ignore_index, reduction=reduction)


def embedding(input, weight, padding_idx=None):
    return _C.embedding(weight, input) if padding_idx is None else _C.embedding(weight, input, padding_idx)


def dropout(input, p=0.5, training=True, inplace=False):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    keep = _C.rand(tuple(input.shape), dtype=input.dtype) >= p
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
        eps = 1.1920928955078125e-07 if input.dtype == _C.float32 else 2.220446049250313e-16
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


def swiglu(gate, up=None):
    return _C.swiglu(gate) if up is None else _C.swiglu(gate, up)
