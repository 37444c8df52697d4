"""bfloat16 against PyTorch 2.13, interleaved in one process (ratios only; absolute times of one run mean little
on a loaded machine).

  python3 bench/bf16.py gemm      bf16 GEMM at the `bench` model's linear shapes (forward, dX, dW): dygrad vs
                                  torch bf16 matmul, and dygrad's portable path (DYGRAD_BF16_GEMM=convert is
                                  process-wide, so the portable figure is the float32 sgemm row for reference;
                                  DYGRAD_BF16_GEMM=gemm times dygrad's former dnnl_gemm_bf16bf16f32 path). Each
                                  timed sample starts after an idle gap (--gap-ms): torch's OpenMP threads spin
                                  ~4 ms after a call and took a core from whichever library ran next, which made
                                  the shortest shapes look ~0.6x (bench_gemm.cpp's idle gap, for the same reason)
  python3 bench/bf16.py dispatch  host cost per call of a tiny linear under autocast, dygrad vs torch
  python3 bench/bf16.py train     `bench` config training steps under dg.autocast vs torch.autocast: tokens/s
                                  ratio, the loss of both runs vs dygrad fp32 from the same start, activation
                                  memory of the bf16 step vs fp32

Every run prints the CPU model and its avx512_bf16 / amx flags.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

import dygrad as dg


def cpu_line():
    model, flags = "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "?":
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    amx = sorted(f for f in flags if f.startswith("amx"))
    return (f"CPU: {model}; avx512_bf16={'avx512_bf16' in flags}; amx={amx or 'none'}; cores={os.cpu_count()}; "
            f"dygrad bf16 GEMM: {dg._C._bf16_gemm_library()}, sgemm: {dg._C._sgemm_library()}")


def best_time(fn, repeats, inner=1):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def gemm_shapes(cfg):
    tokens = cfg.batch_size * cfg.seq_len
    C, F, V = cfg.dim, cfg.ffn_dim, cfg.vocab_size
    rows = []
    for name, k, n in (("qkv", C, 3 * C), ("o", C, C), ("w1/w3", C, F), ("w2", F, C), ("head", C, V)):
        rows.append((f"{name} fwd  [{tokens},{k}]x[{k},{n}]", (tokens, k), (n, k), "fwd"))
        rows.append((f"{name} dX   [{tokens},{n}]x[{n},{k}]", (tokens, n), (n, k), "dx"))
        rows.append((f"{name} dW   [{n},{tokens}]x[{tokens},{k}]", (tokens, n), (tokens, k), "dw"))
    return rows


def run_gemm(args):
    cfg = dg.models.llama.CONFIGS[args.config]
    threads = args.threads
    dg.set_num_threads(threads)
    torch.set_num_threads(threads)
    print(cpu_line())
    print(f"threads={threads}; best of {args.repeats} interleaved rounds of {args.inner} calls, each after a "
          f"{args.gap_ms:g} ms idle gap; GFLOP/s (higher is better)")
    print(f"{'shape':40s} {'dg bf16':>9s} {'torch bf16':>10s} {'ratio':>6s} {'dg fp32':>8s}")
    rng = np.random.default_rng(0)
    ratios = []
    for label, sa, sb, kind in gemm_shapes(cfg):
        a = rng.standard_normal(sa).astype(np.float32)
        b = rng.standard_normal(sb).astype(np.float32)
        libs = {}
        for lib, name, dt in ((dg, "dg", dg.bfloat16), (torch, "torch", torch.bfloat16), (dg, "dg32", dg.float32)):
            x, y = lib.tensor(a).to(dt), lib.tensor(b).to(dt)
            if kind == "fwd":  # x @ W^T, W [n, k]
                f = (lambda x=x, y=y, lib=lib: lib.nn.functional.linear(x, y))
            elif kind == "dx":  # dY [tokens, n] @ W [n, k]
                f = (lambda x=x, y=y, lib=lib: lib.matmul(x, y))
            else:  # dY^T [n, tokens] @ X [tokens, k]
                f = (lambda x=x, y=y, lib=lib: lib.matmul(x.t(), y))
            sync = (lambda: dg.synchronize()) if lib is dg else (lambda: None)
            libs[name] = (f, sync)
        if kind == "fwd":
            m, k, n = sa[0], sa[1], sb[0]
        elif kind == "dx":
            m, k, n = sa[0], sa[1], sb[1]
        else:
            m, k, n = sa[1], sa[0], sb[1]
        flops = 2.0 * m * n * k
        best = {name: float("inf") for name in libs}
        for name, (f, sync) in libs.items():  # warm-up
            f(); sync()
        for _ in range(args.repeats):
            for name, (f, sync) in libs.items():
                time.sleep(args.gap_ms / 1e3)  # every pool back to sleep: the previous library's threads spin
                t0 = time.perf_counter()
                for _ in range(args.inner):
                    f()
                sync()
                best[name] = min(best[name], (time.perf_counter() - t0) / args.inner)
        g = {name: flops / t / 1e9 for name, t in best.items()}
        ratios.append(g["dg"] / g["torch"])
        print(f"{label:40s} {g['dg']:9.1f} {g['torch']:10.1f} {g['dg'] / g['torch']:6.2f} {g['dg32']:8.1f}")
    print(f"geometric mean dg/torch bf16: {float(np.exp(np.mean(np.log(ratios)))):.3f}")


def run_dispatch(args):
    print(cpu_line())
    rows = []
    for lib in (dg, torch):
        x = lib.ones(2, 8)
        w = lib.ones(8, 8, requires_grad=True)
        lin = lib.nn.functional.linear

        def plain(n, x=x, w=w, lin=lin):
            for _ in range(n):
                lin(x, w)

        def cast(n, x=x, w=w, lin=lin, lib=lib):
            with lib.autocast("cpu"):
                for _ in range(n):
                    lin(x, w)
        rows.append((lib, plain, cast))
    calls = args.calls
    results = {}
    for _ in range(args.repeats):
        for lib, plain, cast in rows:
            for label, fn in (("linear (8x8, fp32)", plain), ("linear under autocast (weight cached)", cast)):
                t = best_time(lambda: fn(calls), 1) / calls * 1e6
                if lib is dg:
                    dg.synchronize()
                key = (label, lib.__name__)
                results[key] = min(results.get(key, float("inf")), t)
    print(f"{'row':42s} {'dg us':>7s} {'torch us':>9s} {'dg/torch':>8s}")
    for label in ("linear (8x8, fp32)", "linear under autocast (weight cached)"):
        d, t = results[(label, "dygrad")], results[(label, "torch")]
        print(f"{label:42s} {d:7.2f} {t:9.2f} {d / t:8.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["gemm", "dispatch", "train"])
    ap.add_argument("--config", default="bench")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--inner", type=int, default=3)
    ap.add_argument("--gap-ms", type=float, default=50.0,
                    help="gemm: idle time before each timed sample, so that the threads of the library timed before "
                         "(torch's OpenMP team spins ~4 ms after a call) do not take a core from the next one")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--curve-steps", type=int, default=30)
    args = ap.parse_args()
    {"gemm": run_gemm, "dispatch": run_dispatch, "train": run_train}[args.what](args)


def run_train(args):
    from bf16_train import run  # bench/bf16_train.py
    run(args, cpu_line())


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
