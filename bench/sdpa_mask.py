"""scaled_dot_product_attention with a boolean causal mask (`attn_mask=~triu(ones(T, T), 1)`, as code written for
torch often passes one) against is_causal=True and against the same mask laid out per batch-head (which the
kernel cannot test once: the masked path), forward and backward, interleaved, and torch 2.13's SDPA with the same
boolean mask in the same process (one thread each: their pools run one at a time here).

    python bench/sdpa_mask.py [--reps 15]
"""
import argparse
import statistics
import subprocess
import time

import torch

import dygrad as dg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    opts = ap.parse_args()
    dg.set_num_threads(1)
    torch.set_num_threads(1)
    B, H, T, D = 8, 6, 256, 64  # the bench config's attention
    dg.manual_seed(0)
    q, k, v = (dg.randn(B, H, T, D).requires_grad_() for _ in range(3))
    g = dg.randn(B, H, T, D)
    keep = ~dg.triu(dg.ones((T, T), dtype=dg.bool), 1)
    per_head = keep.expand(B, H, T, T).contiguous()
    tq, tk, tv = (torch.from_numpy(t.detach().numpy()).requires_grad_() for t in (q, k, v))
    tg, tkeep = torch.from_numpy(g.numpy()), torch.from_numpy(keep.numpy())

    def dg_side(**kw):
        def f():
            out = dg.nn.functional.scaled_dot_product_attention(q, k, v, **kw)
            dg.autograd.grad(out, (q, k, v), g)
            dg.synchronize()
        return f

    def torch_side():
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tkeep)
        torch.autograd.grad(out, (tq, tk, tv), tg)

    sides = {"dg is_causal": dg_side(is_causal=True), "dg bool causal mask": dg_side(attn_mask=keep),
             "dg mask per batch-head": dg_side(attn_mask=per_head), "torch bool causal mask": torch_side}
    times = {k: [] for k in sides}
    for f in sides.values():
        f()
    for _ in range(opts.reps):
        for name, f in sides.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu = next(line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True,
                                                                         text=True).stdout.splitlines()
               if line.startswith("Model name"))
    print(f"# {cpu}, 1 thread, [{B}, {H}, {T}, {D}] float32, forward + backward, median of {opts.reps}")
    for k, t in med.items():
        print(f"{k:24s} {t * 1e3:8.2f} ms")
    print(f"bool causal mask / is_causal time {med['dg bool causal mask'] / med['dg is_causal']:.2f}x; per batch-head "
          f"(masked path) / bool causal {med['dg mask per batch-head'] / med['dg bool causal mask']:.2f}x; torch / dg "
          f"with the same mask {med['torch bool causal mask'] / med['dg bool causal mask']:.2f}x")


if __name__ == "__main__":
    main()
