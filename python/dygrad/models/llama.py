"""LLaMA-style decoder (the model of ../shared/docs/BENCHMARKS.md): byte-level vocabulary, pre-RMSNorm, fused
QKV projection, rotary embedding on q and k (interleaved pairs, theta 10000), causal attention, SwiGLU MLP
w2(silu(w1 x) * w3 x), final RMSNorm, untied head, mean cross-entropy. No biases.

Notation: B batch, T sequence, C model dim, H heads, D head dim (C = H * D), F ffn dim, V vocabulary.

`fused=True` (default) uses dygrad's fused kernels (rms_norm, rotary_attention: rotary embedding and attention
from the QKV projection, swiglu, cross_entropy); `fused=False` composes them from basic ops exactly as a PyTorch
user writes them (../shared/bench/torch_ref.py with SDPA=0), for the unfused-path benchmark and parity checks.
"""
import functools
import math
from dataclasses import dataclass

from .. import _C
from .. import nn
from ..nn import functional as F
from ..utils.checkpoint import recompute_tag as _recompute_tag


@dataclass(frozen=True)
class LlamaConfig:
    n_layers: int
    dim: int
    n_heads: int
    ffn_dim: int
    vocab_size: int = 256
    seq_len: int = 256
    batch_size: int = 8
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    dropout: float = 0.0  # residual dropout after the attention and MLP projections (nanoGPT's); 0 in BENCHMARKS.md

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    def num_params(self):
        per_layer = 2 * self.dim + 4 * self.dim * self.dim + 3 * self.dim * self.ffn_dim
        return self.n_layers * per_layer + 2 * self.vocab_size * self.dim + self.dim

    def flops_per_token(self):
        """The PaLM/nanoGPT estimate 6N + 12 L d T (the MFU numerator)."""
        return 6 * self.num_params() + 12 * self.n_layers * self.dim * self.seq_len


CONFIGS = {
    "tiny": LlamaConfig(n_layers=4, dim=256, n_heads=4, ffn_dim=688, seq_len=256, batch_size=8),
    "bench": LlamaConfig(n_layers=6, dim=384, n_heads=6, ffn_dim=1024, seq_len=256, batch_size=8),
    "small": LlamaConfig(n_layers=12, dim=768, n_heads=12, ffn_dim=2048, seq_len=512, batch_size=4),
}


def rope_tables(head_dim, seq_len, theta=10000.0, dtype=None):
    """cos, sin [T, D/2] for the interleaved rotary embedding."""
    inv = [1.0 / (theta ** (2 * i / head_dim)) for i in range(head_dim // 2)]
    ang = [[t * f for f in inv] for t in range(seq_len)]
    cos = _C.tensor([[math.cos(a) for a in row] for row in ang], dtype=dtype or _C.float32)
    sin = _C.tensor([[math.sin(a) for a in row] for row in ang], dtype=dtype or _C.float32)
    return cos, sin


def rope_composed(x, cos, sin):
    """x [B, H, T, D]: rotate interleaved pairs (2i, 2i+1), written with basic ops as torch_ref.py does."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return _C.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps, fused):
        super().__init__()
        self.eps, self.fused = eps, fused
        self.weight = nn.Parameter(_C.ones((dim,)))

    def forward(self, x):
        if self.fused:
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        return x * _C.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


# The halves of a block that Block.recompute checkpoints separately.
PARTS = ("attention", "mlp")
# What recompute_blocks(mode) sets on the last block (its MLP half's backward runs first, at the step's peak).
LAST_BLOCK_MODE = {"memory_bound": "attention:memory_bound", "memory_bound_and_qkv": "attention:memory_bound_and_qkv",
                   "full": "attention:full"}


class Block(nn.Module):
    def __init__(self, cfg, fused):
        super().__init__()
        self.n_heads, self.fused, self.dropout = cfg.n_heads, fused, cfg.dropout
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps, fused)
        self.mlp_norm = RMSNorm(cfg.dim, cfg.norm_eps, fused)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.o = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        return self.mlp(self.attention(x, cos, sin, mask))

    def attention(self, x, cos, sin, mask):
        """The attention half: x + o(attention(rotary(qkv(attn_norm(x)))))."""
        B, T, C = x.shape
        H = self.n_heads
        with _recompute_tag("qkv"):  # names the projection for the memory_bound_and_qkv recompute preset
            qkv = self.qkv(self.attn_norm(x))
        if self.fused:
            # rotary on q and k, then causal attention, in one op on the projection: it saves qkv alone (no
            # rotated q, k or copy of v) and its backward writes qkv's gradient whole (docs/ops.md).
            y = F.rotary_attention(qkv, cos, sin, H, "interleaved", is_causal=True)
        else:
            q, k, v = qkv.view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)  # [B, H, T, D] views, no copy
            q, k = rope_composed(q, cos, sin), rope_composed(k, cos, sin)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return x + self._drop(self.o(y))

    def _drop(self, y):
        return F.dropout(y, self.dropout, self.training) if self.dropout > 0 else y

    def mlp(self, x):
        """The MLP half: x + w2(swiglu(w1(h), w3(h))), h = mlp_norm(x)."""
        h = self.mlp_norm(x)
        if self.fused:
            return x + self._drop(self.w2(F.swiglu(self.w1(h), self.w3(h))))
        return x + self._drop(self.w2(F.silu(self.w1(h)) * self.w3(h)))

    def recompute(self, mode=True, policy=None, parts=PARTS, **kwargs):
        """Module.recompute per half: the attention half and the MLP half run under separate checkpoints (each
        with `policy`; None: full recompute), `parts` names which ("attention", "mlp"). Separate checkpoints
        matter at the peak: while a half's backward runs, the other half of the block holds only what its
        checkpoint keeps (docs/recompute.md, "Two checkpoints per block"). Returns the block."""
        if not mode:
            self.__dict__.pop("forward", None)
            return self
        parts = tuple(parts)
        unknown = [p for p in parts if p not in PARTS]
        if unknown or not parts:
            raise ValueError(f"[Block.recompute] parts must be a non-empty subset of {PARTS}, got {parts}")
        object.__setattr__(self, "forward", functools.partial(_recompute_parts_forward, self, policy, parts))
        return self


def _recompute_parts_forward(block, policy, parts, x, cos, sin, mask):
    # Block.recompute(): each named half under its own checkpoint (a partial of this, so the block still pickles)
    from ..nn.module import _recompute_forward_fn
    if "attention" in parts:
        x = _recompute_forward_fn(Block.attention, block, policy, x, cos, sin, mask)
    else:
        x = block.attention(x, cos, sin, mask)
    if "mlp" in parts:
        return _recompute_forward_fn(Block.mlp, block, policy, x)
    return block.mlp(x)


class Llama(nn.Module):
    def __init__(self, cfg, fused=True):
        super().__init__()
        self.cfg, self.fused = cfg, fused
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg, fused) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps, fused)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.head_dim, cfg.seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.register_buffer("causal_mask", _C.triu(_C.ones((cfg.seq_len, cfg.seq_len), dtype=_C.bool), 1),
                             persistent=False)

    def forward(self, idx, targets=None):
        """idx [B, T] int64 token ids; returns logits [B, T, V], or the mean loss when targets are given."""
        B, T = idx.shape
        if T > self.cfg.seq_len:
            raise ValueError(f"[llama] sequence length {T} exceeds the model's {self.cfg.seq_len}")
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        mask = self.causal_mask[:T, :T]
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, cos, sin, mask)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))

    def recompute_blocks(self, mode="full", last=False):
        """Activation recompute per block (Block.recompute: its attention and MLP halves under separate
        checkpoints): mode "full", "memory_bound", "memory_bound_and_qkv" (dygrad.utils.checkpoint.policies),
        "none", "attention:<mode>" (the attention half only), or a list of those, one per block (a plan's).
        Unless `last`, the last block's MLP half stays plain ("attention:<mode>"): the backward starts with it,
        so its activations are all needed again at once at the step's peak, and recomputing them would cost
        time and save no peak memory; its attention half is recomputed, as it is only needed after the MLP
        half's backward freed that (docs/recompute.md). Returns the modes set."""
        from ..utils.checkpoint import apply_recompute
        n = len(self.blocks)
        modes = list(mode) if isinstance(mode, (list, tuple)) else [mode] * n
        if len(modes) != n:
            raise ValueError(f"[llama.recompute_blocks] {len(modes)} modes for {n} blocks")
        if not last and not isinstance(mode, (list, tuple)):
            modes[-1] = LAST_BLOCK_MODE.get(mode, "none")
        apply_recompute(self.blocks, modes)
        return modes

    def generate(self, idx, max_new_tokens, temperature=1.0, seed=0):
        """Samples continuations of idx [B, T0] (int64). No KV cache: each step recomputes the last window.
        The next token is drawn on the host from the softmax of the last position (V = 256 values a row)."""
        import numpy as np

        from ..autograd import no_grad
        rng = np.random.default_rng(seed)
        with no_grad():
            for _ in range(max_new_tokens):
                window = idx[:, -self.cfg.seq_len:]
                logits = self.forward(window)[:, -1, :] / max(temperature, 1e-6)
                probs = F.softmax(logits.double(), dim=-1).numpy()
                picks = [[min(int(np.searchsorted(np.cumsum(row), rng.random())), len(row) - 1)] for row in probs]
                idx = _C.cat((idx, _C.tensor(picks, dtype=_C.int64, device=idx.device)), 1)
        return idx


# torch_ref.py's parameter names -> this model's (the reference's RMSNorm weight is called `w`).
def reference_key(name):
    name = name.replace("emb.", "embed.", 1) if name.startswith("emb.") else name
    name = name.replace(".n1.w", ".attn_norm.weight").replace(".n2.w", ".mlp_norm.weight")
    if name == "norm.w":
        name = "norm.weight"
    return name


def load_reference_state_dict(model, arrays):
    """Loads the weights of ../shared/bench/torch_ref.py's LLaMA given as {name: numpy array}."""
    state = {reference_key(k): _C.from_numpy(v.copy()) for k, v in arrays.items() if not k.startswith(("cos", "sin", "mask"))}
    return model.load_state_dict(state, strict=True)
