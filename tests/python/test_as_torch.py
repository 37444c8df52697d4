"""Issue 12 item 5: `python3 -m dygrad.as_torch script.py ARGS` runs an unmodified torch script on dygrad:
torch and its submodules resolve to dygrad's, a missing name fails with an error that names it and points
at docs/pytorch-api.md (an AttributeError subclass, so hasattr probes still work)."""
import subprocess
import sys
import textwrap

import pytest


def run_script(tmp_path, source, *args):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run([sys.executable, "-m", "dygrad.as_torch", str(script), *args], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)


def test_torch_and_its_submodules_resolve_to_dygrad(tmp_path):
    result = run_script(tmp_path, """
        import sys
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        from torch import optim
        from torch.optim.lr_scheduler import StepLR
        from torch.utils.data import DataLoader, TensorDataset
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        import dygrad
        assert torch.Tensor is dygrad.Tensor and nn.Linear is dygrad.nn.Linear and F.relu is dygrad.nn.functional.relu
        assert optim.AdamW is dygrad.optim.AdamW and StepLR is dygrad.optim.lr_scheduler.StepLR
        assert DataLoader is dygrad.utils.data.DataLoader and dist.is_available() == dygrad._C._mpi_built()
        assert torch.nn.functional is F and torch.utils.data.TensorDataset is TensorDataset
        assert not hasattr(torch, "no_such_function") and hasattr(torch, "zeros")
        torch.backends.cudnn.benchmark = True  # a flag write reaches dygrad's module
        assert dygrad.backends.cudnn.benchmark is True
        print("argv", sys.argv[1:], __name__, type(torch.zeros(2)).__module__)
    """, "--lr", "0.1")
    assert result.returncode == 0, result.stderr
    assert "argv ['--lr', '0.1'] __main__ dygrad" in result.stdout


def test_tensor_type_names_torchs_types_under_as_torch(tmp_path):
    """A script that branches on x.type() == 'torch.FloatTensor' takes torch's branch (issue 37)."""
    result = run_script(tmp_path, """
        import torch
        x = torch.ones(2)
        names = [x.type(), x.double().type(), x.long().type(), x.bool().type(), x.half().type(),
                 torch.ones(1, dtype=torch.complex64).type()]
        assert names == ["torch.FloatTensor", "torch.DoubleTensor", "torch.LongTensor", "torch.BoolTensor",
                         "torch.HalfTensor", "torch.ComplexFloatTensor"], names
        branch = "float" if x.type() == "torch.FloatTensor" else "other"
        assert x.type("torch.DoubleTensor").dtype == torch.float64 and x.type(torch.IntTensor).dtype == torch.int32
        assert x.type(torch.FloatTensor) is x and isinstance(x, torch.FloatTensor)
        try:
            x.type("torch.Foo")
        except ValueError as e:
            print("refused:", e)
        print("branch", branch)
    """)
    assert result.returncode == 0, result.stderr
    assert "branch float" in result.stdout and "refused: invalid type: 'torch.Foo'" in result.stdout


def test_the_new_dtypes_are_torchs_names_under_as_torch(tmp_path):
    result = run_script(tmp_path, """
        import torch
        from torch import float8_e4m3fn, int8
        x = torch.tensor([1, -2, 3], dtype=int8)
        assert x.dtype == torch.int8 and str(x.dtype) == "dygrad.int8" and torch.int16 is torch.short
        assert (x + torch.tensor([200], dtype=torch.uint8)).dtype == torch.int16
        w = torch.tensor([1.5, -448.0]).to(float8_e4m3fn)
        assert w.tolist() == [1.5, -448.0] and w.dtype.itemsize == 1 and w.dtype.is_floating_point
        assert torch.zeros(2, dtype=torch.uint64).tolist() == [0, 0] and torch.iinfo(torch.uint32).max == 2 ** 32 - 1
        assert (w * w).tolist() == [2.25, 448.0] and (w * w).dtype == float8_e4m3fn  # saturates, as torch's
        try:
            w + w
        except NotImplementedError as e:
            print("refused:", e)
    """)
    assert result.returncode == 0, result.stderr
    assert "refused: [add] not implemented for 'Float8_e4m3fn'" in result.stdout


@pytest.mark.parametrize("line,name", [
    ("torch.no_such_function(1)", "torch.no_such_function"),
    ("from torch.nn import NoSuchLayer", "torch.nn.NoSuchLayer"),
    ("import torch.no_such_module", "torch.no_such_module"),
    ("torch.zeros(2).no_such_method()", "torch.Tensor.no_such_method"),
    ("from torch import no_such_constant", "torch.no_such_constant"),
    ("torch.nn.init.no_such_init_(1)", "torch.nn.init.no_such_init_"),  # a submodule reached as an attribute
])
def test_a_missing_name_is_named_with_a_pointer_to_the_conformance_table(tmp_path, line, name):
    result = run_script(tmp_path, f"""
        import torch
        import torch.nn

        def main():
            {line}

        main()
    """)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert name in last and "docs/pytorch-api.md" in last, result.stderr
    assert last.startswith(("dygrad.as_torch.TorchNameMissing", "TorchNameMissing", "ModuleNotFoundError",
                            "dygrad.as_torch.TorchImportMissing", "TorchImportMissing")), last


def test_torch_version_is_the_api_level_and_the_package_is_found_without_torch(tmp_path):
    """Libraries gate on torch's version (transformers needs >= 2.6): "0.1.0", dygrad's own, sent them down pre-2.0
    paths or disabled torch. The API level dygrad implements, with dygrad's version as a local label; and where no
    real torch is installed, importlib.metadata finds a "torch" of that version (here: pretending none is)."""
    result = run_script(tmp_path, """
        import importlib.metadata
        import torch
        import dygrad.as_torch
        from packaging.version import parse
        v = torch.__version__
        assert v == "2.13.0+dygrad.0.1.0" and torch.version.__version__ == v, v
        assert v >= "2.6" and v >= (2, 13) and v < "2.14" and not v < (2, 13, 0) and v != "2.12"
        assert parse(v) >= parse("2.6.0") and torch.version.cuda is None and torch.version.hip is None
        assert importlib.metadata.version("torch") != v  # the real torch's metadata (the peer is installed)
        dygrad.as_torch._real_torch_installed = lambda: False
        assert importlib.metadata.version("torch") == v
        print("ok")
    """)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_install_refuses_when_real_torch_is_loaded():
    code = "import torch, dygrad.as_torch as h\ntry:\n    h.install()\nexcept RuntimeError as e:\n    print('refused', e)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "refused" in result.stdout and "already imported" in result.stdout


def test_help_and_usage(tmp_path):
    result = subprocess.run([sys.executable, "-m", "dygrad.as_torch"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "usage: python3 -m dygrad.as_torch script.py" in result.stdout
