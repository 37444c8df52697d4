"""Run by tests/python/test_distributed.py through dygrad.distributed.run: rank 1 leaves before an all_reduce that
rank 0 is in (argv[1]: "return", its program ends normally; "exit", sys.exit(0); "destroy", it destroys the
group and goes on). Rank 0 must raise an error naming it long before the default 30-minute timeout, and rank 1's
exit must not wait for rank 0. argv[2] "large": a tensor large enough for the shared-memory all-reduce."""
import sys
import time

import dygrad as dg
import dygrad.distributed as dist



def say(line):
    """One write per line (both ranks share the pipe)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


dist.init_process_group("mpi")
rank = dist.get_rank()
warm = dg.ones(4)
dist.all_reduce(warm)  # one agreed operation first: the notice says rank 1 took part in it
warm.tolist()
if rank == 1:
    start = time.monotonic()
    if sys.argv[1] == "exit":
        sys.exit(0)
    if sys.argv[1] == "destroy":
        dist.destroy_process_group()
        say(f"rank 1 destroyed the group in {time.monotonic() - start:.1f} s")
        time.sleep(5)  # goes on with other work while rank 0 waits
else:
    x = dg.ones(1 << 20 if sys.argv[2:] == ["large"] else 8)
    start = time.monotonic()
    dist.all_reduce(x)
    try:
        x.tolist()
        say("no error")
    except RuntimeError as e:
        say(f"raised after {time.monotonic() - start:.1f} s: {e}")
