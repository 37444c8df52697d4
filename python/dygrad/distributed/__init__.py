"""dygrad.distributed: torch.distributed's API over MPI (docs/distributed.md).

`init_process_group(backend="mpi")` (the default on the CPU; "gloo" is accepted as an alias so torch scripts run
unchanged) takes the rank and world size from MPI: launch with `mpirun -n N python3 script.py`. Each collective
is ordered on the compute stream (it reads its buffers after every op enqueued before it) and runs on dygrad's
communication thread, so compute enqueued after it overlaps it; reading its result waits for it. `async_op=True`
returns a Work whose `wait()` orders later ops after the collective without blocking the host."""
import atexit
import datetime
import json
import os
import sys
import time
import warnings

from .. import _C

__all__ = ["ReduceOp", "Backend", "GroupMember", "group", "ProcessGroup", "Work", "is_available", "is_initialized",
           "is_mpi_available", "is_gloo_available", "is_nccl_available", "is_torchelastic_launched",
           "init_process_group", "destroy_process_group", "get_rank", "get_world_size", "get_backend", "new_group",
           "get_group_rank", "get_global_rank", "get_process_group_ranks", "all_reduce", "broadcast", "reduce",
           "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "barrier", "send", "recv", "isend",
           "irecv", "monitored_barrier"]

default_pg_timeout = datetime.timedelta(minutes=30)  # torch's default for CPU process groups


class ReduceOp:
    """torch.distributed.ReduceOp: the reduction of all_reduce, reduce and reduce_scatter_tensor."""
    SUM = _C._ReduceOp.SUM
    AVG = _C._ReduceOp.AVG
    PRODUCT = _C._ReduceOp.PRODUCT
    MIN = _C._ReduceOp.MIN
    MAX = _C._ReduceOp.MAX
    RedOpType = _C._ReduceOp


class Backend(str):
    """torch.distributed.Backend: the names init_process_group accepts."""
    UNDEFINED = "undefined"
    MPI = "mpi"
    GLOO = "gloo"
    NCCL = "nccl"

    def __new__(cls, name):
        return str.__new__(cls, name.lower())


def _export_launch_environment():
    """RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE from OpenMPI's variables, for scripts written for torchrun
    (set only where absent: a torchrun-style environment wins)."""
    names = {"RANK": "OMPI_COMM_WORLD_RANK", "WORLD_SIZE": "OMPI_COMM_WORLD_SIZE",
             "LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_WORLD_SIZE": "OMPI_COMM_WORLD_LOCAL_SIZE"}
    for ours, ompi in names.items():
        if ompi in os.environ and ours not in os.environ:
            os.environ[ours] = os.environ[ompi]


_export_launch_environment()


class ProcessGroup:
    """A group of ranks: its communicator, and the global rank of each member."""

    def __init__(self, handle, backend):
        self._handle = handle
        self._backend = backend
        self._ranks = list(handle.world_ranks())

    def rank(self):
        return self._handle.rank()

    def size(self):
        return self._handle.size()

    def name(self):
        return self._backend

    def __repr__(self):
        return f"ProcessGroup(backend={self._backend!r}, rank={self.rank()}, size={self.size()})"


class GroupMember:
    WORLD = None          # the default group, once init_process_group has run
    NON_GROUP_MEMBER = object()  # what new_group returns on a rank it does not include


class group:  # noqa: N801 (torch's name)
    WORLD = None


class Work:
    """An operation in flight (async_op=True). wait() orders every later op after it (the host does not block,
    as with torch's NCCL backend); synchronize() or reading the result blocks."""

    def __init__(self, handle):
        self._handle = handle

    def wait(self, timeout=None):
        self._handle.wait_on_stream()
        return True

    def is_completed(self):
        return self._handle.is_completed()

    def is_success(self):
        return self._handle.is_completed() and not self._handle.failed()

    def exception(self):
        return RuntimeError(self._handle.error()) if self._handle.failed() else None

    def synchronize(self):
        """Blocks the host until the operation has finished (raising its error)."""
        self._handle.wait_on_stream()
        from .. import synchronize
        synchronize()

    def _source_rank(self):
        return self._handle.source()


_world = None        # ProcessGroup of every rank
_atexit_registered = False
_failing = False     # an uncaught exception is ending the process
_init_time = None    # perf_counter() at init_process_group (the communication totals' wall time)


def is_available():
    """True when dygrad was built with MPI."""
    return _C._mpi_built()


def is_mpi_available():
    return _C._mpi_built()


def is_gloo_available():
    """'gloo' is an alias of the MPI backend on the CPU."""
    return _C._mpi_built()


def is_nccl_available():
    return False


def is_torchelastic_launched():
    return "TORCHELASTIC_RUN_ID" in os.environ


def is_initialized():
    return _world is not None


def _seconds(timeout):
    if timeout is None:
        return default_pg_timeout.total_seconds()
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    raise TypeError(f"init_process_group: timeout must be a datetime.timedelta, got {type(timeout).__name__}")


def _backend_name(backend):
    name = "mpi" if backend is None else str(backend).lower()
    if name in ("mpi", "gloo", "cpu:gloo", "cpu:mpi", "undefined"):
        return "mpi"
    if "nccl" in name:
        raise RuntimeError(f"init_process_group: backend {backend!r} needs CUDA, which this dygrad build does not have; "
                           "use backend='mpi' (or 'gloo') on the CPU")
    raise ValueError(f"init_process_group: unknown backend {backend!r} (dygrad has 'mpi'; 'gloo' is an alias of it)")


# OpenMPI settings dygrad starts MPI with, unless the user chose otherwise (an OMPI_MCA_* variable, which is also
# how `mpirun --mca` reaches the ranks). docs/distributed.md, "OpenMPI settings".
MPI_DEFAULTS = {
    # A rank that waits for a message yields its core to compute instead of spinning on it.
    "mpi_yield_when_idle": "1",
    # Large messages between ranks on one machine through the shared-memory fragments (two copies) rather than
    # CMA's process_vm_readv (one copy): measured 3.0 ms against 9-11 ms for a 12.6 MiB all_reduce of 2 ranks
    # (tiny's gradients) on the 2-core VM this was tuned on.
    "btl_vader_single_copy_mechanism": "none",
}


def _mpi_environment_defaults():
    for name, value in MPI_DEFAULTS.items():
        os.environ.setdefault("OMPI_MCA_" + name, value)


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    """Starts the default process group over MPI: rank and world size come from MPI (mpirun); world_size and
    rank, when given, must agree with them. init_method and store are not needed by MPI and are ignored."""
    global _world, _atexit_registered
    if _world is not None:
        raise ValueError("trying to initialize the default process group twice!")
    _backend_name(backend)
    seconds = _seconds(timeout)
    _mpi_environment_defaults()  # read by MPI_Init, which _mpi_init_world calls
    handle = _C._mpi_init_world(seconds)
    if world_size not in (-1, None) and int(world_size) != handle.size():
        raise ValueError(f"init_process_group: world_size={world_size} but MPI started {handle.size()} processes "
                         "(launch with mpirun -n WORLD_SIZE)")
    if rank not in (-1, None) and int(rank) != handle.rank():
        raise ValueError(f"init_process_group: rank={rank} but MPI gave this process rank {handle.rank()}")
    _world = ProcessGroup(handle, "mpi")
    global _init_time
    _init_time = time.perf_counter()
    _set_threads_per_rank()
    GroupMember.WORLD = group.WORLD = _world
    if not _atexit_registered:  # runs before the stream's own exit hook (atexit is last-in, first-out)
        atexit.register(_finalize_at_exit)
        _atexit_registered = True
        previous = sys.excepthook

        def excepthook(kind, value, traceback):
            # An uncaught exception ends this rank: MPI_Finalize would wait for the others (which may be waiting
            # for this rank in a collective), so the exit skips it and the others see this rank die.
            global _failing
            _failing = True
            previous(kind, value, traceback)

        sys.excepthook = excepthook


def _set_threads_per_rank():
    """Ranks on one machine share its cores: each takes cores / local ranks threads (dg.set_num_threads after
    init_process_group chooses otherwise)."""
    from .. import set_num_threads
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
    if local > 1:
        set_num_threads(max(1, (os.cpu_count() or 1) // local))


def _write_comm_stats():
    """DYGRAD_COMM_STATS=PATH (set by `python3 -m dygrad.profiler linearity`): rank 0 writes its communication
    totals (operations, their time, the exposed part: compute blocked waiting for them) and the wall time since
    init_process_group, once, before MPI is finalised."""
    global _init_time
    path = os.environ.get("DYGRAD_COMM_STATS")
    if not path or _init_time is None or _world is None or _world.rank() != 0:
        return
    stats = dict(_C._comm_stats(), ranks=_world.size(), wall_s=time.perf_counter() - _init_time)
    _init_time = None
    with open(path, "w") as f:
        json.dump(stats, f)


def _finalize_at_exit():
    if _C._mpi_initialized() and not _failing:
        _write_comm_stats()
        try:
            _C._mpi_finalize()
        except Exception as e:  # a deferred op error at exit: report it, still leave MPI cleanly
            warnings.warn(f"dygrad.distributed: finalizing MPI at exit: {e}")


def destroy_process_group(group=None):
    """Destroys the default group (and every group made from it): waits for operations in flight and finalises
    MPI, which cannot be started again in the same process. A subgroup: forgotten (its communicator is freed
    with the world's)."""
    global _world
    if group is None or group is _world:
        if _world is None:
            raise ValueError("Default process group has not been initialized, please make sure to call "
                             "init_process_group.")
        _write_comm_stats()
        _C._mpi_finalize()
        _world = None
        GroupMember.WORLD = globals()["group"].WORLD = None


def _single_process_group():
    """A group of this process alone that needs no MPI (collectives return their input): tests and tools."""
    return ProcessGroup(_C._single_process_group(), "single")


def _group(g, name):
    if isinstance(g, ProcessGroup):
        return g
    if _world is None:
        raise ValueError("Default process group has not been initialized, please make sure to call "
                         "init_process_group.")
    if g is None or g is GroupMember.WORLD:
        return _world
    if g is GroupMember.NON_GROUP_MEMBER:
        return None
    if not isinstance(g, ProcessGroup):
        raise TypeError(f"{name}: group must be a ProcessGroup, got {type(g).__name__}")
    return g


def get_rank(group=None):
    g = _group(group, "get_rank")
    return -1 if g is None else g.rank()


def get_world_size(group=None):
    g = _group(group, "get_world_size")
    return -1 if g is None else g.size()


def get_backend(group=None):
    g = _group(group, "get_backend")
    return g._backend


def get_process_group_ranks(group):
    g = _group(group, "get_process_group_ranks")
    return list(g._ranks)


def get_group_rank(group, global_rank):
    g = _group(group, "get_group_rank")
    if global_rank not in g._ranks:
        raise ValueError(f"Global rank {global_rank} is not part of group {g}")
    return g._ranks.index(global_rank)


def get_global_rank(group, group_rank):
    g = _group(group, "get_global_rank")
    if not 0 <= group_rank < len(g._ranks):
        raise ValueError(f"Group rank {group_rank} is not part of group {g}")
    return g._ranks[group_rank]


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, device_id=None):
    """A group of the given global ranks (every rank of the world must call it, with the same list, as in torch).
    On a rank not listed it returns GroupMember.NON_GROUP_MEMBER."""
    world = _group(None, "new_group")
    _backend_name(backend)
    members = sorted(range(world.size())) if ranks is None else sorted(int(r) for r in ranks)
    if len(set(members)) != len(members):
        raise ValueError(f"new_group: ranks {ranks} contain duplicates")
    for r in members:
        if not 0 <= r < world.size():
            raise ValueError(f"new_group: rank {r} is out of range for a world of size {world.size()}")
    handle = world._handle.split(members)
    if handle is None:
        return GroupMember.NON_GROUP_MEMBER
    g = ProcessGroup(handle, "mpi")
    g._ranks = members
    return g


def _result(handle, async_op):
    return Work(handle) if async_op else None


def _check_host_tensors(name, g, tensors):
    """The collectives composed here refuse a device's tensor before making anything, with the message the
    collectives of the C++ groups give (distributed/comm.cpp check_tensor): the groups communicate host memory."""
    for argument, t in tensors:
        if not t.is_cpu:
            raise NotImplementedError(f"[{name}] the {g._backend} process group takes cpu tensors; got {argument} on "
                                      f"{t.device} (copy it to the host with .cpu() first)")


def _peer(g, global_rank, group_rank, name, what):
    if group_rank is not None:
        if global_rank is not None:
            raise ValueError(f"{name}: give {what} or group_{what}, not both")
        return int(group_rank)
    if global_rank is None:
        raise ValueError(f"{name}: {what} is required")
    return get_group_rank(g, int(global_rank)) if g is not _world else int(global_rank)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    g = _group(group, "all_reduce")
    if g is None:
        return None
    return _result(g._handle.all_reduce(tensor, op, async_op), async_op)


def _all_reduce_gathered(output, pieces, op=ReduceOp.SUM, group=None):
    """Asynchronously all-reduces the concatenation of `pieces` (contiguous tensors of output's dtype, flattened,
    in order) into `output`: DistributedDataParallel's buckets. The pieces are read by the communication thread
    (on one machine, copied straight into the shared-memory slot), so none is copied into the output first; they
    must not be modified until the returned Work has completed."""
    g = _group(group, "all_reduce")
    if g is None:
        return None
    return Work(g._handle.all_reduce_gathered(output, list(pieces), op, True))


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    g = _group(group, "broadcast")
    if g is None:
        return None
    root = _peer(g, src, group_src, "broadcast", "src")
    return _result(g._handle.broadcast(tensor, root, async_op), async_op)


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    g = _group(group, "reduce")
    if g is None:
        return None
    root = _peer(g, dst, group_dst, "reduce", "dst")
    return _result(g._handle.reduce(tensor, root, op, async_op), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    g = _group(group, "all_gather_into_tensor")
    if g is None:
        return None
    return _result(g._handle.all_gather_into_tensor(output_tensor, input_tensor, async_op), async_op)


from .._not_provided import stand_in_function as _stand_in_function  # noqa: E402

# Not over MPI yet (docs/pytorch-api.md): importable, raises NotProvidedError when called.
all_to_all_single = _stand_in_function("torch.distributed.all_to_all_single", "no all-to-all collective yet")


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Gathers into one buffer, then copies each rank's part into tensor_list (ops on the stream)."""
    from .. import empty
    g = _group(group, "all_gather")
    if g is None:
        return None
    _check_host_tensors("all_gather", g, [("tensor", tensor)] + [("tensor_list", t) for t in tensor_list])
    if len(tensor_list) != g.size():
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors for a group of size {g.size()}")
    for t in tensor_list:
        if t.shape != tensor.shape or t.dtype != tensor.dtype:
            raise ValueError(f"all_gather: every tensor of tensor_list must have the input's shape {tuple(tensor.shape)} "
                             f"and dtype {tensor.dtype}, got {tuple(t.shape)} {t.dtype}")
    flat = empty((g.size(),) + tuple(tensor.shape), dtype=tensor.dtype, device="cpu")
    work = g._handle.all_gather_into_tensor(flat, tensor.contiguous(), False)
    for i, t in enumerate(tensor_list):
        t.copy_(flat[i])
    return _result(work, async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    g = _group(group, "reduce_scatter_tensor")
    if g is None:
        return None
    return _result(g._handle.reduce_scatter_tensor(output, input, op, async_op), async_op)


# -- Python objects (torch's *_object collectives): pickled into uint8 tensors, their lengths exchanged first -------
def _object_bytes(obj):
    import pickle
    import numpy as np
    from .. import from_numpy
    data = pickle.dumps(obj)
    return from_numpy(np.frombuffer(data, dtype=np.uint8).copy()), len(data)


def _object_of(t, n):
    import pickle
    return pickle.loads(t[:n].numpy().tobytes())


def _gather_objects(g, obj):
    """Every rank's object, in group rank order (an all-gather of the lengths, then of the padded bytes)."""
    from .. import empty, tensor, zeros
    data, n = _object_bytes(obj)
    lengths = empty((g.size(),), dtype=_C.int64)
    g._handle.all_gather_into_tensor(lengths, tensor([n], dtype=_C.int64), False)
    lengths = [int(x) for x in lengths.tolist()]
    width = max(lengths)
    padded = zeros((width,), dtype=_C.uint8)
    padded[:n].copy_(data)
    out = empty((g.size(), width), dtype=_C.uint8)
    g._handle.all_gather_into_tensor(out, padded, False)
    return [_object_of(out[r], lengths[r]) for r in range(g.size())]


def all_gather_object(object_list, obj, group=None):
    """torch's: fills object_list (one entry per rank of the group) with every rank's picklable `obj`."""
    g = _group(group, "all_gather_object")
    if g is None:
        return None
    if len(object_list) != g.size():
        raise ValueError(f"all_gather_object: object_list has {len(object_list)} entries for a group of size "
                         f"{g.size()}")
    object_list[:] = _gather_objects(g, obj)
    return None


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    """torch's: on the destination rank, object_gather_list (one entry per rank) receives every rank's object."""
    g = _group(group, "gather_object")
    if g is None:
        return None
    root = _peer(g, 0 if dst is None and group_dst is None else dst, group_dst, "gather_object", "dst")
    if g.rank() == root and (object_gather_list is None or len(object_gather_list) != g.size()):
        raise ValueError(f"gather_object: on the destination rank object_gather_list must have {g.size()} entries")
    gathered = _gather_objects(g, obj)
    if g.rank() == root:
        object_gather_list[:] = gathered
    return None


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """torch's: the source rank's object_list replaces every other rank's, entry by entry (same length)."""
    from .. import empty, tensor
    g = _group(group, "broadcast_object_list")
    if g is None:
        return None
    root = _peer(g, 0 if src is None and group_src is None else src, group_src, "broadcast_object_list", "src")
    data, n = _object_bytes(list(object_list)) if g.rank() == root else (None, 0)
    length = tensor([n], dtype=_C.int64)
    g._handle.broadcast(length, root, False)
    n = int(length.item())
    buf = data if g.rank() == root else empty((n,), dtype=_C.uint8)
    g._handle.broadcast(buf, root, False)
    if g.rank() != root:
        received = _object_of(buf, n)
        if len(received) != len(object_list):
            raise ValueError(f"broadcast_object_list: the source sent {len(received)} objects, this rank's list has "
                             f"{len(object_list)} entries")
        object_list[:] = received
    return None


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None, group=None,
                        group_src=None):
    """torch's: rank r of the group receives the source's scatter_object_input_list[r] as its output list's
    first entry."""
    g = _group(group, "scatter_object_list")
    if g is None:
        return None
    if not isinstance(scatter_object_output_list, list) or len(scatter_object_output_list) < 1:
        raise ValueError("scatter_object_list: expected scatter_object_output_list to be a list of at least one "
                         "element")
    root = _peer(g, 0 if src is None and group_src is None else src, group_src, "scatter_object_list", "src")
    objects = [None] * g.size()
    if g.rank() == root:
        if scatter_object_input_list is None or len(scatter_object_input_list) != g.size():
            raise ValueError(f"scatter_object_list: the source's input list must have {g.size()} entries")
        objects = list(scatter_object_input_list)
    broadcast_object_list(objects, group_src=root, group=g)
    scatter_object_output_list[0] = objects[g.rank()]
    return None


def barrier(group=None, async_op=False, device_ids=None):
    """Blocks the host until every rank of the group has reached the barrier (after its earlier operations)."""
    g = _group(group, "barrier")
    if g is None:
        return None
    g._handle.barrier()
    return None


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    barrier(group)


def _send(tensor, dst, group, tag, group_dst, async_op):
    g = _group(group, "send")
    if g is None:
        return None
    peer = _peer(g, dst, group_dst, "send", "dst")
    return g._handle.send(tensor, peer, int(tag), async_op)


def _recv(tensor, src, group, tag, group_src, async_op):
    g = _group(group, "recv")
    if g is None:
        return None, g
    if src is None and group_src is None:
        peer = -1
    else:
        peer = _peer(g, src, group_src, "recv", "src")
    return g._handle.recv(tensor, peer, int(tag), async_op), g


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    _send(tensor, dst, group, tag, group_dst, False)


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Receives into tensor; returns the sender's global rank (waits for the message: the sender is known then)."""
    handle, g = _recv(tensor, src, group, tag, group_src, False)
    if handle is None:
        return -1
    from .. import synchronize
    synchronize()
    return g._ranks[handle.source()]


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    handle = _send(tensor, dst, group, tag, group_dst, True)
    return None if handle is None else Work(handle)


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    handle, _ = _recv(tensor, src, group, tag, group_src, True)
    return None if handle is None else Work(handle)


from . import device_mesh, fsdp, optim, tensor  # noqa: E402,F401  (device_mesh, fsdp, tensor: stand-ins)
