"""torch.distributed.fsdp: fully_shard and FullyShardedDataParallel (stand-ins: no sharding yet; the issue
"Distributed (2 of 2)" brings ZeRO)."""
from ..._not_provided import stand_in, stand_in_function

_WHY = "no parameter sharding (FSDP / ZeRO) yet"
FullyShardedDataParallel = stand_in("FullyShardedDataParallel", __name__, _WHY)
FSDPModule = stand_in("FSDPModule", __name__, _WHY)
MixedPrecisionPolicy = stand_in("MixedPrecisionPolicy", __name__, _WHY)
fully_shard = stand_in_function("torch.distributed.fsdp.fully_shard", _WHY)
OffloadPolicy = stand_in("OffloadPolicy", __name__, _WHY)
CPUOffloadPolicy = stand_in("CPUOffloadPolicy", __name__, _WHY)
