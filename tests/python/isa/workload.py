"""Run by tests/python/test_cpu_isa.py, in this process's kernels (the AVX-512 plugin) and in a child with the
baseline kernels (DYGRAD_CPU_ISA=baseline, or a CPU without AVX-512 under qemu): a spread of kernels and two
LLaMA training steps; writes every result to OUT.npz and the kernel ISA in use to OUT.json."""
import json
import sys

import numpy as np

import dygrad as dg
from dygrad.models import llama


def workload():
    g = np.random.default_rng(0)
    a = dg.from_numpy(g.standard_normal((37, 53)).astype(np.float32))
    b = dg.from_numpy(g.standard_normal((53, 29)).astype(np.float32))
    v = dg.from_numpy(g.standard_normal((4, 7, 96)).astype(np.float32))
    out = {
        "matmul": a @ b,
        "add_mul": a * 1.5 + a.t().t() / 3.0,
        "exp_log_tanh": dg.exp(a * 0.1) + dg.log(dg.abs(a) + 1.0) + dg.tanh(a),
        "sum_mean": dg.stack([a.sum(), a.mean(), a.t().sum(), (a * a).sum()]),
        "softmax": dg.softmax(v, -1),
        "log_softmax_t": dg.log_softmax(v.transpose(1, 2), 1),
        "rms_norm": dg.nn.functional.rms_norm(v, (96,), dg.ones(96) * 0.5),
        "gelu_silu": dg.nn.functional.gelu(v) + dg.nn.functional.silu(v),
        "amax_cumsum": dg.cat([v.amax(-1).flatten(), dg.cumsum(v, -1).flatten()]),
        "bf16_roundtrip": (v.to(dg.bfloat16) * 3).to(dg.float32),
        # oneDNN's bf16 GEMM on AVX512-BF16, else the portable path (converted to float32 per tile)
        "bf16_matmul": (a.to(dg.bfloat16) @ b.to(dg.bfloat16)).to(dg.float32),
        "bf16_rms_norm": dg.nn.functional.rms_norm(v.to(dg.bfloat16), (96,)).to(dg.float32),
    }
    c = llama.CONFIGS["tiny"]
    c = llama.LlamaConfig(**{**c.__dict__, "n_layers": 1, "seq_len": 16, "batch_size": 2})
    dg.manual_seed(0)
    model = llama.Llama(c)
    opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = g.integers(0, c.vocab_size, size=(c.batch_size, c.seq_len + 1))
    x, y = dg.tensor(tokens[:, :-1].copy()), dg.tensor(tokens[:, 1:].copy())
    losses = []
    for _ in range(2):
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    out["llama_losses"] = dg.stack(losses)
    out["llama_weight"] = next(iter(model.parameters())).detach()
    result = {k: t.detach().numpy().copy() for k, t in out.items()}
    result.update(error_scales(a, b, v))
    return result


def error_scales(a, b, v):
    """scale_<name>: per element of the sums in `name`, n * sum |terms| (float64): a float32 sum of n terms in any
    order is within n u sum |terms| of the exact one (u = 2^-24), so two kernel levels that order or split it
    differently (4, 8 or 16 lanes; oneDNN's kernels for the CPU's ISA) agree within twice that."""
    a, b, v = (np.abs(t.numpy().astype(np.float64)) for t in (a, b, v))
    n, k, row = a.size, a.shape[1], v.shape[-1]
    return {
        "scale_matmul": k * (a @ b),
        # sum, mean (the sum's error over n, plus the division's rounding), the transpose's sum, the squares' sum
        "scale_sum_mean": np.array([n * a.sum(), 2 * a.sum(), n * a.sum(), (n + 1) * (a * a).sum()]),
        # amax is exact; the i-th prefix sum adds i terms
        "scale_amax_cumsum": np.concatenate([np.zeros(v.shape[:-1]).ravel(),
                                             (np.cumsum(v, axis=-1) * np.arange(1, row + 1)).ravel()]),
    }


if __name__ == "__main__":
    np.savez(sys.argv[1] + ".npz", **workload())
    with open(sys.argv[1] + ".json", "w") as f:
        json.dump(list(dg.backends.cpu.kernel_isa()) + [dg.backends.cpu.get_cpu_capability()], f)
