"""The training steps the JIT tests compile and compare with eager (test_jit.py, test_jit_symbolic.py,
test_jit_device.py): one definition, so every test exercises the same step."""
import dygrad as dg
import dygrad.nn as nn
import dygrad.nn.functional as F


def llama_step(model, opt, clip=0.5):
    """forward, backward, gradient clipping, the optimizer step and zero_grad; returns the detached loss."""
    def step(x, y):
        loss = model(x, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def mlp_sgd(seed=0):
    """An MLP with dropout and SGD (momentum, Nesterov, weight decay), seeded: (model, optimizer, step)."""
    dg.manual_seed(seed)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 4))
    opt = dg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return m, opt, step
