"""What libraries import from torch at load time (issue 41): the stand-ins for features dygrad does not provide
yet import and pass the checks made at import (isinstance, decorators), and raise NotProvidedError naming the
feature when used; torch.library's custom operators and torch.distributions.constraints work, against torch."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import dygrad as dg


def test_stand_ins_import_and_raise_when_used():
    from dygrad.distributed.fsdp import FullyShardedDataParallel, fully_shard
    from dygrad.distributed.tensor import DeviceMesh, DTensor, distribute_tensor
    from dygrad.distributed.tensor.parallel import ColwiseParallel, parallelize_module
    from dygrad.nn.attention.flex_attention import BlockMask, and_masks, create_block_mask, flex_attention, or_masks
    assert not isinstance(dg.ones(2), DTensor) and not isinstance(dg.nn.Linear(1, 1), FullyShardedDataParallel)
    # (the placements Shard, Replicate, Partial are torch's values: tests/python/test_transformers_names.py)
    for call, name in [(DTensor, "torch.distributed.tensor.DTensor"), (lambda: DeviceMesh("cpu", [0]), "DeviceMesh"), (lambda: distribute_tensor(1), "distribute_tensor"),
                       (ColwiseParallel, "ColwiseParallel"),
                       (lambda: parallelize_module(None, None), "parallelize_module"),
                       (lambda: flex_attention(1, 2, 3), "flex_attention"), (lambda: create_block_mask(None), "create_block_mask"),
                       (lambda: dg.distributed.all_to_all_single(dg.ones(1), dg.ones(1)), "all_to_all_single")]:
        with pytest.raises(dg.NotProvidedError, match=f"{name}.* is not provided by dygrad"):
            call()
    assert issubclass(dg.NotProvidedError, NotImplementedError) and BlockMask is not None
    # fully_shard is real (docs/distributed.md): without a process group it raises torch's error
    if not dg.distributed.is_initialized():
        with pytest.raises(ValueError, match="Default process group has not been initialized"):
            fully_shard(dg.nn.Linear(1, 1))
    even = and_masks(lambda b, h, q, k: q >= k, lambda b, h, q, k: (q + k) % 2 == 0)
    assert even(0, 0, 3, 1) and not even(0, 0, 1, 3) and or_masks(lambda *a: False, lambda *a: True)(0, 0, 0, 0)


def test_cuda_and_accelerator_probes_answer_as_torch_without_a_gpu():
    assert dg.cuda.is_current_stream_capturing() is False
    assert (dg.accelerator.is_available(), dg.accelerator.current_accelerator(), dg.accelerator.device_count()) == \
        (torch.accelerator.is_available(), torch.accelerator.current_accelerator(), torch.accelerator.device_count())
    for lib in (dg, torch):
        for cls in (lib.cuda.Stream, lib.cuda.Event, lib.cuda.CUDAGraph):
            with pytest.raises(RuntimeError):
                cls()
    assert not isinstance(dg.ones(1), dg.cuda.Stream)


def test_a_library_imports_the_stand_ins_under_as_torch(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch.distributed.tensor import DTensor, Replicate, Shard
        from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
        from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
        import torch.distributed.tensor.parallel
        import torch.distributions.constraints
        import torch.library
        import torch._dynamo
        assert torch.compiler.is_compiling() is False and torch.jit.is_tracing() is False
        assert not isinstance(torch.ones(1), DTensor) and torch.accelerator.current_accelerator() is None
        print("imported")
    """))
    result = subprocess.run([sys.executable, "-m", "dygrad.as_torch", str(script)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "imported" in result.stdout, result.stderr


def test_custom_op_runs_eagerly_with_its_registered_autograd_as_torch():
    seen = {}
    for lib, tag in ((dg, "dgtest"), (torch, "tortest")):
        @lib.library.custom_op(f"{tag}::scaled", mutates_args=())
        def scaled(x: lib.Tensor, k: float = 2.0) -> lib.Tensor:
            return x * k

        ns = getattr(lib.ops, tag)
        out = [scaled(lib.ones(2)).tolist(), ns.scaled(lib.ones(2), 3.0).tolist()]
        x = lib.ones(2, requires_grad=True)
        y = scaled(x)
        out.append(y.requires_grad)
        with pytest.raises(RuntimeError, match=f"Trying to backward through {tag}.scaled.default but no autograd "
                                               "formula was registered"):
            y.sum().backward()

        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        def backward(ctx, grad):
            return grad * ctx.k, None

        scaled.register_autograd(backward, setup_context=setup_context)
        x = lib.ones(2, requires_grad=True)
        scaled(x, 5.0).sum().backward()
        out.append(x.grad.tolist())
        scaled.register_fake(lambda x, k=2.0: x.new_empty(x.shape))
        lib.library.opcheck(scaled, (lib.ones(3),))
        seen[tag[:2]] = out
    assert seen["dg"] == seen["to"] == [[2.0, 2.0], [3.0, 3.0], True, [5.0, 5.0]]
    with pytest.raises(ValueError, match="namespace::name"):
        dg.library.custom_op("no_namespace", mutates_args=())(lambda x: x)


@pytest.mark.parametrize("name", ["real", "positive", "nonnegative", "unit_interval", "boolean", "nonnegative_integer",
                                  "positive_integer", "simplex", "real_vector"])
def test_constraints_check_as_torch(name):
    from dygrad.distributions import constraints as ours
    import torch.distributions.constraints as theirs
    x = np.array([[0.0, 0.5, 1.0, -1.0], [0.25, 0.25, 0.25, 0.25], [2.0, 3.0, np.nan, 1.0]])
    assert getattr(ours, name).check(dg.tensor(x)).tolist() == getattr(theirs, name).check(torch.tensor(x)).tolist()
    assert getattr(ours, name).event_dim == getattr(theirs, name).event_dim
    for make in ("interval", "half_open_interval", "integer_interval"):
        assert getattr(ours, make)(-1, 1).check(dg.tensor(x)).tolist() == \
            getattr(theirs, make)(-1, 1).check(torch.tensor(x)).tolist()
