"""Names PyTorch programs and libraries reach for (issues 37 and 41), each against torch 2.13: finfo/iinfo, the
constants, formatting a 0-dim tensor, the stacking family, torch.utils._pytree, the SDPA switches and
torch.nn.attention, and the torch.nn.modules.<file> paths."""
import collections

import numpy as np
import pytest
import torch
import torch.utils._pytree as torch_pytree

import dygrad as dg
import dygrad.utils._pytree as dg_pytree

FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTS = ["int32", "int64", "uint8", "uint16"]


@pytest.mark.parametrize("name", FLOATS)
def test_finfo_matches_torch(name):
    ours, theirs = dg.finfo(getattr(dg, name)), torch.finfo(getattr(torch, name))
    for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("name", INTS)
def test_iinfo_matches_torch(name):
    ours, theirs = dg.iinfo(getattr(dg, name)), torch.iinfo(getattr(torch, name))
    assert (ours.bits, ours.min, ours.max, ours.dtype) == (theirs.bits, theirs.min, theirs.max, theirs.dtype)
    assert repr(ours) == repr(theirs)


def test_finfo_defaults_and_errors_match_torch():
    assert repr(dg.finfo()) == repr(torch.finfo())
    with pytest.raises(TypeError, match="torch.finfo\\(\\) requires a floating point input type"):
        dg.finfo(dg.int32)
    with pytest.raises(TypeError, match="torch.bool is not supported by torch.iinfo"):
        dg.iinfo(dg.bool)
    with pytest.raises(TypeError):
        dg.iinfo(dg.float32)


def test_constants_match_torch():
    assert (dg.pi, dg.e, dg.inf, dg.newaxis) == (torch.pi, torch.e, torch.inf, torch.newaxis)
    assert np.isnan(dg.nan) and np.isnan(torch.nan)


@pytest.mark.parametrize("value,spec", [(1.23456, ".3f"), (3, ""), (2.5, "08.2e"), (True, ""), (7, "x")])
def test_a_zero_dim_tensor_formats_its_value(value, spec):
    assert format(dg.tensor(value), spec) == format(torch.tensor(value), spec)


def test_other_tensors_format_as_objects():
    assert format(dg.tensor([1.0, 2.0])) == str(dg.tensor([1.0, 2.0]))
    for lib in (dg, torch):
        with pytest.raises(TypeError, match="unsupported format string passed to Tensor.__format__"):
            format(lib.tensor([1.0, 2.0]), ".2f")


SHAPES = [[(2, 3), (2, 3)], [(3,), (4,)], [(), ()], [(2, 3, 4), (2, 3, 1)], [(2, 1), (2, 3)]]


@pytest.mark.parametrize("name", ["hstack", "vstack", "row_stack", "dstack", "column_stack"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_stacking_matches_torch_values_errors_and_gradients(name, shapes):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in shapes]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    ds = [dg.tensor(a, requires_grad=True) for a in arrays]
    try:
        expected = getattr(torch, name)(ts)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            getattr(dg, name)(ds)
        return
    got = getattr(dg, name)(ds)
    assert tuple(got.shape) == tuple(expected.shape) and np.array_equal(got.detach().numpy(), expected.detach().numpy())
    weights = rng.standard_normal(tuple(expected.shape))
    (expected * torch.tensor(weights)).sum().backward()
    (got * dg.tensor(weights)).sum().backward()
    for d, t in zip(ds, ts):
        assert np.array_equal(d.grad.numpy(), t.grad.numpy())


@pytest.mark.parametrize("name", ["atleast_1d", "atleast_2d", "atleast_3d"])
def test_atleast_matches_torch(name):
    for shape in [(), (3,), (2, 3), (2, 3, 4)]:
        a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        assert tuple(getattr(dg, name)(dg.tensor(a)).shape) == tuple(getattr(torch, name)(torch.tensor(a)).shape)
    pair = getattr(dg, name)(dg.ones(()), dg.ones(3))
    assert isinstance(pair, tuple) and [tuple(p.shape) for p in pair] == \
        [tuple(p.shape) for p in getattr(torch, name)(torch.ones(()), torch.ones(3))]
    with pytest.raises(TypeError, match="hstack\\(\\): argument 'tensors' must be a tuple or list"):
        dg.hstack(dg.ones(2))


Point = collections.namedtuple("Point", "x y")
TREES = [None, 3, [1, (2, None), {"b": 3, "a": 4}], {"x": [1, 2], "y": (3,)}, Point(1, [2, 3]),
         collections.OrderedDict(a=1, b=[2]), collections.defaultdict(list, {"k": [5]}),
         collections.deque([1, 2], maxlen=3), (), [[], {}]]


@pytest.mark.parametrize("tree", TREES, ids=repr)
def test_pytree_matches_torch(tree):
    leaves, spec = dg_pytree.tree_flatten(tree)
    t_leaves, t_spec = torch_pytree.tree_flatten(tree)
    assert leaves == t_leaves
    assert (spec.num_leaves, spec.num_nodes) == (t_spec.num_leaves, t_spec.num_nodes)
    rebuilt = dg_pytree.tree_unflatten(leaves, spec)
    assert rebuilt == torch_pytree.tree_unflatten(t_leaves, t_spec) and type(rebuilt) is type(tree)
    assert dg_pytree.tree_map(lambda v: (v, 0), tree) == torch_pytree.tree_map(lambda v: (v, 0), tree)
    assert dg_pytree.tree_structure(tree) == spec and dg_pytree.tree_leaves(tree) == leaves


def test_pytree_maps_over_several_trees_and_by_type_as_torch():
    for lib in (dg_pytree, torch_pytree):
        assert lib.tree_map(lambda a, b: a + b, [1, {"a": 2}], [10, {"a": 20}]) == [11, {"a": 22}]
        assert lib.tree_map_only(int, lambda v: -v, [1, "s", 2.0]) == [-1, "s", 2.0]
        assert lib.tree_all(lambda v: v > 0, [1, (2,)]) and not lib.tree_any(lambda v: v > 5, [1, (2,)])
        assert lib.tree_leaves([1, [2]], is_leaf=lambda v: isinstance(v, list) and len(v) == 1) == [1, [2]]
        with pytest.raises(ValueError):
            lib.tree_unflatten([1], lib.tree_structure([1, 2]))


def test_pytree_registered_node():
    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    dg_pytree.register_pytree_node(Pair, lambda p: ([p.a, p.b], None), lambda c, _: Pair(*c))
    doubled = dg_pytree.tree_map(lambda v: v * 2, [Pair(1, 2)])
    assert (doubled[0].a, doubled[0].b) == (2, 4)
    with pytest.raises(ValueError, match="already registered"):
        dg_pytree.register_pytree_node(Pair, lambda p: ([], None), lambda c, _: Pair(0, 0))


def test_sdpa_switches_behave_as_torch():
    from dygrad.nn.attention import SDPBackend as DgBackend
    from dygrad.nn.attention import sdpa_kernel as dg_sdpa
    from torch.nn.attention import SDPBackend as TorchBackend
    from torch.nn.attention import sdpa_kernel as torch_sdpa

    def states(b):
        return (b.flash_sdp_enabled(), b.math_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.cudnn_sdp_enabled())

    seen = {}
    for name, backends, sdpa, backend in [("dg", dg.backends.cuda, dg_sdpa, DgBackend),
                                          ("torch", torch.backends.cuda, torch_sdpa, TorchBackend)]:
        log = [states(backends)]
        with sdpa(backend.MATH):
            log.append(states(backends))
            with sdpa([backend.FLASH_ATTENTION, backend.EFFICIENT_ATTENTION]):
                log.append(states(backends))
            log.append(states(backends))
        with backends.sdp_kernel(enable_flash=False, enable_cudnn=False):
            log.append(states(backends))
        backends.enable_math_sdp(False)
        log.append(states(backends))
        backends.enable_math_sdp(True)
        log.append(states(backends))
        seen[name] = log
    assert seen["dg"] == seen["torch"]


def test_module_paths_torch_defines_classes_in():
    import importlib
    for sub in ("linear", "activation", "container", "dropout", "normalization", "sparse", "module", "loss",
                "flatten", "transformer"):
        ours = importlib.import_module(f"dygrad.nn.modules.{sub}")
        theirs = importlib.import_module(f"torch.nn.modules.{sub}")
        for name in ours.__all__:
            assert name in dir(theirs), (sub, name)  # only torch's names, under torch's paths
            if hasattr(dg.nn, name):
                assert getattr(ours, name) is getattr(dg.nn, name)
    from dygrad.nn.modules.linear import NonDynamicallyQuantizableLinear
    layer = NonDynamicallyQuantizableLinear(3, 2)
    assert isinstance(layer, dg.nn.Linear) and list(layer.state_dict()) == ["weight", "bias"]
