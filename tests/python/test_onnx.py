"""dygrad.onnx.export (docs/onnx.md): the LLaMA model (fused and composed) and a nanoGPT-style GPT-2 exported through
dygrad.jit's capture, run by onnxruntime and compared with dygrad's eager results; views, file objects, the errors,
and torch.onnx under dygrad.as_torch.

Tolerance: float32 throughout. onnxruntime's GEMMs and softmax sum in other orders than dygrad's kernels (and
dygrad's attention is a flash kernel with an online softmax), so each op differs by a few float32 ulps of its
reduction length; through the tiny LLaMA's 4 blocks the logits (magnitude ~1) differ by about 1e-6, measured. The
bound 1e-4 (atol and rtol) is two orders above that and still far below any lowering mistake (a wrong rotation,
mask or scale moves logits by 1e-2 or more)."""
import io
import inspect
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import dygrad as dg  # noqa: E402
import dygrad.nn as nn  # noqa: E402
import dygrad.nn.functional as F  # noqa: E402
from dygrad.models.llama import CONFIGS, Llama  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-4)


def run_onnx(model_bytes, **inputs):
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.numpy() for k, v in inputs.items()})


def export_bytes(model, args, **kw):
    buffer = io.BytesIO()
    assert dg.onnx.export(model, args, buffer, **kw) is None
    return buffer.getvalue()


# --- LLaMA ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llamas():
    dg.manual_seed(0)
    fused = Llama(CONFIGS["tiny"], fused=True)
    composed = Llama(CONFIGS["tiny"], fused=False)
    composed.load_state_dict(fused.state_dict())
    return {True: fused.eval(), False: composed.eval()}


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_llama_logits_run_in_onnxruntime_as_eager(llamas, fused):
    model = llamas[fused]
    idx = dg.randint(0, 256, (2, 16))
    blob = export_bytes(model, (idx,), input_names=["idx"], output_names=["logits"])
    proto = onnx.load_from_string(blob)
    onnx.checker.check_model(proto)
    assert proto.opset_import[0].version == dg.onnx.DEFAULT_OPSET == 20
    # Parameters are initializers named as in the state dict; the rotary tables are the model's buffers.
    initializers = {i.name for i in proto.graph.initializer}
    assert {"embed.weight", "head.weight", "norm.weight", "blocks.0.qkv.weight", "blocks.3.w2.weight"} <= initializers
    assert {"rope_cos", "rope_sin"} <= initializers
    ops = {n.op_type for n in proto.graph.node}
    if fused:  # rotary_attention, rms_norm and swiglu are decomposed into standard operators
        assert {"Softmax", "Sigmoid", "ReduceMean", "Sqrt"} <= ops
    with dg.no_grad():
        want = model(idx).numpy()
    (got,) = run_onnx(blob, idx=idx)
    assert got.shape == (2, 16, 256)
    np.testing.assert_allclose(got, want, **TOL)
    assert not model.training


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_llama_loss_exports_cross_entropy(llamas, fused):
    model = llamas[fused].train()
    idx, targets = dg.randint(0, 256, (2, 12)), dg.randint(0, 256, (2, 12))
    blob = export_bytes(model, (idx, targets))
    assert model.training  # export runs the forward in eval mode and leaves the mode as it found it
    model.eval()
    with dg.no_grad():
        want = model(idx, targets).item()
    (got,) = run_onnx(blob, idx=idx, targets=targets)  # input names are the forward's parameter names
    assert got.shape == () and abs(float(got) - want) <= 1e-4 * abs(want)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_llama_with_dynamic_batch_and_sequence_runs_at_other_shapes(llamas, fused, tmp_path):
    model = llamas[fused]
    path = tmp_path / "llama.onnx"  # f as a path
    dg.onnx.export(model, (dg.randint(0, 256, (2, 16)),), str(path), input_names=["idx"], output_names=["logits"],
                   dynamic_axes={"idx": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})
    proto = onnx.load(str(path))
    dims = lambda v: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]  # noqa: E731
    assert dims(proto.graph.input[0]) == ["batch", "seq"] and dims(proto.graph.output[0]) == ["batch", "seq", 256]
    for shape in [(3, 9), (1, 21), (2, 16)]:
        idx = dg.randint(0, 256, shape)
        with dg.no_grad():
            want = model(idx).numpy()
        (got,) = run_onnx(path.read_bytes(), idx=idx)
        np.testing.assert_allclose(got, want, **TOL)


def test_a_size_python_turned_into_a_float_cannot_be_dynamic():
    class ScalesBySize(nn.Module):
        def forward(self, x):
            return x * (1 / math.sqrt(x.shape[-1]))

    x = dg.randn(2, 8)
    with pytest.raises(dg.onnx.OnnxExporterError, match="depends on the dynamic sizes"):
        export_bytes(ScalesBySize(), (x,), dynamic_axes={"x": [1]})
    blob = export_bytes(ScalesBySize(), (x,), dynamic_axes={"x": [0]})  # the batch alone is fine
    y = dg.randn(5, 8)
    np.testing.assert_allclose(run_onnx(blob, x=y)[0], ScalesBySize()(y).numpy(), rtol=1e-6)


def test_opset_17_takes_reduction_axes_as_attributes(llamas):
    model = llamas[True]  # rms_norm's ReduceMean: axes an attribute before opset 18, an input from 18
    idx = dg.randint(0, 256, (1, 8))
    blob = export_bytes(model, (idx,), opset_version=17)
    proto = onnx.load_from_string(blob)
    assert proto.opset_import[0].version == 17
    assert any(n.op_type == "ReduceMean" and any(a.name == "axes" for a in n.attribute) for n in proto.graph.node)
    with dg.no_grad():
        want = model(idx).numpy()
    np.testing.assert_allclose(run_onnx(blob, idx=idx)[0], want, **TOL)


# --- GPT-2 (nanoGPT's model.py, written with dygrad's names) -------------------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class GPTBlock(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd),
                                 nn.Dropout(0.1))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size=256, block_size=32, n_layer=2, n_head=4, n_embd=64):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd), drop=nn.Dropout(0.1),
            h=nn.ModuleList([GPTBlock(n_embd, n_head) for _ in range(n_layer)]), ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.normal_(p, std=0.02)  # non-zero biases, so the export must carry them

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = dg.arange(0, t, dtype=dg.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def test_gpt2_logits_and_loss_run_in_onnxruntime_as_eager():
    dg.manual_seed(1)
    model = GPT().train()  # export runs the forward in eval mode: no dropout
    idx = dg.randint(0, 256, (2, 24))
    targets = dg.randint(0, 256, (2, 24))
    targets[0, :5] = -1  # ignored positions
    blob = export_bytes(model, (idx, targets), output_names=["logits", "loss"],
                        dynamic_shapes={"idx": {0: "batch", 1: "seq"}, "targets": {0: "batch", 1: "seq"}})
    proto = onnx.load_from_string(blob)
    names = [i.name for i in proto.graph.initializer]
    assert "transformer.wte.weight" in names and "lm_head.weight" not in names  # the tied weight, once
    assert "transformer.h.1.mlp.0.bias" in names
    model.eval()
    with dg.no_grad():
        want_logits, want_loss = model(idx, targets)
    logits, loss = run_onnx(blob, idx=idx, targets=targets)
    np.testing.assert_allclose(logits, want_logits.numpy(), **TOL)
    assert abs(float(loss) - want_loss.item()) <= 1e-4 * abs(want_loss.item())
    idx, targets = dg.randint(0, 256, (3, 11)), dg.randint(0, 256, (3, 11))  # another batch and sequence length
    with dg.no_grad():
        want_logits, want_loss = model(idx, targets)
    logits, loss = run_onnx(blob, idx=idx, targets=targets)
    np.testing.assert_allclose(logits, want_logits.numpy(), **TOL)
    assert abs(float(loss) - want_loss.item()) <= 1e-4 * abs(want_loss.item())


# --- views, files, errors -------------------------------------------------------------------------------------------
class Views(nn.Module):
    """Strided views the capture records as operand geometry: a transpose with a step, the last column (its
    region runs past the buffer's end), a broadcast, a permute of a split."""

    def forward(self, x):
        a = x.t()[:, 1::2] * 2  # [6, 2] of [4, 6]
        b = x[:, -1:].expand(4, 3) + 1
        c = x.view(2, 2, 3, 2).permute(3, 0, 2, 1)[1] - x[0, 0]
        return a, b, c


def test_views_are_cut_from_their_buffer():
    x = dg.arange(24, dtype=dg.float32).view(4, 6) * 0.5
    blob = export_bytes(Views(), (x,))
    got = run_onnx(blob, x=x)
    for g, w in zip(got, Views()(x)):
        np.testing.assert_array_equal(g, w.numpy())


class Elementwise(nn.Module):
    """The other ops a model issues: where, clamp, reductions (keepdim or not), gather, argmax, max over a dim,
    tril/triu, masked_fill, factories, cumsum, casts, gelu's tanh form, silu, pow, cat, rsqrt (nan below 0)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 5)

    def forward(self, x, i):
        y = dg.where(x > 0, x, x * 0.1)
        z = self.lin(y).relu().clamp(max=0.5) + y.amax(-1, keepdim=True).exp() - y.sum(0).sigmoid()[:5]
        w = F.log_softmax(z, -1).gather(1, i) + z.argmax(-1, keepdim=True).float() + z.max(1).values[:, None]
        t = z.tril(1) * z.triu(-1) + z.masked_fill(z > 0.2, 3.0) - dg.full((4, 5), 2.0) + dg.ones(4, 5).cumsum(0)
        return (w, t, (x.long() + 1) * 2, F.gelu(x, approximate="tanh"), F.silu(x) / (1 + x.abs()), x.pow(3),
                dg.cat([x, x.neg()], 1).rsqrt())


def test_common_ops_run_in_onnxruntime_as_eager():
    dg.manual_seed(2)
    model, x, i = Elementwise(), dg.randn(4, 6), dg.randint(0, 5, (4, 2))
    got = run_onnx(export_bytes(model, (x, i)), x=x, i=i)
    want = [t.detach().numpy() for t in model(x, i)]
    assert [g.dtype for g in got] == [w.dtype for w in want]
    for g, w in zip(got, want):  # elementwise: equal up to the last bit of a transcendental
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, equal_nan=True)


class BigInts(nn.Module):
    def forward(self, i, u, x):
        return i + 2 ** 63, i * (2 ** 64 - 1), i - (2 ** 64 - 1), i == 2 ** 63, u + (2 ** 64 - 1), x + 2 ** 63


def test_ints_beyond_int64_export_as_eager_wraps_them():
    """A Python int in [2**63, 2**64) is a constant wrapped into the integral dtype, as eager (and torch) wrap it."""
    i, u, x = dg.tensor([-(2 ** 63), 3, -1]), dg.tensor([0, 1, 255], dtype=dg.uint8), dg.tensor([1.0, -2.0, 0.5])
    got = run_onnx(export_bytes(BigInts(), (i, u, x)), i=i, u=u, x=x)
    want = [t.numpy() for t in BigInts()(i, u, x)]
    assert [g.dtype for g in got] == [w.dtype for w in want]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


class UsesCumprod(nn.Module):
    def forward(self, x):
        y = x * 2
        return y.cumprod(-1)  # the line the error names


def test_an_unsupported_op_is_named_with_its_shapes_and_line(tmp_path):
    line = inspect.getsourcelines(UsesCumprod.forward)[1] + 2
    with pytest.raises(dg.onnx.UnsupportedOperatorError) as e:
        dg.onnx.export(UsesCumprod(), (dg.randn(2, 3),), tmp_path / "bad.onnx")
    message = str(e.value)
    assert "'cumprod'" in message and "(2, 3) float32" in message
    assert f"{os.path.basename(__file__)}:{line}" in message
    assert not (tmp_path / "bad.onnx").exists()


def test_is_in_onnx_export_is_true_inside_the_forward_only():
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(dg.onnx.is_in_onnx_export())
            return x + 1

    export_bytes(Probe(), (dg.randn(2),))
    Probe()(dg.randn(2))
    assert seen == [True, False]


def test_a_host_read_in_the_forward_is_refused():
    class ReadsHost(nn.Module):
        def forward(self, x):
            return x * float(x.sum())

    with pytest.raises(dg.onnx.OnnxExporterError, match="host"):
        export_bytes(ReadsHost(), (dg.randn(3),))


def test_training_graphs_and_options_it_cannot_honour_are_refused():
    model, x = nn.Linear(3, 2), dg.randn(1, 3)
    for options in (dict(training=2), dict(export_params=False), dict(keep_initializers_as_inputs=True)):
        with pytest.raises(NotImplementedError):
            export_bytes(model, (x,), **options)
    with pytest.raises(ValueError, match="opset_version 16"):
        export_bytes(model, (x,), opset_version=16)
    with pytest.raises(TypeError):
        export_bytes(model, (x,), no_such_option=1)


# --- torch.onnx under as_torch --------------------------------------------------------------------------------------
def test_torch_onnx_under_as_torch_exports_nanogpts_model(tmp_path):
    """tests/python/port/gpt2_train.py's GPT (nanoGPT's model.py, unmodified torch code) through torch.onnx.export
    under dygrad.as_torch, with a dynamic batch and sequence length."""
    path = str(tmp_path / "gpt.onnx")
    script = textwrap.dedent(f"""
        import sys
        import dygrad, dygrad.as_torch
        dygrad.as_torch.install()
        sys.path.insert(0, {os.path.join(os.path.dirname(__file__), "port")!r})
        import numpy as np, onnxruntime
        import torch, torch.onnx
        from torch.onnx.errors import UnsupportedOperatorError
        from gpt2_train import GPT, GPTConfig
        assert torch.onnx.export is dygrad.onnx.export and not torch.onnx.is_in_onnx_export()
        torch.manual_seed(0)
        model = GPT(GPTConfig(block_size=32, n_layer=2, n_head=4, n_embd=64))
        idx, targets = torch.randint(0, 256, (2, 16)), torch.randint(0, 256, (2, 16))
        torch.onnx.export(model, (idx, targets), {path!r}, input_names=["idx", "targets"], dynamo=False,
                          output_names=["logits", "loss"], dynamic_axes={{"idx": {{0: "batch", 1: "seq"}},
                                                                         "targets": {{0: "batch", 1: "seq"}}}})
        session = onnxruntime.InferenceSession({path!r}, providers=["CPUExecutionProvider"])
        model.eval()
        for shape in [(2, 16), (3, 7)]:
            idx, targets = torch.randint(0, 256, shape), torch.randint(0, 256, shape)
            logits, loss = session.run(None, {{"idx": idx.numpy(), "targets": targets.numpy()}})
            with torch.no_grad():
                want_logits, want_loss = model(idx, targets)
            np.testing.assert_allclose(logits, want_logits.numpy(), rtol=1e-4, atol=1e-4)
            assert abs(float(loss) - want_loss.item()) <= 1e-4 * want_loss.item()
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_onnx_output_is_within_twice_the_dygrad_torch_difference(tmp_path):
    """The issue's bar: nanoGPT's model with torch's weights, run by torch, by dygrad (as_torch) and by onnxruntime
    from dygrad's export: |onnx - dygrad| stays within twice |dygrad - torch| (float32 logits)."""
    port = os.path.join(os.path.dirname(__file__), "port")
    weights, torch_out = str(tmp_path / "weights.npz"), str(tmp_path / "torch.npy")
    common = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {port!r})
        import numpy as np
        import torch
        from gpt2_train import GPT, GPTConfig
        model = GPT(GPTConfig(block_size=32, n_layer=2, n_head=4, n_embd=64))
        data = np.random.default_rng(0).integers(0, 256, (2, 17))
        idx, targets = torch.from_numpy(data[:, :-1].copy()), torch.from_numpy(data[:, 1:].copy())
    """)
    peer = common + textwrap.dedent(f"""
        torch.manual_seed(0)
        np.savez({weights!r}, **{{k: v.detach().numpy() for k, v in model.state_dict().items()}})
        model.eval()
        with torch.no_grad():
            np.save({torch_out!r}, model(idx, targets)[0].numpy())  # with targets: the logits of every position
    """)
    ours = "import dygrad, dygrad.as_torch\ndygrad.as_torch.install()\n" + common + textwrap.dedent(f"""
        import onnxruntime
        saved = np.load({weights!r})
        model.load_state_dict({{k: torch.from_numpy(saved[k].copy()) for k in saved.files}})
        model.eval()
        with torch.no_grad():
            mine = model(idx, targets)[0].numpy()
        torch.onnx.export(model, (idx, targets), {str(tmp_path / "gpt.onnx")!r}, input_names=["idx", "targets"],
                          dynamo=False)
        session = onnxruntime.InferenceSession({str(tmp_path / "gpt.onnx")!r}, providers=["CPUExecutionProvider"])
        onnx_out = session.run(None, {{"idx": idx.numpy(), "targets": targets.numpy()}})[0]
        theirs = np.load({torch_out!r})
        vs_torch, vs_onnx = np.abs(mine - theirs).max(), np.abs(onnx_out - mine).max()
        print("differences", vs_torch, vs_onnx)
        assert vs_torch > 0 and vs_onnx <= 2 * vs_torch, (vs_torch, vs_onnx)
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", peer], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-c", ours], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
