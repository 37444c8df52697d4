"""torch.distributed.tensor._utils: the DTensor shape helpers libraries import (stand-ins: no sharding yet)."""
from ..._not_provided import stand_in_function
from . import _WHY

compute_local_shape_and_global_offset = stand_in_function(
    "torch.distributed.tensor._utils.compute_local_shape_and_global_offset", _WHY)
