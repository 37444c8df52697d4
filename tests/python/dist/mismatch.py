"""Run by tests/python/test_distributed.py: the ranks call collectives that disagree (shapes, sizes on the
shared-memory path, dtypes, kinds); every rank must raise, naming each rank's call, with the default settings, and
agreeing calls before and after must work."""
import sys

import dygrad as dg
import dygrad.distributed as dist



def say(line):
    """One write per line: both ranks share the pipe, and print's separate newline write lets lines interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


dist.init_process_group("mpi")
rank = dist.get_rank()
say(f"rank {rank} check {dist.group.WORLD._handle.collective_check()}")
if sys.argv[1:] == ["setting"]:  # DYGRAD_COLLECTIVE_CHECK=0: the setting alone (the calls below would disagree)
    dist.destroy_process_group()
    sys.exit(0)
ok = dg.ones(4)
dist.all_reduce(ok)  # agreeing calls pass the check
cases = {
    "shape": lambda: dist.all_reduce(dg.ones(3 + rank)),
    "large": lambda: dist.all_reduce(dg.ones((1 << 18) * (1 + rank))),  # 1 MiB and 2 MiB: the shared-memory path
    "dtype": lambda: dist.all_reduce(dg.ones(5, dtype=dg.float32 if rank == 0 else dg.float64)),
    "kind": lambda: dist.all_reduce(dg.ones(5)) if rank == 0 else dist.broadcast(dg.ones(5), src=0),
    "view": lambda: dist.all_reduce(dg.ones(2, 3) if rank == 0 else dg.ones(3, 2)),
}
for name, call in cases.items():
    try:
        call()
        dg.synchronize()
        say(f"rank {rank} {name}: no error")
    except RuntimeError as e:
        say(f"rank {rank} {name}: raised: {e}")
after = dg.full((4,), float(rank))
dist.all_reduce(after)
say(f"rank {rank} first {ok.tolist()} after {after.tolist()}")
dist.destroy_process_group()
