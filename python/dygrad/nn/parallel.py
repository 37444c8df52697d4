"""dygrad.nn.parallel: DistributedDataParallel is importable (scripts import it unconditionally); the process
group and collectives exist (dygrad.distributed), the bucketed, backward-overlapping DDP does not yet."""


class DistributedDataParallel:
    def __init__(self, module, device_ids=None, *args, **kwargs):
        raise NotImplementedError("DistributedDataParallel is not implemented yet (dygrad.distributed has the "
                                  "collectives; see docs/distributed.md)")


class DataParallel(DistributedDataParallel):
    pass
