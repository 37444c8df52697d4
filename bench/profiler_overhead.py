"""The profiler's cost on a training step: the `tiny` config (or --config), dygrad alone, in one process,
alternating blocks of steps without the profiler, with `dg.profiler.profile()` (the default level) and with
`profile_memory=True, record_shapes=True`, and with `profile_memory=True, with_modules=True` (what `make train
--profile` uses: module scopes, storage lifetimes for the leak finder, GC pauses). Each round also times one
`dg.memory.estimate` of the step (the dry run) against the round's unprofiled step.

    python3 bench/profiler_overhead.py [--config tiny] [--rounds 5] [--steps 4]

Prints the median step time of each setting (median over rounds of each block's median step) and the
overhead ratio against no profiler. Also checks that every profiled step's breakdown buckets sum to its wall
time, and prints how far the profiled step time is from the loop's own measured step time.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import dygrad as dg
from dygrad.models import llama


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="tiny", choices=sorted(llama.CONFIGS))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args()

    cfg = llama.CONFIGS[args.config]
    dg.manual_seed(0)
    model = llama.Llama(cfg, fused=True)
    opt = dg.optim.AdamW(model.parameters(), lr=3e-4)
    rng = np.random.default_rng(0)
    data = rng.integers(0, cfg.vocab_size, size=(cfg.batch_size, cfg.seq_len + 1))
    x, y = dg.tensor(data[:, :-1].copy()), dg.tensor(data[:, 1:].copy())

    def step():
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    settings = {
        "off": None,
        "default": dict(),
        "memory+shapes": dict(profile_memory=True, record_shapes=True),
        "memory+modules": dict(profile_memory=True, with_modules=True),
    }
    estimate_times = []
    step()
    step()
    medians = {k: [] for k in settings}
    worst_sum_error = 0.0
    worst_step_error = 0.0
    for _ in range(args.rounds):
        for name, options in settings.items():
            times = []
            prof = dg.profiler.profile(**options).start() if options is not None else None
            dg.synchronize()
            t_prev = time.perf_counter()
            for _ in range(args.steps):
                step()
                dg.synchronize()
                now = time.perf_counter()
                times.append(now - t_prev)
                t_prev = now
                if prof is not None:
                    prof.step()
            if prof is not None:
                prof.stop()
                bd = prof.result.breakdown
                for s, measured in zip(bd["steps"], times):
                    total = sum(s["buckets_ns"].values())
                    worst_sum_error = max(worst_sum_error, abs(total - s["step_ns"]) / s["step_ns"])
                    worst_step_error = max(worst_step_error, abs(s["step_ns"] * 1e-9 - measured) / measured)
            medians[name].append(statistics.median(times))
        t = time.perf_counter()
        dg.memory.estimate(model, (x, y), optimizer=opt)
        estimate_times.append(time.perf_counter() - t)

    load = os.getloadavg()
    print(f"config {args.config}, {args.rounds} rounds x {args.steps} steps, interleaved; load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; threads {dg.get_context().num_threads}")
    base = statistics.median(medians["off"])
    print(f"{'setting':16s} {'step (ms)':>10s} {'vs off':>8s}")
    for name, values in medians.items():
        m = statistics.median(values)
        print(f"{name:16s} {m * 1e3:10.1f} {m / base:8.3f}")
    est = statistics.median(estimate_times)
    print(f"{'estimate':16s} {est * 1e3:10.1f} {est / base:8.3f}   (dg.memory.estimate of one step, vs a real step)")
    print(f"breakdown buckets vs step wall time: worst relative error {worst_sum_error:.2e}")
    print(f"profiled step time vs the loop's measured step time: worst relative difference {worst_step_error:.3%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
