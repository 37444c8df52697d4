"""dygrad.nn: modules and layers, PyTorch-aligned (state-dict keys match torch.nn exactly)."""
from . import functional, init, parallel, utils  # noqa: F401
from .layers import Dropout, Embedding, LayerNorm, Linear, ModuleList, RMSNorm, Sequential  # noqa: F401
from .module import Module  # noqa: F401
from .parameter import Parameter  # noqa: F401
