"""A LLaMA training step on the asynchronous test device gives the CPU's parameters bitwise (docs/devices.md: the test
device runs the CPU's kernels on its launcher thread, so with deterministic=True every bit agrees); the fused and the
composed model, forward, backward and AdamW, with a planted device-side error between steps that surfaces at the next
sync and leaves the next step running."""
import numpy as np
import pytest

import dygrad as dg
from dygrad.models import llama

DEVICE = "test:0"


@pytest.fixture(scope="module", autouse=True)
def test_devices():
    assert dg.testing.enable_test_device(1) >= 1


def bits(t):
    return t.detach().cpu().contiguous().view(dg.int32).numpy().copy() if t.dtype == dg.float32 else t.detach().cpu().numpy()


def train(device, fused, steps=3):
    dg.manual_seed(0)
    model = llama.Llama(llama.CONFIGS["tiny"], fused=fused)
    model.to(device)
    opt = dg.optim.AdamW(model.parameters(), lr=3e-3)
    cfg = model.cfg
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        data = rng.integers(0, cfg.vocab_size, size=(cfg.batch_size, cfg.seq_len + 1))
        x = dg.from_numpy(data[:, :-1].copy()).to(device)
        y = dg.from_numpy(data[:, 1:].copy()).to(device)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_llama_steps_on_the_test_device_give_the_cpus_parameters(fused, restore_context):
    dg.set_context(deterministic=True)
    cpu_model, cpu_losses = train("cpu", fused)
    dev_model, dev_losses = train(DEVICE, fused)
    assert all(str(p.device) == DEVICE for p in dev_model.parameters())
    assert dev_losses == cpu_losses
    for (name, p_cpu), (_, p_dev) in zip(cpu_model.named_parameters(), dev_model.named_parameters()):
        assert np.array_equal(bits(p_cpu), bits(p_dev)), name


def test_a_device_side_error_surfaces_at_the_next_sync_and_training_goes_on():
    model, _ = train(DEVICE, fused=True, steps=1)
    table = dg.randn((10, 4)).to(DEVICE)
    bad = dg.tensor([1, 12, 3]).to(DEVICE)
    out = dg.index_select(table, 0, bad)  # returns: the launcher finds the index later
    with pytest.raises(IndexError, match=r"index_select[\s\S]*test_device_training.py:"):
        dg.synchronize()
    with pytest.raises(RuntimeError, match="invalid"):
        out.cpu().numpy()
    cfg = model.cfg
    x = dg.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.seq_len)).to(DEVICE)
    loss = model(x, x)
    loss.backward()
    assert np.isfinite(loss.item())
