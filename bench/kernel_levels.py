"""The LLM's elementwise, softmax, norm and loss kernels on large operands, dygrad against torch 2.13 side by side
in one process: the table of the issue "Every CPU a user has" (4M float32 values; log_softmax on 700 x 5077;
cross-entropy forward + backward), at whatever kernel level the environment sets.

    DYGRAD_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 python3 bench/kernel_levels.py [--rounds 7] [--reps 5]

Each round times dygrad then torch (alternating which goes first), `reps` calls each (dygrad's queued back to back
and synchronized once), and keeps the per-call time; the figure is the median over rounds, the ratio dygrad / torch
time (below 1: dygrad faster). Both libraries use their default thread count (`--threads N` sets both). To compare a forced level on a
machine of a higher one as a CPU of that level would run (the GEMM library too), also set ONEDNN_MAX_CPU_ISA and
MKL_ENABLE_INSTRUCTIONS (bench/RESULTS.md records what each run set).
"""
import argparse
import os
import statistics
import time

import numpy as np
import torch

import dygrad as dg


def cases():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4 << 20).astype(np.float32)
    y = rng.standard_normal(4 << 20).astype(np.float32)
    logits = rng.standard_normal((700, 5077)).astype(np.float32)
    target = rng.integers(0, 5077, size=700)
    rows = rng.standard_normal((4096, 1024)).astype(np.float32)
    w = rng.standard_normal(1024).astype(np.float32)
    out = []
    for lib in (dg, torch):
        F = dg.nn.functional if lib is dg else torch.nn.functional
        tx, ty = lib.tensor(x), lib.tensor(y)
        tl, tt = lib.tensor(logits), lib.tensor(target)
        tr, tw = lib.tensor(rows), lib.tensor(w)
        tl_grad = lib.tensor(logits).requires_grad_(True)
        lsm = F.log_softmax(tl_grad, -1)
        g = lib.ones_like(lsm)

        def ce(lib=lib, F=F, tl=tl, tt=tt):
            z = tl.clone().requires_grad_(True)
            F.cross_entropy(z, tt).backward()
            return z.grad
        out.append({
            "exp": lambda lib=lib, tx=tx: lib.exp(tx),
            "tanh": lambda lib=lib, tx=tx: lib.tanh(tx),
            "sigmoid": lambda lib=lib, tx=tx: lib.sigmoid(tx),
            "silu": lambda F=F, tx=tx: F.silu(tx),
            "gelu": lambda F=F, tx=tx: F.gelu(tx),
            "softmax 4096x1024": lambda lib=lib, tr=tr: lib.softmax(tr, -1),
            "mul": lambda tx=tx, ty=ty: tx * ty,
            "sum": lambda tx=tx: tx.sum(),
            "rms_norm 4096x1024": lambda F=F, tr=tr, tw=tw: F.rms_norm(tr, (1024,), tw),
            "log_softmax 700x5077": lambda F=F, tl=tl: F.log_softmax(tl, -1),
            "log_softmax backward": lambda lib=lib, lsm=lsm, g=g, tl_grad=tl_grad: lib.autograd.grad(
                lsm, tl_grad, g, retain_graph=True),
            "cross_entropy fwd+bwd": ce,
        })
    return out


def per_call(fn, reps, sync):
    fn()
    sync()
    begin = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - begin) / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for both libraries (default: each library's own); 1 on a machine shared with "
                         "other work, where two threads per library meet the other load at every barrier")
    args = ap.parse_args()
    if args.threads:
        dg.set_num_threads(args.threads)
        torch.set_num_threads(args.threads)
    ours, theirs = cases()
    env = {k: os.environ.get(k, "-") for k in ("DYGRAD_CPU_ISA", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
                                               "MKL_ENABLE_INSTRUCTIONS")}
    print(f"dygrad kernels {dg.backends.cpu.kernel_isa()[0]}, torch {torch.backends.cpu.get_cpu_capability()}; "
          f"{' '.join(f'{k}={v}' for k, v in env.items())}; threads dygrad {dg.get_num_threads()}, "
          f"torch {torch.get_num_threads()}")
    print(f"{'op':24s} {'dygrad ms':>10s} {'torch ms':>10s} {'ratio':>7s}")
    ratios = []
    for name in ours:
        d, t = [], []
        for r in range(args.rounds):
            pair = [(d, ours[name], dg.synchronize), (t, theirs[name], lambda: None)]
            for times, fn, sync in (pair if r % 2 == 0 else pair[::-1]):
                times.append(per_call(fn, args.reps, sync))
        dm, tm = statistics.median(d) * 1e3, statistics.median(t) * 1e3
        ratios.append(dm / tm)
        print(f"{name:24s} {dm:10.3f} {tm:10.3f} {dm / tm:7.2f}")
    print(f"{'geometric mean':24s} {'':10s} {'':10s} {statistics.geometric_mean(ratios):7.2f}")


if __name__ == "__main__":
    main()
