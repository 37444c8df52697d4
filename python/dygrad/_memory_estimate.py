"""dygrad.memory.estimate: the peak memory of one training step, by category, before the step allocates anything
(docs/memory.md, "Dry run").

The step runs for real - the model's own forward, the loss, the autograd engine's backward, the optimizer's
step - under *meta evaluation* (ops/meta_eval.h): every op computes its output shapes and allocates its outputs
as usual, but a buffer is address space only (no page is touched) and no kernel runs, while the allocator's
accounting is replayed exactly (requested bytes, categories, frees when the last reference held by the program
goes: a queued Task's hold on its operands keeps no memory, docs/memory.md "Stream-ordered reuse"). The estimate
is therefore the allocator's `peak_allocated` of the same step, computed from the op table's shape rules, however
far the host runs ahead of the device.
"""
from collections import namedtuple

from . import _C

CATEGORIES = ("parameter", "gradient", "optimizer_state", "activation", "temporary", "other", "scratch", "communication")

MemoryEstimate = namedtuple("MemoryEstimate", "peak by_category resident kernel_scratch tasks")
MemoryEstimate.__doc__ = """dygrad.memory.estimate's result (bytes).

peak: the predicted peak allocated bytes of the step (the allocator's peak_allocated: requested bytes);
by_category: that peak split into parameter, gradient, optimizer_state, activation, temporary, other, scratch,
communication
(the scratch of the Task running at the peak: the stream takes each Task's declared scratch from the allocator for
the span of its kernel); resident: the bytes already allocated before the step (parameters, existing optimizer
state, the batch); kernel_scratch: the largest scratch one Task declares (OpTraits::scratch); tasks: the Tasks the
step would run."""


def _default_step(model, batch, loss_fn):
    args = batch if isinstance(batch, (tuple, list)) else (batch,)
    if loss_fn is None:
        out = model(*args)
    else:
        *inputs, target = args
        out = loss_fn(model(*inputs), target)
    if out.numel() != 1:
        out = out.sum()
    return out


def _snapshot_modules(model):
    """Each module's attributes and buffers, so that a lazily built cache (made during the dry run from meta
    buffers) is dropped afterwards."""
    snaps = []
    for m in model.modules():
        snaps.append((m, dict(m.__dict__), dict(m.__dict__.get("_buffers", {}))))
    return snaps


def _restore_modules(snaps):
    for m, attrs, buffers in snaps:
        d = m.__dict__
        for k in [k for k in d if k not in attrs]:
            del d[k]
        for k, v in attrs.items():
            if d.get(k) is not v:
                d[k] = v
        live = d.get("_buffers")
        if live is not None:
            live.clear()
            live.update(buffers)


def estimate(model, batch, *, loss_fn=None, optimizer=None, step_fn=None, set_to_none=True, steps=1):
    """Predicts the peak allocated memory of one training step, by category, without running it.

    The step is `loss = step_fn(model, batch)` (default: `model(*batch)` reduced to a scalar, or
    `loss_fn(model(*inputs), target)` with batch = (*inputs, target)), `optimizer.zero_grad(set_to_none)`,
    `loss.backward()`, `optimizer.step()` (the optimizer calls only when one is given): the order of
    dygrad.train and bench/train.py, where the previous step's gradients live through the forward. The first
    step starts without gradients (the ones held now are set aside); with steps=2 the second starts from the
    first one's. It runs under meta
    evaluation: shapes and allocator accounting only, no kernel, no memory (see the module docstring).
    Parameters' gradients, the optimizer's state, module attributes made during the run and the RNG state are
    restored afterwards, so the real training that follows is unchanged.

    steps: run the step this many times and report the last one's peak: steps=2 with an optimizer that has no
    state yet predicts the steady state (its states exist from the first step on).
    Returns a MemoryEstimate (bytes). A program that reads tensor values on the host (item(), a data-dependent
    shape such as nonzero) reads zeros under meta evaluation."""
    if _C._meta_active():
        raise RuntimeError("[memory.estimate] a meta evaluation is already running")
    import dygrad as dg
    dg.synchronize()  # Tasks still queued hold buffers that will be freed: count what stays
    before = dg.memory_stats()
    resident = {c: before.get(f"allocated_bytes.{c}", 0) for c in CATEGORIES}
    params = list(model.parameters())
    saved_grads = [p.grad for p in params]
    saved_state = None
    if optimizer is not None:
        saved_state = {k: dict(v) for k, v in optimizer.state.items()}
    from ._generator import default_generator
    rng = default_generator.get_state()
    snaps = _snapshot_modules(model)
    if set_to_none:
        # The step starts from no gradients (zero_grad(set_to_none=True) before its backward): the gradients held
        # now are not part of its peak (they stay alive here only to be restored).
        seen = set()
        for p in params:
            g = p.grad
            if g is not None and id(g) not in seen:
                seen.add(id(g))
                resident["gradient"] -= g.numel() * g.element_size()
            p.grad = None
    resident["gradient"] = max(resident["gradient"], 0)
    _C._meta_begin()
    try:
        for i in range(max(1, int(steps))):
            if i:
                _C._meta_reset_peak()
            loss = (step_fn or (lambda m, b: _default_step(m, b, loss_fn)))(model, batch)
            # The gradients of the previous step live through the forward (the usual loop's order).
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=set_to_none)
            elif set_to_none:
                for p in params:
                    p.grad = None
            loss.backward()
            del loss
            if optimizer is not None:
                optimizer.step()
    finally:
        for p, g in zip(params, saved_grads):
            p.grad = g
        if optimizer is not None:
            optimizer.state.clear()
            optimizer.state.update(saved_state)
        _restore_modules(snaps)
        result = _C._meta_end()
        default_generator.set_state(rng)
    at_peak = result["at_peak"]
    by_category = {c: resident[c] + at_peak.get(c, 0) for c in CATEGORIES}
    peak = sum(resident.values()) + result["peak"]
    return MemoryEstimate(peak=peak, by_category=by_category, resident=sum(resident.values()),
                          kernel_scratch=result["max_scratch"], tasks=result["tasks"])


def format_estimate(e):
    """A few lines for a report or the command line."""
    mib = 1 << 20
    parts = ", ".join(f"{c} {e.by_category[c] / mib:.1f}" for c in CATEGORIES if e.by_category[c])
    return (f"estimated peak {e.peak / mib:.1f} MiB ({parts} MiB); resident before the step {e.resident / mib:.1f} "
            f"MiB; largest kernel scratch {e.kernel_scratch / mib:.1f} MiB; {e.tasks} Tasks")
