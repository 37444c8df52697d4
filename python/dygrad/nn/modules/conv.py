"""torch.nn.modules.conv: the classes of dygrad.nn that torch defines in this module (pickled torch models and
torch.serialization.safe_globals name them by this path). A name torch has here and dygrad lacks is missing."""

from ..conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d,  # noqa: F401
                    _ConvNd, _ConvTransposeNd)

__all__ = ['Conv1d', 'Conv2d', 'Conv3d', 'ConvTranspose1d', 'ConvTranspose2d', 'ConvTranspose3d']
