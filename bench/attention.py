"""Causal scaled_dot_product_attention, forward + backward, dygrad against torch 2.13 side by side in one process.

    python3 bench/attention.py [--rounds 7] [--reps 3]

q, k, v are the [B, H, T, D] views of one [B, T, 3, H, D] projection (as in the LLaMA model). Each round times
dygrad, then torch (alternating which goes first), `reps` calls each, and keeps the median; the figure is the
median over rounds. GFLOP/s counts 2 GEMMs forward and 5 backward (QK^T recomputed), halved for causal, as
dygrad's profiler does. Both libraries use their default thread count.
"""
import argparse
import statistics
import time

import numpy as np
import torch

import dygrad as dg

SHAPES = [(8, 6, 256, 64), (2, 6, 1024, 64)]  # (B, H, T, D): the bench config, and a long sequence


def make_inputs(lib, qkv, shape):
    B, H, T, D = shape
    if lib is dg:
        base = dg.tensor(qkv).requires_grad_(True)
    else:
        base = torch.tensor(qkv, requires_grad=True)
    q, k, v = base.view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
    return base, q, k, v


def step(lib, sdpa, inputs, grad_out):
    base, q, k, v = inputs
    base.grad = None
    out = sdpa(q, k, v, is_causal=True)
    out.backward(grad_out)
    if lib is dg:
        dg.synchronize()


def timed(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"dygrad threads {dg.get_context().num_threads}, torch threads {torch.get_num_threads()}")
    for shape in SHAPES:
        B, H, T, D = shape
        qkv = rng.standard_normal((B, T, 3 * H * D)).astype(np.float32)
        g = rng.standard_normal((B, H, T, D)).astype(np.float32)
        ours = (dg, dg.nn.functional.scaled_dot_product_attention, make_inputs(dg, qkv, shape), dg.tensor(g))
        theirs = (torch, torch.nn.functional.scaled_dot_product_attention, make_inputs(torch, qkv, shape),
                  torch.tensor(g))
        for lib, sdpa, inputs, grad in (ours, theirs):  # warm-up, and the same gradients on both sides
            step(lib, sdpa, inputs, grad)
        np.testing.assert_allclose(ours[2][0].grad.numpy(), theirs[2][0].grad.numpy(), rtol=2e-3, atol=2e-4)
        results = {"dygrad": [], "torch": []}
        for r in range(args.rounds):
            order = [("dygrad", ours), ("torch", theirs)]
            for name, (lib, sdpa, inputs, grad) in (order if r % 2 == 0 else order[::-1]):
                results[name].append(timed(lambda: step(lib, sdpa, inputs, grad), args.reps))
        flops = 2 * B * H * T * T * D * (2 + 5) / 2
        ours_s, theirs_s = statistics.median(results["dygrad"]), statistics.median(results["torch"])
        print(f"B={B} H={H} T={T} D={D} causal fwd+bwd: dygrad {ours_s * 1e3:.2f} ms ({flops / ours_s / 1e9:.1f} "
              f"GFLOP/s), torch {theirs_s * 1e3:.2f} ms ({flops / theirs_s / 1e9:.1f} GFLOP/s), "
              f"dygrad/torch time {ours_s / theirs_s:.2f}")


if __name__ == "__main__":
    main()
