"""Run under mpirun by tests/python/test_distributed.py: tests/python/dist/fsdp_limit.py's model trained by DDP under
the profiler; the advisor's sharding rule without a memory limit (model state dominates the peak) and with a limit
just under the measured peak (the level it suggests). Rank 0 writes OUT_DIR/sharding_advice.json."""
import json
import os
import sys

import numpy as np

import dygrad as dg
import dygrad.distributed as dist
import dygrad.nn as nn
from dygrad.models import llama
from dygrad.profiler.summary import build_summary

out_dir = sys.argv[1]
dist.init_process_group("mpi")
rank = dist.get_rank()
dg.set_num_threads(1)
cfg = llama.LlamaConfig(n_layers=4, dim=256, n_heads=4, ffn_dim=688, seq_len=16, batch_size=1, dropout=0.0,
                        vocab_size=256)
dg.manual_seed(0)
model = llama.Llama(cfg)
opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
x = dg.zeros((1, 16), dtype=dg.int64)
estimate = dg.memory.estimate(model, (x, x), optimizer=opt, steps=2)  # as the training CLI does before profiling
ddp = nn.parallel.DistributedDataParallel(model)
with dg.profiler.profile(profile_memory=True) as prof:
    for step in range(4):
        g = np.random.default_rng(step + 10 * rank)
        x, y = dg.from_numpy(g.integers(0, 256, (1, 16))), dg.from_numpy(g.integers(0, 256, (1, 16)))
        loss = ddp(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        prof.step()
    dg.synchronize()


def sharding_advice():
    summary = build_summary(prof.result, model=model, optimizer=opt, memory_estimate=estimate, peak=1.0)
    return summary, [a for a in summary["advice"] if a["rule"] == "sharding"]


summary, free = sharding_advice()
peak = summary["memory"]["peak_allocated"]
limit = int(peak / 0.95)  # training fits, but above the headroom suggest_sharding keeps (90%)
dg.set_memory_limit(limit)
_, limited = sharding_advice()
dg.set_memory_limit(None)
if rank == 0:
    with open(os.path.join(out_dir, "sharding_advice.json"), "w") as f:
        json.dump({"sharding": summary["memory"]["sharding"], "peak": peak, "limit": limit,
                   "at_peak": summary["memory"]["at_peak"], "free": free, "limited": limited}, f)
dist.destroy_process_group()
