"""Generates docs/pytorch-api.md, the conformance table of dygrad against torch 2.13, from what is true now:
for each area, every public torch name is looked up in dygrad the way `python3 -m dygrad.as_torch` resolves
it, and counted as tested when a test in tests/python/ names it; DIFFERS (below) says where a supported name
behaves differently. tests/python/test_pytorch_api_doc.py fails when the committed table is stale.

    python3 tools/pytorch_api.py > docs/pytorch-api.md
"""
import glob
import importlib
import os
import re
import sys

import torch

import dygrad
from dygrad import as_torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Where a supported torch name behaves differently in dygrad (kept next to the generator so the table says it).
DIFFERS = {
    "torch.cpu.Event": "marks a point in dygrad's asynchronous CPU stream: query/synchronize act, and it takes "
                       "torch.cuda.Event's arguments, with elapsed_time (and dygrad's device_time) under "
                       "enable_timing=True; torch's takes none and does nothing (docs/stream.md, \"Timing marks\")",
    "torch.cpu.synchronize": "waits for dygrad's CPU stream and raises a deferred kernel error; torch's does nothing",
    "torch.nn.attention.sdpa_kernel": "the switches are recorded and reported as torch's "
                                      "(torch.backends.cuda.*_sdp_enabled); dygrad's attention has one "
                                      "implementation (its flash kernel) and does not consult them",
    "torch.addcmul": "composed: (value * tensor1) * tensor2 is rounded before the add, where torch fuses it (an "
                     "FMA): results may differ by 1 ulp; addcdiv is bitwise torch's",
    "torch.prod": "composed: the last entry of cumprod, whose running product accumulates in double for float32 "
                  "(torch's reduction multiplies in float32 in its own order): float results may differ by rounding; "
                  "the gradient is cumprod's, zero-safe",
    "torch.normal": "dygrad's generator draws the numbers (not torch's stream; generator= a dygrad.Generator's seed)",
    "torch.Tensor.random_": "dygrad's generator draws the numbers (its own stream, generator= a dygrad.Generator's seed: "
                            "docs/rng.md); torch's ranges, dtype rules, errors and warnings. An int64 draw up to "
                            "2**63 - 1 never returns 2**63 - 1 itself (randint's exclusive bound)",
    "torch.Tensor.exponential_": "dygrad's generator draws the numbers (docs/rng.md), computed in float32 (float64 for "
                                 "a float64 tensor) and rounded once; torch's distribution, dtype rules and errors; "
                                 "so are geometric_, cauchy_, log_normal_, uniform_ and normal_",
    "torch.Tensor.resize_": "memory_format is ignored (contiguous strides); growing replaces the storage's memory "
                            "(every view sees it, as torch's); memory shared with NumPy, pinned or a device's "
                            "cannot grow",
    "torch.Tensor.as_strided_": "no backward: raises NotImplementedError where autograd would record it (a "
                                "non-leaf that requires grad under grad mode)",
    "torch.Tensor.type": "names dygrad's types ('dygrad.FloatTensor'), torch's ('torch.FloatTensor') under "
                         "dygrad.as_torch; 'torch.X' and 'dygrad.X' names, dtypes and the legacy types are all "
                         "accepted as casts",
    "torch.as_tensor": "shares a NumPy array's memory as torch does; device must be the CPU",
    "torch.distributed.tensor.DTensor": "a stand-in: nothing is an instance; constructing raises "
                                        "NotProvidedError (fully_shard's shards are plain tensors); so are "
                                        "DeviceMesh and the tensor.parallel names. The placements (Shard, Replicate, "
                                        "Partial) are torch's values (descriptions libraries build plans from)",
    "torch.distributed.fsdp.fully_shard": "each managed parameter becomes this rank's rows of it (dim 0, padded) as a "
                                          "plain Parameter, not a DTensor: state_dict() holds the shards "
                                          "(dygrad.distributed.fsdp.full_state_dict gathers them); the default group "
                                          "only (mesh= raises NotProvidedError); docs/distributed.md",
    "torch.distributed.optim.ZeroRedundancyOptimizer": "torch's partition, step and state dicts (docs/distributed.md); "
                                                       "overlap_with_ddp=True raises NotProvidedError",
    "torch.library.custom_op": "runs eagerly (no dispatcher): the op is a Python callable, also dg.ops.<ns>.<name>; "
                               "register_fake is recorded, register_autograd wraps it in an autograd Function",
    "torch.finfo": "a plain class (torch's is a C type); same attributes, values and repr",
    "torch.compile": "dygrad.jit's capture and replay (docs/jit.md): the first call runs eagerly, the second is "
                     "captured, then each call is one Task, at O1 (elementwise runs fused into generated C++ "
                     "kernels: docs/jit-fusion.md); mode/options change nothing; a callable backend raises "
                     "NotImplementedError; a Module gives an OptimizedModule (state_dict keys _orig_mod.)",
    "torch.jit.script": "returns the function or module unchanged (it runs eagerly: TorchScript's semantics are "
                        "Python's); wrap it in dygrad.jit to capture it",
    "torch.jit.trace": "returns the function or module unchanged (see torch.jit.script)",
    "torch.onnx.export": "through dygrad.jit's capture (docs/onnx.md): returns None (torch's dynamo=False result; "
                         "no ONNXProgram) and `f` is required; dynamic_axes/dynamic_shapes are fitted from the "
                         "forward lowered at sampled sizes (integer sizes of degree <= 2 in the dims)",
    "torch.set_float32_matmul_precision": "accepted; float32 GEMMs are full float32 at every setting",
    "torch.Generator": "torch's MT19937 draws for randperm/randint (data order); get_state() has dygrad's layout; "
                       "tensor RNG (rand, randn, init, dropout) is dygrad's counter-based generator, not affected",
    "torch.manual_seed": "seeds dygrad's tensor RNG (its own stream of numbers) and the default Generator (torch's)",
    "torch.randperm": "torch's permutation for a seeded Generator",
    "torch.repeat_interleave": "with `output_size` the counts are not read on the host (no sync): a negative count or "
                               "a wrong size is the Task's error, raised at the next sync point; torch raises at the "
                               "call",
    "torch.use_deterministic_algorithms": "dygrad's deterministic mode (set_context): every op bitwise reproducible "
                                          "across runs and thread counts, so none raises or warns for being "
                                          "nondeterministic",
    "torch.device": "a str subclass; only 'cpu' holds tensors. `with torch.device('meta')` makes meta tensors: "
                    "inside it every op runs under meta evaluation (shapes and dtypes, address space only, no "
                    "kernel; docs/memory.md \"Meta tensors\"); after the block an op on a meta tensor reads zeros, "
                    "where torch's result would be a meta tensor too",
    "torch.get_default_dtype": "always float32",
    "torch.set_default_dtype": "float32 only: another floating dtype raises NotProvidedError (dygrad's factories "
                               "are fixed to float32; pass dtype=)",
    "torch.UntypedStorage": "a flat NumPy uint8 buffer: from_file maps the file (shared=False copy-on-write), "
                            "slices share memory; Tensor.untyped_storage() views a tensor's whole storage",
    "torch.uint32": "storage-only, as torch on the CPU: creation, conversions, copies, cat/stack, indexing, where, "
                    "eq/ne, isnan/isinf/isfinite, bitwise and/or/xor, mul, sum, sort/argsort, embedding and the "
                    "roundings (composed, bitwise torch's); what torch refuses (add, lt, max ...) raises "
                    "NotImplementedError naming op and dtype (docs/dtypes.md); so does uint64, which also takes "
                    "Python ints up to 2**64 - 1 in tensor() and full()",
    "torch.float8_e4m3fn": "storage with torch's conversions (bitwise); eq/ne, isnan, where, copies, cat/stack, "
                           "indexing, mul, abs, mm, addmm, index_select, index_put_ and embedding run (bitwise "
                           "torch's); index_put_(accumulate=True), which torch runs too, raises NotImplementedError "
                           "(docs/dtypes.md); so does float8_e5m2",
    "torch.complex64": "storage of float pairs with torch's promotion, files and NumPy; add/sub/mul/div, neg, abs, "
                       "angle, exp, pow, matmul/mm/bmm, conj (materialised: is_conj() is always False), sum/mean, views and copies run, "
                       "composed of real ops (autograd as torch's); other ops raise NotImplementedError naming op "
                       "and dtype (docs/dtypes.md, \"Complex\"); so does complex128. The fnuz/e8m0 float8 dtypes "
                       "are names only",
    "torch.load": "the zip format (torch >= 1.6) and safetensors; not the legacy pre-1.6 format; weights_only=False "
                  "cannot rebuild torch-only objects (modules, torch classes); every file is checked as untrusted, "
                  "and compressed entries are refused (docs/reliability.md, \"Loading files\")",
    "torch.save": "protocol 2 pickle as torch's default (uint16/32/64 and float8 through _rebuild_tensor_v3, as "
                  "torch)",
    "torch.amp.GradScaler": "only disabled (enabled=False, or 'cuda' without CUDA, which torch disables too)",
    "torch.amp.autocast": "CPU (bfloat16 / float16) with torch's CPU op lists for the ops dygrad binds; the cast "
                          "cache also checks versions and grad mode (docs/mixed-precision.md); 'cuda' disabled",
    "torch.cuda.amp.GradScaler": "only disabled (no CUDA)",
    "torch.optim.Adam": "amsgrad takes the composed (unfused) path; differentiable=True raises. lr may be a Tensor "
                        "(read by the fused Task as it runs)",
    "torch.optim.AdamW": "as Adam; foreach/fused accepted, the step is always dygrad's fused multi-tensor Task",
    "torch.optim.SGD": "composed of in-place ops (no fused kernel); differentiable=True raises",
    "torch.optim.RMSprop": "torch's single-tensor formula op for op (no fused kernel: optim/composed.py); "
                           "differentiable=True raises",
    "torch.optim.Adagrad": "as RMSprop (optim/composed.py); the step count is read on the host, as torch's",
    "torch.optim.Adamax": "as RMSprop (optim/composed.py)",
    "torch.optim.NAdam": "as RMSprop (optim/composed.py); the mu product is read on the host, as torch's",
    "torch.optim.RAdam": "as RMSprop (optim/composed.py); the step count is read on the host, as torch's",
    "torch.utils.data.DataLoader": "workers are forked and run dygrad ops synchronously, collate into NumPy, and the "
                                   "parent wraps batches with from_numpy; pin_memory=True pins each batch while a "
                                   "device backend provides pinned memory, else warns as torch and is a no-op "
                                   "(docs/devices.md); in_order=False still returns batches in order; persistent "
                                   "workers with an IterableDataset raise; a worker's exception whose class cannot be pickled "
                                   "is raised as a RuntimeError naming it (torch waits forever)",
    "torch.utils.data.default_collate": "stacks in NumPy and wraps with from_numpy (one copy, the stack)",
    "torch.distributed.init_process_group": "backend mpi (gloo is an alias of it on the CPU); rank and size from mpirun; "
                                           "a collective does not block the host (reading its result waits)",
    "torch.distributed.Work.wait": "orders later ops after the collective without blocking the host (as NCCL)",
    "torch.nn.utils.clip_grad_norm_": "foreach is accepted and ignored",
    "torch.nn.Conv1d": "composed: an im2col of strided slices and one matmul per group (python/dygrad/nn/conv.py "
                       "says why); the columns hold prod(kernel) copies of the input. So are Conv2d and Conv3d",
    "torch.nn.ConvTranspose1d": "composed: the convolution of the stride-dilated input with the flipped weight; so "
                                "are ConvTranspose2d and ConvTranspose3d",
    "torch.nn.LSTM": "composed, one time step after another (the input projection of each layer in one matmul); a "
                     "PackedSequence input raises NotImplementedError; so do GRU and RNN",
    "torch.nn.MultiheadAttention": "torch's Python path only (no nested-tensor fast path, which computes the same); "
                                   "need_weights=False runs dygrad's flash attention",
    "torch.nn.BatchNorm1d": "momentum=None reads num_batches_tracked on the host (a sync), as torch's float() does",
    "torch.nn.TransformerEncoder": "enable_nested_tensor is accepted and ignored (no nested tensors)",
    "torch.nn.functional.mish": "x * tanh(softplus(x)) with softplus's threshold 20, where torch's kernel takes "
                                "log1p(exp(x)): equal values (tanh rounds to 1 there), no overflow in the gradient",
}

AREAS = [
    ("Optimizers", "torch.optim", lambda m: [n for n in m.__all__ if n[0].isupper() and n != "Optimizer"] + ["Optimizer"]),
    ("Learning-rate schedules", "torch.optim.lr_scheduler", lambda m: list(m.__all__)),
    ("Data loading", "torch.utils.data",
     lambda m: [n for n in m.__all__ if not n.startswith("_") and "DataPipe" not in n and "datapipe" not in n
                and n not in ("DataChunk", "argument_validation", "runtime_validation", "runtime_validation_disabled",
                              "non_deterministic", "guaranteed_datapipes_determinism")]),
    ("Save and load", "torch.serialization", lambda m: ["add_safe_globals", "get_safe_globals", "clear_safe_globals",
                                                        "safe_globals", "save", "load"]),
    ("Training utilities", "torch.nn.utils", lambda m: ["clip_grad_norm_", "clip_grad_value_", "get_total_norm",
                                                        "clip_grads_with_norm_", "parameters_to_vector",
                                                        "vector_to_parameters", "weight_norm", "spectral_norm"]),
    ("Device probes and settings", "torch",
     lambda m: ["save", "load", "device", "Generator", "manual_seed", "initial_seed", "seed", "randperm", "compile",
                "set_float32_matmul_precision", "get_float32_matmul_precision", "get_num_threads",
                "set_num_threads", "get_rng_state", "set_rng_state", "use_deterministic_algorithms",
                "is_tensor", "is_floating_point", "numel"]),
    ("CUDA probes", "torch.cuda", lambda m: ["is_available", "device_count", "is_initialized", "manual_seed",
                                             "manual_seed_all", "empty_cache", "synchronize", "current_device",
                                             "get_device_name", "is_bf16_supported", "memory_allocated"]),
    ("Backend flags", "torch.backends", lambda m: ["cuda", "cudnn", "mps", "mkldnn", "cpu", "openmp", "mkl"]),
    ("CPU stream", "torch.cpu", lambda m: ["is_available", "device_count", "current_device", "set_device",
                                           "is_initialized", "synchronize", "Event", "Stream", "current_stream",
                                           "stream", "StreamContext"]),
    ("Mixed precision", "torch.amp", lambda m: ["GradScaler", "autocast"]),
    ("Distributed", "torch.distributed", lambda m: ["is_available", "is_initialized", "init_process_group",
                                                    "destroy_process_group", "get_rank", "get_world_size",
                                                    "get_backend", "new_group", "barrier", "all_reduce", "broadcast",
                                                    "reduce", "all_gather", "all_gather_into_tensor",
                                                    "reduce_scatter_tensor", "send", "recv", "isend", "irecv",
                                                    "ReduceOp", "get_process_group_ranks", "all_gather_object",
                                                    "gather_object", "broadcast_object_list",
                                                    "scatter_object_list"]),
    ("Sharded optimizer", "torch.distributed.optim", lambda m: ["ZeroRedundancyOptimizer"]),
    ("Sharded parameters", "torch.distributed.fsdp", lambda m: ["fully_shard", "FSDPModule", "MixedPrecisionPolicy",
                                                                "OffloadPolicy", "CPUOffloadPolicy",
                                                                "register_fsdp_forward_method"]),
    ("Modules", "torch.nn", lambda m: sorted(n for n in m.modules.__all__)),
    ("Functional", "torch.nn.functional",
     lambda m: sorted(n for n in dir(m) if not n.startswith("_") and callable(getattr(m, n))
                      and getattr(getattr(m, n), "__module__", "").startswith("torch.nn.functional")
                      or n in ("relu", "gelu", "silu", "softmax", "log_softmax", "embedding", "linear",
                               "scaled_dot_product_attention", "layer_norm", "rms_norm", "dropout", "cross_entropy"))),
    ("Tensor functions", "torch",
     lambda m: sorted(n for n in dir(m) if n.islower() and not n.startswith("_") and not n.endswith("_")
                      and callable(getattr(m, n)) and not isinstance(getattr(m, n), type(m))
                      and type(getattr(m, n)).__name__ in ("builtin_function_or_method", "function")
                      and n in _COMMON_OPS)),
    ("Names programs and libraries probe (issues 37, 41)", "torch",
     lambda m: ["finfo", "iinfo", "pi", "e", "inf", "nan", "newaxis", "hstack", "vstack", "row_stack", "dstack",
                "column_stack", "atleast_1d", "atleast_2d", "atleast_3d", "remainder", "fmod", "polar",
                "view_as_complex", "view_as_real", "complex64", "complex128", "int8", "int16", "uint32", "uint64",
                "float8_e4m3fn", "float8_e5m2", "LongTensor", "FloatTensor", "BoolTensor", "IntTensor", "ShortTensor",
                "CharTensor", "promote_types", "eye",
                "as_tensor", "asarray", "empty_strided", "normal", "scalar_tensor", "randint_like", "addcmul",
                "addcdiv", "isin", "get_default_device", "contiguous_format", "compiler", "jit", "onnx",
                "accelerator", "library", "distributions", "version",
                # what transformers' runs reach (tests/python/test_transformers.py)
                "get_default_dtype", "set_default_dtype", "UntypedStorage", "strided", "layout", "short", "cfloat",
                "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]),
    ("ONNX export", "torch.onnx", lambda m: list(m.__all__)),
    ("Pytrees", "torch.utils._pytree",
     lambda m: ["tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map", "tree_map_",
                "tree_map_only", "tree_iter", "tree_all", "tree_any", "tree_all_only", "tree_any_only",
                "register_pytree_node", "TreeSpec", "LeafSpec", "tree_flatten_with_path", "register_dataclass"]),
    ("Attention backend switches", "torch.nn.attention", lambda m: ["SDPBackend", "sdpa_kernel", "flex_attention"]),
    ("Stand-ins: import, raise NotProvidedError when used (issue 41)", "torch.distributed.tensor",
     lambda m: ["DTensor", "Shard", "Replicate", "Partial", "DeviceMesh", "distribute_tensor", "init_device_mesh"]),
    ("Custom operators", "torch.library", lambda m: ["custom_op", "register_fake", "register_autograd",
                                                    "register_kernel", "opcheck", "Library", "define", "impl"]),
    ("Distribution constraints", "torch.distributions.constraints",
     lambda m: ["real", "positive", "nonnegative", "unit_interval", "interval", "boolean", "simplex",
                "positive_definite", "lower_cholesky"]),
    ("Tensor methods", "torch.Tensor",
     lambda m: sorted(n for n in dir(m) if not n.startswith("_") and n in _COMMON_OPS | _COMMON_METHODS)),
]

# The ops training scripts use most (the "Tensor functions" and "Tensor methods" rows list these only).
_COMMON_OPS = set("""abs add addmm all allclose amax amin any arange argmax argmin argsort baddbmm bmm broadcast_to cat
ceil chunk clamp clip clone cos cosine_similarity cumsum diag div dropout einsum empty empty_like eq exp expand
eye flatten flip floor from_numpy full full_like gather ge gelu gt index_select isfinite isinf isnan le lerp linspace
log log_softmax logical_and logical_not logsumexp lt manual_seed masked_fill matmul max maximum mean min minimum mm
mul multinomial ne neg nonzero norm normal numel ones ones_like outer permute polar pow prod rand rand_like randint randn
randn_like randperm reciprocal relu repeat_interleave reshape roll round rsqrt scatter scatter_add select sigmoid
sign silu sin softmax sort split sqrt square squeeze stack std sub sum t tanh tensor tensordot topk transpose tril
triu unbind unique unsqueeze var view_as_complex view_as_real where zeros zeros_like""".split())
_COMMON_METHODS = set("""backward contiguous cpu cuda data_ptr detach dim double expand expand_as float half int item
long masked_fill_ numpy repeat requires_grad_ size to tolist type type_as view view_as zero_ fill_ copy_ add_ mul_
clamp_ uniform_ normal_ is_contiguous element_size nelement ndimension new_zeros new_ones new_tensor new_empty
register_hook retain_grad stride storage_offset untyped_storage t_ transpose_ swapdims swapdims_ swapaxes swapaxes_
unsqueeze_ squeeze_ as_strided_ detach_ resize_ resize_as_ random_ exponential_ geometric_ cauchy_ log_normal_
bernoulli_""".split())


def dygrad_has(qualified):
    """Whether `qualified` (a torch name) resolves in dygrad as the import hook resolves it."""
    module_name, _, attr = qualified.rpartition(".")
    if module_name == "torch.Tensor":
        return hasattr(dygrad.Tensor, attr)
    try:
        module = as_torch.resolve(module_name)
    except ImportError:
        return False
    if hasattr(module, attr):
        return True
    try:
        as_torch.resolve(f"{module_name}.{attr}")
        return True
    except ImportError:
        return False


def tested_names():
    words = set()
    for path in glob.glob(os.path.join(ROOT, "tests", "python", "test_*.py")):
        with open(path) as fh:
            words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", fh.read()))
    return words


def table():
    tested = tested_names()
    lines = ["# PyTorch API conformance", "",
             "What dygrad provides of torch 2.13's API, per area: supported (and tested against torch in "
             "tests/python/), supported with a difference, or missing. A torch script run with `python3 -m "
             "dygrad.as_torch script.py` that reaches a missing name stops with an error naming it and pointing "
             "here.", "",
             "Generated by `python3 tools/pytorch_api.py > docs/pytorch-api.md` from dygrad and the tests as they "
             "are (tests/python/test_pytorch_api_doc.py fails when this file is stale); the differences are "
             "written in tools/pytorch_api.py.", "",
             "| area | supported | tested | missing |", "| --- | --- | --- | --- |"]
    sections = []
    for title, module_name, names_of in AREAS:
        module = torch.Tensor if module_name == "torch.Tensor" else importlib.import_module(module_name)
        names = list(dict.fromkeys(names_of(module)))
        have = [n for n in names if dygrad_has(f"{module_name}.{n}")]
        missing = [n for n in names if n not in have]
        checked = [n for n in have if n in tested]
        lines.append(f"| {title} (`{module_name}`) | {len(have)} of {len(names)} | {len(checked)} | {len(missing)} |")
        body = [f"## {title} (`{module_name}`)", ""]
        if have:
            body.append("Supported: " + ", ".join(f"`{n}`" + ("" if n in tested else " (untested)") for n in have) + ".")
            body.append("")
        differs = [(n, DIFFERS[f"{module_name}.{n}"]) for n in have if f"{module_name}.{n}" in DIFFERS]
        if differs:
            body += ["| name | differs from torch |", "| --- | --- |"]
            body += [f"| `{module_name}.{n}` | {note} |" for n, note in differs]
            body.append("")
        if missing:
            body.append("Missing: " + ", ".join(f"`{n}`" for n in missing) + ".")
            body.append("")
        sections.append("\n".join(body))
    lines += ["", "## DataLoader workers", "",
              "Worker processes are forked (torch's default on Linux). A forked child has neither dygrad's stream "
              "worker nor its pool threads, so a worker first switches dygrad to synchronous execution (every op "
              "runs inline on the worker's thread), fetches its samples, collates them into NumPy arrays and "
              "sends those; the parent turns each batch into tensors with from_numpy. No dygrad tensor crosses a "
              "process boundary. Base seeds and per-worker seeds are torch's (a seeded Generator gives the same "
              "worker seeds).", ""]
    return "\n".join(lines) + "\n" + "\n".join(sections)


if __name__ == "__main__":
    sys.stdout.write(table())
