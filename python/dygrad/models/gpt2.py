"""GPT-2 as nanoGPT (karpathy/nanoGPT) writes it: LayerNorm with bias, GELU (tanh form), learned positions, weight
tying, causal self-attention from one QKV projection. Issue 35's second model: dygrad has no fused twin for it by
name, so it measures what dygrad.jit's O1 does for code it has never seen (bench/jit_gpt2.py).

`fused=True` calls the library's fused functions where they exist: F.scaled_dot_product_attention(is_causal=True),
F.gelu(approximate="tanh"), F.layer_norm (composed of ops in dygrad's eager: it has no fused LayerNorm kernel),
F.cross_entropy. `fused=False` writes LayerNorm, GELU and attention with basic ops as nanoGPT's first version did
(`new_gelu`, `att.masked_fill(self.bias == 0, -inf)`, softmax, `att @ v`); both use F.cross_entropy.

The classes are built over a library module (`build(dygrad)` or `build(torch)`), so the peer runs the very same code:

    GPT, GPTConfig = gpt2.build(dg)
    model = GPT(GPTConfig(n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=256), fused=False)
"""
import math
from dataclasses import dataclass


@dataclass
class GPTConfig:
    block_size: int = 256
    vocab_size: int = 256  # bytes, as the LLaMA bench's
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.0
    bias: bool = True
    batch_size: int = 8

    def flops_per_token(self):
        """6 N for the matmul parameters plus attention's 6 L T C (forward and backward), as nanoGPT's estimate."""
        n = self.n_layer * 12 * self.n_embd ** 2 + self.vocab_size * self.n_embd
        return 6 * n + 6 * self.n_layer * self.block_size * self.n_embd


CONFIGS = {
    "tiny": GPTConfig(block_size=32, n_layer=2, n_head=2, n_embd=32, batch_size=2),
    "bench": GPTConfig(),
}


def build(lib):
    """(GPT, GPTConfig) over the library module `lib` (dygrad or torch)."""
    nn, F = lib.nn, lib.nn.functional

    def new_gelu(x):
        return 0.5 * x * (1.0 + lib.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * lib.pow(x, 3.0))))

    class LayerNorm(nn.Module):
        def __init__(self, ndim, bias, fused):
            super().__init__()
            self.weight = nn.Parameter(lib.ones(ndim))
            self.bias = nn.Parameter(lib.zeros(ndim)) if bias else None
            self.fused = fused

        def forward(self, x):
            if self.fused:
                return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
            mean = x.mean(-1, keepdim=True)
            var = ((x - mean) ** 2).mean(-1, keepdim=True)
            y = (x - mean) / lib.sqrt(var + 1e-5) * self.weight
            return y + self.bias if self.bias is not None else y

    class CausalSelfAttention(nn.Module):
        def __init__(self, config, fused):
            super().__init__()
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
            self.attn_dropout = nn.Dropout(config.dropout)
            self.resid_dropout = nn.Dropout(config.dropout)
            self.n_head, self.n_embd, self.dropout, self.fused = config.n_head, config.n_embd, config.dropout, fused
            if not fused:
                size = config.block_size
                self.register_buffer("bias", lib.tril(lib.ones(size, size)).view(1, 1, size, size))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            if self.fused:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0,
                                                   is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
                att = F.softmax(att, dim=-1)
                att = self.attn_dropout(att)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self, config, fused):
            super().__init__()
            self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
            self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
            self.dropout = nn.Dropout(config.dropout)
            self.fused = fused

        def forward(self, x):
            h = self.c_fc(x)
            h = F.gelu(h, approximate="tanh") if self.fused else new_gelu(h)
            return self.dropout(self.c_proj(h))

    class Block(nn.Module):
        def __init__(self, config, fused):
            super().__init__()
            self.ln_1 = LayerNorm(config.n_embd, config.bias, fused)
            self.attn = CausalSelfAttention(config, fused)
            self.ln_2 = LayerNorm(config.n_embd, config.bias, fused)
            self.mlp = MLP(config, fused)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, config, fused=True):
            super().__init__()
            self.config = config
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config, fused) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, config.bias, fused),
            ))
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying
            self.apply(self._init_weights)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            b, t = idx.size()
            pos = lib.arange(0, t, dtype=lib.long, device=idx.device)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            if targets is None:
                return logits
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    return GPT, GPTConfig
