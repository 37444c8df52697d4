"""The tools per device (docs/devices.md, "Tools per device"), on the asynchronous test device: the profiler's device
track for a device's Tasks (its launcher's spans, one track per device), memory statistics and snapshots per device's
pool, device queries, and the advisor's rule on host-device copies."""
import pytest

import dygrad as dg
from dygrad.profiler.summary import build_summary

TEST0, TEST1 = "test:0", "test:1"


@pytest.fixture(scope="module", autouse=True)
def test_devices():
    assert dg.testing.enable_test_device(2) >= 2


def test_device_count():
    assert dg.testing.test_device_count() >= 2
    assert dg._C._device_count("cpu") == 1


def test_memory_statistics_are_per_device():
    dg.synchronize()
    cpu_before, dev_before = dg.memory.memory_allocated(), dg.memory.memory_allocated(TEST1)
    x = dg.ones(1 << 16).to(TEST1)
    assert dg.memory.memory_allocated(TEST1) == dev_before + (1 << 18)
    stats = dg.memory.memory_stats(TEST1)
    assert stats["allocated_bytes.all.current"] == dev_before + (1 << 18)
    assert dg.memory.memory_reserved(TEST1) >= dg.memory.memory_allocated(TEST1)
    snap = dg.memory.snapshot(device=TEST1)
    assert snap["segments"] and all(seg["device"] == 1 for seg in snap["segments"])
    assert sum(b["requested_size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated") \
        == dg.memory.memory_allocated(TEST1)
    del x
    dg.synchronize()
    assert dg.memory.memory_allocated(TEST1) == dev_before
    assert dg.memory.memory_allocated() >= 0 and dg.memory.memory_allocated() - cpu_before < (1 << 18)
    dg.memory.empty_cache(TEST1)
    with pytest.raises(ValueError, match="snapshot"):
        dg.memory.snapshot(device="test:3")  # not on


def test_the_profiler_puts_a_devices_tasks_on_its_own_track():
    a = dg.arange(4096, dtype=dg.float32)
    dg.synchronize()
    with dg.profiler.profile() as prof:
        on_dev = a.to(TEST0)
        back = on_dev.to("cpu")
        (back * 2).sum().item()
    ops = prof.result.ops
    copies = [o for o in ops if o.name == "copy_device"]
    assert [o.device for o in copies] == [TEST0, TEST0]  # both copies run on the device's stream
    cpu_ops = [o for o in ops if o.device == "cpu" and o.ran]
    assert cpu_ops and all(o.ran for o in copies)
    # The device's kernels ran on its launcher, a thread of its own: a track apart from the CPU worker's.
    assert {o.device_thread for o in copies}.isdisjoint({o.device_thread for o in cpu_ops})
    assert len({o.seq for o in ops}) == len(ops)  # events of different streams never collide


def test_the_advisor_points_at_copies_every_step():
    batches = [dg.randn((64, 64)) for _ in range(4)]
    w = dg.randn((64, 64)).to(TEST0)

    def step(on_device):
        for b in batches:
            x = b if on_device else b.to(TEST0)
            y = x.to("cpu") if not on_device else x
            y.sum()
        dg.synchronize()

    on_dev = [b.to(TEST0) for b in batches]
    del w
    with dg.profiler.profile() as prof:
        for _ in range(3):
            step(False)
            prof.step()
    found = {a["rule"]: a for a in build_summary(prof.result, peak=1e11)["advice"]}
    assert "device_copies" in found, sorted(found)
    assert found["device_copies"]["numbers"]["device_copies_per_step"] == pytest.approx(8)
    batches[:] = on_dev
    with dg.profiler.profile() as prof:
        for _ in range(3):
            step(True)
            prof.step()
    assert "device_copies" not in {a["rule"] for a in build_summary(prof.result, peak=1e11)["advice"]}
