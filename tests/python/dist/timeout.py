"""Run under mpirun by tests/python/test_distributed.py: rank 1 never joins the all_reduce, so rank 0's trips the
process group's timeout and raises at its next sync point; later collectives fail at once. argv[1] "large": a
tensor large enough for the shared-memory all-reduce, whose wait is on the other ranks' counters, not MPI."""
import os
import sys
import time
from datetime import timedelta

import dygrad as dg
import dygrad.distributed as dist

dist.init_process_group("mpi", timeout=timedelta(seconds=2))
if dist.get_rank() == 1:
    time.sleep(20)  # hangs from rank 0's point of view (mpirun ends it when rank 0 leaves)
    sys.exit(0)
x = dg.ones(1 << 20 if sys.argv[1:] == ["large"] else 8)
start = time.monotonic()
dist.all_reduce(x)
try:
    x.tolist()
    print("no error", flush=True)
except RuntimeError as e:
    print(f"raised after {time.monotonic() - start:.1f} s: {e}", flush=True)
try:
    dist.all_reduce(dg.ones(2))
    print("second: no error", flush=True)
except RuntimeError as e:
    print(f"second: {e}", flush=True)
sys.stdout.flush()
os._exit(3)  # MPI cannot be finalized with a collective pending: leave at once
