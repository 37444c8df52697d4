"""Keep or not: a candidate against the incumbent, measured alternately (A B A B) in fresh processes
(docs/tune.md, "The decision"). Pure functions of the measured runs, so the rules are tested on synthetic runs."""
import statistics
from dataclasses import dataclass

from .candidates import NUMERICS

MIN_GAIN = 0.01  # a kept change is at least 1% faster, whatever the spread
EARLY_STOP_SLOWER = 0.15  # after the first A B pair, a candidate this much slower is not measured again


@dataclass
class Decision:
    kept: bool
    reason: str
    speedup: float = 0.0  # incumbent median step time / candidate's (> 1: the candidate is faster)
    spread: float = 0.0  # the larger relative range of the per-process medians of either side
    loss_difference: float = 0.0  # the largest relative loss difference over the measured steps
    peak_bytes: int = 0


def pooled_median(runs):
    return statistics.median(t for r in runs for t in r.step_times)


def spread(runs):
    """(max - min) / median of the runs' own medians: how far one process's measurement moves between runs."""
    medians = [r.median_s for r in runs]
    if len(medians) < 2:
        return 0.0
    return (max(medians) - min(medians)) / statistics.median(medians)


def loss_difference(reference, run):
    """The largest |a - b| / |a| over the steps both measured (inf when they measured no common step)."""
    a, b = dict(zip(reference.steps, reference.losses)), dict(zip(run.steps, run.losses))
    common = sorted(set(a) & set(b))
    if not common:
        return float("inf")
    return max(abs(a[s] - b[s]) / max(abs(a[s]), 1e-12) for s in common)


def decide(incumbent_runs, candidate_runs, *, numerics, memory_limit=0, goal="speed", final=True):
    """The verdict on a candidate: failed, losses off, over the memory limit, or kept / not kept by its median
    against the spread. `goal` "memory": the incumbent exceeds the limit, so a candidate that fits is kept even
    if slower. `final` False: after the first A B pair, only stop early (kept is then False with an empty reason
    when measuring should go on)."""
    failed = [r for r in candidate_runs if not r.ok]
    if failed:
        return Decision(False, f"failed: {failed[0].error}")
    if not all(r.ok for r in incumbent_runs):
        bad = next(r for r in incumbent_runs if not r.ok)
        return Decision(False, f"the incumbent's run failed: {bad.error}")
    tolerance = NUMERICS[numerics]
    difference = max(loss_difference(incumbent_runs[0], r) for r in candidate_runs)
    peak = max(r.peak_bytes for r in candidate_runs)
    inc, cand = pooled_median(incumbent_runs), pooled_median(candidate_runs)
    speedup = inc / cand
    noise = max(spread(incumbent_runs), spread(candidate_runs))
    d = Decision(False, "", speedup, noise, difference, peak)
    if difference > tolerance:
        d.reason = (f"losses differ from the incumbent's by {difference:.2e} (relative), above the {numerics} "
                    f"tolerance {tolerance:g}")
        return d
    if memory_limit and peak > memory_limit:
        d.reason = f"peak {peak / 2**20:.1f} MiB exceeds the {memory_limit / 2**20:.1f} MiB limit"
        return d
    if goal == "memory":
        d.kept = True
        d.reason = (f"fits the limit (peak {peak / 2**20:.1f} MiB); {speedup:.3f}x the incumbent's speed"
                    if final else "")
        return d if final else Decision(False, "", speedup, noise, difference, peak)
    if not final:
        if speedup < 1 / (1 + EARLY_STOP_SLOWER):
            d.reason = f"early stop: {1 / speedup:.2f}x slower after one A B pair"
        return d
    threshold = max(MIN_GAIN, noise)
    if speedup - 1 > threshold:
        d.kept, d.reason = True, f"{speedup:.3f}x faster, beyond the spread ({noise:.1%}) and the 1% floor"
    else:
        d.reason = (f"{speedup:.3f}x: not faster beyond the measured spread ({noise:.1%}) and the 1% floor"
                    if speedup >= 1 else f"slower ({speedup:.3f}x)")
    return d
