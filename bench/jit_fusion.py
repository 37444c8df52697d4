"""dygrad.jit O0 vs O1 (fused generated kernels) vs torch.compile on composed elementwise work, side by side and
interleaved in one process (docs/jit-fusion.md, ../shared/docs/BENCHMARKS.md):
  rmsnorm  x * rsqrt(mean(x^2) + eps) * w over [8, 256, 384] (the bench config's activations); also eager's
           fused F.rms_norm ("dg fused")
  softmax  exp(x - amax(x)) / sum(exp(x - amax(x))) over rows of 256 ([48, 256, 256]: the bench config's attention
           scores); also eager's fused F.softmax ("dg fused")
  logsoftmax  x - (m + log(sum(exp(x - m)))), m = x.max(-1, keepdim=True).values, over [48, 256, 256] (a composed
           cross-entropy's first part); also eager's fused F.log_softmax ("dg fused")
  swiglu   silu(a) * b over [8, 256, 1024]
  adam     a torch-style per-parameter Adam loop (mul_, add_, addcmul_, sqrt, div, add_, addcdiv_) over the bench
           config's parameter shapes (10.8 M floats)
  adam_torch  torch 2.13's own single-tensor Adam (lerp_ for the first moment), the same shapes; also eager's fused
           multi-tensor adamw_step over the same shapes ("dg fused")
  lion     Lion as lion-pytorch writes it (mul_, clone, mul_, add, sign_, add_, mul_, add_), the same shapes
  xent     a composed cross-entropy forward and backward, F.nll_loss(F.log_softmax(x, -1), t), at a LLaMA vocab
           ([B*T = 2048, V = 4096]); also eager's fused F.cross_entropy ("dg fused")
  xent_gather  the same loss as -F.log_softmax(x, -1).gather(-1, t[:, None]).mean(); the same peers
  xent_lse the same loss as (x.logsumexp(-1) - x.gather(-1, t[:, None]).squeeze(-1)).mean(); the same peers
  mse      a loss tail: ((h + b - y) ** 2).mean() forward and backward over [2048, 512] (a regression head's bias, its
           squared error, the full mean: one full-reduction program at O1)
  leaky    where(h > 0, h, 0.01 * h).clamp(-c, c) over [8, 256, 1024] (a leaky ReLU through where, clamped
           activations: comparisons, where and clamp in a run)
  huber    d = x - y; where(|d| < 1, 0.5 d^2, |d| - 0.5) masked by ~((x != x) | (y > 3)) over [8, 256, 1024] (a smooth
           L1 loss's elementwise part with a mask built from comparisons)
  sincos   sin(a) * b + cos(a) over [8, 256, 1024] (eager's bounded sin and cos, libm's beyond their range)
The selection cases (leaky, huber, sincos) also run at O1 with dygrad.jit.config.fusion = False ("dg O1 no fusion"):
what fusing them wins over the same graph's other passes.
The cases a pattern rewrites (xent, xent_gather, xent_lse: the cross-entropy pattern) also run at O1 with
dygrad.jit.config.patterns = False ("dg O1 no patterns"): what the pattern wins over fusion alone. Each case's
spread (fastest and slowest sample of each side) is printed after the medians.
dygrad's eager, O0 and O1 run interleaved in this process; torch eager and torch.compile interleaved in a subprocess
right after (two thread pools in one process contend). Prints the median time per call of each and the ratios.

    python bench/jit_fusion.py [--reps 15] [--threads 1] [--no-torch] [--cases rmsnorm,softmax]
    python bench/jit_fusion.py --llama [--reps 15] [--threads 1]
"""
import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time

import dygrad as dg


def lscpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except Exception:  # noqa: BLE001
        return "?"


def rmsnorm(lib):
    def f(x, w):
        return x * (x * x).mean(-1, keepdim=True).add(1e-5).rsqrt() * w
    return f


def softmax(lib):
    def f(x):
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)
    return f


def logsoftmax(lib):
    def f(x):
        m = x.max(-1, keepdim=True).values
        return x - (m + (x - m).exp().sum(-1, keepdim=True).log())
    return f


def swiglu(lib):
    def f(a, b):
        return lib.nn.functional.silu(a) * b
    return f


def leaky(lib):
    def f(h):
        return lib.where(h > 0, h, 0.01 * h).clamp(min=-3.0, max=3.0)
    return f


def huber(lib):
    def f(x, y):
        d = x - y
        a = d.abs()
        loss = lib.where(a < 1, 0.5 * d * d, a - 0.5)
        return loss.masked_fill(~((x != x) | (y > 3)), 0.0)
    return f


def sincos(lib):
    def f(a, b):
        return a.sin() * b + a.cos()
    return f


def adam_loop(ps, ms, vs):
    lr, b1, b2, eps, step = 3e-4, 0.9, 0.999, 1e-8, 1

    def f(gs):
        for p, g, m, v in zip(ps, gs, ms, vs):
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / (1 - b2 ** step) ** 0.5).add_(eps)
            p.addcdiv_(m, denom, value=-lr / (1 - b1 ** step))
    return f


def adam_torch_loop(ps, ms, vs):
    """torch.optim.Adam's single-tensor step as torch 2.13 writes it (_single_tensor_adam): lerp_, mul_().addcmul_(),
    sqrt, div_, add_, addcdiv_ per parameter."""
    lr, b1, b2, eps, step = 3e-4, 0.9, 0.999, 1e-8, 1

    def f(gs):
        for p, g, m, v in zip(ps, gs, ms, vs):
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / (1 - b2 ** step) ** 0.5).add_(eps)
            p.addcdiv_(m, denom, value=-lr / (1 - b1 ** step))
    return f


def lion_loop(ps, ms):
    """Lion (Chen et al. 2023) as lion-pytorch writes it: no fused op matches it."""
    lr, b1, b2, wd = 1e-4, 0.9, 0.99, 0.1

    def f(gs):
        for p, g, m in zip(ps, gs, ms):
            p.mul_(1 - lr * wd)
            update = m.clone().mul_(b1).add(g, alpha=1 - b1).sign_()
            p.add_(update, alpha=-lr)
            m.mul_(b2).add_(g, alpha=1 - b2)
    return f


def xent(lib):
    F = lib.nn.functional

    def f(x, t):
        loss = F.nll_loss(F.log_softmax(x, -1), t)
        loss.backward()
        g = x.grad
        x.grad = None
        return loss.detach(), g
    return f


def xent_gather(lib):
    F = lib.nn.functional

    def f(x, t):
        loss = -F.log_softmax(x, -1).gather(-1, t[:, None]).mean()
        loss.backward()
        g = x.grad
        x.grad = None
        return loss.detach(), g
    return f


def xent_lse(lib):
    def f(x, t):
        loss = (x.logsumexp(-1) - x.gather(-1, t[:, None]).squeeze(-1)).mean()
        loss.backward()
        g = x.grad
        x.grad = None
        return loss.detach(), g
    return f


def mse(lib):
    def f(h, b, y):
        loss = ((h + b - y) ** 2).mean()
        loss.backward()
        g = h.grad
        h.grad = None
        return loss.detach(), g
    return f


def xent_fused(x, t):
    """eager's fused cross-entropy, forward and backward (the peer of the composed forms)."""
    loss = dg.nn.functional.cross_entropy(x, t)
    loss.backward()
    g = x.grad
    x.grad = None
    return loss.detach(), g


PATTERN_CASES = ("xent", "xent_gather", "xent_lse")
SELECT_CASES = ("leaky", "huber", "sincos")

BENCH_SHAPES = [(256, 384)] + [(384,), (1152, 384), (384, 384), (384,), (2048, 384), (384, 1024)] * 6 + [(384,),
                                                                                                       (256, 384)]


def cases(lib):
    lib.manual_seed(0)
    x, w = lib.randn(8, 256, 384), lib.randn(384)
    scores = lib.randn(48, 256, 256) * 3
    a, b = lib.randn(8, 256, 1024), lib.randn(8, 256, 1024)
    ps = [lib.randn(*s) for s in BENCH_SHAPES]
    ms = [lib.zeros_like(p) for p in ps]
    vs = [lib.zeros_like(p) for p in ps]
    gs = [lib.randn(*s) * 1e-2 for s in BENCH_SHAPES]
    logits, targets = (lib.randn(2048, 4096) * 2).requires_grad_(), lib.randint(0, 4096, (2048,))
    head, bias, target = lib.randn(2048, 512).requires_grad_(), lib.randn(512), lib.randn(2048, 512)
    return {"rmsnorm": (rmsnorm(lib), (x, w)), "softmax": (softmax(lib), (scores,)),
            "logsoftmax": (logsoftmax(lib), (scores,)), "swiglu": (swiglu(lib), (a, b)),
            "adam": (adam_loop(ps, ms, vs), (gs,)), "adam_torch": (adam_torch_loop(ps, ms, vs), (gs,)),
            "lion": (lion_loop(ps, ms), (gs,)), "xent": (xent(lib), (logits, targets)),
            "xent_gather": (xent_gather(lib), (logits, targets)), "xent_lse": (xent_lse(lib), (logits, targets)),
            "mse": (mse(lib), (head, bias, target)),
            "leaky": (leaky(lib), (a * 2,)), "huber": (huber(lib), (a, b)), "sincos": (sincos(lib), (a * 3, b))}


def adamw_fused(shapes):
    """eager's fused multi-tensor step (dygrad's adamw_step: torch.optim.Adam's single-tensor formula, one Task for all
    parameters) over parameters of `shapes`: what an AdamW pattern would replace the per-parameter loop with. It counts
    its own steps (the loops above keep step 1): the same work per call."""
    ps = [dg.randn(*s) for s in shapes]
    ms, vs = [dg.zeros_like(p) for p in ps], [dg.zeros_like(p) for p in ps]
    steps = [dg.zeros((), dtype=dg.float32) for _ in ps]
    lr, hyper = dg.tensor(3e-4, dtype=dg.float64), dg.tensor([0.9, 0.999, 1e-8, 0.0], dtype=dg.float64)

    def f(gs):
        dg._C.adamw_step(ps, gs, ms, vs, steps, lr=lr, hyper=hyper, decoupled_weight_decay=False)
    return f


def fused_peers():
    """dygrad's hand-written fused kernels for the cases that have one (eager, no jit)."""
    return {"adam_torch": adamw_fused(BENCH_SHAPES),
            "rmsnorm": lambda x, w: dg.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-5),
            "softmax": lambda x: dg.nn.functional.softmax(x, -1),
            "logsoftmax": lambda x: dg.nn.functional.log_softmax(x, -1), "xent": xent_fused,
            "xent_gather": xent_fused, "xent_lse": xent_fused}


def timed(fn, args, sync, block=1):
    """Seconds per call of `block` calls in a row, then one sync (block > 1: a sub-millisecond call's time without
    the stream worker's wake-up after each sync, which a loaded machine's scheduler makes dominate)."""
    t0 = time.perf_counter()
    for _ in range(block):
        fn(*args)
    sync()
    return (time.perf_counter() - t0) / block


def graph_bytes(jitted):
    """Bytes a jitted function's graph moves: each op's operands read or written once (the op table's count for
    elementwise ops and for a fused sub-op alike)."""
    graph = next(e.graph for e in jitted._entries.values() if getattr(e, "graph", None) is not None)
    r = graph.records()
    total = 0
    for op in r["ops"]:
        for v in list(op[3]) + list(op[4]):
            if v >= 0:
                sizes, dtype = r["values"][v][2], r["values"][v][4]
                n = 1
                for d in sizes:
                    n *= d
                total += n * dtype.itemsize
    return total


def measure(sides, reps, block=1, spreads=None):
    """Median seconds per call of each side, interleaved; `spreads` (a dict) gets each side's (min, max)."""
    results = {}
    for name, entries in sides.items():
        for _, (fn, args, sync) in entries.items():
            timed(fn, args, sync)
        times = {k: [] for k in entries}
        for _ in range(reps):  # interleaved
            for k, (fn, args, sync) in entries.items():
                times[k].append(timed(fn, args, sync, block))
        results[name] = {k: statistics.median(v) for k, v in times.items()}
        if spreads is not None:
            spreads[name] = {k: (min(v), max(v)) for k, v in times.items()}
    return results


def torch_side(reps, threads, only, block):
    """torch eager and torch.compile, interleaved, in a process of their own (torch's and dygrad's thread pools
    would contend in one process: bench/jit.py does the same)."""
    import torch
    torch.set_num_threads(threads)
    sides, compile_s = {}, {}
    for name, (fn, args) in cases(torch).items():
        if only and name not in only:
            continue
        tc = torch.compile(fn)
        t0 = time.perf_counter()
        tc(*args)
        compile_s[name] = time.perf_counter() - t0
        sides[name] = {"torch eager": (fn, args, lambda: None), "torch.compile": (tc, args, lambda: None)}
    spreads = {}
    results = measure(sides, reps, block, spreads)
    print(json.dumps({"results": results, "spreads": spreads, "compile_s": compile_s}))


def llama_side(reps, steps):
    """The done-when's shape on the `bench` config: the hand-fused model eager against the composed model
    (fused=False) jitted at O0 and O1, training steps with AdamW, interleaved blocks of `steps` steps (the step and
    data of bench/jit_models.py, which also runs torch's side)."""
    from jit_models import dygrad_step, interleave

    def make(fused, level):
        fn, x, y = dygrad_step("llama", fused, level)
        for _ in range(2):
            fn(x, y)
        if level == "O1":  # the steady state: the optimized graph with its compiled kernels from the first sample
            fn.wait_for_kernels()
            fn(x, y)
        dg.synchronize()
        return fn, x, y

    sides = {"fused eager": make(True, None), "composed O0": make(False, "O0"), "composed O1": make(False, "O1")}
    med = interleave(sides, reps, steps, dg.synchronize)
    print("llama bench config, s/step: " + ", ".join(f"{k} {v:.4f}" for k, v in med.items()) +
          f" | composed O1 / fused eager speed {med['fused eager'] / med['composed O1']:.3f}x, composed O1 / O0 "
          f"speed {med['composed O0'] / med['composed O1']:.3f}x; fused kernels "
          f"{sides['composed O1'][0].stats['fused_kernels']}")


def o1_without(switch, fn, args):
    """fn at O1 captured (and optimized) with the pass `switch` of dygrad.jit.config off."""
    jitted = dg.jit(fn, jit_level="O1")
    setattr(dg.jit.config, switch, False)
    try:
        jitted(*args)
        jitted(*args)
    finally:
        setattr(dg.jit.config, switch, True)
    return jitted


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="both sides' intra-op threads (1: on a shared, loaded VM "
                    "torch's OpenMP barriers at 2 threads cost 25x, 33 ms against 1.35 ms for the rmsnorm)")
    ap.add_argument("--torch-side", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--llama", action="store_true", help="only the LLaMA training step (bench config)")
    ap.add_argument("--cases", default="", help="a comma-separated subset of the cases (default: all)")
    ap.add_argument("--block", type=int, default=1, help="calls per timed sample, one sync after them (default 1)")
    opts = ap.parse_args()
    only = set(filter(None, opts.cases.split(",")))
    dg.set_num_threads(opts.threads)
    if opts.llama:
        dg.jit.config.background = False
        return llama_side(max(3, opts.reps // 5), 2)
    if opts.torch_side:
        return torch_side(opts.reps, dg.get_num_threads(), only, opts.block)
    dg.jit.config.background = False  # the compile is timed apart, below
    sides, compile_s, moved = {}, {}, {}
    peers = fused_peers()
    for name, (fn, args) in cases(dg).items():
        if only and name not in only:
            continue
        o0, o1 = dg.jit(fn, jit_level="O0"), dg.jit(fn, jit_level="O1")
        for level, f in (("O0", o0), ("O1", o1)):
            f(*args)
            t0 = time.perf_counter()
            f(*args)  # the capture (O1: passes, and the compile or the cache's load)
            dg.synchronize()
            compile_s[f"{name} {level}"] = time.perf_counter() - t0
        sides[name] = {"dg eager": (fn, args, dg.synchronize), "dg O0": (o0, args, dg.synchronize),
                       "dg O1": (o1, args, dg.synchronize)}
        if name in PATTERN_CASES:
            sides[name]["dg O1 no patterns"] = (o1_without("patterns", fn, args), args, dg.synchronize)
            assert "=== patterns: nothing matched" not in dg.jit.graph(fn, *args, passes=True), name
        if name in SELECT_CASES:
            sides[name]["dg O1 no fusion"] = (o1_without("fusion", fn, args), args, dg.synchronize)
        moved[name] = (graph_bytes(o0), graph_bytes(o1))
        if name in peers:
            sides[name]["dg fused"] = (peers[name], args, dg.synchronize)
        assert o1.stats["fused_kernels"] > 0 or name in PATTERN_CASES, name
    spreads = {}
    results = measure(sides, opts.reps, opts.block, spreads)
    if not opts.no_torch:
        out = subprocess.run([sys.executable, __file__, "--torch-side", "--reps", str(opts.reps), "--threads",
                              str(opts.threads), "--cases", opts.cases, "--block", str(opts.block)],
                             capture_output=True,
                             text=True)
        t = json.loads(out.stdout.strip().splitlines()[-1])
        for name, r in t["results"].items():
            results[name].update(r)
            spreads[name].update(t["spreads"][name])
        for name, v in t["compile_s"].items():
            compile_s[f"{name} torch.compile"] = v
    print(f"# {datetime.date.today()} {lscpu_model()}, {dg.get_num_threads()} threads, kernel level "
          f"{dg.backends.cpu.kernel_isa()[0]}, {opts.block} call(s) per sample")
    for name, r in results.items():
        line = f"{name:10s} " + "  ".join(f"{k} {v * 1e3:8.3f} ms" for k, v in r.items())
        line += f"  | O1/O0 time {r['dg O1'] / r['dg O0']:.2f}x, O1/eager {r['dg O1'] / r['dg eager']:.2f}x"
        if "dg fused" in r:
            line += f", O1/fused eager {r['dg O1'] / r['dg fused']:.2f}x"
        if "dg O1 no patterns" in r:
            line += f", O1/O1 no patterns {r['dg O1'] / r['dg O1 no patterns']:.2f}x"
        if "dg O1 no fusion" in r:
            line += f", O1/O1 no fusion {r['dg O1'] / r['dg O1 no fusion']:.2f}x"
        if "torch.compile" in r:
            line += f", O1/torch.compile {r['dg O1'] / r['torch.compile']:.2f}x"
        print(line)
    print("spread (min-max ms over the samples): " + "; ".join(
        f"{name}: " + ", ".join(f"{k} {a * 1e3:.2f}-{b * 1e3:.2f}" for k, (a, b) in r.items())
        for name, r in spreads.items()))
    print("first call captured (s): " + ", ".join(f"{k} {v:.2f}" for k, v in compile_s.items()))
    print("bytes moved (every operand read or written once, per the graphs' ops), eager (= O0) / O1, and the bar "
          "(0.8x of that ratio) against O1's speed over eager: " + ", ".join(
              f"{k} {a / 2**20:.0f} / {b / 2**20:.0f} MiB = {a / b:.2f}x (bar {0.8 * a / b:.2f}x, got "
              f"{results[k]['dg eager'] / results[k]['dg O1']:.2f}x)" for k, (a, b) in moved.items()))


if __name__ == "__main__":
    main()
