"""Sharded data parallel throughput, dygrad against PyTorch 2.13, side by side in one run (issue 36), one thread per
rank: plain DDP, ZeRO-1 (ZeroRedundancyOptimizer over DDP), ZeRO-2 (fully_shard(reshard_after_forward=False)) and
ZeRO-3 (fully_shard), each on 2 ranks, plus each framework's single-process step.

    python3 bench/sharding.py [--config bench] [--steps 8] [--rounds 3] [--levels ddp,fsdp] [--jit]

--jit adds, per level, dygrad's step compiled with dg.jit (forward, backward and the optimizer's step replayed as one
Task with its collectives inside) beside the eager one (dygrad only: torch.compile does not take FSDP2 on gloo here).

dygrad's ranks run under mpirun (DistributedDataParallel, dygrad.distributed.optim.ZeroRedundancyOptimizer and
dygrad.distributed.fsdp.fully_shard over MPI); torch's under torch.multiprocessing on gloo (DDP,
torch.distributed.optim.ZeroRedundancyOptimizer over DDP, torch.distributed.fsdp.fully_shard on a CPU device mesh).
Both shard the same way: each block, then the root. The model is ../shared/bench/torch_ref.py's LLaMA for torch and
dygrad.models.llama for dygrad (the `bench` pairing of bench/train.py), AdamW lr 3e-4, batch of the config per
rank. Each round runs every (framework, level) once, the frameworks alternating first and second from round to
round; each figure is the median over rounds of the run's median step after one warm-up step.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_BENCH = os.path.join(HERE, "..", "..", "shared", "bench")
LEVELS = ("ddp", "zero1", "zero2", "fsdp")


# --- dygrad ----------------------------------------------------------------------------------------------------------
def dygrad_worker(cfg, steps, level, jit=False):
    import numpy as np

    import dygrad as dg
    import dygrad.distributed as dist
    from dygrad.models import llama

    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("mpi")
    dg.set_num_threads(1)
    rank = dist.get_rank() if world > 1 else 0
    c = llama.CONFIGS[cfg]
    dg.manual_seed(0)
    model = llama.Llama(c)
    if world > 1 and level in ("zero2", "fsdp"):
        from dygrad.distributed.fsdp import fully_shard
        for block in model.blocks:
            fully_shard(block, reshard_after_forward=level == "fsdp")
        fully_shard(model)
        train_model = model
    elif world > 1:
        train_model = dg.nn.parallel.DistributedDataParallel(model)
    else:
        train_model = model
    if world > 1 and level == "zero1":
        opt = dg.distributed.optim.ZeroRedundancyOptimizer(train_model.parameters(), dg.optim.AdamW, lr=3e-4)
    else:
        opt = dg.optim.AdamW(train_model.parameters(), lr=3e-4)
    rng = np.random.default_rng(rank)
    data = rng.integers(0, c.vocab_size, size=(c.batch_size, c.seq_len + 1))
    x, y = dg.tensor(data[:, :-1].copy()), dg.tensor(data[:, 1:].copy())
    def train_step(x, y):
        loss = train_model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()
    step = dg.jit(train_step) if jit else train_step
    times = []
    for _ in range(steps + (2 if jit else 0)):  # under --jit: the eager call and the capture are not timed
        t = time.perf_counter()
        loss = step(x, y)
        dg.synchronize()
        times.append(time.perf_counter() - t)
    if jit and step.stats["segment_calls"]:
        raise SystemExit(f"the {level} step ran as segments under dg.jit: {step.stats}")
    st = statistics.median(times[(3 if jit else 1):])
    if rank == 0:
        print(f"cfg {cfg} world {world} step_s {st:.4f} tokens_per_s {c.batch_size * c.seq_len * world / st:.0f} "
              f"loss {loss.item():.4f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


def run_dygrad(cfg, steps, world, level, jit=False):
    from dygrad.distributed.run import mpirun_command
    args = ["--worker", "--config", cfg, "--steps", str(steps), "--level", level] + (["--jit"] if jit else [])
    cmd = mpirun_command(world, __file__, args) if world > 1 else [sys.executable, __file__] + args
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    line = [l for l in out.stdout.splitlines() if l.startswith("cfg ")]
    if out.returncode != 0 or not line:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return float(dict(re.findall(r"(\w+) ([\d.]+)", line[-1]))["tokens_per_s"])


# --- torch -----------------------------------------------------------------------------------------------------------
def torch_rank(rank, world, cfg, steps, level, port, q):
    import torch
    import torch.distributed as tdist
    sys.path.insert(0, SHARED_BENCH)
    from torch_ref import CFGS, LLaMA

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if world > 1:
        tdist.init_process_group("gloo", rank=rank, world_size=world)
    L, d, h, f, V, T, B = CFGS[cfg]
    torch.manual_seed(0)
    m = LLaMA(L, d, h, f, V, T)
    if world > 1 and level in ("zero2", "fsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for block in m.blocks:
            fully_shard(block, mesh=mesh, reshard_after_forward=level == "fsdp")
        fully_shard(m, mesh=mesh, reshard_after_forward=level == "fsdp")
    elif world > 1:
        m = torch.nn.parallel.DistributedDataParallel(m)
    if world > 1 and level == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.AdamW, lr=3e-4)
    else:
        opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(rank)
    data = torch.randint(0, V, (B, T + 1), generator=g)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        loss = m(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    if rank == 0:
        q.put(B * T * world / statistics.median(times[1:]))
    if world > 1:
        tdist.destroy_process_group()


def run_torch(cfg, steps, world, level, port):
    """tokens/s of one torch run; a run whose ranks abort is retried once on another port (gloo's ranks here
    sometimes end with 'terminate called without an active exception' between runs; the retry is reported)."""
    import torch.multiprocessing as mp
    for attempt in range(2):
        q = mp.get_context("spawn").Queue()
        try:
            mp.start_processes(torch_rank, args=(world, cfg, steps, level, port + 1000 * attempt, q), nprocs=world,
                               start_method="spawn")
            return q.get()
        except mp.ProcessExitedException as e:
            if attempt:
                raise
            print(f"  torch {level} x{world}: {e}; retried once", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="bench")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--jit", action="store_true", help="also dygrad's step under dg.jit, per level")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--level", default="ddp", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return dygrad_worker(args.config, args.steps, args.level, args.jit)
    levels = [lv for lv in args.levels.split(",") if lv]
    if unknown := set(levels) - set(LEVELS):
        ap.error(f"unknown levels {sorted(unknown)}; choose from {LEVELS}")
    port = 29600
    frameworks = ("torch", "dygrad") + (("dygrad jit",) if args.jit else ())
    res = {(fw, lv): [] for fw in frameworks for lv in ["1 rank"] + levels}
    for r in range(args.rounds):
        order = frameworks if r % 2 == 0 else frameworks[::-1]
        for lv in ["1 rank"] + levels:
            world = 1 if lv == "1 rank" else 2
            for fw in order:
                port += 1
                tok = (run_torch(args.config, args.steps, world, lv, port) if fw == "torch"
                       else run_dygrad(args.config, args.steps, world, lv, jit=fw == "dygrad jit"))
                res[(fw, lv)].append(tok)
        print(f"round {r}: " + "; ".join(f"{lv} " + " ".join(f"{fw} {res[(fw, lv)][-1]:.0f}" for fw in frameworks)
                                         + " tok/s" for lv in ["1 rank"] + levels), flush=True)
    print(f"\ncfg {args.config}, 2 ranks x 1 thread, medians of {args.rounds} interleaved rounds (tokens/s):")
    jit_head = " dygrad dg.jit | dg.jit / eager |" if args.jit else ""
    print("| level | torch 2.13 (gloo) | dygrad (MPI) | dygrad / torch |" + jit_head)
    print("| --- | ---: | ---: | ---: |" + (" ---: | ---: |" if args.jit else ""))
    for lv in ["1 rank"] + levels:
        t, d = statistics.median(res[("torch", lv)]), statistics.median(res[("dygrad", lv)])
        ratio = statistics.median(a / b for a, b in zip(res[("dygrad", lv)], res[("torch", lv)]))
        tail = ""
        if args.jit:
            j = statistics.median(res[("dygrad jit", lv)])
            tail = f" {j:.0f} | {statistics.median(a / b for a, b in zip(res[('dygrad jit', lv)], res[('dygrad', lv)])):.2f} |"
        print(f"| {lv} | {t:.0f} | {d:.0f} | {ratio:.2f} |" + tail)


if __name__ == "__main__":
    main()
