"""torch.distributed._composable.fsdp: fully_shard's older path (the same functions as torch.distributed.fsdp)."""
from ..fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard  # noqa: F401
