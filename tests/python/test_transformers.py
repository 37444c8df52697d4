"""Issue 41, part 3: Hugging Face transformers runs unchanged on dygrad (through dygrad.as_torch) and matches torch.

For LLaMA, GPT-2, Qwen2, Mistral (a sliding window) and Phi-3 (fused projections), each built from a tiny config
offline, with torch's initial weights (saved by torch's save_pretrained, loaded by dygrad's from_pretrained), and
with attn_implementation "eager" and "sdpa": 3 AdamW steps give torch's losses within float rounding, greedy
generation with the KV cache gives torch's tokens, and what dygrad saves with save_pretrained torch loads with
from_pretrained (the same parameter bytes, the same logits). Each framework runs in its own process
(tests/python/hf_worker.py: torch, then dygrad, then torch again), so neither sees the other's `torch`.
Also: `import transformers` under as_torch where no torch package is installed."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed")

WORKER = os.path.join(os.path.dirname(__file__), "hf_worker.py")
FAMILIES = ["llama", "gpt2", "qwen2", "mistral", "phi3"]
ATTENTION = ["eager", "sdpa"]
# float32 rounding: the two frameworks' kernels sum in different orders (measured: losses 1.2e-7 relative apart,
# logits 2.4e-7 absolute, at magnitudes about 1).
LOSS_RTOL = 1e-6
LOGITS_ATOL = 2e-6


def run_worker(phase, root, env):
    out = os.path.join(root, f"{phase}.json")
    result = subprocess.run([sys.executable, WORKER, phase, root, out], capture_output=True, text=True, timeout=300,
                            env=env)
    assert result.returncode == 0, f"{phase} failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    with open(out) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """torch builds and saves the initial weights and runs; dygrad loads, runs and saves; torch loads that."""
    root = str(tmp_path_factory.mktemp("hf"))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    return {phase: run_worker(phase, root, env) for phase in ("torch-init", "dygrad", "torch-load")}


@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("family", FAMILIES)
def test_training_losses_match_torch(runs, family, attn):
    key = f"{family}/{attn}"
    expected, got = runs["torch-init"][key]["losses"], runs["dygrad"][key]["losses"]
    assert len(got) == 3
    np.testing.assert_allclose(got, expected, rtol=LOSS_RTOL, atol=0, err_msg=key)


@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_generation_with_the_kv_cache_matches_torch(runs, family, attn):
    key = f"{family}/{attn}"
    expected, got = runs["torch-init"][key]["tokens"], runs["dygrad"][key]["tokens"]
    assert len(got[0]) == 16 and got == expected, key


@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("family", FAMILIES)
def test_torch_loads_what_dygrad_saved(runs, family, attn):
    key = f"{family}/{attn}"
    saved, loaded = runs["dygrad"][key], runs["torch-load"][key]
    assert loaded["digests"] == saved["digests"], key  # every parameter and buffer, byte for byte
    np.testing.assert_allclose(loaded["logits"], saved["logits"], rtol=0, atol=LOGITS_ATOL, err_msg=key)


HIDE_TORCH = """
    import importlib.abc
    import importlib.machinery
    import sys

    class HideTorch(importlib.abc.MetaPathFinder):
        '''The environment without PyTorch: its package is neither importable nor in the installed metadata.'''
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    class PathFinderWithoutTorch(importlib.machinery.PathFinder):
        @classmethod
        def find_distributions(cls, context=None):
            context = context or importlib.metadata.DistributionFinder.Context()
            return (d for d in super().find_distributions(context) if (d.metadata["Name"] or "").lower() != "torch")

    import importlib.metadata
    sys.meta_path[:] = [PathFinderWithoutTorch if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
    sys.meta_path.insert(0, HideTorch())
    try:
        import torch
        raise SystemExit("torch is still importable")
    except ModuleNotFoundError:
        pass
    assert all((d.metadata["Name"] or "").lower() != "torch" for d in importlib.metadata.distributions())
"""


def test_transformers_imports_and_runs_under_as_torch_without_torch_installed():
    """Where torch is not installed, transformers finds dygrad's "torch" (its version is the API level) and turns
    PyTorch on: a model builds and runs."""
    code = textwrap.dedent(HIDE_TORCH) + textwrap.dedent("""
        import dygrad.as_torch
        dygrad.as_torch.install()  # in front of the hider: `torch` is dygrad's
        import torch
        import transformers
        from transformers.utils import is_torch_available
        assert is_torch_available(), "transformers did not find torch"
        assert importlib.metadata.version("torch") == torch.__version__
        config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, num_key_value_heads=1)
        model = transformers.LlamaForCausalLM(config)
        loss = model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss
        assert isinstance(loss, dygrad.Tensor) and loss.item() > 0
        print("ok", transformers.__version__)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-4000:]
