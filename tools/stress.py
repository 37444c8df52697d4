"""The long reliability checks of issue 11 (`make stress`); bounded versions run in `make test`
(tests/python/test_reliability.py).

1. 200 runs of the exit-with-a-busy-thread script exit cleanly (a segfault at exit was 34 in 40).
2. retain_grad() without backward keeps RSS flat over 10,000 iterations (a leak of the whole tensor before).
3. A 10k-step training loop keeps RSS flat after warm-up.
"""
import argparse
import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def rss_mb():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def exits(runs):
    from test_reliability import EXIT_WITH_BUSY_THREAD
    bad = 0
    for i in range(runs):
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(EXIT_WITH_BUSY_THREAD)], capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0 or r.stdout.strip() != "True":
            bad += 1
            print(f"  run {i}: exit {r.returncode} {r.stderr[-300:]}")
    print(f"exit with a busy thread: {runs - bad}/{runs} clean")
    return bad == 0


def retain_grad(iterations):
    import dygrad as dg
    x = dg.ones(1, requires_grad=True)
    start = None
    for i in range(iterations):
        y = x * dg.ones(1 << 18)  # 1 MiB
        y.retain_grad()
        del y
        if i == 500:
            dg.synchronize()
            start = rss_mb()
    dg.synchronize()
    grown = rss_mb() - start
    print(f"retain_grad x {iterations}: RSS grew {grown:.1f} MB after warm-up")
    return grown < 50


def training(steps):
    import numpy as np
    import dygrad as dg
    dg.manual_seed(0)
    emb, lin = dg.nn.Embedding(1000, 64), dg.nn.Linear(64, 1000)
    opt = dg.optim.AdamW(list(emb.parameters()) + list(lin.parameters()), lr=1e-3)
    rng = np.random.default_rng(0)
    start = None
    for step in range(steps):
        idx = rng.integers(0, 1000, size=(32,))
        if step % 1000 == 999:
            idx[0] = 10**6  # a bad batch now and then: skipped, nothing kept alive by it
        opt.zero_grad(set_to_none=True)
        loss = dg.nn.functional.cross_entropy(lin(emb(dg.tensor(idx))), dg.tensor(rng.integers(0, 1000, size=(32,))))
        loss.backward()
        opt.step()
        try:
            loss.item()
        except IndexError:
            pass
        if step == 1000:
            start = rss_mb()
    grown = rss_mb() - start
    print(f"training x {steps}: RSS grew {grown:.1f} MB after warm-up")
    return grown < 50


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exits", type=int, default=200)
    p.add_argument("--iterations", type=int, default=10_000)
    args = p.parse_args()
    ok = exits(args.exits) & retain_grad(args.iterations) & training(args.iterations)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
