"""Rebindable hyper-parameters (issue 31, part 4; docs/ops.md "What makes a Task traceable"): the fused AdamW Task
reads lr and {betas, eps, weight_decay} from tensors when it runs, the SGD Task lr and {momentum, dampening,
weight_decay}, written when a parameter group's key is assigned.
A Task recorded once and re-run (as a JIT replays it) follows a scheduler and the user's changes; a 0-d tensor lr
works as in torch; state dicts keep torch's plain values."""
import numpy as np
import pytest
import torch

import dygrad as dg

SHAPES = [(4, 3), (5,), (130, 300)]


def make_params(seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in SHAPES]  # float64: the comparison is then at float64's rounding
    return ([dg.nn.Parameter(dg.tensor(a.copy())) for a in arrays],
            [torch.nn.Parameter(torch.tensor(a.copy())) for a in arrays])


def set_grads(d_params, t_params, seed):
    rng = np.random.default_rng(seed)
    for d, t in zip(d_params, t_params):
        g = rng.standard_normal(tuple(t.shape))
        d.grad, t.grad = dg.tensor(g.copy()), torch.tensor(g.copy())


def assert_same(d_params, t_params, what):
    for i, (d, t) in enumerate(zip(d_params, t_params)):
        np.testing.assert_allclose(d.detach().numpy(), t.detach().numpy(), rtol=1e-12, atol=1e-14,
                                   err_msg=f"{what}, param {i}")


def test_a_recorded_adamw_task_rerun_follows_the_scheduler():
    d_params, t_params = make_params()
    d_opt = dg.optim.AdamW(d_params, lr=0.05, betas=(0.9, 0.95), weight_decay=0.1)
    t_opt = torch.optim.AdamW(t_params, lr=0.05, betas=(0.9, 0.95), weight_decay=0.1)
    d_sched = dg.optim.lr_scheduler.StepLR(d_opt, step_size=2, gamma=0.5)
    t_sched = torch.optim.lr_scheduler.StepLR(t_opt, step_size=2, gamma=0.5)
    set_grads(d_params, t_params, seed=1)  # the same gradients every step: the recorded Task keeps its tensors
    with dg._C._OpRecorder(keep=True) as rec:
        d_opt.step()
    adamw = [i for i, (name, *_) in enumerate(rec.ops) if name == "adamw_step"]
    assert len(adamw) == 1, rec.ops
    t_opt.step()
    assert_same(d_params, t_params, "the recorded step")
    for run in range(10):
        d_sched.step()
        t_sched.step()
        if run == 4:  # the user changes the group too
            d_opt.param_groups[0]["weight_decay"] = t_opt.param_groups[0]["weight_decay"] = 0.02
            d_opt.param_groups[0]["betas"] = t_opt.param_groups[0]["betas"] = (0.8, 0.9)
        rec.replay(adamw[0])  # no Python step: only the Task, reading the group's tensors
        t_opt.step()
        assert_same(d_params, t_params, f"re-run {run} (lr {t_opt.param_groups[0]['lr']})")
        for d, t in zip(d_params, t_params):
            assert d_opt.state[d]["step"].item() == t_opt.state[t]["step"].item() == run + 2


def test_a_tensor_lr_matches_torch():
    d_params, t_params = make_params(seed=2)
    d_opt = dg.optim.Adam(d_params, lr=dg.tensor(0.01), weight_decay=0.01)
    t_opt = torch.optim.Adam(t_params, lr=torch.tensor(0.01), weight_decay=0.01)
    d_sched = dg.optim.lr_scheduler.StepLR(d_opt, step_size=1, gamma=0.7)
    t_sched = torch.optim.lr_scheduler.StepLR(t_opt, step_size=1, gamma=0.7)
    lr = d_opt.param_groups[0]["lr"]
    for step in range(6):
        set_grads(d_params, t_params, seed=10 + step)
        d_opt.step()
        t_opt.step()
        assert_same(d_params, t_params, f"step {step}")
        d_sched.step()
        t_sched.step()
    group = d_opt.param_groups[0]
    assert group["lr"] is lr and isinstance(lr, dg.Tensor)  # filled in place by the scheduler, as torch's
    assert lr.item() == np.float32(t_opt.param_groups[0]["lr"].item())


def test_state_dicts_keep_plain_values_and_resume():
    d_params, t_params = make_params(seed=3)
    d_opt = dg.optim.AdamW(d_params, lr=0.02)
    t_opt = torch.optim.AdamW(t_params, lr=0.02)
    set_grads(d_params, t_params, seed=4)
    d_opt.step()
    t_opt.step()
    d_opt.param_groups[0]["lr"] = t_opt.param_groups[0]["lr"] = 0.005
    sd = d_opt.state_dict()
    group = sd["param_groups"][0]
    assert type(group) is dict and group["lr"] == 0.005
    assert set(group) == set(t_opt.state_dict()["param_groups"][0])
    # A fresh optimizer loading it steps as the original would (its tensors are made from the loaded values).
    fresh = dg.optim.AdamW(d_params, lr=1.0)
    fresh.load_state_dict(sd)
    set_grads(d_params, t_params, seed=5)
    fresh.step()
    t_opt.step()
    assert_same(d_params, t_params, "after load_state_dict")


# --- SGD: one sgd_step Task per group --------------------------------------------------------------------------------
SGD_CASES = {
    "plain": dict(lr=0.1),
    "weight decay": dict(lr=0.1, weight_decay=0.05),
    "momentum dampening": dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01),
    "nesterov": dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.02),
    "maximize": dict(lr=0.05, momentum=0.7, dampening=0.1, weight_decay=0.01, maximize=True),
}
DTYPES = {"float32": (dg.float32, torch.float32), "bfloat16": (dg.bfloat16, torch.bfloat16)}


def make_typed(dtype, seed):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    d_dtype, t_dtype = DTYPES[dtype]
    return ([dg.nn.Parameter(dg.tensor(a.copy()).to(d_dtype)) for a in arrays],
            [torch.nn.Parameter(torch.tensor(a.copy()).to(t_dtype)) for a in arrays])


def as_float(x):
    return (x.detach().float().numpy() if isinstance(x, torch.Tensor) else x.detach().to(dg.float32).numpy())


def assert_one_step_close(pairs, dtype, what):
    """dygrad's values are torch's op for op: after one step from the same values, equal, or (where one side contracts
    a multiply-add into an fma, as torch's AVX2 and AVX-512 add kernels do and dygrad's never do) a few units in the
    last place apart, the unit taken at the values' magnitude (about 1 here). bfloat16 rounds every op to 8 bits, so
    a float32-level difference changes a result only next to a rounding boundary: nearly every element is torch's
    bit for bit (a wrong cast of a scalar or a missed rounding makes tens of percent differ). That holds against
    torch's vectorised kernels (AVX2, AVX-512: the level `make test-levels` runs it at); its scalar kernel
    (ATEN_CPU_CAPABILITY=default) rounds `alpha * g` to bfloat16 before an add, so there only the bound is checked."""
    differ = total = 0
    for i, (d, t) in enumerate(pairs):
        d, t = as_float(d), as_float(t)
        eps = float(np.finfo(np.float32).eps) if dtype == "float32" else 2.0 ** -7
        assert (np.abs(d - t) <= 2 * eps * np.maximum(np.abs(t), 1.0)).all(), \
            f"{what} tensor {i}: max difference {np.abs(d - t).max()}"
        differ, total = differ + int((d != t).sum()), total + d.size
    if dtype == "bfloat16" and torch.backends.cpu.get_cpu_capability() != "DEFAULT":
        assert differ <= 0.001 * total, f"{what}: {differ} of {total} elements differ from torch's"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(SGD_CASES))
def test_sgd_matches_torch_over_steps(case, dtype):
    """Six steps with fresh gradients, the params and momentum buffers against torch.optim.SGD's (single-tensor path,
    torch's CPU default) after each; each step starts from torch's values, copied into dygrad's tensors in place (so
    each comparison is of one step's rounding). The first param gets no gradient at the first step: skipped, its
    buffer made at its own first step, later than the others'."""
    d_params, t_params = make_typed(dtype, seed=20)
    d_opt, t_opt = dg.optim.SGD(d_params, **SGD_CASES[case]), torch.optim.SGD(t_params, **SGD_CASES[case])
    d_dtype, t_dtype = DTYPES[dtype]
    rng = np.random.default_rng(21)
    for step in range(6):
        for i, (d, t) in enumerate(zip(d_params, t_params)):
            g = rng.standard_normal(tuple(t.shape)).astype(np.float32)
            none = step == 0 and i == 0
            d.grad = None if none else dg.tensor(g.copy()).to(d_dtype)
            t.grad = None if none else torch.tensor(g.copy()).to(t_dtype)
        d_opt.step()
        t_opt.step()
        pairs = list(zip(d_params, t_params))
        for i, (d, t) in enumerate(zip(d_params, t_params)):
            assert set(d_opt.state[d]) == set(t_opt.state[t]), (step, i)
            if "momentum_buffer" in t_opt.state[t]:
                assert d_opt.state[d]["momentum_buffer"].dtype == d_dtype
                pairs.append((d_opt.state[d]["momentum_buffer"], t_opt.state[t]["momentum_buffer"]))
        assert_one_step_close(pairs, dtype, f"{case} step {step}")
        with dg.no_grad():
            for d, t in pairs:
                d.copy_(dg.tensor(t.detach().float().numpy()).to(d_dtype))  # exact: torch's values in its dtype
    with dg._C._OpRecorder() as rec:
        d_opt.step()
    assert [name for name, *_ in rec.ops if name == "sgd_step"] == ["sgd_step"], rec.ops  # one Task for the group


SGD_REBIND = {
    "momentum dampening": (dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.1),
                           dict(momentum=0.5, dampening=0.4, weight_decay=0.02)),
    "nesterov maximize": (dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1, maximize=True),
                          dict(momentum=0.6, weight_decay=0.0)),
    "plain": (dict(lr=0.05, weight_decay=0.1), dict(weight_decay=0.3)),
}


@pytest.mark.parametrize("case", list(SGD_REBIND))
def test_a_recorded_sgd_task_rerun_follows_the_scheduler(case):
    """The first step's Task, recorded once, re-run 10 times with scheduler.step() between the runs (and the user's
    change of momentum, dampening and weight decay at run 4) equals torch's steps: lr and the other values are read
    from the group's tensors, and the buffers' initialized flags make the recorded first step (buf = d_p) a momentum
    step when it runs again."""
    options, change = SGD_REBIND[case]
    d_params, t_params = make_params(seed=6)
    d_opt, t_opt = dg.optim.SGD(d_params, **options), torch.optim.SGD(t_params, **options)
    d_sched = dg.optim.lr_scheduler.StepLR(d_opt, step_size=2, gamma=0.5)
    t_sched = torch.optim.lr_scheduler.StepLR(t_opt, step_size=2, gamma=0.5)
    set_grads(d_params, t_params, seed=7)  # the same gradients every step: the recorded Task keeps its tensors
    with dg._C._OpRecorder(keep=True) as rec:
        d_opt.step()
    sgd = [i for i, (name, *_) in enumerate(rec.ops) if name == "sgd_step"]
    assert len(sgd) == 1, rec.ops
    t_opt.step()
    assert_same(d_params, t_params, "the recorded step")
    for run in range(10):
        d_sched.step()
        t_sched.step()
        if run == 4:
            for key, value in change.items():
                d_opt.param_groups[0][key] = t_opt.param_groups[0][key] = value
        rec.replay(sgd[0])  # no Python step: only the Task, reading the group's tensors
        t_opt.step()
        assert_same(d_params, t_params, f"re-run {run} (lr {t_opt.param_groups[0]['lr']})")
        if options.get("momentum"):
            assert_same([d_opt.state[p]["momentum_buffer"] for p in d_params],
                        [t_opt.state[p]["momentum_buffer"] for p in t_params], f"re-run {run} buffers")


@pytest.mark.parametrize("shape", [(), (1,)])
def test_sgd_tensor_lr_matches_torch(shape):
    """A float32 Tensor lr (0-d, or of one element as torch accepts) is read where it is, and rounds as torch's
    Scalar alpha from it; StepLR fills it in place."""
    d_params, t_params = make_params(seed=8)
    lr = np.full(shape, 0.01, np.float32)
    d_opt = dg.optim.SGD(d_params, lr=dg.tensor(lr), momentum=0.9, dampening=0.1, weight_decay=0.01)
    t_opt = torch.optim.SGD(t_params, lr=torch.tensor(lr), momentum=0.9, dampening=0.1, weight_decay=0.01)
    d_sched = dg.optim.lr_scheduler.StepLR(d_opt, step_size=1, gamma=0.7)
    t_sched = torch.optim.lr_scheduler.StepLR(t_opt, step_size=1, gamma=0.7)
    for step in range(6):
        set_grads(d_params, t_params, seed=30 + step)
        d_opt.step()
        t_opt.step()
        assert_same(d_params, t_params, f"step {step}")
        d_sched.step()
        t_sched.step()
    assert isinstance(d_opt.param_groups[0]["lr"], dg.Tensor)
    assert d_opt.param_groups[0]["lr"].item() == t_opt.param_groups[0]["lr"].item()


def to_torch(obj):
    if isinstance(obj, dg.Tensor):
        return torch.tensor(obj.numpy().copy())
    if isinstance(obj, dict):
        return {k: to_torch(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_torch(v) for v in obj]
    return obj


def to_dygrad(obj):
    if isinstance(obj, torch.Tensor):
        return dg.tensor(obj.numpy().copy())
    if isinstance(obj, dict):
        return {k: to_dygrad(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_dygrad(v) for v in obj]
    return obj


def test_sgd_state_dicts_round_trip_with_torchs():
    """dygrad's state dict is torch's (momentum_buffer per param, the group's plain values) and loads into torch; torch's
    loads into dygrad; a loaded buffer continues with the momentum update (it has had its first step)."""
    options = dict(lr=0.05, momentum=0.9, dampening=0.25, weight_decay=0.01)
    d_params, t_params = make_params(seed=9)
    d_opt, t_opt = dg.optim.SGD(d_params, **options), torch.optim.SGD(t_params, **options)
    set_grads(d_params, t_params, seed=10)
    d_opt.step()
    t_opt.step()
    d_opt.param_groups[0]["lr"] = t_opt.param_groups[0]["lr"] = 0.02
    d_sd, t_sd = d_opt.state_dict(), t_opt.state_dict()
    assert d_sd["param_groups"] == t_sd["param_groups"]
    assert set(d_sd["state"]) == set(t_sd["state"]) and all(set(s) == {"momentum_buffer"} for s in d_sd["state"].values())
    # dygrad's into torch, torch's into dygrad: each steps as the other did
    d_copies = [dg.nn.Parameter(p.detach().clone()) for p in d_params]
    t_copies = [torch.nn.Parameter(p.detach().clone()) for p in t_params]
    t_from_d = torch.optim.SGD(t_copies, lr=1.0)
    t_from_d.load_state_dict(to_torch(d_sd))
    d_from_t = dg.optim.SGD(d_copies, lr=1.0)
    d_from_t.load_state_dict(to_dygrad(t_sd))
    for step in range(3):
        set_grads(d_params, t_params, seed=11 + step)
        set_grads(d_copies, t_copies, seed=11 + step)
        for opt in (d_opt, t_opt, t_from_d, d_from_t):
            opt.step()
        assert_same(d_params, t_params, f"step {step}")
        assert_same(d_copies, t_params, f"dygrad from torch's state dict, step {step}")
        assert_same(d_params, t_copies, f"torch from dygrad's state dict, step {step}")
