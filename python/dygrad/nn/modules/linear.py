"""torch.nn.modules.linear: the classes of dygrad.nn that torch defines in this module (pickled torch models and
torch.serialization.safe_globals name them by this path). A name torch has here and dygrad lacks is missing."""

from ..layers import Identity, Linear  # noqa: F401


class NonDynamicallyQuantizableLinear(Linear):
    """A Linear (torch names MultiheadAttention's out_proj so; the name only matters to quantization)."""


__all__ = ['Identity', 'Linear', 'NonDynamicallyQuantizableLinear']
