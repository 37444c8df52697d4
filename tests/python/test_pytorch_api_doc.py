"""Issue 12 item 6: docs/pytorch-api.md is what tools/pytorch_api.py generates from dygrad and the tests now
(regenerate it when this fails), and its verdicts agree with the import hook."""
import importlib.util
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def generator():
    spec = importlib.util.spec_from_file_location("pytorch_api", os.path.join(ROOT, "tools", "pytorch_api.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_conformance_table_is_current():
    with open(os.path.join(ROOT, "docs", "pytorch-api.md")) as fh:
        committed = fh.read()
    assert committed == generator().table(), "docs/pytorch-api.md is stale: python3 tools/pytorch_api.py > docs/pytorch-api.md"


def test_verdicts_agree_with_the_import_hook():
    api = generator()
    assert api.dygrad_has("torch.optim.AdamW") and api.dygrad_has("torch.utils.data.DataLoader")
    assert api.dygrad_has("torch.nn.functional.scaled_dot_product_attention") and api.dygrad_has("torch.Tensor.view")
    assert not api.dygrad_has("torch.optim.LBFGS") and not api.dygrad_has("torch.no_such_function")
    for name in api.DIFFERS:  # every difference written down is about a name dygrad has
        assert api.dygrad_has(name), name
