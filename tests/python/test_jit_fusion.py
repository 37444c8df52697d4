"""dygrad.jit's O1 (docs/jit-fusion.md): the pass pipeline (CSE, DCE, elementwise fusion) with its switches, fused
kernels generated as C++ from eager's scalar functors (compiled in the background, cached on disk, an interpreter
where no compiler is), bitwise equal to eager, and the replay guarantees of docs/jit.md kept."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dygrad as dg
import dygrad.nn as nn
import dygrad.nn.functional as F
from dygrad.models import llama
from jit_steps import adamw_run, llama_step


@pytest.fixture(autouse=True)
def fusion_config(jit_config):
    """conftest.py's jit_config: this session's kernel cache, compiles a capture waits for."""
    return jit_config


def rms_swiglu(x, w, g, u):
    """A composed RMSNorm then SwiGLU's gate, as a model written without fused ops does."""
    h = x * (x * x).mean(-1, keepdim=True).add(1e-6).rsqrt() * w  # line RMS
    return (g * h).sigmoid() * (g * h) * (u * h)  # line SWIGLU


def args_rms():
    return dg.randn(4, 8, 64), dg.randn(64), dg.randn(64), dg.randn(64)


def replayed(f, args, n=4, **kw):
    jf = dg.jit(f, jit_level="O1", **kw)
    outs = [jf(*args) for _ in range(n)]
    return jf, outs


def test_o1_replay_is_bitwise_eager_with_fused_kernels_in_the_profile():
    args = args_rms()
    want = rms_swiglu(*args)
    jf, outs = replayed(rms_swiglu, args)
    assert jf.stats["replays"] == 2 and jf.stats["fused_kernels"] >= 1
    assert all(dg.equal(o, want) for o in outs)
    with dg.profiler.profile() as prof:
        jf(*args)
    subs = [r.name for r in prof.result.ranges if r.kind == "sub_op"]
    fused = [s for s in subs if s.startswith("jit_fused[")]
    # one row program: the squares' sum, the row's divide, + eps and rsqrt, then the row scale and SwiGLU's gate
    # (g * h once: CSE) in a second pass over the row
    assert [s.split(" ")[0] for s in subs] == [
        "jit_fused[mul+sum+div_scalar+add_scalar+rsqrt+mul+mul+mul+sigmoid+mul+mul+mul]"]
    assert all(__file__ in s for s in fused)


def test_o0_replays_the_captured_sub_ops():
    jf = dg.jit(rms_swiglu)  # dg.jit's default level
    args = args_rms()
    for _ in range(3):
        jf(*args)
    assert jf.stats["fused_kernels"] == 0
    assert "jit_fused" not in " ".join(next(iter(jf._entries.values())).graph.describe())


def test_the_interpreter_is_bitwise_eager_too(fusion_config):
    fusion_config.codegen = False
    args = args_rms()
    want = rms_swiglu(*args)
    jf, outs = replayed(rms_swiglu, args)
    assert jf.stats["fused_kernels"] >= 1
    assert all(dg.equal(o, want) for o in outs)


def test_strided_broadcast_and_float64_operands():
    def f(a, b, c):
        t = a.t() * b + c  # a transposed operand, a row and a column broadcast
        return (t.abs() + 1).sqrt() / (t * t + 2).reciprocal().neg().relu().add(3)

    for dtype in (dg.float32, dg.float64):
        args = dg.randn(24, 16, dtype=dtype), dg.randn(24, dtype=dtype), dg.randn(16, 1, dtype=dtype)
        want = f(*args)
        jf, outs = replayed(f, args)
        assert jf.stats["fused_kernels"] >= 1
        assert all(dg.equal(o, want) for o in outs), dtype


def test_graph_shows_each_pass_and_what_it_did():
    def f(x, w):
        a = x * 2
        dead = x.exp()  # noqa: F841 (nothing reads it: DCE)
        b = x * 2  # the same as a: CSE
        return (a + b).rsqrt() * w

    text = dg.jit.graph(f, dg.rand(8, 32) + 1, dg.randn(32), passes=True)
    sections = [line for line in text.splitlines() if line.startswith("===")]
    assert [s.split(":")[0].strip("= ") for s in sections] == ["captured", "versions", "cse", "dce", "fold",
                                                                "patterns", "rematerialize", "fusion", "inplace"]
    assert "no buffer holds two values" in sections[1]
    assert "merged 1" in sections[2] and "removed 1" in sections[3] and "nothing constant" in sections[4]
    assert "nothing matched" in sections[5] and "nothing held" in sections[6] and "1 group(s) of 4 ops" in sections[7]
    assert "nothing to reuse" in sections[8]  # its inputs are the function's arguments
    last = text.split("=== inplace")[1].splitlines()[1:]
    assert len(last) == 1 and "jit_fused[mul_scalar+add+rsqrt+mul]" in last[0]


def test_each_pass_can_be_switched_off(fusion_config):
    def f(x):
        return (x * 2 + x * 2).exp().sum()

    x = dg.randn(16)
    fusion_config.cse = False
    fusion_config.fusion = False
    fusion_config.patterns = False
    fusion_config.rematerialize = False
    fusion_config.fold = False
    fusion_config.inplace = False
    text = dg.jit.graph(f, x, passes=True)
    assert "=== cse" not in text and "=== fusion" not in text and "=== patterns" not in text and "=== dce" in text
    assert "=== rematerialize" not in text and "=== versions" not in text and "=== fold" not in text
    assert "=== inplace" not in text


def test_source_is_readable_cpp_naming_the_lines_it_replaced():
    src = dg.jit.source(rms_swiglu, *args_rms())
    assert 'extern "C"' in src and "dg_fused_0" in src and "dg::math::sigmoid" in src
    assert "rsqrt (" in src and __file__ in src
    assert "#include \"dygrad/math/arithmetic.h\"" in src


def test_fusion_leaves_the_arena_smaller():
    def f(x):
        return dg.nn.functional.silu((x * 3 + 1).tanh() * x - 2).sum()

    x = dg.randn(256, 256)
    o0, o1 = dg.jit(f), dg.jit(f, jit_level="O1")
    for _ in range(3):
        a, b = o0(x), o1(x)
    assert dg.equal(a, b)
    g0 = next(iter(o0._entries.values())).graph
    g1 = next(iter(o1._entries.values())).graph
    assert g1.num_fused == 1 and g1.num_ops < g0.num_ops
    # O0's chain keeps two 256 KiB temporaries alive at once; O1 keeps the five intermediates in registers, the sum
    # folded into the same pass (a full-reduction program: test_jit_loss_tails.py)
    assert g0.arena_bytes == 2 * 256 * 256 * 4 and g1.arena_bytes == 0


def test_a_torch_style_adam_loop_is_bitwise_eager_over_steps():
    def make():
        dg.manual_seed(0)
        ps = [dg.randn(33, 17), dg.randn(17), dg.randn(5, 4, 3)]
        return ps, [dg.zeros_like(p) for p in ps], [dg.zeros_like(p) for p in ps]

    def adam(ps, gs, ms, vs, step, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        for p, g, m, v in zip(ps, gs, ms, vs):
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / (1 - b2 ** step) ** 0.5).add_(eps)
            p.addcdiv_(m, denom, value=-lr / (1 - b1 ** step))

    def run(jit):
        ps, ms, vs = make()
        fn = dg.jit(lambda gs: adam(ps, gs, ms, vs, 1), jit_level="O1") if jit else None
        dg.manual_seed(1)
        for _ in range(6):
            gs = [dg.randn(*p.shape) for p in ps]
            fn(gs) if jit else adam(ps, gs, ms, vs, 1)
        return ps + ms + vs, fn

    want, _ = run(False)
    got, fn = run(True)
    assert fn.stats["replays"] == 4 and fn.stats["fused_kernels"] >= 3
    assert all(dg.equal(a, b) for a, b in zip(want, got))


@pytest.mark.parametrize("mode", ["deterministic", "patterns off"])
def test_composed_llama_training_step_at_o1_is_bitwise_eager(mode, fusion_config):
    # The composed model's attention is a pattern (test_jit_patterns.py: within rounding); deterministic mode leaves
    # it out (the done-when: the jitted composed step's parameters equal eager's bitwise after 10 steps), and so
    # does switching the pass off.
    cfg = llama.LlamaConfig(n_layers=1, dim=32, n_heads=2, ffn_dim=64, seq_len=8, batch_size=2, dropout=0.1)
    if mode == "deterministic":
        dg.use_deterministic_algorithms(True)
    else:
        fusion_config.patterns = False
    make = lambda: llama.Llama(cfg, fused=False)  # noqa: E731
    try:
        m1, l1, _, _ = adamw_run(make, 8, 10, weight_decay=0.1)
        m2, l2, step, _ = adamw_run(make, 8, 10, "O1", weight_decay=0.1)
    finally:
        dg.use_deterministic_algorithms(False)
    assert step.stats["replays"] == 8 and step.stats["fused_kernels"] >= 1
    assert all(dg.equal(a, b) for a, b in zip(l1, l2))
    assert all(dg.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))


def test_a_poisoned_input_skips_only_what_eager_skips():
    m0 = dg.randn(32)

    def f(x, m):
        bad = dg._C._deferred_failure(x, 9)  # its kernel fails: what reads it is skipped
        m.mul_(0.5)       # runs: m existed, so it keeps this value
        m.add_(bad)       # skipped: reads the poisoned buffer
        return m * 3      # runs, from m * 0.5

    x = dg.randn(32)
    want_m = m0.clone()
    want = f(x, want_m)
    with pytest.raises(IndexError):
        dg.synchronize()
    jf = dg.jit(f, jit_level="O1")
    for _ in range(3):
        m = m0.clone()
        got = jf(x, m)
        with pytest.raises(IndexError, match=r"\[_deferred_failure\] index 9 is out of range"):
            dg.synchronize()
        assert dg.equal(m, want_m) and dg.equal(got, want)
    assert jf.stats["replays"] == 1 and jf.stats["fused_kernels"] == 1


def test_background_compile_replays_unfused_until_the_kernels_are_loaded(fusion_config, tmp_path):
    fusion_config.background = True
    fusion_config.cache_dir = str(tmp_path)
    args = args_rms()
    want = rms_swiglu(*args)
    jf = dg.jit(rms_swiglu, jit_level="O1")
    outs = [jf(*args) for _ in range(3)]
    entry = next(iter(jf._entries.values()))
    assert entry.pending is not None or jf.stats["fused_kernels"] > 0
    jf.wait_for_kernels()
    outs.append(jf(*args))
    assert jf.stats["fused_kernels"] >= 1 and entry.pending is None and entry.graph.kernels_loaded
    assert all(dg.equal(o, want) for o in outs)
    assert len(list(tmp_path.glob("*.so"))) == 1 and len(list(tmp_path.glob("*.cpp"))) == 1


def test_a_second_process_loads_the_cached_kernels(tmp_path):
    code = textwrap.dedent(f"""
        import dygrad as dg
        dg.jit.config.cache_dir = {str(tmp_path)!r}
        dg.jit.config.background = True
        def f(x):
            return dg.nn.functional.silu((x * 3 + 1).tanh() * x - 2)
        jf = dg.jit(f, jit_level="O1")
        x = dg.randn(64)
        for _ in range(2):
            jf(x)
        entry = next(iter(jf._entries.values()))
        print("warm" if entry.pending is None and entry.graph.kernels_loaded else "cold")
        jf.wait_for_kernels()
        assert dg.equal(jf(x), f(x))
    """)
    env = dict(os.environ)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert [r.stdout.strip() for r in runs] == ["cold", "warm"]


def test_a_changed_header_is_compiled_again_not_served_from_the_cache(fusion_config, tmp_path, monkeypatch):
    """The cache key holds the included headers' contents: a functor changed in math/ (another dygrad) must not load
    kernels compiled from the old one."""
    from pathlib import Path

    from dygrad import _jit_fusion
    fusion_config.cache_dir = str(tmp_path / "cache")
    include = tmp_path / "include"
    for name in _jit_fusion._HEADERS:
        (include / "dygrad" / name).parent.mkdir(parents=True, exist_ok=True)
        (include / "dygrad" / name).write_bytes((Path(_jit_fusion.include_dir()) / "dygrad" / name).read_bytes())
    monkeypatch.setenv("DG_JIT_INCLUDE", str(include))
    args = args_rms()
    replayed(rms_swiglu, args)
    assert len(list((tmp_path / "cache").glob("*.so"))) == 1
    replayed(rms_swiglu, args)  # the same headers: the entry is loaded
    assert len(list((tmp_path / "cache").glob("*.so"))) == 1
    with open(include / "dygrad" / "math" / "elementary.h", "a") as f:
        f.write("// changed\n")
    _jit_fusion._header_digests.clear()  # as a new process would read them
    jf, outs = replayed(rms_swiglu, args)
    assert len(list((tmp_path / "cache").glob("*.so"))) == 2 and jf.stats["fused_kernels"] >= 1
    assert all(dg.equal(o, rms_swiglu(*args)) for o in outs)


def test_without_a_compiler_the_interpreter_runs_with_a_warning(fusion_config, tmp_path):
    fusion_config.compiler = str(tmp_path / "no-such-compiler")
    args = args_rms()
    want = rms_swiglu(*args)
    from dygrad import _jit_fusion
    _jit_fusion._warned.discard("nocompiler")
    with pytest.warns(dg.jit.JitFusionWarning, match="no C\\+\\+ compiler"):
        jf, outs = replayed(rms_swiglu, args)
    assert jf.stats["fused_kernels"] >= 1 and all(dg.equal(o, want) for o in outs)


def test_dg_compile_defaults_to_o1():
    def f(x):
        return (x * 2 + 1).relu()

    cf = dg.compile(f)
    x = dg.randn(8)
    for _ in range(3):
        assert dg.equal(cf(x), f(x))
    assert cf.stats["fused_kernels"] == 1


def test_deterministic_mode_runs_every_pass_and_stays_bitwise():
    args = args_rms()
    dg.use_deterministic_algorithms(True)
    try:
        want = rms_swiglu(*args)
        jf, outs = replayed(rms_swiglu, args)
    finally:
        dg.use_deterministic_algorithms(False)
    assert jf.stats["fused_kernels"] >= 1 and all(dg.equal(o, want) for o in outs)


def test_version_counters_are_bumped_as_eager_bumps_them():
    p, g, m = dg.randn(64), dg.randn(64), dg.zeros(64)

    def step(g):
        m.mul_(0.9).add_(g, alpha=0.1)
        p.add_(m, alpha=-0.01)

    before = (p._version, m._version)
    step(g)
    per_step = (p._version - before[0], m._version - before[1])
    jstep = dg.jit(step, jit_level="O1")
    for _ in range(4):
        before = (p._version, m._version)
        jstep(g)
        assert (p._version - before[0], m._version - before[1]) == per_step
    assert jstep.stats["replays"] == 2 and jstep.stats["fused_kernels"] == 1


def test_dynamic_dims_replay_each_sizes_o1_graph_bitwise():
    # the symbolic graph's instance at each size is optimized too: its fused kernel compiled for that size
    def f(x):
        return (x * 2 + 1).tanh() * x

    jf = dg.jit(f, jit_level="O1", dynamic=True)
    for n in (16, 32, 48, 64, 80):
        for _ in range(2):
            x = dg.randn(n, 8)
            assert dg.equal(jf(x), f(x))
    assert jf.stats["recompiles"] == 0 and jf.stats["symbolic_instances"] >= 2
    assert jf.stats["fused_kernels"] == 5  # one per size: the captures at 16 and 32, the instances at 48, 64, 80


@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "interpreter"])
def test_a_row_sum_ends_a_run_in_eagers_order(fusion_config, codegen):
    fusion_config.codegen = codegen

    def f(x, y):
        a = (x * y + 1).tanh().sum(-1)        # [16, 37] -> [16]: a tail of eight lanes and five
        b = (x * x).mean(-1, keepdim=True)    # the mean's sum: x * x never stored; its divide a row record
        c = (x * 3).sum(-1, keepdim=True) + (x * 3).sum(0)  # a column sum (dim 0) is not a row sum: eager's
        return a, b, c

    args = dg.randn(16, 37), dg.randn(16, 37)
    want = f(*args)
    jf, outs = replayed(f, args)
    names = [name for name, _ in next(iter(jf._entries.values())).graph.fused_sources()]
    # the three row sums, one pass each, in one row program; the column sum ends it
    assert names[0] == "mul+add_scalar+tanh+sum+mul+sum+div_scalar+mul_scalar+sum", names
    for got in outs:
        assert all(dg.equal(g, w) for g, w in zip(got, want))
    text = dg.jit.graph(f, *args, passes=True)
    assert "sum(" in text.split("=== fusion")[1].split("\n===")[0]  # the column sum


def test_a_single_row_sum_is_a_full_reduction_not_a_row_program():
    def f(x):
        return (x * x).sum(-1)  # [1, 4096]: one output, eager's chunked full reduction, not its row path

    x = dg.randn(1, 4096)
    jf, outs = replayed(f, (x,))
    assert all(dg.equal(o, f(x)) for o in outs)
    fusion = dg.jit.graph(f, x, passes=True).split("=== fusion")[1].split("\n===")[0]
    assert "jit_fused[mul+sum]" in fusion and "a sum over every element" in dg.jit.source(f, x)


def test_a_compiled_module_trained_outside_fuses_its_backward_too():
    def run(compiled):
        dg.manual_seed(0)
        m = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 16), nn.Tanh())
        opt = dg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        fwd = dg.compile(m) if compiled else m
        dg.manual_seed(1)
        for _ in range(6):
            x = dg.randn(8, 16)
            loss = ((fwd(x) - x) ** 2).mean()  # backward outside the compiled forward (nanoGPT's compile=True)
            loss.backward()
            opt.step()
            opt.zero_grad()
        return m, fwd

    m1, _ = run(False)
    m2, fwd = run(True)
    fb = next(iter(fwd._compiled_forward._entries.values())).fb
    assert fb is not None and fb.backward.num_fused >= 1 and fb.pending is None
    assert all(dg.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))


def test_an_argument_aliasing_a_fixed_buffer_is_refused_and_runs_eagerly():
    m = dg.randn(64)

    def f(x):
        m.mul_(0.5)
        return (x * 2 + 1).tanh()  # reads x after m was written: x is m at the last call

    jf = dg.jit(f, jit_level="O1")
    for _ in range(3):
        jf(dg.randn(64))
    want_m = m.clone().mul_(0.5)
    want = (want_m * 2 + 1).tanh()
    got = jf(m)  # the argument is the fixed buffer: eager's order matters
    assert dg.equal(got, want) and dg.equal(m, want_m)


def test_exp_log_and_gelu_fuse_with_eagers_bits():
    def f(x, y):
        z = (x * 0.5).exp() + (y.abs() + 1e-3).log() - (x * 3).exp()  # exp's out-of-range path: x * 3 < -87.3
        return F.gelu(z) * F.gelu(z, approximate="tanh") + z.expm1() - (z.abs()).log1p()

    for dtype in (dg.float32, dg.float64):
        x = dg.cat([dg.randn(2000, dtype=dtype) * 20, dg.tensor([float("inf"), -float("inf"), float("nan")] * 16,
                                                                 dtype=dtype)])
        args = x, dg.randn(x.shape[0], dtype=dtype)
        want = f(*args)
        jf, outs = replayed(f, args)
        assert jf.stats["fused_kernels"] >= 1
        names = " ".join(n for n, _ in next(iter(jf._entries.values())).graph.fused_sources())
        assert "exp" in names and "log" in names and "gelu" in names, names
        for o in outs:  # bitwise, and nan where eager has nan (its sign and payload may differ: docs/jit-fusion.md)
            a, b = o.numpy(), want.numpy()
            nan = np.isnan(b)
            assert (np.isnan(a) == nan).all() and a[~nan].tobytes() == b[~nan].tobytes(), dtype


@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "interpreter"])
def test_gelus_backward_fuses_with_eagers_bits(fusion_config, codegen):
    """F.gelu's backward (`gelu_backward`, both approximations), as a model calling F.gelu records it: fused with
    the ops around it, eager's bits over large, infinite and NaN inputs, float32 and float64."""
    fusion_config.codegen = codegen

    def f(x, g):
        x = x.detach().requires_grad_()
        y = F.gelu(x * 2.0) * F.gelu(x, approximate="tanh")
        y.backward(g)
        return x.grad

    for dtype in (dg.float32, dg.float64):
        x = dg.cat([dg.randn(3000, dtype=dtype) * 6, dg.tensor([float("inf"), -float("inf"), float("nan"), 40.0,
                                                                 -40.0, 0.0, -0.0] * 8, dtype=dtype)])
        g = dg.randn(x.shape[0], dtype=dtype)
        want = f(x, g)
        jf, outs = replayed(f, (x, g))
        names = " ".join(fused_names(jf)[0])
        assert "gelu_backward" in names, names
        assert all(bitwise(o, want) for o in outs), dtype


# --- row programs: reductions whose result feeds back into the row (docs/jit-fusion.md) ----------------------------
def rmsnorm(x, w):
    return x * (x * x).mean(-1, keepdim=True).add(1e-6).rsqrt() * w


def softmax(x):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True), m


def layer_norm(x, w, b):
    d = x - x.mean(-1, keepdim=True)
    return d * ((d * d).mean(-1, keepdim=True) + 1e-5).rsqrt() * w + b


def bitwise(got, want):
    """The same bits, NaN where eager has NaN (a NaN's sign and payload may differ: docs/jit-fusion.md)."""
    a, b = got.detach().numpy(), want.detach().numpy()
    nan = np.isnan(b)
    return a.dtype == b.dtype and (np.isnan(a) == nan).all() and a[~nan].tobytes() == b[~nan].tobytes()


def fused_names(jf):
    graph = next(e.graph for e in jf._entries.values() if e.graph is not None)
    return [name for name, _ in graph.fused_sources()], graph


@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "interpreter"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_composed_rmsnorm_is_one_row_program_bitwise_eager(fusion_config, codegen, dtype):
    fusion_config.codegen = codegen
    dtype = getattr(dg, dtype)
    for shape in [(3, 5, 37), (16, 64)]:  # 37: four groups of eight lanes and a tail of five
        x, w = dg.randn(*shape, dtype=dtype) * 3, dg.randn(shape[-1], dtype=dtype)
        want = rmsnorm(x, w)
        jf, outs = replayed(rmsnorm, (x, w))
        names, graph = fused_names(jf)
        # the squares' sum, the row's divide, + eps and rsqrt, then the row scale in a second pass: one sub-op
        assert names == ["mul+sum+div_scalar+add_scalar+rsqrt+mul+mul"] and graph.num_ops == 1, names
        assert all(bitwise(o, want) for o in outs), (shape, dtype)


def softmax_input(dtype):
    """Rows with eager's corner cases: a maximum at +0 and -0 in different lanes (the lane order decides which
    one amax returns), +inf, all -inf, a NaN; the rest random. 37 columns: whole vectors and a tail."""
    x = np.random.default_rng(0).standard_normal((8, 37)) * 4
    x[1, :] = -1.0
    x[1, 2], x[1, 17] = 0.0, -0.0
    x[2, 5] = np.inf
    x[3, :] = -np.inf
    x[4, 7] = np.nan
    return dg.tensor(x.astype(dtype))


@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "interpreter"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_composed_softmax_is_one_row_program_bitwise_eager(fusion_config, codegen, dtype):
    fusion_config.codegen = codegen
    x = softmax_input(dtype)
    want = softmax(x)
    jf, outs = replayed(softmax, (x,))
    names, graph = fused_names(jf)
    # the row maximum, exp(x - max) summed, then the divide in a third pass reading exp's row again
    assert names == ["amax+add+exp+sum+div"] and graph.num_ops == 1, names
    for got in outs:
        assert bitwise(got[0], want[0]) and bitwise(got[1], want[1]), dtype
    assert want[1][1].numpy().tobytes() == np.array([-0.0], dtype=dtype).tobytes() or dtype == "float64"


@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "interpreter"])
def test_composed_layer_norm_keeps_the_centred_row_for_its_last_pass(fusion_config, codegen):
    fusion_config.codegen = codegen
    for dtype in (dg.float32, dg.float64):
        x = dg.randn(4, 6, 37, dtype=dtype) * 2 + 5
        w, b = dg.randn(37, dtype=dtype), dg.randn(37, dtype=dtype)
        want = layer_norm(x, w, b)
        jf, outs = replayed(layer_norm, (x, w, b))
        names, graph = fused_names(jf)
        assert names == ["sum+div_scalar+add+mul+sum+div_scalar+add_scalar+rsqrt+mul+mul+add"], names
        assert graph.num_ops == 1
        assert all(bitwise(o, want) for o in outs), dtype
    assert "rb0[i]" in dg.jit.source(layer_norm, x, w, b)  # x - mean, not stored: a row buffer


def test_a_training_step_through_composed_rmsnorm_is_bitwise_eager():
    def run(jit):
        dg.manual_seed(0)
        lin = nn.Linear(37, 37)
        w = nn.Parameter(dg.randn(37) * 0.1 + 1)
        params = list(lin.parameters()) + [w]
        opt = dg.optim.SGD(params, lr=0.05, momentum=0.9)

        def step(x, y):
            loss = ((rmsnorm(lin(x), w) - y) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        fn = dg.jit(step, jit_level="O1") if jit else step
        dg.manual_seed(1)
        losses = [fn(dg.randn(6, 37), dg.randn(6, 37)) for _ in range(6)]
        return params, losses, fn

    p1, l1, _ = run(False)
    p2, l2, step = run(True)
    assert step.stats["replays"] == 4
    assert all(bitwise(a, b) for a, b in zip(l2, l1))
    assert all(bitwise(a, b) for a, b in zip(p2, p1))
    names, _ = fused_names(step)
    # the forward's normalisation is one row program (its row values stored: the backward reads them), and so is its
    # backward: the row sum of g * x, rsqrt's and the mean's derivatives on the row values, then x's gradient
    assert "mul+sum+div_scalar+add_scalar+rsqrt+mul+mul" in " ".join(names), names
    assert "mul+mul+sum+mul+mul+mul_scalar+mul+div_scalar+mul+add+add" in names, names


def test_a_poisoned_input_inside_a_row_program_skips_only_what_eager_skips():
    def f(x):
        bad = dg._C._deferred_failure(x, 9)  # its kernel fails: what reads it is skipped
        y = x * (x * x).mean(-1, keepdim=True).add(1e-6).rsqrt()  # runs (the row program's first passes)
        return y + bad, y * 2  # the first is skipped (poisoned), the second runs

    jf = poisoned_replays(f, dg.randn(4, 37), 1)
    names, _ = fused_names(jf)
    assert names == ["mul+sum+div_scalar+add_scalar+rsqrt+mul+add+mul_scalar"], names


def poisoned_replays(f, x, good):
    """f(x) eagerly, then at O1 three times: each call's deferred failure (`_deferred_failure(x, 9)` in f) raised at
    the next sync, and output `good` (computed from no poisoned value) eager's bits. Returns the O1 function."""
    want = f(x)[good]
    with pytest.raises(IndexError):
        dg.synchronize()
    jf = dg.jit(f, jit_level="O1")
    for _ in range(3):
        got = jf(x)
        with pytest.raises(IndexError, match=r"\[_deferred_failure\] index 9 is out of range"):
            dg.synchronize()
        assert bitwise(got[good], want)
    return jf


def test_the_loop_runs_along_the_written_slots_contiguous_dim(fusion_config):
    # an in-place run on a transposed view: its written slot steps 1 along the view's first dim, so that dim is the
    # generated loop's innermost (as eager's strided iteration orders dims); the bits are eager's either way
    def f(buf, c):
        view = buf.t()
        view.mul_(c).add_(1).tanh_()
        return buf.sum()

    buf, c = dg.randn(96, 80), dg.randn(80, 1)  # view [80, 96]; c broadcast along the view's last dim
    src = dg.jit.source(f, buf.clone(), c)
    line = next(ln for ln in src.splitlines() if ln.startswith("// iteration"))
    assert line.startswith("// iteration (96, 80);"), line  # dims swapped: the view's first dim innermost
    assert "s0(80, 1)" in line, line
    want_buf = buf.clone()
    want = f(want_buf, c)
    jf = dg.jit(f, jit_level="O1")
    for _ in range(3):
        got_buf = buf.clone()
        got = jf(got_buf, c)
    assert dg.equal(got, want) and dg.equal(got_buf, want_buf) and jf.stats["fused_kernels"] == 1


@pytest.mark.parametrize("codegen", [True, False])
@pytest.mark.parametrize("dtype", [dg.float32, dg.float64])
def test_masked_fills_fuse_with_a_broadcast_boolean_mask(fusion_config, codegen, dtype):
    # masked_fill joins a run: its mask is a boolean slot (read as 0 or 1, broadcast by its strides); eager's bits,
    # a NaN or an infinity in x kept where the mask is false, -inf, 0 and a number filled where it is true
    fusion_config.codegen = codegen

    def f(x, mask, keep):
        y = (x * 2).masked_fill(mask, float("-inf")).exp()
        return (y + 1).masked_fill(keep, 0.25).masked_fill(~keep, 0.0) * x

    dg.manual_seed(0)
    x = dg.randn(33, 40, dtype=dtype)
    x[0, :4] = dg.tensor([float("nan"), float("inf"), -float("inf"), -0.0], dtype=dtype)
    mask = dg.rand(40) < 0.3                 # broadcast over the rows
    keep = dg.rand(33, 1) < 0.5              # broadcast along each row
    text = dg.jit.graph(f, x, mask, keep, passes=True).split("=== fusion")[1].split("\n===")[0]
    assert "masked_fill" not in text.replace("masked_fill+", "").replace("+masked_fill", ""), text
    want = f(x, mask, keep)
    jf = dg.jit(f, jit_level="O1")
    for _ in range(3):
        got = jf(x, mask, keep)
    assert jf.stats["fused_kernels"] >= 1
    assert (got.view(dg.int64 if dtype == dg.float64 else dg.int32) ==
            want.view(dg.int64 if dtype == dg.float64 else dg.int32)).all()


def test_a_masked_fill_with_a_nan_value_or_in_bfloat16_is_left_to_eager(fusion_config):
    # a NaN fill value (eager stores value.to<T>(), sign and payload) and a bfloat16 masked_fill (eager copies the
    # element's bits, NaN payloads included) stay eager's own op
    x, mask = dg.randn(8, 16), dg.rand(16) < 0.5
    for f, args in ((lambda x, m: (x * 2).masked_fill(m, float("nan")) + 1, (x, mask)),
                    (lambda x, m: (x * 2).masked_fill(m, 1.0) + 1, (x.to(dg.bfloat16), mask))):
        text = dg.jit.graph(f, *args, passes=True).split("=== fusion")[1].split("\n===")[0]
        assert "  masked_fill(" in text, text


@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "interpreter"])
def test_slots_of_one_buffer_are_one_interleaved_group(fusion_config, codegen):
    """The composed rotary embedding reads x[..., 0::2] and x[..., 1::2] and writes the two halves of a `stack`: slots
    of one buffer at a fixed distance, addressed through one pointer in the generated code (FusedProgram::slot_base, so
    the compiler vectorises the interleaved group); eager's bits, and eager's bits again when a call's operands lie
    apart (the guards see other aliasing and capture again; the kernel would run the interpreter too)."""
    fusion_config.codegen = codegen
    fusion_config.measure = False

    def rope(x, cos, sin):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return dg.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)

    def pairs(a, b, cos, sin):  # the two halves passed apart: one buffer at capture, two at the next call
        return dg.stack([a * cos - b * sin, a * sin + b * cos], -1)

    x, cos, sin = dg.randn(2, 3, 16, 32), dg.randn(16, 16), dg.randn(16, 16)
    jf, outs = replayed(rope, (x, cos, sin))
    assert all(dg.equal(o, rope(x, cos, sin)) for o in outs)
    graph = fused_names(jf)[1]
    if codegen:
        assert "one interleaved group" in graph.source()
    jp = dg.jit(pairs, jit_level="O1")
    for _ in range(3):
        assert dg.equal(jp(x[..., 0::2], x[..., 1::2], cos, sin), pairs(x[..., 0::2], x[..., 1::2], cos, sin))
    a, b = dg.randn(2, 3, 16, 32)[..., 0::2], dg.randn(2, 3, 16, 32)[..., 1::2]
    for _ in range(2):
        assert dg.equal(jp(a, b, cos, sin), pairs(a, b, cos, sin))
