"""Run under mpirun by tests/python/test_distributed.py: a LLaMA whose step under DDP needs more memory than a limit
trains under fully_shard within it. argv: OUT_DIR, ddp | fsdp, the memory limit in bytes (0: none). Each rank writes
OUT_DIR/limit_<mode>_rank<r>.json: the peak reserved bytes, or the OutOfMemoryError."""
import json
import os
import sys

import numpy as np

import dygrad as dg
import dygrad.distributed as dist
import dygrad.nn as nn
from dygrad.distributed.fsdp import fully_shard
from dygrad.models import llama

out_dir, mode, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
dist.init_process_group("mpi")
rank = dist.get_rank()
dg.set_num_threads(1)
dg.memory.set_memory_limit(limit)
# parameters, gradients and AdamW's state dominate: 4 blocks of 0.8 M parameters, a batch of 1 x 16 tokens
cfg = llama.LlamaConfig(n_layers=4, dim=256, n_heads=4, ffn_dim=688, seq_len=16, batch_size=1, dropout=0.0,
                        vocab_size=256)
result = {}
try:
    dg.manual_seed(0)
    model = llama.Llama(cfg)
    if mode == "fsdp":
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        step_model = model
    else:
        step_model = nn.parallel.DistributedDataParallel(model)
    opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(4):
        g = np.random.default_rng(step + 10 * rank)
        x, y = dg.from_numpy(g.integers(0, 256, (1, 16))), dg.from_numpy(g.integers(0, 256, (1, 16)))
        loss = step_model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
    dg.synchronize()
    result = {"peak_reserved": dg.memory.max_memory_reserved(), "losses": losses}
except dg.OutOfMemoryError as e:
    result = {"oom": str(e)[:200]}
with open(os.path.join(out_dir, f"limit_{mode}_rank{rank}.json"), "w") as f:
    json.dump(result, f)
if "oom" in result:
    os._exit(0)  # the other rank may wait in a collective this one never reaches: leave without finalizing
dist.destroy_process_group()
