"""The TinyLlama-1.1B shape on a GPU (bench/gpu_check.sh's bench phase; docs/cuda.md): a bf16 training step (forward,
backward, AdamW) of 22 layers, dim 2048, 32 heads, 4 KV heads, FFN 5632, sequence 2048, vocabulary 32000, batch 1,
in PyTorch eager and torch.compile on the GPU, with the GPU's measured bf16 GEMM peak and each one's MFU; then
dygrad's step on the same GPU once every op it issues has a CUDA kernel (until then the report names the ops that
have none, from a CPU run of a small model of the same structure). Writes markdown to --out as each part finishes,
so a run cut short keeps what ran.

    python bench/gpu_llama.py --out bench.md [--layers 22] [--steps 5]
"""
import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

SHAPE = dict(layers=22, dim=2048, heads=32, kv_heads=4, ffn=5632, seq=2048, vocab=32000)


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.attn_norm, self.mlp_norm = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wkv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.w13 = nn.Linear(dim, 2 * ffn, bias=False)
        self.w2 = nn.Linear(ffn, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.wkv(h).view(B, T, 2, self.kv_heads, self.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, C))
        gate, up = self.w13(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(gate) * up)


def rotate(x, cos, sin):  # rotary embedding on pairs of halves: x [B, H, T, D], cos/sin [T, D/2]
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Model(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.embed = nn.Embedding(s["vocab"], s["dim"])
        self.blocks = nn.ModuleList(Block(s["dim"], s["heads"], s["kv_heads"], s["ffn"]) for _ in range(s["layers"]))
        self.norm = nn.RMSNorm(s["dim"])
        self.head = nn.Linear(s["dim"], s["vocab"], bias=False)
        d = s["dim"] // s["heads"]
        freqs = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        angles = torch.outer(torch.arange(s["seq"]).float(), freqs)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, idx, targets):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, self.cos.to(x.dtype), self.sin.to(x.dtype))
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


def params_of(s):
    d, f, kv = s["dim"], s["ffn"], s["kv_heads"] * (s["dim"] // s["heads"])
    per_layer = 2 * d + d * d + 2 * d * kv + d * d + 3 * d * f
    return s["layers"] * per_layer + 2 * s["vocab"] * d + d


def flops_per_token(s):
    return 6 * params_of(s) + 12 * s["layers"] * s["dim"] * s["seq"]


def gemm_peak_tflops():
    """The GPU's bf16 GEMM rate on 8192^3 (the MFU denominator: measured, not the datasheet's)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    n, t0 = 20, time.perf_counter()
    for _ in range(n):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192 ** 3 * n / (time.perf_counter() - t0) / 1e12


def time_steps(step, steps):
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def torch_step(model, compiled):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd = torch.compile(model) if compiled else model
    idx = torch.randint(0, SHAPE["vocab"], (1, SHAPE["seq"]), device="cuda")

    def step():
        loss = fwd(idx, idx)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def dygrad_missing_kernels():
    """The ops a dygrad LLaMA training step issues (a CPU run of a small model of the same structure, recorded by the
    profiler) that have no CUDA kernel yet."""
    import dygrad as dg
    from dygrad.models.llama import Llama, LlamaConfig
    cfg = LlamaConfig(n_layers=1, dim=64, n_heads=4, ffn_dim=96, vocab_size=64, seq_len=16, batch_size=1)
    model = Llama(cfg)
    opt = dg.optim.AdamW(model.parameters(), lr=1e-3)
    idx = dg.randint(0, 64, (1, 16))
    dg.synchronize()  # the model's and data's construction ran before: the profile holds the step's ops only
    with dg.profiler.profile() as prof:
        model(idx, idx).backward()
        opt.step()
    issued = {e.key for e in prof.key_averages()}
    table = {op["name"]: op["devices"] for op in dg._C._op_table()}
    return sorted(name for name in issued if name in table and "cuda" not in table[name])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=SHAPE["layers"])
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    SHAPE["layers"] = args.layers
    tokens = SHAPE["seq"]

    def write(line):
        with open(args.out, "a") as f:
            f.write(line + "\n")

    write(f"\n## TinyLlama-1.1B shape, bf16 step (batch 1, {SHAPE}), {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}")
    peak = gemm_peak_tflops()
    write(f"- measured bf16 GEMM peak (8192^3): {peak:.0f} TFLOP/s")
    flops = flops_per_token(SHAPE) * tokens
    torch.manual_seed(0)
    model = Model(SHAPE).to("cuda", torch.bfloat16)
    for label, compiled in (("torch eager", False), ("torch.compile", True)):
        t0 = time.perf_counter()
        seconds = time_steps(torch_step(model, compiled), args.steps)
        write(f"- {label}: {seconds * 1e3:.1f} ms/step, {tokens / seconds:.0f} tokens/s, "
              f"MFU {flops / seconds / 1e12 / peak:.1%} (phase {time.perf_counter() - t0:.0f} s)")
    missing = dygrad_missing_kernels()
    if missing:
        write(f"- dygrad: not run: {len(missing)} ops its LLaMA step issues have no CUDA kernel yet: "
              f"{', '.join(missing)}")
    else:
        write("- dygrad: every op of its LLaMA step has a CUDA kernel, but its model has no grouped-query attention "
              "(4 KV heads) yet: not run")


if __name__ == "__main__":
    main()
