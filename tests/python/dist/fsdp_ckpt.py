"""Run under mpirun (or alone) by tests/python/test_distributed.py: sharded checkpoints of fully_shard.
argv: OUT_DIR, save | load. save (2 ranks): trains a sharded LLaMA 2 steps, writes the sharded checkpoint (no
gathering) and, for reference, the whole state (full_state_dict and the optimizer's, gathered). load (1 rank
unsharded, or N ranks sharded): loads the sharded checkpoint and writes OUT_DIR/ckpt_load_w<N>_rank<r>.json: whether
the whole model and optimizer state equal the reference, and a step's loss after it."""
import json
import os
import sys

import numpy as np

import dygrad as dg
import dygrad.distributed as dist
from dygrad.distributed.fsdp import (full_optimizer_states, full_state_dict, fully_shard, load_sharded_checkpoint,
                                     save_sharded_checkpoint)
from dygrad.models import llama

out_dir, mode = sys.argv[1], sys.argv[2]
ranks_env = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
if ranks_env > 1:
    dist.init_process_group("mpi")
rank, world = (dist.get_rank(), dist.get_world_size()) if ranks_env > 1 else (0, 1)
dg.set_num_threads(1)
cfg = llama.LlamaConfig(n_layers=2, dim=32, n_heads=2, ffn_dim=64, seq_len=16, batch_size=2, dropout=0.0,
                        vocab_size=61)
ckpt = os.path.join(out_dir, "sharded")


def build(sharded):
    dg.manual_seed(123)  # not the saved values: the load must replace them
    model = llama.Llama(cfg)
    if sharded:
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    return model, dg.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)


def batch(step):
    g = np.random.default_rng(step)
    return dg.from_numpy(g.integers(0, 61, (2, 16))), dg.from_numpy(g.integers(0, 61, (2, 16)))


def whole_state(model, opt, sharded):
    params = full_state_dict(model) if sharded else dict(model.state_dict())
    states = full_optimizer_states(model, opt) if sharded else \
        [opt.state[p] for g in opt.param_groups for p in g["params"]]
    return params, states


if mode == "save":
    model, opt = build(True)
    for step in range(2):
        x, y = batch(step * 10 + rank)
        model(x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    save_sharded_checkpoint(ckpt, model, opt)
    params, states = whole_state(model, opt, True)
    if rank == 0:
        dg.save({"params": params, "states": states}, os.path.join(out_dir, "reference.pt"))
    files = sorted(os.listdir(ckpt))
    result = {"files": files}
else:
    sharded = world > 1
    model, opt = build(sharded)
    load_sharded_checkpoint(ckpt, model, opt)
    params, states = whole_state(model, opt, sharded)
    ref = dg.load(os.path.join(out_dir, "reference.pt"))
    result = {
        "params_equal": sorted(params) == sorted(ref["params"]) and
        all(dg.equal(params[k], ref["params"][k]) for k in params),
        "states_equal": len(states) == len(ref["states"]) and all(
            sorted(a) == sorted(b) and all(dg.equal(a[k], b[k]) for k in a) for a, b in zip(states, ref["states"])),
        "shard_rows": list(model.embed.weight.shape),
    }
    x, y = batch(99)
    loss = model(x, y)
    loss.backward()
    opt.step()
    result["loss"] = float(loss)
with open(os.path.join(out_dir, f"ckpt_{mode}_w{world}_rank{rank}.json"), "w") as f:
    json.dump(result, f)
if ranks_env > 1:
    dist.destroy_process_group()
