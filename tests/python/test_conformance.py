"""The conformance sweep (tests/python/conformance/README.md): every OpDef in dygrad._C._op_table() has an entry,
and each entry's op, run on every built backend and supported dtype, matches torch on float64 copies of the same
inputs, on contiguous and non-contiguous operands, with float64 finite-difference gradients, gradcheck and
gradgradcheck (the double backward, also against torch's), bitwise the same on 1 and 2 threads, and on the test device
bitwise the CPU's. DYGRAD_SWEEP=full (make sweep) runs every case, layout and dtype."""
import os
import numpy as np
import pytest
import torch

import dygrad as dg
from conformance import ENTRIES, FULL, GRAD_TOLERANCE, TOLERANCE, entry_id
from conformance.spec import FLOATS, applies, build, draw, dtype_of, layouts_for, rounded

TABLE = {op["name"]: op for op in dg._C._op_table()}
REFERENCE = [e for e in ENTRIES if e.check == "reference"]
DIFFERENTIABLE = [e for e in REFERENCE if e.differentiable]
# The backends built into this dygrad: every device type some OpDef has a kernel for.
BACKENDS = sorted({d for op in TABLE.values() for d in op["devices"]})


def params(entries, with_dtypes=False):
    out = []
    for e in entries:
        for dtype in (e.fast_dtypes() if with_dtypes else (None,)):
            out.append(pytest.param(e, dtype, id=entry_id(e) + (f"-{dtype}" if dtype else "")))
    return out


def name_of(dtype):
    return str(dtype).split(".")[-1]


def read(t):
    """A tensor's values as NumPy: floats in float64, integers and bools as they are."""
    t = t.detach()
    if t.is_floating_point():
        t = t.to(dg.float64 if isinstance(t, dg.Tensor) else torch.float64)
    return np.array(t.numpy(), copy=True)  # a copy: numpy() may share the tensor's memory


def outputs(result):
    if result is None:
        return []
    return list(result) if isinstance(result, (tuple, list)) else [result]


def run(lib, entry, tensors):
    fn = entry.ref if (lib is torch and entry.ref is not None) else entry.call
    return outputs(fn(lib, *tensors))


def xfail(request, entry, check, dtype=None):
    reason = entry.xfail.get(f"{check}:{dtype}") or entry.xfail.get(check)
    if reason:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


class expected_failure:
    """A strict xfail of one case inside a test (the entry's xfail key `check:dtype:caseN`): the block must fail
    with AssertionError, and the other cases of the test are still checked."""

    def __init__(self, entry, check, dtype, case):
        self.reason = entry.xfail.get(f"{check}:{dtype}:case{case}")

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if self.reason is None:
            return False
        if kind is None:
            pytest.fail(f"[XPASS(strict)] expected to fail: {self.reason}")
        return issubclass(kind, AssertionError)


class Operands:
    """One case of an entry in one dtype: the values (NumPy), and dygrad/torch tensors holding them."""

    def __init__(self, case, dtype, seed=0, layout="contiguous"):
        rng = np.random.default_rng(seed)
        self.specs, self.dtypes = case, [dtype_of(s, dtype) for s in case]
        arrays = [draw(s, dt, rng) for s, dt in zip(case, self.dtypes)]
        self.dygrad = [build(dg, a, dt, layout if applies(s, layout) else "contiguous")
                       for s, a, dt in zip(case, arrays, self.dtypes)]
        self.values = [read(t) for t in self.dygrad]  # what the operands hold (an expanded view repeats row 0)

    def torch(self, float64=True):
        """torch copies: float operands in float64 (the reference) or in their own dtype."""
        return [torch.tensor(v, dtype=getattr(torch, "float64" if float64 and dt in FLOATS else dt))
                for v, dt in zip(self.values, self.dtypes)]

    def fresh(self, lib, values=None, requires_grad=(), float64=False, device=None):
        """New contiguous tensors of lib holding `values` (default: self.values), leaves where requires_grad;
        float64: float operands in float64; on `device` when given (dygrad's test device)."""
        values = self.values if values is None else values
        out = []
        for i, (v, dt) in enumerate(zip(values, self.dtypes)):
            dt = "float64" if float64 and dt in FLOATS else dt
            t = lib.tensor(np.ascontiguousarray(v), dtype=getattr(lib, dt), **({"device": device} if device else {}))
            out.append(t.requires_grad_(True) if i in requires_grad else t)
        return out


def assert_close(got, want, dtype, tolerance, what, peer=None):
    """got within rtol * |want| + atol of the float64 reference `want`, widened by twice torch's own error in the
    same dtype (`peer`) where given: an op that accumulates in its storage dtype (a 16-bit scatter_add, a bf16
    gradient summed over a broadcast) may be off as far as torch is, never much further. Integers and bools: exact."""
    if dtype not in tolerance:
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    rtol, atol = tolerance[dtype]
    bound = atol + rtol * np.abs(want)
    if peer is not None:
        bound = bound + 2.0 * np.nan_to_num(np.abs(peer - want), nan=0.0, posinf=0.0)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    bad = ~same & ~(np.abs(got - want) <= bound)
    if bad.any():
        k = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} values out of tolerance (rtol {rtol}, atol {atol}"
                             f"{', + 2x torch error' if peer is not None else ''}); first at {k}: got {got[k]!r}, "
                             f"reference {want[k]!r}" + (f", torch in {dtype} {peer[k]!r}" if peer is not None else ""))


def check_outputs(entry, got, want, what, peer=None):
    assert len(got) == len(want), f"{what}: {len(got)} outputs, torch gives {len(want)}"
    tolerance = {**TOLERANCE, **entry.tolerance}
    for k, (d, t) in enumerate(zip(got, want)):
        assert tuple(d.shape) == tuple(t.shape), f"{what} output {k}: shape {tuple(d.shape)}, torch {tuple(t.shape)}"
        p = read(peer[k]) if peer is not None and peer[k].shape == t.shape else None
        assert_close(read(d), read(t), name_of(d.dtype), tolerance, f"{what} output {k}", p)


def recorded_ops(fn):
    """The names of the Tasks that ran while fn() ran (dygrad's profiler records every Task by its OpDef), and of the
    sub-ops a replay ran (its sub_op ranges: "jit_fused[mul+exp] (file:line)" is a jit_fused)."""
    dg.synchronize()
    with dg.profiler.profile() as prof:
        fn()
        dg.synchronize()
    subops = {r.name.split("[")[0].split(" ")[0] for r in prof.result.ranges if r.kind == "sub_op"}
    return {e.name for e in prof.result.ops} | subops


# --- the table and the entries ------------------------------------------------------------------------------------
def test_every_op_has_an_entry():
    covered = {e.op for e in ENTRIES} | {name for e in ENTRIES for name in e.also_runs}
    missing = sorted(set(TABLE) - covered)
    unknown = sorted(covered - set(TABLE))
    print(f"\nconformance: {len(TABLE)} ops, {len(set(TABLE) & covered)} covered, {len(ENTRIES)} entries, "
          f"backends {BACKENDS}, mode {'full' if FULL else 'fast'}")
    assert not missing, f"OpDefs with no conformance entry (add one to tests/python/conformance): {missing}"
    assert not unknown, f"entries name ops that are not in the op table (renamed or removed?): {unknown}"
    ids = [entry_id(e) for e in ENTRIES]
    assert len(ids) == len(set(ids)), "two entries share an op and variant"


@pytest.mark.parametrize("entry,_", params(ENTRIES))
def test_entry_agrees_with_the_table(entry, _):
    op = TABLE.get(entry.op)
    assert op is not None, f"[{entry.op}] is not in the op table"
    assert entry.differentiable == op["differentiable"], (
        f"[{entry.op}] the table says differentiable={op['differentiable']}, the entry {entry.differentiable}")
    assert ("random" in op["flags"]) == (entry.check == "random"), f"[{entry.op}] random flag {op['flags']}"
    if "inplace" in op["flags"]:
        assert entry.inplace_call or entry.inplace_unchecked, f"[{entry.op}] is in place (alias_of): give an inplace_call"
    for name in entry.also_runs:
        assert name in TABLE, f"[{entry_id(entry)}] also_runs names {name}, which is not in the op table"
    assert "cpu" in op["devices"], f"[{entry.op}] has no CPU kernel"


@pytest.mark.parametrize("entry,_", params(ENTRIES))
def test_entry_runs_its_ops(entry, _):
    """Coverage is real: running the entry (forward, and backward when differentiable) executes a Task of its op
    and of every op it claims in also_runs."""
    ops = Operands(entry.cases[0], entry.dtypes[0])

    def body():
        if entry.check == "error":
            with pytest.raises(entry.raises):
                entry.call(dg, *ops.dygrad)
                dg.synchronize()
            return
        grads = [i for i, s in enumerate(ops.specs) if entry.differentiable and s.grad and ops.dtypes[i] in FLOATS]
        tensors = ops.fresh(dg, requires_grad=grads)
        outs = [o for o in run(dg, entry, tensors) if o.requires_grad]
        if outs:
            sum(o.sum() for o in outs).backward()

    ran = recorded_ops(body)
    claimed = {entry.op, *entry.also_runs}
    assert claimed <= ran, f"[{entry_id(entry)}] claims {sorted(claimed)} but only these Tasks ran: {sorted(ran)}"


def host_read_mismatch(entry, ops_seen, reads):
    """The host-read trait against what a recording sink saw: None, or what disagrees."""
    declared = sorted({name for name, _, reads_host in ops_seen if reads_host})
    if bool(declared) == bool(reads):
        return None
    seen = ", ".join(f"{reader} at line {line}" for reader, _, line in reads) or "none"
    return (f"[{entry_id(entry)}] Tasks declaring a host read: {declared or 'none'}; host reads seen: {seen} "
            "(the OpDef's host_read trait, runtime/op_def.h)")


@pytest.mark.parametrize("entry,_", params([e for e in ENTRIES if e.check != "error"]))
def test_host_reads_match_the_trait(entry, _):
    """The host-read trait is proved, not assumed (docs/ops.md, "Op sinks"): the entry's call runs under a recording
    sink, which sees each op with its trait evaluated on the Task's attributes and each read of a value on the host;
    the call reads on the host exactly when a Task it issues declares so."""
    ops = Operands(entry.cases[0], entry.dtypes[0])
    tensors = ops.fresh(dg)
    with dg._C._OpRecorder() as rec:
        run(dg, entry, tensors)
    problem = host_read_mismatch(entry, rec.ops, rec.host_reads)
    assert problem is None, problem


# --- values against torch ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry,dtype", params(REFERENCE, with_dtypes=True))
def test_values(entry, dtype, request):
    xfail(request, entry, "values", dtype)
    for c, case in enumerate(entry.fast_cases()):
        with expected_failure(entry, "values", dtype, c):
            check_values(entry, case, dtype, c)


def check_values(entry, case, dtype, c):
    ops = Operands(case, dtype, seed=c)
    got = run(dg, entry, ops.dygrad)
    want = run(torch, entry, ops.torch(float64=True))
    same_dtype = run(torch, entry, ops.torch(float64=False))
    for k, (d, t) in enumerate(zip(got, same_dtype)):
        assert name_of(d.dtype) == name_of(t.dtype), f"case {c} output {k}: dtype {d.dtype}, torch {t.dtype}"
    check_outputs(entry, got, want, f"[{entry_id(entry)}] {dtype} case {c} {[s.shape for s in case]}", same_dtype)


@pytest.mark.parametrize("entry,dtype", params(REFERENCE, with_dtypes=True))
def test_non_contiguous(entry, dtype, request):
    """Transposed, strided and expanded (broadcast) operands give torch's values and the contiguous ones'."""
    xfail(request, entry, "layouts", dtype)
    for c, case in enumerate(entry.fast_cases()):
        with expected_failure(entry, "layouts", dtype, c):  # an expected failure: in at least one layout
            for layout in layouts_for(case):
                ops = Operands(case, dtype, seed=c, layout=layout)
                got = run(dg, entry, ops.dygrad)
                what = f"[{entry_id(entry)}] {dtype} case {c} {layout}"
                check_outputs(entry, got, run(torch, entry, ops.torch()), what + " vs torch",
                              run(torch, entry, ops.torch(float64=False)))
                check_outputs(entry, got, run(dg, entry, ops.fresh(dg)), what + " vs contiguous")


# --- gradients -----------------------------------------------------------------------------------------------------
FD_MAX_ELEMENTS = 512  # finite differences cost two calls per element


def weights(outs, dtype):
    """Fixed random cotangents for the float outputs, representable in `dtype` (the case's)."""
    rng = np.random.default_rng(99)
    return [rounded(rng.standard_normal(tuple(o.shape)), dtype) for o in outs]


def loss_and_grads(lib, entry, ops, wrt, dtype, float64=False):
    """Gradients of sum(out * w) over the float outputs, with respect to the operands `wrt`."""
    tensors = ops.fresh(lib, requires_grad=wrt, float64=float64)
    outs = [o for o in run(lib, entry, tensors) if o.is_floating_point() and o.requires_grad]
    if not outs:  # no input requires grad (a variant torch has no derivative for)
        return [None for _ in wrt]
    ws = weights(outs, dtype)
    loss = sum((o * lib.tensor(w, dtype=o.dtype)).sum() for o, w in zip(outs, ws))
    loss.backward()
    return [tensors[i].grad for i in wrt]


def loss_value(entry, ops, values):
    with dg.no_grad():
        outs = [o for o in run(dg, entry, ops.fresh(dg, values=values)) if o.is_floating_point()]
    return sum(float((read(o) * w).sum()) for o, w in zip(outs, weights(outs, "float64")))


@pytest.mark.parametrize("entry,_", params(DIFFERENTIABLE))
def test_gradients(entry, _, request):
    """float64 central differences of dygrad's own op against its backward; its backward against torch's in every
    float dtype."""
    xfail(request, entry, "gradients")
    for c, case in enumerate(entry.fast_cases()):
        ops = Operands(case, "float64", seed=c)
        wrt = [i for i, s in enumerate(case) if s.grad and ops.dtypes[i] in FLOATS]
        analytic = loss_and_grads(dg, entry, ops, wrt, "float64")
        h = entry.fd_step
        for i, g in zip(wrt, analytic):
            if ops.values[i].size > FD_MAX_ELEMENTS:
                continue  # the big case: backward against torch only (below)
            numeric = np.zeros(ops.values[i].shape)
            for j in np.ndindex(*ops.values[i].shape):
                values = [v.copy() for v in ops.values]
                values[i][j] += h
                up = loss_value(entry, ops, values)
                values[i][j] -= 2 * h
                numeric[j] = (up - loss_value(entry, ops, values)) / (2 * h)
            assert g is not None, f"[{entry_id(entry)}] no gradient for input {i}"
            np.testing.assert_allclose(read(g), numeric, rtol=1e-5, atol=1e-6,
                                       err_msg=f"[{entry_id(entry)}] case {c} input {i}: backward vs finite differences")
        tolerance = {**GRAD_TOLERANCE, **entry.grad_tolerance}
        for dtype in [d for d in entry.fast_dtypes() if d in FLOATS]:
            typed = Operands(case, dtype, seed=c)
            got = loss_and_grads(dg, entry, typed, wrt, dtype)
            # torch in float64 on the values the dtype holds, with the same (rounded) cotangents
            want = loss_and_grads(torch, entry, typed, wrt, dtype, float64=True)
            peer = loss_and_grads(torch, entry, typed, wrt, dtype) if dtype != "float64" else want
            for i, d, t, p in zip(wrt, got, want, peer):
                assert name_of(d.dtype) == dtype, f"input {i}: gradient dtype {d.dtype}, expected {dtype}"
                assert_close(read(d), read(t), dtype, tolerance,
                             f"[{entry_id(entry)}] {dtype} case {c} input {i}: backward vs torch", read(p))


# --- gradcheck and gradgradcheck -----------------------------------------------------------------------------------
# Every differentiable entry with a float operand to differentiate (the reduce= variants of scatter have none).
GRADCHECKED = [e for e in DIFFERENTIABLE if any(s.grad and dtype_of(s, "float64") in FLOATS for s in e.cases[0])]
GRADCHECK_MAX_ELEMENTS = 128  # slow mode: a backward per output element and two calls per input element


def gradcheck_cases(entry):
    """The cases to gradcheck (float64) with their operands and the indices to differentiate; the big case and
    cases of more than GRADCHECK_MAX_ELEMENTS differentiated elements are left out (their gradients are checked
    against torch by test_gradients)."""
    for c, case in enumerate(entry.fast_cases()):
        ops = Operands(case, "float64", seed=c)
        wrt = [i for i, s in enumerate(case) if s.grad and ops.dtypes[i] in FLOATS]
        if c == 0 or sum(ops.values[i].size for i in wrt) <= GRADCHECK_MAX_ELEMENTS:
            yield c, ops, wrt


def entry_function(entry):
    return lambda *tensors: tuple(run(dg, entry, list(tensors)))


@pytest.mark.parametrize("entry,_", params(GRADCHECKED))
def test_gradcheck(entry, _, request):
    """dg.autograd.gradcheck (torch's slow mode: every Jacobian entry of the backward against float64 central
    differences, reentrancy, zero grad_outputs give zero gradients) on the entry's op."""
    xfail(request, entry, "gradcheck")
    for c, ops, wrt in gradcheck_cases(entry):
        assert dg.autograd.gradcheck(entry_function(entry), ops.fresh(dg, requires_grad=wrt)), f"case {c}"


def second_derivative(lib, entry, ops, wrt):
    """d/d(inputs, w) of sum(u * d sum(w * out) / d inputs): the double backward of the entry's op, with fixed
    cotangents w and directions u."""
    tensors = ops.fresh(lib, requires_grad=wrt)
    outs = [o for o in run(lib, entry, tensors) if o.is_floating_point() and o.requires_grad]
    ws = [lib.tensor(w, dtype=o.dtype).requires_grad_(True) for o, w in zip(outs, weights(outs, "float64"))]
    inputs = [tensors[i] for i in wrt]
    grads = lib.autograd.grad(outs, inputs, ws, create_graph=True, allow_unused=True)
    rng = np.random.default_rng(7)
    terms = [(g * lib.tensor(rng.standard_normal(tuple(g.shape)), dtype=g.dtype)).sum() for g in grads
             if g is not None and g.requires_grad]
    if not terms:
        return []
    second = lib.autograd.grad(sum(terms), inputs + ws, allow_unused=True)
    # torch returns a ZeroTensor for a second derivative it knows to be zero: numpy(force=True) reads it
    return [None if g is None else read(g) if lib is dg else g.detach().numpy(force=True).copy() for g in second]


@pytest.mark.parametrize("entry,_", params(GRADCHECKED))
def test_gradgradcheck(entry, _, request):
    """dg.autograd.gradgradcheck (the backward differentiated again, create_graph=True, against central differences
    of the backward, with respect to the inputs and the grad_outputs), and that second derivative against torch's
    (torch's math attention: its CPU flash kernel has no double backward)."""
    xfail(request, entry, "gradgradcheck")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for c, ops, wrt in gradcheck_cases(entry):
        tensors = ops.fresh(dg, requires_grad=wrt)
        outs = [o for o in run(dg, entry, tensors) if o.requires_grad]
        grad_outputs = [dg.tensor(w, dtype=o.dtype).requires_grad_(True) for o, w in zip(outs, weights(outs, "float64"))]
        assert dg.autograd.gradgradcheck(entry_function(entry), tensors, grad_outputs), f"case {c}"
        got = second_derivative(dg, entry, ops, wrt)
        with sdpa_kernel(SDPBackend.MATH):
            want = second_derivative(torch, entry, ops, wrt)
        assert len(got) == len(want), f"[{entry_id(entry)}] case {c}: {len(got)} second derivatives, torch {len(want)}"
        for k, (d, t) in enumerate(zip(got, want)):
            if t is None or d is None:
                assert d is None or not d.any(), f"[{entry_id(entry)}] case {c} input {k}: torch has no gradient"
                assert t is None or not t.any(), f"[{entry_id(entry)}] case {c} input {k}: no second derivative"
                continue
            np.testing.assert_allclose(d, t, rtol=1e-9, atol=1e-10,
                                       err_msg=f"[{entry_id(entry)}] case {c} input {k}: double backward vs torch")


# --- threads -------------------------------------------------------------------------------------------------------
def bits(t):
    t = t.detach() if t.is_cpu else t.detach().cpu()
    if name_of(t.dtype) in ("bfloat16", "float16"):
        t = t.to(dg.float32)  # exact: the bits of a 16-bit float survive the widening
    return t.numpy().tobytes()


def thread_dtypes(entry):
    floats = [d for d in entry.dtypes if d in ("float32", "bfloat16")]
    return (floats if FULL else floats[:1]) or list(entry.dtypes[:1])


def run_with_grads(entry, ops, seed_random=None):
    if seed_random is not None:
        dg.manual_seed(seed_random)
    wrt = [i for i, s in enumerate(ops.specs) if entry.differentiable and s.grad and ops.dtypes[i] in FLOATS]
    tensors = ops.fresh(dg, requires_grad=wrt)
    outs = run(dg, entry, tensors)
    diff = [o for o in outs if o.requires_grad]
    if diff:
        sum((o * 1.5).sum() for o in diff).backward()
    return [bits(o) for o in outs] + [bits(tensors[i].grad) for i in wrt if tensors[i].grad is not None]


@pytest.mark.parametrize("entry,_", params([e for e in ENTRIES if e.check != "error"]))
def test_one_and_two_threads_bitwise(entry, _, request, restore_context):
    """A case big enough to split over threads gives the same bits (outputs and gradients) on 1 and 2 threads."""
    xfail(request, entry, "threads")
    case = entry.big or entry.cases[0]
    for dtype in thread_dtypes(entry):
        ops = Operands(case, dtype, seed=7)
        seed = 5 if entry.check == "random" else None
        results = []
        for n in (1, 2):
            dg.set_context(num_threads=n)
            results.append(run_with_grads(entry, ops, seed))
        one, two = results
        assert len(one) == len(two)
        for k, (a, b) in enumerate(zip(one, two)):
            assert a == b, f"[{entry_id(entry)}] {dtype} {[s.shape for s in case]}: result {k} differs, 1 vs 2 threads"


# --- flags: in place, random, errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("entry,dtype", params([e for e in ENTRIES if e.inplace_call], with_dtypes=True))
def test_inplace_writes_input_0(entry, dtype):
    """In-place ops (alias_of): output 0 aliases input 0. The in-place form returns its target, writes it, and matches torch."""
    for layout in ["contiguous"] + [l for l in layouts_for(entry.cases[0]) if l != "expanded"]:
        ops = Operands(entry.cases[0], dtype, seed=3, layout=layout)
        target = ops.dygrad[0]
        address, before = target.data_ptr(), read(target).copy()
        result = []
        ran = recorded_ops(lambda: result.extend(outputs(entry.inplace_call(dg, *ops.dygrad))))
        assert entry.op in ran, f"[{entry_id(entry)}] the in-place form ran {sorted(ran)}"
        assert result[0].data_ptr() == address, f"[{entry_id(entry)}] {layout}: result 0 does not alias input 0"
        assert not np.array_equal(read(target), before), f"[{entry_id(entry)}] {layout}: input 0 is unchanged"
        want = ops.torch()
        outputs(entry.inplace_call(torch, *want))
        check_outputs(entry, [target], [want[0]], f"[{entry_id(entry)}] {dtype} {layout} in place vs torch")


@pytest.mark.parametrize("entry,dtype", params([e for e in ENTRIES if e.check == "random"], with_dtypes=True))
def test_random(entry, dtype, restore_context):
    """kOpRandom: a call consumes generator state (a second call differs), reseeding reproduces it, the result has
    torch's dtype and shape, and a large sample's moments are within 6 standard errors."""
    ops = Operands(entry.cases[0], dtype)
    dg.manual_seed(1234)
    first, second = run(dg, entry, ops.dygrad), run(dg, entry, ops.dygrad)
    dg.manual_seed(1234)
    again = run(dg, entry, ops.dygrad)
    assert [bits(t) for t in first] == [bits(t) for t in again], f"[{entry.op}] same seed, different values"
    assert [bits(t) for t in first] != [bits(t) for t in second], f"[{entry.op}] two calls gave the same values"
    for d, t in zip(first, run(torch, entry, ops.torch(float64=False))):
        assert name_of(d.dtype) == name_of(t.dtype) and tuple(d.shape) == tuple(t.shape), (d.dtype, t.dtype, d.shape)
    big = Operands(entry.big, dtype)
    sample = read(run(dg, entry, big.dygrad)[0]).astype(np.float64)
    for name, got, expected, tolerance in entry.moments(sample):
        assert abs(got - expected) <= tolerance, f"[{entry.op}] {dtype}: {name} = {got}, expected {expected} ± {tolerance}"


@pytest.mark.parametrize("entry,_", params([e for e in ENTRIES if e.check == "error"]))
def test_error(entry, _):
    ops = Operands(entry.cases[0], entry.dtypes[0])
    with pytest.raises(entry.raises, match=rf"\[{entry.op}\]"):
        entry.call(dg, *ops.dygrad)
        dg.synchronize()


# --- capture and replay (docs/jit.md) -------------------------------------------------------------------------------
@pytest.mark.parametrize("entry,_", params([e for e in ENTRIES if e.check != "error"
                                            and e.op not in ("jit_graph", "jit_segment", "jit_fused")]))
def test_capture_and_replay(entry, _, request):
    """Every entry's call, forward and backward, compiled with dygrad.jit: the replays (one jit_graph Task, or
    jit_segment Tasks where the call reads values on the host) give the bits eager gives, outputs and gradients."""
    xfail(request, entry, "jit")
    check_capture_and_replay(entry, None)


@pytest.mark.parametrize("entry,_", params([e for e in ENTRIES if e.check != "error"
                                            and e.op not in ("jit_graph", "jit_segment", "jit_fused")]))
def test_capture_and_replay_on_test_device(entry, _, request):
    """The same, every operand on the test device: the replays run on its stream (docs/jit.md, "On a device") and
    give the bits eager gives on the CPU, outputs and gradients."""
    assert dg.testing.enable_test_device(2) >= 2
    xfail(request, entry, "jit")
    xfail(request, entry, "device", entry.dtypes[0])
    check_capture_and_replay(entry, "test:0")


@pytest.mark.parametrize("entry,_", params([e for e in ENTRIES if e.check != "error"
                                            and e.op not in ("jit_graph", "jit_segment", "jit_fused")]))
def test_capture_and_replay_at_o1(entry, _, request, tmp_path_factory):
    """The same at O1 (docs/jit-fusion.md): CSE, DCE and elementwise fusion, the fused sub-ops running generated C++
    (compiled while the capture waits): eager's bits, outputs and gradients."""
    xfail(request, entry, "jit")
    cfg = dg.jit.config
    saved = (cfg.background, cfg.cache_dir)
    cfg.background, cfg.cache_dir = False, str(tmp_path_factory.getbasetemp() / "jit-cache")
    try:
        check_capture_and_replay(entry, None, level="O1")
    finally:
        cfg.background, cfg.cache_dir = saved


@pytest.mark.parametrize("entry,_", params([e for e in ENTRIES if e.check != "error" and "bfloat16" in e.dtypes
                                            and e.op not in ("jit_graph", "jit_segment", "jit_fused")]))
def test_capture_and_replay_at_o1_in_bfloat16(entry, _, request, tmp_path_factory):
    """The same in bfloat16 (docs/jit-fusion.md, "bfloat16 runs"): bfloat16 ops fuse into float32 programs that round
    each record to bfloat16 as eager's kernels store it; eager's bits, outputs and gradients."""
    xfail(request, entry, "jit")
    cfg = dg.jit.config
    saved = (cfg.background, cfg.cache_dir)
    cfg.background, cfg.cache_dir = False, str(tmp_path_factory.getbasetemp() / "jit-cache")
    try:
        check_capture_and_replay(entry, None, level="O1", dtype="bfloat16")
    finally:
        cfg.background, cfg.cache_dir = saved


def check_capture_and_replay(entry, device, level="O0", dtype=None):
    """Five calls of the entry's step compiled (warm-up, capture, replays) against eager on the CPU, bitwise; the
    compiled one's operands on `device` (None: the CPU)."""
    import warnings
    dtype = dtype or entry.dtypes[0]
    ops = Operands(entry.cases[0], dtype, seed=11)
    wrt = [i for i, s in enumerate(ops.specs) if entry.differentiable and s.grad and ops.dtypes[i] in FLOATS]

    def step(*tensors):
        outs = run(dg, entry, list(tensors))
        diff = [o for o in outs if o.requires_grad]
        if diff:
            sum((o * 1.5).sum() for o in diff).backward()
        return [o.detach() for o in outs]

    compiled = dg.jit(step, jit_level=level)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.jit.JitGraphBreakWarning)
        for call in range(5):  # warm-up, capture, replays (or a second capture, then segments, at a cut)
            seed = 5 + call
            dg.manual_seed(seed)
            tensors = ops.fresh(dg, requires_grad=wrt)
            want = [bits(o) for o in step(*tensors)] + [bits(tensors[i].grad) for i in wrt if tensors[i].grad is not None]
            dg.manual_seed(seed)
            tensors = ops.fresh(dg, requires_grad=wrt, device=device)
            got = [bits(o) for o in compiled(*tensors)]
            got += [bits(tensors[i].grad) for i in wrt if tensors[i].grad is not None]
            assert got == want, f"[{entry_id(entry)}] {dtype}: call {call} differs from eager ({compiled.stats})"
    stats = compiled.stats
    assert stats["replays"] + stats["segment_calls"] >= 2, f"[{entry_id(entry)}] never replayed: {stats}"


# --- on the test device (dygrad.testing) -----------------------------------------------------------------------------
ON_DEVICE = [e for e in ENTRIES if e.check in ("reference", "random")]


@pytest.fixture(scope="module")
def test_device():
    """The asynchronous test device: the CPU's kernels on a stream and memory of its own (dygrad.testing). With
    DYGRAD_SWEEP_DEVICE=cuda:0 the same cases run on a GPU against the CPU (bench/gpu_check.sh's sweep phase)."""
    wanted = os.environ.get("DYGRAD_SWEEP_DEVICE")
    if wanted:
        assert wanted.startswith("cuda") and dg.cuda.is_available(), f"DYGRAD_SWEEP_DEVICE={wanted}: no such device"
        return wanted
    assert dg.testing.enable_test_device(2) >= 2
    return "test:0"


def placed(case, dtype, seed, layout, device, wrt):
    """The case's operands (the values Operands draws) as dygrad tensors on `device` (None: the CPU) in `layout`, the
    view taken on that device; the float operands in `wrt` are leaves that require grad (the view's base)."""
    rng = np.random.default_rng(seed)
    dtypes = [dtype_of(s, dtype) for s in case]
    tensors, leaves = [], []
    for i, (s, dt) in enumerate(zip(case, dtypes)):
        where = layout if applies(s, layout) else "contiguous"
        if i in wrt:
            view, base = build(dg, draw(s, dt, rng), dt, where, requires_grad=True, device=device)
            leaves.append(base)
        else:
            view = build(dg, draw(s, dt, rng), dt, where, device=device)
        tensors.append(view)
    return tensors, leaves


def cotangents(outs, device):
    """Fixed random upstream gradients for the differentiable outputs, in each output's dtype, on `device`."""
    rng = np.random.default_rng(99)
    return [dg.tensor(rounded(rng.standard_normal(tuple(o.shape)), name_of(o.dtype)), dtype=o.dtype, device=device)
            for o in outs]


def run_placed(entry, case, dtype, seed, layout, device):
    """The entry's call on operands placed on `device` (a random entry from a fixed seed), and, when it is
    differentiable, backward with fixed upstream gradients: (outputs, the leaves' gradients)."""
    dtypes = [dtype_of(s, dtype) for s in case]
    wrt = [i for i, s in enumerate(case) if entry.differentiable and s.grad and dtypes[i] in FLOATS]
    tensors, leaves = placed(case, dtype, seed, layout, device, wrt)
    if entry.check == "random":
        dg.manual_seed(1234 + seed)
    outs = run(dg, entry, tensors)
    diff = [o for o in outs if o.requires_grad]
    if diff:
        dg.autograd.backward(diff, cotangents(diff, device))
    return outs, [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("entry,dtype", params(ON_DEVICE, with_dtypes=True))
def test_on_test_device(entry, dtype, request, test_device):
    """Every entry on the test device against the same call on the CPU, in the contiguous and the non-contiguous
    layouts (views taken on the device): outputs on the device in the CPU run's dtype, shape and strides and bitwise
    its values (the same kernels); the gradients of the same upstream gradient on the leaves' device and bitwise the
    CPU's; a random entry draws the CPU's values from the same seed. The device's own reads go through copies."""
    xfail(request, entry, "device", dtype)
    for c, case in enumerate(entry.fast_cases()):
        for layout in ["contiguous"] + layouts_for(case):
            what = f"[{entry_id(entry)}] {dtype} case {c} {layout}"
            want, want_grads = run_placed(entry, case, dtype, c, layout, None)
            got, got_grads = run_placed(entry, case, dtype, c, layout, test_device)
            assert len(got) == len(want), f"{what}: {len(got)} outputs on the device, {len(want)} on the cpu"
            for k, (d, t) in enumerate(zip(got, want)):
                assert str(d.device) == test_device, f"{what} output {k}: on {d.device}, not {test_device}"
                assert (d.dtype, tuple(d.shape), d.stride()) == (t.dtype, tuple(t.shape), t.stride()), (
                    f"{what} output {k}: {d.dtype} {tuple(d.shape)} strides {d.stride()} on the device, "
                    f"{t.dtype} {tuple(t.shape)} strides {t.stride()} on the cpu")
                assert bits(d.cpu()) == bits(t), f"{what} output {k}: the device's values differ from the cpu's"
            for i, (d, t) in enumerate(zip(got_grads, want_grads)):
                assert (d is None) == (t is None), f"{what} leaf {i}: gradient {d is not None} on the device, " \
                                                   f"{t is not None} on the cpu"
                if d is None:
                    continue
                assert str(d.device) == test_device, f"{what} leaf {i}: gradient on {d.device}, not {test_device}"
                assert bits(d.cpu()) == bits(t), f"{what} leaf {i}: the device's gradient differs from the cpu's"
