"""dygrad.profiler.metrics and summary: peak calibration, model FLOPs against the benchmark's count, MFU/HFU,
throughput, linearity, the memory report and its allocator categories, summary.json's shape."""
import gc
import json
import os

import pytest

import dygrad as dg
from dygrad import nn
from dygrad.models import llama
import dygrad.profiler
from dygrad.profiler import metrics, summary as summary_mod

from profiler_fakes import FakeResult, ops_from_names, sample

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


# --- peak and FLOPs ---------------------------------------------------------------------------------------------

def test_peak_is_measured_once_per_dtype_and_threads():
    first = metrics.measure_peak_flops(dg.float32, n=128, repeats=2)
    assert first > 1e8  # any machine multiplies 128^3 in well under 40 ms
    key = (str(dg.float32), dg.get_context().num_threads, 128)
    metrics._peak_cache[key] = 123.0  # a cached figure is returned without measuring again
    try:
        assert metrics.measure_peak_flops(dg.float32, n=128, repeats=2) == 123.0
    finally:
        metrics._peak_cache[key] = first


def test_a_given_peak_wins():
    assert metrics.peak_flops(dg.float32, given=2e11) == (2e11, "given by the user")
    with pytest.raises(ValueError, match=r"\[peak_flops\]"):
        metrics.peak_flops(given=0)


def test_measured_peak_says_where_it_came_from():
    value, source = metrics.peak_flops(dg.float32)
    assert value > 0 and source.startswith("measured: 2048^3 float32 GEMM")
    assert metrics.peak_flops(dg.float32, given=value) == (value, source)  # passed back in: still measured


@pytest.mark.parametrize("name", ["tiny", "bench"])
def test_model_flops_match_the_benchmark_count(name):
    cfg = llama.CONFIGS[name]
    # bench/train.py counts achieved FLOP/s as tokens/s * LlamaConfig.flops_per_token(): the same number.
    bench_source = open(os.path.join(ROOT, "bench", "train.py")).read()
    assert "c.flops_per_token()" in bench_source
    assert metrics.llama_flops_per_token(cfg) == cfg.flops_per_token()
    # and 6N + 12 L d T from the parameters of the model actually built agrees within 5%
    dg.manual_seed(0)
    n = sum(p.numel() for p in llama.Llama(cfg).parameters())
    counted = 6 * n + 12 * cfg.n_layers * cfg.dim * cfg.seq_len
    assert abs(metrics.llama_flops_per_token(cfg, cfg.seq_len) / counted - 1) < 0.05
    # MFU from the benchmark's own line (tokens_per_s, achieved_gflops) equals metrics.mfu of the step
    step_s, peak = 0.5, 1e11
    tokens_per_s = cfg.batch_size * cfg.seq_len / step_s
    bench_mfu = tokens_per_s * cfg.flops_per_token() / peak
    model_flops = metrics.llama_flops_per_token(cfg) * cfg.batch_size * cfg.seq_len
    assert metrics.mfu(model_flops, step_s, peak) == pytest.approx(bench_mfu, rel=0.05)


def test_flops_per_token_grows_with_the_sequence():
    cfg = llama.CONFIGS["tiny"]
    assert metrics.llama_flops_per_token(cfg, 512) - metrics.llama_flops_per_token(cfg, 256) == \
        12 * cfg.n_layers * cfg.dim * 256


def test_mfu_hfu_throughput():
    assert metrics.mfu(4e9, 0.5, 1e10) == pytest.approx(0.8)
    assert metrics.mfu(None, 0.5, 1e10) is None
    assert metrics.hfu(5e9, 0.5, 1e10) == pytest.approx(1.0)
    assert metrics.throughput(8, 256, 0.5) == (16.0, 4096.0)
    assert metrics.throughput(8, 256, 0.5, ranks=2) == (32.0, 8192.0)
    assert metrics.throughput(8, None, 0.5) == (16.0, None)
    assert metrics.throughput(None, 256, 0.5) == (None, None)


def test_linearity():
    got = metrics.linearity([(1, 1000.0), (2, 1800.0), (4, 2000.0)])
    assert got == [(1, 1.0), (2, pytest.approx(0.9)), (4, pytest.approx(0.5))]
    with pytest.raises(ValueError, match=r"\[linearity\] needs a 1-rank run"):
        metrics.linearity([(2, 1800.0)])


# --- memory -----------------------------------------------------------------------------------------------------

def test_memory_report_splits_the_peak_sample():
    memory = [sample(10, 100, 200, activation=100), sample(20, 300, 500, parameter=100, activation=150,
                                                           gradient=50),
              sample(30, 50, 600, parameter=50)]
    report = metrics.memory_report(FakeResult(memory=memory))
    assert report["peak_allocated"] == 300 and report["peak_reserved"] == 600
    assert report["at_peak"] == {"parameter": 100, "gradient": 50, "optimizer_state": 0, "activation": 150,
                                 "temporary": 0, "other": 0, "scratch": 0, "communication": 0, "fragmentation": 200}
    assert report["theoretical"] is None
    assert report["timeline"][1] == [pytest.approx(20e-9), 300, 500]


def test_memory_report_without_samples_uses_the_counters_at_stop():
    with dg.profiler.profile() as prof:  # profile_memory off
        dg.ones((1024,)).sum().item()
    report = metrics.memory_report(prof.result)
    assert report["peak_allocated"] == prof.result.memory_at_stop["peak_allocated"] > 0
    assert report["timeline"] == [] and set(report["at_peak"].values()) == {0}


def test_memory_timeline_is_downsampled_keeping_the_peak():
    memory = [sample(i, 7 if i != 4321 else 10_000, 20_000) for i in range(10_000)]
    timeline = metrics.memory_timeline(FakeResult(memory=memory))
    assert len(timeline) <= 2000 and max(p[1] for p in timeline) == 10_000


def test_theoretical_memory_of_a_llama():
    cfg = llama.LlamaConfig(n_layers=2, dim=32, n_heads=2, ffn_dim=64, vocab_size=64, seq_len=16, batch_size=2)
    dg.manual_seed(0)
    model = llama.Llama(cfg)
    opt = dg.optim.AdamW(model.parameters())
    params = cfg.num_params() * 4
    t = metrics.theoretical_memory(model, opt, batch_size=2, seq_len=16)
    assert t["parameter"] == t["gradient"] == params and t["optimizer_state"] == 2 * params
    assert t["activation"] == metrics.llama_activation_bytes(cfg, 2, 16)
    assert metrics.llama_activation_bytes(cfg, 2, 16, fused=False) > t["activation"]
    model(dg.randint(0, 64, (2, 16)), dg.randint(0, 64, (2, 16))).backward()
    opt.step()  # now the optimizer's own state is counted: both moments and each param's 0-d float32 step
    steps = 4 * len(list(model.parameters()))
    assert metrics.theoretical_memory(model, opt)["optimizer_state"] == 2 * params + steps


@pytest.mark.parametrize("fused", [True, False])
def test_activation_estimate_matches_a_synchronous_step(fused):
    # In synchronize mode nothing is queued: the activations at the peak are what autograd saved.
    cfg = llama.LlamaConfig(n_layers=2, dim=64, n_heads=2, ffn_dim=176, vocab_size=256, seq_len=64, batch_size=4)
    saved = dg.get_context()
    dg.set_context(synchronize=True)
    try:
        dg.manual_seed(0)
        model = llama.Llama(cfg, fused=fused)
        opt = dg.optim.AdamW(model.parameters())
        x, y = dg.randint(0, 256, (4, 64)), dg.randint(0, 256, (4, 64))

        def step():
            loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        step()
        before = dg.memory_stats()["allocated_bytes.activation"]
        with dg.profiler.profile(profile_memory=True) as prof:
            step()
        report = metrics.memory_report(prof.result, model, opt, batch_size=4)
    finally:
        dg.set_context(saved)
    measured = report["at_peak"]["activation"] - before
    assert 0.8 < report["theoretical"]["activation"] / measured < 1.25


def _category_bytes():
    stats = dg.memory_stats()
    return {c: stats["allocated_bytes." + c] for c in metrics.MEMORY_CATEGORIES}


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_allocator_tags_parameters_gradients_and_optimizer_states(optimizer):
    gc.collect()
    dg.synchronize()
    before = _category_bytes()
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.Linear(128, 16))
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    opt = dg.optim.AdamW(model.parameters()) if optimizer == "adamw" else \
        dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(dg.randn((8, 64))).sum().backward()
    opt.step()
    dg.synchronize()
    after = _category_bytes()
    grown = {c: after[c] - before[c] for c in after}
    assert grown["parameter"] == params
    assert grown["gradient"] == params
    assert grown["optimizer_state"] == (2 if optimizer == "adamw" else 1) * params
    opt.load_state_dict(opt.state_dict())  # restored states keep their category
    dg.synchronize()
    assert _category_bytes()["optimizer_state"] - before["optimizer_state"] == grown["optimizer_state"]


def test_a_parameter_used_twice_has_its_gradient_tagged():
    gc.collect()
    dg.synchronize()
    before = _category_bytes()
    layer = nn.Linear(64, 64)
    layer(layer(dg.randn((4, 64)))).sum().backward()  # two contributions: the second adds to the first
    dg.synchronize()
    grown = {c: v - before[c] for c, v in _category_bytes().items()}
    assert grown["gradient"] == grown["parameter"] == (64 * 64 + 64) * 4


def test_a_cast_module_keeps_its_categories():
    gc.collect()
    dg.synchronize()
    before = _category_bytes()
    model = nn.Linear(64, 32)
    model(dg.randn((4, 64))).sum().backward()
    model.double()
    dg.synchronize()
    grown = {c: v - before[c] for c, v in _category_bytes().items()}
    assert grown["parameter"] == grown["gradient"] == (64 * 32 + 32) * 8


# --- summary.json -----------------------------------------------------------------------------------------------

def _fake_run():
    steps = [0, 1_000_000, 2_000_000]
    ops = ops_from_names(["matmul", "copy", "add"] * 3, begin=10) + \
        ops_from_names(["matmul", "copy", "add"] * 3, begin=1_000_010)
    return FakeResult(ops=ops, step_markers=steps, flops_per_step=1e6,
                      memory=[sample(5, 100, 150, parameter=40, activation=60)])


def test_summary_has_the_contract_fields():
    s = summary_mod.build_summary(_fake_run(), label="x", command="cmd", batch_size=4, seq_len=8, peak=1e9,
                                  model_config=llama.CONFIGS["tiny"])
    assert set(s) == {"version", "meta", "steps", "breakdown", "throughput", "flops", "memory", "ops", "syncs",
                      "copies", "advice", "modules", "leaks", "gc"}
    assert set(s["meta"]) == {"created", "label", "command", "dygrad_version", "context"}
    assert s["steps"]["count"] == 2 and s["steps"]["step_time_s"]["mean"] == pytest.approx(1e-3)
    assert s["throughput"] == {"batch_size": 4, "seq_len": 8, "ranks": 1, "samples_per_s": pytest.approx(4000),
                               "tokens_per_s": pytest.approx(32000)}
    f = s["flops"]
    assert f["peak_source"] == "given by the user" and f["hfu"] == pytest.approx(1e6 / 1e-3 / 1e9)
    assert f["model_per_step"] == metrics.llama_flops_per_token(llama.CONFIGS["tiny"], 8) * 4 * 8
    assert f["mfu"] == pytest.approx(f["model_per_step"] / 1e-3 / 1e9)
    assert set(s["memory"]) == {"peak_allocated", "peak_reserved", "at_peak", "theoretical", "timeline"}
    assert s["copies"] == {"bytes_per_step": pytest.approx(3000.0), "count_per_step": pytest.approx(3.0)}
    assert {o["name"] for o in s["ops"]} == {"matmul", "copy", "add"}
    assert set(s["ops"][0]) == {"name", "count", "device_total_ms", "device_mean_us", "host_total_ms",
                                "gflops_per_s", "device_percent"}
    assert s["syncs"] == {"per_step": 0.0, "by_name": {}}
    json.dumps(s)  # plain JSON


def test_summary_without_a_model_has_no_mfu():
    s = summary_mod.build_summary(_fake_run(), peak=1e9)
    assert s["flops"]["mfu"] is None and s["flops"]["model_per_step"] is None
    assert s["throughput"]["samples_per_s"] is None


def test_write_run_dir(tmp_path):
    summary_mod.write_run_dir(_fake_run(), str(tmp_path / "run"), label="fake", peak=1e9)
    for name in ("trace.json", "op_stats.csv", "breakdown.json", "summary.json"):
        assert (tmp_path / "run" / name).exists()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["meta"]["label"] == "fake"
