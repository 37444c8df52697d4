"""torch.distributed._composable: the composable APIs' older home (fully_shard: the same as torch.distributed.fsdp)."""
