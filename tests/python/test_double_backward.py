"""Double backward (create_graph=True) beyond the per-op sweep (test_conformance.py's gradgradcheck): torch's
gradcheck/gradgradcheck semantics, the ops that are not OpDefs (views, linear, norms, losses composed in C++),
the fused ops' composed second-derivative path against their unfused compositions and torch, a WGAN-GP
gradient-penalty step and a Hessian-vector product on LLaMA against torch in float64, and
autograd.functional (vjp, jvp, jacobian, hessian, vhp, hvp) against torch. See docs/autograd.md, "Double backward"."""
import importlib.util
import os

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import dygrad as dg
from dygrad.autograd.gradcheck import GradcheckError
from dygrad.models import llama

F64 = dict(dtype=dg.float64)


def both(values, requires_grad=True):
    """The same float64 values as a dygrad and a torch leaf."""
    values = np.asarray(values, dtype=np.float64)
    return (dg.tensor(values, **F64).requires_grad_(requires_grad),
            torch.tensor(values, dtype=torch.float64).requires_grad_(requires_grad))


def numpy_of(t):
    return t.detach().numpy(force=True) if isinstance(t, torch.Tensor) else np.array(t.detach().numpy(), copy=True)


def assert_same(got, want, rtol=1e-10, atol=1e-12, what=""):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), f"{what}: {got!r} vs {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, rtol, atol, f"{what}[{i}]")
        return
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)}, torch {tuple(want.shape)}"
    np.testing.assert_allclose(numpy_of(got), numpy_of(want), rtol=rtol, atol=atol, err_msg=what)


# --- gradcheck and gradgradcheck themselves ------------------------------------------------------------------------
class WrongSquare(dg.autograd.Function):
    """x^2 with a first derivative off by 1% (gradcheck must catch it)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x * 2.02


class FlatSquare(dg.autograd.Function):
    """x^2 whose backward is right but not differentiable in x (gradgradcheck must catch it)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.detach() * 2


def test_gradcheck_passes_and_raises_torchs_error():
    x = dg.randn(3, 4, **F64).requires_grad_()
    assert dg.autograd.gradcheck(lambda a: (a.exp() * a.sin(), a.sum()), (x,))
    assert dg.autograd.gradcheck(lambda a: a.exp(), x, fast_mode=True)
    with pytest.raises(GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0") as info:
        dg.autograd.gradcheck(WrongSquare.apply, (x,))
    assert isinstance(info.value, RuntimeError)  # as torch's GradcheckError
    assert info.value.numerical.shape == info.value.analytical.shape == (12, 12)
    np.testing.assert_allclose(numpy_of(info.value.analytical), numpy_of(info.value.numerical) * 1.01, rtol=1e-6,
                               atol=1e-9)
    assert dg.autograd.gradcheck(WrongSquare.apply, (x,), raise_exception=False) is False
    with pytest.raises(GradcheckError, match="fast mode"):
        dg.autograd.gradcheck(WrongSquare.apply, (x,), fast_mode=True)
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        dg.autograd.gradcheck(lambda a: a * 2, (x.detach(),))
    with pytest.raises(RuntimeError, match="stride 0"):
        dg.autograd.gradcheck(lambda a: a * 2, (dg.ones(1, **F64).requires_grad_().expand(3),))
    with pytest.raises(NotImplementedError, match="forward-mode"):
        dg.autograd.gradcheck(lambda a: a * 2, (x,), check_forward_ad=True)


def test_gradgradcheck_catches_a_backward_that_is_not_differentiable():
    x = dg.randn(3, 4, **F64).requires_grad_()
    assert dg.autograd.gradcheck(FlatSquare.apply, (x,))
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        dg.autograd.gradgradcheck(FlatSquare.apply, (x,))
    assert dg.autograd.gradgradcheck(lambda a: a * a, (x,))
    for fast in (False, True):
        assert dg.autograd.gradgradcheck(lambda a, b: (a * b.tanh()).sum(-1), (x, dg.randn(4, **F64).requires_grad_()),
                                         fast_mode=fast, gen_non_contig_grad_outputs=True)


def test_a_non_differentiable_output_is_checked_for_zero_numerical_gradient():
    x = dg.randn(5, **F64).requires_grad_()
    assert dg.autograd.gradcheck(lambda a: dg.argmax(a), (x,))  # an integer output: no differentiable output
    with pytest.raises(GradcheckError, match="Numerical gradient for function expected to be zero"):
        dg.autograd.gradcheck(lambda a: a.detach() * 2, (x,))


def test_create_graph_differentiates_through_the_given_grad_outputs():
    """grad(y, x, v, create_graph=True) depends on v: the engine records its copy of v (it took a detached one)."""
    (x, tx), (v, tv) = both([1.0, 2.0, 3.0]), both([0.5, -1.0, 2.0])
    (g,) = dg.autograd.grad(dg.add(x, x, alpha=2), x, v, create_graph=True)
    (tg,) = torch.autograd.grad(torch.add(tx, tx, alpha=2), tx, tv, create_graph=True)
    assert g.requires_grad
    assert_same(dg.autograd.grad(g.sum(), v), torch.autograd.grad(tg.sum(), tv))


def make_exp_function(lib):
    class Exp(lib.autograd.Function):
        """exp saving its output: the backward reads y, which must carry the history of x under create_graph."""

        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y
    return Exp


def test_a_function_that_saves_its_output_is_twice_differentiable():
    x, tx = both([0.5, -1.0, 2.0])
    assert dg.autograd.gradgradcheck(make_exp_function(dg).apply, (x,))
    assert_same(second_order(make_exp_function(dg).apply, x), second_order(make_exp_function(torch).apply, tx))


# --- ops that are not OpDefs (views, custom nodes, C++ compositions) -------------------------------------------------
NOT_OPDEFS = {
    "view_permute_expand": lambda m, x: x.reshape(4, 3).permute(1, 0).unsqueeze(0).expand(2, 3, 4).sin(),
    "slice_select": lambda m, x: (x[1:, ::2] * x[0, 1]).exp(),
    "split_chunk_unbind": lambda m, x: sum(p.pow(3).sum() for p in (*x.split(1, 0), *x.chunk(2, 1), *x.unbind(1))),
    "linear": lambda m, x: m.nn.functional.linear(x.tanh(), x[:2] * x[:2], x[0, :2]),
    "vector_norm": lambda m, x: (m.linalg.vector_norm(x, 2, dim=1), m.linalg.vector_norm(x, 3.0), x.norm(dim=0)),
    "layer_norm": lambda m, x: m.nn.functional.layer_norm(x, (4,), x[0], x[1]),
    "losses": lambda m, x: (m.nn.functional.mse_loss(x, m.full((3, 4), 0.7, dtype=x.dtype)) +
                            m.nn.functional.binary_cross_entropy_with_logits(x, m.full((3, 4), 0.2, dtype=x.dtype))),
    "cross_entropy_smoothed": lambda m, x: m.nn.functional.cross_entropy(
        x, m.tensor([0, 3, 1]), label_smoothing=0.2, weight=m.tensor([1.0, 2.0, 0.5, 1.5], dtype=x.dtype)),
    "einsum": lambda m, x: m.einsum("ij,kj->ik", x, x.exp()),
    "pad_repeat": lambda m, x: m.nn.functional.pad(x, (1, 2), mode="reflect").repeat(2, 1).pow(2),
    "mean_var": lambda m, x: (x.mean(1), x.var(0), (x * x).mean()),
}


@pytest.mark.parametrize("name", list(NOT_OPDEFS))
def test_double_backward_of_views_and_compositions(name):
    fn = NOT_OPDEFS[name]
    values = np.random.default_rng(3).uniform(0.3, 1.5, size=(3, 4))
    x, tx = both(values)
    assert dg.autograd.gradgradcheck(lambda a: fn(dg, a), (x,))
    second = second_order(lambda a: fn(dg, a), x)
    assert_same(second, second_order(lambda a: fn(torch, a), tx), rtol=1e-9, atol=1e-11, what=name)


def second_order(fn, x):
    """d/dx of <u, d<w, fn(x)>/dx> for fixed w and u: one double backward."""
    lib = torch if isinstance(x, torch.Tensor) else dg
    outs = [o for o in (fn(x) if isinstance(fn(x), tuple) else (fn(x),))]
    rng = np.random.default_rng(5)
    loss = sum((o * lib.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype)).sum() for o in outs)
    (g,) = lib.autograd.grad(loss, x, create_graph=True)
    (h,) = lib.autograd.grad((g * lib.tensor(rng.standard_normal(tuple(g.shape)), dtype=g.dtype)).sum(), x)
    return h


# --- fused ops: the composed second-derivative path -----------------------------------------------------------------
def fused_cases(m):
    F = m.nn.functional
    mask = m.tensor(np.random.default_rng(1).random((5, 6)) < 0.7)
    cases = {
        "rms_norm": (lambda x, w: F.rms_norm(x, (6,), w, 1e-5), ((3, 6), (6,))),
        "swiglu": (lambda a, b: F.silu(a) * b, ((3, 6), (3, 6))),
        "sdpa_causal_gqa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                            ((1, 2, 5, 4), (1, 1, 5, 4), (1, 1, 5, 4))),
        "sdpa_mask": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.4),
                      ((1, 2, 5, 4), (1, 2, 6, 4), (1, 2, 6, 3))),
        "cross_entropy_ignore": (lambda x: F.cross_entropy(x, m.tensor([[0, 2], [-100, 1]])), ((2, 3, 2),)),
        "embedding": (lambda w: F.embedding(m.tensor([[0, 2, 2], [3, 0, 1]]), w).pow(2), ((4, 3),)),
    }
    if m is dg:
        cases["swiglu"] = (lambda a, b: dg.swiglu(a, b), cases["swiglu"][1])
    return cases


@pytest.mark.parametrize("name", list(fused_cases(torch)))
def test_fused_ops_second_derivative_matches_torch(name):
    """The fused kernels keep their first backward; under create_graph the composed path gives the second derivative
    of torch's (math) composition, with respect to every input and to the grad_outputs."""
    fn, shapes = fused_cases(dg)[name]
    ref, _ = fused_cases(torch)[name]
    rng = np.random.default_rng(11)
    pairs = [both(rng.standard_normal(s)) for s in shapes]
    ours, theirs = [p[0] for p in pairs], [p[1] for p in pairs]
    assert dg.autograd.gradgradcheck(fn, ours)
    w = rng.standard_normal(tuple(fn(*ours).shape))
    wd, wt = both(w)
    gd = dg.autograd.grad(fn(*ours), ours, wd, create_graph=True)
    with sdpa_kernel(SDPBackend.MATH):
        gt = torch.autograd.grad(ref(*theirs), theirs, wt, create_graph=True)
    assert_same(gd, gt, what=f"{name} first derivative")
    u = [rng.standard_normal(tuple(g.shape)) for g in gd]
    hd = dg.autograd.grad(sum((g * dg.tensor(v, **F64)).sum() for g, v in zip(gd, u)), ours + [wd], allow_unused=True)
    with sdpa_kernel(SDPBackend.MATH):
        ht = torch.autograd.grad(sum((g * torch.tensor(v)).sum() for g, v in zip(gt, u)), theirs + [wt],
                                 allow_unused=True)
    for k, (a, b) in enumerate(zip(hd, ht)):
        if b is None:
            assert a is None or not numpy_of(a).any(), f"{name} input {k}"
        else:
            assert_same(a, b, rtol=1e-9, atol=1e-11, what=f"{name} second derivative {k}")


def test_fused_first_backward_stays_one_kernel_without_create_graph():
    """Without create_graph the backward runs the fused kernel (no composed ops); with it, the composition."""
    x, w = dg.randn(4, 8).requires_grad_(), dg.randn(8).requires_grad_()

    def ops(create_graph):
        y = dg.nn.functional.rms_norm(x, (8,), w)
        dg.synchronize()
        with dg.profiler.profile() as prof:
            dg.autograd.grad(y.sum(), (x, w), create_graph=create_graph)
            dg.synchronize()
        return {e.name for e in prof.result.ops}

    plain, composed = ops(False), ops(True)
    assert "rms_norm_backward" in plain and "rsqrt" not in plain
    assert "rms_norm_backward" not in composed and "rsqrt" in composed


# --- WGAN-GP -----------------------------------------------------------------------------------------------------------
def critic(m):
    nn = m.nn
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, 1))


def wgan_gp_step(m, model, real, fake, eps, lam=10.0):
    """One critic step of WGAN-GP: the Wasserstein loss plus lam * ((|grad_x D(x_hat)|_2 - 1)^2).mean()."""
    opt = m.optim.Adam(model.parameters(), lr=1e-2, betas=(0.5, 0.9))
    x_hat = (eps * real + (1 - eps) * fake).requires_grad_(True)
    score = model(x_hat)
    (grad,) = m.autograd.grad(score, x_hat, grad_outputs=m.ones_like(score), create_graph=True)
    penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
    loss = model(fake).mean() - model(real).mean() + lam * penalty
    opt.zero_grad()
    loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    opt.step()
    return loss.detach(), penalty.detach(), grads, [p.detach().clone() for p in model.parameters()]


def test_wgan_gp_step_matches_torch():
    torch.manual_seed(0)
    tm = critic(torch).double()
    dm = critic(dg).double()
    dm.load_state_dict({k: dg.tensor(v.detach().numpy(), **F64) for k, v in tm.state_dict().items()})
    rng = np.random.default_rng(0)
    real, fake, eps = rng.standard_normal((8, 4)) + 1.0, rng.standard_normal((8, 4)), rng.random((8, 1))
    d = wgan_gp_step(dg, dm, *(dg.tensor(a, **F64) for a in (real, fake, eps)))
    t = wgan_gp_step(torch, tm, *(torch.tensor(a) for a in (real, fake, eps)))
    assert float(numpy_of(t[1])) > 1e-3  # the penalty is active: its gradient flows through the double backward
    for what, got, want in zip(("loss", "penalty", "grads", "params after the step"), d, t):
        assert_same(got, want, rtol=1e-6, atol=1e-9, what=what)


# --- LLaMA Hessian-vector product ------------------------------------------------------------------------------------
REF = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "bench", "torch_ref.py")


def load_reference():
    spec = importlib.util.spec_from_file_location("torch_ref", REF)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hessian_vector_product(m, model, x, y, vectors):
    params = list(model.parameters())
    loss = model(x, y)
    grads = m.autograd.grad(loss, params, create_graph=True)
    hv = m.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vectors)), params)
    return loss.detach(), grads, hv


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_llama_hessian_vector_product_matches_torch(fused):
    """H v of the LLaMA loss (the tiny config's architecture at small sizes, float64) with the same weights as
    torch_ref.py's model, fused kernels on (their composed double backward) and off."""
    ref = load_reference()
    cfg = llama.LlamaConfig(n_layers=2, dim=32, n_heads=2, ffn_dim=48, vocab_size=64, seq_len=8, batch_size=2)
    torch.manual_seed(0)
    tm = ref.LLaMA(cfg.n_layers, cfg.dim, cfg.n_heads, cfg.ffn_dim, cfg.vocab_size, cfg.seq_len).double()
    tm.cos, tm.sin = tm.cos.double(), tm.sin.double()
    dm = llama.Llama(cfg, fused=fused).double()
    llama.load_reference_state_dict(dm, {k: v.detach().numpy() for k, v in tm.state_dict().items()})
    dm.rope_cos, dm.rope_sin = dg.tensor(tm.cos.numpy(), **F64), dg.tensor(tm.sin.numpy(), **F64)
    rng = np.random.default_rng(0)
    data = rng.integers(0, cfg.vocab_size, size=(cfg.batch_size, cfg.seq_len + 1))
    vectors = [rng.standard_normal(tuple(p.shape)) for p in tm.parameters()]
    d_loss, d_grads, d_hv = hessian_vector_product(dg, dm, dg.tensor(data[:, :-1]), dg.tensor(data[:, 1:]),
                                                   [dg.tensor(v, **F64) for v in vectors])
    with sdpa_kernel(SDPBackend.MATH):  # torch's CPU flash attention has no double backward
        t_loss, t_grads, t_hv = hessian_vector_product(torch, tm, torch.tensor(data[:, :-1]), torch.tensor(data[:, 1:]),
                                                       [torch.tensor(v) for v in vectors])
    assert_same(d_loss, t_loss, rtol=1e-9, what="loss")
    assert_same(d_grads, t_grads, rtol=1e-6, atol=1e-9, what="gradients")
    scale = max(float(np.abs(numpy_of(h)).max()) for h in t_hv)
    assert scale > 1e-3
    assert_same(d_hv, t_hv, rtol=1e-6, atol=1e-6 * scale, what="Hessian-vector product")


# --- autograd.functional --------------------------------------------------------------------------------------------
def scalar_fn(x, y):
    return (x.exp() * y.sin()).sum() + (x * x * y).sum()


def pair_fn(x, y):
    return x.exp() * y, (x * y * y).sum()


FUNCTIONAL = {
    "vjp": lambda F, lib, x, y, v: F.vjp(pair_fn, (x, y), (v, lib.tensor(1.5, dtype=v.dtype))),
    "vjp_scalar": lambda F, lib, x, y, v: F.vjp(lambda a: (a * a).sum(), x),
    "jvp": lambda F, lib, x, y, v: F.jvp(pair_fn, (x, y), (v, v * 2)),
    "jacobian": lambda F, lib, x, y, v: F.jacobian(pair_fn, (x, y)),
    "jacobian_single": lambda F, lib, x, y, v: F.jacobian(lambda a: a.tanh() * a[0], x),
    "jacobian_forward": lambda F, lib, x, y, v: F.jacobian(pair_fn, (x, y), vectorize=True, strategy="forward-mode"),
    "jacobian_vectorize": lambda F, lib, x, y, v: F.jacobian(pair_fn, (x, y), vectorize=True),
    "hessian": lambda F, lib, x, y, v: F.hessian(scalar_fn, (x, y)),
    "hessian_single": lambda F, lib, x, y, v: F.hessian(lambda a: (a ** 3).sum() * a[1], x),
    "vhp": lambda F, lib, x, y, v: F.vhp(scalar_fn, (x, y), (v, v)),
    "hvp": lambda F, lib, x, y, v: F.hvp(scalar_fn, (x, y), (v, -v)),
    "hvp_create_graph": lambda F, lib, x, y, v: F.hvp(lambda a: (a.sin() * a).sum(), x, v, create_graph=True),
}


@pytest.mark.parametrize("name", list(FUNCTIONAL))
def test_functional_matches_torch(name):
    rng = np.random.default_rng(2)
    (x, tx), (y, ty), (v, tv) = (both(rng.standard_normal(3), requires_grad=False) for _ in range(3))
    got = FUNCTIONAL[name](dg.autograd.functional, dg, x, y, v)
    want = FUNCTIONAL[name](torch.autograd.functional, torch, tx, ty, tv)
    assert_same(got, want, what=name)


def test_functional_create_graph_keeps_history_and_errors_match_torch():
    x = dg.randn(3, **F64).requires_grad_()
    _, (hv,) = dg.autograd.functional.hvp(lambda a: (a ** 3).sum(), (x,), (dg.ones(3, **F64),), create_graph=True)
    assert hv.requires_grad
    _, (hv,) = dg.autograd.functional.hvp(lambda a: (a ** 3).sum(), (x,), (dg.ones(3, **F64),))
    assert not hv.requires_grad
    F, TF, tx = dg.autograd.functional, torch.autograd.functional, torch.randn(3, dtype=torch.float64)
    for call in (lambda M, a: M.vjp(lambda t: t * 2, a), lambda M, a: M.jvp(lambda t: t * 2, a),
                 lambda M, a: M.hessian(lambda t: t * 2, a),
                 lambda M, a: M.hessian(lambda t: t.sum(), a, strict=True),
                 lambda M, a: M.vjp(lambda t: t * 2, a, a[:2]),
                 lambda M, a: M.jacobian(lambda t: t * 2, a, create_graph=True, strategy="forward-mode")):
        with pytest.raises((RuntimeError, NotImplementedError)) as ours:
            call(F, x.detach())
        with pytest.raises((RuntimeError, NotImplementedError)) as theirs:
            call(TF, tx)
        assert type(ours.value) is type(theirs.value)
        assert str(ours.value).split(":")[0] == str(theirs.value).split(":")[0]
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors"):
        F.vjp(lambda t: t, 3)
