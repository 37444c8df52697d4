"""dg.autocast against torch.autocast on the CPU: each op of torch 2.13's CPU lists run under both, same output
dtype and values; nesting, enabled=False inside, the decorator, the state probes and the parameter cast cache."""
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import dygrad as dg
import dygrad.nn.functional as F

rng = np.random.default_rng(17)


def both(shape, dtype="float32", requires_grad=False):
    a = rng.standard_normal(shape).astype(np.float32)
    d, t = dg.tensor(a), torch.tensor(a)
    if dtype != "float32":
        d, t = d.to(getattr(dg, dtype)), t.to(getattr(torch, dtype))
    if requires_grad:
        d.requires_grad_(True)
        t.requires_grad_(True)
    return d, t


def name(dtype):
    return str(dtype).split(".")[-1]


def check(d, t, rtol=2e-2, atol=2e-2):
    assert name(d.dtype) == name(t.dtype), (d.dtype, t.dtype)
    assert tuple(d.shape) == tuple(t.shape)
    np.testing.assert_allclose(d.detach().float().numpy(), t.detach().float().numpy(), rtol=rtol, atol=atol)


def labels(n, c):
    a = rng.integers(0, c, size=n)
    return dg.tensor(a), torch.tensor(a)


# (case, fn(lib, F, args), input specs): every op run under dg.autocast and torch.autocast on the same inputs.
# specs: (shape, dtype). fp32 in: lower ops give bfloat16; bf16 in: fp32 ops give float32; the rest follow.
CASES = [
    ("linear", lambda m, f, x, w: f.linear(x, w), [((4, 8), "float32"), ((16, 8), "float32")]),
    ("linear_bias", lambda m, f, x, w, b: f.linear(x, w, b), [((4, 8), "float32"), ((16, 8), "float32"), ((16,), "float32")]),
    ("matmul", lambda m, f, x, w: m.matmul(x, w), [((2, 4, 8), "float32"), ((8, 5), "float32")]),
    ("matmul_op", lambda m, f, x, w: x @ w, [((4, 8), "float32"), ((8, 5), "bfloat16")]),
    ("mm", lambda m, f, x, w: m.mm(x, w), [((4, 8), "float32"), ((8, 5), "float32")]),
    ("bmm", lambda m, f, x, w: m.bmm(x, w), [((3, 4, 8), "float32"), ((3, 8, 5), "float32")]),
    ("addmm", lambda m, f, i, x, w: m.addmm(i, x, w), [((5,), "float32"), ((4, 8), "float32"), ((8, 5), "float32")]),
    ("baddbmm", lambda m, f, i, x, w: m.baddbmm(i, x, w, beta=0.5), [((3, 4, 5), "float32"), ((3, 4, 8), "float32"), ((3, 8, 5), "float32")]),
    ("addbmm", lambda m, f, i, x, w: m.addbmm(i, x, w), [((4, 5), "float32"), ((3, 4, 8), "float32"), ((3, 8, 5), "float32")]),
    ("einsum", lambda m, f, x, w: m.einsum("ij,kj->ik", x, w), [((4, 8), "float32"), ((5, 8), "float32")]),
    ("sdpa", lambda m, f, q, k, v: f.scaled_dot_product_attention(q, k, v, is_causal=True),
     [((1, 2, 6, 8), "float32")] * 3),
    ("outer_follows", lambda m, f, x, y: m.outer(x, y), [((4,), "float32"), ((5,), "float32")]),
    ("cross_entropy", lambda m, f, x: f.cross_entropy(x, (m.tensor([1, 2, 3, 0]))), [((4, 6), "bfloat16")]),
    ("cross_entropy_smooth", lambda m, f, x: f.cross_entropy(x, m.tensor([1, 2, 3, 0]), label_smoothing=0.1), [((4, 6), "bfloat16")]),
    ("nll_loss", lambda m, f, x: f.nll_loss(x, m.tensor([1, 2, 3, 0])), [((4, 6), "bfloat16")]),
    ("mse_loss", lambda m, f, x, y: f.mse_loss(x, y), [((4, 6), "bfloat16"), ((4, 6), "bfloat16")]),
    ("l1_loss", lambda m, f, x, y: f.l1_loss(x, y), [((4, 6), "bfloat16"), ((4, 6), "float32")]),
    ("bce_logits", lambda m, f, x, y: f.binary_cross_entropy_with_logits(x, y.sigmoid()), [((4, 6), "bfloat16"), ((4, 6), "bfloat16")]),
    ("cat_promotes", lambda m, f, x, y: m.cat([x, y]), [((2, 3), "float32"), ((2, 3), "bfloat16")]),
    ("stack_bf16", lambda m, f, x, y: m.stack([x, y]), [((2, 3), "bfloat16"), ((2, 3), "bfloat16")]),
    ("softmax_follows", lambda m, f, x: f.softmax(x, -1), [((4, 6), "bfloat16")]),
    ("softmax_fp32_follows", lambda m, f, x: f.softmax(x, -1), [((4, 6), "float32")]),
    ("rms_norm_follows", lambda m, f, x, w: f.rms_norm(x, (6,), w), [((4, 6), "bfloat16"), ((6,), "bfloat16")]),
    ("exp_follows", lambda m, f, x: x.exp(), [((4, 6), "bfloat16")]),
    ("sum_follows", lambda m, f, x: x.sum(), [((4, 6), "bfloat16")]),
    ("logsumexp_follows", lambda m, f, x: x.logsumexp(-1), [((4, 6), "bfloat16")]),
    ("add_promotes", lambda m, f, x, y: x + y, [((4, 6), "bfloat16"), ((4, 6), "float32")]),
    ("silu_follows", lambda m, f, x: f.silu(x), [((4, 6), "float32")]),
    ("embedding_follows", lambda m, f, w: f.embedding(m.tensor([1, 0, 2]), w), [((4, 6), "float32")]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_under_autocast_matches_torch(case):
    _, fn, specs = case
    pairs = [both(shape, dtype) for shape, dtype in specs]
    with dg.autocast("cpu"):
        out_d = fn(dg, F, *[p[0] for p in pairs])
    with torch.autocast("cpu"):
        out_t = fn(torch, TF, *[p[1] for p in pairs])
    check(out_d, out_t)


def test_float16_autocast_dtype():
    (x, xt), (w, wt) = both((4, 8)), both((16, 8))
    with dg.autocast("cpu", dtype=dg.float16):
        out = F.linear(x, w)
        assert dg.get_autocast_dtype("cpu") == dg.float16
    with torch.autocast("cpu", dtype=torch.float16):
        ref = TF.linear(xt, wt)
    check(out, ref, 1e-2, 1e-2)


def test_float64_is_never_cast():
    x = dg.randn(4, 8, dtype=dg.float64)
    with dg.autocast("cpu"):
        assert F.linear(x, x).dtype == dg.float64
        assert F.mse_loss(x, x).dtype == dg.float64


def test_backward_reaches_fp32_params_like_torch():
    (x, xt), (w, wt) = both((4, 8)), both((16, 8), requires_grad=True)
    (w2, w2t) = both((3, 16), requires_grad=True)
    target_d, target_t = labels(4, 3)
    with dg.autocast("cpu"):
        loss = F.cross_entropy(F.linear(F.silu(F.linear(x, w)), w2), target_d)
    with torch.autocast("cpu"):
        loss_t = TF.cross_entropy(TF.linear(TF.silu(TF.linear(xt, wt)), w2t), target_t)
    check(loss, loss_t)
    loss.backward()
    loss_t.backward()
    for p, pt in ((w, wt), (w2, w2t)):
        assert p.grad.dtype == dg.float32
        check(p.grad, pt.grad, 5e-2, 5e-2)


def test_state_nesting_and_enabled_false_inside():
    assert not dg.is_autocast_enabled("cpu")
    assert dg.get_autocast_dtype("cpu") == dg.bfloat16
    x = dg.randn(4, 8)
    with dg.autocast("cpu"):
        assert dg.is_autocast_enabled("cpu")
        with dg.autocast("cpu", enabled=False):
            assert not dg.is_autocast_enabled("cpu")
            assert (x @ x.t()).dtype == dg.float32
            with dg.autocast("cpu", dtype=dg.float16):
                assert (x @ x.t()).dtype == dg.float16
            assert (x @ x.t()).dtype == dg.float32
        assert (x @ x.t()).dtype == dg.bfloat16
    assert not dg.is_autocast_enabled("cpu") and (x @ x.t()).dtype == dg.float32
    assert dg.amp.autocast is dg.autocast


def test_state_restored_after_exception():
    with pytest.raises(KeyError):
        with dg.autocast("cpu"):
            raise KeyError("x")
    assert not dg.is_autocast_enabled("cpu")


def test_decorator():
    x = dg.randn(4, 8)

    @dg.autocast("cpu")
    def f(a):
        return a @ a.t(), dg.is_autocast_enabled("cpu")

    out, inside = f(x)
    assert out.dtype == dg.bfloat16 and inside and not dg.is_autocast_enabled("cpu")
    assert f.__name__ == "f"


def test_cpu_amp_autocast_is_deprecated_like_torch():
    with pytest.warns(FutureWarning, match="torch.cpu.amp.autocast"):
        ctx = dg.cpu.amp.autocast()
    with ctx:
        assert dg.is_autocast_enabled("cpu") and dg.get_autocast_dtype("cpu") == dg.bfloat16


def test_unsupported_dtype_and_device_disable_with_warning_as_torch():
    x = dg.randn(4, 8)
    with pytest.warns(UserWarning, match="target dtype is not supported"):
        ctx = dg.autocast("cpu", dtype=dg.float64)
    with ctx:
        assert not dg.is_autocast_enabled("cpu") and (x @ x.t()).dtype == dg.float32
    with pytest.warns(UserWarning, match="CUDA is not available"):
        with dg.autocast("cuda"):
            assert (x @ x.t()).dtype == dg.float32
    with pytest.raises(RuntimeError, match="device type at start of device string"):
        dg.autocast("xyz")
    with pytest.raises(RuntimeError, match="device type at start of device string"):
        torch.autocast("xyz")


def test_parameter_cast_once_per_region_and_cleared_on_exit():
    lin = dg.nn.Linear(8, 8)
    x = dg.randn(2, 8)
    with dg.autocast("cpu"):
        with dg.profiler.profile() as prof:
            for _ in range(3):
                lin(x)
        assert dg._C._autocast_cache_size() == 2  # weight and bias, each cast once
        with dg.autocast("cpu"):  # a nested region shares the cache
            lin(x)
            assert dg._C._autocast_cache_size() == 2
        assert dg._C._autocast_cache_size() == 2
    assert dg._C._autocast_cache_size() == 0
    casts = [e for e in prof.key_averages() if e.key in ("to", "copy", "_to_copy", "cast")]
    # 3 calls: weight and bias cast once each; the input too (the last non-parameter cast is kept)
    assert sum(e.count for e in casts) == 3, [(e.key, e.count) for e in prof.key_averages()]


def test_an_activation_read_twice_in_a_row_is_cast_once():
    w1, w3 = dg.nn.Linear(8, 16, bias=False), dg.nn.Linear(8, 16, bias=False)
    x = dg.randn(4, 8, requires_grad=True)
    with dg.autocast("cpu"):
        h = x * 2.0  # a float32 activation
        with dg.profiler.profile() as prof:
            a, b = w1(h), w3(h)
        copies = sum(e.count for e in prof.key_averages() if e.key == "copy")
        assert copies == 3  # h once, each weight once
        with dg.no_grad():
            h.add_(1.0)  # a new version: cast again
        c = w1(h)
    with torch.autocast("cpu"):
        xt = torch.tensor(x.detach().numpy(), requires_grad=True)
        ht = xt * 2.0
        wt1, wt3 = torch.tensor(w1.weight.detach().numpy()), torch.tensor(w3.weight.detach().numpy())
        at, bt = TF.linear(ht, wt1), TF.linear(ht, wt3)
        with torch.no_grad():
            ht.add_(1.0)
        ct = TF.linear(ht, wt1)
    check(a, at)
    check(b, bt)
    check(c, ct)
    (a.float().sum() + b.float().sum()).backward()
    (at.float().sum() + bt.float().sum()).backward()
    check(x.grad, xt.grad, 3e-2, 3e-2)


def test_cache_disabled_casts_every_call_and_inplace_update_recasts():
    lin = dg.nn.Linear(8, 8, bias=False)
    x = dg.randn(2, 8)
    with dg.autocast("cpu", cache_enabled=False):
        lin(x)
        assert dg._C._autocast_cache_size() == 0
    with dg.autocast("cpu"):
        a = lin(x)
        with dg.no_grad():
            lin.weight.mul_(2.0)
        b = lin(x)  # the cached cast is stale after the in-place update: cast again
        np.testing.assert_allclose(b.float().detach().numpy(), 2 * a.float().detach().numpy(), rtol=2e-2, atol=1e-2)


def test_no_grad_cast_does_not_serve_grad_calls():
    lin = dg.nn.Linear(8, 8, bias=False)
    x = dg.randn(2, 8)
    with dg.autocast("cpu"):
        with dg.no_grad():
            lin(x)
        out = lin(x)
        out.float().sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.dtype == dg.float32


def test_cached_casts_count_as_parameters_in_the_memory_breakdown():
    lin = dg.nn.Linear(64, 64, bias=False)
    x = dg.randn(2, 64)
    dg.synchronize()
    before = dg._C.memory_stats()["allocated_bytes.parameter"]
    with dg.autocast("cpu"):
        lin(x)
        dg.synchronize()
        inside = dg._C.memory_stats()["allocated_bytes.parameter"]
    dg.synchronize()
    assert inside - before == 64 * 64 * 2  # the bf16 copy of the weight, held by the cache
    assert dg._C.memory_stats()["allocated_bytes.parameter"] == before  # freed with the cache at exit
