"""dygrad.jit O1's pattern pass, cross-entropy (docs/jit-fusion.md, "Patterns"): the composed language-model losses,
F.nll_loss(F.log_softmax(x, -1), t) and -F.log_softmax(x, -1).gather(-1, t[..., None]) summed or averaged, forward
and the backward autograd records for them, replayed as the fused cross_entropy and its backward. Equal to eager
within float rounding (float64: 1e-10 relative), off in deterministic mode and by dygrad.jit.config.patterns;
refused where the log-probabilities are read elsewhere, where the logits are written in between, and for forms the
fused op does not compute (class weights, label smoothing, a loss without the minus)."""
import pytest

import dygrad as dg
import dygrad.nn.functional as F
from jit_steps import after_passes, assert_close


pytestmark = pytest.mark.usefixtures("jit_config")  # conftest.py

B, T, C = 3, 5, 37  # 15 rows of 37 classes


def nll_mean(x, t):  # through the [R, C] view the models use
    return F.nll_loss(F.log_softmax(x, -1).view(-1, C), t.view(-1))


def nll_sum_ignored(x, t):
    return F.nll_loss(F.log_softmax(x.view(-1, C), -1), t.view(-1), reduction="sum", ignore_index=-1)


def nll_none(x, t):
    return F.nll_loss(F.log_softmax(x.view(-1, C), -1), t.view(-1), reduction="none", ignore_index=-1).mean()


def gather_mean(x, t):
    return -F.log_softmax(x, -1).gather(-1, t[..., None]).mean()


def gather_sum_negated_first(x, t):
    return F.log_softmax(x, -1).gather(-1, t[..., None]).neg().sum()


def gather_squeezed_mean_negated_last(x, t):
    return (F.log_softmax(x, -1).gather(-1, t[..., None]).squeeze(-1).mean()).neg()


def gather_selected_sum(x, t):
    return -F.log_softmax(x, -1).gather(-1, t[..., None])[..., 0].sum()


def logsumexp_mean(x, t):
    return (x.logsumexp(-1) - x.gather(-1, t[..., None]).squeeze(-1)).mean()


def logsumexp_sum(x, t):
    return (x.logsumexp(-1) - x.gather(-1, t[..., None])[..., 0]).sum()


FORMS = [nll_mean, nll_sum_ignored, nll_none, gather_mean, gather_sum_negated_first, gather_squeezed_mean_negated_last,
         gather_selected_sum, logsumexp_mean, logsumexp_sum]


def training_step(loss_of, dtype, seed=0, scaled=False):
    """(step, inputs): logits from a projection of h by a weight, the loss and its backward; the step returns the
    loss and the weight's gradient. `scaled`: the backward starts from loss * s, s an argument (the loss's gradient
    is then computed at each call, not a constant the fold pass computes once)."""
    dg.manual_seed(seed)
    w = (dg.randn(16, C, dtype=dtype) * 0.7).requires_grad_()

    def step(h, t, s):
        loss = loss_of(h @ w, t)
        (loss * s if scaled else loss).backward()
        g = w.grad
        w.grad = None
        return loss.detach(), g

    inputs = []
    for _ in range(3):
        t = dg.randint(0, C, (B, T))
        if loss_of in (nll_sum_ignored, nll_none):
            t[0, 1] = -1
            t[2, 4] = -1
        inputs.append((dg.randn(B, T, 16, dtype=dtype), t, dg.rand((), dtype=dtype) + 0.5))
    return step, inputs


@pytest.mark.parametrize("dtype,scaled", [(dg.float32, False), (dg.float64, False), (dg.float64, True)],
                         ids=["float32", "float64", "float64-scaled"])
@pytest.mark.parametrize("loss_of", FORMS, ids=[f.__name__ for f in FORMS])
def test_a_composed_cross_entropy_step_runs_the_fused_op_and_its_backward(loss_of, dtype, scaled, jit_config):
    jit_config.codegen = False  # what is left to fuse runs the interpreter: no compile
    step, inputs = training_step(loss_of, dtype, scaled=scaled)
    text, final = after_passes(step, *inputs[0])
    assert "1 cross-entropy(s) into cross_entropy (1 with its backward)" in text
    assert "cross_entropy(" in final and "cross_entropy_backward(" in final
    assert not any(op in final for op in ("log_softmax", "logsumexp", "gather", "nll_loss", "scatter_add"))
    want = [step(*a) for a in inputs]
    f = dg.jit(step, jit_level="O1")
    got = [f(*a) for a in inputs]
    assert f.stats["replays"] == 1
    for (lw, gw), (lg, gg) in zip(want, got):
        assert_close(lg, lw, dtype)
        assert_close(gg, gw, dtype)


def test_the_backward_is_matched_with_the_versions_pass_off(jit_config):
    # the select's backward ([..., 0]) is then zeros and a copy into them, not a copy alone
    jit_config.codegen, jit_config.rematerialize = False, False
    step, inputs = training_step(gather_selected_sum, dg.float64, scaled=True)
    text, final = after_passes(step, *inputs[0])
    assert "1 cross-entropy(s) into cross_entropy (1 with its backward)" in text and "fill" not in final
    f = dg.jit(step, jit_level="O1")
    for (lw, gw), (lg, gg) in zip([step(*a) for a in inputs], [f(*a) for a in inputs]):
        assert_close(lg, lw, dg.float64)
        assert_close(gg, gw, dg.float64)


@pytest.mark.parametrize("loss_of", [nll_mean, gather_mean, logsumexp_mean], ids=["nll", "gather", "logsumexp"])
def test_an_evaluation_loss_runs_the_fused_forward_alone(loss_of):
    dg.manual_seed(1)
    x, t = dg.randn(B, T, C, dtype=dg.float64), dg.randint(0, C, (B, T))
    with dg.no_grad():
        text, final = after_passes(loss_of, x, t)
        assert "1 cross-entropy(s) into cross_entropy (0 with its backward)" in text
        assert "cross_entropy(" in final and "log_softmax" not in final
        g = dg.jit(loss_of, jit_level="O1")
        for _ in range(3):
            got = g(x, t)
    assert_close(got, loss_of(x, t), dg.float64)
    assert_close(got, F.cross_entropy(x.view(-1, C), t.view(-1)), dg.float64)


def unmatched(fn, *args):
    text, final = after_passes(fn, *args)
    assert "cross-entropy" not in text and "cross_entropy" not in final


def assert_replays_eager(fn, *args):
    """The O1 replays give eager's results bitwise (nothing but exact passes touched the loss)."""
    want = fn(*args)
    g = dg.jit(fn, jit_level="O1")
    for _ in range(3):
        got = g(*args)
    assert all(dg.equal(a, b) for a, b in zip(want, got))


def test_log_probabilities_read_elsewhere_are_not_replaced():
    x, t = dg.randn(7, C), dg.randint(0, C, (7,))

    def f(x, t):
        lp = F.log_softmax(x, -1)
        return F.nll_loss(lp, t), lp  # the log-probabilities are a result

    with dg.no_grad():
        unmatched(f, x, t)
        assert_replays_eager(f, x, t)


def test_logits_written_between_the_forward_and_the_backward_are_not_read_late():
    dg.manual_seed(2)
    w = dg.randn(16, C).requires_grad_()

    def step(h, t, s):
        x = h @ w
        loss = gather_mean(x, t)
        x.add_(1.0)  # log_softmax saved its output, not x: legal in eager; the fused backward would read the new x
        loss.backward()
        g = w.grad
        w.grad = None
        return loss.detach(), g, x.detach().sum()  # (read: the write is live)

    h, t = dg.randn(B, T, 16), dg.randint(0, C, (B, T))
    unmatched(step, h, t, None)
    assert_replays_eager(step, h, t, None)


@pytest.mark.parametrize("form", ["class weights", "label smoothing", "no minus", "a row mean"])
def test_forms_the_fused_op_does_not_compute_are_left_alone(form):
    x, t = dg.randn(7, C), dg.randint(0, C, (7,))
    weight = dg.rand(C)
    forms = {"class weights": lambda x, t: F.nll_loss(F.log_softmax(x, -1), t, weight=weight),
             # dygrad composes label smoothing: its log-probabilities are read twice
             "label smoothing": lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
             "no minus": lambda x, t: F.log_softmax(x, -1).gather(-1, t[:, None]).mean(),
             "a row mean": lambda x, t: -F.log_softmax(x, -1).gather(-1, t[:, None]).mean(0)}
    with dg.no_grad():
        unmatched(forms[form], x, t)
        assert_replays_eager(lambda x, t: (forms[form](x, t),), x, t)


def test_the_pattern_is_off_in_deterministic_mode_and_by_its_switch(jit_config):
    step, inputs = training_step(gather_mean, dg.float32)
    want = [step(*a) for a in inputs]
    try:
        dg.use_deterministic_algorithms(True)
        text, _ = after_passes(step, *inputs[0])
        assert "=== patterns" not in text and "cross_entropy" not in text
        f = dg.jit(step, jit_level="O1")
        got = [f(*a) for a in inputs]
    finally:
        dg.use_deterministic_algorithms(False)
    assert all(dg.equal(a, b) for w, g in zip(want, got) for a, b in zip(w, g))  # eager's bits
    jit_config.patterns = False
    text, final = after_passes(step, *inputs[0])
    assert "=== patterns" not in text and "cross_entropy" not in final
    g = dg.jit(step, jit_level="O1")
    assert all(dg.equal(a, b) for w, o in zip(want, [g(*a) for a in inputs]) for a, b in zip(w, o))


def test_a_target_out_of_range_still_raises_at_the_next_sync():
    x = dg.randn(7, C)
    f = dg.jit(gather_mean, jit_level="O1")
    with dg.no_grad():
        for _ in range(3):
            f(x, dg.randint(0, C, (7,)))
        bad = dg.randint(0, C, (7,))
        bad[3] = C
        with pytest.raises(IndexError, match=r"cross_entropy\] target 37 is out of bounds"):
            float(f(x, bad))
