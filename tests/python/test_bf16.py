"""bfloat16 kernels against torch 2.13 and float64: the GEMM (oneDNN bf16 x bf16 -> float32 on AVX512-BF16, the
converted path elsewhere) in every layout, forward and backward; the fused kernels (attention, rms_norm, rotary,
SwiGLU, cross-entropy) reading and writing bf16; elementwise ops and reductions; no extra copy Tasks in a bf16
training step; AdamW's float32 master weights and dygrad.amp.use_main_grad."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import dygrad as dg
import dygrad.nn.functional as F

rng = np.random.default_rng(1717)


def both(shape, requires_grad=False, scale=1.0):
    a = (rng.standard_normal(shape) * scale).astype(np.float32)
    d, t = dg.tensor(a).bfloat16(), torch.tensor(a).bfloat16()
    if requires_grad:
        d.requires_grad_(True)
        t.requires_grad_(True)
    return d, t


def np32(x):
    return x.detach().float().numpy()


def check(d, t, rtol=1.6e-2, atol=1e-2):
    assert str(d.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], (d.dtype, t.dtype)
    assert tuple(d.shape) == tuple(t.shape)
    np.testing.assert_allclose(np32(d), np32(t), rtol=rtol, atol=atol)


def close_to_rounded_exact(out, exact, k):
    """out is the float64 product rounded once to bf16 (fp32 accumulation): within one bf16 ulp plus the float32
    accumulation error of a k-term sum."""
    e = np.abs(exact)
    tol = e * 2.0 ** -8 + k * 2.0 ** -23 * np.abs(exact).max() + 1e-30
    assert np.all(np.abs(np32(out) - exact) <= tol), np.abs(np32(out) - exact).max()


def test_bf16_gemm_library_reported():
    flags = open("/proc/cpuinfo").read()
    expected = "onednn" if " avx512_bf16" in flags and dg._C._sgemm_library() == "onednn" else "convert"
    assert dg._C._bf16_gemm_library() == expected


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_layouts_rounded_once(ta, tb):
    (a, at), (b, bt) = both((70, 130)), both((130, 90))
    if ta:
        a, at = dg.tensor(np32(a).T.copy()).bfloat16().t(), at.t().contiguous().t()
    if tb:
        b, bt = dg.tensor(np32(b).T.copy()).bfloat16().t(), bt.t().contiguous().t()
    out = a @ b
    assert out.dtype == dg.bfloat16
    close_to_rounded_exact(out, np32(a).astype(np.float64) @ np32(b).astype(np.float64), 130)
    check(out, at @ bt)


def test_matmul_large_tiles_and_batch_broadcast():
    # tiles of several blocks of rows (the native path's 256-row blocks), a broadcast batch, a folded batch
    (a, at), (b, bt) = both((2, 600, 96)), both((96, 300))
    out = a @ b
    close_to_rounded_exact(out, np32(a).astype(np.float64) @ np32(b).astype(np.float64), 96)
    check(out, at @ bt)
    (x, xt), (y, yt) = both((3, 1, 40, 24)), both((5, 24, 33))
    check(x @ y, xt @ yt)
    check(dg.bmm(x[:, 0], y[:3]), torch.bmm(xt[:, 0], yt[:3]))


def test_non_blas_layout_falls_back():
    (a, at), (b, bt) = both((40, 2, 64)), both((64, 3, 30))
    out = a[:, 0, :] @ b[:, 1, :]  # a row stride of 128, b's of 90: readable; then a gathered one
    check(out, at[:, 0, :] @ bt[:, 1, :])
    sel = a[::2, 0, ::2]  # column stride 2: neither row- nor column-major
    out = sel @ b[::2, 0, :]
    check(out, at[::2, 0, ::2] @ bt[::2, 0, :])


def test_addmm_baddbmm_linear_bf16():
    (i, it), (a, at), (b, bt) = both((50,)), both((20, 64)), both((64, 50))
    check(dg.addmm(i, a, b, beta=0.5, alpha=2.0), torch.addmm(it, at, bt, beta=0.5, alpha=2.0))
    check(dg.addmm(i, a, b, beta=0.0), torch.addmm(it, at, bt, beta=0.0))
    (x, xt), (w, wt), (bias, biast) = both((3, 7, 64)), both((40, 64)), both((40,))
    check(F.linear(x, w, bias), TF.linear(xt, wt, biast))
    (bi, bit), (b1, b1t), (b2, b2t) = both((4, 8, 9)), both((4, 8, 16)), both((4, 16, 9))
    check(dg.baddbmm(bi, b1, b2, beta=0.25), torch.baddbmm(bit, b1t, b2t, beta=0.25))


def test_linear_backward_bf16():
    (x, xt), (w, wt) = both((2, 300, 64), True), both((96, 64), True)
    g = rng.standard_normal((2, 300, 96)).astype(np.float32)
    F.linear(x, w).backward(dg.tensor(g).bfloat16())
    TF.linear(xt, wt).backward(torch.tensor(g).bfloat16())
    assert x.grad.dtype == dg.bfloat16 and w.grad.dtype == dg.bfloat16
    check(x.grad, xt.grad)
    check(w.grad, wt.grad, 2e-2, 5e-2)  # a 600-term sum


def _grads_close(pairs, rtol=3e-2, atol=3e-2):
    for d, t in pairs:
        assert d.grad.dtype == dg.bfloat16
        check(d.grad, t.grad, rtol, atol)


def test_sdpa_bf16_forward_backward():
    (q, qt), (k, kt), (v, vt) = both((2, 3, 70, 16), True), both((2, 3, 70, 16), True), both((2, 3, 70, 16), True)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = TF.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    check(out, ref)
    # float32 softmax statistics: against the float64 attention of the same bf16 inputs, within bf16 rounding
    q64, k64, v64 = (torch.tensor(np32(t)).double() for t in (q, k, v))
    exact = TF.scaled_dot_product_attention(q64, k64, v64, is_causal=True).numpy()
    assert np.abs(np32(out) - exact).max() <= 2 ** -7 * max(1.0, np.abs(exact).max())
    g = rng.standard_normal(tuple(ref.shape)).astype(np.float32)
    out.backward(dg.tensor(g).bfloat16())
    ref.backward(torch.tensor(g).bfloat16())
    _grads_close([(q, qt), (k, kt), (v, vt)], 5e-2, 5e-2)


def test_rms_norm_rope_swiglu_bf16():
    (x, xt), (w, wt) = both((4, 10, 32), True), both((32,), True)
    out = F.rms_norm(x, (32,), w, 1e-6)
    ref = TF.rms_norm(xt, (32,), wt, 1e-6)
    check(out, ref)
    g = rng.standard_normal((4, 10, 32)).astype(np.float32)
    out.backward(dg.tensor(g).bfloat16())
    ref.backward(torch.tensor(g).bfloat16())
    _grads_close([(x, xt)])
    check(w.grad, wt.grad, 5e-2, 1e-1)  # a 40-term sum in bf16 in torch

    (gate, gatet), (up, upt) = both((6, 40), True), both((6, 40), True)
    out = F.swiglu(gate, up)
    ref = TF.silu(gatet) * upt
    check(out, ref)
    out.sum().backward()
    ref.sum().backward()
    _grads_close([(gate, gatet), (up, upt)])

    T, D = 12, 8
    (r, rt) = both((2, 3, T, D), True)
    pos = np.arange(T)[:, None] / (10000.0 ** (np.arange(0, D, 2) / D))[None, :]
    cos, sin = np.cos(pos).astype(np.float32), np.sin(pos).astype(np.float32)
    out = F.rotary_position_embedding(r, dg.tensor(cos).bfloat16(), dg.tensor(sin).bfloat16(), "interleaved")
    xr = rt.float().view(2, 3, T, D // 2, 2)
    c, s = torch.tensor(cos).bfloat16().float(), torch.tensor(sin).bfloat16().float()
    ref = torch.stack([xr[..., 0] * c - xr[..., 1] * s, xr[..., 0] * s + xr[..., 1] * c], -1).view(2, 3, T, D)
    assert out.dtype == dg.bfloat16
    np.testing.assert_allclose(np32(out), ref.detach().bfloat16().float().numpy(), rtol=1.6e-2, atol=1e-2)
    out.float().sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(np32(r.grad), rt.grad.float().numpy(), rtol=1.6e-2, atol=1e-2)


def test_cross_entropy_bf16():
    (x, xt) = both((16, 50), True, scale=3.0)
    target = rng.integers(0, 50, size=16)
    out = F.cross_entropy(x, dg.tensor(target))
    ref = TF.cross_entropy(xt, torch.tensor(target))
    check(out, ref)
    # the float32 reduction: within bf16 rounding of the float64 loss of the same logits
    exact = TF.cross_entropy(torch.tensor(np32(x)).double(), torch.tensor(target)).item()
    assert abs(out.float().item() - exact) <= 2 ** -8 * abs(exact) + 1e-6
    out.backward()
    ref.backward()
    _grads_close([(x, xt)], 2e-2, 2e-3)


ELEMENTWISE = [
    ("add", lambda m, a, b: a + b), ("mul", lambda m, a, b: a * b), ("div", lambda m, a, b: a / b),
    ("exp", lambda m, a, b: a.exp()), ("tanh", lambda m, a, b: a.tanh()), ("sigmoid", lambda m, a, b: a.sigmoid()),
    ("silu", lambda m, a, b: m.nn.functional.silu(a)), ("gelu", lambda m, a, b: m.nn.functional.gelu(a)),
    ("rsqrt", lambda m, a, b: (a * a + 1).rsqrt()), ("where", lambda m, a, b: m.where(a > 0, a, b)),
    ("sum", lambda m, a, b: a.sum(-1)), ("mean", lambda m, a, b: a.mean()), ("amax", lambda m, a, b: a.amax(0)),
    ("logsumexp", lambda m, a, b: a.logsumexp(-1)), ("softmax", lambda m, a, b: m.softmax(a, -1)),
    ("log_softmax", lambda m, a, b: m.nn.functional.log_softmax(a, -1)), ("var", lambda m, a, b: a.var(-1)),
    ("cumsum", lambda m, a, b: a.cumsum(-1)),
]


@pytest.mark.parametrize("case", ELEMENTWISE, ids=[c[0] for c in ELEMENTWISE])
def test_elementwise_and_reductions_bf16(case):
    _, fn = case
    (a, at), (b, bt) = both((8, 33), True), both((8, 33))
    out, ref = fn(dg, a, b), fn(torch, at, bt)
    check(out, ref, 1.6e-2, 2e-2)
    out.float().sum().backward()
    ref.float().sum().backward()
    check(a.grad, at.grad, 2e-2, 2e-2)


def _copy_tasks(model, steps=1):
    idx = dg.randint(0, model.cfg.vocab_size, (2, 32))
    with dg.profiler.profile() as prof:
        for _ in range(steps):
            loss = model(idx, idx)
            loss.backward()
        dg.synchronize()
    return sum(e.count for e in prof.key_averages() if e.key == "copy")


def test_bf16_step_makes_no_more_copy_tasks_than_fp32():
    from dygrad.models.llama import CONFIGS, Llama
    import dataclasses
    cfg = dataclasses.replace(CONFIGS["tiny"], n_layers=2, dim=64, n_heads=2, ffn_dim=96, seq_len=32)
    dg.manual_seed(0)
    model = Llama(cfg)
    fp32 = _copy_tasks(model)
    model.zero_grad()
    model.to(dg.bfloat16)
    bf16 = _copy_tasks(model)
    assert bf16 <= fp32, (bf16, fp32)


def _torch_adamw_reference(p0, grads, lr, wd):
    t = torch.tensor(p0, requires_grad=True)
    opt = torch.optim.AdamW([t], lr=lr, weight_decay=wd)
    for g in grads:
        t.grad = torch.tensor(g)
        opt.step()
    return t.detach().numpy(), opt.state[t]


@pytest.mark.parametrize("use_main_grad", [False, True])
def test_adamw_master_weights(use_main_grad):
    lin = dg.nn.Linear(16, 8)
    lin.to(dg.bfloat16)
    master0 = np32(lin.weight)
    opt = dg.optim.AdamW([{"params": lin.parameters(), "master_weights": True}], lr=1e-2, weight_decay=0.1)
    if use_main_grad:
        dg.amp.use_main_grad(lin)
    grads = []
    for _ in range(3):
        opt.zero_grad()
        x = dg.randn(4, 16).bfloat16()
        lin(x).float().pow(2).sum().backward()
        g = lin.weight.main_grad if use_main_grad else lin.weight.grad
        assert g.dtype == (dg.float32 if use_main_grad else dg.bfloat16)
        if use_main_grad:
            assert lin.weight.grad is None
        grads.append(np32(g).copy())
        opt.step()
    state = opt.state[lin.weight]
    master = state["master_param"]
    assert master.dtype == dg.float32 and state["exp_avg"].dtype == dg.float32
    assert state["exp_avg_sq"].dtype == dg.float32 and lin.weight.dtype == dg.bfloat16
    ref, ref_state = _torch_adamw_reference(master0, grads, 1e-2, 0.1)
    np.testing.assert_allclose(master.numpy(), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state["exp_avg"].numpy(), ref_state["exp_avg"].numpy(), rtol=1e-5, atol=1e-7)
    # the bf16 weight is the master rounded once
    np.testing.assert_array_equal(np32(lin.weight), torch.tensor(master.numpy()).bfloat16().float().numpy())
    assert float(state["step"].item()) == 3.0


def test_master_weights_small_updates_are_not_lost():
    # an update below half a bf16 ulp of the weight: a pure-bf16 AdamW loses it, the master keeps it
    p = dg.nn.Parameter(dg.full((64,), 1.0).bfloat16())
    opt = dg.optim.AdamW([{"params": [p], "master_weights": True}], lr=1e-4, weight_decay=0.0)
    for _ in range(50):
        p.grad = dg.full((64,), 1.0).bfloat16()
        opt.step()
    master = opt.state[p]["master_param"]
    np.testing.assert_allclose(master.numpy(), 1.0 - 50 * 1e-4, rtol=1e-4)
    assert np32(p)[0] == torch.tensor(1.0 - 50 * 1e-4).bfloat16().item()


def test_main_grad_accumulates_micro_batches_in_fp32():
    lin = dg.nn.Linear(8, 4, bias=False)
    lin.to(dg.bfloat16)
    dg.amp.use_main_grad(lin)
    xs = [dg.randn(3, 8).bfloat16() for _ in range(4)]
    expected = np.zeros((4, 8))
    for x in xs:
        out = lin(x)
        out.float().sum().backward()
        expected += np.ones((3, 4)).T @ np32(x).astype(np.float64)
    assert lin.weight.grad is None and lin.weight.main_grad.dtype == dg.float32
    np.testing.assert_allclose(lin.weight.main_grad.numpy(), expected, rtol=1e-2, atol=2e-2)
    opt = dg.optim.AdamW([{"params": lin.parameters(), "master_weights": True}])
    opt.zero_grad()
    assert float(lin.weight.main_grad.abs().sum().item()) == 0.0


def test_adamw_step_master_errors():
    m = dg.zeros(4)
    low = dg.zeros(4).bfloat16()
    s = dg.tensor(0.0)
    with pytest.raises(TypeError, match="must be float32 or the model param's"):
        dg._C.adamw_step([m], [dg.zeros(4).half()], [dg.zeros(4)], [dg.zeros(4)], [s], model_params=[low])
    with pytest.raises(TypeError, match="master param 0 must be float32"):
        dg._C.adamw_step([m.bfloat16()], [low], [low], [low], [s], model_params=[low])
    with pytest.raises(ValueError, match="one model param per master"):
        dg._C.adamw_step([m], [m], [dg.zeros(4)], [dg.zeros(4)], [s], model_params=[low, low])


def test_train_cli_bf16_pure_resumes_bitwise(tmp_path):
    import json
    import os

    from dygrad import train
    small = ["--config", "tiny", "--seq-len", "32", "--batch-size", "2", "--lr", "3e-3", "--warmup", "1",
             "--eval-interval", "3", "--eval-batches", "1", "--sample-tokens", "0", "--quiet", "--dtype", "bf16-pure"]

    def losses(out):
        with open(os.path.join(out, "metrics.jsonl")) as fh:
            return {r["step"]: r["loss"] for r in map(json.loads, fh)}
    full, split = str(tmp_path / "full"), str(tmp_path / "split")
    train.main(small + ["--steps", "4", "--out", full])
    train.main(small + ["--steps", "4", "--out", split, "--save-interval", "1", "--halt-after", "2"])
    train.main(small + ["--steps", "4", "--out", split, "--resume"])
    assert losses(split) == losses(full)  # the float32 masters travel in the checkpoint


def fake_peaks(monkeypatch, fp32=1.0e11, bf16=2.5e11):
    """Calibrated peaks of both dtypes put in the profiler's cache (no 2048^3 GEMMs), distinct so a test can tell
    which one a figure used."""
    from dygrad.profiler import metrics
    threads = dg.get_context().num_threads
    monkeypatch.setitem(metrics._peak_cache, (str(dg.float32), threads, metrics.CALIBRATION_N), fp32)
    monkeypatch.setitem(metrics._peak_cache, (str(dg.bfloat16), threads, metrics.CALIBRATION_N), bf16)
    return {"float32": fp32, "bfloat16": bf16}


def test_bf16_gemm_peak_is_calibrated_on_its_own():
    from dygrad.profiler import metrics
    bf16 = metrics.measure_peak_flops(dg.bfloat16, n=256, repeats=2)
    fp32 = metrics.measure_peak_flops(dg.float32, n=256, repeats=2)
    threads = dg.get_context().num_threads
    assert bf16 > 1e8 and fp32 > 1e8  # a 256^3 product in well under 0.3 s
    assert metrics._peak_cache[(str(dg.bfloat16), threads, 256)] == bf16  # one figure per dtype
    assert metrics._peak_cache[(str(dg.float32), threads, 256)] == fp32
    # the calibration's source names the dtype and the CPU with its bf16 features
    metrics._peak_cache[(str(dg.bfloat16), threads, metrics.CALIBRATION_N)] = bf16
    try:
        value, source = metrics.peak_flops(dg.bfloat16)
    finally:
        del metrics._peak_cache[(str(dg.bfloat16), threads, metrics.CALIBRATION_N)]
    cpu = metrics.cpu_features()
    assert value == bf16 and "bfloat16 GEMM" in source and cpu["model"] in source
    assert f"avx512_bf16 {'yes' if cpu['avx512_bf16'] else 'no'}" in source and "amx " in source


def test_summary_mfu_against_the_peak_of_the_run_dtype(monkeypatch):
    # A run that computed under CPU autocast is a bf16 run: its MFU is against the bf16 GEMM peak; a float32 run's
    # against the float32 peak (no dtype passed: the profiler saw the autocast regions).
    from dygrad.models import llama
    from dygrad.profiler.summary import build_summary
    peaks = fake_peaks(monkeypatch)
    cfg = llama.CONFIGS["tiny"]
    x, w = dg.randn(8, 64), dg.randn(64, 64, requires_grad=True)
    for name, enabled in (("bfloat16", True), ("float32", False)):
        with dg.profiler.profile() as prof:
            with dg.autocast("cpu", enabled=enabled):
                y = dg.nn.functional.linear(x, w)
            dg.synchronize()
        assert y.dtype == (dg.bfloat16 if enabled else dg.float32)
        assert prof.result.context["autocast_dtypes"] == (["bfloat16"] if enabled else [])
        summary = build_summary(prof.result, model_config=cfg, batch_size=2, seq_len=16, advice=False)
        flops = summary["flops"]
        assert flops["dtype"] == name and flops["peak_flops_per_s"] == peaks[name]
        step_s = summary["steps"]["step_time_s"]["mean"]
        assert flops["mfu"] == pytest.approx(flops["model_per_step"] / step_s / peaks[name])
        assert flops["cpu"] == dg.profiler.metrics.cpu_features()
    # an explicit dtype still wins over what the profiler saw
    assert build_summary(prof.result, dtype=dg.bfloat16, advice=False)["flops"]["peak_flops_per_s"] == peaks["bfloat16"]


def test_train_cli_autocast_tracks_fp32(tmp_path, monkeypatch, capsys):
    import json
    import os

    from dygrad import train
    from dygrad.models import llama
    from dygrad.profiler import metrics
    peaks = fake_peaks(monkeypatch)
    small = ["--config", "tiny", "--seq-len", "32", "--batch-size", "2", "--lr", "3e-3", "--warmup", "1",
             "--eval-interval", "100", "--sample-tokens", "0", "--quiet", "--steps", "4"]
    runs, cpu = {}, metrics.cpu_description()
    from dataclasses import replace
    flops_per_token = replace(llama.CONFIGS["tiny"], seq_len=32).flops_per_token()
    for dtype, peak_dtype in (("fp32", "float32"), ("bf16", "bfloat16")):
        out = str(tmp_path / dtype)
        train.main(small + ["--out", out, "--dtype", dtype])
        with open(os.path.join(out, "metrics.jsonl")) as fh:
            records = list(map(json.loads, fh))
        runs[dtype] = [r["loss"] for r in records]
        for r in records:  # MFU against the measured GEMM peak of the dtype the GEMMs ran in, the CPU beside it
            assert r["peak_dtype"] == peak_dtype and r["peak_flops_per_s"] == peaks[peak_dtype] and r["cpu"] == cpu
            assert r["mfu"] == pytest.approx(r["tokens_per_s"] * flops_per_token / peaks[peak_dtype])
        log = capsys.readouterr().out
        assert f"measured {peak_dtype} GEMM peak {peaks[peak_dtype] / 1e9:.1f} GFLOP/s" in log and f"CPU {cpu}" in log
        assert f"of the measured {peak_dtype} GEMM peak" in log
    assert np.allclose(runs["bf16"], runs["fp32"], rtol=0.02), runs


def test_advisor_bf16_rule(monkeypatch):
    from dygrad.profiler import advisor, metrics
    from dygrad.profiler.summary import build_summary
    import sys
    import os
    sys.path.insert(0, os.path.dirname(__file__))
    from profiler_fakes import FakeResult, ops_from_names

    def advice(dtype, cpu, names):
        monkeypatch.setattr(metrics, "cpu_features", lambda: cpu)
        summary = build_summary(FakeResult(ops=ops_from_names(names, length=90_000)), peak=1e11, dtype=dtype)
        return {a["rule"]: a for a in summary["advice"]}

    epyc = {"model": "AMD EPYC", "avx512_bf16": True, "amx": []}
    old = {"model": "old Xeon", "avx512_bf16": False, "amx": []}
    gemm_heavy = ["matmul"] * 8 + ["add"] * 2
    found = advice(dg.float32, epyc, gemm_heavy)["bf16"]
    assert "autocast" in found["fix"] and "avx512_bf16 yes" in found["evidence"]
    assert found["numbers"]["gemm_share_of_step"] > advisor.BF16_GEMM_SHARE
    assert "bf16" not in advice(dg.float32, old, gemm_heavy)  # no bf16 instructions: nothing to recommend
    assert "bf16" not in advice(dg.float32, epyc, ["add"] * 10)  # no GEMMs: no gain
    assert "bf16" not in advice(dg.bfloat16, epyc, gemm_heavy)  # already bf16 where it is fast
    warned = advice(dg.bfloat16, old, gemm_heavy)["bf16"]
    assert "float32" in warned["fix"] and "neither AVX512-BF16 nor AMX" in warned["evidence"]


def test_matmul_rounding_keeps_nan_inf_and_overflow_like_torch():
    a = np.ones((300, 64), np.float32)
    a[0, 0], a[1, 0], a[2, :] = np.nan, np.inf, 1e37
    b = np.ones((64, 40), np.float32)
    b[:, 1] = -1.0
    out = dg.tensor(a).bfloat16() @ dg.tensor(b).bfloat16()
    ref = torch.tensor(a).bfloat16() @ torch.tensor(b).bfloat16()
    np.testing.assert_array_equal(np32(out), ref.float().numpy())  # nan, inf, 64 * 1e37 overflowing to inf
