"""Run under mpirun by tests/python/test_distributed.py: a DistributedDataParallel training step over a small LLaMA
(dropout, clipping, AdamW), eager and compiled with dygrad.jit (docs/jit.md), 12 steps each from the same start.
Writes, per rank, the digest of every parameter after each step and the compiled function's stats to
OUT_DIR/jit_rank<r>.json."""
import hashlib
import json
import os
import sys

import numpy as np

import dygrad as dg
import dygrad.distributed as dist
from dygrad.models import llama

out_dir = sys.argv[1]
dist.init_process_group("mpi")
rank = dist.get_rank()
cfg = llama.LlamaConfig(n_layers=2, dim=64, n_heads=4, ffn_dim=172, seq_len=16, batch_size=2, dropout=0.1)


def train(jit):
    dg.manual_seed(0)
    model = llama.Llama(cfg)
    ddp = dg.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.05)
    opt = dg.optim.AdamW(model.parameters(), lr=1e-3)

    def step(x, y):
        loss = ddp(x, y)
        loss.backward()
        dg.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    compiled = dg.jit(step) if jit else step
    g = np.random.default_rng(10 + rank)
    dg.manual_seed(100 + rank)
    digests = []
    for _ in range(12):
        data = g.integers(0, 256, size=(2, 17))
        compiled(dg.from_numpy(data[:, :-1].copy()), dg.from_numpy(data[:, 1:].copy()))
        digests.append(hashlib.sha1(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest())
    return digests, (compiled.stats if jit else {})


eager, _ = train(False)
jitted, stats = train(True)
with open(os.path.join(out_dir, f"jit_rank{rank}.json"), "w") as f:
    json.dump({"eager": eager, "jit": jitted, "stats": stats}, f)
dist.destroy_process_group()
