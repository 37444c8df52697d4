"""Per-parameter update loops, jitted at O1 (docs/jit-fusion.md): torch 2.13's own single-tensor
Adam (lerp_ for the first moment) and Lion (sign_), each parameter's update one fused pass, bitwise eager (sign and
lerp with a scalar weight are fusible: the generated code and the interpreter call eager's functors)."""
import pytest

import dygrad as dg


pytestmark = pytest.mark.usefixtures("jit_config")  # conftest.py


SHAPES = [(37, 5), (64,), (3, 7, 11)]


def adam_torch(ps, ms, vs, step, lr=3e-4, b1=0.9, b2=0.999, eps=1e-8):
    def f(gs):
        for p, g, m, v in zip(ps, gs, ms, vs):
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / (1 - b2 ** step) ** 0.5).add_(eps)
            p.addcdiv_(m, denom, value=-lr / (1 - b1 ** step))
    return f


def lion(ps, ms, lr=1e-2, b1=0.9, b2=0.99, wd=0.1):
    def f(gs):
        for p, g, m in zip(ps, gs, ms):
            p.mul_(1 - lr * wd)
            update = m.clone().mul_(b1).add(g, alpha=1 - b1).sign_()
            p.add_(update, alpha=-lr)
            m.mul_(b2).add_(g, alpha=1 - b2)
    return f


@pytest.mark.parametrize("interpreted", [False, True], ids=["generated", "interpreted"])
@pytest.mark.parametrize("dtype", [dg.float32, dg.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", ["adam_torch", "lion"])
def test_a_per_parameter_optimizer_loop_is_one_fused_pass_per_parameter_bitwise_eager(name, dtype, interpreted,
                                                                                      jit_config):
    jit_config.codegen = not interpreted

    def state():
        dg.manual_seed(0)
        ps = [dg.randn(*s, dtype=dtype) for s in SHAPES]
        ms = [dg.randn(*s, dtype=dtype) * 0.1 for s in SHAPES]
        ms[0][0, 0] = 0.0  # m * b1 + g * (1 - b1) exactly 0 below: sign(0) is 0, and sign(-0.0) too
        vs = [dg.rand(*s, dtype=dtype) for s in SHAPES]
        return ps, ms, vs

    dg.manual_seed(1)
    grads = [[dg.randn(*s, dtype=dtype) for s in SHAPES] for _ in range(5)]
    for gs in grads:
        gs[0][0, 0] = 0.0
    results = []
    for jit in (False, True):
        ps, ms, vs = state()
        step = adam_torch(ps, ms, vs, 1) if name == "adam_torch" else lion(ps, ms)
        f = dg.jit(step, jit_level="O1") if jit else step
        for gs in grads:
            f(gs)
        results.append(ps + ms + vs)
    assert all(dg.equal(a, b) for a, b in zip(*results))
    assert f.stats["fused_kernels"] == len(SHAPES)  # one fused sub-op per parameter
    text = dg.jit.graph(step, grads[0], passes=True).split("=== fusion")[1].split("\n===")[0]
    assert ("sign" if name == "lion" else "lerp_scalar") in text and "jit_fused[" in text
