"""torch.nn.modules.normalization: the classes of dygrad.nn that torch defines in this module (pickled torch models and
torch.serialization.safe_globals name them by this path). A name torch has here and dygrad lacks is missing."""

from ..layers import LayerNorm, RMSNorm  # noqa: F401
from ..norms import GroupNorm  # noqa: F401

__all__ = ['LayerNorm', 'GroupNorm', 'RMSNorm']
