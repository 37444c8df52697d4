"""dygrad.jit against eager, and torch 2.13 eager and torch.compile on the same configurations (docs/jit.md).

    python3 bench/jit.py [--blocks 6] [--steps 20]

Two configurations of the LLaMA model (python/dygrad/models/llama.py, torch's is ../shared/bench/torch_ref.py):
- host: the composed model with dim 64, 2 layers, 4 heads, batch 1, sequence 16 (host-bound: hundreds of tiny ops);
- bench: BENCHMARKS.md's bench model, fused.
For each, in one process, on one model: eager and compiled training steps alternate in blocks (A B B A ...) of
--steps steps, the figure being the median over blocks of each block's mean step time (profiler off; the first
two compiled calls, warm-up and capture, are outside the blocks). The ceiling is eager's step time over the sum of
its kernels' device spans per step (the profiler on, eager, over --steps steps): what a replay without any host
cost could reach. Capture cost: the capture call's time minus an eager step's. torch eager and torch.compile
(default mode) run in a subprocess each with the same alternation, at torch's default threads. Prints one line per
figure; the CPU model first.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_REF = os.path.join(HERE, "..", "..", "shared", "bench")

CONFIGS = {
    # name: (layers, dim, heads, ffn, vocab, seq, batch, fused)
    "host": (2, 64, 4, 172, 256, 16, 1, False),
    "bench": (6, 384, 6, 1024, 256, 256, 8, True),
}


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def dygrad_run(name, blocks, steps):
    import numpy as np

    import dygrad as dg
    from dygrad.models import llama
    L, d, h, f, V, T, B, fused = CONFIGS[name]
    cfg = llama.LlamaConfig(n_layers=L, dim=d, n_heads=h, ffn_dim=f, vocab_size=V, seq_len=T, batch_size=B)
    dg.manual_seed(0)
    model = llama.Llama(cfg, fused=fused)
    opt = dg.optim.AdamW(model.parameters(), lr=3e-4)
    rng = np.random.default_rng(0)
    data = rng.integers(0, V, size=(B, T + 1))
    x, y = dg.tensor(data[:, :-1].copy()), dg.tensor(data[:, 1:].copy())

    def step(x, y):
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    compiled = dg.jit(step)

    def timed(fn, n):
        dg.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn(x, y)
        dg.synchronize()
        return (time.perf_counter() - t) / n

    timed(step, 2)
    eager_one = timed(step, 3)
    compiled(x, y)  # warm-up (eager)
    dg.synchronize()
    t = time.perf_counter()
    compiled(x, y)  # the capture
    dg.synchronize()
    capture_s = time.perf_counter() - t
    timed(compiled, 2)
    eager, jit = [], []
    for b in range(blocks):
        order = (step, compiled) if b % 2 == 0 else (compiled, step)
        for fn in order:
            (eager if fn is step else jit).append(timed(fn, steps))
    assert compiled.stats["captures"] == 1 and compiled.stats["recompiles"] == 0, compiled.stats
    with dg.profiler.profile() as prof:
        for _ in range(steps):
            step(x, y)
        dg.synchronize()
    kernels = sum(o.device_end_ns - o.device_begin_ns for o in prof.result.ops if o.device_thread >= 0) / steps / 1e9
    e, j = statistics.median(eager), statistics.median(jit)
    graph = next(en.graph for en in compiled._entries.values() if en.graph is not None)
    dg.synchronize()
    dg.memory.reset_peak_memory_stats()
    timed(step, 3)
    eager_peak = dg.memory.max_memory_allocated()
    dg.memory.reset_peak_memory_stats()
    timed(compiled, 3)
    jit_peak = dg.memory.max_memory_allocated()
    return {"arena_mb": graph.arena_bytes / 2**20, "eager_peak_mb": eager_peak / 2**20, "jit_peak_mb": jit_peak / 2**20,
            "eager_s": e, "jit_s": j, "kernels_s": kernels, "ceiling": e / kernels, "speedup": e / j,
            "of_ceiling": (e / j) / (e / kernels), "capture_extra_s": capture_s - eager_one,
            "ops_per_step": len(prof.result.ops) / steps, "tokens": B * T}


TORCH_WORKER = r'''
import os, sys, time, statistics, json
sys.path.insert(0, sys.argv[1])
os.environ.setdefault("SDPA", "0")
import torch
import torch_ref
L, d, h, f, V, T, B = json.loads(sys.argv[2])
blocks, steps, fused = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
torch_ref.SDPA = fused
torch.manual_seed(0)
m = torch_ref.LLaMA(L, d, h, f, V, T)
opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
x = torch.randint(0, V, (B, T)); y = torch.randint(0, V, (B, T))
def step(x, y):
    loss = m(x, y); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); return loss
cm = torch.compile(m)
def cstep(x, y):
    loss = cm(x, y); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); return loss
def timed(fn, n):
    t = time.perf_counter()
    for _ in range(n): fn(x, y)
    return (time.perf_counter() - t) / n
timed(step, 3)
t = time.perf_counter(); cstep(x, y); compile_s = time.perf_counter() - t
timed(cstep, 2)
eager, comp = [], []
for b in range(blocks):
    for fn in ((step, cstep) if b % 2 == 0 else (cstep, step)):
        (eager if fn is step else comp).append(timed(fn, steps))
print(json.dumps({"eager_s": statistics.median(eager), "compile_s": statistics.median(comp), "first_compile_s": compile_s}))
'''


def torch_run(name, blocks, steps):
    L, d, h, f, V, T, B, fused = CONFIGS[name]
    r = subprocess.run([sys.executable, "-c", TORCH_WORKER, TORCH_REF, json.dumps([L, d, h, f, V, T, B]), str(blocks),
                        str(steps), "1" if fused else "0"], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--configs", default="host,bench")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--torch-blocks", type=int, default=2, help="torch's alternation (eager, compiled): blocks")
    p.add_argument("--torch-steps", type=int, default=10, help="torch's steps per block")
    a = p.parse_args()
    print(f"cpu: {cpu_model()}, {os.cpu_count()} cores")
    for name in a.configs.split(","):
        r = dygrad_run(name, a.blocks, a.steps)
        print(f"{name}: dygrad eager {r['eager_s'] * 1e3:.3f} ms/step, jit {r['jit_s'] * 1e3:.3f} ms/step, "
              f"speedup {r['speedup']:.2f}x; kernels {r['kernels_s'] * 1e3:.3f} ms/step ({r['ops_per_step']:.0f} ops), "
              f"ceiling {r['ceiling']:.2f}x, jit reaches {r['of_ceiling']:.2f} of it; "
              f"capture adds {r['capture_extra_s'] * 1e3:.1f} ms; {r['tokens'] / r['jit_s']:.0f} tok/s compiled; "
              f"peak allocated eager {r['eager_peak_mb']:.1f} MB, jit {r['jit_peak_mb']:.1f} MB "
              f"(arena {r['arena_mb']:.1f} MB)")
        if not a.no_torch:
            t = torch_run(name, a.torch_blocks, a.torch_steps)
            if "error" in t:
                print(f"{name}: torch failed: {t['error']}")
            else:
                print(f"{name}: torch eager {t['eager_s'] * 1e3:.3f} ms/step, torch.compile {t['compile_s'] * 1e3:.3f} "
                      f"ms/step (first compile {t['first_compile_s']:.1f} s); dygrad jit vs torch eager "
                      f"{t['eager_s'] / r['jit_s']:.2f}x, vs torch.compile {t['compile_s'] / r['jit_s']:.2f}x")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
