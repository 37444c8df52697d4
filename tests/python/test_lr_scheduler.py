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
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lambda s: 0.9 if s % 2 else 0.97),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[3, 7, 7, 15], gamma=0.5),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.4, total_iters=5),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.9),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=12, power=2.0),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2, eta_min=1e-3),
    "CosineAnnealingWarmRestarts-T_mult-1": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=5),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler([m.ConstantLR(o, factor=0.5, total_iters=3),
                                                         m.ExponentialLR(o, gamma=0.9)]),
    "CyclicLR": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.05], step_size_up=4, step_size_down=3),
    "CyclicLR-triangular2": lambda m, o: m.CyclicLR(o, base_lr=[0.01, 0.002], max_lr=0.1, step_size_up=3,
                                                    mode="triangular2", base_momentum=0.85, max_momentum=0.95),
    "CyclicLR-exp_range": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=5, mode="exp_range",
                                                  gamma=0.9, cycle_momentum=False),
    "SequentialLR-warmup-multistep": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.1, total_iters=3), m.MultiStepLR(o, milestones=[5, 9])], milestones=[3]),
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


@pytest.mark.parametrize("name", ["StepLR", "CosineAnnealingLR", "LinearLR", "SequentialLR", "LambdaLR",
                                  "MultiStepLR", "ExponentialLR", "PolynomialLR", "CosineAnnealingWarmRestarts",
                                  "ChainedScheduler", "MultiplicativeLR", "CyclicLR"])
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


CLOSED_FORMS = {
    "StepLR": lambda m, o: m.StepLR(o, step_size=2, gamma=0.3),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[2, 6, 6], gamma=0.5),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.25, total_iters=4),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.8),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=7, power=0.5),
}


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_closed_form_with_an_epoch_matches_torch(name):
    d_opt, t_opt = optimizers()
    d_sched = CLOSED_FORMS[name](dg.optim.lr_scheduler, d_opt)
    t_sched = CLOSED_FORMS[name](torch.optim.lr_scheduler, t_opt)
    for epoch in (5, 2, 9, 0, 3):
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


@pytest.mark.parametrize("epochs", [[0, 3, 9, 4, 20, 2.5], [1, 13, 27, 6]])
def test_warm_restarts_at_given_epochs_match_torch(epochs):
    """CosineAnnealingWarmRestarts.step(epoch), fractional epochs included (its documented per-batch use)."""
    d_opt, t_opt = optimizers()
    d = dg.optim.lr_scheduler.CosineAnnealingWarmRestarts(d_opt, T_0=3, T_mult=2, eta_min=0.01)
    t = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(t_opt, T_0=3, T_mult=2, eta_min=0.01)
    for e in epochs:
        d.step(e), t.step(e)
        assert d.get_last_lr() == pytest.approx(t.get_last_lr(), rel=1e-12)
        assert (d.T_cur, d.T_i, d.last_epoch) == pytest.approx((t.T_cur, t.T_i, t.last_epoch))


@pytest.mark.parametrize("options", [dict(), dict(mode="max", threshold_mode="abs", threshold=0.05),
                                     dict(patience=1, cooldown=2, factor=0.5, min_lr=[0.01, 0.015]),
                                     dict(patience=0, eps=0.05, min_lr=0.001)])
def test_reduce_lr_on_plateau_matches_torch(options):
    d_opt, t_opt = optimizers()
    d = dg.optim.lr_scheduler.ReduceLROnPlateau(d_opt, **options)
    t = torch.optim.lr_scheduler.ReduceLROnPlateau(t_opt, **options)
    metrics = [1.0, 0.9, 0.95, 0.95, 0.96, 0.97, 0.899, 0.9, 0.91, 0.92, 0.93, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1,
               1.2, 1.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
    for i, m in enumerate(metrics):
        d_opt.step(), t_opt.step()
        d.step(dg.tensor(m) if i % 3 == 0 else m), t.step(torch.tensor(m) if i % 3 == 0 else m)
        assert d.get_last_lr() == pytest.approx(t.get_last_lr(), rel=1e-15), i
        assert (d.num_bad_epochs, d.cooldown_counter, d.best) == (t.num_bad_epochs, t.cooldown_counter, t.best)
    d_state, t_state = d.state_dict(), t.state_dict()
    assert {k: v for k, v in d_state.items() if k != "_last_lr"} == \
        {k: v for k, v in t_state.items() if k in d_state and k != "_last_lr"}
    d2_opt, _ = optimizers()
    d2 = dg.optim.lr_scheduler.ReduceLROnPlateau(d2_opt)
    d2.load_state_dict(t_state)
    assert (d2.mode, d2.threshold, d2.patience, d2.best) == (t.mode, t.threshold, t.patience, t.best)


def test_new_schedules_refuse_what_torch_refuses():
    for make in (lambda m, o: m.ConstantLR(o, factor=1.5), lambda m, o: m.ReduceLROnPlateau(o, factor=1.0),
                 lambda m, o: m.ReduceLROnPlateau(o, mode="middle"),
                 lambda m, o: m.ReduceLROnPlateau(o, threshold_mode="log"),
                 lambda m, o: m.ReduceLROnPlateau(o, min_lr=[0.1]),
                 lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=0),
                 lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=0),
                 lambda m, o: m.ChainedScheduler([]),
                 lambda m, o: m.CyclicLR(o, base_lr=0.1, max_lr=1.0, mode="sawtooth"),
                 lambda m, o: m.CyclicLR(o, base_lr=[0.1], max_lr=1.0)):
        d_opt, t_opt = optimizers()
        with pytest.raises(ValueError) as theirs:
            make(torch.optim.lr_scheduler, t_opt)
        with pytest.raises(ValueError) as ours:
            make(dg.optim.lr_scheduler, d_opt)
        assert str(ours.value) == str(theirs.value)
    d_opt, t_opt = optimizers()
    d_other, _ = optimizers()
    with pytest.raises(ValueError, match="same optimizer"):
        dg.optim.lr_scheduler.ChainedScheduler([dg.optim.lr_scheduler.ExponentialLR(d_opt, 0.9),
                                                dg.optim.lr_scheduler.ExponentialLR(d_other, 0.9)])
