"""Run under mpirun by tests/python/test_distributed.py: DistributedDataParallel on a small MLP. Each rank trains
on its own micro-batches; rank 0 also replays the whole run in one process (each rank's micro-batches
accumulated, the ranks' gradients summed in rank order and divided by the world size) and writes both final
parameter sets to OUT_DIR/ddp_rank<r>.json."""
import contextlib
import json
import os
import sys

import numpy as np

import dygrad as dg
import dygrad.distributed as dist
import dygrad.nn as nn

out_dir, mode = sys.argv[1], sys.argv[2]  # plain | bucket_view | no_sync | unused | unused_error | rebuild | deterministic
#                                           | held | zero_in_place | twice | tied | unused_shared
dist.init_process_group("mpi")
if mode == "deterministic":  # more than two ranks: the rank-ordered all-reduce
    dg.set_context(deterministic=True)
rank, world = dist.get_rank(), dist.get_world_size()
dg.set_num_threads(1)


class Net(nn.Module):
    """twice: layer b is applied twice in one forward; tied: the input projection's weight is also the output
    head's (transposed), as tied embeddings; each parameter's gradient is then the sum of several uses'."""

    def __init__(self, unused=False, c_first=False, twice=False, tied=False):
        super().__init__()
        self.twice, self.tied = twice, tied
        if c_first:  # registered in an order backward does not follow: the buckets are rebuilt after step 1
            self.c = nn.Linear(64, 4)
        self.a = nn.Linear(16, 64)
        self.b = nn.Linear(64, 64)
        if not c_first:
            self.c = nn.Linear(64, 4)
        self.spare = nn.Linear(4, 4) if unused else None

    def forward(self, x):
        h = dg.tanh(self.b(dg.tanh(self.a(x))))
        if self.twice:
            h = dg.tanh(self.b(h))
        if self.tied:
            return self.c(h) + (h @ self.a.weight)[:, :4]
        return self.c(h)


def batch(step, r):
    g = np.random.default_rng(1000 * step + r)
    return dg.from_numpy(g.standard_normal((8, 16)).astype(np.float32)), dg.from_numpy(g.standard_normal((8, 4)).astype(np.float32))


def make(seed):
    dg.manual_seed(seed)
    return Net(unused=mode.startswith("unused"), c_first=(mode == "rebuild"), twice=mode in ("twice", "unused_shared"),
               tied=(mode == "tied"))


steps, accumulate = 4, (2 if mode == "no_sync" else 1)
model = make(rank)  # different seeds: DDP must broadcast rank 0's parameters
ddp = nn.parallel.DistributedDataParallel(
    model, bucket_cap_mb=0.01, gradient_as_bucket_view=(mode == "bucket_view"),
    find_unused_parameters=mode in ("unused", "unused_shared"))
opt = dg.optim.SGD(ddp.parameters(), lr=0.1)
names = {id(p): n for n, p in model.named_parameters()}
result = {"buckets": [], "grad_bases": [], "held_intact": []}
held = []  # mode held: the user keeps each step's .grad tensors (and a copy of their values) past the next step
try:
    for step in range(steps):
        for micro in range(accumulate):
            x, y = batch(step * accumulate + micro, rank)
            ctx = ddp.no_sync() if micro < accumulate - 1 else contextlib.nullcontext()
            with ctx:
                loss = ((ddp(x) - y) ** 2).mean()
                loss.backward()
        result["buckets"].append([[names[id(p)] for p in b.params] for b in ddp._buckets])
        # each .grad is its view of its bucket's buffer (dygrad's difference from torch, which copies back); the
        # next step fills that buffer again only once nothing else holds the .grads
        result["grad_bases"].append([[p.grad.data_ptr() - p.grad.storage_offset() * p.grad.element_size()
                                      for p in b.params if p.grad is not None] for b in ddp._buckets])
        result["held_intact"].append(all(dg.equal(g, c) for g, c in held))
        if mode == "held":
            held = [(p.grad, p.grad.clone()) for p in model.parameters() if p.grad is not None]
        opt.step()
        opt.zero_grad(set_to_none=(mode != "zero_in_place"))
except RuntimeError as e:
    result["error"] = str(e)
result["ddp"] = {n: p.tolist() for n, p in model.state_dict().items()}
result["keys"] = sorted(ddp.state_dict())

if rank == 0 and "error" not in result:
    ref = make(0)
    ref_opt = dg.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(steps):
        total = None
        for r in range(world):  # each rank's micro-batches accumulated, then the ranks summed in rank order
            for micro in range(accumulate):
                x, y = batch(step * accumulate + micro, r)
                (((ref(x) - y) ** 2).mean()).backward()
            grads = [None if p.grad is None else p.grad.clone() for p in ref.parameters()]
            total = grads if total is None else [None if g is None else t + g for t, g in zip(total, grads)]
            ref_opt.zero_grad()
        with dg.no_grad():
            for p, g in zip(ref.parameters(), total):
                p.grad = None if g is None else g / world
        ref_opt.step()
        ref_opt.zero_grad()
    result["reference"] = {n: p.tolist() for n, p in ref.state_dict().items()}
with open(os.path.join(out_dir, f"ddp_rank{rank}.json"), "w") as f:
    json.dump(result, f)
dist.destroy_process_group()
