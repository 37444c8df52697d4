"""One framework's side of tests/python/test_transformers.py: Hugging Face transformers models built from tiny
configs, trained, run and saved, with `torch` being real PyTorch or dygrad (through dygrad.as_torch).

    python3 hf_worker.py PHASE DIR OUT.json

  torch-init  (real torch) builds each family from its config with torch's initial weights, saves them with
              save_pretrained into DIR/<family>/init, then, per attention implementation, trains 3 AdamW steps and
              generates greedily with the KV cache: losses and tokens go into OUT.json.
  dygrad      (dygrad standing in for torch) loads DIR/<family>/init with from_pretrained, trains and generates as
              above, saves the trained model into DIR/<family>/dygrad-<attn>, and records its logits on a probe
              batch and the bytes of each parameter (a digest).
  torch-load  (real torch) loads DIR/<family>/dygrad-<attn> with from_pretrained: its logits on the probe batch
              and its parameters' digests.
Nothing is downloaded: every model comes from a config object."""
import hashlib
import json
import os
import sys

import numpy as np

PHASE, ROOT, OUT = sys.argv[1:4]
if PHASE == "dygrad":
    import dygrad.as_torch
    dygrad.as_torch.install()
import torch  # noqa: E402  (real torch, or dygrad after install())
import transformers  # noqa: E402

transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
ATTENTION = ("eager", "sdpa")
SMALL = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)


def configs():
    """family -> (model class, config): about 30k parameters each, no dropout (the runs must be exact)."""
    t = transformers
    return {
        "llama": (t.LlamaForCausalLM, t.LlamaConfig(**SMALL)),
        "gpt2": (t.GPT2LMHeadModel, t.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
        "qwen2": (t.Qwen2ForCausalLM, t.Qwen2Config(**SMALL)),  # biases on q, k, v
        "mistral": (t.MistralForCausalLM, t.MistralConfig(**SMALL, sliding_window=8)),  # a sliding-window mask
        "phi3": (t.Phi3ForCausalLM, t.Phi3Config(**SMALL, pad_token_id=0)),  # fused qkv and gate_up projections
    }


def batch():
    rng = np.random.default_rng(0)
    data = rng.integers(1, 96, size=(2, 16))
    return torch.tensor(data), torch.tensor(data[:1, :6])  # training batch, generation prompt


def train_and_generate(model):
    """3 AdamW steps on a fixed batch (their losses), then greedy generation with the KV cache (its tokens)."""
    ids, prompt = batch()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(3):
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    model.eval()
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=10, do_sample=False,
                             use_cache=True, pad_token_id=0)
    return losses, out.tolist()


def probe(model):
    """The logits on the training batch, and a digest of each parameter's bytes."""
    ids, _ = batch()
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    digests = {name: hashlib.sha256(p.detach().numpy().astype(np.float32).tobytes()).hexdigest()
               for name, p in model.state_dict().items()}
    return logits.numpy().astype(np.float64).ravel().tolist(), digests


def main():
    results = {}
    for family, (cls, config) in configs().items():
        base = os.path.join(ROOT, family)
        if PHASE == "torch-init":
            torch.manual_seed(0)
            cls(config).save_pretrained(os.path.join(base, "init"))
        for attn in ATTENTION:
            key = f"{family}/{attn}"
            if PHASE == "torch-load":
                model = cls.from_pretrained(os.path.join(base, f"dygrad-{attn}"), attn_implementation=attn)
                logits, digests = probe(model)
                results[key] = {"logits": logits, "digests": digests}
                continue
            model = cls.from_pretrained(os.path.join(base, "init"), attn_implementation=attn)
            assert model.config._attn_implementation == attn, model.config._attn_implementation
            losses, tokens = train_and_generate(model)
            results[key] = {"losses": losses, "tokens": tokens}
            if PHASE == "dygrad":
                model.save_pretrained(os.path.join(base, f"dygrad-{attn}"))
                results[key]["logits"], results[key]["digests"] = probe(model)
    with open(OUT, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
