"""Run by tests/python/test_distributed.py with DG_DISTRIBUTED_DEBUG=DETAIL: the ranks all_reduce tensors of
different shapes; every rank must raise, naming both calls."""
import os

import dygrad as dg
import dygrad.distributed as dist

dist.init_process_group("mpi")
rank = dist.get_rank()
ok = dg.ones(4)
dist.all_reduce(ok)  # agreeing calls pass the check
x = dg.ones(3 + rank)
dist.all_reduce(x)
try:
    x.tolist()
    print(f"rank {rank} no error", flush=True)
except RuntimeError as e:
    print(f"rank {rank} raised: {e}", flush=True)
print(f"rank {rank} first {ok.tolist()}", flush=True)
dist.destroy_process_group()
