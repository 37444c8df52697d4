"""Step timing that tells the truth (issue 37 item 5; docs/stream.md, "Run-ahead bound"), measured in one process.

    python3 bench/step_timing.py [--rounds 4] [--steps N] [--limit-ms 50] [--threads N] [--configs ...]

Two ways PyTorch CPU scripts time their steps, neither of which synchronizes (torch's CPU is synchronous):
  logged: t0 = time.time(); step; dt = time.time() - t0; print(loss.item(), dt)  (the loss read after the clock)
  free:   a clock read after each step, the loss read every 10 steps only.
For each, the wall-clock step times against the stream's own (timing marks around each step: dygrad.cpu.Event, the
time the trainer reports); and a free loop under dygrad's profiler (`profiled`: the clock read from one step's end
to the next, prof.step() after each) against the profiler's step times. With the run-ahead bound on (--limit-ms,
default the library's) and off, interleaved over --rounds rounds on the same model; and the free loop's throughput
with the bound against without it (what the bound costs). Configs: `bench` (the LLaMA benchmark model,
device-bound), `tiny` and a host-bound one (below).
"""
import argparse
import statistics
import time

import numpy as np

import dygrad as dg
from dygrad.models import llama

# `bench` as BENCHMARKS.md runs it, `tiny` (the trainer's default model), and host-bound: a LLaMA of 4 layers of width
# 64 at batch 1 x 16 tokens, whose step's host work (the batch drawn on the host, ~700 ops enqueued) takes longer
# than its kernels (the stream waits for the host).
CONFIGS = {"bench": llama.CONFIGS["bench"], "tiny": llama.CONFIGS["tiny"],
           "host-bound": llama.LlamaConfig(n_layers=4, dim=64, n_heads=4, ffn_dim=176, seq_len=16, batch_size=1)}
STEPS = {"bench": 10, "tiny": 20, "host-bound": 2000}  # per loop: a loop of at least ~1 s


def build(name):
    c = CONFIGS[name]
    batch, seq = c.batch_size, c.seq_len
    dg.manual_seed(0)
    model = llama.Llama(c)
    opt = dg.optim.AdamW(model.parameters(), lr=3e-4)
    rng = np.random.default_rng(0)
    corpus = rng.integers(0, c.vocab_size, size=1 << 16)

    def step():
        # nanoGPT's get_batch: random windows of the corpus, on the host
        starts = rng.integers(0, len(corpus) - seq - 1, size=batch)
        x = dg.tensor(np.stack([corpus[s:s + seq] for s in starts]))
        y = dg.tensor(np.stack([corpus[s + 1:s + 1 + seq] for s in starts]))
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step, batch * seq


def timed_loop(step, steps, pattern):
    """Per step: (wall-clock seconds as the script reads them, the reference: the stream's seconds between the marks
    around it, or for the `profiled` pattern (a free loop under dg.profiler, prof.step() after each step) the
    profiler's step time), and the loop's total."""
    marks, walls = [], []
    first = dg.cpu.Event(enable_timing=True)
    first.record()
    marks.append(first)
    prof = dg.profiler.profile() if pattern == "profiled" else None
    if prof is not None:
        prof.start()
    begin = time.perf_counter()
    t_prev = begin
    for i in range(steps):
        t0 = time.perf_counter() if pattern != "profiled" else t_prev
        loss = step()
        t1 = time.perf_counter()
        end = dg.cpu.Event(enable_timing=True)
        end.record()
        marks.append(end)
        walls.append(t1 - t0)
        t_prev = t1
        if pattern == "logged" or (i + 1) % 10 == 0 or i + 1 == steps:
            loss.item()
        if prof is not None:
            prof.step()
    dg.synchronize()  # the last step's backward and update too, with or without the bound
    total = time.perf_counter() - begin
    if prof is not None:
        prof.stop()
        return walls, [s["step_ns"] * 1e-9 for s in prof.breakdown["steps"][:steps]], total
    stream = [a.elapsed_time(b) / 1000 for a, b in zip(marks, marks[1:])]
    return walls, stream, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=None, help="steps per loop (default: per config, STEPS)")
    ap.add_argument("--limit-ms", type=float, default=dg.get_run_ahead_limit() * 1000)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--configs", default="bench,tiny,host-bound")
    ap.add_argument("--ab-rounds", type=int, default=6, help="rounds of the throughput A/B")
    args = ap.parse_args()
    if args.threads:
        dg.set_num_threads(args.threads)
    import platform
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    print(f"CPU {cpu}, {dg.get_context().num_threads} threads; bound {args.limit_ms:g} ms vs none, "
          f"{args.rounds} rounds")
    for name in args.configs.split(","):
        step, tokens = build(name)
        steps = args.steps or STEPS[name]
        for _ in range(2):
            step().item()  # warm-up: the allocator's pools and the ops' measured rates
        res = {}  # (bound, pattern) -> lists
        for r in range(args.rounds):
            order = [args.limit_ms, 0.0] if r % 2 == 0 else [0.0, args.limit_ms]
            for limit in order:
                dg.set_run_ahead_limit(limit / 1000)
                for pattern in ("logged", "free", "profiled"):
                    walls, stream, total = timed_loop(step, steps, pattern)
                    d = res.setdefault((limit, pattern), {"ratio": [], "worst": [], "stream": []})
                    # The first step of a free loop starts behind nothing; the ratio of each step's wall time to
                    # the stream's, median and the worst over the loop's steps.
                    ratios = [w / s for w, s in zip(walls, stream)]
                    d["ratio"].append(statistics.median(ratios))
                    d["worst"].append(min(ratios))
                    d["stream"].append(statistics.median(stream))
        dg.set_run_ahead_limit(args.limit_ms / 1000)
        print(f"\n{name} ({tokens} tokens/step, {steps} steps per loop): wall-clock step time / the stream's "
              f"(profiled: the profiler's) (median over steps; lowest step), median over rounds")
        for (limit, pattern), d in sorted(res.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
            label = f"bound {limit:g} ms" if limit else "no bound"
            print(f"  {label:12s} {pattern:6s} wall/stream {statistics.median(d['ratio']):.3f} "
                  f"(lowest step {min(d['worst']):.3f})  reference step {statistics.median(d['stream']) * 1000:.1f} ms")
        # What the bound costs, apart from the timing patterns (the profiler's sessions change what runs between
        # them): free loops alone, the bound on and off alternating which goes first.
        pairs = []
        for r in range(args.ab_rounds):
            tok = {}
            for limit in ([args.limit_ms, 0.0] if r % 2 == 0 else [0.0, args.limit_ms]):
                dg.set_run_ahead_limit(limit / 1000)
                tok[limit] = tokens * steps / timed_loop(step, steps, "free")[2]
            pairs.append(tok[args.limit_ms] / tok[0.0])
        dg.set_run_ahead_limit(args.limit_ms / 1000)
        print(f"  free-loop throughput with the bound / without ({args.ab_rounds} alternating rounds): median "
              f"{statistics.median(pairs):.3f} (rounds: {', '.join(f'{p:.3f}' for p in pairs)})")


if __name__ == "__main__":
    main()
