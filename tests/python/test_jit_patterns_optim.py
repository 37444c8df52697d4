"""dygrad.jit O1's pattern pass, AdamW (docs/jit-fusion.md, "Patterns"): torch.optim.AdamW's per-parameter loop
(foreach=False) captured at a Python step k becomes one adamw_step over every parameter, bitwise eager."""
import pytest

import dygrad as dg


pytestmark = pytest.mark.usefixtures("jit_config")  # conftest.py

SHAPES = [(5, 3), (4,), (3, 7, 11)]


def state(dtype):
    dg.manual_seed(0)
    ps = [dg.randn(*s, dtype=dtype) for s in SHAPES]
    return ps, [dg.randn(*s, dtype=dtype) * 0.1 for s in SHAPES], [dg.rand(*s, dtype=dtype) for s in SHAPES]


def adamw_loop(ps, ms, vs, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=0.1, step=3):
    """torch/optim/adam.py's _single_tensor_adam (capturable=False), decoupled weight decay, step k a Python value."""
    def f(gs):
        for p, g, m, v in zip(ps, gs, ms, vs):
            if wd != 0:
                p.mul_(1 - lr * wd)
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            bias_correction1 = 1 - b1 ** step
            bias_correction2 = 1 - b2 ** step
            step_size = lr / bias_correction1
            bias_correction2_sqrt = bias_correction2 ** 0.5
            denom = (v.sqrt() / bias_correction2_sqrt).add_(eps)
            p.addcdiv_(m, denom, value=-step_size)
    return f


@pytest.mark.parametrize("dtype", [dg.float32, dg.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("wd,step", [(0.1, 3), (0.0, 1), (0.01, 100000)])
def test_the_per_parameter_adamw_loop_is_one_adamw_step_bitwise_eager(dtype, wd, step, jit_config):
    jit_config.codegen = False
    dg.manual_seed(1)
    grads = [[dg.randn(*s, dtype=dtype) for s in SHAPES] for _ in range(4)]
    text = dg.jit.graph(adamw_loop(*state(dtype), wd=wd, step=step), grads[0], passes=True)
    assert "patterns: 3 AdamW update(s) into 1 adamw_step(s)" in text
    results = []
    for jit in (False, True):
        ps, ms, vs = state(dtype)
        f = adamw_loop(ps, ms, vs, wd=wd, step=step)
        f = dg.jit(f, jit_level="O1") if jit else f
        for gs in grads:
            f(gs)
        results.append(ps + ms + vs)
    assert f.stats["replays"] == 2
    assert all(dg.equal(a, b) for a, b in zip(*results))


def test_a_denominator_read_elsewhere_is_not_replaced():
    ps, ms, vs = state(dg.float32)

    def f(gs):
        denoms = []
        for p, g, m, v in zip(ps, gs, ms, vs):
            m.lerp_(g, 0.1)
            v.mul_(0.999).addcmul_(g, g, value=1 - 0.999)
            denom = (v.sqrt() / 0.5).add_(1e-8)
            p.addcdiv_(m, denom, value=-1e-3)
            denoms.append(denom)
        return denoms

    text = dg.jit.graph(f, [dg.randn(*s) for s in SHAPES], passes=True)
    assert "AdamW" not in text and "adamw_step" not in text
