"""Data-parallel throughput and linearity, dygrad (DistributedDataParallel over MPI) against PyTorch 2.13 DDP
(gloo, ../shared/bench/torch_ddp.py), side by side in one run, one thread per rank.

    python3 bench/ddp.py [--config tiny] [--steps 8] [--rounds 3]

Each round runs, in this order: torch 1 rank, dygrad 1 rank, torch 2 ranks, dygrad 2 ranks, dygrad 2 ranks with
every step under no_sync() (no communication: step(DDP) - step(no_sync) is the cost of communication), and
dygrad 2 ranks alternating DDP and no_sync steps in one process (A B B A ...). Each figure is the median over
rounds of the run's median step after one warm-up step; linearity is tokens/s(2 ranks) / (2 x tokens/s(1 rank)) of
the same framework in the same round. The communication cost is printed both ways: from the separate DDP and
no_sync runs, and from the alternating run, whose two kinds of step share one process (its memory placement and
the machine's state at the time), so launch-to-launch variation does not enter it.

--one-core-baseline adds, in each round, both frameworks' 1-rank runs confined to one core (sched_setaffinity,
inherited by the process that trains): each of the 2 ranks has one core, and a lone rank's host, stream and
communication threads would otherwise spread over the idle second core. Both linearities are printed.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_DDP = os.path.join(HERE, "..", "..", "shared", "bench", "torch_ddp.py")


def dygrad_worker(cfg, steps, no_sync, bucket_cap_mb=None, bucket_view=False, alternate=False):
    import contextlib

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
    ddp = (dg.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=bucket_view)
           if world > 1 else model)
    opt = dg.optim.AdamW(ddp.parameters(), lr=3e-4)
    rng = np.random.default_rng(rank)
    data = rng.integers(0, c.vocab_size, size=(c.batch_size, c.seq_len + 1))
    x, y = dg.tensor(data[:, :-1].copy()), dg.tensor(data[:, 1:].copy())
    times, kinds = [], []
    for i in range(steps * (2 if alternate else 1)):
        # alternate: A B B A, so neither kind always follows the other
        skip = (i % 4 in (1, 2)) if alternate else no_sync
        t = time.perf_counter()
        with (ddp.no_sync() if skip and world > 1 else contextlib.nullcontext()):
            loss = ddp(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
        dg.synchronize()
        times.append(time.perf_counter() - t)
        kinds.append(skip)
    if alternate:
        ddp_s = statistics.median(t for t, k in zip(times[2:], kinds[2:]) if not k)
        ns_s = statistics.median(t for t, k in zip(times[2:], kinds[2:]) if k)
        if rank == 0:
            print(f"cfg {cfg} world {world} alternate ddp_step_s {ddp_s:.4f} no_sync_step_s {ns_s:.4f}", flush=True)
        dist.destroy_process_group()
        return
    st = statistics.median(times[1:])
    if rank == 0:
        print(f"cfg {cfg} world {world} no_sync {int(no_sync)} step_s {st:.4f} "
              f"tokens_per_s {c.batch_size * c.seq_len * world / st:.0f} loss {loss.item():.4f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


class one_core:
    """Confines this process and what it starts to CPU 0 for the block."""
    def __enter__(self):
        self.old = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(self.old)})

    def __exit__(self, *exc):
        os.sched_setaffinity(0, self.old)


def run_dygrad(cfg, steps, world, no_sync=False, extra=(), alternate=False):
    from dygrad.distributed.run import mpirun_command
    args = (["--worker", "--config", cfg, "--steps", str(steps)] + (["--no-sync"] if no_sync else []) +
            (["--alternate"] if alternate else []) + list(extra))
    cmd = mpirun_command(world, __file__, args) if world > 1 else [sys.executable, __file__] + args
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    line = [l for l in out.stdout.splitlines() if l.startswith("cfg ")]
    if out.returncode != 0 or not line:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    fields = dict(re.findall(r"(\w+) ([\d.]+)", line[-1]))
    if alternate:
        return float(fields["ddp_step_s"]), float(fields["no_sync_step_s"])
    return float(fields["tokens_per_s"]), float(fields["step_s"])


def load_torch_ddp():
    """The peer's module, imported by name (its spawned ranks pickle its functions by module name)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(TORCH_DDP)))
    import torch_ddp
    return torch_ddp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--no-sync", action="store_true")
    ap.add_argument("--bucket-cap-mb", type=float, default=None, help="dygrad's DDP bucket size (default torch's 25)")
    ap.add_argument("--bucket-view", action="store_true", help="dygrad's DDP with gradient_as_bucket_view=True")
    ap.add_argument("--one-core-baseline", action="store_true", help="also 1-rank runs confined to one core")
    ap.add_argument("--alternate", action="store_true", help=argparse.SUPPRESS)  # worker: DDP and no_sync steps
    args = ap.parse_args()
    if args.worker:
        return dygrad_worker(args.config, args.steps, args.no_sync, args.bucket_cap_mb, args.bucket_view,
                             args.alternate)
    torch_ddp = load_torch_ddp()
    extra = ((["--bucket-cap-mb", str(args.bucket_cap_mb)] if args.bucket_cap_mb else []) +
             (["--bucket-view"] if args.bucket_view else []))
    rows = {k: [] for k in ("t1", "d1", "t2", "d2", "d2ns", "d2step", "d2nsstep", "t1c", "d1c", "alt")}
    for r in range(args.rounds):
        rows["t1"].append(torch_ddp.throughput(1, args.config, args.steps))
        rows["d1"].append(run_dygrad(args.config, args.steps, 1)[0])
        if args.one_core_baseline:
            with one_core():
                rows["t1c"].append(torch_ddp.throughput(1, args.config, args.steps))
                rows["d1c"].append(run_dygrad(args.config, args.steps, 1)[0])
        rows["t2"].append(torch_ddp.throughput(2, args.config, args.steps))
        tok, step = run_dygrad(args.config, args.steps, 2, extra=extra)
        rows["d2"].append(tok)
        rows["d2step"].append(step)
        tok, step = run_dygrad(args.config, args.steps, 2, no_sync=True, extra=extra)
        rows["d2ns"].append(tok)
        rows["d2nsstep"].append(step)
        a, b = run_dygrad(args.config, args.steps, 2, extra=extra, alternate=True)
        rows["alt"].append((a - b) / a)
        print(f"round {r}: torch {rows['t1'][-1]:.0f} -> {rows['t2'][-1]:.0f} tok/s "
              f"(linearity {rows['t2'][-1] / (2 * rows['t1'][-1]):.3f}); dygrad {rows['d1'][-1]:.0f} -> "
              f"{rows['d2'][-1]:.0f} (linearity {rows['d2'][-1] / (2 * rows['d1'][-1]):.3f}), no_sync "
              f"{rows['d2ns'][-1]:.0f}; alternating in one process: communication {rows['alt'][-1] * 100:.1f}%" + (f"; one-core baselines: torch {rows['t1c'][-1]:.0f} (linearity "
              f"{rows['t2'][-1] / (2 * rows['t1c'][-1]):.3f}), dygrad {rows['d1c'][-1]:.0f} (linearity "
              f"{rows['d2'][-1] / (2 * rows['d1c'][-1]):.3f})" if args.one_core_baseline else ""), flush=True)
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    alt = statistics.median(rows["alt"])
    lin_t = statistics.median(t2 / (2 * t1) for t1, t2 in zip(rows["t1"], rows["t2"]))
    lin_d = statistics.median(d2 / (2 * d1) for d1, d2 in zip(rows["d1"], rows["d2"]))
    comm = statistics.median((s - n) / s for s, n in zip(rows["d2step"], rows["d2nsstep"]))
    ratio = statistics.median(d2 / t2 for d2, t2 in zip(rows["d2"], rows["t2"]))
    print(f"cfg {args.config}: torch 1 rank {med['t1']:.0f} tok/s, 2 ranks {med['t2']:.0f} (linearity {lin_t:.3f}); "
          f"dygrad 1 rank {med['d1']:.0f}, 2 ranks {med['d2']:.0f} (linearity {lin_d:.3f}); "
          f"dygrad/torch at 2 ranks {ratio:.2f}; communication cost (step - no_sync step) / step {comm * 100:.1f}% "
          f"from separate runs, {alt * 100:.1f}% alternating in one process (medians of {args.rounds} interleaved "
          f"rounds)")
    if args.one_core_baseline:
        lin_tc = statistics.median(t2 / (2 * t1) for t1, t2 in zip(rows["t1c"], rows["t2"]))
        lin_dc = statistics.median(d2 / (2 * d1) for d1, d2 in zip(rows["d1c"], rows["d2"]))
        print(f"against 1-rank runs confined to one core: torch {med['t1c']:.0f} tok/s (linearity {lin_tc:.3f}), "
              f"dygrad {med['d1c']:.0f} (linearity {lin_dc:.3f})")


if __name__ == "__main__":
    main()
