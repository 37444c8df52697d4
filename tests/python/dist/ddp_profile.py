"""Run by tests/python/test_distributed.py: DDP steps under dg.profiler on each rank; rank 0 writes what the
profiler saw of the communication (its ranges, the step breakdown, the advice) to OUT_DIR/profile.json."""
import json
import os
import sys

import numpy as np

import dygrad as dg
import dygrad.distributed as dist
import dygrad.nn as nn
from dygrad.profiler.advisor import advise
from dygrad.profiler.summary import build_summary

dist.init_process_group("mpi")
dg.set_num_threads(1)
dg.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 8))
ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.1)
opt = dg.optim.SGD(ddp.parameters(), lr=0.01)
rng = np.random.default_rng(dist.get_rank())
x = dg.from_numpy(rng.standard_normal((32, 64)).astype(np.float32))
with dg.profiler.profile() as prof:
    prof.step()
    for _ in range(3):
        loss = (ddp(x) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        dg.synchronize()
        prof.step()
result = prof.result
summary = build_summary(result, advice=False, peak=1.0)
if dist.get_rank() == 0:
    comm = [r for r in result.ranges if r.kind == "comm"]
    with open(os.path.join(sys.argv[1], "profile.json"), "w") as f:
        json.dump({"comm": [[r.name, r.begin_ns, r.end_ns, r.async_] for r in comm],
                   "buckets": len(ddp._buckets), "breakdown": summary["breakdown"],
                   "ops": sorted({o.name for o in result.ops}),
                   "advice": [a["rule"] for a in advise(result, summary)]}, f)
dist.destroy_process_group()
