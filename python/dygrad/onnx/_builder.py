"""dygrad.onnx's graph builder: ONNX nodes, constants and initializers, and the lowering of strided views of a buffer
to Reshape/Slice/Transpose/Expand (docs/onnx.md, "Views").

Notation: a value is (offset, sizes, strides) in elements over a buffer; its base is the tensor that wrote (or is)
that buffer, contiguous: N elements.
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from .errors import OnnxExporterError

# dygrad dtype name -> (ONNX element type, NumPy dtype).
DTYPES = {
    "float32": (TensorProto.FLOAT, np.float32), "float64": (TensorProto.DOUBLE, np.float64),
    "float16": (TensorProto.FLOAT16, np.float16), "int64": (TensorProto.INT64, np.int64),
    "int32": (TensorProto.INT32, np.int32), "int16": (TensorProto.INT16, np.int16),
    "int8": (TensorProto.INT8, np.int8), "uint8": (TensorProto.UINT8, np.uint8), "bool": (TensorProto.BOOL, np.bool_),
}


def dtype_name(dtype):
    return str(dtype).rsplit(".", 1)[-1]


def onnx_type(dtype):
    name = dtype_name(dtype)
    if name not in DTYPES:
        raise OnnxExporterError(f"[onnx.export] dtype {name} has no ONNX mapping in dygrad's exporter "
                                f"(supported: {', '.join(DTYPES)})")
    return DTYPES[name]


def contiguous_strides(sizes):
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def is_contiguous(sizes, strides):
    return all(size == 1 or stride == want for size, stride, want in zip(sizes, strides, contiguous_strides(sizes)))


def memory_order(sizes, strides):
    """The dims from the largest stride to the smallest when the layout is dense (a permutation of a contiguous
    one, as elementwise ops give their outputs the layout of their inputs), else None."""
    order = sorted(range(len(sizes)), key=lambda d: -strides[d])
    ordered = [sizes[d] for d in order]
    return order if is_contiguous(ordered, [strides[d] for d in order]) else None


def numel(sizes):
    n = 1
    for size in sizes:
        n *= size
    return n


class Builder:
    """Collects the nodes and initializers of one ONNX graph. Constants are initializers, deduplicated by value.
    `site` is written into each node's doc_string: the dygrad op and the Python line it lowers."""

    def __init__(self, opset, dedupe=True):
        self.opset, self.dedupe = opset, dedupe
        self.nodes, self.initializers = [], []
        self.site = ""
        self._taken = set()
        self._constants = {}
        self._reshaped = {}  # the output of each Reshape node -> its input
        self.constant_names = set()  # without dedupe: the initializers made by constant() (not parameters)

    def fresh(self, hint):
        name, k = hint, 1
        while name in self._taken:
            name, k = f"{hint}_{k}", k + 1
        self._taken.add(name)
        return name

    def initializer(self, name, array):
        self._taken.add(name)
        self.initializers.append(numpy_helper.from_array(np.array(array, order="C"), name))
        return name

    def constant(self, array, hint="const"):
        """An initializer holding `array`: one per value, or one per call without `dedupe` (dynamic shapes compare
        the graphs lowered at several sizes constant by constant: docs/onnx.md, "Dynamic shapes")."""
        array = np.asarray(array)
        if not self.dedupe:
            name = self.initializer(self.fresh(hint), array)
            self.constant_names.add(name)
            return name
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            self._constants[key] = self.initializer(self.fresh(hint), array)
        return self._constants[key]

    def ints(self, values):
        return self.constant(np.asarray(list(values), dtype=np.int64), "ints")

    def scalar(self, value, np_dtype):
        """A zero-dim constant of `value`, converted as eager converts a scalar operand: a Python int wraps into an
        integral dtype (2**63 in int64 is -2**63, 300 in uint8 is 44: docs/dtypes.md, "Python ints beyond int64")."""
        if isinstance(value, int) and not isinstance(value, bool) and np.dtype(np_dtype).kind in "iu":
            value = np.asarray(value % (1 << 64), dtype=np.uint64).astype(np_dtype)
        return self.constant(np.asarray(value, dtype=np_dtype), "scalar")

    def node(self, op_type, inputs, outputs=1, **attrs):
        """Appends one node; returns its output name (or the list of them when outputs > 1)."""
        names = [self.fresh(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=self.fresh(f"node_{op_type}"),
                                           doc_string=self.site, **attrs))
        return names[0] if outputs == 1 else names

    def prune(self, outputs):
        """Drops the nodes nothing reads (views cut and then cut again, outputs of a lowering never used) and the
        initializers no remaining node reads."""
        needed, kept = set(outputs), []
        for node in reversed(self.nodes):
            if any(o in needed for o in node.output):
                kept.append(node)
                needed.update(i for i in node.input if i)
        self.nodes = kept[::-1]
        self.initializers = [t for t in self.initializers if t.name in needed]

    def reduce(self, op_type, x, axes, keepdims):
        """ReduceSum/ReduceMean/ReduceMax/ReduceLogSumExp over `axes`: the axes are an input from opset 13
        (ReduceSum) or 18 (the others), an attribute before."""
        axes_as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if axes_as_input:
            return self.node(op_type, [x, self.ints(axes)], keepdims=int(keepdims))
        return self.node(op_type, [x], axes=list(axes), keepdims=int(keepdims))

    def reshape(self, x, sizes):
        x = self._reshaped.get(x, x)  # a Reshape of a Reshape reads the first one's input
        out = self.node("Reshape", [x, self.ints(sizes)])
        self._reshaped[out] = x
        return out

    def slice(self, x, starts, ends, axes):
        return self.node("Slice", [x, self.ints(starts), self.ints(ends), self.ints(axes)])


def lower_view(b, base, base_geometry, geometry, np_dtype):
    """The ONNX tensor for the value `geometry` = (offset, sizes, strides) of a buffer whose contents are the
    tensor `base` laid out as `base_geometry`. A view equal to the base is the base; otherwise the base must be
    contiguous (N elements) and the view is cut from it flat:

        flat [N] -> Slice [rel, rel + n0 s0) -> Reshape [n0, s0/s1, ..., s(m-2)/s(m-1), s(m-1)]
             -> Slice each dim after the first to n1 .. n(m-1), the last to 1 -> Reshape [n0 .. n(m-1)]
             -> Transpose to the view's dim order -> Reshape with its size-1 dims -> Expand its stride-0 dims

    where n0 .. n(m-1) are the view's dims of size > 1 and stride > 0 sorted by stride (s0 > s1 > ...), each
    stride a multiple of the next and the dims not overlapping (s(j) >= n(j+1) s(j+1)): transposes, permutes,
    slices with steps, splits, reshapes of contiguous ranges and broadcasts all are. The last rows' region may
    run past the buffer's end: the flat tensor is then padded with zeros, which no element of the view reads."""
    base_offset, base_sizes, base_strides = base_geometry
    offset, sizes, strides = geometry
    sizes, strides = tuple(sizes), tuple(strides)
    if sizes == tuple(base_sizes) and offset == base_offset and all(
            size == 1 or a == c for size, a, c in zip(sizes, strides, base_strides)):
        return base
    if not is_contiguous(base_sizes, base_strides):  # dense in another dim order: its memory order first
        order = memory_order(base_sizes, base_strides)
        if order is None:
            raise OnnxExporterError(f"[onnx.export] a view (sizes {sizes}, strides {strides}) of a tensor that is "
                                    f"not dense (sizes {tuple(base_sizes)}, strides {tuple(base_strides)}): pass it "
                                    "contiguous")
        base = b.node("Transpose", [base], perm=order)
        base_sizes = [base_sizes[d] for d in order]
        base_strides = contiguous_strides(base_sizes)
    total, count, rel = numel(base_sizes), numel(sizes), offset - base_offset
    if count == 0:
        raise OnnxExporterError(f"[onnx.export] an empty view (sizes {sizes}) has no ONNX lowering here")
    if is_contiguous(sizes, strides):
        if rel == 0 and count == total:
            return b.reshape(base, sizes)
        return b.reshape(b.slice(b.reshape(base, [total]), [rel], [rel + count], [0]), sizes)
    kept = [d for d in range(len(sizes)) if sizes[d] != 1 and strides[d] != 0]
    order = sorted(kept, key=lambda d: -strides[d])
    ns, ss = [sizes[d] for d in order], [strides[d] for d in order]
    nested = all(s > 0 for s in ss) and all(
        ss[j] % ss[j + 1] == 0 and ss[j] >= ns[j + 1] * ss[j + 1] for j in range(len(ss) - 1))
    if not nested:
        raise OnnxExporterError(f"[onnx.export] a view with sizes {sizes} and strides {strides} (overlapping or "
                                "negative strides) has no ONNX lowering in dygrad's exporter")
    flat = b.reshape(base, [total])
    if not ns:  # one element, broadcast
        t = b.slice(flat, [rel], [rel + 1], [0])
    else:
        span = ns[0] * ss[0]
        if rel + span > total:
            zeros = b.node("Expand", [b.scalar(0, np_dtype), b.ints([rel + span - total])])
            flat = b.node("Concat", [flat, zeros], axis=0)
        region = b.slice(flat, [rel], [rel + span], [0]) if (rel, span) != (0, total) else flat
        grid = [ns[0]] + [ss[j] // ss[j + 1] for j in range(len(ss) - 1)] + [ss[-1]]
        t = b.reshape(region, grid)
        ends = ns[1:] + [1]
        if ends != grid[1:]:
            t = b.slice(t, [0] * len(ends), ends, list(range(1, len(grid))))
        t = b.reshape(t, ns)
        perm = [order.index(d) for d in kept]
        if perm != list(range(len(perm))):
            t = b.node("Transpose", [t], perm=perm)
    with_ones = [sizes[d] if d in kept else 1 for d in range(len(sizes))]
    if with_ones != ([sizes[d] for d in kept] if ns else [1]):
        t = b.reshape(t, with_ones)
    if with_ones != list(sizes):
        t = b.node("Expand", [t, b.ints(sizes)])
    return t
