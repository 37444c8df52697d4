"""Run under mpirun by tests/python/test_distributed.py: DDP steps profiled on every rank, rank 1 made the straggler
(it sleeps before each forward), then one merged trace of both ranks (dg.profiler.export_merged_trace) written to
OUT_DIR/all_ranks.json with its summary in OUT_DIR/merged_rank<r>.json."""
import json
import os
import sys
import time

import numpy as np

import dygrad as dg
import dygrad.distributed as dist
import dygrad.nn as nn

out_dir = sys.argv[1]
dist.init_process_group("mpi")
rank = dist.get_rank()
dg.set_num_threads(1)
dg.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 8))
ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.05)
opt = dg.optim.SGD(ddp.parameters(), lr=0.01)
x = dg.from_numpy(np.random.default_rng(rank).standard_normal((16, 64)).astype(np.float32))
with dg.profiler.profile() as prof:
    for _ in range(4):
        if rank == 1:
            time.sleep(0.02)  # the straggler: 20 ms of host time before each step's collectives
        (ddp(x) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        dg.synchronize()
        prof.step()
summary = dg.profiler.export_merged_trace(prof, os.path.join(out_dir, "all_ranks.json"))
with open(os.path.join(out_dir, f"merged_rank{rank}.json"), "w") as f:
    json.dump(summary, f)
dist.destroy_process_group()
