"""dygrad.onnx's errors (torch.onnx.errors' names): what the exporter raises (docs/onnx.md)."""

__all__ = ["OnnxExporterError", "UnsupportedOperatorError"]


class OnnxExporterError(RuntimeError):
    """The model cannot be exported: the capture found a host read or a problem, or a value has a layout the
    exporter cannot express."""


class UnsupportedOperatorError(OnnxExporterError):
    """An op the model issues has no ONNX lowering; the message names the op, its operands' shapes and dtypes and
    the Python line that issued it."""
