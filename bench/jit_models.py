"""Issue 35's model bars: a composed model's training step under dygrad.jit O1 against the same model written with
dygrad's fused ops (eager), and against torch 2.13 eager and torch.compile on the composed model, side by side.

    python bench/jit_models.py --model llama [--reps 10] [--threads 1] [--no-torch] [--no-memory]
    python bench/jit_models.py --model gpt2
    python bench/jit_models.py --model llama --autocast      # every side's forward under bf16 autocast

- llama: dygrad.models.llama `bench` config; fused = rms_norm, rotary_attention, swiglu, cross_entropy; composed =
  the same model with basic ops (`fused=False`); torch's composed model is ../shared/bench/torch_ref.py's with SDPA=0
  (the same code as dygrad's composed model).
- gpt2: dygrad.models.gpt2 (nanoGPT's model) at its `bench` config (6 layers, 384 wide, 6 heads, 256 positions, 256
  tokens, batch 8); fused = sdpa(is_causal), gelu(tanh), F.layer_norm, cross_entropy; composed = nanoGPT's first
  version (new_gelu, masked softmax attention, LayerNorm by hand); torch runs the very same class (gpt2.build(torch)).
Each step: forward with the loss, backward, AdamW (lr 3e-4), zero_grad(set_to_none=True). dygrad's sides run
interleaved in this process (blocks of 2 steps, the median per step), O1 measured once its kernels are loaded;
torch eager and torch.compile (`torch.compile(model)` and `torch.compile(opt.step)`, a fresh TORCHINDUCTOR_CACHE_DIR)
interleaved in a subprocess right after. Also: the cold first-call latency of O1 (a fresh kernel cache) and of
torch.compile, a second process's O1 first call (the cache warm), and each side's peak allocated memory over 3
steps (a process of its own per side; dygrad's allocator counts, torch's peak RSS is not comparable and not shown).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_BENCH = os.path.join(HERE, "..", "..", "shared", "bench")


def lscpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except Exception:  # noqa: BLE001
        return "?"


def batch(lib, vocab, B, T):
    import numpy as np
    data = np.random.default_rng(0).integers(0, vocab, size=(B, T + 1))
    return lib.tensor(data[:, :-1].copy()), lib.tensor(data[:, 1:].copy())


def dygrad_model(name, fused):
    import dygrad as dg
    dg.manual_seed(0)
    if name == "llama":
        from dygrad.models import llama
        cfg = llama.CONFIGS["bench"]
        return llama.Llama(cfg, fused=fused), cfg.vocab_size, cfg.batch_size, cfg.seq_len
    from dygrad.models import gpt2
    GPT, _ = gpt2.build(dg)
    cfg = gpt2.CONFIGS["bench"]
    return GPT(cfg, fused=fused), cfg.vocab_size, cfg.batch_size, cfg.block_size


def dygrad_step(name, fused, level, autocast=False):
    """(step function, x, y) for one side; O1 waits for its kernels (the steady state). autocast: the forward under
    bf16 autocast (the loss backward and AdamW as always)."""
    import contextlib
    import dygrad as dg
    model, vocab, B, T = dygrad_model(name, fused)
    opt = dg.optim.AdamW(model.parameters(), lr=3e-4)
    x, y = batch(dg, vocab, B, T)

    def step(x, y):
        with dg.autocast("cpu", dtype=dg.bfloat16) if autocast else contextlib.nullcontext():
            loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    fn = dg.jit(step, jit_level=level) if level else step
    return fn, x, y


def interleave(sides, reps, steps, sync):
    times = {k: [] for k in sides}
    for _ in range(reps):
        for k, (fn, x, y) in sides.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                fn(x, y)
            sync()
            times[k].append((time.perf_counter() - t0) / steps)
    return {k: statistics.median(v) for k, v in times.items()}


def dygrad_side(opts):
    import dygrad as dg
    dg.set_num_threads(opts.threads)
    dg.jit.config.background = False
    sides, first_call = {}, {}
    labels = [("dg fused eager", True, None), ("dg composed O1", False, "O1")]
    if opts.autocast:  # what O1 adds over the same composed code run eagerly
        labels.append(("dg composed eager", False, None))
    for label, fused, level in labels:
        fn, x, y = dygrad_step(opts.model, fused, level, opts.autocast)
        t0 = time.perf_counter()
        fn(x, y)  # O1: the first call runs eagerly
        dg.synchronize()
        t1 = time.perf_counter()
        fn(x, y)  # O1: the capture, the passes and the kernels' compile (or the cache's load)
        dg.synchronize()
        first_call[label] = (t1 - t0, time.perf_counter() - t1)
        sides[label] = (fn, x, y)
    med = interleave(sides, opts.reps, 2, dg.synchronize)
    return med, first_call


def torch_side(opts):
    import torch
    torch.set_num_threads(opts.threads)
    torch.manual_seed(0)
    if opts.model == "llama":
        os.environ["SDPA"] = "0"
        sys.path.insert(0, SHARED_BENCH)
        import torch_ref
        L, d, h, f, V, T, B = torch_ref.CFGS["bench"]

        def make():
            torch.manual_seed(0)
            return torch_ref.LLaMA(L, d, h, f, V, T), V, B, T
    else:
        import importlib.util  # the model file alone (it imports nothing of dygrad): no second thread pool here
        spec = importlib.util.spec_from_file_location("gpt2", os.path.join(HERE, "..", "python", "dygrad", "models",
                                                                           "gpt2.py"))
        gpt2 = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gpt2)
        GPT, _ = gpt2.build(torch)
        cfg = gpt2.CONFIGS["bench"]

        def make():
            torch.manual_seed(0)
            return GPT(cfg, fused=False), cfg.vocab_size, cfg.batch_size, cfg.block_size

    sides, first_call = {}, {}
    for label, compiled in (("torch eager", False), ("torch.compile", True)):
        model, V, B, T = make()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        x, y = batch(torch, V, B, T)
        fwd = torch.compile(model) if compiled else model
        opt_step = torch.compile(opt.step) if compiled else opt.step

        def step(x, y, fwd=fwd, opt=opt, opt_step=opt_step):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=opts.autocast):
                loss = fwd(x, y)
            loss.backward()
            opt_step()
            opt.zero_grad(set_to_none=True)
            return loss

        t0 = time.perf_counter()
        step(x, y)
        first_call[label] = time.perf_counter() - t0
        step(x, y)
        sides[label] = (step, x, y)
    med = interleave(sides, opts.reps, 2, lambda: None)
    print(json.dumps({"med": med, "first_call": first_call}))


def memory_side(opts, label):
    """Peak allocated bytes over 3 steps of one side, in this process alone."""
    import dygrad as dg
    dg.set_num_threads(opts.threads)
    dg.jit.config.background = False
    fused, level = {"dg fused eager": (True, None), "dg composed O1": (False, "O1")}[label]
    fn, x, y = dygrad_step(opts.model, fused, level, opts.autocast)
    for _ in range(3):  # O1: the eager call, the capture (its kernels compiled) and the first replay
        fn(x, y)
    dg.synchronize()
    first = dg.memory.max_memory_allocated()
    dg.memory.reset_peak_memory_stats()
    for _ in range(2):
        fn(x, y)
    dg.synchronize()
    print(json.dumps({"peak": dg.memory.max_memory_allocated(), "first": first}))


def run_json(args, env=None):
    out = subprocess.run([sys.executable, __file__] + args, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["llama", "gpt2"], default="llama")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="every side's intra-op threads (1 on a shared 2-core VM)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--autocast", action="store_true", help="every side's forward under bf16 autocast (dygrad also "
                    "times the composed model eagerly)")
    ap.add_argument("--side", default=None, help=argparse.SUPPRESS)  # torch | memory:<label> | warm
    opts = ap.parse_args()
    if opts.side == "torch":
        return torch_side(opts)
    if opts.side and opts.side.startswith("memory:"):
        return memory_side(opts, opts.side.split(":", 1)[1])
    if opts.side == "warm":  # a second process: O1's first call with the kernel cache warm
        import dygrad as dg
        dg.set_num_threads(opts.threads)
        dg.jit.config.background = False
        fn, x, y = dygrad_step(opts.model, False, "O1", opts.autocast)
        fn(x, y)
        dg.synchronize()
        t0 = time.perf_counter()
        fn(x, y)
        dg.synchronize()
        print(json.dumps({"first_call": time.perf_counter() - t0}))
        return

    import dygrad as dg
    cache = tempfile.mkdtemp(prefix="dg-jit-cache-")
    os.environ["DG_JIT_CACHE_DIR"] = cache  # cold: a fresh kernel cache (the warm process below reuses it)
    med, first_call = dygrad_side(opts)
    extra = ["--autocast"] if opts.autocast else []
    warm = run_json(["--model", opts.model, "--threads", str(opts.threads), "--side", "warm"] + extra)["first_call"]
    peaks = {}
    if not opts.no_memory:
        for label in ("dg fused eager", "dg composed O1"):
            peaks[label] = run_json(["--model", opts.model, "--threads", str(opts.threads),
                                     "--side", f"memory:{label}"] + extra)
    torch_res = None
    if not opts.no_torch:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-"))
        torch_res = run_json(["--model", opts.model, "--threads", str(opts.threads), "--reps", str(opts.reps),
                              "--side", "torch"] + extra, env)
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC {lscpu_model()}, {opts.threads} "
          f"thread(s), kernel level {dg.backends.cpu.kernel_isa()[0]}, model {opts.model} (bench config), "
          f"{opts.reps} interleaved blocks of 2 steps")
    fused, o1 = med["dg fused eager"], med["dg composed O1"]
    print(f"s/step: dg fused eager {fused:.4f}, dg composed O1 {o1:.4f} | composed O1 / fused eager speed "
          f"{fused / o1:.3f}x" + (" (bf16 autocast)" if opts.autocast else ""))
    if "dg composed eager" in med:
        print(f"dg composed eager {med['dg composed eager']:.4f} s/step | composed O1 / composed eager speed "
              f"{med['dg composed eager'] / o1:.3f}x")
    eager_first, capture = first_call["dg composed O1"]
    added = capture - eager_first
    print(f"dg O1 cold: the capture call {capture:.2f} s against the eager first call {eager_first:.2f} s: "
          f"{added:.2f} s added; a second process's capture call (kernel cache warm) {warm:.2f} s")
    if peaks:
        f, c = peaks["dg fused eager"], peaks["dg composed O1"]
        print(f"peak allocated, steps 4-5 (steady state): fused eager {f['peak'] / 2**20:.1f} MiB, composed O1 "
              f"{c['peak'] / 2**20:.1f} MiB ({c['peak'] / f['peak']:.3f}x); over steps 1-3 (O1's eager call and "
              f"capture among them): {f['first'] / 2**20:.1f} and {c['first'] / 2**20:.1f} MiB")
    if torch_res:
        t = torch_res["med"]
        torch_added = torch_res["first_call"]["torch.compile"] - t["torch eager"]
        print(f"torch (composed model, its own process right after): eager {t['torch eager']:.4f}, torch.compile "
              f"{t['torch.compile']:.4f} s/step | dg composed O1 / torch.compile speed {t['torch.compile'] / o1:.3f}x, "
              f"/ torch eager {t['torch eager'] / o1:.3f}x; torch.compile's first call "
              f"{torch_res['first_call']['torch.compile']:.1f} s (cold cache), {torch_added:.1f} s over its eager step: "
              f"dg O1's cold compile adds {added / max(torch_added, 1e-9):.3f} of torch.compile's")

if __name__ == "__main__":
    main()
