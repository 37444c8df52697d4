"""Rebindable hyper-parameters (issue 31, part 4; docs/ops.md "What makes a Task traceable"): the fused AdamW Task
reads lr and {betas, eps, weight_decay} from tensors when it runs, written when a parameter group's key is assigned.
A Task recorded once and re-run (as a JIT replays it) follows a scheduler and the user's changes; a 0-d tensor lr
works as in torch; state dicts keep torch's plain values."""
import numpy as np
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
