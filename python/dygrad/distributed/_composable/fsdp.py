"""torch.distributed._composable.fsdp: fully_shard's older path (stand-ins: no sharding yet)."""
from ..fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard  # noqa: F401
