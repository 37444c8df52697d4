"""torch.distributed._composable: the composable APIs' older home (stand-ins: no sharding yet)."""
