"""The recompute section of a run's reports (docs/recompute.md): per layer, what its recompute mode keeps from
the forward and what the backward makes again (bytes, FLOPs), from dygrad.utils.checkpoint.measure(); and HFU
with the recomputed FLOPs (MFU counts the model formula only)."""
from . import metrics


def layers(costs, modes, names=None):
    """One dict per layer: name, mode, saved_bytes (kept after the forward), recomputed_bytes, recomputed_flops."""
    rows = []
    for i, mode in enumerate(modes):
        rows.append({"name": names[i] if names else f"blocks.{i}", "mode": mode,
                     "saved_bytes": float(costs.held[mode]), "recomputed_bytes": float(costs.saved[mode]),
                     "recomputed_flops": float(costs.recompute_flops[mode])})
    return rows


def section(costs, modes, plan=None, names=None):
    """The JSON section train.py writes to OUT/recompute.json."""
    out = {"layers": layers(costs, modes, names), "plain_peak_bytes": float(costs.plain_peak),
           "plain_step_s": float(costs.plain_time), "recomputed_flops_per_step": float(costs.recomputed_flops(modes))}
    if plan is not None:
        out["plan"] = {"budget_bytes": float(plan.budget), "predicted_peak_bytes": float(plan.predicted_peak),
                       "predicted_step_s": float(plan.predicted_time), "modes": list(plan.modes)}
    return out


def hfu_with_recompute(model_flops_per_step, recomputed_flops_per_step, step_s, peak):
    """HFU when the executed FLOPs are the model's plus the recomputed ones (no profile at hand)."""
    if model_flops_per_step is None:
        return None
    return metrics.hfu(model_flops_per_step + recomputed_flops_per_step, step_s, peak)
