"""Double backward, dygrad against torch 2.13 side by side in one process: a Hessian-vector product of the LLaMA
loss and a WGAN-GP critic step (a gradient penalty: create_graph=True through the critic, then backward).

    python3 bench/double_backward.py [--rounds 5] [--reps 2] [--config tiny] [--seq 64] [--batch 2] [--torch-threads N]

The LLaMA model is tests/python/test_double_backward.py's: dygrad's Llama (fused kernels: their composed second
derivative under create_graph; and unfused) against ../shared/bench/torch_ref.py's model with the same weights,
float32, torch's attention on its math backend (its CPU flash kernel has no double backward). One HVP is
loss -> grad(create_graph=True) -> grad(<g, v>). Each round times dygrad then torch (alternating which goes first),
`reps` calls each, keeping the median; the figure is the median over rounds of the time ratio dygrad / torch
(< 1: dygrad faster). Both libraries use their default thread count unless --torch-threads is given (on a loaded
2-core machine torch's 2 OpenMP threads slow it several times over: compare with --torch-threads 1, as
torch_ref.py's notes advise for fp32 on these machines).
"""
import argparse
import importlib.util
import os
import statistics
import time

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import dygrad as dg
from dygrad.models import llama

REF = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "bench", "torch_ref.py")


def load_reference():
    spec = importlib.util.spec_from_file_location("torch_ref", REF)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def interleaved(name, ours, theirs, rounds, reps):
    ours(), theirs()  # warm-up
    ratios, mine, peer = [], [], []
    for r in range(rounds):
        if r % 2:
            b, a = timed(theirs, reps), timed(ours, reps)
        else:
            a, b = timed(ours, reps), timed(theirs, reps)
        ratios.append(a / b)
        mine.append(a)
        peer.append(b)
    print(f"{name:34s} dygrad/torch {statistics.median(ratios):5.2f}  (dygrad {statistics.median(mine) * 1e3:8.1f} ms, "
          f"torch {statistics.median(peer) * 1e3:8.1f} ms, this run)")


def hvp(lib, model, x, y, vectors):
    params = list(model.parameters())
    grads = lib.autograd.grad(model(x, y), params, create_graph=True)
    out = lib.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vectors)), params)
    if lib is dg:
        dg.synchronize()
    return out


def llama_case(args, fused):
    ref = load_reference()
    base = llama.CONFIGS[args.config]
    cfg = llama.LlamaConfig(n_layers=base.n_layers, dim=base.dim, n_heads=base.n_heads, ffn_dim=base.ffn_dim,
                            vocab_size=base.vocab_size, seq_len=args.seq, batch_size=args.batch)
    torch.manual_seed(0)
    tm = ref.LLaMA(cfg.n_layers, cfg.dim, cfg.n_heads, cfg.ffn_dim, cfg.vocab_size, cfg.seq_len)
    dm = llama.Llama(cfg, fused=fused)
    llama.load_reference_state_dict(dm, {k: v.detach().numpy() for k, v in tm.state_dict().items()})
    rng = np.random.default_rng(0)
    data = rng.integers(0, cfg.vocab_size, size=(cfg.batch_size, cfg.seq_len + 1))
    vectors = [rng.standard_normal(tuple(p.shape)).astype(np.float32) for p in tm.parameters()]
    dx, dy, dv = dg.tensor(data[:, :-1]), dg.tensor(data[:, 1:]), [dg.tensor(v) for v in vectors]
    tx, ty, tv = torch.tensor(data[:, :-1]), torch.tensor(data[:, 1:]), [torch.tensor(v) for v in vectors]

    def theirs():
        with sdpa_kernel(SDPBackend.MATH):
            hvp(torch, tm, tx, ty, tv)
    return lambda: hvp(dg, dm, dx, dy, dv), theirs


def wgan_case(batch, width):
    def critic(m):
        nn = m.nn
        return nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width), nn.SiLU(), nn.Linear(width, 1))
    torch.manual_seed(0)
    tm, dm = critic(torch), critic(dg)
    dm.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    rng = np.random.default_rng(0)
    real, fake, eps = (rng.standard_normal((batch, width)).astype(np.float32),
                       rng.standard_normal((batch, width)).astype(np.float32), rng.random((batch, 1)).astype(np.float32))

    def step(m, model, opt, real, fake, eps):
        x_hat = (eps * real + (1 - eps) * fake).requires_grad_(True)
        score = model(x_hat)
        (grad,) = m.autograd.grad(score, x_hat, grad_outputs=m.ones_like(score), create_graph=True)
        loss = model(fake).mean() - model(real).mean() + 10.0 * ((grad.norm(2, dim=1) - 1) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if m is dg:
            dg.synchronize()
    dopt, topt = dg.optim.Adam(dm.parameters(), lr=1e-4), torch.optim.Adam(tm.parameters(), lr=1e-4)
    d_in = [dg.tensor(a) for a in (real, fake, eps)]
    t_in = [torch.tensor(a) for a in (real, fake, eps)]
    return lambda: step(dg, dm, dopt, *d_in), lambda: step(torch, tm, topt, *t_in)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--config", default="tiny")
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    print(f"dygrad threads {dg.get_context().num_threads}, torch threads {torch.get_num_threads()}")
    for fused in (True, False):
        ours, theirs = llama_case(args, fused)
        interleaved(f"llama {args.config} T={args.seq} B={args.batch} HVP {'fused' if fused else 'unfused'}",
                    ours, theirs, args.rounds, args.reps)
    ours, theirs = wgan_case(256, 256)
    interleaved("WGAN-GP critic step 256x256", ours, theirs, args.rounds, args.reps)


if __name__ == "__main__":
    main()
