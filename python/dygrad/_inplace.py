"""torch's in-place Tensor methods that dygrad has no kernel of their own for (`x.sqrt_()`, `x.lt_(y)`, `x.tril_()`):
each computes its out-of-place twin and writes the result into the tensor with copy_, which records the write for
autograd (the gradient flows through the twin, as torch's in-place formula does) and bumps the version counter.
torch's rule for in-place results holds: a result the tensor's dtype cannot take (a float into an integer tensor)
raises before anything is written; comparisons and logical ops write 1/0 in the tensor's own dtype, as torch's.
Cost: two ops (the twin and the copy) where torch runs one; the methods with a kernel of their own (`add_`, `mul_`,
`exp_`, `clamp_`, ...) are not these. docs/pytorch-api.md lists them as supported with that difference."""
from . import _C

# Elementwise: the result in the tensor's dtype only where torch can cast it there.
_ARITHMETIC = (
    "abs", "absolute", "acos", "acosh", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctanh", "asin",
    "asinh", "atan", "atanh", "cos", "cosh", "deg2rad", "digamma", "erf", "erfc", "erfinv", "exp2", "expm1", "frac",
    "i0", "lgamma", "log10", "log1p", "log2", "log", "logit", "nan_to_num", "neg", "negative", "rad2deg", "rsqrt",
    "sgn", "sigmoid", "sin", "sinc", "sinh", "sqrt", "tan", "tanh", "clamp_min", "clamp_max", "clip", "arctan2",
    "copysign", "divide", "float_power", "floor_divide", "hypot", "ldexp", "multiply", "subtract", "true_divide",
    "xlogy", "heaviside", "nextafter", "gcd", "lcm", "tril", "triu", "renorm", "index_fill", "index_copy",
    "masked_scatter", "scatter_reduce", "index_reduce", "addbmm", "addmv", "addr", "baddbmm",
)
# Written as 1/0 (True/False) in the tensor's dtype, whatever it is.
_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal",
               "logical_and", "logical_or", "logical_xor", "logical_not")

_TORCH_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int64": "Long",
                "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool",
                "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


def _category(dtype):
    if dtype == _C.bool:
        return 0
    if dtype.is_complex:
        return 3
    return 2 if dtype.is_floating_point else 1


def _torch_name(dtype):
    name = str(dtype).split(".")[-1]
    return _TORCH_NAMES.get(name, name)


def _make(name, twin, predicate):
    def method(self, *args, **kwargs):
        result = twin(self, *args, **kwargs)
        if not predicate and _category(result.dtype) > _category(self.dtype):
            raise RuntimeError(f"[{name}] result type {_torch_name(result.dtype)} can't be cast to the desired output "
                               f"type {_torch_name(self.dtype)}")
        if predicate and not isinstance(result, _C.Tensor):
            raise TypeError(f"[{name}] expected a tensor result")
        return self.copy_(result)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"In place: self = self.{name[:-1]}(...) (dygrad/_inplace.py)."
    return method


def install():
    for base in _ARITHMETIC + _PREDICATES:
        name = base + "_"
        twin = getattr(_C.Tensor, base, None)
        if twin is None or hasattr(_C.Tensor, name):
            continue
        setattr(_C.Tensor, name, _make(name, twin, base in _PREDICATES))
