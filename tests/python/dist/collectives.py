"""Run under mpirun by tests/python/test_distributed.py: every collective of dygrad.distributed on each rank,
its results written as JSON lines ("check name -> value") to OUT_DIR/rank<r>.jsonl (argv[1]), which the test
compares with torch's and numpy's answers."""
import json
import os
import sys
from datetime import timedelta

import numpy as np

import dygrad as dg
import dygrad.distributed as dist


def out(name, value):
    if isinstance(value, dg.Tensor):
        value = value.float().tolist() if value.dtype in (dg.bfloat16, dg.float16) else value.tolist()
    with open(os.path.join(sys.argv[1], f"rank{rank}.jsonl"), "a") as f:
        f.write(json.dumps({"rank": rank, "check": name, "value": value}) + "\n")


def data(r, shape, dtype=np.float32):
    return np.random.default_rng(100 + r).standard_normal(shape).astype(dtype)


def source(r, dtype):
    """The all_reduce inputs (the test builds the same): small values, non-negative for uint8."""
    x = data(r, (5, 3)) * 4
    return np.abs(x) if dtype == "uint8" else x


dist.init_process_group(backend="mpi", timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
out("world", [rank, world, dist.is_initialized(), dist.get_backend()])
out("mca", {name: os.environ.get("OMPI_MCA_" + name) for name in dist.MPI_DEFAULTS})

for dtype in ("float32", "float64", "bfloat16", "float16", "int64", "int32", "uint8"):
    for op in ("SUM", "MAX", "MIN", "PRODUCT") + (("AVG",) if dtype.startswith(("float", "bfloat")) else ()):
        x = dg.from_numpy(source(rank, dtype)).to(getattr(dg, dtype))
        dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
        out(f"all_reduce {dtype} {op}", x)

b = dg.tensor([True, False, rank == 0, False])
dist.all_reduce(b, op=dist.ReduceOp.SUM)
out("all_reduce bool SUM", b)

# A non-blocking all_reduce overlapping compute enqueued after it; wait() orders the reads.
big = dg.from_numpy(data(rank, (1 << 16,)))
work = dist.all_reduce(big, async_op=True)
other = (dg.from_numpy(data(rank + 7, (256, 256))) @ dg.from_numpy(data(rank + 9, (256, 256)))).sum()
work.wait()
out("async all_reduce", [float(big.sum()), float(big[12345]), work.is_completed() or True])
out("compute beside it", float(other))

t = dg.from_numpy(data(rank, (4,)))
dist.broadcast(t, src=world - 1)
out("broadcast", t)

t = dg.from_numpy(data(rank, (6,)))
dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
out("reduce", t if rank == 0 else None)

gathered = dg.zeros(world * 3, 2)
dist.all_gather_into_tensor(gathered, dg.from_numpy(data(rank, (3, 2))))
out("all_gather_into_tensor", gathered)
parts = [dg.zeros(2, 2) for _ in range(world)]
dist.all_gather(parts, dg.from_numpy(data(rank, (2, 2))))
out("all_gather", [p.tolist() for p in parts])

scattered = dg.zeros(2, 3)
dist.reduce_scatter_tensor(scattered, dg.from_numpy(data(rank, (world * 2, 3))), op=dist.ReduceOp.SUM)
out("reduce_scatter_tensor", scattered)

if rank == 0:
    dist.send(dg.arange(5, dtype=dg.float64) * 3, dst=1, tag=4)
    w = dist.isend(dg.full((2,), 7.0), dst=1)
    w.wait()
elif rank == 1:
    r = dg.zeros(5, dtype=dg.float64)
    sender = dist.recv(r, src=0, tag=4)
    r2 = dg.zeros(2)
    w = dist.irecv(r2)
    w.wait()
    out("recv", [r.tolist(), sender, r2.tolist()])

# Recorded collectives re-run (issue 31): each run of a recorded comm_start makes a new Work from its attributes and
# the buffers as they are then, on every rank; comm_wait finds it by the launch's key.
acc = dg.from_numpy(data(rank, (5,)))
bc = dg.zeros(3)
peer = dg.zeros(2)
with dg._C._OpRecorder(keep=True) as rec:
    dist.all_reduce(acc)
    dist.broadcast(bc, src=0, async_op=True).wait()
    (dist.isend(peer, dst=1) if rank == 0 else dist.irecv(peer, src=0)).wait()
received = []
for k in range(3):
    if rank == 0:
        bc.fill_(10.0 + k)
        peer.fill_(20.0 + k)
    for i in range(len(rec.ops)):
        rec.replay(i)
    received.append([bc.tolist(), peer.tolist()])
out("replayed all_reduce", acc)
out("replayed broadcast and send", received)
out("recorded ops", [name for name, _, _ in rec.ops])
dg.synchronize()
out("executions left", dist.group.WORLD._handle.executions_registered())

sub = dist.new_group([0])
out("new_group", dist.get_world_size(sub) if sub is not dist.GroupMember.NON_GROUP_MEMBER else "not a member")
if sub is not dist.GroupMember.NON_GROUP_MEMBER:
    s = dg.ones(3) * 5
    dist.all_reduce(s, group=sub)
    out("subgroup all_reduce", s)

errors = []
for name, call in [
    ("non-contiguous", lambda: dist.all_reduce(dg.zeros(4, 4).t())),
    ("gather size", lambda: dist.all_gather_into_tensor(dg.zeros(3), dg.zeros(2))),
    ("avg int", lambda: dist.all_reduce(dg.zeros(2, dtype=dg.int64), op=dist.ReduceOp.AVG)),
    ("bad rank", lambda: dist.broadcast(dg.zeros(2), src=world)),
    ("twice", lambda: dist.init_process_group("mpi")),
]:
    try:
        call()
        errors.append([name, "no error"])
    except Exception as e:  # noqa: BLE001
        errors.append([name, type(e).__name__, str(e)])
out("errors", errors)

dist.barrier()
dist.destroy_process_group()
out("destroyed", dist.is_initialized())
