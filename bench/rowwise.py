"""The memory-bound kernels of a LLaMA `bench` step at its shapes (the ones the selective-recompute presets run
twice, docs/recompute.md), dygrad against torch 2.13 side by side in one process, and optionally against another
build of dygrad:

    python3 bench/rowwise.py [--rounds 7] [--reps 20] [--against /path/to/other/python]

Rows: swiglu forward ([2048, 1024] gate and up; torch: silu(gate) * up), swiglu forward+backward, rms_norm forward
([2048, 384] with a weight; torch: F.rms_norm) and forward+backward, and the copy of v out of the QKV projection
(`v.transpose(1, 2).contiguous()`, [8, 6, 256, 64] from a [8, 256, 1152] buffer). Each round times dygrad, then
torch (alternating which goes first), `reps` calls each (dygrad synchronized after the last), and keeps the mean
per call; the figure is the median over rounds. With --against, each round also runs this script's worker in the
other interpreter (a fresh process per round, alternating which build goes first) and prints new/old per row,
with torch's time from both processes as a check that the machine's load did not move between them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

import dygrad as dg

B, T, C, H, F = 8, 256, 384, 6, 1024


def make_rows(lib, rng):
    """(name, fn) pairs; fn runs one call (and for dygrad enqueues it: the caller synchronizes)."""
    fun = dg.nn.functional if lib is dg else torch.nn.functional
    new = (lambda a, grad=False: dg.tensor(a).requires_grad_(grad)) if lib is dg else \
        (lambda a, grad=False: torch.tensor(a, requires_grad=grad))
    gate, up = (rng.standard_normal((B * T, F)).astype(np.float32) for _ in range(2))
    x, w = rng.standard_normal((B * T, C)).astype(np.float32), rng.standard_normal(C).astype(np.float32)
    qkv = new(rng.standard_normal((B, T, 3 * C)).astype(np.float32))
    g_sw, g_n = new(rng.standard_normal((B * T, F)).astype(np.float32)), new(rng.standard_normal((B * T, C)).astype(np.float32))
    sg, su, sx, sw = new(gate), new(up), new(x), new(w)
    gg, gu, gx, gw = new(gate, True), new(up, True), new(x, True), new(w, True)
    swiglu = fun.swiglu if lib is dg else (lambda a, b: torch.nn.functional.silu(a) * b)
    eps = 1.1920928955078125e-07

    def swiglu_fwd_bwd():
        gg.grad = gu.grad = None
        swiglu(gg, gu).backward(g_sw)

    def rms_fwd_bwd():
        gx.grad = gw.grad = None
        fun.rms_norm(gx, (C,), gw, eps).backward(g_n)

    def v_copy():
        v = qkv.view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)[2]
        return v.transpose(1, 2).contiguous()

    return [("swiglu forward [2048, 1024]", lambda: swiglu(sg, su)),
            ("swiglu forward+backward", swiglu_fwd_bwd),
            ("rms_norm forward [2048, 384]", lambda: fun.rms_norm(sx, (C,), sw, eps)),
            ("rms_norm forward+backward", rms_fwd_bwd),
            ("v.transpose(1, 2).contiguous() [8, 6, 256, 64]", v_copy)]


CLOCK = time.perf_counter


def timed(lib, fn, reps):
    t = CLOCK()
    for _ in range(reps):
        fn()
    if lib is dg:
        dg.synchronize()
    return (CLOCK() - t) / reps


def measure(rounds, reps):
    """{row: {"dygrad": median seconds, "torch": median seconds}}."""
    ours = make_rows(dg, np.random.default_rng(0))
    theirs = make_rows(torch, np.random.default_rng(0))
    results = {name: {"dygrad": [], "torch": []} for name, _ in ours}
    for (name, fd), (_, ft) in zip(ours, theirs):
        timed(dg, fd, 2)  # warm-up: allocator, pool, first-touch
        timed(torch, ft, 2)
    for r in range(rounds):
        for (name, fd), (_, ft) in zip(ours, theirs):
            order = [("dygrad", dg, fd), ("torch", torch, ft)]
            for side, lib, fn in (order if r % 2 == 0 else order[::-1]):
                results[name][side].append(timed(lib, fn, reps))
    return {name: {side: statistics.median(v) for side, v in sides.items()} for name, sides in results.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--against", help="python of another dygrad build: new (this one) / old per row")
    ap.add_argument("--cpu-time", action="store_true", help="one thread, synchronize mode, and the thread's CPU "
                    "time instead of wall time: robust to a loaded machine (the kernels' work, not their scaling)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cpu_time:
        global CLOCK
        CLOCK = time.thread_time
        dg.set_num_threads(1)
        dg.set_context(synchronize=True)
        torch.set_num_threads(1)
    if args.worker:
        print(json.dumps(measure(args.rounds, args.reps)))
        return
    print(f"dygrad threads {dg.get_context().num_threads} ({dg.backends.cpu.kernel_isa()[0]} kernels), "
          f"torch threads {torch.get_num_threads()}{', thread CPU time' if args.cpu_time else ''}")
    if not args.against:
        for name, m in measure(args.rounds, args.reps).items():
            print(f"{name:50s} dygrad {m['dygrad'] * 1e6:8.1f} us  torch {m['torch'] * 1e6:8.1f} us  "
                  f"dygrad/torch {m['dygrad'] / m['torch']:5.2f}")
        return
    worker = [os.path.abspath(__file__), "--worker", "--rounds", "1", "--reps", str(args.reps)]
    worker += ["--cpu-time"] if args.cpu_time else []
    runs = {"new": [], "old": []}
    for r in range(args.rounds):
        order = [("new", sys.executable), ("old", args.against)]
        for side, python in (order if r % 2 == 0 else order[::-1]):
            out = subprocess.run([python] + worker, capture_output=True, text=True, check=True)
            runs[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for name in runs["new"][0]:
        med = {side: {lib: statistics.median(run[name][lib] for run in runs[side]) for lib in ("dygrad", "torch")}
               for side in runs}
        ratios = [n[name]["dygrad"] / o[name]["dygrad"] for n, o in zip(runs["new"], runs["old"])]
        print(f"{name:50s} old {med['old']['dygrad'] * 1e6:8.1f} us  new {med['new']['dygrad'] * 1e6:8.1f} us  "
              f"new/old {med['new']['dygrad'] / med['old']['dygrad']:5.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})"
              f"  new/torch {med['new']['dygrad'] / med['new']['torch']:5.2f}  torch old/new process "
              f"{med['old']['torch'] / med['new']['torch']:5.3f}")


if __name__ == "__main__":
    main()
