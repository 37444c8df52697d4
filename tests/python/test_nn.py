"""dygrad.nn and dygrad.optim against torch.nn / torch.optim: module mechanics, state-dict keys, layers,
optimizers step by step, and the float64 MLP parity run (issue 3: 200 AdamW steps to 1e-9 relative)."""
import numpy as np
import pytest
import torch

import dygrad as dg
from dygrad import nn
from dygrad.nn import functional as F


def to_dg(t):
    return dg.tensor(t.detach().numpy())


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 8), torch.nn.Linear(8, 4, bias=False)])
        self.norm = torch.nn.LayerNorm(4)
        self.seq = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Dropout(0.1))
        self.register_buffer("scale", torch.ones(2))
        self.register_buffer("cache", torch.zeros(3), persistent=False)


class DgNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.layers = nn.ModuleList([nn.Linear(4, 8), nn.Linear(8, 4, bias=False)])
        self.norm = nn.LayerNorm(4)
        self.seq = nn.Sequential(nn.Linear(4, 2), nn.Dropout(0.1))
        self.register_buffer("scale", dg.ones((2,)))
        self.register_buffer("cache", dg.zeros((3,)), persistent=False)


def test_state_dict_keys_match_torch():
    t, d = TorchNet(), DgNet()
    assert list(d.state_dict().keys()) == list(t.state_dict().keys())
    assert [n for n, _ in d.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in d.named_modules()] == [n for n, _ in t.named_modules()]
    assert [n for n, _ in d.named_buffers()] == [n for n, _ in t.named_buffers()]
    for (n, p), (_, q) in zip(d.named_parameters(), t.named_parameters()):
        assert tuple(p.shape) == tuple(q.shape), n


def test_load_state_dict_roundtrip_and_strict():
    t, d = TorchNet(), DgNet()
    result = d.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
    assert result.missing_keys == [] and result.unexpected_keys == []
    for (n, p), (_, q) in zip(d.named_parameters(), t.named_parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy(), err_msg=n)
    sd = {k: v for k, v in d.state_dict().items() if k != "norm.bias"}
    sd["extra"] = dg.zeros((1,))
    with pytest.raises(RuntimeError, match="Missing key.*norm.bias"):
        d.load_state_dict(sd)
    r = d.load_state_dict(sd, strict=False)
    assert r.missing_keys == ["norm.bias"] and r.unexpected_keys == ["extra"]
    bad = dict(d.state_dict())
    bad["norm.weight"] = dg.zeros((5,))
    with pytest.raises(RuntimeError, match="size mismatch for norm.weight"):
        d.load_state_dict(bad)


def test_train_eval_apply_children():
    d = DgNet()
    d.eval()
    assert all(not m.training for m in d.modules())
    d.train()
    assert all(m.training for m in d.modules())
    seen = []
    d.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "DgNet" and "Linear" in seen
    assert [type(c).__name__ for c in d.children()] == ["Embedding", "ModuleList", "LayerNorm", "Sequential"]
    with pytest.raises(TypeError):
        d.norm.weight = dg.zeros((4,))  # a plain tensor cannot replace a parameter


def test_parameter_is_leaf_and_registered():
    p = nn.Parameter(dg.zeros((3,)))
    assert p.requires_grad and p.is_leaf and isinstance(p, dg.Tensor)
    m = nn.Module()
    m.p = p
    assert list(m.parameters())[0] is p
    assert "Parameter containing" in repr(p)


@pytest.mark.parametrize("layer", ["linear", "embedding", "layernorm", "rmsnorm"])
def test_layers_forward_backward_match_torch(layer):
    torch.manual_seed(0)
    if layer == "linear":
        t, d, x = torch.nn.Linear(5, 3), nn.Linear(5, 3), torch.randn(4, 5)
    elif layer == "embedding":
        t, d, x = torch.nn.Embedding(7, 3), nn.Embedding(7, 3), torch.tensor([[1, 2, 6], [0, 0, 3]])
    elif layer == "layernorm":
        t, d, x = torch.nn.LayerNorm(5), nn.LayerNorm(5), torch.randn(4, 5)
    else:
        t, d, x = torch.nn.RMSNorm(5, eps=1e-5), nn.RMSNorm(5, eps=1e-5), torch.randn(4, 5)
    with torch.no_grad():
        for q in t.parameters():
            q.uniform_(-1, 1)
    d.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
    yt = t(x)
    yd = d(dg.tensor(x.numpy()))
    np.testing.assert_allclose(yd.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    w = torch.randn(yt.shape)
    (yt * w).sum().backward()
    (yd * dg.tensor(w.numpy())).sum().backward()
    for (n, p), (_, q) in zip(d.named_parameters(), t.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=n)


def test_dropout_train_and_eval():
    drop = nn.Dropout(0.5)
    x = dg.ones((1000,))
    y = drop(x).numpy()
    assert set(np.unique(y)).issubset({0.0, 2.0}) and 0.35 < (y == 0).mean() < 0.65
    drop.eval()
    np.testing.assert_array_equal(drop(x).numpy(), x.numpy())


def test_functional_matches_torch():
    torch.manual_seed(1)
    x = torch.randn(3, 5, dtype=torch.float64)
    tgt = torch.tensor([1, 4, 0])
    xd = dg.tensor(x.numpy())
    np.testing.assert_allclose(F.softmax(xd, dim=-1).numpy(), torch.softmax(x, -1).numpy(), rtol=1e-12)
    np.testing.assert_allclose(F.log_softmax(xd, dim=1).numpy(), torch.log_softmax(x, 1).numpy(), rtol=1e-12)
    np.testing.assert_allclose(F.silu(xd).numpy(), torch.nn.functional.silu(x).numpy(), rtol=1e-12)
    np.testing.assert_allclose(F.gelu(xd).numpy(), torch.nn.functional.gelu(x).numpy(), rtol=1e-12)
    np.testing.assert_allclose(F.cross_entropy(xd, dg.tensor(tgt.numpy())).item(),
                               torch.nn.functional.cross_entropy(x, tgt).item(), rtol=1e-12)
    np.testing.assert_allclose(F.layer_norm(xd, (5,)).numpy(), torch.nn.functional.layer_norm(x, (5,)).numpy(),
                               rtol=1e-10, atol=1e-12)


def _optimizer_pair(name, **kw):
    torch.manual_seed(0)
    w0 = torch.randn(6, 3, dtype=torch.float64)
    tw = torch.nn.Parameter(w0.clone())
    dw = nn.Parameter(dg.tensor(w0.numpy()))
    topt = getattr(torch.optim, name)([tw], **kw)
    dopt = getattr(dg.optim, name)([dw], **kw)
    return tw, dw, topt, dopt


@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.1)), ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
                                     ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
                                     ("AdamW", dict(lr=0.01)), ("AdamW", dict(lr=0.01, weight_decay=0.1))])
def test_optimizer_steps_match_torch(name, kw):
    tw, dw, topt, dopt = _optimizer_pair(name, **kw)
    for step in range(5):
        target = torch.full((6, 3), float(step), dtype=torch.float64)
        tl = ((tw - target) ** 2).sum()
        topt.zero_grad()
        tl.backward()
        topt.step()
        dl = ((dw - dg.tensor(target.numpy())) ** 2).sum()
        dopt.zero_grad()
        dl.backward()
        dopt.step()
        np.testing.assert_allclose(dw.detach().numpy(), tw.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_optimizer_zero_grad_and_state_dict():
    tw, dw, topt, dopt = _optimizer_pair("AdamW", lr=0.01)
    (dw * dw).sum().backward()
    dopt.step()
    sd = dopt.state_dict()
    assert sd["param_groups"][0]["lr"] == 0.01 and sd["state"][0]["step"] == 1
    dopt.zero_grad(set_to_none=True)
    assert dw.grad is None
    fresh = dg.optim.AdamW([dw], lr=0.5)
    fresh.load_state_dict(sd)
    assert fresh.param_groups[0]["lr"] == 0.01 and fresh.state[dw]["step"] == 1


def test_mlp_adamw_float64_parity_200_steps():
    """Issue 3: an MLP trained 200 steps with AdamW in float64 matches PyTorch to 1e-9 relative in loss."""
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                             torch.nn.Linear(32, 4)).double()

    class DgMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l0, self.l2, self.l4 = nn.Linear(8, 32), nn.Linear(32, 32), nn.Linear(32, 4)

        def forward(self, x):
            return self.l4(F.relu(self.l2(dg.tanh(self.l0(x)))))

    dm = DgMLP().double()
    dm.load_state_dict({k.replace("0.", "l0.", 1) if k.startswith("0.") else "l" + k: dg.tensor(v.numpy())
                        for k, v in tm.state_dict().items()})
    x = torch.randn(64, 8, dtype=torch.float64)
    y = torch.randint(0, 4, (64,))
    xd, yd = dg.tensor(x.numpy()), dg.tensor(y.numpy())
    topt = torch.optim.AdamW(tm.parameters(), lr=1e-3)
    dopt = dg.optim.AdamW(dm.parameters(), lr=1e-3)
    for step in range(200):
        tl = torch.nn.functional.cross_entropy(tm(x), y)
        topt.zero_grad(set_to_none=True)
        tl.backward()
        topt.step()
        dl = F.cross_entropy(dm(xd), yd)
        dopt.zero_grad(set_to_none=True)
        dl.backward()
        dopt.step()
        assert abs(dl.item() - tl.item()) <= 1e-9 * abs(tl.item()), f"step {step}: {dl.item()} vs {tl.item()}"
