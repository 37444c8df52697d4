"""dygrad.distributed: what a single-process run of a torch training script touches (the imports, and the
probes nanoGPT-style scripts make before deciding not to use DDP). dygrad has no process-group backend yet,
so starting one raises; docs/pytorch-api.md lists it as missing."""


def is_available():
    return False


def is_initialized():
    return False


def _not_initialized(*args, **kwargs):
    raise ValueError("Default process group has not been initialized, please make sure to call "
                     "init_process_group.")


get_rank = get_world_size = barrier = all_reduce = all_gather = broadcast = reduce = _not_initialized


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    raise NotImplementedError("init_process_group: dygrad has no distributed backend yet (see docs/pytorch-api.md)")


def destroy_process_group(group=None):
    raise NotImplementedError("destroy_process_group: dygrad has no distributed backend yet")


class ReduceOp:
    SUM, PRODUCT, MIN, MAX, AVG = "sum", "product", "min", "max", "avg"
