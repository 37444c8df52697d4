"""Run under mpirun by tests/python/test_distributed.py: ZeroRedundancyOptimizer (ZeRO-1) against the unsharded
optimizer under DistributedDataParallel, and the *_object collectives. Each rank writes OUT_DIR/zero_rank<r>.json.

mode: adamw | bucket_view | sgd | groups (two parameter groups, the second added after the first step)."""
import json
import os
import pickle
import sys

import numpy as np

import dygrad as dg
import dygrad.distributed as dist
import dygrad.nn as nn
from dygrad.distributed.optim import ZeroRedundancyOptimizer

out_dir, mode = sys.argv[1], sys.argv[2]
dist.init_process_group("mpi")
rank, world = dist.get_rank(), dist.get_world_size()
dg.set_num_threads(1)
result = {}

# -- the object collectives ------------------------------------------------------------------------------------------
gathered = [None] * world
dist.all_gather_object(gathered, {"rank": rank, "payload": list(range(rank * 3))})
result["all_gather_object"] = gathered
into = [None] * world if rank == 1 else None
dist.gather_object(("from", rank), into, dst=1)
result["gather_object"] = into
objects = ["a", {"b": 2}, 3.5] if rank == 0 else [None, None, None]
dist.broadcast_object_list(objects, src=0)
result["broadcast_object_list"] = objects
out = [None]
dist.scatter_object_list(out, [f"to {r}" for r in range(world)] if rank == 1 else None, src=1)
result["scatter_object_list"] = out[0]


# -- ZeRO-1 ---------------------------------------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 24)
        self.a = nn.Linear(24, 64)
        self.b = nn.Linear(64, 64)
        self.norm = nn.LayerNorm(64)
        self.head = nn.Linear(64, 50, bias=False)

    def forward(self, idx):
        h = dg.tanh(self.a(self.emb(idx)))
        return self.head(self.norm(dg.tanh(self.b(h))))


def batch(step, r):
    g = np.random.default_rng(1000 * step + r)
    return dg.from_numpy(g.integers(0, 50, (4, 8))), dg.from_numpy(g.integers(0, 50, (4, 8)))


def make_optimizer(params, zero):
    if mode == "sgd":
        cls, kw = dg.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)
    else:
        cls, kw = dg.optim.AdamW, dict(lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95))
    if zero:
        return ZeroRedundancyOptimizer(params, cls, parameters_as_bucket_view=(mode == "bucket_view"), **kw)
    return cls(params, **kw)


def train(zero, steps=6):
    dg.manual_seed(0)
    model = Net()
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    named = list(model.named_parameters())
    if mode == "groups":
        first = [p for n, p in named if not n.startswith("head")]
        opt = make_optimizer([{"params": first}], zero)
    else:
        opt = make_optimizer(model.parameters(), zero)
    sched = dg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    losses = []
    for step in range(steps):
        x, y = batch(step, rank)
        loss = nn.functional.cross_entropy(ddp(x).reshape(-1, 50), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        losses.append(float(loss))
        if mode == "groups" and step == 0:
            opt.add_param_group({"params": [p for n, p in named if n.startswith("head")], "lr": 1e-3})
    return model, opt, losses


def state_bytes(opt):
    total = 0
    for s in opt.state.values():
        for v in s.values():
            if isinstance(v, dg.Tensor) and v.numel() > 1:
                total += v.numel() * v.element_size()
    return total


dg.synchronize()
before = dg.memory_stats().get("allocated_bytes.optimizer_state", 0)
full_model, full_opt, full_losses = train(zero=False)
dg.synchronize()
full_alloc = dg.memory_stats().get("allocated_bytes.optimizer_state", 0) - before
full_bytes = state_bytes(full_opt)
full_state = full_opt.state_dict()
del full_opt
dg.synchronize()
before = dg.memory_stats().get("allocated_bytes.optimizer_state", 0)
zero_model, zero_opt, zero_losses = train(zero=True)
dg.synchronize()
result["alloc_ratio"] = (dg.memory_stats().get("allocated_bytes.optimizer_state", 0) - before) / full_alloc
result["losses_equal"] = zero_losses == full_losses
result["losses"] = [full_losses, zero_losses]
result["params_equal"] = all(dg.equal(p, q) for p, q in zip(full_model.parameters(), zero_model.parameters()))
result["state_ratio"] = state_bytes(zero_opt) / full_bytes
owner = {id(p): r for r, groups in enumerate(zero_opt._partition_parameters()) for g in groups for p in g["params"]}
result["owners"] = [owner[id(p)] for p in zero_model.parameters()]
result["shapes"] = [list(p.shape) for p in zero_model.parameters()]
result["lr"] = [g["lr"] for g in zero_opt.param_groups]
result["local_lr"] = [g["lr"] for g in zero_opt.optim.param_groups]

# consolidated on rank 1: torch's layout, the unsharded optimizer's values
try:
    zero_opt.state_dict()
    result["unconsolidated"] = "no error"
except RuntimeError as e:
    result["unconsolidated"] = str(e)
zero_opt.consolidate_state_dict(to=1)
if rank == 1:
    sd = zero_opt.state_dict()
    result["state_keys_equal"] = sorted(sd["state"]) == sorted(full_state["state"])
    result["state_values_equal"] = all(
        sorted(sd["state"][i]) == sorted(full_state["state"][i]) and
        all(dg.equal(sd["state"][i][k], full_state["state"][i][k]) for k in full_state["state"][i])
        for i in full_state["state"])
    result["param_group_ids"] = [g["params"] for g in sd["param_groups"]] == \
        [g["params"] for g in full_state["param_groups"]]
    blob = pickle.dumps(dg.save(sd, os.path.join(out_dir, "zero_state.pt")))
blob = [os.path.join(out_dir, "zero_state.pt")]
dist.broadcast_object_list(blob, src=1)

# the consolidated state loads into a new ZeRO optimizer (each rank its share) and into the unsharded one: two more
# steps of each stay bitwise equal
if mode != "groups":
    sd = dg.load(blob[0])
    again = make_optimizer(zero_model.parameters(), zero=True)
    again.load_state_dict(sd)
    ref_model = Net()
    ref_model.load_state_dict(zero_model.state_dict())
    ref_opt = make_optimizer(ref_model.parameters(), zero=False)
    ref_opt.load_state_dict(sd)
    ddp = nn.parallel.DistributedDataParallel(zero_model, bucket_cap_mb=0.01)
    ref_ddp = nn.parallel.DistributedDataParallel(ref_model, bucket_cap_mb=0.01)
    for step in range(6, 8):
        x, y = batch(step, rank)
        for m, o in ((ddp, again), (ref_ddp, ref_opt)):
            nn.functional.cross_entropy(m(x).reshape(-1, 50), y.reshape(-1)).backward()
            o.step()
            o.zero_grad()
    result["resumed_equal"] = all(dg.equal(p, q) for p, q in zip(zero_model.parameters(), ref_model.parameters()))

with open(os.path.join(out_dir, f"zero_rank{rank}.json"), "w") as f:
    json.dump(result, f)
dist.destroy_process_group()
