"""Grad modes (no_grad, enable_grad, set_grad_enabled, inference_mode) as context managers and decorators,
anomaly detection and saved-tensor hooks, each checked against torch."""
import warnings

import numpy as np
import pytest
import torch

import dygrad as dg


@pytest.fixture(autouse=True)
def restore_modes():
    yield
    dg.set_grad_enabled(True)
    dg.autograd.set_detect_anomaly(False)


def modes(lib):
    return lib.is_grad_enabled(), lib.is_inference_mode_enabled()


# --- grad modes -------------------------------------------------------------------------------------------------
def test_inference_mode_context_matches_torch():
    for lib in (dg, torch):
        x = lib.ones(2, requires_grad=True)
        with lib.inference_mode():
            y = x * 2
            inside = modes(lib)
            with lib.inference_mode(False):
                inner = modes(lib)
        assert (y.requires_grad, y.grad_fn, inside, inner, modes(lib)) == \
            (False, None, (False, True), (True, False), (True, False)), lib
    for lib in (dg, torch):  # inference_mode(False) turns grad mode on, even inside no_grad (torch's rule)
        with lib.no_grad(), lib.inference_mode(False):
            assert modes(lib) == (True, False)
        with lib.inference_mode(mode=True):
            assert modes(lib) == (False, True)


def test_inference_mode_decorators_match_torch():
    for lib in (dg, torch):
        x = lib.ones(2, requires_grad=True)

        @lib.inference_mode()
        def called(t):
            return t * 2, modes(lib)

        @lib.inference_mode
        def bare(t):
            return t * 2, modes(lib)

        @lib.inference_mode(False)
        def off(t):
            return t * 2, modes(lib)

        for f, expected in ((called, (False, (False, True))), (bare, (False, (False, True))),
                            (off, (True, (True, False)))):
            y, inside = f(x)
            assert (y.requires_grad, inside) == expected, (lib, f.__name__)
        assert called.__name__ == "called" and modes(lib) == (True, False)


def test_grad_mode_decorators_match_torch():
    for lib in (dg, torch):
        x = lib.ones(2, requires_grad=True)

        @lib.no_grad()
        def a(t):
            return t * 2

        @lib.no_grad
        def b(t):
            return t * 2

        @lib.set_grad_enabled(False)
        def c(t):
            return t * 2

        assert lib.is_grad_enabled()  # decorating with set_grad_enabled(False) leaves the mode alone
        with lib.no_grad():
            @lib.enable_grad()
            def d(t):
                return t * 2

            @lib.set_grad_enabled(True)
            def e(t):
                return t * 2

            results = [f(x).requires_grad for f in (a, b, c, d, e)]
            assert not lib.is_grad_enabled()
        assert results == [False, False, False, True, True], lib


def test_set_grad_enabled_as_a_function_and_a_context():
    for lib in (dg, torch):
        lib.set_grad_enabled(False)
        assert not lib.is_grad_enabled()
        lib.set_grad_enabled(True)
        with lib.set_grad_enabled(False):
            assert not lib.is_grad_enabled()
            with lib.set_grad_enabled(True):
                assert lib.is_grad_enabled()
            assert not lib.is_grad_enabled()
        assert lib.is_grad_enabled()
        with pytest.raises(RuntimeError):
            with lib.set_grad_enabled(False):
                raise RuntimeError("inside")
        assert lib.is_grad_enabled()  # restored on an exception too


def test_grad_mode_decorates_generators():
    for lib in (dg, torch):
        x = lib.ones(1, requires_grad=True)

        @lib.no_grad()
        def gen():
            for _ in range(2):
                yield (x * 2).requires_grad, lib.is_grad_enabled()

        assert list(gen()) == [(False, False), (False, False)] and lib.is_grad_enabled()


def test_grad_modes_are_thread_local():
    import threading

    seen = []
    with dg.no_grad(), dg.inference_mode():
        t = threading.Thread(target=lambda: seen.append(modes(dg)))
        t.start()
        t.join()
    assert seen == [(True, False)]


# --- anomaly mode -----------------------------------------------------------------------------------------------
def test_detect_anomaly_names_the_node_and_the_forward_line():
    x = dg.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dg.autograd.detect_anomaly():
            y = (x / x).sum()  # the forward line the error names
            line = test_detect_anomaly_names_the_node_and_the_forward_line.__code__.co_firstlineno + 5
            with pytest.raises(RuntimeError, match=rf"Function 'DivBackward0' returned nan values in its 1th output"
                                                   rf"\. The forward call that created it: .*test_modes\.py:{line}"):
                y.backward()
    # torch names the same node and output
    xt = torch.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly():
            with pytest.raises(RuntimeError, match=r"Function 'DivBackward0' returned nan values in its 1th output"):
                (xt / xt).sum().backward()


def test_anomaly_mode_off_and_check_nan_false_let_nan_through():
    for kwargs in ({"mode": False}, {"mode": True, "check_nan": False}):
        x = dg.tensor([0.0, 1.0], requires_grad=True)
        with dg.autograd.set_detect_anomaly(**kwargs):
            assert dg.autograd.is_anomaly_enabled() == kwargs["mode"]
            (x / x).sum().backward()
        assert np.isnan(x.grad.numpy()[0])
    assert not dg.autograd.is_anomaly_enabled()
    dg.autograd.set_detect_anomaly(True)  # a plain call, as torch's
    assert dg.autograd.is_anomaly_enabled() and dg.autograd.is_anomaly_check_nan_enabled()
    dg.autograd.set_detect_anomaly(False)
    assert not dg.autograd.is_anomaly_enabled()


def test_anomaly_in_a_module_names_the_users_line():
    # nn modules are dygrad's own Python frames: a NaN from an op inside the module (layer_norm of a constant
    # row with eps=0: 0 * inf in its backward) names the line that called the module.
    ln = dg.nn.LayerNorm(4, eps=0.0)
    x = dg.ones(2, 4, requires_grad=True)
    with dg.autograd.set_detect_anomaly(True):
        y = ln(x)  # the forward line
        line = test_anomaly_in_a_module_names_the_users_line.__code__.co_firstlineno + 6
        with pytest.raises(RuntimeError, match=rf"Backward0' returned nan values.*test_modes\.py:{line}, in "
                                               rf"test_anomaly_in_a_module_names_the_users_line"):
            y.sum().backward()


def test_detect_anomaly_as_a_decorator_and_finite_gradients_pass():
    @dg.autograd.detect_anomaly()
    def f():
        assert dg.autograd.is_anomaly_enabled()
        x = dg.tensor([1.0, 2.0], requires_grad=True)
        (x * x).sum().backward()
        return x.grad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_allclose(f().numpy(), [2.0, 4.0])
    assert not dg.autograd.is_anomaly_enabled()


# --- saved-tensor hooks -------------------------------------------------------------------------------------------
def test_saved_tensors_hooks_match_torch_on_builtin_ops():
    logs = {}
    grads = {}
    for lib in (dg, torch):
        log = []

        def pack(t):
            log.append(("pack", tuple(t.shape)))
            return t * 2  # what the node keeps

        def unpack(t):
            log.append(("unpack", tuple(t.shape)))
            return t / 2

        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = lib.tensor([[1.0], [0.5], [2.0]], requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(pack, unpack):
            y = (x.exp() * x).sum() + (x.reshape(1, 3) @ w).sum()
        y.backward()
        logs[lib] = sorted(log)
        grads[lib] = (x.grad.numpy(), w.grad.numpy())
    assert logs[dg] == logs[torch]
    for a, b in zip(grads[dg], grads[torch]):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_saved_tensors_hooks_scale_what_backward_reads():
    # The unpacked tensor is what the formula uses: an unpack hook that changes it changes the gradient.
    for lib in (dg, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t * 10):
            y = (x * x).sum()
        y.backward()
        np.testing.assert_allclose(x.grad.numpy(), [20.0, 40.0])


def test_saved_tensors_hooks_nest_and_apply_only_inside():
    seen = []
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    with dg.autograd.graph.saved_tensors_hooks(lambda t: seen.append("outer") or t, lambda t: t):
        with dg.autograd.graph.saved_tensors_hooks(lambda t: seen.append("inner") or t, lambda t: t):
            a = x.exp()
        b = x.exp()
    c = x.exp()
    (a + b + c).sum().backward()
    assert seen == ["inner", "outer"]
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.exp([1.0, 2.0]), rtol=1e-6)


def test_saved_tensors_hooks_errors():
    x = dg.tensor([1.0], requires_grad=True)
    with dg.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: "not a tensor"):
        y = x.exp()
    with pytest.raises(TypeError, match="unpack hook must return a Tensor"):
        y.backward()

    def bad_pack(t):
        raise KeyError("pack failed")

    with pytest.raises(KeyError, match="pack failed"):
        with dg.autograd.graph.saved_tensors_hooks(bad_pack, lambda t: t):
            x.exp()
    with dg.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
        with pytest.raises(RuntimeError, match="no hooks here"):
            with dg.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
    z = x.exp()  # hooks are gone again
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0]), rtol=1e-6)


def test_save_on_cpu_matches_torch():
    for lib in (dg, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        with lib.autograd.graph.save_on_cpu():
            y = (x.sin() * x).sum()
        y.backward()
        np.testing.assert_allclose(x.grad.numpy(), np.sin([1.0, 2.0]) + np.cos([1.0, 2.0]) * [1.0, 2.0], rtol=1e-6)
