"""The cost of the cross-rank check of collectives (docs/distributed.md, "Calls that disagree"), in one process
per rank, check on and off alternating (A B B A), so launch-to-launch variation does not enter the ratio.

    python3 bench/collective_check.py [--config tiny] [--steps 16] [--sizes 1024,262144,6553600]

Prints, on rank 0 of 2 ranks: microseconds per all_reduce with and without the check at each size (float32
elements; the median of rounds of 50), the collectives per DDP training step, and the DDP step's median time with
and without the check (one thread per rank, as bench/ddp.py).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def worker(args):
    import numpy as np

    import dygrad as dg
    import dygrad.distributed as dist
    from dygrad.models import llama

    dist.init_process_group("mpi")
    dg.set_num_threads(1)
    rank = dist.get_rank()
    group = dist.group.WORLD._handle

    def set_check(on):
        dg.synchronize()
        group.set_collective_check(on)

    out = []
    for n in (int(s) for s in args.sizes.split(",")):
        x = dg.ones(n)
        per = {True: [], False: []}
        for i in range(args.rounds * 2):
            on = i % 4 in (0, 3)
            set_check(on)
            dist.barrier()
            t = time.perf_counter()
            for _ in range(50):
                dist.all_reduce(x)
            dg.synchronize()
            per[on].append((time.perf_counter() - t) / 50 * 1e6)
        on_us, off_us = statistics.median(per[True]), statistics.median(per[False])
        out.append(f"all_reduce {n} float32: {on_us:.1f} us with the check, {off_us:.1f} us without, "
                   f"+{on_us - off_us:.1f} us")
    c = llama.CONFIGS[args.config]
    dg.manual_seed(0)
    ddp = dg.nn.parallel.DistributedDataParallel(llama.Llama(c))
    opt = dg.optim.AdamW(ddp.parameters(), lr=3e-4)
    data = np.random.default_rng(rank).integers(0, c.vocab_size, size=(c.batch_size, c.seq_len + 1))
    x, y = dg.tensor(data[:, :-1].copy()), dg.tensor(data[:, 1:].copy())
    times = {True: [], False: []}
    ops = []
    for i in range(args.steps * 2 + 2):
        on = i % 4 in (0, 3)
        set_check(on)
        before = dg._C._comm_stats()["operations"]
        t = time.perf_counter()
        loss = ddp(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dg.synchronize()
        if i >= 2:  # after the warm-up steps (the first step rebuilds the buckets)
            times[on].append(time.perf_counter() - t)
            ops.append(dg._C._comm_stats()["operations"] - before)
    on_s, off_s = statistics.median(times[True]), statistics.median(times[False])
    out.append(f"ddp {args.config}: {statistics.median(ops):.0f} collectives per step; step {on_s * 1e3:.1f} ms with "
               f"the check, {off_s * 1e3:.1f} ms without: ratio {on_s / off_s:.4f} ({len(times[True])} steps each)")
    if rank == 0:
        print("\n".join(out), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--sizes", default="1024,262144,6553600")
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    from dygrad.distributed.run import mpirun_command
    forwarded = ["--config", args.config, "--steps", str(args.steps), "--rounds", str(args.rounds),
                 "--sizes", args.sizes]
    result = subprocess.run(mpirun_command(2, os.path.abspath(__file__), ["--worker"] + forwarded), text=True,
                            capture_output=True)
    sys.stdout.write(result.stdout)
    if result.returncode:
        sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
