"""dygrad.onnx's exporter core: capture the forward under dygrad.jit's capture, then walk the captured records in
issue order, lowering each op (docs/onnx.md, "How it works").

What each captured buffer becomes: an argument's is a graph input; a fixed buffer is the initializer of the model's
parameter or buffer over that storage; an internal or escaping buffer is the ONNX tensor of the op that wrote it.
A value (a view: offset, sizes, strides) is cut from its buffer's tensor by _builder.lower_view.
"""
from onnx import helper

from .. import _C
from ..autograd import no_grad
from ..utils._pytree import tree_flatten
from . import _builder
from ._builder import Builder, dtype_name, lower_view, onnx_type
from ._lowering import LOWERINGS, Op
from .errors import OnnxExporterError, UnsupportedOperatorError


def _capture(model, args, kwargs):
    """Runs model(*args, **kwargs) once under a capture, in eval mode and without grad: (records, output leaves,
    tensor arguments)."""
    from . import _exporting
    tensors = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, _C.Tensor)]
    modules = list(model.modules()) if hasattr(model, "modules") else []
    training = [m.training for m in modules]
    for m in modules:
        m.training = False
    capture = _C._JitCapture(tensors)
    _exporting[0] = True
    try:
        try:
            with no_grad():
                out = model(*args, **kwargs)
        finally:
            capture.end()
            _exporting[0] = False
            for m, flag in zip(modules, training):
                m.training = flag
        leaves = [x for x in tree_flatten(out)[0] if isinstance(x, _C.Tensor)]
        if capture.cuts:
            reader, file, line = capture.cuts[0][1:]
            raise OnnxExporterError(f"[onnx.export] the forward reads a tensor's values on the host ({reader} at "
                                    f"{file}:{line}): an ONNX graph cannot run Python between its ops; move the "
                                    "read out of the forward")
        graph = capture.build(leaves)
        if graph is None:
            raise OnnxExporterError("[onnx.export] the forward cannot be captured as one graph: "
                                    + "; ".join(capture.problems))
        return graph.records(), leaves, tensors
    finally:
        capture.close()


def _named_state(model):
    """storage address -> [(name, tensor)] for the model's parameters, buffers and plain tensor attributes."""
    found, seen = {}, set()
    named = []
    if hasattr(model, "named_parameters"):
        named += list(model.named_parameters()) + list(model.named_buffers())
        for prefix, m in model.named_modules():
            named += [(f"{prefix}.{k}" if prefix else k, v) for k, v in vars(m).items()
                      if isinstance(v, _C.Tensor) and not k.startswith("_")]
    for name, t in named:
        if id(t) in seen:
            continue
        seen.add(id(t))
        found.setdefault(_C._storage_address(t), []).append((name, t))
    return found


def _describe(values, indices):
    return ", ".join("-" if i < 0 else f"{tuple(values[i][2])} {dtype_name(values[i][4])}" for i in indices)


class _Walk:
    """The state of one export: the ONNX name each buffer's contents have now, and how they are laid out."""

    def __init__(self, records, builder, state, arg_names, tensors):
        self.records, self.b, self.state = records, builder, state
        self.buffers, self.values = records["buffers"], records["values"]
        self.contents = {}  # buffer -> (ONNX name, (offset, sizes, strides)) of what was last written there
        self.views = {}  # value -> ONNX name (a value read twice is cut once)
        self.used_state = {}
        for i, t in enumerate(tensors):
            for bi, (kind, arg, _, _) in enumerate(self.buffers):
                if kind == "argument" and arg == i:
                    self.contents[bi] = (arg_names[i], (t.storage_offset(), tuple(t.shape), tuple(t.stride())))

    def _fixed(self, bi, value):
        """The initializer a fixed buffer's value reads: the model's tensor over that storage covering it."""
        _, offset, sizes, strides, _ = value
        address = self.buffers[bi][2]
        last = offset + sum((n - 1) * s for n, s in zip(sizes, strides) if n > 0)
        for name, t in self.state.get(address, []):
            start = t.storage_offset()
            if start <= offset and last < start + t.numel() and t.is_contiguous():
                if name not in self.used_state:
                    self.used_state[name] = t
                    self.b.initializer(name, t.detach().cpu().numpy())
                return name, (start, tuple(t.shape), tuple(t.stride()))
        raise OnnxExporterError(
            f"[onnx.export] a tensor of sizes {tuple(sizes)} read by the forward is neither an argument nor a "
            "parameter, buffer or tensor attribute of the model (a tensor from outside it): register it as a "
            "buffer")

    def read(self, vi, reader):
        if vi < 0:
            return None
        if vi in self.views:
            return self.views[vi]
        value = self.values[vi]
        bi = value[0]
        kind = self.buffers[bi][0]
        if kind == "fixed":  # per value: one storage may hold several of the model's tensors
            name, base_geometry = self._fixed(bi, value)
        elif bi in self.contents:
            name, base_geometry = self.contents[bi]
        else:
            raise OnnxExporterError(f"[onnx.export] {reader} reads a buffer no captured op wrote (data made on "
                                    "the host inside the forward?)")
        if name is None:
            raise OnnxExporterError(f"[onnx.export] {reader} reads an output the exporter does not compute (a "
                                    "statistic an op saves for its backward)")
        out = lower_view(self.b, name, base_geometry, value[1:4], onnx_type(value[4])[1])
        self.views[vi] = out
        return out

    def write(self, vi, name, writer):
        value = self.values[vi]
        bi = value[0]
        kind = self.buffers[bi][0]
        if kind in ("fixed", "argument"):
            what = "a parameter or buffer of the model" if kind == "fixed" else "an argument"
            raise OnnxExporterError(f"[onnx.export] {writer} writes into {what} in place: an exported graph has no "
                                    "state to update")
        _, offset, sizes, strides, dtype = value
        whole = _builder.numel(sizes) * onnx_type(dtype)[1]().itemsize == self.buffers[bi][3]
        if _builder.memory_order(sizes, strides) is None or (bi in self.contents and not whole):
            raise OnnxExporterError(f"[onnx.export] {writer} writes part of a buffer (offset {offset}, sizes "
                                    f"{tuple(sizes)}, strides {tuple(strides)}): in-place writes into views "
                                    "are not exported")
        self.contents[bi] = (name, (offset, tuple(sizes), tuple(strides)))
        self.views = {v: n for v, n in self.views.items() if self.values[v][0] != bi}
        if name is not None:
            self.views[vi] = name

    def op(self, record):
        name, _, attrs, inputs, outputs, file, line = record
        where = f"issued at {file}:{line}" if file else "issued from dygrad's own code"
        lower = LOWERINGS.get(name)
        if lower is None:
            raise UnsupportedOperatorError(
                f"[onnx.export] op '{name}' has no ONNX lowering in dygrad's exporter: inputs "
                f"({_describe(self.values, inputs)}) -> outputs ({_describe(self.values, outputs)}), {where} "
                f"(docs/onnx.md lists the ops it lowers)")
        reader = f"{name} ({where})"
        for vi in list(inputs) + list(outputs):
            if vi >= 0:
                onnx_type(self.values[vi][4])
        self.b.site = f"{name} {where}"
        op = Op(name, attrs, [self.read(vi, reader) for vi in inputs],
                [self.values[vi] if vi >= 0 else None for vi in inputs], [self.values[vi] for vi in outputs], where)
        produced = lower(self.b, op)
        for vi, out in zip(outputs, produced):
            self.write(vi, out, reader)


class Lowered:
    """One lowering of the forward at the arguments' sizes: the builder's nodes and initializers, the graph's input
    and output names, and the sizes and dtypes of the inputs and outputs."""

    def __init__(self, builder, input_names, inputs, output_names, outputs):
        self.builder, self.input_names, self.output_names = builder, input_names, output_names
        self.inputs = [(tuple(t.shape), t.dtype) for t in inputs]
        self.outputs = [(tuple(t.shape), t.dtype) for t in outputs]


def input_names_for(tensors, input_names, default_names):
    names = list(input_names or [])
    if len(names) > len(tensors):
        raise ValueError(f"[onnx.export] {len(names)} input_names for {len(tensors)} tensor arguments")
    defaults = default_names if len(default_names) == len(tensors) else [f"input_{i}" for i in range(len(tensors))]
    return names + defaults[len(names):]


def lower(model, args, kwargs, opset, input_names, output_names, default_names, dedupe=True):
    records, leaves, tensors = _capture(model, args, kwargs)
    names = input_names_for(tensors, input_names, default_names)
    b = Builder(opset, dedupe)
    for n in names:
        b.fresh(n)
    walk = _Walk(records, b, _named_state(model), names, tensors)
    for record in records["ops"]:
        walk.op(record)
    outputs = list(output_names or [])[:len(leaves)]
    defaults = ["output"] if len(leaves) == 1 else [f"output_{i}" for i in range(len(leaves))]
    outputs += defaults[len(outputs):]
    b.site = "graph output"
    for vi, out_name in zip(records["results"], outputs):
        produced = walk.read(vi, "the graph's output")
        b.nodes.append(helper.make_node("Identity", [produced], [out_name], name=b.fresh(f"node_{out_name}")))
    return Lowered(b, names, tensors, outputs, leaves)


def assemble(lowered, model, opset, input_dims=None, output_dims=None):
    """The ModelProto of a lowering; `input_dims`/`output_dims` (per tensor, per dim: an int, a name, or None)
    replace the example sizes where dims are dynamic."""
    b = lowered.builder
    b.prune(lowered.output_names)
    graph_inputs = [helper.make_tensor_value_info(n, onnx_type(dtype)[0], list(dims))
                    for n, (_, dtype), dims in zip(lowered.input_names, lowered.inputs,
                                                   input_dims or [s for s, _ in lowered.inputs])]
    graph_outputs = [helper.make_tensor_value_info(n, onnx_type(dtype)[0], list(dims))
                     for n, (_, dtype), dims in zip(lowered.output_names, lowered.outputs,
                                                    output_dims or [s for s, _ in lowered.outputs])]
    graph = helper.make_graph(b.nodes, type(model).__name__, graph_inputs, graph_outputs, b.initializers)
    from ..version import __version__
    return helper.make_model(graph, producer_name="dygrad", producer_version=__version__,
                             opset_imports=[helper.make_opsetid("", opset)])
