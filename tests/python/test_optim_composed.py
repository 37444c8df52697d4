"""RMSprop, Adagrad, Adamax, NAdam and RAdam (dygrad/optim/composed.py) against torch.optim 2.13: the same updates
and state over several steps with per-group options, torch's state layout and state dicts both ways (their
signatures and argument errors: test_optim.py's tests)."""
import numpy as np
import pytest
import torch

import dygrad as dg
from test_optim import as_dygrad, groups_of, make_params, run_steps  # the same parameters, groups and gradients

CASES = [
    ("RMSprop", dict(lr=1e-2), dict(lr=5e-3)),
    ("RMSprop", dict(lr=1e-2, momentum=0.9, centered=True, weight_decay=0.01), dict(alpha=0.9)),
    ("RMSprop", dict(lr=1e-3, maximize=True), dict(momentum=0.5)),
    ("Adagrad", dict(lr=0.1), dict(lr_decay=0.01)),
    ("Adagrad", dict(lr=0.05, weight_decay=0.1, initial_accumulator_value=0.1, eps=1e-6), dict(maximize=True)),
    ("Adamax", dict(lr=2e-3), dict(betas=(0.8, 0.99))),
    ("Adamax", dict(lr=1e-2, weight_decay=0.05), dict(eps=1e-3)),
    ("NAdam", dict(lr=2e-3), dict(momentum_decay=1e-2)),
    ("NAdam", dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True), dict(weight_decay=0.0)),
    ("NAdam", dict(lr=1e-2, weight_decay=0.1), dict(betas=(0.85, 0.95))),
    ("RAdam", dict(lr=1e-3), dict(betas=(0.9, 0.9))),  # beta2 0.9: rho_t passes 5 at step 6 (both branches)
    ("RAdam", dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True), dict(maximize=True)),
]


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-10), (np.float32, 2e-4)], ids=["float64", "float32"])
@pytest.mark.parametrize("name,options,per_group", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_updates_and_state_match_torch(name, options, per_group, dtype, rtol):
    d_params, t_params = make_params(dtype)
    d_opt = getattr(dg.optim, name)(groups_of(d_params, per_group), **options)
    t_opt = getattr(torch.optim, name)(groups_of(t_params, per_group), **options)
    for step in range(8):
        run_steps(d_opt, t_opt, d_params, t_params, 1, dtype, seed=step)
        for d, t in zip(d_params, t_params):
            np.testing.assert_allclose(d.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=rtol * 1e-2)
            assert set(d_opt.state[d]) == set(t_opt.state[t])
            for key, tv in t_opt.state[t].items():
                dv = d_opt.state[d][key]
                assert str(dv.dtype).split(".")[-1] == str(tv.dtype).split(".")[-1], key
                np.testing.assert_allclose(dv.numpy(), tv.numpy(), rtol=rtol, atol=rtol * 1e-2, err_msg=key)
            assert d_opt.state[d]["step"].item() == step + 1


@pytest.mark.parametrize("name,options", [(c[0], c[1]) for c in CASES[::2]])
def test_state_dicts_resume_from_torchs_and_torch_from_ours(name, options):
    d_params, t_params = make_params(np.float64)
    d_opt = getattr(dg.optim, name)(groups_of(d_params, dict(lr=2e-2)), **options)
    t_opt = getattr(torch.optim, name)(groups_of(t_params, dict(lr=2e-2)), **options)
    run_steps(d_opt, t_opt, d_params, t_params, 3, np.float64)
    d_sd, t_sd = d_opt.state_dict(), t_opt.state_dict()
    assert d_sd["param_groups"] == t_sd["param_groups"]
    assert {k: sorted(v) for k, v in d_sd["state"].items()} == {k: sorted(v) for k, v in t_sd["state"].items()}
    resumed_params = [dg.nn.Parameter(dg.tensor(t.detach().numpy().copy())) for t in t_params]
    resumed = getattr(dg.optim, name)(groups_of(resumed_params, dict(lr=2e-2)), **options)
    resumed.load_state_dict(as_dygrad(t_sd))
    # and torch resumes from dygrad's
    theirs_params = [torch.nn.Parameter(torch.tensor(d.detach().numpy().copy())) for d in d_params]
    theirs = getattr(torch.optim, name)(groups_of(theirs_params, dict(lr=2e-2)), **options)
    theirs.load_state_dict({"state": {k: {n: torch.tensor(v.numpy().copy()) for n, v in s.items()}
                                      for k, s in d_sd["state"].items()}, "param_groups": d_sd["param_groups"]})
    run_steps(resumed, theirs, resumed_params, theirs_params, 3, np.float64, seed=7)
    for d, t in zip(resumed_params, theirs_params):
        np.testing.assert_allclose(d.detach().numpy(), t.detach().numpy(), rtol=1e-10)


def test_a_parameter_without_a_gradient_is_not_stepped_and_adagrad_state_exists_at_construction():
    d_params, t_params = make_params(np.float64)
    d_opt, t_opt = dg.optim.Adagrad(d_params, lr=0.1), torch.optim.Adagrad(t_params, lr=0.1)
    assert all(d_opt.state[p]["step"].item() == 0.0 for p in d_params)
    assert sorted(d_opt.state_dict()["state"]) == sorted(t_opt.state_dict()["state"])
    run_steps(d_opt, t_opt, d_params, t_params, 2, np.float64)
    d_params[0].grad = None
    d_opt.step()
    assert [d_opt.state[p]["step"].item() for p in d_params] == [2.0, 3.0, 3.0]
