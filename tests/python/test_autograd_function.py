"""dygrad.autograd.Function against torch.autograd.Function: the same subclass code run with both libraries
(values, gradients, ctx semantics, errors), and its node inside dygrad's engine (retain_graph, grad, hooks,
anomaly mode, the profiler)."""
import warnings

import numpy as np
import pytest
import torch

import dygrad as dg

LIBS = (dg, torch)


def both(build):
    """Runs build(lib) for dygrad and torch; returns the two results."""
    return build(dg), build(torch)


def assert_same(a, b, rtol=1e-6):
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y, rtol)
        return
    if a is None or b is None:
        assert a is None and b is None
        return
    np.testing.assert_allclose(np.asarray(a.detach().numpy() if hasattr(a, "detach") else a),
                               np.asarray(b.detach().numpy() if hasattr(b, "detach") else b), rtol=rtol, atol=1e-7)


def exp_function(lib):
    class ScaledExp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            y = (x * k).exp()
            ctx.save_for_backward(y)  # an output
            ctx.k = k
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * y * ctx.k, None

    return ScaledExp


def test_function_values_and_gradients_mixed_with_builtin_ops():
    def run(lib):
        f = exp_function(lib)
        x = lib.tensor([0.5, -1.0, 2.0], requires_grad=True)
        w = lib.tensor([1.5, 2.0, -0.5], requires_grad=True)
        y = f.apply(x * w, 0.5)
        loss = (y * w).sum() + f.apply(y, 0.1).sum()
        loss.backward()
        return y, x.grad, w.grad, type(y.grad_fn).__name__ if lib is torch else y.grad_fn.name()

    d, t = run(dg), run(torch)
    assert_same(d[:3], t[:3])
    assert d[3] == t[3] == "ScaledExpBackward"


def test_function_matches_finite_differences_in_float64():
    f = exp_function(dg)
    x = dg.tensor([0.3, -0.7], dtype=dg.float64, requires_grad=True)
    (f.apply(x, 1.3) ** 2).sum().backward()
    eps = 1e-6
    base = x.detach().numpy()
    fd = [(np.sum(np.exp((base + eps * e) * 1.3) ** 2) - np.sum(np.exp((base - eps * e) * 1.3) ** 2)) / (2 * eps)
          for e in np.eye(2)]
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6)


def test_retain_graph_autograd_grad_and_the_freed_graph_error():
    def run(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = exp_function(lib).apply(x, 2.0).sum()
        (g,) = lib.autograd.grad(y, x, retain_graph=True)
        y.backward(retain_graph=True)
        y.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            y.backward()
        return g, x.grad

    assert_same(*both(run))


def test_needs_input_grad_and_non_tensor_arguments():
    def run(lib):
        seen = []

        class Mul(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a, b, scale, name="mul"):
                seen.append((ctx.needs_input_grad, name))
                ctx.save_for_backward(a, b)
                ctx.scale = scale
                return a * b * scale

            @staticmethod
            def backward(ctx, grad):
                a, b = ctx.saved_tensors
                ga = grad * b * ctx.scale if ctx.needs_input_grad[0] else None
                gb = grad * a * ctx.scale if ctx.needs_input_grad[1] else None
                return ga, gb, None, None

        a = lib.tensor([1.0, 2.0], requires_grad=True)
        b = lib.tensor([3.0, 4.0])
        Mul.apply(a, b, 2.0).sum().backward()
        Mul.apply(b, a, 3.0, "named").sum().backward()
        with lib.no_grad():
            out = Mul.apply(a, b, 1.0)
        return seen, a.grad, out.requires_grad

    d, t = both(run)
    # needs_input_grad: requires_grad per positional argument given (defaults are not bound in this style),
    # even under no_grad (torch); backward may return extra Nones.
    assert d[0] == t[0] == [((True, False, False), "mul"), ((False, True, False, False), "named"),
                            ((True, False, False), "mul")]
    assert_same(d[1], t[1])
    assert d[2] is t[2] is False


def test_multiple_outputs_materialize_grads_and_non_differentiable():
    def run(lib, materialize):
        seen = []

        class MinMax(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(materialize)
                i = x.argmax()
                ctx.mark_non_differentiable(i)
                ctx.save_for_backward(x)
                return x * 2, x * 3, i

            @staticmethod
            def backward(ctx, g2, g3, gi):
                seen.append((g2 is None, g3 is None, gi is None))
                (x,) = ctx.saved_tensors
                g = lib.zeros_like(x)
                if g2 is not None:
                    g = g + 2 * g2
                if g3 is not None:
                    g = g + 3 * g3
                return g

        x = lib.tensor([1.0, 5.0, 2.0], requires_grad=True)
        a, b, i = MinMax.apply(x)
        a.sum().backward()  # b and i get no gradient
        return seen, x.grad, (a.requires_grad, b.requires_grad, i.requires_grad), int(i)

    for materialize in (True, False):
        d, t = run(dg, materialize), run(torch, materialize)
        assert d[0] == t[0], materialize
        assert_same(d[1], t[1])
        assert d[2] == t[2] == (True, True, False) and d[3] == t[3] == 1


def test_setup_context_style():
    def run(lib):
        class Cube(lib.autograd.Function):
            @staticmethod
            def forward(x, power=3):
                return x ** power

            @staticmethod
            def setup_context(ctx, inputs, output):
                x, power = inputs
                ctx.save_for_backward(x)
                ctx.power = power

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return grad * ctx.power * x ** (ctx.power - 1), None

        x = lib.tensor([1.0, -2.0], requires_grad=True)
        y = Cube.apply(x)
        z = Cube.apply(x, power=2)
        (y + z).sum().backward()
        return y, z, x.grad

    assert_same(*both(run))


def test_mark_dirty_in_place_forward():
    def run(lib):
        class AddOne(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x.add_(1)
                ctx.mark_dirty(x)
                return x

            @staticmethod
            def backward(ctx, grad):
                return grad * 1

        leaf = lib.tensor([1.0, 2.0], requires_grad=True)
        a = leaf * 2
        b = AddOne.apply(a)
        same = b is a
        (b * b).sum().backward()
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            AddOne.apply(lib.tensor([1.0], requires_grad=True))
        return same, b, leaf.grad

    d, t = both(run)
    assert d[0] and t[0]
    assert_same(d[1:], t[1:])


def test_mark_dirty_of_a_tensor_not_returned_raises():
    class Bad(dg.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.mark_dirty(y)
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    with pytest.raises(RuntimeError, match="marked as dirty"):
        Bad.apply(dg.ones(2, requires_grad=True), dg.ones(2))


def test_input_returned_unchanged_gets_a_history():
    def run(lib):
        class Identity(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, grad):
                return grad * 5

        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = Identity.apply(x)
        y.sum().backward()
        return y is x, y.grad_fn is not None, x.grad

    d, t = both(run)
    assert d[:2] == t[:2] == (False, True)
    assert_same(d[2], t[2])


def test_backward_errors_propagate_as_python_exceptions():
    for lib in LIBS:
        class Boom(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                raise ValueError("custom backward failed")

        x = lib.ones(2, requires_grad=True)
        with pytest.raises(ValueError, match="custom backward failed"):
            (Boom.apply(x) + x).sum().backward()


def test_wrong_gradient_counts_and_shapes():
    for lib in LIBS:
        class TooFew(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                return x * y

            @staticmethod
            def backward(ctx, grad):
                return grad

        class NotNone(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                return x * k

            @staticmethod
            def backward(ctx, grad):
                return grad, grad

        class WrongShape(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                return lib.ones(5)

        x = lib.ones(2, requires_grad=True)
        with pytest.raises(RuntimeError, match=r"returned an incorrect number of gradients \(expected 2, got 1\)"):
            TooFew.apply(x, x).sum().backward()
        with pytest.raises(RuntimeError, match="returned a gradient different than None at position 2"):
            NotNone.apply(x, 2.0).sum().backward()
        with pytest.raises(RuntimeError):
            WrongShape.apply(x).sum().backward()


def test_saved_tensors_checks_in_place_modification():
    for lib in LIBS:
        class Square(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return 2 * x * grad

        a = lib.ones(2, requires_grad=True) * 1
        y = Square.apply(a)
        with lib.no_grad():
            a.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_once_differentiable():
    def run(lib):
        class Double(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            @lib.autograd.function.once_differentiable
            def backward(ctx, grad):
                assert not lib.is_grad_enabled()
                return grad * 2

        x = lib.tensor([1.0, 3.0], requires_grad=True)
        (g,) = lib.autograd.grad((Double.apply(x) * x).sum(), x, create_graph=True)
        with pytest.raises(RuntimeError, match="differentiate twice a function that was marked with @once_differentiable"):
            g.sum().backward()
        Double.apply(x).sum().backward()
        return g, x.grad

    assert_same(*both(run))


def test_hooks_and_retain_grad_through_a_function_node():
    def run(lib):
        seen = []
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        x.register_hook(lambda g: seen.append(g.numpy().tolist()))
        y = exp_function(lib).apply(x, 1.0)
        y.retain_grad()
        y.register_hook(lambda g: g * 10)
        (y * 3).sum().backward()
        return seen, y.grad, x.grad

    d, t = both(run)
    np.testing.assert_allclose(d[0], t[0], rtol=1e-6)
    assert_same(d[1:], t[1:])


def test_saved_tensors_hooks_apply_to_ctx_save_for_backward():
    def run(lib):
        log = []

        class Square(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return 2 * x * grad

        x = lib.tensor([1.0, 2.0], requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(lambda t: log.append("pack") or t * 2,
                                                     lambda t: log.append("unpack") or t):
            y = Square.apply(x)
        y.sum().backward()
        return log, x.grad

    d, t = both(run)
    assert d[0] == t[0] == ["pack", "unpack"]
    assert_same(d[1], t[1])  # unpacked doubled: the gradient is doubled in both


def test_anomaly_mode_names_a_functions_apply_line():
    class NanGrad(dg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, grad):
            return grad * float("nan")

    x = dg.ones(2, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dg.autograd.detect_anomaly():
            y = NanGrad.apply(x)  # named in the error
            line = test_anomaly_mode_names_a_functions_apply_line.__code__.co_firstlineno + 14
            with pytest.raises(RuntimeError, match=rf"'NanGradBackward' returned nan values in its 0th output.*"
                                                   rf"test_autograd_function\.py:{line}"):
                y.sum().backward()


def test_function_backward_runs_in_the_engine_under_the_profiler():
    f = exp_function(dg)
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    with dg.profiler.profile() as prof:
        y = f.apply(x, 2.0)
        y.sum().backward()
    events = prof.events()
    names = [e.name for e in events]
    # forward: mul_scalar, exp; sum; then the Function's backward (grad * y * k) runs as Tasks of the same stream
    assert names[:3] == ["mul_scalar", "exp", "sum"], names
    assert "mul" in names[names.index("sum") + 1:], names
    assert [e.seq for e in events] == sorted(e.seq for e in events) and not any(e.failed for e in events)
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([2.0, 4.0]), rtol=1e-6)


def test_legacy_instances_and_missing_backward():
    for lib in LIBS:
        class NoBackward(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

        with pytest.raises(NotImplementedError):
            NoBackward.apply(lib.ones(1, requires_grad=True)).sum().backward()
        with pytest.raises(RuntimeError, match="Legacy autograd function"):
            NoBackward()(lib.ones(1))


def test_double_backward_through_a_differentiable_backward():
    def run(lib):
        class Cube(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x ** 3

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return 3 * x * x * grad

        x = lib.tensor([1.0, 2.0], requires_grad=True)
        (g,) = lib.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
        g.sum().backward()
        return g, x.grad, g.requires_grad

    d, t = both(run)
    assert d[2] and t[2]
    assert_same(d[:2], t[:2])


def test_integer_and_python_outputs_get_no_history():
    def run(lib):
        class Mixed(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a + b, (a * b).long(), 5

            @staticmethod
            def backward(ctx, g, g_int, g_python):
                return g, g * 2

        a = lib.tensor([1.5], requires_grad=True)
        b = lib.tensor([2.0], requires_grad=True)
        s, i, five = Mixed.apply(a, b)
        s.backward()
        return (s.requires_grad, i.requires_grad, i.grad_fn is None, five), a.grad, b.grad

    d, t = both(run)
    assert d[0] == t[0] == (True, False, True, 5)
    assert_same(d[1:], t[1:])


def test_the_ctx_and_saved_tensors_are_freed_with_the_graph():
    import weakref

    contexts, saved = [], []

    class Double(dg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 2
            contexts.append(weakref.ref(ctx))
            ctx.save_for_backward(x, y)  # an input and an output (kept detached: no cycle)
            return y

        @staticmethod
        def backward(ctx, grad):
            saved.append(len(ctx.saved_tensors))
            return grad * 2

    x = dg.ones(3, requires_grad=True)
    y = Double.apply(x)
    del y  # dropped without backward
    y = Double.apply(x)
    y.sum().backward()
    del y
    y = Double.apply(x)
    y.sum().backward(retain_graph=True)
    del y
    assert [ref() is None for ref in contexts] == [True, True, True] and saved == [2, 2]
