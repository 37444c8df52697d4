"""dygrad.nn.parallel: DistributedDataParallel is importable (scripts import it unconditionally) but needs a
process group, which dygrad does not have yet."""


class DistributedDataParallel:
    def __init__(self, module, device_ids=None, *args, **kwargs):
        raise NotImplementedError("DistributedDataParallel: dygrad has no distributed backend yet "
                                  "(see docs/pytorch-api.md)")


class DataParallel(DistributedDataParallel):
    pass
