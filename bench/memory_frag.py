"""Allocator fragmentation over a `bench` LLaMA training run (issue 15's Done-when, docs/memory.md).

    python bench/memory_frag.py [--config bench] [--steps 100] [--python PY ...]

For each interpreter (default: this one; pass another venv's python, e.g. a main build's, to compare allocators
in the same run), a fresh process trains the model for --steps steps (AdamW, fused model, as bench/train.py) and
prints:

- fragmentation at the peak: reserved - allocated at the moment `allocated` reached its peak, as a share of the
  peak allocated (the allocator's reserved_bytes_at_peak; an allocator without it is measured through the
  profiler's memory samples, the same instant);
- reserved / peak allocated: peak reserved over peak allocated;
- peak RSS above the post-import baseline (MB);
- with expandable segments, the MiB mapped per step after the second (pages that fault in again when touched:
  the cost of giving free pages back at a miss), the process's minor page faults per step after the second
  (kernel scratch included; load-insensitive) and the median step time.

The interpreters alternate over --rounds rounds; figures are per process (they are deterministic up to the
stream's timing, so rounds mostly show that).
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(cfg, steps):
    import numpy as np

    import dygrad as dg
    from dygrad.models import llama

    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    c = llama.CONFIGS[cfg]
    dg.manual_seed(0)
    model = llama.Llama(c, fused=True)
    opt = dg.optim.AdamW(model.parameters(), lr=3e-4)
    rng = np.random.default_rng(0)
    data = rng.integers(0, c.vocab_size, size=(c.batch_size, c.seq_len + 1))
    x, y = dg.tensor(data[:, :-1].copy()), dg.tensor(data[:, 1:].copy())
    dg.reset_peak_memory_stats()
    direct = "reserved_bytes_at_peak" in dg.memory_stats()
    prof = None
    if not direct:  # an allocator without the statistic (main before issue 15): the profiler's samples
        prof = dg.profiler.profile(profile_memory=True)
        prof.__enter__()
    times, mapped_after_2 = [], None
    for i in range(steps):
        t = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dg.synchronize()
        times.append(time.perf_counter() - t)
        if i == 1:
            mapped_after_2 = dg.memory_stats().get("mapped_bytes_total", 0)
            faults_after_2 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    final_loss = loss.item()
    s = dg.memory_stats()
    mapped_per_step = ((s.get("mapped_bytes_total", 0) - mapped_after_2) / (steps - 2) / 2**20
                       if steps > 2 and mapped_after_2 is not None else 0.0)
    faults_per_step = ((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_after_2) / (steps - 2)
                       if steps > 2 else 0.0)
    if direct:
        peak, at_peak, peak_reserved = s["peak_allocated_bytes"], s["reserved_bytes_at_peak"], s["peak_reserved_bytes"]
    else:
        prof.__exit__(None, None, None)
        samples = prof.result.memory
        top = max(samples, key=lambda m: m.allocated)
        peak, at_peak = top.allocated, top.reserved
        peak_reserved = max(m.reserved for m in samples)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"frag cfg {cfg} steps {steps} peak_allocated {peak} reserved_at_peak {at_peak} "
          f"peak_reserved {peak_reserved} frag_pct {100 * (at_peak - peak) / peak:.2f} "
          f"reserved_ratio {peak_reserved / peak:.3f} segments {s.get('segment.all.current', -1)} "
          f"peak_rss_above_base_mb {rss - base_rss:.0f} mapped_mib_per_step {mapped_per_step:.2f} "
          f"page_faults_per_step {faults_per_step:.0f} "
          f"step_s {statistics.median(times[1:] or times):.3f} loss {final_loss:.3f} measured_by "
          f"{'allocator' if direct else 'profiler'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="bench")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--python", nargs="*", default=[sys.executable], help="interpreters to compare")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.config, a.steps)
        return
    for r in range(a.rounds):
        for py in a.python:
            out = subprocess.run([py, os.path.abspath(__file__), "--worker", "--config", a.config, "--steps",
                                  str(a.steps)], capture_output=True, text=True, timeout=7200)
            line = [l for l in out.stdout.splitlines() if l.startswith("frag ")]
            if out.returncode != 0 or not line:
                raise RuntimeError(f"{py} failed:\n{out.stdout}\n{out.stderr}")
            print(f"round {r} python {py} {line[0]}", flush=True)


if __name__ == "__main__":
    main()
