"""What Hugging Face transformers reaches beyond the names of issues 37 and 41 (tests/python/test_transformers.py
runs it), each against torch 2.13: view(dtype), storages (untyped_storage, UntypedStorage.from_file, asarray of
a storage: how safetensors loads), layouts, the default dtype, `with torch.device("meta")`, modules' extra state,
the dtypes dygrad names without storage, pytree key paths, DTensor placements, and the small names of
torch.distributed, torch._dynamo, torch.cuda and flex attention."""
import collections
import pickle

import numpy as np
import pytest
import torch
import torch.utils._pytree as torch_pytree

import dygrad as dg
import dygrad.utils._pytree as dg_pytree

VIEW_CASES = [((2, 8), "uint8", "float32"), ((3, 4), "float32", "int32"), ((2, 4), "float32", "uint8"),
              ((4,), "float32", "float16"), ((2, 6), "float16", "bfloat16"), ((2, 4), "int64", "float64"),
              ((3, 2), "float64", "int32"), ((5,), "uint8", "bool")]


@pytest.mark.parametrize("shape,src,dst", VIEW_CASES, ids=str)
def test_view_dtype_reads_the_same_bytes_as_torch(shape, src, dst):
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 2, size=shape) if src == "uint8" and dst == "bool" else rng.integers(0, 200, size=shape)
    ours, theirs = dg.tensor(raw).to(getattr(dg, src)), torch.tensor(raw).to(getattr(torch, src))
    got, expected = ours.view(getattr(dg, dst)), theirs.view(dtype=getattr(torch, dst))
    assert tuple(got.shape) == tuple(expected.shape) and got.stride() == expected.stride()
    if dst == "bfloat16":  # NumPy has no bfloat16: compare its bits as float16's
        got, expected = got.view(dg.float16), expected.view(torch.float16)
    assert got.numpy().tobytes() == expected.numpy().tobytes()
    assert ours.view(dtype=getattr(dg, dst)).dtype == getattr(dg, dst)


def test_view_dtype_aliases_and_its_errors_match_torch():
    for lib in (dg, torch):
        a = lib.ones(4)
        b = a.view(lib.int32)
        b[0] = 0
        if lib is dg:
            dg.synchronize()
        assert a.tolist() == [0.0, 1.0, 1.0, 1.0]
        assert lib.ones(3, requires_grad=True).view(lib.float32).requires_grad is False  # no history, as torch
        z = lib.zeros(2, 4, dtype=lib.uint8)
        for bad, message in [(z[:, 1:], "self.size\\(-1\\) must be divisible by 2"),
                             (z.t(), "self.stride\\(-1\\) must be 1"), (lib.tensor(1, dtype=lib.uint8),
                                                                       "self.dim\\(\\) cannot be 0")]:
            with pytest.raises(RuntimeError, match=message):
                bad.view(lib.float16)
        assert lib.zeros(2, 8, dtype=lib.uint8)[:, 4:].view(lib.int32).shape == (2, 1)


def test_untyped_storage_and_asarray_of_a_storage_as_torch():
    for lib in (dg, torch):
        t = lib.arange(6.0)[2:]
        storage = t.untyped_storage()
        assert storage.nbytes() == 24 and storage.data_ptr() == t.data_ptr() - 8 and len(storage[4:12]) == 8
        assert lib.asarray(storage[8:16], dtype=lib.float32).tolist() == [2.0, 3.0]
        assert lib.asarray(lib.UntypedStorage(16)).dtype == lib.int64 and lib.UntypedStorage(3).nbytes() == 3


def test_a_storage_from_a_file_is_mapped_privately_or_shared_as_torch(tmp_path):
    path = tmp_path / "weights.bin"
    np.arange(8, dtype="<f4").tofile(path)
    for lib in (dg, torch):
        private = lib.UntypedStorage.from_file(str(path), shared=False, nbytes=32)
        x = lib.asarray(private[8:24], dtype=lib.uint8).view(dtype=lib.float32).reshape(2, 2)
        assert x.tolist() == [[2.0, 3.0], [4.0, 5.0]]
        x.mul_(10)
        if lib is dg:
            dg.synchronize()
        assert lib.asarray(private, dtype=lib.float32).tolist()[2] == 20.0  # the tensor is the storage's memory
        assert np.fromfile(path, dtype="<f4")[2] == 2.0  # shared=False: the file is untouched
    shared = dg.UntypedStorage.from_file(str(path), shared=True, nbytes=32)
    dg.asarray(shared, dtype=dg.float32)[0] = 7.0
    dg.synchronize()
    del shared
    assert np.fromfile(path, dtype="<f4")[0] == 7.0
    with pytest.raises(RuntimeError, match="file is too small"):
        dg.UntypedStorage.from_file(str(path), nbytes=64)


def test_layouts_and_the_default_dtype_as_torch():
    assert repr(dg.strided) == repr(torch.strided) and dg.ones(2).layout is dg.strided
    assert dg.ones(2).layout != dg.sparse_coo and pickle.loads(pickle.dumps(dg.strided)) is dg.strided
    assert str(dg.get_default_dtype()) == "dygrad.float32" and str(torch.get_default_dtype()) == "torch.float32"
    dg.set_default_dtype(dg.float32)
    for lib in (dg, torch):
        with pytest.raises(TypeError, match="only floating-point types are supported as the default type"):
            lib.set_default_dtype(lib.int32)
    with pytest.raises(dg.NotProvidedError, match="set_default_dtype"):
        dg.set_default_dtype(dg.float64)


def test_meta_device_builds_without_data_or_random_draws_as_torch():
    for lib in (dg, torch):
        lib.manual_seed(0)
        before = lib.rand(3).tolist()
        lib.manual_seed(0)
        with lib.device("meta"):
            assert str(lib.get_default_device()) == "meta"
            layer = lib.nn.Linear(1000, 1000)  # no memory, no kernel, no random numbers drawn
            empty = lib.tensor([])
            y = layer.weight * 2
        assert str(lib.get_default_device()) == "cpu"
        assert layer.weight.is_meta and str(layer.weight.device) == "meta" and str(empty.device) == "meta"
        assert y.is_meta and tuple(y.shape) == (1000, 1000) and y.dtype == layer.weight.dtype
        assert not lib.ones(1).is_meta and lib.rand(3).tolist() == before
        real = lib.empty_like(layer.weight, device="cpu")
        assert str(real.device) == "cpu" and tuple(real.shape) == (1000, 1000)
    with pytest.raises(RuntimeError, match=r"\[device\] device cuda:0 is not available"):
        with dg.device("cuda"):
            pass


class _Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(2))
        self.count = 3

    def get_extra_state(self):
        return {"count": self.count}

    def set_extra_state(self, state):
        self.count = state["count"]


class _DgCounter(dg.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = dg.nn.Parameter(dg.ones(2))
        self.count = 3

    get_extra_state, set_extra_state = _Counter.get_extra_state, _Counter.set_extra_state


def test_extra_state_is_saved_and_loaded_as_torch():
    import dygrad.nn.modules.module as dg_module
    assert dg_module._EXTRA_STATE_KEY_SUFFIX == torch.nn.modules.module._EXTRA_STATE_KEY_SUFFIX
    for make, lib in ((_DgCounter, dg), (_Counter, torch)):
        outer = lib.nn.Sequential(make())
        state = outer.state_dict()
        assert list(state) == ["0.weight", "0._extra_state"] and state["0._extra_state"] == {"count": 3}
        other = lib.nn.Sequential(make())
        other[0].count = 0
        other.load_state_dict(state)
        assert other[0].count == 3
        with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "0._extra_state"'):
            other.load_state_dict({"0.weight": lib.ones(2)})
        with pytest.raises(RuntimeError, match='Unexpected key\\(s\\) in state_dict: "_extra_state"'):
            lib.nn.Linear(1, 1).load_state_dict({"weight": lib.ones(1, 1), "bias": lib.ones(1), "_extra_state": 1})
        with pytest.raises(RuntimeError, match="Module.get_extra_state\\(\\) that should never be called"):
            lib.nn.Linear(1, 1).get_extra_state()
    linear = dg.nn.Linear(1, 1)
    linear.register_buffer("table", dg.ones(1), persistent=False)
    assert linear._non_persistent_buffers_set == {"table"}  # torch's attribute name (libraries read it)


def test_dtypes_without_storage_are_named_with_torch_properties():
    for name in dg._not_provided.UNPROVIDED_DTYPES:
        ours, theirs = getattr(dg, name), getattr(torch, name)
        assert repr(ours).split(".")[-1] == repr(theirs).split(".")[-1] == name
        assert (ours.itemsize, ours.is_floating_point, ours.is_signed, ours.is_complex) == \
            (theirs.itemsize, theirs.is_floating_point, theirs.is_signed, theirs.is_complex), name
        assert pickle.loads(pickle.dumps(ours)) is ours and ours != dg.float32 and {ours: 1}[ours] == 1
        with pytest.raises(TypeError):
            dg.zeros(2, dtype=ours)  # no tensor has it yet
    assert dg.short is dg.int16 and dg.cfloat is dg.complex64 and dg.cdouble is dg.complex128
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
                 "complex64", "complex128"):
        assert repr(dg.finfo(getattr(dg, name))) == repr(torch.finfo(getattr(torch, name))), name
    for name in ("int8", "int16", "uint32", "uint64"):
        assert repr(dg.iinfo(getattr(dg, name))) == repr(torch.iinfo(getattr(torch, name))), name


Point = collections.namedtuple("Point", "x y")
TREES = [[1, (2, None), {"b": 3, "a": 4}], {"x": [1, 2], "y": (3,)}, Point(1, [2, 3]),
         collections.OrderedDict(a=1, b=[2]), collections.defaultdict(list, {"k": [5]}), collections.deque([1, 2]), 7]


@pytest.mark.parametrize("tree", TREES, ids=repr)
def test_pytree_key_paths_match_torch(tree):
    ours, spec = dg_pytree.tree_flatten_with_path(tree)
    theirs, _ = torch_pytree.tree_flatten_with_path(tree)
    assert [(dg_pytree.keystr(k), v) for k, v in ours] == [(torch_pytree.keystr(k), v) for k, v in theirs]
    assert [type(k).__name__ for path, _ in ours for k in path] == \
        [type(k).__name__ for path, _ in theirs for k in path]
    assert spec == dg_pytree.tree_structure(tree) and dg_pytree.tree_leaves_with_path(tree) == ours
    for path, leaf in ours:
        node = tree
        for key in path:
            node = key.get(node)
        assert node == leaf


def test_pytree_registered_node_with_keys():
    class Box:
        def __init__(self, v):
            self.v = v

    dg_pytree.register_pytree_node(Box, lambda b: ([b.v], None), lambda c, _: Box(c[0]),
                                   flatten_with_keys_fn=lambda b: ([(dg_pytree.GetAttrKey("v"), b.v)], None))
    assert dg_pytree.keystr(dg_pytree.tree_flatten_with_path([Box(3)])[0][0][0]) == "[0].v"

    class Bare:
        pass

    dg_pytree.register_pytree_node(Bare, lambda b: ([], None), lambda c, _: Bare())
    with pytest.raises(ValueError, match="Did not find a flatten_with_keys_fn"):
        dg_pytree.tree_flatten_with_path(Bare())


def test_dtensor_placements_are_torch_values():
    from dygrad.distributed.tensor import DTensor, Partial, Replicate, Shard
    from dygrad.distributed.tensor.placement_types import _StridedShard
    from torch.distributed.tensor import Partial as TPartial, Replicate as TReplicate, Shard as TShard
    from torch.distributed.tensor.placement_types import _StridedShard as TStrided
    for ours, theirs in [(Shard(0), TShard(0)), (Shard(-1), TShard(-1)), (Replicate(), TReplicate()),
                         (Partial(), TPartial()), (Partial("max"), TPartial("max")),
                         (_StridedShard(1, split_factor=2), TStrided(1, split_factor=2))]:
        assert (repr(ours), str(ours)) == (repr(theirs), str(theirs))
        assert (ours.is_shard(), ours.is_replicate(), ours.is_partial()) == \
            (theirs.is_shard(), theirs.is_replicate(), theirs.is_partial())
    assert Shard(1) == Shard(1) and Shard(1) != Shard(0) and Replicate() == Replicate() and Shard(2).dim == 2
    assert len({Shard(0), Shard(0), Replicate()}) == 2 and Shard(1).is_shard(1) and not Shard(1).is_shard(0)
    for size, chunks in [(10, 4), (8, 4), (3, 4), (0, 2)]:
        for rank in range(chunks):
            assert Shard.local_shard_size_and_offset(size, chunks, rank) == \
                tuple(TShard.local_shard_size_and_offset(size, chunks, rank)), (size, chunks, rank)
    assert Shard(0)._local_shard_size_and_offset(10, 4, 3) == (1, 9)
    with pytest.raises(dg.NotProvidedError, match="DTensor"):
        DTensor()


def test_small_names_libraries_import():
    from dygrad._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from dygrad.distributed._composable.fsdp import CPUOffloadPolicy, fully_shard
    from dygrad.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor
    from dygrad.distributed.tensor._utils import compute_local_shape_and_global_offset
    from dygrad.nn.attention.flex_attention import _DEFAULT_SPARSE_BLOCK_SIZE, AuxRequest
    from torch.nn.attention import flex_attention as torch_flex
    x = dg.ones(2)
    assert wait_tensor(x) is x and dg._dynamo.assume_constant_result(len) is len
    assert _DEFAULT_SPARSE_BLOCK_SIZE == torch_flex._DEFAULT_SPARSE_BLOCK_SIZE
    assert AuxRequest(lse=True) == tuple(torch_flex.AuxRequest(lse=True))
    assert AuxRequest._fields == torch_flex.AuxRequest._fields
    assert CPUOffloadPolicy().pin_memory and fully_shard is dg.distributed.fsdp.fully_shard  # real (issue 36)
    for call in (TransformGetItemToIndex, lambda: compute_local_shape_and_global_offset((2,), None, []),
                 lambda: all_to_all_single_autograd(x, None, None, None)):
        with pytest.raises(dg.NotProvidedError, match="is not provided by dygrad"):
            call()
    for lib in (dg, torch):
        with lib.cuda.stream(None) as s:  # a no-op for None, as torch's
            assert s is None
        assert isinstance(lib.cuda.stream(None), lib.cuda.StreamContext)
