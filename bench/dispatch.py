"""Per-op host cost of dygrad's Python entry points, side by side with PyTorch in the same run.

Each row times a Python loop of calls (the loop's own cost is included for both libraries) and reports
microseconds per op, the best of many short repeats (robust to a loaded machine); the stream is synchronised between repeats, outside the
timed region. Usage: python3 bench/dispatch.py [--calls N] [--repeats R]
"""
import argparse
import platform
import time

import dygrad as dg
import torch


def best_per_call(loop, calls, repeats, synchronize):
    best = float("inf")
    loop(max(calls // 10, 1))  # warm-up: caches, allocator bins, the worker thread
    synchronize()
    for _ in range(repeats):
        start = time.perf_counter()
        loop(calls)
        elapsed = time.perf_counter() - start
        synchronize()
        best = min(best, elapsed / calls)
    return best * 1e6


def make_cases(lib, synchronize):
    """The benchmark rows for one library (dygrad or torch): name -> loop(n) function."""
    a = lib.ones(1)
    b = lib.ones(1)
    a_grad = lib.ones(1, requires_grad=True)
    x64 = lib.ones(64)
    add = lib.add
    if hasattr(lib, "exp"):
        chain_note = "x*2.0+1.0, neg, exp"

        def chain(n, x=x64):
            for _ in range(n):
                y = x * 2.0 + 1.0
                y = y.neg().exp()
    else:
        chain_note = "x*2.0+1.0, neg, neg (exp not bound yet)"

        def chain(n, x=x64):
            for _ in range(n):
                y = x * 2.0 + 1.0
                y = y.neg().neg()

    def add_plain(n, add=add, a=a, b=b):
        for _ in range(n):
            add(a, b)

    def add_requires_grad(n, add=add, a=a_grad, b=b):
        for _ in range(n):
            add(a, b)

    def add_scalar(n, add=add, a=a):
        for _ in range(n):
            add(a, 1.0)

    def add_method(n, a=a, b=b):
        for _ in range(n):
            a.add(b)

    def add_operator(n, a=a, b=b):
        for _ in range(n):
            a + b

    def chain_per_op(n):
        chain(n)

    return [
        ("add, no grad (1 elem)", add_plain, 1),
        ("add, requires_grad (1 elem)", add_requires_grad, 1),
        ("add, Python scalar (1 elem)", add_scalar, 1),
        ("a.add(b) method (1 elem)", add_method, 1),
        ("a + b operator (1 elem)", add_operator, 1),
        (f"chain of 4 ops, 64 elem, per op: {chain_note}", chain_per_op, 4),
    ] + family_cases(lib)


def family_cases(lib):
    """The rows of the op families issue 13 added; [] for a build without them (bench/builds.py runs this file
    with older builds)."""
    if not all(hasattr(lib, n) for n in ("sort", "cumsum", "scatter", "einsum")):
        return []
    x16 = lib.arange(16.0).flip(0)

    def sort_topk(n, x=x16, sort=lib.sort, topk=lib.topk):
        for _ in range(n):
            sort(x)
            topk(x, 4)

    def cumsum(n, x=x16, cumsum=lib.cumsum):
        for _ in range(n):
            cumsum(x, 0)

    params = [lib.ones(16, 16, requires_grad=True) for _ in range(20)]  # 20 small parameters with gradients
    for p in params:
        p.grad = lib.ones(16, 16)
    clip = lib.nn.utils.clip_grad_norm_

    def clip_grad_norm(n, clip=clip, params=params):
        for _ in range(n):
            clip(params, 1e9)

    # small operands: the host cost of the index and contraction families (issue 13)
    x43 = lib.ones(4, 3)
    index = lib.zeros(2, 3, dtype=lib.int64)
    src = lib.ones(2, 3)

    def scatter_gather(n, x=x43, index=index, src=src, gather=lib.gather, scatter=lib.scatter):
        for _ in range(n):
            gather(x, 0, index)
            scatter(x, 0, index, src)

    m1, m2 = lib.ones(2, 3, 4), lib.ones(2, 4, 5)

    def einsum(n, m1=m1, m2=m2, einsum=lib.einsum):
        for _ in range(n):
            einsum("bij,bjk->bik", m1, m2)

    return [
        ("sort/topk: sort(x), topk(x, 4), 16 elem, per op", sort_topk, 2),
        ("cumsum(x, 0), 16 elem", cumsum, 1),
        ("clip_grad_norm_ (20 params of 16x16)", clip_grad_norm, 1),
        ("scatter/gather, [4, 3] by [2, 3] index, per op", scatter_gather, 2),
        ("einsum bij,bjk->bik, [2, 3, 4] x [2, 4, 5]", einsum, 1),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--synchronize", action="store_true",
                        help="run dygrad's ops inline on the calling thread (no stream worker)")
    parser.add_argument("--no-inline", action="store_true",
                        help="queue every op on the stream worker, even tiny ones on an idle stream "
                             "(inline_small_ops=False, docs/stream.md)")
    args = parser.parse_args()
    if args.synchronize:
        dg.set_context(synchronize=True)
    if args.no_inline:
        dg.set_context(inline_small_ops=False)

    torch.set_grad_enabled(True)
    dg_rows = make_cases(dg, dg.synchronize)
    torch_rows = make_cases(torch, lambda: None)
    print(f"dygrad dispatch benchmark: python {platform.python_version()}, torch {torch.__version__}, "
          f"{platform.machine()}, dygrad threads {dg.get_context().num_threads}, torch threads {torch.get_num_threads()}, "
          f"dygrad {'synchronous' if args.synchronize else 'async'}, "
          f"inline small ops {'on' if dg.get_context().inline_small_ops else 'off'}")
    print(f"{'case':58s} {'dygrad us':>10s} {'torch us':>10s} {'ratio':>7s}")
    ratios = []
    for (name, dg_loop, ops), (_, torch_loop, _) in zip(dg_rows, torch_rows):
        dg_us = best_per_call(dg_loop, args.calls, args.repeats, dg.synchronize) / ops
        torch_us = best_per_call(torch_loop, args.calls, args.repeats, lambda: None) / ops
        ratios.append(dg_us / torch_us)
        print(f"{name:58s} {dg_us:10.3f} {torch_us:10.3f} {dg_us / torch_us:7.2f}")

    # The cost of recording the Python call site of each op (for deferred error messages).
    add_plain = dg_rows[0][1]
    with_sites = best_per_call(add_plain, args.calls, args.repeats, dg.synchronize)
    dg._C._set_call_site_tracking(False)
    without_sites = best_per_call(add_plain, args.calls, args.repeats, dg.synchronize)
    dg._C._set_call_site_tracking(True)
    print(f"call-site recording: add {with_sites:.3f} us with, {without_sites:.3f} us without "
          f"({with_sites - without_sites:+.3f} us)")
    print(f"worst ratio {max(ratios):.2f} (target <= 0.5, team goal 0.3)")


if __name__ == "__main__":
    main()
