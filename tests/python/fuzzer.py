"""dygrad's fuzzer: near-valid inputs built from the conformance sweep's op specs (tests/python/conformance) and
garbage arguments for every public callable (dygrad.*, dygrad.nn.functional.*, Tensor methods, and the C++
entry points in dygrad._C). A case may raise any of ALLOWED; it must never crash or hang the process.

The cases run in a child process (`python fuzzer.py --child SEED`) that writes each case's description to
a progress file before running it; the parent (`run`) restarts the child after a crash (a signal) or a hang
(no progress for `hang_s`), and keeps the case that did it in tests/python/fuzz_regressions/ as a replayable
regression (`replay`). Used bounded by test_fuzz.py (`make test`: fixed seed) and unbounded by `make fuzz`:

    python tests/python/fuzzer.py --seconds 1800 --seed 1
"""
import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REGRESSIONS = os.path.join(HERE, "fuzz_regressions")
ALLOWED = (TypeError, ValueError, IndexError, RuntimeError, NotImplementedError, OverflowError, MemoryError,
           KeyError, AttributeError, ZeroDivisionError, StopIteration)
MEMORY_LIMIT = 8 << 30  # address space of the child: an allocation past it is a MemoryError, not a dead machine

# Callables that touch the process or the file system, or run unbounded by design: not fuzzed.
DENY = {
    "save", "load", "save_file", "load_file", "set_num_threads", "set_context", "_set_context", "set_synchronize",
    "_interpreter_exiting", "manual_seed_all", "set_inflight_allocation_limit", "_set_inflight_allocation_limit",
    "set_printoptions", "empty_cache", "_set_call_site_tracking", "compile", "profile", "start", "stop",
    "generate", "train", "main", "fork", "DataLoader", "TokenDataset", "build_corpus", "sleep", "export_chrome_trace",
    "_set_memory_category", "_set_size_type", "_set_inline_small_ops", "register_at_fork", "_deferred_failure",
    "use_deterministic_algorithms", "seed",  # process-wide mode (as set_context); entropy (cases would not replay)
    "set_memory_limit", "_set_memory_limit",  # process-wide: a limit of a few bytes fails every later case
}
HUGE = [2**31, 2**32, 2**62, 2**63 - 1, -(2**63), 2**64, 2**70]


def garbage_values(dg):
    return [None, 0, 1, -1, 2, 3, 7, -7, 1.5, -0.0, math.nan, math.inf, -math.inf, True, False, "x", b"y", [],
            [1, 2], [[1], [2, 3]], (2, 3), (-1,), (0,), (1 << 62,), (2**32, 2**32), {}, {"seed": "a"}, object(),
            *HUGE, dg.float32, dg.int64, dg.bool, np.float64(2.0), np.int64(3), np.arange(3.0), np.zeros((2, 0)),
            dg.ones(3), dg.ones(2, 3), dg.zeros(0), dg.tensor(1.0), dg.ones(2, dtype=dg.int64),
            dg.tensor([5, -1, 100]), dg.ones(2, dtype=dg.bool), dg.ones(2, requires_grad=True), dg.ones(4, 3).t(),
            dg.ones(2, dtype=dg.bfloat16), dg.ones(1).expand(4), dg.tensor([math.nan, math.inf]),
            dg.ones(2, 3, 4, 5)]


KEYWORDS = [{}, {"dim": 0}, {"dim": -1}, {"dim": 9}, {"dim": 2**63 - 1}, {"keepdim": True}, {"dtype": "float32"},
            {"alpha": 2}, {"alpha": 2**63}, {"diagonal": 2**63 - 1}, {"out": None}, {"bogus": 1}, {"p": -1.0},
            {"padding_idx": 2**40}, {"retain_graph": "x"}, {"requires_grad": True}, {"size": (2**32, 2**32)}]


def callables(dg):
    """(name, callable) for every fuzzed entry point: functions of dygrad, nn.functional and _C; Tensor methods
    are added per case (bound to a random receiver)."""
    out = []
    for prefix, module in (("dg.", dg), ("F.", dg.nn.functional), ("_C.", dg._C)):
        for name in sorted(dir(module)):
            if name.startswith("__") or name in DENY:
                continue
            f = getattr(module, name, None)
            if callable(f) and not isinstance(f, type):
                out.append((prefix + name, f))
    return out


def tensor_methods(dg):
    names = []
    for name in sorted(dir(dg.Tensor)):
        if name in DENY or name in ("__init__", "__new__", "__del__", "__init_subclass__", "__subclasshook__",
                                    "__reduce__", "__reduce_ex__", "__setattr__", "__delattr__", "__class__"):
            continue
        if callable(getattr(dg.Tensor, name, None)):
            names.append(name)
    return names


# --- near-valid cases from the conformance specs ------------------------------------------------------------------
def mutate_shape(shape, rng):
    shape = list(shape)
    choice = rng.randrange(8)
    if choice == 0 and shape:
        shape[rng.randrange(len(shape))] = 0
    elif choice == 1 and shape:
        shape[rng.randrange(len(shape))] = 1
    elif choice == 2:
        shape.append(rng.choice([1, 2, 3]))
    elif choice == 3 and shape:
        shape.pop(rng.randrange(len(shape)))
    elif choice == 4 and shape:
        i = rng.randrange(len(shape))
        shape[i] = shape[i] + rng.choice([-1, 1])
    elif choice == 5:
        shape = shape[::-1]
    return tuple(max(d, 0) for d in shape)


def poke_values(values, rng):
    if values.size == 0:
        return values
    v = values.copy()
    flat = v.reshape(-1)
    i = rng.randrange(flat.size)
    if v.dtype.kind == "f":
        flat[i] = rng.choice([math.nan, math.inf, -math.inf, 1e38, -1e38, 0.0, -0.0])
    elif v.dtype.kind in "iu":
        info = np.iinfo(v.dtype)
        flat[i] = rng.choice([-1, info.max, info.min, 2**31 - 1, 1000])
    return v


def near_valid_case(dg, entry, rng):
    from conformance import build, draw, dtype_of
    spec_case = rng.choice(entry.cases + ((entry.big,) if entry.big and rng.random() < 0.1 else ()))
    case_dtype = rng.choice(tuple(entry.dtypes) + ("float32", "int64", "bool", "uint8", "float16"))
    nprng = np.random.default_rng(rng.randrange(2**32))
    tensors = []
    for spec in spec_case:
        shape = mutate_shape(spec.shape, rng) if rng.random() < 0.3 else spec.shape
        dtype = dtype_of(spec, case_dtype) if rng.random() < 0.8 else rng.choice(["float32", "int64", "bool"])
        try:
            values = draw(spec, dtype, nprng, shape=shape)
        except (AssertionError, ValueError):
            values = np.zeros(shape)
        if rng.random() < 0.3:
            values = poke_values(np.asarray(values), rng)
        layout = rng.choice(["contiguous", "contiguous", "transposed", "strided", "expanded"])
        try:
            t = build(dg, np.asarray(values), dtype, layout=layout,
                      requires_grad=spec.grad and entry.differentiable and dtype.startswith("float") and rng.random() < 0.5)
            tensors.append(t[0] if isinstance(t, tuple) else t)
        except ALLOWED:
            tensors.append(dg.zeros(shape) if all(isinstance(d, int) and d < 100 for d in shape) else dg.zeros(1))
    return tensors


def consume(dg, result):
    """Reads results back (sync points: deferred kernel errors surface here) and runs backward sometimes."""
    items = result if isinstance(result, (tuple, list)) else [result]
    for r in items:
        if isinstance(r, dg.Tensor):
            if r.numel() <= 4096:
                r.tolist()
            repr(r)
            if r.requires_grad and r.numel() > 0 and r.dtype in (dg.float32, dg.float64):
                r.sum().backward()


def one_case(dg, rng, entries, funcs, methods, values, log):
    kind = rng.random()
    if kind < 0.45 and entries:
        entry = rng.choice(entries)
        log({"kind": "spec", "op": entry.op, "variant": entry.variant})
        tensors = near_valid_case(dg, entry, rng)
        call = entry.inplace_call if entry.inplace_call and rng.random() < 0.3 else entry.call
        consume(dg, call(dg, *tensors))
        return
    args = [rng.choice(values) for _ in range(rng.randint(0, 3))]
    kwargs = rng.choice(KEYWORDS)
    if kind < 0.75:
        name, target = rng.choice(funcs)
    else:
        receiver = rng.choice([v for v in values if isinstance(v, dg.Tensor)])
        name = "Tensor." + rng.choice(methods)
        target = getattr(receiver.detach().clone() if rng.random() < 0.5 else receiver, name[7:], None)
        if target is None:
            return
    log({"kind": "call", "target": name, "args": [describe(a) for a in args], "kwargs": {k: describe(v) for k, v in kwargs.items()}})
    consume(dg, target(*args, **kwargs))


def describe(v):
    r = repr(v)
    return r if len(r) < 200 else r[:200] + "..."


def child(seed, progress_path, seconds):
    """Runs cases until `seconds` pass; each case's description goes to `progress_path` before it runs."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    sys.path.insert(0, HERE)
    import dygrad as dg
    from conformance import ENTRIES
    entries = [e for e in ENTRIES if e.check in ("reference", "error", "random")]
    funcs, methods = callables(dg), tensor_methods(dg)
    rng = random.Random(seed)
    progress = open(progress_path, "w")
    count = 0

    def log(description):
        progress.seek(0)
        progress.truncate()
        progress.write(json.dumps({"seed": seed, "case": count, **description}))
        progress.flush()

    deadline = time.monotonic() + seconds
    values = garbage_values(dg)
    while time.monotonic() < deadline:
        case_rng = random.Random(rng.randrange(2**63))
        try:
            one_case(dg, case_rng, entries, funcs, methods, values, log)
        except ALLOWED:
            pass
        except Exception as e:  # noqa: BLE001: any other Python exception is a finding, not a crash
            log({"kind": "unexpected", "error": repr(e)[:500]})
            print("UNEXPECTED", repr(e)[:500], file=sys.stderr, flush=True)
        count += 1
        if count % 100 == 0:
            try:
                dg.synchronize()
            except ALLOWED:
                pass
            if dg.get_context().synchronize:  # a fuzzed call may turn it on; it slows everything down
                dg.set_context(synchronize=False)
            values = garbage_values(dg)  # fresh tensors: fuzzed in-place ops may have poisoned the old ones
    log({"kind": "done"})
    print(f"cases {count}", flush=True)


def run(seconds, seed, hang_s=60.0, keep=True, max_failures=20):
    """The parent: runs child processes for `seconds` in all; returns the list of crashes and hangs found."""
    failures = []
    progress_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"dygrad-fuzz-{os.getpid()}.json")
    deadline = time.monotonic() + seconds
    total_cases = 0
    while time.monotonic() < deadline and len(failures) < max_failures:
        left = max(1.0, deadline - time.monotonic())
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", str(seed), "--seconds",
                                 str(left), "--progress", progress_path], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        last, last_change = None, time.monotonic()
        while proc.poll() is None:
            time.sleep(0.5)
            now = read_progress(progress_path)
            if now != last:
                last, last_change = now, time.monotonic()
            elif time.monotonic() - last_change > hang_s:
                proc.kill()
                proc.wait()
                failures.append({"why": "hang", **(json.loads(last) if last else {})})
                break
        out, err = proc.communicate()
        if proc.returncode not in (0, None, -9) or (proc.returncode == 0 and "cases" not in out):
            failures.append({"why": f"exit {proc.returncode}", "stderr": err[-3000:],
                             **(json.loads(read_progress(progress_path) or "{}"))})
        for line in out.splitlines():
            if line.startswith("cases "):
                total_cases += int(line.split()[1])
        for line in err.splitlines():
            if line.startswith("UNEXPECTED"):
                failures.append({"why": "unexpected exception", "error": line})
        seed += 1
    if keep:
        for f in failures:
            save_regression(f)
    return failures, total_cases


def read_progress(path):
    try:
        with open(path) as fh:
            return fh.read() or None
    except FileNotFoundError:
        return None


def save_regression(failure):
    os.makedirs(REGRESSIONS, exist_ok=True)
    name = f"seed{failure.get('seed', 'x')}_case{failure.get('case', 'x')}.json"
    with open(os.path.join(REGRESSIONS, name), "w") as fh:
        json.dump(failure, fh, indent=1)


def replay_case(seed, case):
    """Runs case `case` of child seed `seed` alone (what a regression file names), in this process."""
    sys.path.insert(0, HERE)
    import dygrad as dg
    from conformance import ENTRIES
    entries = [e for e in ENTRIES if e.check in ("reference", "error", "random")]
    funcs, methods = callables(dg), tensor_methods(dg)
    rng = random.Random(seed)
    values = garbage_values(dg)
    for i in range(case + 1):
        case_rng = random.Random(rng.randrange(2**63))
        if i < case:
            continue
        try:
            one_case(dg, case_rng, entries, funcs, methods, values, lambda d: print(json.dumps(d)))
        except ALLOWED:
            pass
    dg.synchronize()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=1800)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--progress", default=None, help=argparse.SUPPRESS)
    p.add_argument("--replay", nargs=2, type=int, metavar=("SEED", "CASE"), help="run one case in this process")
    args = p.parse_args()
    if args.child is not None:
        child(args.child, args.progress, args.seconds)
        return 0
    if args.replay:
        replay_case(*args.replay)
        return 0
    failures, cases = run(args.seconds, args.seed)
    print(f"fuzz: {cases} cases, {len(failures)} failures" + "".join(f"\n  {json.dumps(f)[:400]}" for f in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
