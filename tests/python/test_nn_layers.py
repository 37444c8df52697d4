"""The layers of issue 41, part 2, against torch 2.13: the exponential activations (elu, selu, celu, softplus,
mish, logsigmoid), convolutions (conv1d/2d/3d, the transposed ones), batch and group norm, the recurrent layers
(RNN, LSTM, GRU and their cells), multi-head attention and the Transformer stacks. Each module is built in both
libraries with torch's initial weights copied into dygrad's; outputs, input gradients and every parameter's
gradient are compared in float64 (tight tolerances), state_dict keys and reprs must be equal, and bad arguments
must raise torch's exception type."""
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import dygrad as dg
import dygrad.nn.functional as F

TOL = dict(rtol=1e-10, atol=1e-11)


def rand(*shape, seed=0, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def both(array, grad=True):
    """The same float64 values as a dygrad and a torch tensor (leaves requiring grad)."""
    return dg.tensor(array, requires_grad=grad), torch.tensor(array, requires_grad=grad)


def close(ours, theirs, **tol):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), **(tol or TOL))


def copy_module(theirs, ours):
    """torch's parameters and buffers into dygrad's module; the state_dict keys must agree."""
    state = theirs.state_dict()
    assert list(ours.state_dict()) == list(state)
    ours.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in state.items()})
    return ours


def backward_both(ours, theirs, seed=9):
    """sum(out * w) for the same random w on both sides (every output element gets its own weight)."""
    ours, theirs = (ours if isinstance(ours, tuple) else (ours,)), (theirs if isinstance(theirs, tuple) else (theirs,))
    loss_d, loss_t = 0, 0
    for i, (o, t) in enumerate(zip(ours, theirs)):
        if o is None:
            continue
        w = rand(*t.shape, seed=seed + i)
        loss_d = loss_d + (o * dg.tensor(w)).sum()
        loss_t = loss_t + (t * torch.tensor(w)).sum()
    loss_d.backward()
    loss_t.backward()


def compare_grads(ours, theirs, **tol):
    grads = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert (p.grad is None) == (grads[name].grad is None), name
        if p.grad is not None:
            np.testing.assert_allclose(p.grad.numpy(), grads[name].grad.numpy(), err_msg=name, **(tol or TOL))


def backward_and_compare(ours, theirs, out_d, out_t, inputs=(), **tol):
    """Fresh gradients on both modules, the same weighted backward, then every input's and parameter's gradient."""
    ours.zero_grad()
    theirs.zero_grad()
    backward_both(out_d, out_t)
    for d, t in inputs:
        close(d.grad, t.grad, **tol)
    compare_grads(ours, theirs, **tol)


def same_error(call_ours, call_theirs, match=None):
    with pytest.raises(Exception) as theirs:
        call_theirs()
    with pytest.raises(type(theirs.value), match=match) as ours:
        call_ours()
    return str(ours.value), str(theirs.value)


# --- activations ------------------------------------------------------------------------------------------------
ACTIVATIONS = [("elu", {}), ("elu", {"alpha": 0.3}), ("selu", {}), ("celu", {}), ("celu", {"alpha": 2.5}),
               ("softplus", {}), ("softplus", {"beta": 2.0, "threshold": 5.0}), ("softplus", {"beta": 0.5}),
               ("mish", {}), ("logsigmoid", {}), ("silu", {})]


def activation_inputs(dtype):
    values = np.concatenate([rand(200, seed=1) * 4, [0.0, -0.0, 1e-9, -1e-9, 1e-5, -1e-5, 2.5, 2.5 + 1e-6, 10.0,
                                                     10.0 + 1e-6, 20.0, 19.999, 20.001, 40.0, -40.0, 100.0, -100.0,
                                                     800.0, -800.0]])
    return values.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,kwargs", ACTIVATIONS, ids=[f"{n}{k}" for n, k in ACTIVATIONS])
def test_activation_values_and_gradients_match_torch(name, kwargs, dtype):
    x = activation_inputs(dtype)
    d, t = dg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ours, theirs = getattr(F, name)(d, **kwargs), getattr(TF, name)(t, **kwargs)
    tol = dict(rtol=4e-7, atol=1e-30) if dtype == "float32" else dict(rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), **tol)
    assert ours.dtype == getattr(dg, dtype)
    w = rand(*x.shape, seed=4).astype(dtype)
    (ours * dg.tensor(w)).sum().backward()
    (theirs * torch.tensor(w)).sum().backward()
    # the gradients cross 0 (silu, mish): relative to their magnitude there, O(1)
    grad_tol = dict(rtol=2e-6, atol=1e-7) if dtype == "float32" else dict(rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), **grad_tol)


@pytest.mark.parametrize("name", ["elu", "selu", "celu", "mish"])
def test_activation_inplace_forms_match_torch_on_a_non_leaf(name):
    x = activation_inputs("float64")
    d, t = both(x)
    a, b = d * 2, t * 2
    ra, rb = getattr(F, name)(a, inplace=True), getattr(TF, name)(b, inplace=True)
    assert ra is a
    close(a, b)
    backward_both(ra, rb)
    close(d.grad, t.grad)
    for fn in ("elu_", "selu_", "celu_"):
        u, v = dg.tensor([-1.0, 2.0]), torch.tensor([-1.0, 2.0])
        assert getattr(F, fn)(u) is u and np.allclose(u.numpy(), getattr(TF, fn)(v).numpy())


def test_activation_modules_repr_forward_and_errors_match_torch():
    x = np.linspace(-6, 6, 41)
    for name, args, kwargs in [("ELU", (), {}), ("ELU", (0.5, True), {}), ("CELU", (2.0,), {}), ("SELU", (), {}),
                               ("SELU", (True,), {}), ("Softplus", (), {}), ("Softplus", (2, 3), {}), ("Mish", (), {}),
                               ("Mish", (), {"inplace": True}), ("LogSigmoid", (), {})]:
        ours, theirs = getattr(dg.nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
        assert repr(ours) == repr(theirs), name
        np.testing.assert_allclose(ours(dg.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy(), rtol=1e-14)
        assert getattr(dg.nn.modules.activation, name) is getattr(dg.nn, name)
    same_error(lambda: F.celu(dg.ones(3), alpha=0.0), lambda: TF.celu(torch.ones(3), alpha=0.0), "alpha cannot be 0")


# --- convolutions ---------------------------------------------------------------------------------------------------
CONVS = [  # spatial dims, in, out, kernel, keyword arguments, input spatial size
    (1, 4, 6, 3, {}, (11,)),
    (1, 4, 6, 3, {"stride": 2, "padding": 1}, (11,)),
    (1, 4, 6, 4, {"padding": "same", "dilation": 2}, (10,)),
    (1, 2, 3, 4, {"padding": "same"}, (7,)),  # an odd total padding: the extra zero goes at the end
    (1, 6, 6, 4, {"groups": 6, "padding": 3, "bias": False}, (9,)),  # Mamba's depthwise causal conv
    (1, 4, 6, 3, {"padding": "valid", "groups": 2, "dilation": 3}, (12,)),
    (2, 3, 4, 3, {}, (7, 8)),
    (2, 3, 4, (3, 2), {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2)}, (9, 7)),
    (2, 4, 6, 3, {"padding": "same", "groups": 2}, (6, 5)),
    (2, 3, 4, 1, {"bias": False}, (5, 5)),
    (3, 2, 4, 2, {"stride": 2, "padding": 1}, (4, 5, 3)),
]


def conv_pair(spatial, cin, cout, kernel, kwargs):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, f"Conv{spatial}d")(cin, cout, kernel, dtype=torch.float64, **kwargs)
    ours = copy_module(theirs, getattr(dg.nn, f"Conv{spatial}d")(cin, cout, kernel, dtype=dg.float64, **kwargs))
    return ours, theirs


@pytest.mark.parametrize("spatial,cin,cout,kernel,kwargs,size", CONVS)
def test_conv_forward_and_gradients_match_torch(spatial, cin, cout, kernel, kwargs, size):
    ours, theirs = conv_pair(spatial, cin, cout, kernel, kwargs)
    assert repr(ours) == repr(theirs)
    for batch in ((2,), ()):  # batched and unbatched
        d, t = both(rand(*batch, cin, *size, seed=2))
        out_d, out_t = ours(d), theirs(t)
        assert tuple(out_d.shape) == tuple(out_t.shape)
        close(out_d, out_t)
        backward_and_compare(ours, theirs, out_d, out_t, [(d, t)])


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv_padding_modes_match_torch(mode):
    ours, theirs = conv_pair(2, 2, 3, 3, {"padding": (1, 2), "padding_mode": mode})
    assert repr(ours) == repr(theirs)
    d, t = both(rand(2, 2, 5, 6, seed=3))
    close(ours(d), theirs(t))


TRANSPOSED = [  # spatial dims, in, out, kernel, keyword arguments, input spatial size
    (1, 4, 6, 3, {}, (5,)),
    (1, 4, 6, 3, {"stride": 2, "padding": 1, "output_padding": 1}, (5,)),
    (1, 4, 6, 4, {"stride": 3, "padding": 5, "groups": 2, "dilation": 2, "bias": False}, (6,)),
    (2, 3, 4, 3, {"stride": 2}, (4, 3)),
    (2, 4, 6, (3, 2), {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2), "groups": 2}, (3, 4)),
    (2, 2, 2, 2, {"dilation": 2, "padding": 1}, (3, 3)),
    (3, 2, 2, 2, {"stride": 2}, (2, 3, 2)),
]


@pytest.mark.parametrize("spatial,cin,cout,kernel,kwargs,size", TRANSPOSED)
def test_conv_transpose_forward_and_gradients_match_torch(spatial, cin, cout, kernel, kwargs, size):
    torch.manual_seed(1)
    theirs = getattr(torch.nn, f"ConvTranspose{spatial}d")(cin, cout, kernel, dtype=torch.float64, **kwargs)
    ours = copy_module(theirs, getattr(dg.nn, f"ConvTranspose{spatial}d")(cin, cout, kernel, dtype=dg.float64,
                                                                           **kwargs))
    assert repr(ours) == repr(theirs) and tuple(ours.weight.shape) == tuple(theirs.weight.shape)
    for batch in ((2,), ()):
        d, t = both(rand(*batch, cin, *size, seed=4))
        out_d, out_t = ours(d), theirs(t)
        close(out_d, out_t)
        backward_and_compare(ours, theirs, out_d, out_t, [(d, t)])


def test_conv_transpose_output_size_matches_torch():
    torch.manual_seed(2)
    theirs = torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, dtype=torch.float64)
    ours = copy_module(theirs, dg.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, dtype=dg.float64))
    d, t = both(rand(1, 2, 4, 4, seed=5))
    for size in ([8, 8], [1, 3, 7, 8]):
        close(ours(d, output_size=size), theirs(t, output_size=size))
    same_error(lambda: ours(d, output_size=[12, 12]), lambda: theirs(t, output_size=[12, 12]))


def test_conv_init_matches_torch_distribution_and_layout():
    for cls, shape in (("Conv1d", (6, 2, 3)), ("Conv2d", (6, 2, 3, 3)), ("ConvTranspose2d", (4, 3, 3, 3))):
        ours, theirs = getattr(dg.nn, cls)(4, 6, 3, groups=2), getattr(torch.nn, cls)(4, 6, 3, groups=2)
        assert tuple(ours.weight.shape) == tuple(theirs.weight.shape) == shape
        fan_in = shape[1] * int(np.prod(shape[2:]))
        bound = 1 / np.sqrt(fan_in)
        assert np.abs(ours.weight.detach().numpy()).max() <= bound and np.abs(ours.bias.detach().numpy()).max() <= bound
        assert list(ours.state_dict()) == list(theirs.state_dict())
        for attr in ("kernel_size", "stride", "padding", "dilation", "output_padding", "groups", "transposed",
                     "padding_mode"):
            assert getattr(ours, attr) == getattr(theirs, attr), attr
    c_d = dg.nn.Conv2d(3, 4, (3, 2), padding="same", dilation=(1, 3))
    c_t = torch.nn.Conv2d(3, 4, (3, 2), padding="same", dilation=(1, 3))
    assert list(c_d._reversed_padding_repeated_twice) == list(c_t._reversed_padding_repeated_twice)
    assert isinstance(dg.nn.Conv1d(1, 1, 1), dg.nn.modules.conv._ConvNd)


def test_conv_errors_match_torch():
    x_d, x_t = dg.ones(2, 5, 8, 8), torch.ones(2, 5, 8, 8)
    w_d, w_t = dg.ones(4, 3, 3, 3), torch.ones(4, 3, 3, 3)
    cases = [
        (lambda m, x, w: m.conv2d(x, w), "expected input\\[2, 5, 8, 8\\] to have 3 channels"),
        (lambda m, x, w: m.conv2d(x[:, :3, :2, :2], w), "Kernel size can't be greater than actual input size"),
        (lambda m, x, w: m.conv2d(x[0, 0], w), "Expected 3D \\(unbatched\\) or 4D \\(batched\\) input to conv2d"),
        (lambda m, x, w: m.conv2d(x[:, :3], w, x[0, 0, 0, :5]), "expected bias to be 1-dimensional with 4 elements"),
        (lambda m, x, w: m.conv2d(x[:, :3], w, stride=2, padding="same"), "not supported for strided convolutions"),
        (lambda m, x, w: m.conv2d(x[:, :3], w, padding="foo"), "Invalid padding string: 'foo'"),
        (lambda m, x, w: m.conv2d(x[:, :3], w, stride=(1, 1, 1)), "expected stride to be a single integer"),
        (lambda m, x, w: m.conv2d(x[:, :3], w, stride=0), "non-positive stride is not supported"),
        (lambda m, x, w: m.conv2d(x[:, :3], w, padding=-1), "negative padding is not supported"),
        (lambda m, x, w: m.conv2d(x[:, :3], w, dilation=0), "non-positive dilation is not supported"),
        (lambda m, x, w: m.conv1d(x[0], w[0, 0]), "weight should have at least three dimensions"),
        (lambda m, x, w: m.conv1d(x[0], w[:3, :, 0], groups=2), "expected weight to be divisible by 2"),
        (lambda m, x, w: m.conv_transpose2d(x, w), "Given transposed=1, weight of size \\[4, 3, 3, 3\\]"),
        (lambda m, x, w: m.conv_transpose1d(x[0, :4], w[:, :, 0], stride=2, output_padding=2),
         "output padding must be smaller than either stride or dilation"),
    ]
    for call, match in cases:
        same_error(lambda: call(F, x_d, w_d), lambda: call(TF, x_t, w_t), match)
    for args, kwargs in [((3, 4, 3), {"padding_mode": "x"}), ((3, 4, 3), {"groups": 2}), ((4, 3, 3), {"groups": 2}),
                         ((4, 4, 3), {"padding": "same", "stride": 2}), ((4, 4, 3), {"padding": "foo"}),
                         ((4, 4, 3), {"groups": 0})]:
        same_error(lambda: dg.nn.Conv2d(*args, **kwargs), lambda: torch.nn.Conv2d(*args, **kwargs))
    same_error(lambda: dg.nn.ConvTranspose2d(4, 4, 3, padding_mode="reflect"),
               lambda: torch.nn.ConvTranspose2d(4, 4, 3, padding_mode="reflect"), "Only \"zeros\" padding mode")


# --- batch and group norm -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,shape,kwargs", [
    ("BatchNorm1d", (6, 3), {}), ("BatchNorm1d", (4, 3, 5), {"momentum": None}),
    ("BatchNorm2d", (3, 4, 3, 5), {"affine": False}), ("BatchNorm2d", (2, 4, 3, 3), {"momentum": 0.3, "eps": 1e-3}),
    ("BatchNorm2d", (2, 4, 3, 3), {"track_running_stats": False}), ("BatchNorm1d", (5, 3), {"bias": False}),
    ("BatchNorm3d", (2, 2, 3, 2, 2), {})])
def test_batch_norm_training_steps_and_eval_match_torch(cls, shape, kwargs):
    theirs = getattr(torch.nn, cls)(shape[1], dtype=torch.float64, **kwargs)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.tensor(rand(*p.shape, seed=7)))
    ours = copy_module(theirs, getattr(dg.nn, cls)(shape[1], dtype=dg.float64, **kwargs))
    assert repr(ours) == repr(theirs)
    for step in range(3):  # training: batch statistics, running statistics updated
        d, t = both(rand(*shape, seed=10 + step, scale=2.0) + step)
        out_d, out_t = ours(d), theirs(t)
        close(out_d, out_t)
        backward_and_compare(ours, theirs, out_d, out_t, [(d, t)], rtol=1e-9, atol=1e-10)
        for name, buffer in theirs.named_buffers():
            close(dict(ours.named_buffers())[name], buffer)
    ours.eval()
    theirs.eval()
    d, t = both(rand(*shape, seed=20))
    out_d, out_t = ours(d), theirs(t)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(d.grad, t.grad)
    if theirs.num_batches_tracked is not None:
        assert ours.num_batches_tracked.item() == 3 and ours.num_batches_tracked.dtype == dg.int64


@pytest.mark.parametrize("groups,channels,shape,kwargs", [(2, 4, (3, 4, 5), {}), (1, 3, (2, 3, 4, 4), {}),
                                                          (3, 3, (2, 3), {"affine": False}),
                                                          (2, 6, (2, 6, 2, 3), {"eps": 1e-2, "bias": False})])
def test_group_norm_matches_torch(groups, channels, shape, kwargs):
    theirs = torch.nn.GroupNorm(groups, channels, dtype=torch.float64, **kwargs)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.tensor(rand(*p.shape, seed=3)))
    ours = copy_module(theirs, dg.nn.GroupNorm(groups, channels, dtype=dg.float64, **kwargs))
    assert repr(ours) == repr(theirs)
    d, t = both(rand(*shape, seed=4, scale=3.0) + 1)
    out_d, out_t = ours(d), theirs(t)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(d.grad, t.grad, rtol=1e-9, atol=1e-10)
    compare_grads(ours, theirs, rtol=1e-9, atol=1e-10)


def test_norm_errors_and_functional_forms_match_torch():
    cases = [
        (lambda m, nn, lib: m.group_norm(lib.ones(2, 6, 4), 4), "divisible by num_groups"),
        (lambda m, nn, lib: m.group_norm(lib.ones(2), 1), "Expected at least 2 dimensions"),
        (lambda m, nn, lib: m.group_norm(lib.ones(1, 2, 1), 2), "Expected more than 1 value per channel"),
        (lambda m, nn, lib: m.group_norm(lib.ones(2, 6, 4), 3, lib.ones(5)), "Expected weight to be a vector"),
        (lambda m, nn, lib: nn.GroupNorm(4, 6), "num_channels \\(6\\) must be divisible by num_groups \\(4\\)"),
        (lambda m, nn, lib: m.batch_norm(lib.ones(1, 3), lib.zeros(3), lib.ones(3), training=True),
         "Expected more than 1 value per channel when training"),
        (lambda m, nn, lib: m.batch_norm(lib.ones(2, 3), None, None), "running_mean must be defined in evaluation"),
        (lambda m, nn, lib: m.batch_norm(lib.ones(2, 4), lib.zeros(3), lib.ones(3)), "running_mean should contain 4"),
        (lambda m, nn, lib: nn.BatchNorm1d(3)(lib.ones(2, 3, 4, 5)), "expected 2D or 3D input \\(got 4D input\\)"),
        (lambda m, nn, lib: nn.BatchNorm2d(3)(lib.ones(2, 3, 4)), "expected 4D input \\(got 3D input\\)"),
    ]
    for call, match in cases:
        same_error(lambda: call(F, dg.nn, dg), lambda: call(TF, torch.nn, torch), match)
    x = rand(4, 3, 5, seed=6)
    mean_d, var_d = dg.zeros(3, dtype=dg.float64), dg.ones(3, dtype=dg.float64)
    mean_t, var_t = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    close(F.batch_norm(dg.tensor(x), mean_d, var_d, training=True, momentum=0.5),
          TF.batch_norm(torch.tensor(x), mean_t, var_t, training=True, momentum=0.5))
    close(mean_d, mean_t)
    close(var_d, var_t)
    close(F.batch_norm(dg.tensor(x), mean_d, var_d), TF.batch_norm(torch.tensor(x), mean_t, var_t))
    close(F.group_norm(dg.tensor(x), 3), TF.group_norm(torch.tensor(x), 3))


# --- recurrent layers -------------------------------------------------------------------------------------------------
RNNS = [("LSTM", {}), ("LSTM", {"num_layers": 2, "bidirectional": True}),
        ("LSTM", {"batch_first": True, "bias": False}), ("LSTM", {"proj_size": 3, "num_layers": 2}),
        ("LSTM", {"proj_size": 2, "bidirectional": True, "batch_first": True}),
        ("GRU", {}), ("GRU", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
        ("GRU", {"bias": False}), ("RNN", {"nonlinearity": "relu", "num_layers": 2}),
        ("RNN", {"bidirectional": True})]


def rnn_pair(cls, kwargs, input_size=4, hidden=5):
    torch.manual_seed(3)
    theirs = getattr(torch.nn, cls)(input_size, hidden, dtype=torch.float64, **kwargs)
    ours = copy_module(theirs, getattr(dg.nn, cls)(input_size, hidden, dtype=dg.float64, **kwargs))
    return ours, theirs


@pytest.mark.parametrize("cls,kwargs", RNNS, ids=[f"{c}{k}" for c, k in RNNS])
def test_recurrent_layers_match_torch(cls, kwargs):
    ours, theirs = rnn_pair(cls, kwargs)
    assert repr(ours) == repr(theirs) and ours._flat_weights_names == theirs._flat_weights_names
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    real = kwargs.get("proj_size") or 5
    batch_first = kwargs.get("batch_first", False)
    for with_state in (False, True):
        x = rand(3, 6, 4, seed=1) if batch_first else rand(6, 3, 4, seed=1)
        d, t = both(x)
        states_d = states_t = None
        if with_state:
            h_d, h_t = both(rand(layers, 3, real, seed=2))
            if cls == "LSTM":
                c_d, c_t = both(rand(layers, 3, 5, seed=3))
                states_d, states_t = (h_d, c_d), (h_t, c_t)
            else:
                states_d, states_t = h_d, h_t
        out_d, hidden_d = ours(d, states_d)
        out_t, hidden_t = theirs(t, states_t)
        flat_d = (out_d,) + (hidden_d if cls == "LSTM" else (hidden_d,))
        flat_t = (out_t,) + (hidden_t if cls == "LSTM" else (hidden_t,))
        for a, b in zip(flat_d, flat_t):
            assert tuple(a.shape) == tuple(b.shape)
            close(a, b)
        backward_and_compare(ours, theirs, flat_d, flat_t, [(d, t)])
        if with_state:
            close(h_d.grad, h_t.grad)
    x = rand(6, 4, seed=5)  # unbatched
    out_d, hidden_d = ours(dg.tensor(x))
    out_t, hidden_t = theirs(torch.tensor(x))
    close(out_d, out_t)
    close(hidden_d[0] if cls == "LSTM" else hidden_d, hidden_t[0] if cls == "LSTM" else hidden_t)


def test_recurrent_dropout_and_initialisation():
    ours, theirs = rnn_pair("LSTM", {"num_layers": 2, "dropout": 0.5})
    ours.eval()
    theirs.eval()
    x = rand(5, 2, 4, seed=6)
    close(ours(dg.tensor(x))[0], theirs(torch.tensor(x))[0])  # no dropout in eval mode
    ours.train()
    a, b = ours(dg.tensor(x))[0], ours(dg.tensor(x))[0]
    assert not np.allclose(a.detach().numpy(), b.detach().numpy())  # dropout between the layers in training
    lstm = dg.nn.LSTM(3, 8, num_layers=2, bidirectional=True)
    for p in lstm.parameters():
        assert np.abs(p.detach().numpy()).max() <= 1 / np.sqrt(8)
    assert len(lstm.all_weights) == 4 and lstm.weight_ih_l1_reverse.shape == (32, 16)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        dg.nn.GRU(3, 4, dropout=0.2)


@pytest.mark.parametrize("cls", ["LSTMCell", "GRUCell", "RNNCell"])
def test_recurrent_cells_match_torch(cls):
    torch.manual_seed(4)
    theirs = getattr(torch.nn, cls)(4, 5, dtype=torch.float64)
    ours = copy_module(theirs, getattr(dg.nn, cls)(4, 5, dtype=dg.float64))
    assert repr(ours) == repr(theirs)
    d, t = both(rand(3, 4, seed=1))
    h_d, h_t = both(rand(3, 5, seed=2))
    c_d, c_t = both(rand(3, 5, seed=3))
    hx_d, hx_t = ((h_d, c_d), (h_t, c_t)) if cls == "LSTMCell" else (h_d, h_t)
    for steps in range(2):  # two steps: the state's gradient flows through the first
        out_d, out_t = ours(d, hx_d), theirs(t, hx_t)
        hx_d, hx_t = out_d, out_t
    flat_d = out_d if cls == "LSTMCell" else (out_d,)
    flat_t = out_t if cls == "LSTMCell" else (out_t,)
    for a, b in zip(flat_d, flat_t):
        close(a, b)
    backward_both(tuple(flat_d), tuple(flat_t))
    close(d.grad, t.grad)
    close(h_d.grad, h_t.grad)
    compare_grads(ours, theirs)
    unbatched_d, unbatched_t = ours(dg.tensor(rand(4, seed=4))), theirs(torch.tensor(rand(4, seed=4)))
    close(unbatched_d[0] if cls == "LSTMCell" else unbatched_d, unbatched_t[0] if cls == "LSTMCell" else unbatched_t)
    assert repr(dg.nn.RNNCell(2, 3, bias=False, nonlinearity="relu")) == repr(
        torch.nn.RNNCell(2, 3, bias=False, nonlinearity="relu"))


def test_recurrent_errors_match_torch():
    cases = [
        (lambda lib: lib.nn.LSTM(3, 4)(lib.ones(5, 2, 3, 1)), "LSTM: Expected input to be 2D or 3D, got 4D instead"),
        (lambda lib: lib.nn.GRU(3, 4)(lib.ones(5, 2, 7)), "input.size\\(-1\\) must be equal to input_size"),
        (lambda lib: lib.nn.GRU(3, 4)(lib.ones(5, 2, 3), lib.ones(2, 2, 4)), "Expected hidden size \\(1, 2, 4\\)"),
        (lambda lib: lib.nn.LSTM(3, 4)(lib.ones(5, 2, 3), (lib.ones(1, 2, 4), lib.ones(1, 3, 4))),
         "Expected hidden\\[1\\] size"),
        (lambda lib: lib.nn.LSTM(3, 4)(lib.ones(5, 2, 3), (lib.ones(2, 4), lib.ones(2, 4))),
         "For batched 3-D input, hx and cx should also be 3-D"),
        (lambda lib: lib.nn.RNN(3, 4)(lib.ones(5, 3), lib.ones(1, 2, 4)), "For unbatched 2-D input, hx should"),
        (lambda lib: lib.nn.LSTM(3, 4)(lib.ones(5, 2, 3, dtype=lib.float64)), "does not match weight dtype"),
        (lambda lib: lib.nn.LSTMCell(3, 4)(lib.ones(2, 3, 3)), "LSTMCell: Expected input to be 1D or 2D"),
        (lambda lib: lib.nn.LSTMCell(3, 4)(lib.ones(2, 5)), "input has inconsistent input_size: got 5 expected 3"),
        (lambda lib: lib.nn.GRUCell(3, 4)(lib.ones(2, 3), lib.ones(3, 4)), "Input batch size 2 doesn't match hidden0"),
        (lambda lib: lib.nn.GRUCell(3, 4)(lib.ones(2, 3), lib.ones(2, 5)), "hidden0 has inconsistent hidden_size"),
        (lambda lib: lib.nn.LSTM(3, 4, dropout=2.0), "dropout should be a number in range"),
        (lambda lib: lib.nn.LSTM(3, 0), "hidden_size must be greater than zero"),
        (lambda lib: lib.nn.LSTM(3, 4, proj_size=4), "proj_size has to be smaller than hidden_size"),
        (lambda lib: lib.nn.GRU(3, 4, proj_size=2), "proj_size argument is only supported for LSTM"),
        (lambda lib: lib.nn.RNN(3, 4, nonlinearity="gelu"), "Unknown nonlinearity 'gelu'"),
    ]
    for call, match in cases:
        same_error(lambda: call(dg), lambda: call(torch), match)


# --- multi-head attention and the Transformer ---------------------------------------------------------------------
def mha_pair(embed=8, heads=2, **kwargs):
    torch.manual_seed(5)
    theirs = torch.nn.MultiheadAttention(embed, heads, dtype=torch.float64, **kwargs)
    ours = copy_module(theirs, dg.nn.MultiheadAttention(embed, heads, dtype=dg.float64, **kwargs))
    with torch.no_grad():  # non-zero biases, so their gradients and effects are compared
        for name, p in theirs.named_parameters():
            if "bias" in name:
                p.copy_(torch.tensor(rand(*p.shape, seed=hash(name) % 1000, scale=0.1)))
    return copy_module(theirs, ours), theirs


def mask_pair(array):
    return dg.tensor(array), torch.tensor(array)


MHAS = [({}, {}), ({"batch_first": True}, {"need_weights": False}), ({"kdim": 5, "vdim": 3}, {}),
        ({}, {"average_attn_weights": False}), ({"bias": False, "add_bias_kv": True}, {}),
        ({"add_zero_attn": True, "batch_first": True}, {}), ({"add_bias_kv": True, "add_zero_attn": True}, {})]


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")  # both libraries warn (bool + float)
@pytest.mark.parametrize("kwargs,call", MHAS, ids=[f"{k}{c}" for k, c in MHAS])
@pytest.mark.parametrize("masks", ["none", "bool", "float", "both"])
def test_multihead_attention_matches_torch(kwargs, call, masks):
    ours, theirs = mha_pair(**kwargs)
    assert repr(ours) == repr(theirs)
    batch_first = kwargs.get("batch_first", False)
    L, S, N = 4, 5, 3
    kdim, vdim = kwargs.get("kdim", 8), kwargs.get("vdim", 8)
    shape = (lambda seq, dim: (N, seq, dim)) if batch_first else (lambda seq, dim: (seq, N, dim))
    q_d, q_t = both(rand(*shape(L, 8), seed=1))
    k_d, k_t = both(rand(*shape(S, kdim), seed=2))
    v_d, v_t = both(rand(*shape(S, vdim), seed=3))
    extra_d, extra_t = {}, {}
    padding = np.zeros((N, S), bool)
    padding[0, -2:] = True
    attn = np.triu(np.ones((L, S), bool), 2)
    if masks in ("bool", "both"):
        extra_d["key_padding_mask"], extra_t["key_padding_mask"] = mask_pair(padding)
    if masks in ("float", "both"):
        extra_d["attn_mask"], extra_t["attn_mask"] = mask_pair(np.where(attn, -1e9, rand(L, S, seed=4) * 0.1))
    out_d, w_d = ours(q_d, k_d, v_d, **extra_d, **call)
    out_t, w_t = theirs(q_t, k_t, v_t, **extra_t, **call)
    close(out_d, out_t)
    assert (w_d is None) == (w_t is None)
    if w_t is not None:
        close(w_d, w_t)
    backward_both((out_d, w_d), (out_t, w_t))
    for a, b in ((q_d, q_t), (k_d, k_t), (v_d, v_t)):
        close(a.grad, b.grad)
    compare_grads(ours, theirs)


def test_multihead_self_attention_masks_and_unbatched_match_torch():
    ours, theirs = mha_pair(batch_first=True)
    x_d, x_t = both(rand(2, 4, 8, seed=1))
    causal = np.triu(np.ones((4, 4), bool), 1)
    for masks in ({"attn_mask": causal}, {"attn_mask": causal, "is_causal": True},
                  {"attn_mask": np.repeat(causal[None], 4, 0)},
                  {"key_padding_mask": np.array([[0, 0, 0, 1]] * 2, bool)}):
        for need in (True, False):
            md = {k: dg.tensor(v) if isinstance(v, np.ndarray) else v for k, v in masks.items()}
            mt = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in masks.items()}
            close(ours(x_d, x_d, x_d, need_weights=need, **md)[0], theirs(x_t, x_t, x_t, need_weights=need, **mt)[0])
    u_d, u_t = both(rand(4, 8, seed=2))
    for need in (True, False):
        a, b = ours(u_d, u_d, u_d, need_weights=need), theirs(u_t, u_t, u_t, need_weights=need)
        close(a[0], b[0])
    assert list(dg.nn.MultiheadAttention(8, 2, kdim=3).state_dict()) == list(
        torch.nn.MultiheadAttention(8, 2, kdim=3).state_dict())


def test_multihead_attention_errors_match_torch():
    def run(lib, q, k, v, **kw):
        m = lib.nn.MultiheadAttention(8, 2)
        return m(lib.ones(*q), lib.ones(*k), lib.ones(*v), **kw)

    cases = [
        (lambda lib: run(lib, (4, 2, 8), (5, 8), (5, 2, 8)), "expected `key` and `value` to be 3-D"),
        (lambda lib: run(lib, (4, 2, 8), (5, 2, 8), (5, 2, 8), attn_mask=lib.ones(3, 3, dtype=lib.bool)),
         "The shape of the 2D attn_mask is"),
        (lambda lib: run(lib, (4, 2, 8), (5, 2, 8), (5, 2, 8), attn_mask=lib.ones(3, 4, 5, dtype=lib.bool)),
         "The shape of the 3D attn_mask is"),
        (lambda lib: run(lib, (4, 2, 8), (5, 2, 8), (5, 2, 8), is_causal=True), "Need attn_mask if specifying"),
        (lambda lib: run(lib, (4, 2, 6), (5, 2, 6), (5, 2, 6)), "was expecting embedding dimension of 8"),
        (lambda lib: run(lib, (4, 2, 8), (5, 2, 8), (5, 2, 8), key_padding_mask=lib.ones(2, 5, dtype=lib.int64)),
         "only bool and floating types of key_padding_mask"),
        (lambda lib: run(lib, (4, 2, 8), (5, 2, 8), (5, 2, 8), key_padding_mask=lib.ones(2, 4, dtype=lib.bool)),
         "Expected key_padded_mask.shape\\[1\\] to be 5, but got 4"),
        (lambda lib: lib.nn.MultiheadAttention(8, 3), "embed_dim must be divisible by num_heads"),
        (lambda lib: lib.nn.MultiheadAttention(0, 3), "embed_dim and num_heads must be greater than 0"),
    ]
    for call, match in cases:
        same_error(lambda: call(dg), lambda: call(torch), match)


def transformer_pair(cls, *args, **kwargs):
    torch.manual_seed(6)
    theirs = getattr(torch.nn, cls)(*args, dtype=torch.float64, **kwargs)
    ours = copy_module(theirs, getattr(dg.nn, cls)(*args, dtype=dg.float64, **kwargs))
    theirs.eval()
    ours.eval()
    return ours, theirs


@pytest.mark.parametrize("kwargs", [{}, {"norm_first": True, "activation": "gelu", "batch_first": True}])
def test_transformer_layers_match_torch(kwargs):
    batch_first = kwargs.get("batch_first", False)
    seq = (lambda n: (2, n, 8)) if batch_first else (lambda n: (n, 2, 8))
    src_d, src_t = both(rand(*seq(5), seed=1))
    tgt_d, tgt_t = both(rand(*seq(4), seed=2))
    causal = np.triu(np.full((4, 4), -np.inf), 1)
    padding = np.array([[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]], bool)
    ours, theirs = transformer_pair("TransformerEncoderLayer", 8, 2, 16, **kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    out = (ours(src_d, src_key_padding_mask=dg.tensor(padding)),
           theirs(src_t, src_key_padding_mask=torch.tensor(padding)))
    close(*out)
    backward_both(*out)
    close(src_d.grad, src_t.grad)
    compare_grads(ours, theirs)
    ours, theirs = transformer_pair("TransformerDecoderLayer", 8, 2, 16, **kwargs)
    out = (ours(tgt_d, src_d, tgt_mask=dg.tensor(causal), memory_key_padding_mask=dg.tensor(padding)),
           theirs(tgt_t, src_t, tgt_mask=torch.tensor(causal), memory_key_padding_mask=torch.tensor(padding)))
    close(*out)
    backward_both(*out)
    close(tgt_d.grad, tgt_t.grad)
    compare_grads(ours, theirs)
    ours, theirs = transformer_pair("Transformer", 8, 2, 2, 1, 16, **kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note about nested tensors and norm_first
        mask_d = dg.nn.Transformer.generate_square_subsequent_mask(4, dtype=dg.float64)
        mask_t = torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64)
        out = ours(src_d, tgt_d, tgt_mask=mask_d), theirs(src_t, tgt_t, tgt_mask=mask_t)
    close(*out)
    backward_and_compare(ours, theirs, *out)


def test_transformer_construction_and_errors_match_torch():
    torch_layer = torch.nn.TransformerEncoderLayer(8, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.nn.TransformerEncoder(torch_layer, 3, norm=torch.nn.LayerNorm(8))
    ours = dg.nn.TransformerEncoder(dg.nn.TransformerEncoderLayer(8, 2), 3, norm=dg.nn.LayerNorm(8))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.layers[0].linear1.weight is not ours.layers[1].linear1.weight
    torch.manual_seed(7)
    theirs = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, 16, dtype=torch.float64), 2,
                                         norm=torch.nn.LayerNorm(8, dtype=torch.float64)).eval()
    ours = copy_module(theirs, dg.nn.TransformerDecoder(dg.nn.TransformerDecoderLayer(8, 2, 16, dtype=dg.float64), 2,
                                                        norm=dg.nn.LayerNorm(8, dtype=dg.float64))).eval()
    memory, tgt = rand(5, 2, 8, seed=1), rand(3, 2, 8, seed=2)
    causal = np.triu(np.full((3, 3), -np.inf), 1)
    close(ours(dg.tensor(tgt), dg.tensor(memory), tgt_mask=dg.tensor(causal)),
          theirs(torch.tensor(tgt), torch.tensor(memory), tgt_mask=torch.tensor(causal)))
    np.testing.assert_array_equal(dg.nn.Transformer.generate_square_subsequent_mask(3).numpy(),
                                  torch.nn.Transformer.generate_square_subsequent_mask(3).numpy())
    same_error(lambda: dg.nn.TransformerEncoderLayer(8, 2, activation="tanh"),
               lambda: torch.nn.TransformerEncoderLayer(8, 2, activation="tanh"), "activation should be relu/gelu")
    for lib in (dg, torch):
        model = lib.nn.Transformer(8, 2, 1, 1, 16)
        with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
            model(lib.ones(5, 2, 8), lib.ones(4, 3, 8))
        with pytest.raises(RuntimeError, match="the feature number of src and tgt must be equal to d_model"):
            model(lib.ones(5, 2, 6), lib.ones(4, 2, 6))


def test_exported_where_torch_exports_them():
    import dygrad.nn.modules as modules
    for name in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"):
        assert getattr(modules.conv, name) is getattr(dg.nn, name)
    for path, names in ((modules.batchnorm, ("BatchNorm1d", "BatchNorm2d")), (modules.normalization, ("GroupNorm",)),
                        (modules.rnn, ("LSTM", "GRU", "LSTMCell", "GRUCell", "RNNBase", "RNNCellBase")),
                        (modules.transformer, ("Transformer", "TransformerEncoderLayer", "TransformerDecoder")),
                        (modules.activation, ("MultiheadAttention", "ELU", "Mish"))):
        for name in names:
            assert getattr(path, name) is getattr(dg.nn, name), name
    for name in ("elu", "selu", "celu", "softplus", "mish", "logsigmoid", "conv1d", "conv2d", "conv_transpose1d",
                 "conv_transpose2d", "group_norm", "batch_norm", "multi_head_attention_forward"):
        assert callable(getattr(F, name)), name
