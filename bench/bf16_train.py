"""`python3 bench/bf16.py train`: the `bench` config trained in bfloat16, dygrad against PyTorch 2.13 autocast.

1. Throughput: fresh processes alternating, --rounds rounds of --steps steps each (median step after one warm-up):
   dygrad fp32, dygrad under dg.autocast, dygrad pure bf16 (model.to(bf16) + float32 master weights), torch fp32
   and torch autocast (BF16=1) at its default threads and THREADS=1/2; the ratio is dygrad autocast over the best
   torch autocast setting.
2. Loss curve: dygrad fp32 and dygrad autocast from the same initial weights on the same batches (--curve-steps
   steps over a small fixed set of batches, so the loss falls): the largest relative difference of the losses.
3. Activation memory: the allocator's activation bytes alive after the forward pass (what the backward keeps),
   autocast over fp32, without and with the region's cached bf16 weight casts (which the allocator counts as
   parameters).
"""
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_REF = os.path.join(HERE, "..", "..", "shared", "bench", "torch_ref.py")


def worker(cfg_name, steps, mode):
    import numpy as np

    import dygrad as dg
    from dygrad.models import llama

    c = llama.CONFIGS[cfg_name]
    dg.manual_seed(0)
    model = llama.Llama(c)
    if mode == "pure":
        model.to(dg.bfloat16)
        opt = dg.optim.AdamW([{"params": model.parameters(), "master_weights": True}], lr=3e-4)
    else:
        opt = dg.optim.AdamW(model.parameters(), lr=3e-4)
    rng = np.random.default_rng(0)
    data = rng.integers(0, c.vocab_size, size=(c.batch_size, c.seq_len + 1))
    x, y = dg.tensor(data[:, :-1].copy()), dg.tensor(data[:, 1:].copy())
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        with dg.autocast("cpu", enabled=(mode == "autocast")):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dg.synchronize()
        times.append(time.perf_counter() - t)
    st = statistics.median(times[1:])
    print(f"cfg {cfg_name} mode {mode} threads {dg.get_context().num_threads} step_s {st:.3f} "
          f"tokens_per_s {c.batch_size * c.seq_len / st:.0f} loss {loss.float().item():.3f}")


def run_process(cmd, env=None):
    out = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=1800)
    line = [l for l in out.stdout.splitlines() if l.startswith("cfg ")]
    if out.returncode != 0 or not line:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return float(dict(re.findall(r"(\w+) ([\d.]+)", line[-1]))["tokens_per_s"]), line[-1]


def loss_curve_and_memory(cfg_name, steps):
    import numpy as np

    import dygrad as dg
    from dygrad.models import llama

    c = llama.CONFIGS[cfg_name]
    rng = np.random.default_rng(1)
    # a few fixed batches of a repeating pattern with noise: learnable, so the curve falls
    base = rng.integers(0, c.vocab_size, size=64)
    batches = []
    for _ in range(4):
        offs = rng.integers(0, 64, size=c.batch_size)
        seq = np.stack([base[(o + np.arange(c.seq_len + 1)) % 64] for o in offs])
        noise = rng.random(seq.shape) < 0.1
        seq[noise] = rng.integers(0, c.vocab_size, size=int(noise.sum()))
        batches.append((dg.tensor(seq[:, :-1].copy()), dg.tensor(seq[:, 1:].copy())))
    curves, activation = {}, {}
    for mode in ("fp32", "autocast"):
        dg.manual_seed(0)
        model = llama.Llama(c)
        opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for step in range(steps):
            x, y = batches[step % len(batches)]
            with dg.autocast("cpu", enabled=(mode == "autocast")):
                loss = model(x, y)
                if step == 0:
                    dg.synchronize()
                    stats = dg._C.memory_stats()
                    activation[mode] = (stats["allocated_bytes.activation"], stats["allocated_bytes.parameter"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.float().item())
        curves[mode] = np.array(losses)
    rel = np.abs(curves["autocast"] - curves["fp32"]) / curves["fp32"]
    return curves, rel, activation


def run(args, cpu_line):
    if os.environ.get("BF16_WORKER"):
        return worker(args.config, args.steps, os.environ["BF16_WORKER"])
    print(cpu_line)
    me = [sys.executable, os.path.join(HERE, "bf16.py"), "train", "--config", args.config, "--steps", str(args.steps)]
    torch_cmd = [sys.executable, TORCH_REF, "train", args.config]
    steps_env = {"STEPS": str(args.steps)}
    variants = {
        "dygrad fp32": (me, {"BF16_WORKER": "fp32"}),
        "dygrad autocast": (me, {"BF16_WORKER": "autocast"}),
        "dygrad pure bf16 + master": (me, {"BF16_WORKER": "pure"}),
        "torch fp32": (torch_cmd, steps_env),
        "torch autocast": (torch_cmd, {**steps_env, "BF16": "1"}),
        "torch autocast THREADS=1": (torch_cmd, {**steps_env, "BF16": "1", "THREADS": "1"}),
        "torch autocast THREADS=2": (torch_cmd, {**steps_env, "BF16": "1", "THREADS": "2"}),
    }
    results = {k: [] for k in variants}
    for r in range(args.rounds):
        for name, (cmd, env) in variants.items():
            tok, line = run_process(cmd, env)
            results[name].append(tok)
            print(f"round {r} {name}: {line}", flush=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    best = max((v, k) for k, v in med.items() if k.startswith("torch autocast"))
    print(f"\nconfig {args.config}, {args.rounds} rounds x {args.steps} steps, median tokens/s (under load)")
    for k, v in med.items():
        print(f"{k:28s} {v:9.0f}  vs best torch autocast {v / best[0]:5.2f}")
    print(f"best torch autocast: {best[1]}; dygrad autocast / it = {med['dygrad autocast'] / best[0]:.2f}")
    curves, rel, activation = loss_curve_and_memory(args.config, args.curve_steps)
    print(f"loss curve, {args.curve_steps} steps: fp32 {curves['fp32'][0]:.3f} -> {curves['fp32'][-1]:.3f}, "
          f"autocast {curves['autocast'][0]:.3f} -> {curves['autocast'][-1]:.3f}; "
          f"max relative difference {rel.max():.4f} (step {int(rel.argmax())}), mean {rel.mean():.4f}")
    (act32, par32), (act16, par16) = activation["fp32"], activation["autocast"]
    casts = par16 - par32  # the region's cached bf16 weight copies (category parameter)
    print(f"activation bytes after the forward: fp32 {act32 / 2**20:.1f} MiB, autocast {act16 / 2**20:.1f} MiB, "
          f"ratio {act16 / act32:.2f}; with the region's bf16 weight casts ({casts / 2**20:.1f} MiB) "
          f"{(act16 + casts) / act32:.2f}")
