"""Perf mode of the conformance sweep: every entry of tests/python/conformance, forward only, dygrad and torch side by
side on the same inputs, timed interleaved (median of repeats, each dygrad timing ends with dg.synchronize()).
Prints GB/s or GFLOP/s per op and shape from the op table's cost model (the FLOPs and bytes the profiler records
for the Tasks one call runs) and the ratio to torch, so weak kernels show at a glance. Never a test.

    python3 bench/sweep_perf.py [--dtype float32] [--filter REGEX] [--repeats 7] [--all-shapes] [--queued] [--threads N]

By default each dygrad call is followed by dg.synchronize(): the time is a call's latency, the stream's wake-up
included (the worker sleeps once idle, docs/stream.md). --queued times the calls back to back and synchronizes once
per timing, as a training step runs them: the op's throughput.

Each timing starts after an idle gap (--gap-ms, default 5) and one untimed call: torch's OpenMP team spins ~4 ms
after its last call (libgomp's default spin count) and dygrad's pool briefly too, so without the gap the library
timed second loses a core to the other's spinning threads for most of its ~5 ms timing (bench/bf16.py and
bench_gemm.cpp wait for the same reason); the untimed call wakes the timed library's own threads, so each library
is timed in the steady state of a program that runs only it. RESULTS.md, "An idle gap in the sweep", has the
effect on the 2-core Xeon.
"""
import argparse
import os
import re
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import dygrad as dg  # noqa: E402
from conformance import ENTRIES, entry_id, ops_elementwise  # noqa: E402
from conformance.spec import FLOATS, build, draw, dtype_of  # noqa: E402

# The elementwise, softmax, norm and loss kernels (issue "Every CPU a user has": each at most 1.1x torch's time, at
# most 3 exceptions, geometric mean at most 1.0): --summary reports them.
ROWWISE_OPS = {"softmax", "log_softmax", "cross_entropy", "nll_loss", "rms_norm", "rotary_position_embedding",
               "swiglu", "swiglu_packed", "adamw_step"}


def in_kernel_families(entry):
    return any(entry is e for e in ops_elementwise.ENTRIES) or entry.op in ROWWISE_OPS


# Above this many FLOPs per byte an op is reported in GFLOP/s (compute-bound), else in GB/s.
FLOPS_PER_BYTE = 4.0


def operands(case, dtype):
    rng = np.random.default_rng(0)
    dtypes = [dtype_of(s, dtype) for s in case]
    values = [draw(s, dt, rng) for s, dt in zip(case, dtypes)]
    return ([build(dg, v, dt) for v, dt in zip(values, dtypes)],
            [torch.tensor(v, dtype=getattr(torch, dt)) for v, dt in zip(values, dtypes)])


def call(lib, entry, tensors):
    fn = entry.ref if (lib is torch and entry.ref is not None) else entry.call
    return fn(lib, *tensors)


def cost_of_one_call(entry, tensors):
    """FLOPs and bytes of the Tasks one call runs (the op table's cost functions, as the profiler records them)."""
    dg.synchronize()
    with dg.profiler.profile() as prof:
        call(dg, entry, tensors)
        dg.synchronize()
    ops = prof.result.ops
    return sum(e.flops for e in ops), sum(e.bytes for e in ops), sorted({e.name for e in ops})


def seconds_per_call(fn, iterations, finish=None):
    begin = time.perf_counter()
    for _ in range(iterations):
        fn()
    if finish is not None:
        finish()
    return (time.perf_counter() - begin) / iterations


def measure(entry, case, dtype, repeats, queued=False, gap=0.005):
    d, t = operands(case, dtype)
    inplace = entry.inplace_call is not None or entry.op == "adamw_step"  # writes its operands: time on copies
    sync = (lambda: None) if queued else dg.synchronize
    run_d = (lambda: (call(dg, entry, [x.clone() for x in d]), sync())) if inplace else \
        (lambda: (call(dg, entry, d), sync()))
    run_t = (lambda: call(torch, entry, [x.clone() for x in t])) if inplace else (lambda: call(torch, entry, t))
    with torch.no_grad(), dg.no_grad():
        flops, nbytes, names = cost_of_one_call(entry, d)
        run_d(), run_t()  # warm-up
        once = max(seconds_per_call(run_d, 1), seconds_per_call(run_t, 1), 1e-6)
        iterations = max(1, min(1000, int(0.005 / once)))  # about 5 ms per timing
        times_d, times_t = [], []
        for _ in range(repeats):  # interleaved: both see the same machine state, each after an idle gap
            time.sleep(gap)
            run_d(), dg.synchronize()  # untimed: the pool's threads awake, as in a program that runs only dygrad
            times_d.append(seconds_per_call(run_d, iterations, dg.synchronize))
            time.sleep(gap)
            run_t()
            times_t.append(seconds_per_call(run_t, iterations))
    return flops, nbytes, names, statistics.median(times_d), statistics.median(times_t)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="float32", help="float dtype of the operands (default float32)")
    parser.add_argument("--filter", default="", help="only entries whose id matches this regex")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--all-shapes", action="store_true", help="every case too, not only the large one")
    parser.add_argument("--queued", action="store_true", help="dygrad's calls back to back, one synchronize per "
                        "timing (throughput), instead of one per call (latency)")
    parser.add_argument("--gap-ms", type=float, default=5.0, help="idle time before each timing, so neither "
                        "library's spinning threads take a core from the other's timing (default 5)")
    parser.add_argument("--summary", action="store_true", help="end with the elementwise, softmax, norm and loss "
                        "kernels' geometric mean of dygrad's time over torch's and the entries above 1.1x")
    parser.add_argument("--threads", type=int, default=0, help="threads for both libraries (default: dygrad's "
                        "count); 1 on a machine shared with other work")
    args = parser.parse_args(argv)
    if args.threads:
        dg.set_num_threads(args.threads)
    torch.set_num_threads(max(1, dg.get_context().num_threads))
    print(f"dygrad {dg.__version__} vs torch {torch.__version__}, {dg.get_context().num_threads} threads, "
          f"{args.dtype}, forward only, median of {args.repeats}, {'queued' if args.queued else 'synchronized'} calls, "
          f"{args.gap_ms:g} ms idle gap before each timing")
    print(f"{'op':42} {'shapes':34} {'dygrad':>12} {'torch':>12} {'unit':6} {'dg us':>9} {'torch us':>9} {'ratio':>6}")
    family = []  # (id, dygrad time / torch time) of the kernel families' big cases
    for entry in ENTRIES:
        if entry.check == "error" or not re.search(args.filter, entry_id(entry)):
            continue
        dtype = args.dtype if args.dtype in entry.dtypes else entry.dtypes[0]
        cases = ([entry.big] if entry.big else []) + (list(entry.cases) if args.all_shapes or not entry.big else [])
        for case in cases:
            flops, nbytes, names, t_d, t_t = measure(entry, case, dtype, args.repeats, args.queued, args.gap_ms / 1e3)
            compute = nbytes == 0 or flops / nbytes > FLOPS_PER_BYTE
            work, unit = (flops, "GFLOP/s") if compute else (nbytes, "GB/s")
            shapes = " ".join("x".join(map(str, s.shape)) or "()" for s in case)
            print(f"{entry_id(entry) + ('' if dtype == args.dtype else f' ({dtype})'):42} {shapes:34} "
                  f"{work / t_d / 1e9:12.2f} {work / t_t / 1e9:12.2f} {unit:6} {t_d * 1e6:9.1f} {t_t * 1e6:9.1f} "
                  f"{t_t / t_d:6.2f}")
            if in_kernel_families(entry) and case is cases[0]:
                family.append((entry_id(entry), t_d / t_t))
    print("ratio = torch time / dygrad time (above 1: dygrad is faster). Rates: the op table's cost of the Tasks "
          "one dygrad call runs, over each library's time per call.")
    if args.summary and family:
        geomean = float(np.exp(np.mean(np.log([r for _, r in family]))))
        over = sorted((r, name) for name, r in family if r > 1.1)
        print(f"elementwise, softmax, norm and loss kernels: {len(family)} entries, dygrad's time over torch's: "
              f"geometric mean {geomean:.2f}, {len(over)} over 1.1x: " +
              ", ".join(f"{name} {r:.2f}" for r, name in reversed(over)))


if __name__ == "__main__":
    main()
