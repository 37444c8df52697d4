"""Run by tests/python/test_distributed.py through dygrad.distributed.run: rank 1 dies before an all_reduce
(argv[1]: "kill", SIGKILL; "raise", an uncaught exception, whose exit must not wait in MPI_Finalize); rank 0
must raise an error naming it, long before the group's 60-second timeout. argv[2] "large": a tensor large enough
for the shared-memory all-reduce."""
import os
import signal
import sys
import time
from datetime import timedelta

import dygrad as dg
import dygrad.distributed as dist

dist.init_process_group("mpi", timeout=timedelta(seconds=60))
if dist.get_rank() == 1:
    time.sleep(0.5)
    if sys.argv[1] == "raise":
        raise ValueError("rank 1 fails in its own code")
    os.kill(os.getpid(), signal.SIGKILL)
x = dg.ones(1 << 20 if sys.argv[2:] == ["large"] else 8)
start = time.monotonic()
dist.all_reduce(x)
try:
    x.tolist()
    print("no error", flush=True)
except RuntimeError as e:
    print(f"raised after {time.monotonic() - start:.1f} s: {e}", flush=True)
os._exit(4)  # the group is unusable: leave without finalizing
