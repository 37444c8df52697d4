"""A small GPT-2 trained on synthetic text, written the way einops-style repositories write it: heads split
and merged with einops.rearrange and an einops.layers.torch.Rearrange layer, attention scores with
einops.einsum, a causal mask buffer and masked_fill, positions with einops.repeat, a per-sequence loss with
einops.reduce, gradient accumulation over micro-batches, AdamW with a OneCycleLR schedule, clip_grad_norm_,
and logging with f"{loss:.4f}" on 0-d tensors (no .item()).

    python3 gpt2_einops.py --steps 20 [--save-init init.pt | --init-from init.pt] [--out ckpt.pt]
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import einsum, rearrange, reduce, repeat
from einops.layers.torch import Rearrange


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, max_len):
        super().__init__()
        self.n_heads = n_heads
        self.scale = (d_model // n_heads) ** -0.5
        self.to_qkv = nn.Linear(d_model, 3 * d_model)
        self.split_heads = Rearrange("b t (three h d) -> three b h t d", three=3, h=n_heads)
        self.proj = nn.Linear(d_model, d_model)
        mask = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
        self.register_buffer("causal_mask", rearrange(mask, "i j -> 1 1 i j"), persistent=False)

    def forward(self, x):
        T = x.shape[1]
        q, k, v = self.split_heads(self.to_qkv(x))
        scores = einsum(q, k, "b h i d, b h j d -> b h i j") * self.scale
        scores = scores.masked_fill(~self.causal_mask[:, :, :T, :T], float("-inf"))
        attn = scores.softmax(dim=-1)
        out = einsum(attn, v, "b h i j, b h j d -> b h i d")
        return self.proj(rearrange(out, "b h t d -> b t (h d)"))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, max_len):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, max_len)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * d_model, d_model),
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT2(nn.Module):
    def __init__(self, vocab_size, max_len, d_model=64, n_layers=2, n_heads=4):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, n_heads, max_len) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layers))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        B, T = idx.shape
        pos = repeat(torch.arange(T, device=idx.device), "t -> b t", b=B)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        x = self.ln_f(self.blocks(x))
        return self.head(x)


def make_corpus(seed=0, n_chars=40_000):
    """Text from a small vocabulary of words, as bytes: the model learns spelling and spacing."""
    rng = np.random.default_rng(seed)
    words = ["tensor", "gradient", "layer", "attention", "token", "batch", "loss", "step", "model", "head"]
    text = []
    while sum(len(w) + 1 for w in text) < n_chars:
        text.append(words[rng.integers(len(words))])
    return np.frombuffer(" ".join(text).encode(), dtype=np.uint8).astype(np.int64)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--grad-accum", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=48)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--save-init", default=None)
    parser.add_argument("--init-from", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    data = make_corpus()
    vocab_size = 256
    model = GPT2(vocab_size, args.seq_len)
    if args.init_from:
        model.load_state_dict(torch.load(args.init_from, map_location="cpu"))
    if args.save_init:
        torch.save(model.state_dict(), args.save_init)
    print(f"{sum(p.numel() for p in model.parameters()) / 1e3:.1f}K parameters")

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps + 1,
                                                    pct_start=0.25)

    batch_rng = np.random.default_rng(args.seed)

    def get_batch():
        ix = batch_rng.integers(0, len(data) - args.seq_len - 1, size=args.micro_batch)
        chunks = torch.from_numpy(np.stack([data[i:i + args.seq_len + 1] for i in ix]))
        return chunks[:, :-1], chunks[:, 1:]

    model.train()
    tokens = 0
    start = time.perf_counter()
    for step in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        step_loss = torch.zeros(())
        for _ in range(args.grad_accum):
            x, y = get_batch()
            logits = model(x)
            token_loss = F.cross_entropy(rearrange(logits, "b t v -> (b t) v"), rearrange(y, "b t -> (b t)"),
                                         reduction="none")
            seq_loss = reduce(token_loss, "(b t) -> b", "mean", b=x.shape[0])
            loss = seq_loss.mean() / args.grad_accum
            loss.backward()
            step_loss += loss.detach()
            tokens += x.numel()
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        print(f"step {step}: loss {step_loss.item():.8e}")
        print(f"  loss {step_loss:.4f} | worst sequence {seq_loss.max():.4f} | grad norm {grad_norm:.3f} "
              f"| lr {scheduler.get_last_lr()[0]:.2e}")
    elapsed = time.perf_counter() - start
    print(f"tokens/s {tokens / elapsed:.1f}")

    if args.out:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict()}, args.out)

    model.eval()
    idx = torch.tensor([list(b"the ")], dtype=torch.long)
    with torch.no_grad():
        for _ in range(24):
            logits = model(idx[:, -args.seq_len:])[:, -1]
            idx = torch.cat([idx, logits.argmax(dim=-1, keepdim=True)], dim=1)
    print("greedy", idx[0].tolist())
    print("text", repr(bytes(idx[0].tolist()).decode(errors="replace")))


if __name__ == "__main__":
    main()
