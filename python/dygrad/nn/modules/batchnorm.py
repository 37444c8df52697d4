"""torch.nn.modules.batchnorm: the classes of dygrad.nn that torch defines in this module (pickled torch models and
torch.serialization.safe_globals name them by this path). A name torch has here and dygrad lacks is missing."""

from ..norms import BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNorm, _NormBase  # noqa: F401

__all__ = ['BatchNorm1d', 'BatchNorm2d', 'BatchNorm3d']
