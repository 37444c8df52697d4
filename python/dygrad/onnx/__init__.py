"""dygrad.onnx: export a model's forward as an ONNX model (torch.onnx.export's signature; docs/onnx.md).

The forward runs once, eagerly, under dygrad.jit's capture (no_grad, the model in eval mode); the captured graph's
records (jit/graph.h: buffers, values over them, ops in issue order) are walked in order and each op is lowered to
ONNX operators (_lowering.py), each strided view to Reshape/Slice/Transpose/Expand (_builder.py). Parameters and
buffers become initializers named as in the model (state_dict names), the tensor arguments the graph's inputs. The
model is written through the `onnx` package and checked with onnx.checker; onnxruntime runs it. It is also
`torch.onnx` under dygrad.as_torch.
"""
import inspect
import io
import os

from .. import _C
from .errors import OnnxExporterError, UnsupportedOperatorError

__all__ = ["export", "is_in_onnx_export", "OnnxExporterError", "UnsupportedOperatorError", "errors",
           "DEFAULT_OPSET"]

# torch 2.13's torch.onnx.export default (torch.onnx._constants.ONNX_DEFAULT_OPSET); 17 is the oldest written here.
DEFAULT_OPSET = 20
MIN_OPSET = 17

_exporting = [False]


def is_in_onnx_export():
    """True while dygrad.onnx.export runs the model's forward (torch.onnx.is_in_onnx_export)."""
    return _exporting[0]


def export(model, args=(), f=None, *, kwargs=None, verbose=None, input_names=None, output_names=None,
           opset_version=None, dynamo=True, external_data=True, dynamic_shapes=None, export_params=True,
           keep_initializers_as_inputs=False, dynamic_axes=None, training=None, do_constant_folding=True,
           optimize=True, custom_translation_table=None, report=False, verify=False, profile=False,
           dump_exported_program=False, artifacts_dir=".", operator_export_type=None, custom_opsets=None,
           export_modules_as_functions=False, autograd_inlining=True):
    """Writes `model(*args, **kwargs)`'s forward as an ONNX model to `f` (a path or a binary file-like object).

    Follows torch.onnx.export's signature. Returns None (what torch returns with dynamo=False; torch's dynamo
    path returns an ONNXProgram, which dygrad does not have). The graph has the example `args`' shapes, except the
    dims named by `dynamic_axes` ({input: {dim: name}} or {input: [dims]}) or `dynamic_shapes` ({input: {dim:
    name or Dim}} or one entry per input), whose sizes the graph computes from its inputs' shapes (docs/onnx.md,
    "Dynamic shapes"). Raises UnsupportedOperatorError naming an op without a lowering, its operands and the
    Python line that issued it."""
    import onnx

    if f is None:
        raise ValueError("[onnx.export] f must be a path or a binary file-like object (dygrad returns no "
                         "ONNXProgram)")
    if not export_params:
        raise NotImplementedError("[onnx.export] export_params=False is not supported: parameters are initializers")
    if keep_initializers_as_inputs:
        raise NotImplementedError("[onnx.export] keep_initializers_as_inputs=True is not supported")
    mode = getattr(training, "name", training)
    if mode in ("TRAINING", 2) or (mode in ("PRESERVE", 1) and getattr(model, "training", False)):
        raise NotImplementedError("[onnx.export] training graphs are not exported: the forward runs in eval mode "
                                  "(training=TrainingMode.EVAL, torch's default)")
    opset = DEFAULT_OPSET if opset_version is None else int(opset_version)
    if opset < MIN_OPSET or opset > onnx.defs.onnx_opset_version():
        raise ValueError(f"[onnx.export] opset_version {opset}: dygrad writes opsets {MIN_OPSET} to "
                         f"{onnx.defs.onnx_opset_version()}")
    args = args if isinstance(args, tuple) else (args,)
    kwargs = dict(kwargs or {})
    if args and isinstance(args[-1], dict) and not kwargs:  # torch's convention: a trailing dict is the kwargs
        args, kwargs = args[:-1], dict(args[-1])

    from ._export import assemble, lower
    default_names = _default_input_names(model, args, kwargs)
    if dynamic_axes or dynamic_shapes:
        from ._dynamic import lower_dynamic
        proto = lower_dynamic(model, args, kwargs, opset, input_names, output_names, default_names, dynamic_axes,
                              dynamic_shapes)
    else:
        proto = assemble(lower(model, args, kwargs, opset, input_names, output_names, default_names), model, opset)
    onnx.checker.check_model(proto)
    if verbose:
        print(onnx.helper.printable_graph(proto.graph))
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as out:
            out.write(proto.SerializeToString())
    elif isinstance(f, io.IOBase) or hasattr(f, "write"):
        f.write(proto.SerializeToString())
    else:
        raise TypeError(f"[onnx.export] f must be a path or a binary file-like object, got {type(f).__name__}")
    return None


def _default_input_names(model, args, kwargs):
    """The forward's parameter names for the tensor arguments (torch's dynamo exporter names inputs so)."""
    forward = getattr(model, "forward", model)
    try:
        parameters = [p for p in inspect.signature(forward).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        parameters = []
    names = []
    for i, a in enumerate(args):
        base = parameters[i].name if i < len(parameters) else f"input_{i}"
        if isinstance(a, _C.Tensor):
            names.append(base)
        elif isinstance(a, (list, tuple)):
            names.extend(f"{base}_{j}" for j, x in enumerate(a) if isinstance(x, _C.Tensor))
    names.extend(k for k, v in kwargs.items() if isinstance(v, _C.Tensor))
    return names


from . import errors  # noqa: E402,F401  (torch.onnx.errors)
