"""Issue 12 item 1: Adam, AdamW and SGD against torch.optim 2.13: same updates over several steps with
per-group options, torch's per-parameter state (a 0-d float32 `step` counted inside the fused Task),
interchangeable state dicts, torch's signatures and argument errors."""
import inspect
import sys

import numpy as np
import pytest
import torch

import dygrad as dg

SHAPES = [(4, 3), (5,), (130, 300)]  # the last spans several pieces of the fused kernel


def make_params(dtype, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    return ([dg.nn.Parameter(dg.tensor(a.copy())) for a in arrays],
            [torch.nn.Parameter(torch.tensor(a.copy())) for a in arrays])


def groups_of(params, per_group):
    """Two groups: the first param alone with per-group options, the others with the defaults."""
    return [dict(params=params[:1], **per_group), dict(params=params[1:])]


def run_steps(d_opt, t_opt, d_params, t_params, steps, dtype, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        for d, t in zip(d_params, t_params):
            g = rng.standard_normal(tuple(t.shape)).astype(dtype)
            d.grad, t.grad = dg.tensor(g.copy()), torch.tensor(g.copy())
        d_opt.step()
        t_opt.step()


def assert_same(d_params, t_params, rtol):
    for d, t in zip(d_params, t_params):
        np.testing.assert_allclose(d.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=rtol * 1e-2)


CASES = [
    ("Adam", dict(lr=1e-2), dict(lr=3e-2, weight_decay=0.1, betas=(0.8, 0.95))),
    ("Adam", dict(lr=1e-2, weight_decay=0.05, eps=1e-6, maximize=True), dict(weight_decay=0.0)),
    ("Adam", dict(lr=1e-2, amsgrad=True, weight_decay=0.01), dict(lr=5e-3)),
    ("Adam", dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True), dict(lr=5e-3)),
    ("AdamW", dict(lr=1e-2), dict(weight_decay=0.0, lr=2e-2)),
    ("AdamW", dict(lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, foreach=False), dict(betas=(0.5, 0.9))),
    ("AdamW", dict(lr=1e-2, amsgrad=True, maximize=True), dict(weight_decay=0.3)),
    ("SGD", dict(lr=0.1), dict(lr=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9), dict(momentum=0.5, dampening=0.3)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2), dict(weight_decay=0.0, lr=0.05)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.1, weight_decay=1e-3, maximize=True), dict(lr=0.2)),
]


U_DOUBLE = np.longdouble(2.0) ** -53  # the unit roundoff of float64: Python's scalar arithmetic


def py(x):
    """A Python float, exact as given; arithmetic on it rounds as Python's does (to double)."""
    return Bounded(x, 0, U_DOUBLE)


class Bounded:
    """A value computed in long double (x86's 80-bit: 11 bits more than float64, so a float64 implementation can be
    bounded too) beside a bound on the rounding error an implementation in `dtype` accumulates
    computing it op by op (a running error bound, first order): each op's result carries its operands' errors
    through its derivative, plus half an ulp of itself (u |z|, u = 2^-24 for float32) for its own rounding. Fusing
    `a * b + c` into one fma drops a rounding, so the bound holds for contracted and uncontracted code alike."""

    def __init__(self, value, error, u):
        self.value, self.error, self.u = np.asarray(value, np.longdouble), np.asarray(error, np.longdouble), u

    @staticmethod
    def exact(value, dtype):
        """An operand held in `dtype` exactly (the state and gradients both sides start from)."""
        return Bounded(value, np.zeros(np.shape(value), np.longdouble), np.longdouble(np.finfo(dtype).eps) / 2)

    def _new(self, z, error):
        return Bounded(z, error + self.u * np.abs(z), self.u)

    def _lift(self, x):
        """A scalar operand (a Python float, or a Bounded one computed in double): rounded to the dtype once when
        the dtype is narrower (torch and dygrad cast scalars to the op's dtype)."""
        if not isinstance(x, Bounded):
            x = Bounded(x, 0, U_DOUBLE)
        if x.u >= self.u:
            return x
        return Bounded(x.value, x.error + self.u * np.abs(x.value), self.u)

    def __radd__(self, other):
        return self._lift(other) + self

    def __rsub__(self, other):
        return self._lift(other) - self

    def __rmul__(self, other):
        return self._lift(other) * self

    def __rtruediv__(self, other):
        return self._lift(other) / self

    def __pow__(self, n):
        """x ** n as Python computes it on a float: within an ulp (two roundings' worth) of the exact power."""
        z = self.value ** n
        return Bounded(z, np.abs(n * z / self.value) * self.error + 2 * self.u * np.abs(z), self.u)

    def __add__(self, other):
        o = self._lift(other)
        return self._new(self.value + o.value, self.error + o.error)

    def __sub__(self, other):
        o = self._lift(other)
        return self._new(self.value - o.value, self.error + o.error)

    def __mul__(self, other):
        o = self._lift(other)
        return self._new(self.value * o.value, np.abs(o.value) * self.error + np.abs(self.value) * o.error)

    def __truediv__(self, other):
        o = self._lift(other)
        z = self.value / o.value
        return self._new(z, (self.error + np.abs(z) * o.error) / np.abs(o.value))

    def __neg__(self):
        return Bounded(-self.value, self.error, self.u)

    def sqrt(self):
        z = np.sqrt(self.value)
        with np.errstate(divide="ignore", invalid="ignore"):
            spread = np.where(z > 0, self.error / (2 * z), np.sqrt(self.error))
        return self._new(z, spread)

    def maximum(self, other):
        return Bounded(np.maximum(self.value, other.value), np.maximum(self.error, other.error), self.u)


def reference_step(name, group, p, g, state, dtype):
    """One step of torch.optim's single-tensor algorithm, op for op as torch writes it (dygrad's kernels follow the
    same sequence), on Bounded values: float64 results and the rounding error a float32 implementation may have in
    each. Returns {"param": ..., state key: ...}."""
    p, g = Bounded.exact(p, dtype), Bounded.exact(g, dtype)
    state = {k: Bounded.exact(v, dtype) for k, v in state.items() if k != "step"}
    if group["maximize"]:
        g = -g
    lr, wd = group["lr"], group["weight_decay"]
    out = {}
    if name == "SGD":
        if wd != 0:
            g = g + p * wd  # grad.add(p, alpha=wd)
        if group["momentum"] != 0:
            buf = state.get("momentum_buffer")
            buf = g if buf is None else buf * group["momentum"] + g * (1 - py(group["dampening"]))
            out["momentum_buffer"] = buf
            g = g + buf * group["momentum"] if group["nesterov"] else buf
        out["param"] = p - g * lr  # p.add_(g, alpha=-lr)
        return out
    # the scalars are computed in double, as torch.optim computes them in Python, then cast to the dtype
    beta1, beta2, eps = py(group["betas"][0]), py(group["betas"][1]), group["eps"]
    step = float(state_step) + 1 if (state_step := group.get("_step")) is not None else 1.0
    if wd != 0:
        if group.get("decoupled_weight_decay", name == "AdamW"):
            p = p * (1 - py(lr) * wd)  # p.mul_(1 - lr wd)
        else:
            g = g + p * wd
    zeros = Bounded.exact(np.zeros_like(p.value), dtype)
    m, v = state.get("exp_avg", zeros), state.get("exp_avg_sq", zeros)
    out["exp_avg"] = m = m + (g - m) * (1 - beta1)  # lerp_(g, 1 - b1): either of torch's two formulas' bound
    out["exp_avg_sq"] = v = v * beta2 + g * (1 - beta2) * g  # mul_(b2).addcmul_(g, g, value=1 - b2)
    if group["amsgrad"]:
        out["max_exp_avg_sq"] = v = state.get("max_exp_avg_sq", zeros).maximum(v)
    denom = v.sqrt() / (1 - beta2 ** step).sqrt() + eps  # (v.sqrt() / bias_correction2_sqrt).add_(eps)
    out["param"] = p - m * (lr / (1 - beta1 ** step)) / denom  # p.addcdiv_(m, denom, value=-step_size)
    return out


def assert_within_bound(got, want, what):
    """got within want's error bound of want's value, per element."""
    got = np.asarray(got, np.longdouble)
    diff, tol = np.abs(got - want.value), want.error * (1 + 1e-6)
    bad = diff > tol
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, diff / np.maximum(tol, 1e-300), 0)), got.shape)
        raise AssertionError(f"{what}: {int(bad.sum())} of {got.size} elements outside their rounding-error bound; "
                             f"worst at {i}: {got[i]!r}, exact {want.value[i]!r}, bound {want.error[i]!r}")


def resync(d_opt, t_opt, d_params, t_params):
    """dygrad's params and state set to torch's: the next step starts from the same values on both sides."""
    with dg.no_grad():
        for d, t in zip(d_params, t_params):
            d.copy_(dg.tensor(t.detach().numpy().copy()))
    d_opt.load_state_dict(as_dygrad(t_opt.state_dict()))


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name,options,per_group", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_updates_match_torch_with_param_groups(name, options, per_group, dtype):
    """Five steps; each starts from the same params and state on both sides (torch's, copied into dygrad), and
    each side's results lie within their rounding-error bound of the float64 step (reference_step, per element):
    a tolerance derived from the computation, which holds whichever side contracts into fused multiply-adds (torch's
    AVX2 and AVX-512 kernels do, dygrad's x86-64-v2 baseline cannot), on any CPU, and does not grow with the
    steps. torch is held to the same bound: it checks the derivation."""
    d_params, t_params = make_params(dtype)
    d_opt = getattr(dg.optim, name)(groups_of(d_params, per_group), **options)
    t_opt = getattr(torch.optim, name)(groups_of(t_params, per_group), **options)
    group_of = {id(p): grp for grp in t_opt.param_groups for p in grp["params"]}
    rng = np.random.default_rng(1)
    for step in range(5):
        refs = []
        for d, t in zip(d_params, t_params):
            g = rng.standard_normal(tuple(t.shape)).astype(dtype)
            d.grad, t.grad = dg.tensor(g.copy()), torch.tensor(g.copy())
            state = {k: v.detach().numpy().astype(np.longdouble) for k, v in t_opt.state[t].items()}
            group = dict(group_of[id(t)], _step=t_opt.state[t]["step"].item() if "step" in t_opt.state[t] else None)
            refs.append(reference_step(name, group, t.detach().numpy().astype(np.longdouble), g.astype(np.longdouble),
                                       state, dtype))
        d_opt.step()
        t_opt.step()
        for i, (d, t, ref) in enumerate(zip(d_params, t_params, refs)):
            assert set(d_opt.state[d]) == set(t_opt.state[t]) == set(ref) - {"param"} | ({"step"} & set(t_opt.state[t]))
            values = {"param": (d.detach().numpy(), t.detach().numpy())}
            for key, tv in t_opt.state[t].items():
                dv = d_opt.state[d][key]
                assert str(dv.dtype).split(".")[-1] == str(tv.dtype).split(".")[-1], key
                if key == "step":
                    assert dv.item() == tv.item() == step + 1
                else:
                    values[key] = (dv.numpy(), tv.numpy())
            for key, (dv, tv) in values.items():
                assert_within_bound(tv, ref[key], f"torch: step {step} param {i} {key}")  # the bound is sound
                assert_within_bound(dv, ref[key], f"step {step} param {i} {key}")
        resync(d_opt, t_opt, d_params, t_params)


def test_adam_step_is_a_float32_tensor_counted_in_the_fused_task():
    d_params, t_params = make_params(np.float64)
    d_opt, t_opt = dg.optim.AdamW(d_params, lr=1e-3), torch.optim.AdamW(t_params, lr=1e-3)
    run_steps(d_opt, t_opt, d_params, t_params, 3, np.float64)
    for d, t in zip(d_params, t_params):
        step, t_step = d_opt.state[d]["step"], t_opt.state[t]["step"]
        assert isinstance(step, dg.Tensor) and step.dim() == 0 and step.dtype == dg.float32
        assert t_step.dtype == torch.float32 and step.item() == t_step.item() == 3.0
    # each param keeps its own count: a param that gets no gradient is not stepped
    d_params[0].grad = None
    for p in d_params[1:]:
        p.grad = dg.zeros_like(p)
    d_opt.step()
    assert [d_opt.state[p]["step"].item() for p in d_params] == [3.0, 4.0, 4.0]


def as_dygrad(obj):
    """A torch state dict with its tensors as dygrad tensors (what dygrad.load of torch's file returns)."""
    if isinstance(obj, torch.Tensor):
        return dg.tensor(obj.detach().numpy().copy())
    if isinstance(obj, dict):
        return {k: as_dygrad(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [as_dygrad(v) for v in obj]
    return obj


@pytest.mark.parametrize("name,options", [("AdamW", dict(lr=1e-2, weight_decay=0.1)), ("Adam", dict(lr=1e-2)),
                                          ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True))])
def test_state_dicts_have_torchs_layout_and_resume_from_torchs(name, options):
    d_params, t_params = make_params(np.float64)
    d_opt = getattr(dg.optim, name)(groups_of(d_params, dict(lr=2e-2)), **options)
    t_opt = getattr(torch.optim, name)(groups_of(t_params, dict(lr=2e-2)), **options)
    run_steps(d_opt, t_opt, d_params, t_params, 2, np.float64)
    d_sd, t_sd = d_opt.state_dict(), t_opt.state_dict()
    assert [sorted(g) for g in d_sd["param_groups"]] == [sorted(g) for g in t_sd["param_groups"]]
    assert d_sd["param_groups"] == t_sd["param_groups"]
    assert sorted(d_sd["state"]) == sorted(t_sd["state"])
    # a fresh dygrad optimizer resumes from torch's state dict and continues exactly as torch does
    resumed_params = [dg.nn.Parameter(dg.tensor(t.detach().numpy().copy())) for t in t_params]
    resumed = getattr(dg.optim, name)(groups_of(resumed_params, dict(lr=2e-2)), **options)
    resumed.load_state_dict(as_dygrad(t_sd))
    run_steps(resumed, t_opt, resumed_params, t_params, 3, np.float64, seed=7)
    assert_same(resumed_params, t_params, 1e-12)
    if "step" in t_sd["state"][0]:
        assert resumed.state[resumed_params[0]]["step"].item() == 5.0


def test_load_state_dict_errors_as_torch():
    d_params, _ = make_params(np.float64)
    opt = dg.optim.AdamW(d_params)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": []})
    sd = opt.state_dict()
    sd["param_groups"][0]["params"] = [0]
    with pytest.raises(ValueError, match="doesn't match the size"):
        opt.load_state_dict(sd)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"])
def test_signatures_are_torchs(name):
    ours = inspect.signature(getattr(dg.optim, name)).parameters
    theirs = inspect.signature(getattr(torch.optim, name)).parameters
    assert list(ours) == list(theirs)
    for key, parameter in theirs.items():
        assert ours[key].kind == parameter.kind, key
        assert ours[key].default == parameter.default, key
    if name in ("Adam", "AdamW", "SGD"):
        assert "fused" in ours and "foreach" in ours  # nanoGPT's probe for a fused AdamW


@pytest.mark.parametrize("name,bad", [("Adam", dict(lr=-1.0)), ("Adam", dict(eps=-1.0)), ("Adam", dict(betas=(1.0, 0.9))),
                                      ("Adam", dict(betas=(0.9, -0.1))), ("AdamW", dict(weight_decay=-1.0)),
                                      ("SGD", dict(lr=-0.1)), ("SGD", dict(momentum=-0.5)),
                                      ("SGD", dict(lr=0.1, nesterov=True)),
                                      ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)),
                                      ("RMSprop", dict(lr=-1.0)), ("RMSprop", dict(alpha=-0.1)),
                                      ("RMSprop", dict(momentum=-1)), ("RMSprop", dict(eps=-1.0)),
                                      ("Adagrad", dict(lr_decay=-1)), ("Adagrad", dict(initial_accumulator_value=-1)),
                                      ("Adagrad", dict(weight_decay=-1)), ("Adamax", dict(betas=(1.0, 0.9))),
                                      ("Adamax", dict(betas=(0.9, 1.5))), ("NAdam", dict(momentum_decay=-1)),
                                      ("NAdam", dict(eps=-1)), ("RAdam", dict(lr=-1)), ("RAdam", dict(weight_decay=-1))])
def test_argument_errors_match_torch(name, bad):
    with pytest.raises(ValueError) as t_err:
        getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(2))], **bad)
    with pytest.raises(ValueError) as d_err:
        getattr(dg.optim, name)([dg.nn.Parameter(dg.zeros(2))], **bad)
    assert str(d_err.value) == str(t_err.value)


def test_clip_grad_norm_matches_torch():
    d_params, t_params = make_params(np.float32)
    rng = np.random.default_rng(3)
    for d, t in zip(d_params, t_params):
        g = rng.standard_normal(tuple(t.shape)).astype(np.float32)
        d.grad, t.grad = dg.tensor(g.copy()), torch.tensor(g.copy())
    for norm_type, max_norm in ((2.0, 1.0), (float("inf"), 0.5), (1.0, 1e6)):
        t_norm = torch.nn.utils.clip_grad_norm_(t_params, max_norm, norm_type=norm_type)
        d_norm = dg.nn.utils.clip_grad_norm_(d_params, max_norm, norm_type=norm_type)
        assert d_norm.dim() == 0
        np.testing.assert_allclose(d_norm.item(), t_norm.item(), rtol=1e-5)
        for d, t in zip(d_params, t_params):
            np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)
    torch.nn.utils.clip_grad_value_(t_params, 0.01)
    dg.nn.utils.clip_grad_value_(d_params, 0.01)
    for d, t in zip(d_params, t_params):
        np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def _hook_trace(lib):
    """The calls of torch's step hooks (global and per optimizer, pre and post) around two steps of SGD and of a
    subclass whose step calls its base's, with a pre-hook that rewrites the arguments and a removed handle."""
    calls = []
    param = lib.nn.Parameter(lib.ones(2))

    class Nested(lib.optim.SGD):
        def step(self, closure=None):
            return super().step(closure)
    sgd, nested = lib.optim.SGD([param], lr=0.1), Nested([param], lr=0.1)
    glob = sys.modules[lib.optim.Optimizer.__module__]  # torch.optim.optimizer (torch.optim hides the name)
    handles = [glob.register_optimizer_step_pre_hook(lambda o, a, k: calls.append(("global pre", type(o).__name__))),
               glob.register_optimizer_step_post_hook(lambda o, a, k: calls.append(("global post", len(a), k)))]
    try:
        sgd.register_step_pre_hook(lambda o, a, k: calls.append(("pre", len(a), a[0] is o, k))
                                   or ((o,), {"closure": None}))
        sgd.register_step_post_hook(lambda o, a, k: calls.append(("post", len(a), k)))
        nested.register_step_post_hook(lambda o, a, k: calls.append(("nested post", len(a), k)))
        removed = sgd.register_step_post_hook(lambda o, a, k: calls.append("removed"))
        removed.remove()
        for opt in (sgd, nested):
            param.grad = lib.ones(2)
            opt.step(None)
    finally:
        for h in handles:
            h.remove()
    param.grad = lib.ones(2)
    sgd.step()  # the global hooks are gone
    bad = lib.optim.SGD([param], lr=0.1)
    bad.register_step_pre_hook(lambda o, a, k: "not a pair")
    with pytest.raises(RuntimeError) as err:
        bad.step()
    calls.append(str(err.value).split(" must ")[1])
    return calls


def test_step_hooks_run_as_torchs():
    """Global and per-optimizer step hooks in torch's order, args holding the optimizer, a pre-hook's (args, kwargs)
    used, both levels' hooks when a subclass's step calls its base's (the tuner's script trials record each step
    with global hooks)."""
    trace = _hook_trace(dg)
    assert trace == _hook_trace(torch)
    assert trace[:4] == [("global pre", "SGD"), ("pre", 2, True, {}), ("post", 1, {"closure": None}),
                         ("global post", 1, {"closure": None})]
