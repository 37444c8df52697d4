"""dygrad.profiler.advisor: every rule fires on a real small program that has its problem and stays silent on
the same program without it; synthetic results cover the edges (thresholds, deduplication, missing data).
No test depends on a timing threshold except through an effect made overwhelming (see each program)."""
import time

import pytest

import dygrad as dg
from dygrad import nn
from dygrad.models import llama
from dygrad.nn import functional as F
from dygrad.profiler import advisor
from dygrad.profiler.summary import build_summary

from profiler_fakes import FakeResult, Range, ops_from_names, sample, sync

PEAK = 1e11  # a given peak: these tests never need the calibration GEMM


def rules(result, **summary_args):
    summary = build_summary(result, peak=PEAK, **summary_args)
    return {a["rule"]: a for a in summary["advice"]}


# --- synthetic results: thresholds and edges --------------------------------------------------------------------

def test_context_rules_fire_on_the_flags_only():
    assert {"synchronize_mode", "deterministic_mode"} <= set(
        rules(FakeResult(context={"synchronize": True, "deterministic": True})))
    assert not {"synchronize_mode", "deterministic_mode"} & set(rules(FakeResult()))


@pytest.mark.parametrize("bucket,rule", [("host_bound", "host_bound"), ("data_wait", "data_wait")])
def test_time_fraction_rules_and_their_gain(bucket, rule):
    found = rules(FakeResult(buckets={bucket: 0.5}))[rule]
    assert found["severity"] == "high" and "2.00x" in found["expected_gain"] and "50%" in found["evidence"]
    low = {"host_bound": advisor.HOST_BOUND_FRACTION, "data_wait": advisor.DATA_WAIT_FRACTION}[bucket] * 0.9
    assert rule not in rules(FakeResult(buckets={bucket: low}))


def test_jit_rule_fires_on_host_bound_steps_not_already_replayed():
    found = rules(FakeResult(buckets={"host_bound": 0.5}, ops=ops_from_names(["add"] * 50)))["jit"]
    assert "dg.jit(step)" in found["fix"] and "2.00x" in found["expected_gain"]
    segmented = rules(FakeResult(buckets={"host_bound": 0.5}, ops=ops_from_names(["jit_segment", "add"])))["jit"]
    assert "segments" in found["title"] or "dg.jit.explain" in segmented["fix"]
    assert "jit" not in rules(FakeResult(buckets={"host_bound": 0.5}, ops=ops_from_names(["jit_graph"])))
    assert "jit" not in rules(FakeResult(buckets={"host_bound": advisor.HOST_BOUND_FRACTION * 0.9}))


COMPOSED = {
    "rms_norm": ["pow_scalar", "sum", "div_scalar", "add_scalar", "rsqrt", "mul", "mul"],
    "rope": ["mul", "mul", "sub", "mul", "mul", "add", "cat"],
    "swiglu": ["matmul", "silu", "matmul", "mul"],
    "attention": ["matmul", "div_scalar", "masked_fill", "softmax", "matmul"],
    "cross_entropy": ["log_softmax", "gather", "neg", "sum"],
}
FUSED = {"rms_norm": ["rms_norm"], "rope": ["rotary_position_embedding"], "swiglu": ["matmul", "matmul", "swiglu"],
         "attention": ["scaled_dot_product_attention"], "cross_entropy": ["cross_entropy"]}


@pytest.mark.parametrize("name", sorted(COMPOSED))
def test_composed_patterns_are_found_by_name_sequence(name):
    found = rules(FakeResult(ops=ops_from_names(["matmul"] + COMPOSED[name] + ["matmul"])))
    assert f"unfused_{name}" in found and found[f"unfused_{name}"]["numbers"]["per_step"] == 1
    assert not [r for r in rules(FakeResult(ops=ops_from_names(FUSED[name]))) if r.startswith("unfused")]


def test_patterns_do_not_span_host_threads():
    half = COMPOSED["attention"]
    ops = ops_from_names(half[:3], thread=0) + ops_from_names(half[3:], begin=5000, thread=1)
    assert "unfused_attention" not in rules(FakeResult(ops=ops))


def test_copies_need_a_share_of_the_bytes():
    mib = float(1 << 20)
    heavy = ops_from_names(["copy", "matmul"], nbytes=4 * mib)
    assert rules(FakeResult(ops=heavy))["copies"]["numbers"]["copy_fraction_of_bytes"] == pytest.approx(0.5)
    light = ops_from_names(["copy"] + ["matmul"] * 20, nbytes=4 * mib)
    assert "copies" not in rules(FakeResult(ops=light))
    tiny = ops_from_names(["copy", "matmul"], nbytes=100.0)  # a share, but no volume
    assert "copies" not in rules(FakeResult(ops=tiny))


def test_syncs_per_step_and_the_idle_they_cause():
    ops = ops_from_names(["matmul"] * 10, gap=10_000, length=50_000)
    syncs = [sync("synchronize", 60_000 * i + 1000, 60_000 * i + 2000) for i in range(5)]
    found = rules(FakeResult(ops=ops, ranges=syncs))["syncs_in_step"]
    assert found["numbers"]["syncs_per_step"] == 5 and "synchronize x5" in found["evidence"]
    assert "syncs_in_step" not in rules(FakeResult(ops=ops, ranges=syncs[:advisor.MAX_SYNCS_PER_STEP]))


def test_many_scalar_reads_are_python_reductions_not_syncs():
    reads = [sync("item", 1000 * i, 1000 * i + 100) for i in range(advisor.SCALAR_READS_PER_STEP)]
    found = rules(FakeResult(ranges=reads))
    assert "python_reductions" in found and "syncs_in_step" not in found
    assert "python_reductions" not in rules(FakeResult(ranges=reads[:advisor.SCALAR_READS_PER_STEP // 2]))


def test_element_selections_feeding_tiny_ops_are_python_reductions():
    n = advisor.ELEMENT_OPS_PER_STEP
    tiny = ops_from_names(["add"] * n, gap=1000, length=100, nbytes=12.0)
    selections = [Range("host_op", "select", 0, 1100 * i, 1100 * i + 5, False) for i in range(n)]
    assert "python_reductions" in rules(FakeResult(ops=tiny, ranges=selections))
    assert "python_reductions" not in rules(FakeResult(ops=tiny))  # tiny ops alone: host-bound, not this
    big = ops_from_names(["add"] * n, gap=1000, length=100, nbytes=4096.0)
    assert "python_reductions" not in rules(FakeResult(ops=big, ranges=selections))


def test_sync_ranges_of_one_call_count_once():
    api = Range("host_op", "item", 0, 100, 900, False)
    found = build_summary(FakeResult(ranges=[api, sync("item", 110, 800), sync("item", 850, 860)]),
                          peak=PEAK)["syncs"]
    assert found == {"per_step": 1.0, "by_name": {"item": 1}}


def test_layer_norm_is_not_a_composed_rms_norm():
    layer_norm = ["sum", "div_scalar", "add", "mul", "sum", "div_scalar", "add_scalar", "rsqrt", "mul"]
    assert "unfused_rms_norm" not in rules(FakeResult(ops=ops_from_names(layer_norm)))


def test_memory_rules_need_samples_and_size():
    mib = 1 << 20
    activations = [sample(10, 64 * mib, 64 * mib, activation=48 * mib, parameter=16 * mib)]
    assert "activation_memory" in rules(FakeResult(memory=activations))
    small = [sample(10, mib, mib, activation=mib)]  # dominated, but below ACTIVATION_MIN_BYTES
    assert "activation_memory" not in rules(FakeResult(memory=small))
    fragmented = [sample(10, 32 * mib, 64 * mib, parameter=32 * mib)]
    assert rules(FakeResult(memory=fragmented))["fragmentation"]["numbers"]["fragmentation_share"] == 0.5
    assert not {"activation_memory", "fragmentation"} & set(rules(FakeResult()))


BANDWIDTH = 1e10  # a given memory bandwidth, 10 GB/s


def kernel_op(name, begin_us, device_us, flops=0.0, nbytes=0.0):
    from profiler_fakes import op
    return op(name, begin_us * 1000, begin_us * 1000 + 1, begin_us * 1000 + 2, (begin_us + device_us) * 1000 + 2,
              flops, nbytes)


def test_slow_kernels_are_named_with_their_share_and_roofline():
    """In a 1 ms step: a compute-bound op at 5% of the 100 GFLOP/s peak for 400 us, a memory-bound op at 10% of the
    10 GB/s bandwidth for 200 us, a GEMM at its peak, and a fast slow op below the share threshold: the two slow
    ones are named, largest share first, each with its speed against its own roof."""
    ops = [kernel_op("matmul", 0, 300, flops=3e7),                  # 100 GFLOP/s: at the peak
           kernel_op("rotary_attention", 300, 400, flops=2e6),      # 5 GFLOP/s: 5% of the peak
           kernel_op("exp", 700, 200, nbytes=2e5),                  # 1 GB/s: 10% of the bandwidth
           kernel_op("silu", 900, 40, nbytes=4e4)]                  # slow, but 4% of the step
    found = rules(FakeResult(ops=ops), bandwidth=BANDWIDTH)["slow_kernels"]
    names = [k["op"] for k in found["numbers"]["ops"]]
    assert names == ["rotary_attention", "exp"], found
    assert "rotary_attention (40% of the step at 5.0 GFLOP/s, 5% of the 100 GFLOP/s GEMM peak)" in found["evidence"]
    assert "exp (20% of the step at 1.0 GB/s, 10% of the 10.0 GB/s memory bandwidth)" in found["evidence"]
    # reaching half their roofline would save 400 - 2*20 + 200 - 2*20 = 520 us of 1000
    assert found["severity"] == "high" and "2.08x" in found["expected_gain"]
    # at a quarter of the roofline or above, or below 5% of the step, nothing fires
    quick = [kernel_op("matmul", 0, 300, flops=3e7), kernel_op("rotary_attention", 300, 400, flops=1e7),
             kernel_op("exp", 700, 200, nbytes=5e5)]
    assert "slow_kernels" not in rules(FakeResult(ops=quick), bandwidth=BANDWIDTH)


def test_slow_kernels_below_the_cpus_level_say_so(monkeypatch):
    """Where the kernels run below the highest level the CPU runs (DYGRAD_CPU_ISA), the fix is the level."""
    ops = [kernel_op("rotary_attention", 0, 900, flops=2e6)]
    monkeypatch.setattr(dg.backends.cpu, "kernel_isa", lambda: ("baseline", "DYGRAD_CPU_ISA=baseline", "avx2 fma"))
    monkeypatch.setattr(dg.backends.cpu, "kernel_levels", lambda: ("baseline", "avx2"))
    found = rules(FakeResult(ops=ops), bandwidth=BANDWIDTH)["slow_kernels"]
    assert "(kernel level: baseline)" in found["evidence"]
    assert "run at the baseline level, and this CPU runs avx2 (DYGRAD_CPU_ISA=baseline)" in found["fix"]
    monkeypatch.setattr(dg.backends.cpu, "kernel_isa", lambda: ("avx2", "", "avx2 fma"))
    assert "sweep_perf" in rules(FakeResult(ops=ops), bandwidth=BANDWIDTH)["slow_kernels"]["fix"]


def test_advice_entries_have_the_contract_fields_and_are_sorted():
    found = build_summary(FakeResult(context={"synchronize": True, "deterministic": True},
                                     buckets={"host_bound": 0.1}), peak=PEAK)["advice"]
    assert [a["severity"] for a in found] == sorted((a["severity"] for a in found),
                                                    key=advisor.SEVERITY_ORDER.get)
    for a in found:
        assert set(a) == {"rule", "title", "severity", "evidence", "numbers", "expected_gain", "fix"}
        assert a["severity"] in ("high", "medium", "low") and a["fix"] and a["expected_gain"]
    assert advisor.advise(FakeResult(context={"synchronize": True}))[0]["rule"] == "synchronize_mode"


# --- real programs: each rule fires on the program with the problem and not on the one without -----------------

@pytest.fixture
def context():
    """dg.set_context(...) for one test, restored afterwards."""
    saved = dg.get_context()
    yield dg.set_context
    dg.synchronize()
    dg.set_context(saved)


def profiled(step, steps=3, profile_memory=False):
    """Runs step() `steps` times under dg.profiler.profile, a marker after each; returns the ProfileResult."""
    with dg.profiler.profile(profile_memory=profile_memory) as prof:
        for _ in range(steps):
            step()
            prof.step()
    return prof.result


def fired(result, **summary_args):
    return set(rules(result, **summary_args))


def mlp_training_step():
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 8))
    opt = dg.optim.AdamW(model.parameters())
    x = dg.randn((16, 32))

    def step():
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
    return step


def test_synchronize_mode_program(context):
    step = mlp_training_step()
    context(synchronize=True)
    problem = profiled(step)
    context(synchronize=False)
    assert "synchronize_mode" in fired(problem) and "synchronize_mode" not in fired(profiled(step))


def test_deterministic_mode_program(context):
    step = mlp_training_step()
    context(deterministic=True)
    problem = profiled(step)
    context(deterministic=False)
    assert "deterministic_mode" in fired(problem) and "deterministic_mode" not in fired(profiled(step))


def test_host_bound_program():
    # The host is slow between small ops, so the device idles waiting for each one. The host's work is a sleep:
    # busy Python would also keep the stream worker off a loaded machine's cores, and that lag counts as
    # "other idle" (the Task was queued before the gap), not host-bound (docs/profiler.md, host-bound rule).
    def slow_host():
        a = dg.ones((1,))
        for _ in range(10):
            a = a + 1.0
            time.sleep(0.005)
        a.item()
    # a few large GEMMs: the queue never empties while the host waits at the step's end
    x, y = dg.randn((384, 384)), dg.randn((384, 384))

    def gemms():
        c = x @ y
        for _ in range(3):
            c = c @ y
        c.sum().item()
    assert "host_bound" in fired(profiled(slow_host)) and "host_bound" not in fired(profiled(gemms))


def test_data_wait_program():
    x, y = dg.randn((256, 256)), dg.randn((256, 256))

    def step(wait_s):
        with dg.profiler.data_wait():  # as DataLoader does around each batch
            if wait_s:
                time.sleep(wait_s)  # the loader had nothing ready
        c = x @ y
        for _ in range(3):
            c = c @ y
        c.sum().item()
    assert "data_wait" in fired(profiled(lambda: step(0.02)))
    assert "data_wait" not in fired(profiled(lambda: step(0.0)))


def llama_step(fused):
    cfg = llama.LlamaConfig(n_layers=1, dim=32, n_heads=2, ffn_dim=64, vocab_size=64, seq_len=16, batch_size=2)
    dg.manual_seed(0)
    model = llama.Llama(cfg, fused=fused)
    opt = dg.optim.AdamW(model.parameters())
    x, y = dg.randint(0, 64, (2, 16)), dg.randint(0, 64, (2, 16))

    def step():
        loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
    return step


def test_unfused_llama_program():
    unfused = {r for r in fired(profiled(llama_step(False), steps=2)) if r.startswith("unfused_")}
    assert unfused == {"unfused_rms_norm", "unfused_rope", "unfused_swiglu", "unfused_attention"}
    assert not [r for r in fired(profiled(llama_step(True), steps=2)) if r.startswith("unfused_")]


def test_unfused_cross_entropy_program():
    logits, target = dg.randn((32, 64), requires_grad=True), dg.randint(0, 64, (32, 1))

    def composed():
        (-F.log_softmax(logits, -1).gather(1, target).mean()).backward()

    def fused():
        F.cross_entropy(logits, target.view(-1)).backward()
    assert "unfused_cross_entropy" in fired(profiled(composed))
    assert "unfused_cross_entropy" not in fired(profiled(fused))


def test_copies_program():
    a, b = dg.randn((512, 512)), dg.randn((512, 512))

    def step(contiguous):
        t = a.t()
        (t.contiguous() if contiguous else t) @ b
        dg.synchronize()
    assert "copies" in fired(profiled(lambda: step(True)))
    assert "copies" not in fired(profiled(lambda: step(False)))


def test_syncs_in_step_program():
    x = dg.randn((64, 64))

    def step(syncs):
        y = x
        for _ in range(8):
            y = y @ x
            if syncs:
                dg.synchronize()  # e.g. a timing or a debug read inside the step
        y.sum().item()
    assert "syncs_in_step" in fired(profiled(lambda: step(True)))
    assert "syncs_in_step" not in fired(profiled(lambda: step(False)))


def test_python_reduction_programs():
    t = dg.randn((256,))
    assert "python_reductions" in fired(profiled(lambda: float(sum(t))))  # Python's sum over elements
    assert "python_reductions" in fired(profiled(lambda: [t[i].item() for i in range(40)]))
    assert "python_reductions" not in fired(profiled(lambda: t.sum().item()))


def test_activation_memory_program():
    def step(batch, width, depth):
        dg.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])
        opt = dg.optim.AdamW(model.parameters())

        def run():
            model(dg.randn((batch, width))).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            dg.synchronize()
        # The weights' initialisation is still queued when step() returns; its temporaries (activation
        # category, several MiB for 1024 x 1024 weights) would land in the profiled window's peak.
        dg.synchronize()
        return run
    # a big batch through a narrow MLP: the saved activations dwarf the weights
    assert "activation_memory" in fired(profiled(step(4096, 256, 4), steps=2, profile_memory=True))
    # wide weights, a tiny batch: parameters, gradients and AdamW states dominate
    assert "activation_memory" not in fired(profiled(step(8, 1024, 2), steps=2, profile_memory=True))


def test_fragmentation_program():
    def step(release):
        small = [dg.zeros((256 * 1024,)) for _ in range(32)]  # 32 x 1 MiB, freed into the cache
        del small
        dg.synchronize()
        if release:
            dg.empty_cache()
        big = dg.zeros((16 * 1024 * 1024,))  # 64 MiB: no cached block fits it
        dg.synchronize()
        del big
    # The small blocks' free pages stay mapped when nothing is released at a miss (torch's behaviour with
    # expandable segments; dygrad's default gives them back once reserved exceeds allocated by the margin, and
    # separate segments keep them: docs/memory.md).
    fraction = dg._C._release_fraction()
    dg._C._set_release_fraction(-1.0)
    try:
        dg.synchronize()
        dg.empty_cache()
        problem = profiled(lambda: step(False), steps=2, profile_memory=True)
        dg.empty_cache()
        clean = profiled(lambda: step(True), steps=2, profile_memory=True)
        dg.empty_cache()
    finally:
        dg._C._set_release_fraction(fraction)
    assert "fragmentation" in fired(problem) and "fragmentation" not in fired(clean)
