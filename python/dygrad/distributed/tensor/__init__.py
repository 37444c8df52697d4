"""torch.distributed.tensor: DTensor and its placements. dygrad has no tensor sharding yet (issue "Distributed
(2 of 2)"): the placements are real descriptions (placement_types.py), while isinstance(x, DTensor) is False
and constructing a DTensor or distributing raises NotProvidedError."""
from ..._not_provided import stand_in, stand_in_function
from .placement_types import Partial, Placement, Replicate, Shard  # noqa: F401

_WHY = "no DTensor / tensor sharding yet"
DTensor = stand_in("DTensor", __name__, _WHY)
DeviceMesh = stand_in("DeviceMesh", __name__, _WHY)
distribute_tensor = stand_in_function("torch.distributed.tensor.distribute_tensor", _WHY)
distribute_module = stand_in_function("torch.distributed.tensor.distribute_module", _WHY)
init_device_mesh = stand_in_function("torch.distributed.tensor.init_device_mesh", _WHY)
