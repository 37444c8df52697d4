"""Hugging Face transformers on dygrad (through dygrad.as_torch) against torch 2.13 eager (issue 41, part 4):
tokens/s of a training step and of greedy generation with the KV cache (batch 1, the host-bound case), for a
LlamaForCausalLM of the size of dygrad's `bench` model (python/dygrad/models/llama.py: 6 layers, dim 384, 6
heads, ffn 1024, byte vocabulary, 256 positions), attn_implementation "sdpa".

    python3 bench/transformers.py [--rounds 5] [--steps 5] [--new-tokens 64] [--profile DIR]

Each measurement is a fresh process; rounds alternate the order of the variants, forward then reversed (A B B A),
and the figure is the median over rounds of each process's figure: training, the median step time after one
warm-up step (batch 8 x 256 tokens, AdamW); generation, one greedy generate() of --new-tokens tokens from a
16-token prompt after a warm-up generate(). dygrad runs at its default threads; torch at its default threads and
at 1 thread (on a busy 2-core machine torch's spinning OpenMP threads lost 10x here), and the
ratio is against the faster torch. --profile DIR also writes dygrad's profile of each case (docs/profiler-python.md)
into DIR."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

BENCH_CONFIG = dict(vocab_size=256, hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
                    num_attention_heads=6, num_key_value_heads=6, max_position_embeddings=512, rms_norm_eps=1e-5,
                    rope_theta=10000.0, tie_word_embeddings=False, attn_implementation="sdpa")
BATCH, SEQ, PROMPT = 8, 256, 16


VARIANTS = {"dygrad": ("dygrad", None), "torch": ("torch", None), "torch 1 thread": ("torch", 1)}


def worker(framework, case, steps, new_tokens, profile_dir, threads=None):
    # This file is named transformers.py: the library, not this script, is what `import transformers` must find.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if framework == "dygrad":
        import dygrad.as_torch
        dygrad.as_torch.install()
    import numpy as np
    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()
    if threads:
        torch.set_num_threads(threads)
    sync = (lambda: __import__("dygrad").synchronize()) if framework == "dygrad" else (lambda: None)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**BENCH_CONFIG))
    rng = np.random.default_rng(0)
    profiler = None
    if case == "train":
        ids = torch.tensor(rng.integers(0, 256, size=(BATCH, SEQ)))
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        model.train()
        times = []
        for step in range(steps + 1):
            if step == 1 and profile_dir:
                profiler = start_profile()
            t = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()
            sync()
            times.append(time.perf_counter() - t)
            if profiler is not None:
                profiler.step()
        figure = BATCH * SEQ / statistics.median(times[1:])
    else:
        prompt = torch.tensor(rng.integers(0, 256, size=(1, PROMPT)))
        model.eval()
        kwargs = dict(attention_mask=torch.ones_like(prompt), do_sample=False, use_cache=True, pad_token_id=0,
                      eos_token_id=None)
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=8, min_new_tokens=8, **kwargs)  # warm-up
            if profile_dir:
                profiler = start_profile()
            t = time.perf_counter()
            out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
            sync()
            elapsed = time.perf_counter() - t
        assert out.shape[1] == PROMPT + new_tokens, out.shape
        figure = new_tokens / elapsed
    if profiler is not None:
        profiler.__exit__(None, None, None)
        path = os.path.join(profile_dir, f"dygrad_{case}.txt")
        result = profiler.result
        with open(path, "w") as f:
            f.write(f"breakdown (mean step): {result.breakdown.get('mean')}\n\n")
            for key in ("device_time_total", "host_time_total"):
                f.write(result.key_averages().table(sort_by=key, row_limit=25) + "\n\n")
    threads = torch.get_num_threads()
    print(f"result {framework} {case} tokens_per_s {figure:.1f} threads {threads}", flush=True)


def start_profile():
    import dygrad.profiler
    profiler = dygrad.profiler.profile()
    profiler.__enter__()
    return profiler


def run(variant, case, args):
    framework, threads = VARIANTS[variant]
    cmd = [sys.executable, __file__, "--worker", framework, case, "--steps", str(args.steps), "--new-tokens",
           str(args.new_tokens)] + (["--threads", str(threads)] if threads else [])
    if args.profile and framework == "dygrad":
        cmd += ["--profile", args.profile]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    line = [l for l in out.stdout.splitlines() if l.startswith("result ")]
    if out.returncode != 0 or not line:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr[-4000:]}")
    return float(re.search(r"tokens_per_s ([\d.]+)", line[-1]).group(1)), line[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--cases", default="train,generate")
    ap.add_argument("--profile", default="", help="a directory for dygrad's profiles of each case")
    ap.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "CASE"))
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.worker:
        return worker(*args.worker, args.steps, args.new_tokens, args.profile, args.threads)
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    cases = [c for c in args.cases.split(",") if c]
    results = {(v, c): [] for c in cases for v in VARIANTS}
    for r in range(args.rounds):
        order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
        for case in cases:
            for variant in order:
                figure, line = run(variant, case, args)
                results[(variant, case)].append(figure)
                print(f"round {r} {variant}: {line}", flush=True)
    print(f"\nLlamaForCausalLM (transformers) of the bench size, sdpa; median of {args.rounds} interleaved rounds")
    print(f"{'case':34s} {'dygrad':>8s} {'torch':>8s} {'torch 1t':>9s} {'dygrad/best torch':>18s}  (tokens/s)")
    names = {"train": f"training step (batch {BATCH} x {SEQ})",
             "generate": f"greedy generation (batch 1, {args.new_tokens} new)"}
    for case in cases:
        med = {v: statistics.median(results[(v, case)]) for v in VARIANTS}
        best = max(med["torch"], med["torch 1 thread"])
        print(f"{names[case]:34s} {med['dygrad']:8.1f} {med['torch']:8.1f} {med['torch 1 thread']:9.1f} "
              f"{med['dygrad'] / best:18.2f}")


if __name__ == "__main__":
    main()
