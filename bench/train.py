"""Training throughput, dygrad against PyTorch 2.13 (../shared/bench/torch_ref.py), side by side in one run.

    python3 bench/train.py [--config bench] [--steps 6] [--rounds 3]

Each measurement is a fresh process (so its peak RSS is its own), alternating dygrad and the torch settings
for --rounds rounds; the figure is the median over rounds of each process's median step time after one
warm-up step. torch runs at its default threads, THREADS=1 OPENBLAS_NUM_THREADS=2, THREADS=2, and with
COMPILE=1 when requested; the unfused model (SDPA=0) at its default threads and THREADS=2, against dygrad's
composed model (fused=False). Fields match torch_ref.py's output line.
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_REF = os.path.join(HERE, "..", "..", "shared", "bench", "torch_ref.py")


def dygrad_worker(cfg, steps, fused):
    import numpy as np

    import dygrad as dg
    from dygrad.models import llama

    c = llama.CONFIGS[cfg]
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    dg.manual_seed(0)
    model = llama.Llama(c, fused=fused)
    opt = dg.optim.AdamW(model.parameters(), lr=3e-4)
    n = sum(p.numel() for p in model.parameters())
    rng = np.random.default_rng(0)
    data = rng.integers(0, c.vocab_size, size=(c.batch_size, c.seq_len + 1))
    x, y = dg.tensor(data[:, :-1].copy()), dg.tensor(data[:, 1:].copy())
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dg.synchronize()
        times.append(time.perf_counter() - t)
    st = statistics.median(times[1:])
    tok = c.batch_size * c.seq_len / st
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"cfg {cfg} mode fp32 {'fused' if fused else 'unfused'} threads {dg.get_context().num_threads} params {n} "
          f"step_s {st:.3f} tokens_per_s {tok:.0f} achieved_gflops {tok * c.flops_per_token() / 1e9:.1f} "
          f"peak_rss_mb {rss:.0f} base_rss_mb {base_rss:.0f} loss {loss.item():.3f} sgemm {dg._C._sgemm_library()}")


def run(cmd, env=None):
    out = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=1800)
    line = [l for l in out.stdout.splitlines() if l.startswith("cfg ")]
    if out.returncode != 0 or not line:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    fields = dict(re.findall(r"(\w+) ([\d.]+)", line[-1]))
    return float(fields["tokens_per_s"]), float(fields["peak_rss_mb"]), line[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="bench")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="also torch.compile (slow to start)")
    ap.add_argument("--worker", choices=["fused", "unfused"])
    ap.add_argument("--only", default="", help="comma-separated substrings: run only the matching variants "
                                                "(e.g. 'unfused,SDPA=0' for the unfused comparison)")
    args = ap.parse_args()
    if args.worker:
        return dygrad_worker(args.config, args.steps, args.worker == "fused")
    env_torch_base = {"STEPS": str(args.steps)}
    variants = {
        "dygrad fused": ([sys.executable, __file__, "--worker", "fused", "--config", args.config, "--steps",
                          str(args.steps)], {}),
        "dygrad unfused": ([sys.executable, __file__, "--worker", "unfused", "--config", args.config, "--steps",
                            str(args.steps)], {}),
        "torch default": ([sys.executable, TORCH_REF, "train", args.config], env_torch_base),
        "torch THREADS=1 OB=2": ([sys.executable, TORCH_REF, "train", args.config],
                                 {**env_torch_base, "THREADS": "1", "OPENBLAS_NUM_THREADS": "2"}),
        "torch THREADS=2": ([sys.executable, TORCH_REF, "train", args.config], {**env_torch_base, "THREADS": "2"}),
        "torch SDPA=0 (unfused)": ([sys.executable, TORCH_REF, "train", args.config], {**env_torch_base, "SDPA": "0"}),
        "torch SDPA=0 THREADS=2 (unfused)": ([sys.executable, TORCH_REF, "train", args.config],
                                             {**env_torch_base, "SDPA": "0", "THREADS": "2"}),
    }
    if args.compile:
        variants["torch compile"] = ([sys.executable, TORCH_REF, "train", args.config], {**env_torch_base, "COMPILE": "1"})
    # Post-import baselines: a process that imported only the framework (and NumPy); the memory criterion is
    # the peak RSS above it.
    baseline_code = ("import resource, numpy, {mod}; "
                     "print('cfg baseline tokens_per_s 0 peak_rss_mb %.0f' % (resource.getrusage(resource.RUSAGE_SELF)"
                     ".ru_maxrss / 1024))")
    base = {"dygrad": run([sys.executable, "-c", baseline_code.format(mod="dygrad")])[1],
            "torch": run([sys.executable, "-c", baseline_code.format(mod="torch")])[1]}
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        variants = {name: v for name, v in variants.items() if any(k in name for k in keys)}
    results = {k: [] for k in variants}
    for r in range(args.rounds):
        for name, (cmd, env) in variants.items():
            results[name].append(run(cmd, env))
            print(f"round {r} {name}: {results[name][-1][2]}", flush=True)
    med = {k: (statistics.median(t for t, _, _ in v), statistics.median(m for _, m, _ in v)) for k, v in results.items()}
    fused_torch = [(v[0], k) for k, v in med.items() if k.startswith("torch") and "SDPA=0" not in k]
    best_torch = max(fused_torch) if fused_torch else max((v[0], k) for k, v in med.items() if k.startswith("torch"))
    print(f"\nconfig {args.config}, {args.rounds} rounds x {args.steps} steps, median tokens/s and peak RSS")
    print(f"post-import baseline RSS: dygrad {base['dygrad']:.0f} MB, torch {base['torch']:.0f} MB")
    print(f"{'variant':28s} {'tok/s':>9s} {'peak MB':>9s} {'above base':>11s} {'vs best torch':>14s}")
    above = {k: rss - base["dygrad" if k.startswith("dygrad") else "torch"] for k, (tok, rss) in med.items()}
    for k, (tok, rss) in med.items():
        print(f"{k:28s} {tok:9.0f} {rss:9.0f} {above[k]:11.0f} {tok / best_torch[0]:14.2f}")
    unfused_torch = [(v[0], k) for k, v in med.items() if k.startswith("torch SDPA=0")]
    if "dygrad fused" in med:
        print(f"peak RSS above baseline: dygrad fused / {best_torch[1]} = {above['dygrad fused'] / above[best_torch[1]]:.2f}")
        print(f"best torch: {best_torch[1]}; dygrad fused / best torch = {med['dygrad fused'][0] / best_torch[0]:.2f}")
    if "dygrad unfused" in med and unfused_torch:
        best_unfused = max(unfused_torch)
        print(f"best torch unfused: {best_unfused[1]}; dygrad unfused / it: tokens/s "
              f"{med['dygrad unfused'][0] / best_unfused[0]:.2f}, "
              f"peak RSS above baseline {above['dygrad unfused'] / above[best_unfused[1]]:.2f}")


if __name__ == "__main__":
    main()
