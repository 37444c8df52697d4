"""Run under mpirun by tests/python/test_distributed.py: fully_shard (ZeRO-3, and ZeRO-2 with
reshard_after_forward=False) against DistributedDataParallel on a small LLaMA. Each rank writes
OUT_DIR/fsdp_rank<r>.json.

mode: zero3 | zero2 | clip (gradient clipping: the norm over every rank's shards) | accumulate (no gradient sync on
the first of two micro-batches) | mixed (bf16 parameters, fp32 reduction) | deterministic (run at 4 ranks:
deterministic mode's rank-ordered reduce-scatter against DDP's rank-ordered all-reduce) | recompute (every block's
activations recomputed in backward, under both) | jit (the sharded forward and backward under dg.jit: one
replayed graph, the all-gathers and reduce-scatters inside, bitwise)"""
import gc
import json
import os
import sys

import numpy as np

import dygrad as dg
import dygrad.distributed as dist
import dygrad.nn as nn
from dygrad.distributed.fsdp import MixedPrecisionPolicy, full_state_dict, fully_shard
from dygrad.models import llama

out_dir, mode, fused = sys.argv[1], sys.argv[2], sys.argv[3] == "fused"
dist.init_process_group("mpi")
if mode == "deterministic":
    dg.set_context(deterministic=True)
rank, world = dist.get_rank(), dist.get_world_size()
dg.set_num_threads(1)
cfg = llama.LlamaConfig(n_layers=2, dim=32, n_heads=2, ffn_dim=64, seq_len=16, batch_size=2, dropout=0.0,
                        vocab_size=61)  # 61: rows that do not split evenly (the last rank's shard is padded)
steps, micro = 4, (2 if mode == "accumulate" else 1)


def batch(step, r):
    g = np.random.default_rng(1000 * step + r)
    return (dg.from_numpy(g.integers(0, 61, (2, 16))), dg.from_numpy(g.integers(0, 61, (2, 16))))


def param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def grad_bytes(model):
    return sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)


def state_bytes(opt):
    return sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
               if isinstance(v, dg.Tensor) and v.numel() > 1)


def train(sharded):
    dg.manual_seed(0)  # every rank the same initial parameters
    model = llama.Llama(cfg, fused=fused)
    if mode == "recompute":
        model.recompute_blocks("full", last=True)
    if sharded:
        mp = MixedPrecisionPolicy(param_dtype=dg.bfloat16, reduce_dtype=dg.float32) if mode == "mixed" else \
            MixedPrecisionPolicy()
        for block in model.blocks:
            fully_shard(block, reshard_after_forward=(mode != "zero2"), mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        wrapped = model
    else:
        wrapped = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    opt = dg.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    losses, memory = [], {}

    def forward_backward(x, y):
        loss = wrapped(x, y)
        loss.backward()
        return loss.detach()
    sharded_step = dg.jit(forward_backward) if mode == "jit" and sharded else forward_backward
    for step in range(steps):
        for m in range(micro):
            x, y = batch(step * micro + m, rank)
            last = m == micro - 1
            if sharded:
                model.set_requires_gradient_sync(last)
                loss = sharded_step(x, y)
            else:
                if last:
                    loss = wrapped(x, y)
                    loss.backward()
                else:
                    with wrapped.no_sync():
                        loss = wrapped(x, y)
                        loss.backward()
        if mode == "clip":
            nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        if step == steps - 1:
            memory = {"params": param_bytes(model), "grads": grad_bytes(model)}
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
    memory["state"] = state_bytes(opt)
    if sharded and mode == "jit":
        memory["jit_stats"] = dict(sharded_step.stats)
    whole = full_state_dict(model) if sharded else dict(model.state_dict())
    return losses, memory, whole, model


ddp_losses, ddp_memory, ddp_params, _ = train(False)
fsdp_losses, fsdp_memory, fsdp_params, model = train(True)
result = {"ddp_losses": ddp_losses, "fsdp_losses": fsdp_losses,
          "keys_equal": sorted(ddp_params) == sorted(fsdp_params),
          "params_equal": all(dg.equal(ddp_params[k], fsdp_params[k]) for k in ddp_params),
          "params_max_diff": max(float((ddp_params[k].float() - fsdp_params[k].float()).abs().max())
                                 for k in ddp_params),
          "ratios": {k: fsdp_memory[k] / ddp_memory[k] for k in ddp_memory if k != "jit_stats"},
          "jit_stats": fsdp_memory.get("jit_stats"),
          "is_fsdp_module": type(model).__name__, "shard_shape": list(model.embed.weight.shape)}
# after a forward the blocks hold their gathered parameters only without reshard_after_forward (ZeRO-2); what
# autograd saved of them is a token that backward gathers again (ZeRO-3)
from dygrad.distributed import fsdp as fsdp_module  # noqa: E402
x, y = batch(50, rank)
gathered = []  # the blocks' all-gather buffers of this forward: who else holds them after it
issue = fsdp_module._Group.issue


def recording_issue(group):
    issue(group)
    if group is not model._fsdp_group and group.padded is not None:
        gathered.extend(b for b in group.padded if all(b is not g for g in gathered))


fsdp_module._Group.issue = recording_issue
loss = model(x, y)
fsdp_module._Group.issue = issue
dg.synchronize()
gc.collect()
# 1: only this list holds the buffer (ZeRO-3: what autograd saved of the weights is a token)
result["holders_after_forward"] = sorted({dg._C._storage_holders(b) for b in gathered})
result["gathered_after_forward"] = [b._fsdp_group.full is not None for b in model.blocks]
result["root_gathered_after_forward"] = model._fsdp_group.full is not None
# the memory report's communication category: exactly the gathered buffers still held (the root's, this test's
# list of the blocks')
groups = [model._fsdp_group] + [b._fsdp_group for b in model.blocks]
held = {dg._C._storage_address(b): b.numel() * b.element_size()
        for b in gathered + [b for g in groups if g.full is not None for b in g.padded]}
result["communication_after_forward"] = dg.memory_stats().get("allocated_bytes.communication", 0)
result["gathered_bytes_after_forward"] = sum(held.values())
loss.backward()
result["gathered_after_backward"] = [b._fsdp_group.full is not None for b in model.blocks]
model.zero_grad(set_to_none=True)
# eval without grad: the forward gathers and reshards, the same logits as the unsharded model
with dg.no_grad():
    plain = llama.Llama(cfg, fused=fused)
    plain.load_state_dict(fsdp_params)
    x, _ = batch(99, 0)
    result["eval_equal"] = bool(dg.equal(model(x).float(), plain(x).float())) if mode != "mixed" else None
# the profiler sees the all-gathers and reduce-scatters beside compute, exposed or hidden (the step breakdown)
from dygrad.profiler.summary import build_summary  # noqa: E402
opt2 = dg.optim.AdamW(model.parameters(), lr=1e-4)
with dg.profiler.profile(profile_memory=True) as prof:
    prof.step()
    x, y = batch(60, rank)
    model(x, y).backward()
    opt2.step()
    opt2.zero_grad(set_to_none=True)
    dg.synchronize()
    prof.step()
comm = sorted({r.name.split(" ")[0] for r in prof.result.ranges if r.kind == "comm"})
breakdown = build_summary(prof.result, advice=False, peak=1.0)["breakdown"]
result["profiled_comm"] = comm
result["profiled_communication_bytes"] = max(s.by_category["communication"] for s in prof.result.memory)
result["comm_ns"] = breakdown["buckets_ns"].get("exposed_comm", 0) + breakdown.get("overlapped_comm_ns", 0)
if mode == "deterministic":  # values whose sum depends on the association: rank order gives ((1e8 + 1) - 1e8) + 1 = 1
    crafted = dg.full((world * 1000,), [1e8, 1.0, -1e8, 1.0][rank])
    scattered = dg.empty(1000)
    dist.reduce_scatter_tensor(scattered, crafted)
    result["ordered_scatter"] = sorted(set(scattered.tolist()))
with open(os.path.join(out_dir, f"fsdp_rank{rank}.json"), "w") as f:
    json.dump(result, f)
dist.destroy_process_group()
