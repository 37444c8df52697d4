"""Recompute on LLaMA `bench`: step time and activation memory of full / memory_bound / memory_bound_and_qkv /
auto (a budget of 60% of the plain peak) against the plain step, interleaved in one run (docs/recompute.md).

Activation memory = the allocator's peak over a step (forward, backward, AdamW step) minus parameters, gradients
and optimizer states. Also checks that every mode's gradients equal the plain run's bitwise (deterministic=True)
and prints the budget plan's predicted against measured peak and time.

    python3 bench/recompute.py [--rounds 3] [--config bench] [--budget 60%] [--synchronize]

Memory figures: take them with --synchronize (every op runs at its call: the peak is exact and reproducible, and
equals the asynchronous one once the stream returns memory when the host drops a tensor); step times without it.
"""
import argparse
import gc
import statistics
import time

import dygrad as dg
from dygrad.models import llama
from dygrad.utils import checkpoint as ck

MODES = ["plain", "full", "memory_bound", "memory_bound_and_qkv", "auto"]


def tensor_bytes(ts):
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", default="60%")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--last", action="store_true", help="recompute the last block's MLP half too (costs time, "
                    "saves no peak)")
    ap.add_argument("--synchronize", action="store_true", help="synchronize mode: exact, reproducible memory "
                    "figures (the step times are then not the asynchronous ones)")
    args = ap.parse_args()
    dg.set_context(deterministic=True, synchronize=args.synchronize)
    cfg = llama.CONFIGS[args.config]
    B, T = args.batch_size or cfg.batch_size, cfg.seq_len
    dg.manual_seed(0)
    model = llama.Llama(cfg)
    x = dg.randint(0, cfg.vocab_size, (B, T))
    y = dg.randint(0, cfg.vocab_size, (B, T))

    def fwd_bwd():
        loss = model(x, y)
        loss.backward()
        return loss.item()

    # 1. gradients bitwise equal to plain, from the same weights
    grads = {}
    for mode in ["plain", "full", "memory_bound", "memory_bound_and_qkv"]:
        ck.apply_recompute(model.blocks, ["none" if mode == "plain" else mode] * len(model.blocks))
        for p in model.parameters():
            p.grad = None
        fwd_bwd()
        grads[mode] = [p.grad.clone() for p in model.parameters()]
    for mode in grads:
        same = all((a != b).sum().item() == 0 for a, b in zip(grads["plain"], grads[mode]))
        print(f"gradients of {mode}: {'bitwise equal to plain' if same else 'DIFFER from plain'}")
    del grads

    # 2. the budget plan
    the_plan = ck.plan(model, fwd_bwd, args.budget)
    print(the_plan)

    optimizer = dg.optim.AdamW(model.parameters(), lr=1e-4)

    def apply(mode):
        if mode == "plain":
            model.recompute_blocks("none")
        elif mode == "auto":
            the_plan.apply(model.blocks)
        else:
            model.recompute_blocks(mode, last=args.last)

    def step():
        optimizer.zero_grad(set_to_none=True)
        gc.collect()
        dg._C.synchronize()
        dg.reset_peak_memory_stats()
        t0 = time.perf_counter()
        fwd_bwd()
        optimizer.step()
        model.blocks[0].qkv.weight.sum().item()  # wait for the step
        dt = time.perf_counter() - t0
        fixed = tensor_bytes(model.parameters()) + tensor_bytes(p.grad for p in model.parameters())
        fixed += sum(tensor_bytes(v for v in st.values() if isinstance(v, dg.Tensor))
                     for st in optimizer.state.values())
        return dt, dg.max_memory_allocated(), dg.max_memory_allocated() - fixed

    for mode in MODES:  # warm-up: optimizer states exist from here on
        apply(mode)
        step()
    times = {m: [] for m in MODES}
    peaks = {m: [] for m in MODES}
    acts = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in (MODES if r % 2 == 0 else MODES[::-1]):
            apply(mode)
            dt, peak, act = step()
            times[mode].append(dt)
            peaks[mode].append(peak)
            acts[mode].append(act)
    mib = 1 << 20
    t0 = statistics.median(times["plain"])
    a0 = statistics.median(acts["plain"])
    print(f"\n{args.config} B={B} T={T}, {args.rounds} interleaved rounds (medians); "
          f"{'every block' if args.last else 'every block but the last one MLP half'} recomputed"
          f"{', synchronize mode' if args.synchronize else ''}:")
    print(f"{'mode':24s} {'step ratio':>10s} {'act. MiB':>9s} {'act. ratio':>10s} {'act. cut':>9s} {'peak MiB':>9s}")
    for mode in MODES:
        t, a, p = statistics.median(times[mode]), statistics.median(acts[mode]), statistics.median(peaks[mode])
        print(f"{mode:24s} {t / t0:10.3f} {a / mib:9.1f} {a / a0:10.3f} {1 - a / a0:9.1%} {p / mib:9.1f}")
    # the plan's prediction against the measured (fwd+bwd peaks, as the plan measured them)
    fwd_only = {}
    for mode in ["plain", "auto"]:
        apply(mode)
        optimizer.zero_grad(set_to_none=True)
        gc.collect()
        dg._C.synchronize()
        base = dg.memory_allocated()
        dg.reset_peak_memory_stats()
        t1 = time.perf_counter()
        fwd_bwd()
        dg._C.synchronize()  # the backward too: loss.item() waits only for the forward
        fwd_only[mode] = (dg.max_memory_allocated() - base, time.perf_counter() - t1)
    print(the_plan.report(*fwd_only["auto"]))
    print(f"auto peak / plain peak (forward+backward): {fwd_only['auto'][0] / fwd_only['plain'][0]:.3f}")


if __name__ == "__main__":
    main()
