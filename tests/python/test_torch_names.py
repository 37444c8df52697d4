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

FLOATS = ["float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
INTS = ["int32", "int64", "uint8", "uint16", "int8", "int16", "uint32", "uint64"]


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


def test_eye_matches_torch():
    for args, kwargs in [((3,), {}), ((3, 2), {"dtype": "int64"}), ((0, 4), {}), ((2, 5), {"dtype": "bool"})]:
        ours = dg.eye(*args, **{k: getattr(dg, v) for k, v in kwargs.items()})
        theirs = torch.eye(*args, **{k: getattr(torch, v) for k, v in kwargs.items()})
        assert ours.tolist() == theirs.tolist() and str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    for lib in (dg, torch):
        with pytest.raises(RuntimeError, match="n must be greater or equal to 0, got -1"):
            lib.eye(-1)


def test_as_tensor_and_asarray_share_memory_as_torch():
    for lib in (dg, torch):
        a = np.ones(3, dtype=np.float32)
        t = lib.as_tensor(a)
        t[0] = 5.0
        if lib is dg:
            dg.synchronize()
        assert a[0] == 5.0, lib.__name__
        x = lib.ones(2)
        assert lib.as_tensor(x) is x and lib.asarray(x) is x
        assert lib.asarray(x, copy=True) is not x
        assert str(lib.as_tensor([1, 2]).dtype).endswith("int64") and str(lib.asarray([1.0]).dtype).endswith("float32")
        assert str(lib.as_tensor(x, dtype=lib.float64).dtype).endswith("float64")
        assert lib.asarray(x, copy=False) is x
        with pytest.raises(ValueError):
            lib.asarray(np.ones(2), dtype=lib.float32, copy=False)  # float64 -> float32 needs a copy


def test_scalar_tensor_and_randint_like_match_torch():
    for lib in (dg, torch):
        assert lib.scalar_tensor(3).tolist() == 3.0 and str(lib.scalar_tensor(True).dtype).endswith("float32")
        r = lib.randint_like(lib.zeros(1000, dtype=lib.int32), 5)
        assert str(r.dtype).endswith("int32") and 0 <= int(r.min()) and int(r.max()) < 5
        r = lib.randint_like(lib.zeros(1000), 3, 5)
        assert str(r.dtype).endswith("float32") and set(r.tolist()) <= {3.0, 4.0}


def test_normal_shapes_dtypes_and_zero_gradients_as_torch():
    dg.manual_seed(0)
    for lib in (dg, torch):
        assert tuple(lib.normal(2.0, 3.0, size=(4, 5)).shape) == (4, 5)
        assert str(lib.normal(lib.zeros(2, dtype=lib.float64), 1.0).dtype).endswith("float64")
        assert tuple(lib.normal(lib.zeros(3, 1), lib.ones(1, 4)).shape) == (3, 4)
        m, s = lib.zeros(3, requires_grad=True), lib.ones(3, requires_grad=True)
        y = lib.normal(m, s)
        assert y.requires_grad
        y.sum().backward()
        assert m.grad.tolist() == [0.0] * 3 and s.grad.tolist() == [0.0] * 3
        with pytest.raises(RuntimeError, match="normal expects std >= 0.0"):
            lib.normal(0.0, -1.0, size=(2,))
    sample = dg.normal(2.0, 3.0, size=(200000,))  # seeded: a fixed sample, not a flaky statistical test
    assert abs(float(sample.mean()) - 2.0) < 0.05 and abs(float(sample.std()) - 3.0) < 0.05


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addcmul_addcdiv_match_torch_bitwise_with_gradients(name):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((4, 1)).astype(np.float32), rng.standard_normal((1, 5)).astype(np.float32),
              (rng.standard_normal((4, 5)) + 3).astype(np.float32)]
    for value in (1, 0.3, -2):
        ds = [dg.tensor(a, requires_grad=True) for a in arrays]
        ts = [torch.tensor(a, requires_grad=True) for a in arrays]
        ours, theirs = getattr(dg, name)(*ds, value=value), getattr(torch, name)(*ts, value=value)
        # addcdiv: bitwise. addcmul: torch fuses the product into the add (an FMA); dygrad rounds the product
        # first (docs/pytorch-api.md), so 1 ulp may differ.
        close = np.array_equal if name == "addcdiv" else lambda a, b: np.allclose(a, b, rtol=2.5e-7, atol=0)
        assert close(ours.detach().numpy(), theirs.detach().numpy()), value
        ours.sum().backward()
        theirs.sum().backward()
        for d, t in zip(ds, ts):
            assert np.allclose(d.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-6)
        x, y = dg.tensor(arrays[2]), torch.tensor(arrays[2])
        getattr(x, name + "_")(dg.tensor(arrays[0]), dg.tensor(arrays[1]), value=value)
        getattr(y, name + "_")(torch.tensor(arrays[0]), torch.tensor(arrays[1]), value=value)
        assert close(x.numpy(), y.numpy())
    ints = [dg.ones(2, dtype=dg.int64)] * 3
    if name == "addcdiv":
        with pytest.raises(RuntimeError, match="Integer division with addcdiv is no longer supported"):
            dg.addcdiv(*ints)
    else:
        assert dg.addcmul(*ints, value=3).tolist() == torch.addcmul(*[torch.ones(2, dtype=torch.int64)] * 3,
                                                                    value=3).tolist()


@pytest.mark.parametrize("name", ["addcmul_", "addcdiv_"])
def test_the_in_place_forms_issue_only_the_ops_of_their_update(name):
    # p.addcdiv_(m, d, value=-lr) (torch's Adam step): value * m, then / d, then one add_ into p; the checks compute
    # nothing (an out-of-place addcdiv computed for its checks alone cost two more passes over the parameter)
    p, m, d = dg.randn(6), dg.randn(6), dg.rand(6) + 1
    text = dg.jit.graph(lambda p, m, d: getattr(p, name)(m, d, value=-0.5), p, m, d)
    assert [line.split()[1].split("(")[0] for line in text.splitlines() if line.strip()[:1].isdigit()] == \
        ["mul_scalar", "mul" if name == "addcmul_" else "div", "add"]


def test_isin_matches_torch():
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, 20, (6, 7)), rng.integers(0, 20, 9)
    for invert in (False, True):
        assert dg.isin(dg.tensor(a), dg.tensor(b), invert=invert).tolist() == \
            torch.isin(torch.tensor(a), torch.tensor(b), invert=invert).tolist()
    assert dg.isin(dg.tensor([1.5, 2.0]), 2.0).tolist() == torch.isin(torch.tensor([1.5, 2.0]), 2.0).tolist()
    assert dg.isin(3, dg.tensor([3])).tolist() == torch.isin(3, torch.tensor([3])).tolist()
    assert dg.isin(dg.tensor([1, 2]), dg.tensor([], dtype=dg.int64)).tolist() == [False, False]
    big = dg.isin(dg.arange(3000), dg.arange(0, 3000, 7))  # several chunks
    assert big.tolist() == torch.isin(torch.arange(3000), torch.arange(0, 3000, 7)).tolist()


def test_default_device_and_memory_formats():
    assert str(dg.get_default_device()) == str(torch.get_default_device()) == "cpu"
    dg.set_default_device("cpu")
    with pytest.raises(RuntimeError, match=r"\[set_default_device\] device cuda:0 is not available"):
        dg.set_default_device("cuda")
    assert str(dg.get_default_device()) == "cpu"
    assert repr(dg.contiguous_format) == repr(torch.contiguous_format)
    assert dg.ones(2, 3).clone(memory_format=dg.contiguous_format).is_contiguous()
    assert dg.ones(2, 3).contiguous(memory_format=dg.contiguous_format).tolist() == [[1.0] * 3] * 2


def test_legacy_tensor_types_match_torch():
    for name in ("FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "BoolTensor", "ByteTensor", "HalfTensor",
                 "BFloat16Tensor", "ShortTensor", "CharTensor"):
        ours, theirs = getattr(dg, name), getattr(torch, name)
        data = [1, 0, 3] if name != "BoolTensor" else [True, False]
        assert ours(data).tolist() == theirs(data).tolist(), name
        assert tuple(ours(2, 3).shape) == tuple(theirs(2, 3).shape) == (2, 3)
        assert ours((4,)).tolist() == theirs((4,)).tolist() and tuple(ours().shape) == tuple(theirs().shape)
        assert tuple(ours(dg.Size([2, 5])).shape) == tuple(theirs(torch.Size([2, 5])).shape)
        other = dg.int16 if name != "ShortTensor" else dg.uint16
        assert isinstance(ours(data), ours) and not isinstance(dg.ones(1, dtype=other), ours)
        assert str(ours(data).dtype).split(".")[-1] == str(theirs(data).dtype).split(".")[-1]
    assert dg.LongTensor([1.7, -2.5]).tolist() == torch.LongTensor([1.7, -2.5]).tolist()


def test_compiler_dynamo_and_jit_stand_ins():
    import dygrad._dynamo as dynamo
    for lib in (dg, torch):
        assert lib.compiler.is_compiling() is False and lib.jit.is_tracing() is False
        assert lib.jit.is_scripting() is False
        assert lib.compiler.disable(lambda x: x + 1)(1) == 2 and lib.compiler.disable()(lambda x: x)(3) == 3
        assert lib.jit.ignore(lambda x: x)(4) == 4 and lib.jit.unused(lambda x: x)(1) == 1
    assert dynamo.disable(len)([1, 2]) == 2 and dynamo.allow_in_graph(len) is len and not dynamo.is_compiling()
    f = lambda x: x  # noqa: E731
    assert dg.jit.script(f) is f and dg.jit.trace(f, (dg.ones(1),)) is f  # TorchScript's semantics are Python's
    with pytest.raises(RuntimeError, match="torch.jit.save is not provided by dygrad"):
        dg.jit.save(f, "x.pt")
    assert dg.jit.Final[int] is not None


BITWISE_CASES = [
    lambda L: L.tensor([5, 3]) & L.tensor([True, False]), lambda L: L.tensor([5, 3]) | 8, lambda L: ~L.tensor([5, -3]),
    lambda L: L.tensor([5, 3]) ^ L.tensor([1, 1]), lambda L: L.tensor([5, 3]) << 2,
    lambda L: L.tensor([-8, 8, -8]) >> L.tensor([1, 70, 70]), lambda L: 5 << L.tensor([1]), lambda L: 3 & L.tensor([1]),
    lambda L: L.tensor([1], dtype=L.uint8) << 9, lambda L: L.tensor([3], dtype=L.uint8) & 300,
    lambda L: L.tensor([True, False]) ^ True, lambda L: ~L.tensor([True, False]),
    lambda L: L.bitwise_and(L.tensor([6]), L.tensor([3], dtype=L.int32)),
    lambda L: L.tensor([5], dtype=L.int32) & L.tensor([True]), lambda L: L.tensor([4, 7]) << L.tensor([-1, 1]),
    lambda L: L.bitwise_right_shift(L.tensor([-7, 7], dtype=L.int32), 1),
    # generate()'s mask update: int64 & ~bool
    lambda L: L.tensor([1, 1, 0]) & ~L.tensor([False, True, False]),
]


@pytest.mark.parametrize("case", range(len(BITWISE_CASES)))
def test_bitwise_operators_match_torch(case):
    ours, theirs = BITWISE_CASES[case](dg), BITWISE_CASES[case](torch)
    assert ours.tolist() == theirs.tolist() and str(ours.dtype)[7:] == str(theirs.dtype)[6:]


def test_bitwise_in_place_and_errors_match_torch():
    for lib in (dg, torch):
        x = lib.tensor([5, 3, 12])
        x &= 6
        x |= lib.tensor([1, 0, 0])
        x ^= 2
        x <<= 1
        x >>= lib.tensor([1, 0, 2])
        assert x.tolist() == [7, 0, 3], lib.__name__
        y = lib.tensor([1, 2])
        assert y.bitwise_and_(3) is y and y.bitwise_not_() is y and y.tolist() == [-2, -3]
        with pytest.raises(NotImplementedError, match='"bitwise_and_cpu" not implemented for'):
            lib.ones(2) & lib.ones(2)
        with pytest.raises(NotImplementedError, match='"lshift_cpu" not implemented for'):
            lib.tensor([True]) << lib.tensor([True])
        with pytest.raises(TypeError, match="only implemented on integer and Boolean-type tensors"):
            ~lib.ones(1)
        with pytest.raises(TypeError):
            lib.tensor([1]) & None
    with pytest.raises(NotImplementedError):
        x = dg.tensor([1, 2])
        x &= 1.5
