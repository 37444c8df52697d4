"""Run under mpirun by tests/python/test_distributed.py: a LLaMA whose step under DDP needs more memory than a limit
trains under fully_shard within it. argv: OUT_DIR, ddp | zero1 | zero2 | fsdp, the memory limit in bytes (0: none). Each rank writes
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
    if mode in ("fsdp", "zero2"):
        for block in model.blocks:
            fully_shard(block, reshard_after_forward=mode == "fsdp")
        fully_shard(model)
        step_model = model
    else:
        step_model = nn.parallel.DistributedDataParallel(model)
    if mode == "zero1":
        opt = dist.optim.ZeroRedundancyOptimizer(model.parameters(), dg.optim.AdamW, lr=1e-3)
    else:
        opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(4):
        if step == 2:  # the steady state's peak (the estimate's): the optimizer's state exists from step 1 on
            dg.synchronize()
            result["first_steps_peak_allocated"] = dg.memory.max_memory_allocated()
            dg.memory.reset_peak_memory_stats()
        g = np.random.default_rng(step + 10 * rank)
        x, y = dg.from_numpy(g.integers(0, 256, (1, 16))), dg.from_numpy(g.integers(0, 256, (1, 16)))
        # each phase waited for (dg.memory.estimate's model: what the stream or the communication thread still
        # holds of a phase is not counted in the next; a host running ahead holds the in-flight collectives'
        # buffers on top, docs/distributed.md)
        loss = step_model(x, y)
        dg.synchronize()
        loss.backward()
        dg.synchronize()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dg.synchronize()
        losses.append(float(loss))
    dg.synchronize()
    result.update(peak_reserved=dg.memory.max_memory_reserved(), steady_peak_allocated=dg.memory.max_memory_allocated(),
                  losses=losses)
except dg.OutOfMemoryError as e:
    result = {"oom": str(e)[:200]}
with open(os.path.join(out_dir, f"limit_{mode}_rank{rank}.json"), "w") as f:
    json.dump(result, f)
if "oom" in result:
    os._exit(0)  # the other rank may wait in a collective this one never reaches: leave without finalizing
dist.destroy_process_group()
