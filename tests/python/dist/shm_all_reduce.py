"""Run under mpirun by tests/python/test_distributed.py: all_reduces large enough for the shared-memory path
(docs/distributed.md, "The shared-memory all-reduce"), on the world and on a subgroup, several in flight at once
beside MPI operations. Each result is written as the SHA-1 of its bytes to OUT_DIR/rank<r>.jsonl (argv[1]); the
test recomputes every result with torch, folding the ranks' inputs in rank order."""
import hashlib
import json
import os
import sys
from datetime import timedelta

import numpy as np

import dygrad as dg
import dygrad.distributed as dist

SIZES = (16384, 6149, 1000003)  # 64 KiB of float32 (the threshold), odd sizes, several chunks of a small slot
DTYPES = ("float32", "float64", "bfloat16", "float16")


def out(name, value):
    with open(os.path.join(sys.argv[1], f"rank{rank}.jsonl"), "a") as f:
        f.write(json.dumps({"check": name, "value": value}) + "\n")


def digest(t):
    """16-bit floats widen to float32 exactly, so equal digests mean bitwise equal results."""
    a = t.float().numpy() if t.dtype in (dg.bfloat16, dg.float16) else t.numpy()
    return hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()


def source(r, n, dtype):
    """Rank r's input (the test builds the same)."""
    return dg.from_numpy(np.random.default_rng(1000 * r + n).standard_normal(n).astype(np.float32)).to(
        getattr(dg, dtype))


dist.init_process_group(backend="mpi", timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
out("slot", dist.group.WORLD._handle.shared_memory_slot_bytes())

for n in SIZES:
    for dtype in DTYPES:
        for op in ("SUM", "AVG"):
            x = source(rank, n, dtype)
            dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
            out(f"{n} {dtype} {op}", digest(x))

# Gathered (DistributedDataParallel's buckets): the input is the concatenation of pieces, one of them empty,
# one a view into a larger tensor, one the output's own memory at its place; the output's old contents are not read.
for n in SIZES:
    for dtype in DTYPES:
        for op in ("SUM", "AVG"):
            x = source(rank, n, dtype)
            cuts = [0, 1, n // 3, n // 3, n // 2 + 7, n - 1, n]  # piece 2 is empty
            pieces = [x[a:b].clone() for a, b in zip(cuts, cuts[1:])]
            pieces[3] = dg.cat([x[:5], pieces[3]])[5:]  # a view at an offset into a larger tensor
            output = dg.full((n,), float("nan"), dtype=getattr(dg, dtype))
            output[n - 1:].copy_(pieces[5])
            pieces[5] = output[n - 1:]  # the output's own memory, at its place
            dist._all_reduce_gathered(output, pieces, op=getattr(dist.ReduceOp, op)).wait()
            out(f"gathered {n} {dtype} {op}", digest(output))

# Several in flight at once, shared-memory and MPI operations interleaved: each result is its own.
works, tensors = [], []
for i, n in enumerate((300000, 7, 50000, 3, 120000)):
    t = source(rank, n, "float32")
    tensors.append(t)
    works.append(dist.all_reduce(t, async_op=True))
    if i == 1:
        b = dg.full((5,), float(rank))
        works.append(dist.broadcast(b, src=world - 1, async_op=True))
for w in works:
    w.wait()
out("in flight", [digest(t) for t in tensors] + [b.tolist()])

# A subgroup of the first and last ranks has a window of its own.
sub = dist.new_group([0, world - 1])
if rank in (0, world - 1):
    x = source(rank, 200001, "float32")
    dist.all_reduce(x, group=sub)
    out("subgroup", digest(x))
    out("subgroup slot", sub._handle.shared_memory_slot_bytes())
dist.destroy_process_group()
