"""Run by tests/python/test_distributed.py through dygrad.distributed.run: both ranks all-reduce a tensor large
enough for the shared-memory path (a window each, freed at finalize, a blocking barrier), then rank 0 works on for
2 seconds before its program ends while rank 1's ends at once. Rank 1 waits a second at its exit barrier, gives up
and leaves MPI unfinalized, and its process lives on for 3 seconds more (its teardown: an exit hook registered
before dygrad.distributed's runs after it), so rank 0 arrives while rank 1 is still alive. Rank 0 must leave too,
not wait forever freeing the windows with a rank that has left MPI."""
import atexit
import os
import sys
import time

import dygrad as dg
import dygrad.distributed as dist

if os.environ.get("OMPI_COMM_WORLD_RANK") == "1":
    atexit.register(time.sleep, 3.0)
dist.init_process_group("mpi")
x = dg.ones(1 << 20)
dist.all_reduce(x)
assert x[0].item() == 2.0
if dist.get_rank() == 0:
    time.sleep(2.0)  # as dygrad.train's rank 0 with its last evaluation and checkpoint
sys.stdout.write(f"rank {dist.get_rank()} leaves\n")
sys.stdout.flush()
