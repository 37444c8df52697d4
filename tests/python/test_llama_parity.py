"""Issue 4 parity: dygrad's LLaMA (fused and unfused) against the PyTorch reference model
(../shared/bench/torch_ref.py) with identical initial weights and batches: the fp32 loss over 20 AdamW steps
of the `tiny` config matches within 1e-4 relative."""
import importlib.util
import os

import numpy as np
import pytest
import torch

import dygrad as dg
from dygrad.models import llama

REF = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "bench", "torch_ref.py")


def load_reference():
    assert os.path.exists(REF), f"the peer's reference model is missing at {REF}"
    spec = importlib.util.spec_from_file_location("torch_ref", REF)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_tiny_loss_matches_torch_reference_over_20_steps(fused):
    ref = load_reference()
    L, d, h, f, V, T, B = ref.CFGS["tiny"]
    torch.manual_seed(0)
    tm = ref.LLaMA(L, d, h, f, V, T)
    cfg = llama.CONFIGS["tiny"]
    assert (cfg.n_layers, cfg.dim, cfg.n_heads, cfg.ffn_dim, cfg.vocab_size, cfg.seq_len, cfg.batch_size) == (L, d, h, f, V, T, B)
    dm = llama.Llama(cfg, fused=fused)
    llama.load_reference_state_dict(dm, {k: v.detach().numpy() for k, v in tm.state_dict().items()})
    assert sum(p.numel() for p in dm.parameters()) == sum(p.numel() for p in tm.parameters())
    topt = torch.optim.AdamW(tm.parameters(), lr=3e-4)
    dopt = dg.optim.AdamW(dm.parameters(), lr=3e-4)
    rng = np.random.default_rng(0)
    for step in range(20):
        data = rng.integers(0, V, size=(B, T + 1))
        x, y = data[:, :-1].copy(), data[:, 1:].copy()
        tl = tm(torch.from_numpy(x), torch.from_numpy(y))
        topt.zero_grad(set_to_none=True)
        tl.backward()
        topt.step()
        dl = dm(dg.from_numpy(x), dg.from_numpy(y))
        dopt.zero_grad(set_to_none=True)
        dl.backward()
        dopt.step()
        t_loss, d_loss = tl.item(), dl.item()
        assert abs(d_loss - t_loss) <= 1e-4 * abs(t_loss), f"step {step}: dygrad {d_loss} vs torch {t_loss}"
