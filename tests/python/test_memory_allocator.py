"""The caching allocator from Python (issue 15, items 1 and 3; docs/memory.md): splitting and merging seen through
memory_stats, empty_cache returning memory to the OS, the memory limit and its OutOfMemoryError, snapshots read
by torch's own torch.cuda._memory_viz, and the snapshot section of the HTML report."""
import gc
import os
import pickle
import subprocess
import sys

import pytest

import dygrad as dg
from dygrad.profiler import report

MiB = 1 << 20
HERE = os.path.abspath(__file__)


def settle():
    dg.synchronize()


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def no_limit():
    yield
    dg.set_memory_limit(None)


@pytest.fixture
def history():
    yield
    dg.memory.record_history(enabled=None)


def test_memory_stats_have_torchs_names_and_stay_exact():
    settle()
    dg.empty_cache()
    s0 = dg.memory_stats()
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.current", "active_bytes.all.current",
                "inactive_split_bytes.all.current", "segment.all.current", "num_ooms", "requested_bytes.all.current"):
        assert key in s0
    a = dg.empty(3 * MiB // 4 + 7, dtype=dg.float32)  # a large request (> 1 MiB): rounded to 512 bytes
    s1 = dg.memory_stats()
    assert dg.memory_allocated() == s0["allocated_bytes.all.current"] + a.numel() * 4
    assert s1["active_bytes.all.current"] - s0["active_bytes.all.current"] == (a.numel() * 4 + 511) // 512 * 512
    assert s1["reserved_bytes.all.current"] >= s1["active_bytes.all.current"] >= s1["allocated_bytes.all.current"]
    del a
    settle()
    assert dg.memory_allocated() == s0["allocated_bytes.all.current"]


def test_a_cached_block_is_split_and_merged_back():
    settle()
    dg.empty_cache()
    big = dg.empty(64 * MiB // 4, dtype=dg.float32)
    base = big.data_ptr()
    del big
    settle()
    r0 = dg.memory_reserved()
    x = dg.empty(40 * MiB // 4, dtype=dg.float32)
    y = dg.empty(20 * MiB // 4, dtype=dg.float32)
    assert x.data_ptr() == base and y.data_ptr() == base + 40 * MiB  # both from the cached 64 MiB block
    assert dg.memory_reserved() == r0
    s = dg.memory_stats()  # the 4 MiB tail stays cached (mapped, in an expandable segment: not inactive_split,
    assert s["reserved_bytes.all.current"] - s["active_bytes.all.current"] >= 4 * MiB  # empty_cache can return it)
    del x, y
    settle()
    z = dg.empty(64 * MiB // 4, dtype=dg.float32)  # the pieces merged back
    assert z.data_ptr() == base and dg.memory_reserved() == r0
    del z
    settle()
    dg.empty_cache()


def test_expandable_segments_merge_free_space_and_empty_cache_unmaps_it_beside_live_tensors():
    settle()
    dg.empty_cache()
    assert dg._C._expandable_segments()  # the default
    r0 = dg.memory_reserved()
    a = dg.ones(16 * MiB // 4, dtype=dg.float32)
    b = dg.ones(16 * MiB // 4, dtype=dg.float32)
    fence = dg.ones(2 * MiB // 4, dtype=dg.float32)
    assert b.data_ptr() == a.data_ptr() + 16 * MiB  # one reserved range, mapped on demand
    base = a.data_ptr()
    del a, b
    settle()
    s0 = dg.memory_stats()
    c = dg.empty(30 * MiB // 4, dtype=dg.float32)  # the two freed blocks merged
    assert c.data_ptr() == base and dg.memory_stats()["cache_hits"] == s0["cache_hits"] + 1
    del c
    settle()
    before = rss_bytes()
    dg.empty_cache()  # the 32 MiB beside the live fence go back to the system
    assert dg.memory_reserved() <= s0["reserved_bytes.all.current"] - 32 * MiB
    assert dg.memory_stats()["unmapped_bytes_total"] >= s0["unmapped_bytes_total"] + 32 * MiB
    assert before - rss_bytes() > 28 * MiB
    assert fence[-1].item() == 1.0
    del fence
    settle()
    dg.empty_cache()
    assert dg.memory_reserved() <= r0


def test_empty_cache_returns_memory_to_the_os():
    settle()
    dg.empty_cache()
    before = rss_bytes()
    t = dg.ones(256 * MiB // 4, dtype=dg.float32)  # touches every page
    assert t[-1].item() == 1.0
    grown = rss_bytes()
    assert grown - before > 200 * MiB
    del t
    settle()
    assert rss_bytes() - before > 200 * MiB  # freed into the cache: still resident
    reserved = dg.memory_reserved()
    dg.empty_cache()
    assert dg.memory_reserved() <= reserved - 256 * MiB
    assert grown - rss_bytes() > 200 * MiB  # returned to the system


def test_memory_limit_raises_out_of_memory_naming_the_largest_tensors(no_limit):
    settle()
    dg.empty_cache()
    dg.set_memory_limit(dg.memory_reserved() + 100 * MiB)
    assert dg.get_memory_limit() == dg.memory_reserved() + 100 * MiB
    kept = []
    with pytest.raises(dg.OutOfMemoryError) as info:
        for _ in range(20):
            kept.append(dg.zeros(1024, 3072, dtype=dg.float32))  # 12 MiB each
    err = info.value
    assert isinstance(err, RuntimeError)
    assert dg.cuda.OutOfMemoryError is dg.OutOfMemoryError
    message = str(err)
    assert "12.00 MiB" in message and "memory limit" in message
    assert "[1024, 3072] float32  activation" in message
    assert f"{os.path.basename(HERE)}:" in message and "test_memory_limit_raises_out_of_memory" in message
    assert "dg.utils.checkpoint" in message and "Module.recompute()" in message and "micro-batch" in message
    assert dg.memory_stats()["num_ooms"] >= 1
    assert dg.memory_reserved() <= dg.get_memory_limit()
    # The runtime is sound: ops still run, and freeing lets the same allocation succeed.
    assert len(kept) >= 6
    assert float(kept[0].sum().item()) == 0.0
    kept.clear()
    settle()
    again = [dg.zeros(1024, 3072, dtype=dg.float32) for _ in range(6)]
    assert float(again[-1].add(1).sum().item()) == 1024 * 3072
    dg.set_memory_limit(None)
    assert dg.get_memory_limit() == 0


def test_memory_limit_accepts_sizes_and_the_environment():
    dg.set_memory_limit("1.5GiB")
    assert dg.get_memory_limit() == 3 << 29
    dg.set_memory_limit(0)
    with pytest.raises(ValueError, match="set_memory_limit"):
        dg.set_memory_limit("lots")
    with pytest.raises(TypeError, match="set_memory_limit"):
        dg.set_memory_limit(1.5)
    code = ("import dygrad as dg\n"
            "assert dg.get_memory_limit() == 64 << 20, dg.get_memory_limit()\n"
            "try:\n    dg.empty(100 << 20, dtype=dg.uint8)\nexcept dg.OutOfMemoryError as e:\n    print('OOM', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "DYGRAD_MEMORY_LIMIT": "64MiB"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OOM [alloc] out of memory: tried to allocate 100.00 MiB")


def _train_a_few_steps():
    dg.manual_seed(0)
    model = dg.nn.Sequential(dg.nn.Linear(256, 1024), dg.nn.ReLU(), dg.nn.Linear(1024, 256))
    opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
    x = dg.randn(512, 256)
    for _ in range(2):
        out = model(x)
        loss = (out * out).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    big = dg.ones(3 * MiB)  # a large segment of its own
    return model, opt, big


def test_snapshot_is_read_by_torchs_memory_viz_with_dygrads_totals(tmp_path, history):
    memory_viz = pytest.importorskip("torch.cuda._memory_viz")
    settle()
    dg.memory.record_history(enabled="all", context="all", stacks="all")
    kept = _train_a_few_steps()
    gc.collect()  # no collection may free tensors of earlier tests between the dump and the statistics
    gc.disable()
    try:
        settle()
        path = tmp_path / "snapshot.pickle"
        dg.memory.dump_snapshot(str(path))
        stats = dg.memory_stats()
        allocated, reserved_now = dg.memory_allocated(), dg.memory_reserved()
    finally:
        gc.enable()
    with open(path, "rb") as f:
        snap = pickle.load(f)
    # The schema of torch.cuda.memory._snapshot's typed dicts.
    assert set(snap) >= {"segments", "device_traces"}
    seg = snap["segments"][0]
    assert set(seg) >= {"address", "total_size", "stream", "segment_type", "allocated_size", "active_size", "blocks"}
    block = seg["blocks"][0]
    assert set(block) >= {"address", "size", "requested_size", "state", "frames"}
    # Totals equal dygrad's statistics at the dump.
    reserved = sum(s["total_size"] for s in snap["segments"])
    requested = sum(b["requested_size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    assert reserved == stats["reserved_bytes.all.current"] == reserved_now
    assert requested == stats["allocated_bytes.all.current"] == allocated
    # torch's own tools parse it and print the same totals.
    text = memory_viz.segsum(snap)
    assert f"segments: {len(snap['segments'])}\n" in text
    assert f"total_reserved: {memory_viz._format_size(reserved_now)}\n" in text
    assert f"total_allocated: {memory_viz._format_size(allocated)}\n" in text
    entries = snap["device_traces"][0]
    traced = memory_viz.trace(snap)
    assert traced.startswith(f"Device 0 ----------------\n{len(entries)} entries\n")
    assert "del " in traced and "# free completed for" in traced
    actions = {e["action"] for e in entries}
    # Expandable segments (the default) map pages into a reserved range: torch's segment_map entries, and each
    # contiguous mapped range is a segment with is_expandable set (as torch's snapshot reports them).
    assert {"alloc", "free_requested", "free_completed", "segment_map"} <= actions
    assert "'action': 'segment_map'" in traced
    assert all(s["is_expandable"] for s in snap["segments"])
    # The trace's allocs and frees account for the change of allocated over the recording.
    live_blocks = {b["address"]: b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"}
    big = kept[2]
    frames = live_blocks[big.data_ptr()]["frames"]
    python = [f for f in frames if f["filename"].endswith(".py")]
    cpp = [f for f in frames if not f["filename"].endswith(".py")]
    assert python[0]["filename"] == HERE and python[0]["name"] == "_train_a_few_steps"
    assert any("libdygrad" in f["filename"] for f in cpp)  # C++ frames, before the Python ones
    assert frames.index(cpp[0]) < frames.index(python[0])
    assert live_blocks[big.data_ptr()]["description"] == f"[{3 * MiB}] float32"
    # The trace_plot HTML (torch's viewer page) is produced from it too.
    assert "MemoryViz" in memory_viz.trace_plot(snap)


def test_record_history_options(history):
    settle()
    dg.memory.record_history(enabled="all", context="alloc", stacks="python", max_entries=5)
    assert dg.memory.snapshot()["device_traces"] == [[]]
    t = [dg.ones(1000) for _ in range(10)]
    del t
    settle()
    entries = dg.memory.snapshot()["device_traces"][0]
    assert len(entries) == 5
    frees = [e for e in entries if e["action"] == "free_completed"]
    assert frees and all(e["frames"] == [] for e in frees)  # context="alloc": no stacks for frees
    dg.memory.record_history(enabled="state", stacks="python")
    u = dg.ones(1000)
    snap = dg.memory.snapshot()
    assert snap["device_traces"] == [[]]
    blocks = [b for s in snap["segments"] for b in s["blocks"] if b["address"] == u.data_ptr()]
    assert blocks[0]["frames"][0]["filename"] == HERE
    assert not any("libdygrad" in f["filename"] for f in blocks[0]["frames"])  # stacks="python": no C++ frames
    dg.memory.record_history(enabled=None)
    assert dg.memory.snapshot()["device_traces"] == [[]]
    with pytest.raises(ValueError, match="record_history"):
        dg.memory.record_history(enabled="sometimes")
    with pytest.raises(ValueError, match="cpu"):
        dg.memory.snapshot(device="cuda:0")


def test_report_shows_the_snapshot_timeline_by_category(tmp_path, history):
    settle()
    dg.memory.record_history(enabled="all", context=None)
    kept = _train_a_few_steps()
    settle()
    snap = dg.memory.snapshot()
    times, series, allocated = report.snapshot_timeline(snap)
    assert times and times[0] == 0.0
    assert {"parameter", "activation", "optimizer_state"} <= set(series)
    # The stacked categories sum to allocated at every point.
    for i, total in enumerate(allocated):
        assert sum(v[i] for v in series.values()) == total
    html = report.snapshot_section(snap)
    assert 'id="snapshot-chart"' in html and "optimizer state" in html
    assert report.fmt_bytes(sum(s["total_size"] for s in snap["segments"])) in html
    # In a run directory (beside summary.json), render_html adds the section.
    with open(tmp_path / report.SNAPSHOT_FILE, "wb") as f:
        pickle.dump(snap, f)
    assert "snapshot-chart" in report._snapshot_file_section({"dir": str(tmp_path)})
    with open(tmp_path / report.SNAPSHOT_FILE, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [[]], "evil": os.system}, f)  # refuses objects
    assert "cannot be read" in report._snapshot_file_section({"dir": str(tmp_path)})
    del kept


def test_expandable_segments_under_an_address_space_limit():
    # RLIMIT_AS counts reserved address space: the ranges shrink to an eighth of the limit, and a pool that
    # outgrows one reserves another (a request larger than the range gets a range of its own).
    code = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
import dygrad as dg
MiB = 1 << 20
r0 = dg.memory_reserved()
ts = [dg.empty(400 * MiB, dtype=dg.uint8) for _ in range(3)]
big = dg.empty(1024 * MiB, dtype=dg.uint8)
assert dg.memory_allocated() >= 2224 * MiB, dg.memory_allocated()
assert dg.memory_reserved() - r0 >= 2224 * MiB
snap = dg.memory.snapshot()
assert sum(s["total_size"] for s in snap["segments"]) == dg.memory_reserved()
del ts, big
dg.synchronize()
dg.empty_cache()
assert dg.memory_reserved() - r0 < 8 * MiB, dg.memory_reserved() - r0
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
