"""Keep or not: a candidate against the incumbent, measured alternately (A B A B) in fresh processes
(docs/tune.md, "The decision"). Pure functions of the measured runs, so the rules are tested on synthetic runs."""
import statistics
from dataclasses import dataclass

from .candidates import NUMERICS

MIN_GAIN = 0.01  # a kept change is at least 1% faster, whatever the spread
MAX_EXTRA_ROUNDS = 2  # an inconclusive candidate gets up to this many more A B pairs (budget permitting)
# After the first A B pair, a candidate this much slower is not measured again. On the loaded 2-core machine one
# pair of bench processes moved 1.36x the wrong way (synchronize off, docs/tune.md), so only a clear loss stops.
EARLY_STOP_SLOWER = 0.5


@dataclass
class Decision:
    kept: bool
    reason: str
    speedup: float = 0.0  # the median over rounds of incumbent / candidate median step time (> 1: faster)
    spread: float = 0.0  # half the range of the rounds' ratios
    loss_difference: float = 0.0  # the largest relative loss difference over the measured steps
    peak_bytes: int = 0
    inconclusive: bool = False  # faster on the median, within the spread: another round may decide
    on_time: bool = False  # not kept for its time alone (not a failure, a loss or a memory refusal)


def paired_speedups(incumbent_runs, candidate_runs):
    """Per round, the incumbent's median step time over the candidate's: the two ran back to back (A B), so a
    slow change of the machine's load moves both and cancels in their ratio."""
    return [a.median_s / b.median_s for a, b in zip(incumbent_runs, candidate_runs)]


def spread(speedups):
    """Half the range of the rounds' ratios: how far one round's verdict moves from another's."""
    return (max(speedups) - min(speedups)) / 2 if len(speedups) > 1 else 0.0


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
    ratios = paired_speedups(incumbent_runs, candidate_runs)
    speedup, noise = statistics.median(ratios), spread(ratios)
    d = Decision(False, "", speedup, noise, difference, peak)
    if difference > tolerance:
        d.reason = (f"losses differ from the incumbent's by {difference:.2e} (relative), above the {numerics} "
                    f"tolerance {tolerance:g}")
        itself = max((loss_difference(incumbent_runs[0], r) for r in incumbent_runs[1:]), default=0.0)
        if itself > tolerance:  # the incumbent's own runs disagree: no change could pass
            d.reason += (f"; the incumbent's own runs differ by {itself:.2e}: the run is not reproducible (a script "
                         "that draws unseeded random numbers?), so its losses cannot vouch for a change")
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
            d.reason, d.on_time = f"early stop: {1 / speedup:.2f}x slower after one A B pair", True
        return d
    threshold = max(MIN_GAIN, noise)
    if speedup - 1 > threshold:
        d.kept, d.reason = True, (f"{speedup:.3f}x faster (median of {len(ratios)} A B pairs), beyond their "
                                  f"spread (+-{noise:.1%}) and the 1% floor")
    elif speedup - 1 > MIN_GAIN:
        d.inconclusive = d.on_time = True
        d.reason = (f"{speedup:.3f}x: not faster beyond the spread of {len(ratios)} A B pairs (+-{noise:.1%})")
    else:
        d.on_time = True
        d.reason = f"{speedup:.3f}x: not faster than the 1% floor" if speedup >= 1 else f"slower ({speedup:.3f}x)"
    return d
