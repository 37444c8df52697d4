"""Run under mpirun by tests/python/test_recompute_policy.py: DistributedDataParallel over LLaMA tiny with each
recompute mode (docs/recompute.md). Writes, per mode, a digest of each averaged gradient and how many times each
parameter's post-accumulate hook fired (DDP's buckets hang on those hooks) to OUT_DIR/recompute_rank<r>.json."""
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
dg.set_num_threads(1)
dg.set_context(deterministic=True)
result = {}
for mode in ["none", "full", "memory_bound", "memory_bound_and_qkv"]:
    dg.manual_seed(0)
    model = llama.Llama(llama.CONFIGS["tiny"])
    model.recompute_blocks(mode, last=True)
    ddp = dg.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)
    calls = [0] * len(list(model.parameters()))
    for i, p in enumerate(model.parameters()):
        p.register_post_accumulate_grad_hook(lambda _p, i=i: calls.__setitem__(i, calls[i] + 1))
    g = np.random.default_rng(10 + rank)
    data = g.integers(0, 256, size=(2, 33))
    x, y = dg.from_numpy(data[:, :-1].copy()), dg.from_numpy(data[:, 1:].copy())
    loss = ddp(x, y)
    loss.backward()
    result[mode] = {"grads": [hashlib.sha1(p.grad.numpy().tobytes()).hexdigest() for p in model.parameters()],
                    "calls": calls}
with open(os.path.join(out_dir, f"recompute_rank{rank}.json"), "w") as f:
    json.dump(result, f)
dist.destroy_process_group()
