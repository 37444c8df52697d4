"""SGD step time, dygrad against torch 2.13 side by side in one process: dygrad's fused sgd_step (one Task per group),
dygrad's composed path (torch's single-tensor formula op by op, what SGD ran before the fused Task; still the path
for parameters the Task cannot take) and torch.optim.SGD (foreach=False, torch's CPU default). Rounds interleave the
three; each timing is the median over its round's steps; the table shows each figure's median over the rounds and the
ratios' range. Results go into bench/RESULTS.md with the machine and the date.

    python3 bench/optim_step.py [--rounds 7] [--steps 20] [--threads 2]
"""
import argparse
import statistics
import time

import numpy as np
import torch

import dygrad as dg
from dygrad.optim.sgd import _composed_sgd

# (name, parameter shapes): a small model's many tensors, and a few large ones
MODELS = {
    "many small (60 x [256], 20 x [256, 256])": [(256,)] * 60 + [(256, 256)] * 20,
    "few large (4 x [2048, 2048])": [(2048, 2048)] * 4,
}
OPTIONS = {"plain": dict(lr=0.01), "momentum + wd": dict(lr=0.01, momentum=0.9, weight_decay=1e-4),
           "nesterov + wd": dict(lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)}


def make(shapes, options):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    d_params = [dg.nn.Parameter(dg.tensor(a)) for a in arrays]
    t_params = [torch.nn.Parameter(torch.tensor(a)) for a in arrays]
    for d, t, a in zip(d_params, t_params, arrays):
        d.grad, t.grad = dg.tensor(a * 0.01), torch.tensor(a * 0.01)
    d_opt = dg.optim.SGD(d_params, **options)
    t_opt = torch.optim.SGD(t_params, foreach=False, **options)
    return d_opt, t_opt


def time_steps(step, steps, sync=lambda: None):
    step()
    sync()  # the first step makes the buffers: untimed
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dg.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds x {args.steps} steps, float32")
    print("| model | options | dygrad fused (ms) | dygrad composed (ms) | torch (ms) | fused / torch (range) | "
          "fused / composed |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for model, shapes in MODELS.items():
        for name, options in OPTIONS.items():
            fused, composed, peer = [], [], []
            for _ in range(args.rounds):
                d_opt, t_opt = make(shapes, options)
                fused.append(time_steps(d_opt.step, args.steps, dg.synchronize))
                c_opt, _ = make(shapes, options)
                group = c_opt.param_groups[0]

                def composed_step():
                    with dg.no_grad():
                        _composed_sgd(c_opt, group["params"], [p.grad for p in group["params"]], group)
                composed.append(time_steps(composed_step, args.steps, dg.synchronize))
                peer.append(time_steps(t_opt.step, args.steps))
            ratios = [f / t for f, t in zip(fused, peer)]
            f, c, t = (statistics.median(x) * 1e3 for x in (fused, composed, peer))
            print(f"| {model} | {name} | {f:.3f} | {c:.3f} | {t:.3f} | **{statistics.median(ratios):.2f}** "
                  f"({min(ratios):.2f}-{max(ratios):.2f}) | {f / c:.2f} |")


if __name__ == "__main__":
    main()
