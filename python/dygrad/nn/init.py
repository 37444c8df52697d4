"""Parameter initialisation, as torch.nn.init: in-place fills under no_grad. Draws come from dygrad's
counter-based RNG (docs/rng.md), or, when a dygrad.Generator is passed, from that generator's own stream (so a
seeded Generator gives the same values every time, independently of the global seed; not torch's numbers). The values
are made on the host, whatever the default device, and copied into the tensor wherever it lives (the draws are the
same numbers on every device)."""
import math
import warnings

from .. import _C
from ..autograd import no_grad


def _host_draw(tensor, generator, kind, a, b):
    """Values drawn from a dygrad.Generator's stream on the host, as a tensor of tensor's shape and dtype."""
    shape = tuple(tensor.shape)
    values = generator._state.uniform(a, b, size=shape) if kind == "uniform" else generator._state.normal(a, b, size=shape)
    return _C.tensor(values.astype("float64") if shape else float(values), dtype=tensor.dtype, device="cpu")


def _no_grad_uniform_(tensor, a, b, generator=None):
    with no_grad():
        if generator is not None:
            return tensor.copy_(_host_draw(tensor, generator, "uniform", a, b))
        return tensor.copy_(_C.rand(tuple(tensor.shape), dtype=tensor.dtype, device="cpu") * (b - a) + a)


def _no_grad_normal_(tensor, mean, std, generator=None):
    with no_grad():
        if generator is not None:
            return tensor.copy_(_host_draw(tensor, generator, "normal", mean, std))
        return tensor.copy_(_C.randn(tuple(tensor.shape), dtype=tensor.dtype, device="cpu") * std + mean)


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    return _no_grad_uniform_(tensor, a, b, generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    return _no_grad_normal_(tensor, mean, std, generator)


def _erfinv(x):
    """erfinv on (-1, 1), M. Giles' single-precision approximation ("Approximating the erfinv function", 2010),
    composed of dygrad ops (relative error ~1e-7: enough for initialisation)."""
    w = -_C.log((1.0 - x) * (1.0 + x))
    central = w - 2.5
    p = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
              0.246640727, 1.50140941):
        p = c + p * central
    tail = _C.sqrt(w) - 3.0
    q = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
              1.00167406, 2.83297682):
        q = c + q * tail
    return _C.where(w < 5.0, p, q) * x


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """torch's method: uniform values in [2 cdf(a) - 1, 2 cdf(b) - 1], erfinv, scale and shift, clamp to [a, b]."""
    def norm_cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values may "
                      "be incorrect.", stacklevel=2)
    with no_grad():
        low, high = norm_cdf((a - mean) / std), norm_cdf((b - mean) / std)
        work = _C.empty(tuple(tensor.shape), dtype=_C.float64 if tensor.dtype == _C.float64 else _C.float32,
                        device="cpu")
        _no_grad_uniform_(work, 2 * low - 1, 2 * high - 1, generator)
        values = _C.clamp(_erfinv(work) * (std * math.sqrt(2.0)) + mean, min=a, max=b)
        tensor.copy_(values)
    return tensor


def zeros_(tensor):
    with no_grad():
        tensor.fill_(0)
    return tensor


def ones_(tensor):
    with no_grad():
        tensor.fill_(1)
    return tensor


def constant_(tensor, val):
    with no_grad():
        tensor.fill_(val)
    return tensor


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = 1
    for s in tuple(tensor.shape)[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


_fan_in_and_fan_out = _calculate_fan_in_and_fan_out


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def calculate_gain(nonlinearity, param=None):
    linear_fns = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return _no_grad_uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    return _no_grad_normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return _no_grad_uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return _no_grad_normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def eye_(tensor):
    """Fills a 2-D tensor with the identity (ones on the diagonal), as torch.nn.init.eye_."""
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    with no_grad():
        rows_index, cols_index = _C.arange(rows, device="cpu"), _C.arange(cols, device="cpu")
        return tensor.copy_(rows_index.reshape(rows, 1) == cols_index.reshape(1, cols))


def dirac_(tensor, groups=1):
    """Fills a 3-, 4- or 5-D convolution weight with the Dirac delta (each output channel of each group passes its
    input channel through), as torch.nn.init.dirac_."""
    dims = tensor.dim()
    if dims not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tuple(tensor.shape)
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_per_group = sizes[0] // groups
    min_dim = min(out_per_group, sizes[1])
    import numpy as np
    values = np.zeros(sizes)
    centre = tuple(s // 2 for s in sizes[2:])
    for g in range(groups):
        for d in range(min_dim):
            values[(g * out_per_group + d, d) + centre] = 1
    with no_grad():
        return tensor.copy_(_C.tensor(values, dtype=tensor.dtype, device="cpu"))


def orthogonal_(tensor, gain=1, generator=None):
    """Fills tensor (at least 2-D, flattened to rows x the rest) with a (semi-)orthogonal matrix: the Q of the QR
    decomposition of a normal sample, its signs fixed by R's diagonal, times gain; as torch.nn.init.orthogonal_
    (the sample is dygrad's; the decomposition is NumPy's LAPACK)."""
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    import numpy as np
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _C.empty((rows, cols), dtype=_C.float64, device="cpu")
    _no_grad_normal_(flat, 0.0, 1.0, generator)
    sample = flat.numpy()
    if rows < cols:
        sample = sample.T
    q, r = np.linalg.qr(sample)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    with no_grad():
        return tensor.copy_(_C.tensor(np.ascontiguousarray(q).reshape(tuple(tensor.shape)) * gain,
                                      dtype=tensor.dtype, device="cpu"))


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """Fills a 2-D tensor from N(0, std) and zeroes ceil(sparsity * rows) random rows of each column, as
    torch.nn.init.sparse_."""
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    zeros = int(math.ceil(sparsity * rows))
    _no_grad_normal_(tensor, 0.0, std, generator)
    from .._generator import randperm
    with no_grad():
        for c in range(cols):
            for r in randperm(rows, generator=generator)[:zeros].tolist():
                tensor[r, c] = 0
    return tensor
