"""Issue 12 item 1: dygrad.optim.lr_scheduler against torch.optim.lr_scheduler 2.13: the same learning rates
(and OneCycleLR's momenta) step by step, per param group, chained, resumed from a state dict, and the same
warnings and errors."""
import math
import warnings

import pytest
import torch

import dygrad as dg


def optimizers(name="SGD", **options):
    """A dygrad and a torch optimizer over two param groups with different learning rates."""
    d = [dg.nn.Parameter(dg.zeros(2)), dg.nn.Parameter(dg.zeros(3))]
    t = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    options = dict(dict(lr=0.1, momentum=0.9) if name == "SGD" else dict(lr=0.1), **options)
    groups = lambda ps: [dict(params=ps[:1]), dict(params=ps[1:], lr=0.02)]  # noqa: E731
    return getattr(dg.optim, name)(groups(d), **options), getattr(torch.optim, name)(groups(t), **options)


def warmup_cosine(step):
    return (step + 1) / 4 if step < 4 else 0.1 + 0.45 * (1 + math.cos(math.pi * (step - 4) / 16))


SCHEDULES = {
    "LambdaLR": lambda m, o: m.LambdaLR(o, warmup_cosine),
    "LambdaLR-per-group": lambda m, o: m.LambdaLR(o, [warmup_cosine, lambda s: 0.95 ** s]),
    "StepLR": lambda m, o: m.StepLR(o, step_size=3, gamma=0.5),
    "LinearLR": lambda m, o: m.LinearLR(o, start_factor=0.25, total_iters=6),
    "LinearLR-decay": lambda m, o: m.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=10),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=7, eta_min=1e-3),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, max_lr=[0.5, 0.1], total_steps=25),
    "OneCycleLR-linear-3phase": lambda m, o: m.OneCycleLR(o, max_lr=0.3, epochs=5, steps_per_epoch=5,
                                                          anneal_strategy="linear", three_phase=True),
    "SequentialLR": lambda m, o: m.SequentialLR(o, [m.LinearLR(o, start_factor=0.1, total_iters=4),
                                                    m.CosineAnnealingLR(o, T_max=16)], milestones=[4]),
}


def trajectory(scheduler, optimizer, steps):
    out = []
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        out.append((scheduler.get_last_lr(), [g.get("momentum", g.get("betas")) for g in optimizer.param_groups]))
    return out


@pytest.mark.parametrize("optimizer", ["SGD", "AdamW"])
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_matches_torch(name, optimizer):
    d_opt, t_opt = optimizers(optimizer)
    d_sched = SCHEDULES[name](dg.optim.lr_scheduler, d_opt)
    t_sched = SCHEDULES[name](torch.optim.lr_scheduler, t_opt)
    assert d_sched.get_last_lr() == pytest.approx(t_sched.get_last_lr(), rel=1e-15)
    for (d_lr, d_mom), (t_lr, t_mom) in zip(trajectory(d_sched, d_opt, 24), trajectory(t_sched, t_opt, 24)):
        assert d_lr == pytest.approx(t_lr, rel=1e-12, abs=1e-15)
        assert d_mom == t_mom or d_mom == pytest.approx(t_mom, rel=1e-12)
        assert [g["lr"] for g in d_opt.param_groups] == pytest.approx([g["lr"] for g in t_opt.param_groups])


@pytest.mark.parametrize("name", ["StepLR", "CosineAnnealingLR", "LinearLR", "SequentialLR", "LambdaLR"])
def test_state_dict_resumes_the_schedule(name):
    d_opt, t_opt = optimizers()
    d_sched = SCHEDULES[name](dg.optim.lr_scheduler, d_opt)
    t_sched = SCHEDULES[name](torch.optim.lr_scheduler, t_opt)
    trajectory(d_sched, d_opt, 5), trajectory(t_sched, t_opt, 5)
    d_state, t_state = d_sched.state_dict(), t_sched.state_dict()
    assert set(d_state) == set(t_state) - {"_get_lr_called_within_step", "_is_initial"} or set(d_state) == set(t_state)
    for key in ("last_epoch", "base_lrs", "_last_lr", "_step_count"):
        if key in t_state:
            assert d_state[key] == pytest.approx(t_state[key]), key
    # resume into fresh objects as a training script does (build both, then load both), from torch's state
    d_opt2, _ = optimizers()
    d_sched2 = SCHEDULES[name](dg.optim.lr_scheduler, d_opt2)
    d_opt2.load_state_dict({"state": {}, "param_groups": t_opt.state_dict()["param_groups"]})
    d_sched2.load_state_dict(t_state)
    for (d_lr, _), (t_lr, _) in zip(trajectory(d_sched2, d_opt2, 8), trajectory(t_sched, t_opt, 8)):
        assert d_lr == pytest.approx(t_lr, rel=1e-12)


def test_closed_form_with_an_epoch_matches_torch():
    d_opt, t_opt = optimizers()
    d_sched = dg.optim.lr_scheduler.StepLR(d_opt, step_size=2, gamma=0.3)
    t_sched = torch.optim.lr_scheduler.StepLR(t_opt, step_size=2, gamma=0.3)
    for epoch in (5, 2, 9):
        with pytest.warns(UserWarning, match="epoch parameter"):
            d_sched.step(epoch)
        with pytest.warns(UserWarning, match="epoch parameter"):
            t_sched.step(epoch)
        assert d_sched.get_last_lr() == pytest.approx(t_sched.get_last_lr())


def test_warns_when_the_scheduler_steps_before_the_optimizer_as_torch():
    for module, (opt, _) in ((dg.optim.lr_scheduler, optimizers()), (torch.optim.lr_scheduler, optimizers()[::-1])):
        sched = module.StepLR(opt, step_size=1)
        with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
            sched.step()
    d_opt, _ = optimizers()
    sched = dg.optim.lr_scheduler.StepLR(d_opt, step_size=1)
    d_opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()


@pytest.mark.parametrize("build,error", [
    (lambda m, o: m.LinearLR(o, start_factor=0.0), ValueError),
    (lambda m, o: m.LinearLR(o, end_factor=1.5), ValueError),
    (lambda m, o: m.LambdaLR(o, [lambda s: 1.0]), ValueError),
    (lambda m, o: m.OneCycleLR(o, max_lr=0.1), ValueError),
    (lambda m, o: m.OneCycleLR(o, max_lr=0.1, total_steps=10, pct_start=1), ValueError),
    (lambda m, o: m.OneCycleLR(o, max_lr=0.1, total_steps=10, anneal_strategy="exp"), ValueError),
    (lambda m, o: m.SequentialLR(o, [m.StepLR(o, 2)], milestones=[3]), ValueError),
    (lambda m, o: m.StepLR(o, 2, last_epoch=3), KeyError),
    (lambda m, o: m.StepLR(object(), 2), TypeError),
])
def test_errors_match_torch(build, error):
    d_opt, t_opt = optimizers()
    with pytest.raises(error) as t_err:
        build(torch.optim.lr_scheduler, t_opt)
    with pytest.raises(error) as d_err:
        build(dg.optim.lr_scheduler, d_opt)
    assert str(d_err.value).split(".")[0] == str(t_err.value).split(".")[0]


def test_one_cycle_raises_past_total_steps_as_torch():
    for module, opt in zip((dg.optim.lr_scheduler, torch.optim.lr_scheduler), optimizers()):
        sched = module.OneCycleLR(opt, max_lr=0.1, total_steps=3)
        for _ in range(3):
            opt.step()
            sched.step()
        with pytest.raises(ValueError, match="Tried to step 4 times"):
            sched.step()
