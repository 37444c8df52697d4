"""dygrad.onnx's op table: each captured OpDef name -> a function emitting the ONNX nodes that compute it
(docs/onnx.md, "Ops"). The fused ops (rms_norm, rotary_attention, swiglu, cross_entropy) are decomposed into
standard operators here.

Each lowering gets an `Op` (its name, attributes, input tensor names and values) and the Builder, and returns one
ONNX name per output, or None for an output it does not compute (a saved statistic such as rms_norm's rstd or an
attention's log-sum-exp; reading one later raises). Notation: B batch, T time, H heads, D head dim, V vocabulary.
"""
import math

import numpy as np

from ._builder import DTYPES, dtype_name
from .errors import OnnxExporterError


class Op:
    """One captured op as a lowering sees it: `inputs` are ONNX names (None for an absent operand), `in_values`
    and `out_values` the captured values (buffer, offset, sizes, strides, dtype)."""

    def __init__(self, name, attrs, inputs, in_values, out_values, where):
        self.name, self.attrs, self.inputs = name, attrs, inputs
        self.in_values, self.out_values, self.where = in_values, out_values, where

    def in_sizes(self, i):
        return tuple(self.in_values[i][2])

    def out_sizes(self, k=0):
        return tuple(self.out_values[k][2])

    def in_dtype(self, i):
        return dtype_name(self.in_values[i][4])

    def out_dtype(self, k=0):
        return dtype_name(self.out_values[k][4])

    def out_np(self, k=0):
        return DTYPES[self.out_dtype(k)][1]

    def fail(self, what):
        raise OnnxExporterError(f"[onnx.export] {self.name} {what} ({self.where})")


def _cast(b, name, have, want):
    return name if have == want else b.node("Cast", [name], to=DTYPES[want][0])


def _operands_as(b, op, want):
    """The tensor inputs cast to dtype `want` (dygrad promotes mixed operands; ONNX wants one type)."""
    return [_cast(b, x, op.in_dtype(i), want) for i, x in enumerate(op.inputs) if x is not None]


def _promoted(op):
    """The dtype an elementwise comparison computes in: the floating one if any, else the widest integer."""
    names = [op.in_dtype(i) for i, x in enumerate(op.inputs) if x is not None]
    for want in ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"):
        if want in names:
            return want
    return names[0]


def _binary(onnx_op):
    def lower(b, op):
        x, y = _operands_as(b, op, op.out_dtype())
        return [b.node(onnx_op, [x, y])]
    return lower


def _compare(onnx_op, negate=False):
    def lower(b, op):
        x, y = _operands_as(b, op, _promoted(op))
        out = b.node(onnx_op, [x, y])
        return [b.node("Not", [out]) if negate else out]
    return lower


def _add(b, op):
    x, y = _operands_as(b, op, op.out_dtype())
    alpha = op.attrs.get("alpha", 1)
    if alpha == 1:
        return [b.node("Add", [x, y])]
    if alpha == -1:
        return [b.node("Sub", [x, y])]
    return [b.node("Add", [x, b.node("Mul", [y, b.scalar(alpha, op.out_np())])])]


def _scalar_op(onnx_op, reverse=False, compare=False):
    """a <op> value (reverse: value <op> a): the value a constant of the dtype the op computes in."""
    def lower(b, op):
        value = op.attrs["value"]
        want = op.in_dtype(0) if compare else op.out_dtype()
        if compare and isinstance(value, float) and not want.startswith("float"):
            want = "float32"
        x = _cast(b, op.inputs[0], op.in_dtype(0), want)
        c = b.scalar(value, DTYPES[want][1])
        return [b.node(onnx_op, [c, x] if reverse else [x, c])]
    return lower


def _unary(*onnx_ops):
    def lower(b, op):
        x = _cast(b, op.inputs[0], op.in_dtype(0), op.out_dtype())
        for onnx_op in onnx_ops:
            x = b.node(onnx_op, [x])
        return [x]
    return lower


def _silu(b, x):
    return b.node("Mul", [x, b.node("Sigmoid", [x])])


def _gelu(b, op):
    x, dt = op.inputs[0], op.out_np()
    if op.attrs.get("tanh_approximation"):  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = b.node("Mul", [b.node("Mul", [x, x]), x])
        inner = b.node("Add", [x, b.node("Mul", [cube, b.scalar(0.044715, dt)])])
        t = b.node("Tanh", [b.node("Mul", [inner, b.scalar(math.sqrt(2 / math.pi), dt)])])
    else:  # 0.5 x (1 + erf(x / sqrt(2)))
        t = b.node("Erf", [b.node("Mul", [x, b.scalar(1 / math.sqrt(2), dt)])])
    half_x = b.node("Mul", [x, b.scalar(0.5, dt)])
    return [b.node("Mul", [half_x, b.node("Add", [t, b.scalar(1.0, dt)])])]


def _clamp(b, op):
    dt = op.out_np()
    low = b.scalar(op.attrs["min"], dt) if op.attrs.get("has_min") else ""
    high = b.scalar(op.attrs["max"], dt) if op.attrs.get("has_max") else ""
    return [b.node("Clip", [_cast(b, op.inputs[0], op.in_dtype(0), op.out_dtype()), low, high])]


def _reduce(onnx_op):
    def lower(b, op):
        dims = list(op.attrs.get("dims", ())) or list(range(len(op.in_sizes(0))))
        keep = len(op.out_sizes()) == len(op.in_sizes(0)) and len(op.in_sizes(0)) > 0
        x = _cast(b, op.inputs[0], op.in_dtype(0), op.out_dtype())
        return [b.reduce(onnx_op, x, dims, keep)]
    return lower


def _arg_reduce(onnx_op):
    def lower(b, op):
        dims = list(op.attrs.get("dims", ()))
        if len(dims) != 1:
            op.fail(f"over dims {dims}: the exporter lowers one dim")
        keep = len(op.out_sizes()) == len(op.in_sizes(0))
        return [b.node(onnx_op, [op.inputs[0]], axis=dims[0], keepdims=int(keep))]
    return lower


def _extremum_dim(reduce_op, arg_op):
    def lower(b, op):
        dims = list(op.attrs.get("dims", ()))
        if len(dims) != 1:
            op.fail(f"over dims {dims}: the exporter lowers one dim")
        keep = len(op.out_sizes()) == len(op.in_sizes(0))
        values = b.reduce(reduce_op, op.inputs[0], dims, keep)
        return [values, b.node(arg_op, [op.inputs[0]], axis=dims[0], keepdims=int(keep))]
    return lower


def _softmax(onnx_op):
    def lower(b, op):
        dims = list(op.attrs.get("dims", ()))
        x = _cast(b, op.inputs[0], op.in_dtype(0), op.out_dtype())
        return [b.node(onnx_op, [x], axis=dims[0])]
    return lower


def _copy(b, op):  # a copy into a new contiguous buffer (contiguous(), clone(), .to(dtype)): the value itself
    return [_cast(b, op.inputs[0], op.in_dtype(0), op.out_dtype()) if op.in_dtype(0) != op.out_dtype()
            else b.node("Identity", [op.inputs[0]])]


def _fill(b, op):
    value = b.scalar(op.attrs["value"], op.out_np())
    return [b.node("Expand", [value, b.ints(op.out_sizes())])]


def _arange(b, op):
    dt = op.out_np()
    start, step, n = op.attrs["start"], op.attrs["step"], op.out_sizes()[0]
    return [b.node("Range", [b.scalar(start, dt), b.scalar(start + n * step, dt), b.scalar(step, dt)])]


def _masked_fill(b, op):
    x, mask = op.inputs[0], op.inputs[1]
    return [b.node("Where", [mask, b.scalar(op.attrs["value"], op.out_np()), x])]


def _where(b, op):
    want = op.out_dtype()
    return [b.node("Where", [op.inputs[0], _cast(b, op.inputs[1], op.in_dtype(1), want),
                             _cast(b, op.inputs[2], op.in_dtype(2), want)])]


def _triangle(b, op):
    k = b.constant(np.asarray(op.attrs.get("diagonal", 0), np.int64), "diagonal")
    return [b.node("Trilu", [op.inputs[0], k], upper=int(op.attrs.get("upper", op.name == "triu")))]


def _embedding(b, op):  # weight [V, C], indices [...] -> [..., C]
    return [b.node("Gather", [op.inputs[0], op.inputs[1]], axis=0)]


def _index_select(b, op):
    return [b.node("Gather", [op.inputs[0], op.inputs[1]], axis=op.attrs["dim"])]


def _gather(b, op):
    return [b.node("GatherElements", [op.inputs[0], op.inputs[1]], axis=op.attrs["dim"])]


def _cat(b, op):
    return [b.node("Concat", _operands_as(b, op, op.out_dtype()), axis=op.attrs["dim"])]


def _cumsum(b, op):
    x = _cast(b, op.inputs[0], op.in_dtype(0), op.out_dtype())
    axis = b.constant(np.asarray(op.attrs["dim"], np.int64), "axis")
    return [b.node("CumSum", [x, axis], reverse=int(op.attrs.get("reverse", False)))]


def _addmm(b, op):  # beta * bias + alpha * (a @ m)
    dt = op.out_np()
    product = b.node("MatMul", [op.inputs[1], op.inputs[2]])
    if op.attrs.get("alpha", 1) != 1:
        product = b.node("Mul", [product, b.scalar(op.attrs["alpha"], dt)])
    bias = op.inputs[0]
    if op.attrs.get("beta", 1) != 1:
        bias = b.node("Mul", [bias, b.scalar(op.attrs["beta"], dt)])
    return [b.node("Add", [bias, product])]


# --- the fused ops, decomposed ------------------------------------------------------------------------------------

def _rms_norm(b, op):
    """y = x / sqrt(mean(x^2 over the normalized dims) + eps) * weight. Its second output (rstd, for the backward)
    is not computed."""
    x, dt = op.inputs[0], op.out_np()
    sizes = op.in_sizes(0)
    rows = int(np.prod(op.out_sizes(1))) if len(op.out_values) > 1 else None
    k = 1
    while rows is not None and k < len(sizes) and int(np.prod(sizes[:-k])) != rows:
        k += 1
    axes = list(range(len(sizes) - k, len(sizes)))
    mean_square = b.reduce("ReduceMean", b.node("Mul", [x, x]), axes, True)
    rstd = b.node("Reciprocal", [b.node("Sqrt", [b.node("Add", [mean_square, b.scalar(op.attrs["eps"], dt)])])])
    y = b.node("Mul", [x, rstd])
    if op.attrs.get("has_weight") and len(op.inputs) > 1 and op.inputs[1] is not None:
        y = b.node("Mul", [y, op.inputs[1]])
    return [y] + [None] * (len(op.out_values) - 1)


def _swiglu(b, op):  # silu(a) * b
    return [b.node("Mul", [_silu(b, op.inputs[0]), op.inputs[1]])]


def _rotary(b, x, x_sizes, cos, sin, time_dim, rotate_half, inverse, dt):
    """x [..., T, ..., D] rotated by the angles of cos, sin [T, D/2]: interleaved pairs (2i, 2i+1) or, with
    rotate_half, pairs (i, i + D/2)."""
    D, rank = x_sizes[-1], len(x_sizes)
    T = x_sizes[time_dim]
    table = [T] + [1] * (rank - 2 - time_dim) + [D // 2]  # cos/sin aligned with x's dims from the time dim on
    if not rotate_half:
        table = table + [1]
    cos, sin = b.reshape(cos, table), b.reshape(sin, table)
    if inverse:
        sin = b.node("Neg", [sin])
    if rotate_half:
        x1 = b.slice(x, [0], [D // 2], [rank - 1])
        x2 = b.slice(x, [D // 2], [D], [rank - 1])
    else:
        pairs = b.reshape(x, list(x_sizes[:-1]) + [D // 2, 2])
        x1 = b.slice(pairs, [0], [1], [rank])
        x2 = b.slice(pairs, [1], [2], [rank])
    first = b.node("Sub", [b.node("Mul", [x1, cos]), b.node("Mul", [x2, sin])])
    second = b.node("Add", [b.node("Mul", [x1, sin]), b.node("Mul", [x2, cos])])
    joined = b.node("Concat", [first, second], axis=-1)
    return joined if rotate_half else b.reshape(joined, list(x_sizes))


def _attention(b, q, k, v, q_sizes, k_sizes, scale, causal, dt, mask=None, mask_kind="none"):
    """softmax(q k^T * scale [+ mask], causal: key j > query i masked) v for q [..., Tq, D], k, v [..., Tk, D]."""
    rank = len(q_sizes)
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    scores = b.node("Mul", [b.node("MatMul", [q, b.node("Transpose", [k], perm=perm)]), b.scalar(scale, dt)])
    minus_inf = b.scalar(-np.inf, dt)
    if causal:  # key j > query i, from two Ranges (their lengths stay integers a dynamic shape can replace)
        zero, one = b.scalar(0, np.int64), b.scalar(1, np.int64)
        queries = b.node("Unsqueeze", [b.node("Range", [zero, b.scalar(q_sizes[-2], np.int64), one]), b.ints([1])])
        keys = b.node("Range", [zero, b.scalar(k_sizes[-2], np.int64), one])
        scores = b.node("Where", [b.node("Greater", [keys, queries]), minus_inf, scores])
    if mask_kind == "bool":
        scores = b.node("Where", [mask, scores, minus_inf])
    elif mask_kind == "additive":
        scores = b.node("Add", [scores, mask])
    return b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])


def _scaled_dot_product_attention(b, op):
    """q [B, H, Tq, D], k, v [B, H, Tk, D] (and a mask) -> [B, H, Tq, D]; the log-sum-exp output is not computed."""
    kind = op.attrs.get("mask", "none")
    mask = op.inputs[3] if len(op.inputs) > 3 else None
    if kind != "none" and mask is None:
        op.fail("has a mask attribute but no mask operand")
    out = _attention(b, op.inputs[0], op.inputs[1], op.inputs[2], op.in_sizes(0), op.in_sizes(1),
                     op.attrs["scale"], op.attrs["is_causal"], op.out_np(), mask, kind)
    return [out] + [None] * (len(op.out_values) - 1)


def _rotary_attention(b, op):
    """qkv [B, T, 3 H D], cos, sin [T, D/2] -> [B, T, H D]: q, k, v = qkv.view(B, T, 3, H, D).permute(2, 0, 3, 1, 4),
    q and k rotated, attention (causal when is_causal), heads joined. The log-sum-exp output is not computed."""
    B, T, width = op.in_sizes(0)
    H = op.attrs["heads"]
    D, dt = width // (3 * H), op.out_np()
    heads = b.node("Transpose", [b.reshape(op.inputs[0], [B, T, 3, H, D])], perm=[2, 0, 3, 1, 4])  # [3, B, H, T, D]
    q, k, v = (b.reshape(b.slice(heads, [i], [i + 1], [0]), [B, H, T, D]) for i in range(3))
    rotate_half = op.attrs.get("rotate_half", False)
    q = _rotary(b, q, (B, H, T, D), op.inputs[1], op.inputs[2], 2, rotate_half, False, dt)
    k = _rotary(b, k, (B, H, T, D), op.inputs[1], op.inputs[2], 2, rotate_half, False, dt)
    y = _attention(b, q, k, v, (B, H, T, D), (B, H, T, D), op.attrs["scale"], op.attrs["is_causal"], dt)
    out = b.reshape(b.node("Transpose", [y], perm=[0, 2, 1, 3]), [B, T, H * D])
    return [out] + [None] * (len(op.out_values) - 1)


def _rotary_position_embedding(b, op):
    return [_rotary(b, op.inputs[0], op.in_sizes(0), op.inputs[1], op.inputs[2], op.attrs.get("time_dim", 1),
                    op.attrs.get("rotate_half", False), op.attrs.get("inverse", False), op.out_np())]


def _cross_entropy(b, op):
    """logits [N, V] (or [N, V, ...]), class indices [N] -> the loss (reduction, ignore_index): ONNX's
    SoftmaxCrossEntropyLoss computes exactly this. Class-probability targets are not lowered; the log-sum-exp
    output is not computed."""
    if not op.in_dtype(1).startswith("int"):
        op.fail("with class-probability targets has no lowering (class indices only)")
    target = _cast(b, op.inputs[1], op.in_dtype(1), "int64")
    loss = b.node("SoftmaxCrossEntropyLoss", [op.inputs[0], target], reduction=op.attrs["reduction"],
                  ignore_index=op.attrs["ignore_index"])
    return [loss] + [None] * (len(op.out_values) - 1)


def _nll_loss(b, op):
    inputs = [op.inputs[0], _cast(b, op.inputs[1], op.in_dtype(1), "int64")]
    if op.attrs.get("weighted"):
        inputs.append(op.inputs[2])
    loss = b.node("NegativeLogLikelihoodLoss", inputs, reduction=op.attrs["reduction"],
                  ignore_index=op.attrs["ignore_index"])
    return [loss] + [None] * (len(op.out_values) - 1)


LOWERINGS = {
    "add": _add, "mul": _binary("Mul"), "div": _binary("Div"), "pow": _binary("Pow"),
    "maximum": _binary("Max"), "minimum": _binary("Min"), "matmul": _binary("MatMul"), "addmm": _addmm,
    "eq": _compare("Equal"), "ne": _compare("Equal", negate=True), "lt": _compare("Less"),
    "le": _compare("LessOrEqual"), "gt": _compare("Greater"), "ge": _compare("GreaterOrEqual"),
    "logical_and": _compare("And"), "logical_or": _compare("Or"),
    "add_scalar": _scalar_op("Add"), "mul_scalar": _scalar_op("Mul"), "div_scalar": _scalar_op("Div"),
    "pow_scalar": _scalar_op("Pow"), "rsub_scalar": _scalar_op("Sub", reverse=True),
    "rdiv_scalar": _scalar_op("Div", reverse=True), "rpow_scalar": _scalar_op("Pow", reverse=True),
    "eq_scalar": _scalar_op("Equal", compare=True), "lt_scalar": _scalar_op("Less", compare=True),
    "le_scalar": _scalar_op("LessOrEqual", compare=True), "gt_scalar": _scalar_op("Greater", compare=True),
    "ge_scalar": _scalar_op("GreaterOrEqual", compare=True),
    "neg": _unary("Neg"), "exp": _unary("Exp"), "log": _unary("Log"), "sqrt": _unary("Sqrt"),
    "rsqrt": _unary("Sqrt", "Reciprocal"), "reciprocal": _unary("Reciprocal"), "sigmoid": _unary("Sigmoid"),
    "tanh": _unary("Tanh"), "relu": _unary("Relu"), "abs": _unary("Abs"), "sin": _unary("Sin"),
    "cos": _unary("Cos"), "floor": _unary("Floor"), "ceil": _unary("Ceil"), "sign": _unary("Sign"),
    "logical_not": _unary("Not"), "silu": lambda b, op: [_silu(b, op.inputs[0])], "gelu": _gelu,
    "clamp_scalar": _clamp,
    "sum": _reduce("ReduceSum"), "amax": _reduce("ReduceMax"), "amin": _reduce("ReduceMin"),
    "logsumexp": _reduce("ReduceLogSumExp"), "argmax": _arg_reduce("ArgMax"), "argmin": _arg_reduce("ArgMin"),
    "max_dim": _extremum_dim("ReduceMax", "ArgMax"), "min_dim": _extremum_dim("ReduceMin", "ArgMin"),
    "softmax": _softmax("Softmax"), "log_softmax": _softmax("LogSoftmax"),
    "copy": _copy, "fill": _fill, "arange": _arange, "masked_fill": _masked_fill, "where": _where,
    "tril": _triangle, "triu": _triangle, "cat": _cat, "cumsum": _cumsum,
    "embedding": _embedding, "index_select": _index_select, "gather": _gather,
    "rms_norm": _rms_norm, "swiglu": _swiglu, "rotary_attention": _rotary_attention,
    "rotary_position_embedding": _rotary_position_embedding,
    "scaled_dot_product_attention": _scaled_dot_product_attention,
    "cross_entropy": _cross_entropy, "nll_loss": _nll_loss,
}
