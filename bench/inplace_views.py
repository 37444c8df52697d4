"""Host cost of in-place ops, dygrad beside PyTorch in one run (issue 18): the plain in-place rows must not
grow with the in-place-on-view machinery, and the CopySlices row (an in-place op on a view of an activation,
forward and backward) is what that machinery costs. Rounds interleave the two libraries; each row reports the
best per-call time of each and the ratio dygrad / torch (lower is better for dygrad).

Usage: python3 bench/inplace_views.py [--calls N] [--rounds R]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from dispatch import best_per_call  # noqa: E402

import dygrad as dg  # noqa: E402
import torch  # noqa: E402


def make_cases(lib):
    a, b = lib.ones(1), lib.ones(1)
    base = lib.ones(64)
    view = base[0:1]
    w = lib.ones(1, requires_grad=True)

    def add_plain(n):
        for _ in range(n):
            a.add_(b)

    def mul_scalar(n):
        for _ in range(n):
            a.mul_(1.0)

    def add_on_view_no_grad(n):
        for _ in range(n):
            view.add_(b)

    def mul_non_leaf_requires_grad(n):
        for _ in range(n):
            y = w * 1.0
            y.mul_(2.0)

    x = lib.ones(64, 64, requires_grad=True)
    col = lib.ones(64, requires_grad=True)

    def copyslices_forward_backward(n):
        for _ in range(n):
            h = x * 1.0
            h[:, 0] += col
            h.sum().backward()

    return [
        ("a.add_(b), 1 elem, no grad", add_plain),
        ("a.mul_(1.0), 1 elem, no grad", mul_scalar),
        ("view.add_(b) on x[0:1], no grad", add_on_view_no_grad),
        ("y = w * 1.0; y.mul_(2.0), w requires grad", mul_non_leaf_requires_grad),
        ("h[:, 0] += col on (64, 64) + backward (CopySlices)", copyslices_forward_backward),
    ]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sync_dg = dg.synchronize if hasattr(dg, "synchronize") else (lambda: None)
    cases = {"dygrad": make_cases(dg), "torch": make_cases(torch)}
    best = {lib: [float("inf")] * len(rows) for lib, rows in cases.items()}
    for _ in range(args.rounds):  # interleaved: both libraries see the same machine load
        for lib, rows in cases.items():
            sync = sync_dg if lib == "dygrad" else (lambda: None)
            for k, (name, loop) in enumerate(rows):
                calls = args.calls // 20 if "backward" in name else args.calls
                best[lib][k] = min(best[lib][k], best_per_call(loop, calls, 3, sync))
    print(f"| row | dygrad (us) | torch {torch.__version__} (us) | dygrad / torch |")
    print("| --- | --- | --- | --- |")
    for k, (name, _) in enumerate(cases["dygrad"]):
        d, t = best["dygrad"][k], best["torch"][k]
        print(f"| {name} | {d:.3f} | {t:.3f} | {d / t:.2f} |")


if __name__ == "__main__":
    main()
