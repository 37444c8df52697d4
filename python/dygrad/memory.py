"""dygrad.memory: the caching allocators' statistics, memory limit and snapshots (docs/memory.md). Each device has its
own pool (docs/devices.md): the functions take torch.cuda.memory's `device=` (None: the CPU's; "test:0", ...).

The names follow torch.cuda.memory: memory_allocated / memory_reserved / memory_stats / empty_cache, and the
snapshot API `_record_memory_history`, `_snapshot`, `_dump_snapshot` (also spelt without the underscore:
record_history, snapshot, dump_snapshot). A snapshot is the dict of torch.cuda.memory._snapshot's typed dicts
(segments with blocks - for expandable segments, the default, one per contiguous mapped range - device_traces of
alloc / free_requested / free_completed / segment_alloc / segment_free / segment_map / segment_unmap / oom
entries, frames with filename, line and name), so torch's own viewer tools read it:
``python -m torch.cuda._memory_viz trace_plot snapshot.pickle -o trace.html``, or drag the pickle onto
https://pytorch.org/memory_viz.
"""
import pickle
import sys

from . import _C
from ._memory_estimate import MemoryEstimate, estimate  # noqa: F401  (the dry run, docs/memory.md)

OutOfMemoryError = _C.OutOfMemoryError
empty_cache = _C.empty_cache
memory_allocated = _C.memory_allocated
max_memory_allocated = _C.max_memory_allocated
memory_reserved = _C.memory_reserved
max_memory_reserved = _C.max_memory_reserved
reset_peak_memory_stats = _C.reset_peak_memory_stats
memory_stats = _C.memory_stats


def host_memory_stats():
    """The pinned host pool's statistics (torch.cuda.host_memory_stats's role; memory_stats's keys): the page-locked
    memory of pin_memory(), pin_memory=True factories and the staging of copies to and from devices. All zero while
    no device backend provides pinned memory (docs/devices.md, "Pinned host memory")."""
    return _C._host_memory_stats()

__all__ = ["OutOfMemoryError", "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved",
           "max_memory_reserved", "reset_peak_memory_stats", "memory_stats", "host_memory_stats", "set_memory_limit", "get_memory_limit",
           "record_history", "snapshot", "dump_snapshot", "estimate", "MemoryEstimate", "estimate_sharding"]


def estimate_sharding(model, batch, *, world_size, **kwargs):
    """dg.distributed.sharding.estimate_sharding, beside estimate: each sharding level's per-rank peak (DDP, ZeRO-1,
    ZeRO-2, fully_shard) at `world_size` ranks from one dry run of the unsharded step (docs/distributed.md)."""
    from .distributed.sharding import estimate_sharding as per_level
    return per_level(model, batch, world_size=world_size, **kwargs)


def _device_check(device, api):
    """None, or a device that has a pool (the CPU, a test device that is on); raises ValueError naming `api`."""
    if device is None:
        return None
    if isinstance(device, int) and not isinstance(device, bool):
        raise ValueError(f"[{api}] device {device!r}: dygrad has no CUDA device; pass None, 'cpu' or 'test:N'")
    try:
        _C.memory_allocated(str(device))
    except RuntimeError as e:
        raise ValueError(f"[{api}] device {device!r} has no memory pool (the cpu's, and each test device's when it "
                         f"is on): {e}") from None
    return str(device)


def set_memory_limit(limit):
    """Caps the bytes the allocator reserves from the system: `limit` is a byte count or a size string ("2GiB",
    "512MiB", "1.5G"; KB/MB/GB are decimal), None or 0 for no limit. An allocation that would reserve more first
    returns the cached segments, then raises dg.OutOfMemoryError listing the largest live tensors and the Python
    lines that made them. Also set at import by the environment variable DYGRAD_MEMORY_LIMIT."""
    if limit is None:
        limit = 0
    if isinstance(limit, str):
        limit = _C._parse_size(limit)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"[set_memory_limit] expected a byte count, a size string or None, got "
                        f"{type(limit).__name__}")
    _C._set_memory_limit(limit)


def get_memory_limit():
    """The memory limit in bytes (0: none)."""
    return _C._get_memory_limit()


_ENABLED = (None, "state", "all")
_CONTEXT = (None, "state", "alloc", "all")
_STACKS = ("python", "all")


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                           clear_history=False):
    """torch.cuda.memory._record_memory_history for the CPU allocator.

    enabled: None stops recording; "state" keeps the stack of each live allocation; "all" also keeps a trace of
    every action (alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap,
    oom), the last
    `max_entries` of them. context: None records no stacks, "state"/"alloc" the stacks of allocations, "all" also
    of frees. stacks: "python" for Python frames only, "all" also the C++ frames. Recording costs a stack walk per
    allocation; nothing when off."""
    if enabled is True:
        enabled = "all"
    elif enabled is False:
        enabled = None
    if enabled not in _ENABLED:
        raise ValueError(f"[record_history] enabled must be one of {_ENABLED}, got {enabled!r}")
    if context not in _CONTEXT:
        raise ValueError(f"[record_history] context must be one of {_CONTEXT}, got {context!r}")
    if stacks not in _STACKS:
        raise ValueError(f"[record_history] stacks must be one of {_STACKS}, got {stacks!r}")
    device = _device_check(device, "record_history")
    if clear_history:
        _C._record_memory_history(False, True, False, False, False, 0, device)
    on = enabled is not None
    _C._record_memory_history(on, enabled == "all", on and context is not None, on and context == "all",
                              stacks == "all", min(int(max_entries), 2 ** 62), device)


record_history = _record_memory_history


def _snapshot(device=None):
    """The allocator's state as torch.cuda.memory._snapshot's dict: {"segments": [...], "device_traces": [[...]],
    "allocator_settings": {...}}. Blocks and trace entries carry dygrad's extra keys "category" (and blocks
    "description": shape and dtype; trace entries "allocated" after the action and "time_ns"); torch's tools
    ignore them. The segments' requested sizes sum to memory_allocated(), their sizes to memory_reserved()."""
    return _C._memory_snapshot(_device_check(device, "snapshot"))


snapshot = _snapshot


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """Writes snapshot() to `filename` as a pickle, like torch.cuda.memory._dump_snapshot."""
    s = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(s, f)


dump_snapshot = _dump_snapshot


def timeline(snap=None):
    """The allocated bytes over time, by category, from a snapshot's trace (record_history(enabled="all")):
    {"time_ns": [...], "allocated": [...], "by_category": {category: [...]}}, one point per alloc or free. The
    categories start at their values when the oldest kept entry was recorded minus what the trace adds, so only
    their changes are exact when the trace was truncated by max_entries."""
    snap = _snapshot() if snap is None else snap
    entries = [e for e in snap["device_traces"][0] if e["action"] in ("alloc", "free_completed")]
    cats = {}
    times, allocated = [], []
    running = {}
    for e in entries:
        c = e.get("category", "other")
        running.setdefault(c, 0)
        running[c] += e["size"] if e["action"] == "alloc" else -e["size"]
        times.append(e.get("time_ns", e["time_us"] * 1000))
        allocated.append(e.get("allocated", 0))
        for k in running:
            cats.setdefault(k, [0] * (len(times) - 1))
        for k, series in cats.items():
            series.append(running.get(k, 0))
    # Shift each category so that the series sum to `allocated` (the bytes live before the trace began count
    # under "other" when they cannot be attributed).
    if times:
        base = allocated[0] - sum(series[0] for series in cats.values())
        cats.setdefault("other", [0] * len(times))
        cats["other"] = [v + base for v in cats["other"]]
    return {"time_ns": times, "allocated": allocated, "by_category": cats}
