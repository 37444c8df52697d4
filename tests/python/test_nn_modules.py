"""The nn surface against torch 2.13: containers, activation and loss modules with their functional forms,
Module features (buffers, tying, casts, hooks, state_dict hooks), nn.init, nn.utils, F.pad / one_hot / normalize."""
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import dygrad as dg
import dygrad.nn.functional as F
from peer import assert_matches, tensors_from

rng = np.random.default_rng(13)


def pair(shape, requires_grad=False, low=None, high=None, dtype=np.float64):
    a = (rng.standard_normal(shape) if low is None else rng.uniform(low, high, shape)).astype(dtype)
    return tensors_from(a, requires_grad)


def ints(shape, high, low=0):
    a = rng.integers(low, high, shape).astype(np.int64)
    return dg.tensor(a), torch.tensor(a)


def close(d, t, rtol=1e-7, atol=1e-10):
    assert_matches(d, t, rtol, atol)


def finite_difference_check(f, x, eps=1e-6, rtol=1e-5, atol=1e-8):
    """dygrad's gradient of the scalar f(x) (x a float64 NumPy array) against central differences."""
    x_d = dg.tensor(x).requires_grad_(True)
    f(x_d).backward()
    numeric = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[index] += eps
        minus[index] -= eps
        numeric[index] = (f(dg.tensor(plus)).item() - f(dg.tensor(minus)).item()) / (2 * eps)
    np.testing.assert_allclose(x_d.grad.numpy(), numeric, rtol=rtol, atol=atol)


def state_keys(module):
    return list(module.state_dict().keys())


# --- containers and simple layers -----------------------------------------------------------------------------
def test_module_dict_matches_torch():
    d = dg.nn.ModuleDict({"b": dg.nn.Linear(2, 3), "a": dg.nn.Identity()})
    t = torch.nn.ModuleDict({"b": torch.nn.Linear(2, 3), "a": torch.nn.Identity()})
    assert list(d.keys()) == list(t.keys()) == ["b", "a"]
    d["c"] = dg.nn.Linear(3, 1)
    t["c"] = torch.nn.Linear(3, 1)
    assert state_keys(d) == state_keys(t)
    assert len(d) == 3 and "c" in d and list(d) == ["b", "a", "c"]
    assert isinstance(d.pop("a"), dg.nn.Identity) and len(d) == 2
    d.update([("e", dg.nn.Identity())])
    assert list(d.keys()) == ["b", "c", "e"]
    with pytest.raises(TypeError):
        d.update(3)
    with pytest.raises(ValueError):
        d.update([("x", dg.nn.Identity(), 1)])


def test_parameter_list_and_dict_match_torch():
    pl = dg.nn.ParameterList([dg.nn.Parameter(dg.ones(2)), dg.zeros(3)])
    tl = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2)), torch.zeros(3)])
    assert isinstance(pl[1], dg.nn.Parameter) and pl[1].requires_grad
    pl.append(dg.ones(1))
    tl.append(torch.ones(1))
    assert state_keys(pl) == state_keys(tl) == ["0", "1", "2"]
    assert len(pl) == 3 and len(list(pl.parameters())) == 3
    assert [tuple(p.shape) for p in pl] == [(2,), (3,), (1,)]
    assert len(pl[1:]) == 2 and pl[-1] is pl[2]
    with pytest.raises(IndexError):
        pl[3]
    pd = dg.nn.ParameterDict({"w": dg.ones(2), "b": dg.nn.Parameter(dg.zeros(1))})
    td = torch.nn.ParameterDict({"w": torch.ones(2), "b": torch.nn.Parameter(torch.zeros(1))})
    assert state_keys(pd) == state_keys(td)
    pd["z"] = dg.ones(3)
    td["z"] = torch.ones(3)
    assert state_keys(pd) == state_keys(td) and list(pd.keys()) == list(td.keys())
    assert isinstance(pd["w"], dg.nn.Parameter) and "z" in pd and len(pd) == 3
    del pd["w"]
    assert list(pd.keys()) == ["b", "z"] and len(list(pd.parameters())) == 2


def test_identity_flatten_unflatten():
    x_d, x_t = pair((2, 3, 4, 5))
    close(dg.nn.Identity(3, unused=True)(x_d), torch.nn.Identity(3, unused=True)(x_t))
    close(dg.nn.Flatten()(x_d), torch.nn.Flatten()(x_t))
    close(dg.nn.Flatten(0, 2)(x_d), torch.nn.Flatten(0, 2)(x_t))
    close(dg.nn.Unflatten(1, (3, 1))(x_d), torch.nn.Unflatten(1, (3, 1))(x_t))
    close(dg.nn.Unflatten(-1, (-1, 5))(x_d), torch.nn.Unflatten(-1, (-1, 5))(x_t))
    with pytest.raises(TypeError):
        dg.nn.Unflatten(1, 3)
    with pytest.raises(TypeError):
        dg.nn.Unflatten(1, (3, 1.0))


@pytest.mark.parametrize("name,kwargs", [("GELU", {}), ("GELU", {"approximate": "tanh"}), ("SiLU", {}), ("ReLU", {}),
                                         ("Tanh", {}), ("Sigmoid", {}), ("Softmax", {"dim": 1}),
                                         ("LogSoftmax", {"dim": -1}), ("Softmax", {"dim": 0})])
def test_activation_modules(name, kwargs):
    x_d, x_t = pair((3, 5), requires_grad=True)
    m_d, m_t = getattr(dg.nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs)
    out_d, out_t = m_d(x_d), m_t(x_t)
    close(out_d, out_t, rtol=1e-6)
    w = rng.standard_normal((3, 5))
    out_d.backward(dg.tensor(w))
    out_t.backward(torch.tensor(w))
    close(x_d.grad, x_t.grad, rtol=1e-6)
    assert repr(m_d) == repr(m_t)


@pytest.mark.parametrize("name", ["ReLU", "SiLU"])
def test_inplace_activations(name):
    x_d, x_t = pair((4, 3))
    out_d = getattr(dg.nn, name)(inplace=True)(x_d)
    out_t = getattr(torch.nn, name)(inplace=True)(x_t)
    assert out_d is x_d
    close(x_d, x_t, rtol=1e-6)
    assert repr(getattr(dg.nn, name)(inplace=True)) == repr(getattr(torch.nn, name)(inplace=True))
    # through autograd: a non-leaf activated in place
    y_d, y_t = pair((4, 3), requires_grad=True)
    h_d, h_t = y_d * 2.0, y_t * 2.0
    getattr(F, name.lower())(h_d, inplace=True).sum().backward()
    getattr(TF, name.lower())(h_t, inplace=True).sum().backward()
    close(y_d.grad, y_t.grad, rtol=1e-6)


def test_softmax_implicit_dim_warns_like_torch():
    x_d, x_t = pair((2, 3, 4))
    for m_d, m_t in [(dg.nn.Softmax(), torch.nn.Softmax()), (dg.nn.LogSoftmax(), torch.nn.LogSoftmax())]:
        with pytest.warns(UserWarning, match="Implicit dimension"):
            out_d = m_d(x_d)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out_t = m_t(x_t)
        close(out_d, out_t)
    close(F.softmax(x_d, 1, dtype=dg.float32), TF.softmax(x_t, 1, dtype=torch.float32), rtol=1e-6)


# --- losses -------------------------------------------------------------------------------------------------------
REDUCTIONS = ["mean", "sum", "none"]


def backward_both(out_d, out_t):
    w = rng.standard_normal(tuple(out_t.shape))
    out_d.backward(dg.tensor(w))
    out_t.backward(torch.tensor(w))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss"])
def test_pointwise_losses(name, reduction):
    x_d, x_t = pair((4, 5), requires_grad=True)
    y_d, y_t = pair((4, 5), requires_grad=True)
    out_d, out_t = getattr(F, name)(x_d, y_d, reduction=reduction), getattr(TF, name)(x_t, y_t, reduction=reduction)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    close(y_d.grad, y_t.grad)
    module = {"mse_loss": "MSELoss", "l1_loss": "L1Loss"}[name]
    close(getattr(dg.nn, module)(reduction=reduction)(x_d, y_d), getattr(torch.nn, module)(reduction=reduction)(x_t, y_t))


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss"])
def test_pointwise_losses_weight_broadcast_legacy_and_errors(name):
    x_d, x_t = pair((3, 4), requires_grad=True)
    y_d, y_t = pair((4,))
    with pytest.warns(UserWarning, match="different to the input size"):
        out_d = getattr(F, name)(x_d, y_d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        close(out_d, getattr(TF, name)(x_t, y_t))
    w_d, w_t = pair((3, 4), low=0.1, high=2.0)
    z_d, z_t = pair((3, 4))
    for reduction in REDUCTIONS:
        close(getattr(F, name)(x_d, z_d, reduction=reduction, weight=w_d),
              getattr(TF, name)(x_t, z_t, reduction=reduction, weight=w_t))
    close(getattr(F, name)(x_d, z_d, size_average=False), getattr(TF, name)(x_t, z_t, size_average=False))
    close(getattr(F, name)(x_d, z_d, reduce=False), getattr(TF, name)(x_t, z_t, reduce=False))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        getattr(F, name)(x_d, z_d, reduction="avg")
    with pytest.raises(ValueError, match="Weights and input must have the same size"):
        getattr(F, name)(x_d, z_d, weight=dg.ones(4))
    with pytest.raises((RuntimeError, ValueError), match="cannot be broadcast"):  # dygrad's broadcast error
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            getattr(F, name)(x_d, dg.ones(2, 4))
    assert getattr(F, name)(x_d.float(), z_d).dtype == dg.float64  # promotion, as torch
    with pytest.raises(NotImplementedError):
        F.mse_loss(dg.ones(3, dtype=dg.int64), dg.ones(3, dtype=dg.int64))


def test_pointwise_losses_finite_differences():
    y = dg.tensor(rng.standard_normal((3, 4)))
    finite_difference_check(lambda x: F.mse_loss(x, y), rng.standard_normal((3, 4)))
    finite_difference_check(lambda x: F.l1_loss(x, y, reduction="sum"), rng.standard_normal((3, 4)))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape", [(5, 4), (2, 4, 3), (4,)])
def test_nll_loss(shape, weighted, reduction):
    x_d, x_t = pair(shape, requires_grad=True)
    classes = shape[1] if len(shape) > 1 else shape[0]
    target_shape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
    t = rng.integers(0, classes, target_shape).astype(np.int64)
    if t.ndim:
        t.flat[0] = -100  # one ignored entry
    w = rng.uniform(0.5, 2.0, classes) if weighted else None
    kwargs = dict(reduction=reduction)
    out_d = F.nll_loss(x_d, dg.tensor(t), weight=None if w is None else dg.tensor(w), **kwargs)
    out_t = TF.nll_loss(x_t, torch.tensor(t), weight=None if w is None else torch.tensor(w), **kwargs)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    m_d = dg.nn.NLLLoss(weight=None if w is None else dg.tensor(w), reduction=reduction)
    m_t = torch.nn.NLLLoss(weight=None if w is None else torch.tensor(w), reduction=reduction)
    close(m_d(x_d, dg.tensor(t)), m_t(x_t, torch.tensor(t)))
    assert state_keys(m_d) == state_keys(m_t)


def test_nll_loss_ignore_index_all_ignored_and_errors():
    x_d, x_t = pair((3, 4))
    t_d, t_t = dg.tensor(np.array([1, 2, 1])), torch.tensor([1, 2, 1])
    close(F.nll_loss(x_d, t_d, ignore_index=1), TF.nll_loss(x_t, t_t, ignore_index=1))
    all_ignored = np.array([-100, -100, -100])
    assert math.isnan(F.nll_loss(x_d, dg.tensor(all_ignored)).item())  # 0 / 0, as torch
    assert F.nll_loss(x_d, dg.tensor(all_ignored), reduction="sum").item() == 0.0
    with pytest.raises(ValueError, match=r"\[nll_loss\] Expected input batch_size \(3\) to match target batch_size \(2\)"):
        F.nll_loss(x_d, dg.tensor(np.array([0, 1])))
    with pytest.raises(RuntimeError, match="expected target dtype to be Long"):
        F.nll_loss(x_d, dg.tensor(np.array([0, 1, 2], dtype=np.int32)))
    with pytest.raises(RuntimeError, match="weight tensor should be defined either for all 4 classes"):
        F.nll_loss(x_d, t_d, weight=dg.ones(3, dtype=dg.float64))
    with pytest.raises(IndexError, match=r"\[nll_loss\] Target 9 is out of bounds"):  # deferred to the read
        F.nll_loss(x_d, dg.tensor(np.array([0, 1, 9]))).item()
    with pytest.raises(IndexError, match=r"\[nll_loss\] Target -3 is out of bounds"):
        F.cross_entropy(x_d, dg.tensor(np.array([0, -3, 1])), label_smoothing=0.1).item()


def test_nll_loss_finite_differences_and_one_task():
    t = dg.tensor(np.array([1, 0, 3]))
    w = dg.tensor(rng.uniform(0.5, 2.0, 4))
    finite_difference_check(lambda x: F.nll_loss(x, t, weight=w), rng.standard_normal((3, 4)))
    x = dg.randn(3, 4, dtype=dg.float64, requires_grad=True)
    dg.synchronize()
    with dg.profiler.profile() as prof:
        F.nll_loss(x, t, weight=w).backward()
        dg.synchronize()
    counts = {row.name: row.count for row in prof.key_averages()}
    assert counts.get("nll_loss") == 1 and counts.get("nll_loss_backward") == 1, counts


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted,smoothing", [(False, 0.0), (True, 0.0), (False, 0.2), (True, 0.3)])
@pytest.mark.parametrize("shape", [(6, 5), (2, 5, 3), (5,)])
def test_cross_entropy_weights_and_label_smoothing(shape, weighted, smoothing, reduction):
    x_d, x_t = pair(shape, requires_grad=True)
    classes = shape[1] if len(shape) > 1 else shape[0]
    target_shape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
    t = rng.integers(0, classes, target_shape).astype(np.int64)
    if t.ndim:
        t.flat[-1] = 2
        t.flat[0] = 2  # ignore_index=2 below
    w = rng.uniform(0.5, 2.0, classes) if weighted else None
    kwargs = dict(reduction=reduction, label_smoothing=smoothing, ignore_index=2)
    out_d = F.cross_entropy(x_d, dg.tensor(t), weight=None if w is None else dg.tensor(w), **kwargs)
    out_t = TF.cross_entropy(x_t, torch.tensor(t), weight=None if w is None else torch.tensor(w), **kwargs)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    m_d = dg.nn.CrossEntropyLoss(weight=None if w is None else dg.tensor(w), **kwargs)
    m_t = torch.nn.CrossEntropyLoss(weight=None if w is None else torch.tensor(w), **kwargs)
    close(m_d(x_d, dg.tensor(t)), m_t(x_t, torch.tensor(t)))
    assert state_keys(m_d) == state_keys(m_t)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted,smoothing", [(False, 0.0), (True, 0.1)])
def test_cross_entropy_class_probabilities(weighted, smoothing, reduction):
    x_d, x_t = pair((4, 3, 2), requires_grad=True)
    p = rng.uniform(0, 1, (4, 3, 2))
    p_d, p_t = tensors_from(p / p.sum(1, keepdims=True), requires_grad=True)
    w = rng.uniform(0.5, 2.0, 3) if weighted else None
    out_d = F.cross_entropy(x_d, p_d, weight=None if w is None else dg.tensor(w), reduction=reduction,
                            label_smoothing=smoothing)
    out_t = TF.cross_entropy(x_t, p_t, weight=None if w is None else torch.tensor(w), reduction=reduction,
                             label_smoothing=smoothing)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    close(p_d.grad, p_t.grad)


def test_cross_entropy_errors_and_legacy_arguments():
    x_d, x_t = pair((3, 4))
    t_d, t_t = ints((3,), 4)
    with pytest.raises(RuntimeError, match="label_smoothing must be between 0.0 and 1.0. Got: 1.5"):
        F.cross_entropy(x_d, t_d, label_smoothing=1.5)
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.cross_entropy(x_d, t_d, reduction="avg")
    close(F.cross_entropy(x_d, t_d, size_average=False), TF.cross_entropy(x_t, t_t, size_average=False))
    close(dg.nn.CrossEntropyLoss(reduce=False)(x_d, t_d), torch.nn.CrossEntropyLoss(reduce=False)(x_t, t_t))


def test_cross_entropy_finite_differences():
    t = dg.tensor(np.array([1, 0, 3]))
    w = dg.tensor(rng.uniform(0.5, 2.0, 4))
    finite_difference_check(lambda x: F.cross_entropy(x, t, weight=w, label_smoothing=0.25),
                            rng.standard_normal((3, 4)))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted,pos", [(False, False), (True, False), (False, True), (True, True)])
def test_bce_with_logits(weighted, pos, reduction):
    x = rng.standard_normal((4, 3)) * 5  # large logits: the stable formula
    x[0, 0], x[1, 1] = 40.0, -40.0
    x_d, x_t = tensors_from(x, requires_grad=True)
    y_d, y_t = pair((4, 3), requires_grad=True, low=0.0, high=1.0)
    w_d, w_t = pair((4, 3), low=0.5, high=2.0) if weighted else (None, None)
    pw_d, pw_t = pair((3,), low=0.5, high=3.0) if pos else (None, None)
    out_d = F.binary_cross_entropy_with_logits(x_d, y_d, w_d, reduction=reduction, pos_weight=pw_d)
    out_t = TF.binary_cross_entropy_with_logits(x_t, y_t, w_t, reduction=reduction, pos_weight=pw_t)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)
    close(y_d.grad, y_t.grad)
    m_d = dg.nn.BCEWithLogitsLoss(weight=w_d, reduction=reduction, pos_weight=pw_d)
    m_t = torch.nn.BCEWithLogitsLoss(weight=w_t, reduction=reduction, pos_weight=pw_t)
    close(m_d(x_d, y_d), m_t(x_t, y_t))
    assert state_keys(m_d) == state_keys(m_t)


def test_bce_with_logits_errors_and_finite_differences():
    x_d, _ = pair((3, 4))
    with pytest.raises(ValueError, match=r"Target size \(dygrad.Size\(\[4\]\)\) must be the same as input size"):
        F.binary_cross_entropy_with_logits(x_d, dg.ones(4, dtype=dg.float64))
    with pytest.raises(RuntimeError):
        F.binary_cross_entropy_with_logits(x_d, dg.ones(3, 4, dtype=dg.int64))
    y = dg.tensor(rng.uniform(0, 1, (3, 4)))
    pw = dg.tensor(rng.uniform(0.5, 2.0, 4))
    finite_difference_check(lambda x: F.binary_cross_entropy_with_logits(x, y, pos_weight=pw),
                            rng.standard_normal((3, 4)))


def test_loss_dtypes_float32():
    x_d, x_t = pair((4, 3), dtype=np.float32)
    t_d, t_t = ints((4,), 3)
    close(F.cross_entropy(x_d, t_d, label_smoothing=0.1), TF.cross_entropy(x_t, t_t, label_smoothing=0.1), rtol=1e-5)
    close(F.nll_loss(x_d, t_d), TF.nll_loss(x_t, t_t), rtol=1e-6)
    close(F.mse_loss(x_d, x_d * 0.5), TF.mse_loss(x_t, x_t * 0.5), rtol=1e-6)


# --- Module features ------------------------------------------------------------------------------------------------
class Tied(dg.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = dg.nn.Embedding(5, 3)
        self.head = dg.nn.Linear(3, 5, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("scale", dg.ones(3))
        self.register_buffer("cache", dg.zeros(2), persistent=False)


class TiedTorch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 3)
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("scale", torch.ones(3))
        self.register_buffer("cache", torch.zeros(2), persistent=False)


def test_weight_tying_and_buffers_match_torch():
    m, t = Tied(), TiedTorch()
    assert m.head.weight is m.emb.weight
    assert len(list(m.parameters())) == len(list(t.parameters())) == 1
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert state_keys(m) == state_keys(t)  # both names of the tied weight; no non-persistent buffer
    assert [n for n, _ in m.named_buffers()] == [n for n, _ in t.named_buffers()] == ["scale", "cache"]
    sd = m.state_dict()
    sd["emb.weight"] = dg.zeros(5, 3)
    sd["head.weight"] = dg.zeros(5, 3)
    m.load_state_dict(sd)
    assert m.head.weight.sum().item() == 0.0
    with pytest.raises(RuntimeError, match='Unexpected key\\(s\\) in state_dict: "cache"'):
        m.load_state_dict({**m.state_dict(), "cache": dg.zeros(2)})


def test_requires_grad_zero_grad_and_casts():
    m = dg.nn.Sequential(dg.nn.Linear(3, 4), dg.nn.Linear(4, 2))
    m.register_buffer("steps", dg.zeros(1, dtype=dg.int64))
    m(dg.ones(2, 3)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad(set_to_none=False)
    assert all(p.grad is not None and p.grad.abs().sum().item() == 0 for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    assert m.requires_grad_(False) is m and not any(p.requires_grad for p in m.parameters())
    m.requires_grad_()
    for cast, dtype in [("half", dg.float16), ("bfloat16", dg.bfloat16), ("double", dg.float64), ("float", dg.float32)]:
        weight = m[0].weight
        assert getattr(m, cast)() is m
        assert m[0].weight is weight and m[0].weight.dtype == dtype and isinstance(m[0].weight, dg.nn.Parameter)
        assert m.steps.dtype == dg.int64  # integer buffers keep their dtype, as torch
    m.to(dg.float64)
    assert m[1].bias.dtype == dg.float64
    m.to(dg.ones(1, dtype=dg.float32), non_blocking=True)
    assert m[1].bias.dtype == dg.float32
    with pytest.raises(TypeError, match="floating point"):
        m.to(dg.int32)


def test_forward_hooks_match_torch_order_and_semantics():
    calls = []
    for lib in (dg, torch):
        m = lib.nn.Linear(3, 2)
        log = []
        h1 = m.register_forward_pre_hook(lambda mod, args: log.append("pre") or (args[0] * 2,))
        h2 = m.register_forward_pre_hook(lambda mod, args, kwargs: log.append("pre_kw") or None, with_kwargs=True,
                                         prepend=True)
        h3 = m.register_forward_hook(lambda mod, args, out: log.append("post") or out + 1)
        h4 = m.register_forward_hook(lambda mod, args, kwargs, out: log.append(("post_kw", len(kwargs))),
                                     with_kwargs=True, prepend=True)
        x = lib.ones(1, 3)
        out = m(x)
        with lib.no_grad():
            expected = lib.nn.functional.linear(x * 2, m.weight, m.bias) + 1
        assert np.allclose(out.detach().numpy(), expected.numpy())
        for h in (h1, h2, h3, h4):
            h.remove()
        m(x)
        calls.append(log)
    assert calls[0] == calls[1] == ["pre_kw", "pre", ("post_kw", 0), "post"]


def test_forward_hook_always_call_runs_when_forward_raises():
    class Boom(dg.nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    seen = []
    m = Boom()
    m.register_forward_hook(lambda mod, args, out: seen.append("always"), always_call=True)
    m.register_forward_hook(lambda mod, args, out: seen.append("normal"))
    with pytest.raises(ValueError, match="boom"):
        m(dg.ones(1))
    assert seen == ["always"]
    with m.register_forward_hook(lambda mod, args, out: seen.append("ctx")):
        pass  # a handle is a context manager: removed on exit
    with pytest.raises(ValueError):
        m(dg.ones(1))
    assert seen == ["always", "always"]


def test_full_backward_hook_matches_torch():
    results = []
    for lib in (dg, torch):
        lib.manual_seed(0)
        m = lib.nn.Linear(3, 2)
        w = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
        with lib.no_grad():
            m.weight.copy_(lib.tensor(w))
            m.bias.fill_(0.5)
        seen = {}

        def hook(mod, grad_input, grad_output, seen=seen):
            seen["in"] = [g.numpy().copy() for g in grad_input]
            seen["out"] = [g.numpy().copy() for g in grad_output]
            return (grad_input[0] * 3,)

        def pre_hook(mod, grad_output, seen=seen):
            seen["pre"] = len(grad_output)

        m.register_full_backward_hook(hook)
        m.register_full_backward_pre_hook(pre_hook)
        x = lib.tensor(np.array([[1.0, -2.0, 0.5]], dtype=np.float32), requires_grad=True)
        (m(x) * lib.tensor(np.array([[1.0, 2.0]], dtype=np.float32))).sum().backward()
        results.append((seen, x.grad.numpy().copy(), m.weight.grad.numpy().copy()))
    (sd, xd, wd), (st, xt, wt) = results
    assert sd["pre"] == st["pre"] == 1
    for key in ("in", "out"):
        for a, b in zip(sd[key], st[key]):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(xd, xt, rtol=1e-6)  # the replaced grad_input (x3) reached x
    np.testing.assert_allclose(wd, wt, rtol=1e-6)


def test_full_backward_hook_without_input_grad_gets_none():
    for lib in (dg, torch):
        m = lib.nn.Linear(3, 2)
        seen = []
        m.register_full_backward_hook(lambda mod, gi, go: seen.append((gi, tuple(g.shape for g in go))))
        with pytest.warns(UserWarning, match="no inputs require gradients"):
            m(lib.ones(4, 3)).sum().backward()
        assert seen == [((None,), ((4, 2),))]


def test_state_dict_hooks_match_torch():
    logs = []
    for lib in (dg, torch):
        log = []
        m = lib.nn.Sequential(lib.nn.Linear(2, 2))

        def post(mod, state_dict, prefix, local_metadata, log=log):
            log.append(("post", prefix, sorted(state_dict)))

        def private(mod, state_dict, prefix, local_metadata, log=log):
            state_dict[prefix + "extra"] = lib.zeros(1)
            return state_dict

        m[0].register_state_dict_pre_hook(lambda mod, prefix, keep_vars: log.append(("pre", prefix, keep_vars)))
        m[0].register_state_dict_post_hook(post)
        handle = m._register_state_dict_hook(private)
        sd = m.state_dict()
        assert sorted(sd) == ["0.bias", "0.weight", "extra"]
        assert hasattr(sd, "_metadata") and "0" in sd._metadata
        handle.remove()

        def load_pre(mod, state_dict, prefix, local_metadata, strict, missing, unexpected, errors, log=log):
            log.append(("load_pre", prefix, sorted(state_dict)))

        def load_post(mod, incompatible, log=log):
            log.append(("load_post", list(incompatible.missing_keys), list(incompatible.unexpected_keys)))
            incompatible.unexpected_keys.clear()  # a post hook may clear what strict loading would refuse

        m[0].register_load_state_dict_pre_hook(load_pre)
        m.register_load_state_dict_post_hook(load_post)
        sd = m.state_dict()
        m.load_state_dict({**sd, "stray": lib.zeros(1)})
        logs.append(log)
    assert logs[0] == logs[1]


def test_get_submodule_parameter_buffer():
    for lib in (dg, torch):
        m = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.Sequential(lib.nn.LayerNorm(3)))
        m[1].register_buffer("steps", lib.zeros(1))
        assert m.get_submodule("1.0") is m[1][0] and m.get_submodule("") is m
        assert m.get_parameter("0.weight") is m[0].weight
        assert m.get_buffer("1.steps") is m[1].steps
        for call, target in [(m.get_submodule, "2"), (m.get_parameter, "1.steps"), (m.get_buffer, "0.weight")]:
            with pytest.raises(AttributeError):
                call(target)
        assert m.cpu() is m
        assert m.type(lib.float64)[0].weight.dtype == lib.float64


def test_register_buffer_errors():
    m = dg.nn.Module()
    with pytest.raises(KeyError):
        m.register_buffer("a.b", dg.zeros(1))
    with pytest.raises(TypeError):
        m.register_buffer("a", 3)


# --- nn.init ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                                  "conv_transpose3d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"])
def test_calculate_gain(name):
    assert dg.nn.init.calculate_gain(name) == pytest.approx(torch.nn.init.calculate_gain(name))
    assert dg.nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(torch.nn.init.calculate_gain("leaky_relu", 0.2))
    with pytest.raises(ValueError):
        dg.nn.init.calculate_gain("softplus")
    with pytest.raises(ValueError):
        dg.nn.init.calculate_gain("leaky_relu", "x")


def moments(t):
    v = t.float().numpy().ravel()
    return v.mean(), v.std(), v.min(), v.max()


@pytest.mark.parametrize("name,kwargs,std", [
    ("normal_", dict(mean=1.0, std=0.5), 0.5),
    ("uniform_", dict(a=-2.0, b=1.0), 3 / math.sqrt(12)),
    ("xavier_uniform_", dict(gain=2.0), 2.0 * math.sqrt(2.0 / (200 + 300))),
    ("xavier_normal_", dict(), math.sqrt(2.0 / (200 + 300))),
    ("kaiming_uniform_", dict(a=math.sqrt(5)), math.sqrt(2 / 6) / math.sqrt(300)),
    ("kaiming_normal_", dict(mode="fan_out", nonlinearity="relu"), math.sqrt(2) / math.sqrt(200)),
    ("trunc_normal_", dict(std=0.02), None),
])
def test_init_distributions(name, kwargs, std):
    d = dg.empty(200, 300)
    t = torch.empty(200, 300)
    assert getattr(dg.nn.init, name)(d, **kwargs) is d
    getattr(torch.nn.init, name)(t, **kwargs)
    md, mt = moments(d), moments(torch.tensor(0) + t)
    assert abs(md[0] - mt[0]) < 0.02 * max(mt[1], 1e-3) * 10
    assert md[1] == pytest.approx(mt[1], rel=0.02)
    if std is not None:
        assert md[1] == pytest.approx(std, rel=0.02)
    if name in ("uniform_", "xavier_uniform_", "kaiming_uniform_"):
        assert md[2] >= mt[2] - 1e-2 * mt[1] and md[3] <= mt[3] + 1e-2 * mt[1]


def test_trunc_normal_bounds_and_erfinv():
    d = dg.nn.init.trunc_normal_(dg.empty(100000), mean=0.5, std=1.0, a=-0.5, b=2.0)
    v = d.numpy()
    assert v.min() >= -0.5 and v.max() <= 2.0
    t = torch.nn.init.trunc_normal_(torch.empty(100000), mean=0.5, std=1.0, a=-0.5, b=2.0)
    assert v.mean() == pytest.approx(t.mean().item(), abs=0.01)
    assert v.std() == pytest.approx(t.std().item(), rel=0.02)
    x = np.linspace(-0.999999, 0.999999, 2001)
    np.testing.assert_allclose(dg.nn.init._erfinv(dg.tensor(x)).numpy(), torch.erfinv(torch.tensor(x)).numpy(),
                               rtol=3e-6, atol=1e-7)


def test_init_fills_generator_and_errors():
    assert dg.nn.init.zeros_(dg.ones(3)).sum().item() == 0
    assert dg.nn.init.ones_(dg.zeros(3)).sum().item() == 3
    assert dg.nn.init.constant_(dg.zeros(3), 2.5).sum().item() == 7.5
    w = dg.nn.Parameter(dg.empty(4, 4))
    dg.nn.init.normal_(w)  # a leaf that requires grad: filled under no_grad
    g1, g2 = dg.Generator().manual_seed(3), dg.Generator().manual_seed(3)
    a = dg.nn.init.kaiming_uniform_(dg.empty(8, 8), generator=g1)
    b = dg.nn.init.kaiming_uniform_(dg.empty(8, 8), generator=g2)
    assert np.array_equal(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        dg.nn.init.xavier_uniform_(dg.empty(3))
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        dg.nn.init.kaiming_normal_(dg.empty(3, 3), mode="fan_avg")
    with pytest.warns(UserWarning, match="zero-element"):
        dg.nn.init.kaiming_uniform_(dg.empty(0, 3))


# --- nn.utils --------------------------------------------------------------------------------------------------------
def grads_pair(shapes, scale=1.0):
    ps_d, ps_t = [], []
    for shape in shapes:
        g = rng.standard_normal(shape).astype(np.float32) * scale
        p_d, p_t = dg.zeros(*shape, requires_grad=True), torch.zeros(*shape, requires_grad=True)
        p_d.grad, p_t.grad = dg.tensor(g), torch.tensor(g)
        ps_d.append(p_d)
        ps_t.append(p_t)
    return ps_d, ps_t


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf, -math.inf, 0.0])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm(norm_type, max_norm):
    shapes = [(4, 5), (7,), (3, 2, 2), (300, 70)]
    ps_d, ps_t = grads_pair(shapes)
    ps_d.append(dg.zeros(2, requires_grad=True))  # a parameter without gradient is skipped
    ps_t.append(torch.zeros(2, requires_grad=True))
    total_d = dg.nn.utils.clip_grad_norm_(ps_d, max_norm, norm_type=norm_type)
    total_t = torch.nn.utils.clip_grad_norm_(ps_t, max_norm, norm_type=norm_type)
    close(total_d, total_t, rtol=1e-5)  # dygrad sums in double, torch in float32
    for p_d, p_t in zip(ps_d[:-1], ps_t[:-1]):
        close(p_d.grad, p_t.grad, rtol=1e-5, atol=1e-8)


def test_clip_grad_norm_one_tensor_noncontiguous_empty_and_nonfinite():
    p_d, p_t = dg.zeros(3, 4, requires_grad=True), torch.zeros(3, 4, requires_grad=True)
    g = rng.standard_normal((4, 3)).astype(np.float32)
    p_d.grad, p_t.grad = dg.tensor(g).t(), torch.tensor(g).t()  # non-contiguous gradients
    close(dg.nn.utils.clip_grad_norm_(p_d, 0.1), torch.nn.utils.clip_grad_norm_(p_t, 0.1), rtol=1e-6)
    close(p_d.grad, p_t.grad, rtol=1e-6)
    assert dg.nn.utils.clip_grad_norm_([dg.zeros(2, requires_grad=True)], 1.0).item() == 0.0
    ps_d, _ = grads_pair([(3,)])
    ps_d[0].grad = dg.tensor(np.array([1.0, np.inf, 2.0], dtype=np.float32))
    with pytest.raises(RuntimeError, match="non-finite"):
        dg.nn.utils.clip_grad_norm_(ps_d, 1.0, error_if_nonfinite=True)
    ps_d[0].grad = dg.tensor(np.array([1.0, np.nan, 2.0], dtype=np.float32))
    ps_t = [torch.zeros(3, requires_grad=True)]
    ps_t[0].grad = torch.tensor([1.0, float("nan"), 2.0])
    assert math.isnan(dg.nn.utils.clip_grad_norm_(ps_d, 1.0).item())
    torch.nn.utils.clip_grad_norm_(ps_t, 1.0)
    assert np.array_equal(np.isnan(ps_d[0].grad.numpy()), np.isnan(ps_t[0].grad.numpy()))


def test_clip_grad_norm_is_two_tasks():
    ps_d, _ = grads_pair([(4, 5)] * 20)
    dg.synchronize()
    with dg.profiler.profile() as prof:
        dg.nn.utils.clip_grad_norm_(ps_d, 1.0)
        dg.synchronize()
    counts = {row.name: row.count for row in prof.key_averages()}
    assert counts.get("grad_norm") == 1 and counts.get("clip_grads_with_norm") == 1, counts
    assert "mul" not in counts and "sum" not in counts, counts


def test_clip_grad_value_and_vector_conversions():
    ps_d, ps_t = grads_pair([(4, 5), (7,)], scale=3.0)
    assert dg.nn.utils.clip_grad_value_(ps_d, 1.5) is None
    torch.nn.utils.clip_grad_value_(ps_t, 1.5)
    for p_d, p_t in zip(ps_d, ps_t):
        close(p_d.grad, p_t.grad)
    params_d = [dg.nn.Parameter(dg.tensor(rng.standard_normal((2, 3)))), dg.nn.Parameter(dg.tensor(rng.standard_normal(4)))]
    params_t = [torch.nn.Parameter(torch.tensor(p.detach().numpy())) for p in params_d]
    vec_d, vec_t = dg.nn.utils.parameters_to_vector(params_d), torch.nn.utils.parameters_to_vector(params_t)
    close(vec_d, vec_t)
    new = rng.standard_normal(10)
    dg.nn.utils.vector_to_parameters(dg.tensor(new), params_d)
    torch.nn.utils.vector_to_parameters(torch.tensor(new), params_t)
    for p_d, p_t in zip(params_d, params_t):
        close(p_d, p_t)
    with pytest.raises(TypeError):
        dg.nn.utils.vector_to_parameters([1.0], params_d)


# --- F.pad, F.one_hot, F.normalize ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode,shape,pad", [
    ("constant", (2, 3), (1, 2)), ("constant", (2, 3, 4), (1, 0, 2, 1)), ("constant", (2, 3), (-1, 2, 1, -1)),
    ("constant", (3,), (2, 2)), ("constant", (2, 2, 2, 2), (1, 1, 1, 1, 1, 1, 1, 1)),
    ("reflect", (2, 5), (2, 3)), ("reflect", (1, 2, 4, 5), (1, 2, 3, 0)), ("reflect", (2, 2, 3, 4, 3), (1, 1, 2, 0, 2, 1)),
    ("replicate", (2, 3), (4, 1)), ("replicate", (2, 3, 4), (2, 1, 0, 3)), ("replicate", (1, 3), (-1, 2)),
    ("circular", (2, 4), (2, 3)), ("circular", (1, 2, 3, 4), (1, 2, 3, 1)), ("circular", (1, 3), (-1, 2)),
    ("reflect", (1, 3), (-1, 2)),
])
def test_pad(mode, shape, pad):
    x_d, x_t = pair(shape, requires_grad=True)
    kwargs = {"value": 1.5} if mode == "constant" else {}
    out_d, out_t = F.pad(x_d, pad, mode=mode, **kwargs), TF.pad(x_t, pad, mode=mode, **kwargs)
    close(out_d, out_t)
    backward_both(out_d, out_t)
    close(x_d.grad, x_t.grad)


def test_pad_dtypes_errors_and_finite_differences():
    a = np.arange(6).reshape(2, 3)
    close(F.pad(dg.tensor(a), (1, 1), value=2.7), TF.pad(torch.tensor(a), (1, 1), value=2.7))
    x_d = dg.ones(1, 3)
    for mode in ("constant", "reflect"):  # zero pads still give a new tensor, as torch
        y_d = F.pad(x_d, (0, 0), mode=mode)
        y_d.add_(1.0)
        assert x_d.sum().item() == 3.0 and y_d.sum().item() == 6.0
    with pytest.raises(RuntimeError, match="Padding length must be divisible by 2"):
        F.pad(x_d, (1,))
    with pytest.raises(RuntimeError, match="Padding length should be less than or equal to two times the input dimension"):
        F.pad(x_d, (1, 1, 1, 1, 1, 1))
    with pytest.raises(RuntimeError, match="Padding size should be less than the corresponding input dimension"):
        F.pad(x_d, (3, 3), mode="reflect")
    with pytest.raises(RuntimeError, match="wrapping around more than once"):
        F.pad(x_d, (4, 4), mode="circular")
    with pytest.raises(NotImplementedError, match="Padding size 2 is not supported for 1D input tensor"):
        F.pad(dg.ones(3), (1, 1), mode="reflect")
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode bad"):
        F.pad(x_d, (1, 1), mode="bad")
    with pytest.raises(RuntimeError, match="doesn't take in value argument"):
        F.pad(x_d, (1, 1), mode="reflect", value=2.0)
    with pytest.raises(RuntimeError, match="negative output size"):
        F.pad(x_d, (-2, -2))
    w = dg.tensor(rng.standard_normal((2, 7)))
    finite_difference_check(lambda x: (F.pad(x, (2, 2), mode="reflect") * w).sum(), rng.standard_normal((2, 3)))
    finite_difference_check(lambda x: (F.pad(x, (1, 3), value=0.5) * w[:, :7]).sum(), rng.standard_normal((2, 3)))


def test_one_hot():
    t_d, t_t = ints((2, 3), 4)
    close(F.one_hot(t_d), TF.one_hot(t_t))
    close(F.one_hot(t_d, 6), TF.one_hot(t_t, 6))
    assert F.one_hot(t_d).dtype == dg.int64
    close(F.one_hot(dg.tensor(np.array([], dtype=np.int64)), 3), TF.one_hot(torch.tensor([], dtype=torch.long), 3))
    with pytest.raises(RuntimeError, match="LongTensor"):
        F.one_hot(dg.tensor(np.array([0, 1], dtype=np.int32)))
    with pytest.raises(RuntimeError, match="Class values must be non-negative"):
        F.one_hot(dg.tensor(np.array([0, -1])))
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        F.one_hot(dg.tensor(np.array([0, 3])), 3)
    with pytest.raises(RuntimeError, match="Can not infer total number of classes from empty tensor"):
        F.one_hot(dg.tensor(np.array([], dtype=np.int64)))


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, 0), (3.0, -1), (math.inf, 1)])
def test_normalize(p, dim):
    x = rng.standard_normal((3, 4))
    x[1] = 0.0  # a zero row: eps keeps it finite, and its gradient too
    x_d, x_t = tensors_from(x, requires_grad=True)
    out_d, out_t = F.normalize(x_d, p=p, dim=dim), TF.normalize(x_t, p=p, dim=dim)
    close(out_d, out_t)
    if p != math.inf:
        backward_both(out_d, out_t)
        close(x_d.grad, x_t.grad, rtol=1e-6, atol=1e-9)


def test_losses_on_non_contiguous_inputs():
    x = rng.standard_normal((5, 6))
    x_d, x_t = tensors_from(x, requires_grad=True, transposed=True)  # [6, 5] views
    t_d, t_t = ints((6,), 5)
    w_d, w_t = pair((5,), low=0.5, high=2.0)
    for fn_d, fn_t in [(lambda a: F.nll_loss(a, t_d, weight=w_d), lambda a: TF.nll_loss(a, t_t, weight=w_t)),
                       (lambda a: F.cross_entropy(a, t_d, label_smoothing=0.2),
                        lambda a: TF.cross_entropy(a, t_t, label_smoothing=0.2)),
                       (lambda a: F.mse_loss(a, a.detach() * 0.5 + 1), lambda a: TF.mse_loss(a, a.detach() * 0.5 + 1)),
                       (lambda a: F.pad(a, (1, 2), mode="replicate").sum(),
                        lambda a: TF.pad(a, (1, 2), mode="replicate").sum())]:
        x_d.grad, x_t.grad = None, None
        out_d, out_t = fn_d(x_d), fn_t(x_t)
        close(out_d, out_t)
        out_d.backward()
        out_t.backward()
        close(x_d.grad, x_t.grad)
