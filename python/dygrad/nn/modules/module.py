"""torch.nn.modules.module: the classes of dygrad.nn that torch defines in this module (pickled torch models and
torch.serialization.safe_globals name them by this path). A name torch has here and dygrad lacks is missing."""

from ..module import _EXTRA_STATE_KEY_SUFFIX, Module, _IncompatibleKeys  # noqa: F401

__all__ = ['Module']
