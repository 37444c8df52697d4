"""dygrad.autograd.gradcheck and gradgradcheck: torch's checks of a function's analytical gradients (and second
derivatives) against float64 central finite differences, with torch's names, signatures and error type.

gradcheck(func, inputs) compares, for every float output that requires grad and every input that requires grad,
the Jacobian computed by backward (one vector-Jacobian product per output element, run twice: the second run must
agree within nondet_tol, "reentrant") with the numerical one ((f(x + eps) - f(x - eps)) / 2 eps per input
element), elementwise: |analytical - numerical| <= atol + rtol |numerical|. fast_mode compares v^T J u instead,
for one random unit u per input and v per output (torch's fast mode: two evaluations per input and one backward
per output, the tolerance scaled by sum(u) sum(v)). gradgradcheck(func, inputs, grad_outputs) runs gradcheck on
the function (inputs, grad_outputs) -> autograd.grad(func(inputs), inputs, grad_outputs, create_graph=True):
the double backward. See docs/autograd.md, "Double backward".

Differences from torch: forward-mode AD does not exist in dygrad (check_forward_ad, check_batched_forward_grad and
check_fwd_over_rev must stay False, else NotImplementedError); check_batched_grad runs the per-vector loop (no
vmap); there are no sparse or complex tensors (masked is accepted and ignored). The perturbed input is a clone of
the input with its dense layout (torch perturbs the input itself through .data), so a function that closes over
the input tensor rather than taking it as an argument sees no perturbation.
"""
import numpy as np

from .. import _C

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(RuntimeError):
    """Error raised by gradcheck and gradgradcheck (a RuntimeError, as torch's). `numerical` and `analytical` hold
    the two Jacobians (or the two projections v^T J u in fast mode) of a mismatch, as float64 tensors."""

    def __init__(self, message, numerical=None, analytical=None):
        super().__init__(message)
        self.numerical = numerical
        self.analytical = analytical


def _dg():
    import dygrad
    return dygrad


def _as_tuple(x):
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def _is_tensor(x):
    return isinstance(x, _C.Tensor)


def _differentiable_outputs(x):
    return tuple(o for o in _as_tuple(x) if _is_tensor(o) and o.requires_grad)


def _values(t):
    """A tensor's values as a flat float64 NumPy array (a copy)."""
    t = t.detach()
    if t.dtype != _dg().float64:
        t = t.to(_dg().float64)
    return np.array(t.numpy(), dtype=np.float64, copy=True).reshape(-1)


def _as_tensor(array):
    return _dg().tensor(np.ascontiguousarray(array), dtype=_dg().float64)


def _check_inputs(inputs):
    any_requires_grad = False
    for idx, inp in enumerate(inputs):
        if _is_tensor(inp) and inp.requires_grad:
            if inp.dtype != _dg().float64:
                import warnings
                warnings.warn(f"Input #{idx} requires gradient and is not a double precision floating point or "
                              "complex. This check will likely fail if all the inputs are not of double precision "
                              "floating point or complex. ", stacklevel=3)
            if not all(st > 0 or sz <= 1 for st, sz in zip(inp.stride(), inp.shape)):
                raise RuntimeError(f"The {idx}th input has a dimension with stride 0. gradcheck only supports inputs "
                                   "that are non-overlapping to be able to compute the numerical gradients "
                                   "correctly. You should call .contiguous on the input before passing it to "
                                   "gradcheck.")
            any_requires_grad = True
    if not any_requires_grad:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but none of them have "
                         "requires_grad=True.")


def _dense_clone(x):
    """A copy of x laid out as x is (a transposed input stays transposed), as a leaf requiring grad as x does."""
    dims = sorted(range(x.dim()), key=lambda d: (-x.stride()[d], d))
    inverse = [dims.index(d) for d in range(x.dim())]
    with _dg().no_grad():
        copy = x.detach().permute(*dims).clone().permute(*inverse) if x.dim() else x.detach().clone()
    return copy.requires_grad_(x.requires_grad)


class _Perturbed:
    """The inputs with the ones that require grad replaced by clones that can be written in place."""

    def __init__(self, func, inputs):
        self.func = func
        self.inputs = list(inputs)
        self.index = [i for i, t in enumerate(inputs) if _is_tensor(t) and t.requires_grad]
        for i in self.index:
            self.inputs[i] = _dense_clone(inputs[i])

    def write(self, i, flat_values):
        """Sets input i's values (flat float64, in its logical order)."""
        t = self.inputs[i]
        with _dg().no_grad():
            t.detach().copy_(_as_tensor(flat_values).reshape(tuple(t.shape)).to(t.dtype))

    def outputs(self):
        """The float outputs of func at the current values, flat float64 (None for the others)."""
        return [_values(o) if _is_tensor(o) and o.is_floating_point() else None
                for o in _as_tuple(self.func(*self.inputs))]


def _check_same_outputs(a, b):
    if len(a) != len(b) or any((x is None) != (y is None) or (x is not None and x.shape != y.shape)
                               for x, y in zip(a, b)):
        raise AssertionError("gradcheck: the function's outputs change shape or dtype under a perturbation of "
                             f"its inputs (eps too large?)")


def _numerical_jacobians(func, inputs, eps):
    """jacobians[j][k]: (numel of input j, numel of output k) central differences, for every input j that requires
    grad and every output k (None for non-float outputs)."""
    p = _Perturbed(func, inputs)
    base = p.outputs()
    jacobians = []
    for i in p.index:
        orig = _values(p.inputs[i])
        per_output = [None if b is None else np.zeros((orig.size, b.size)) for b in base]
        for e in range(orig.size):
            x = orig.copy()
            x[e] -= eps
            p.write(i, x)
            below = p.outputs()
            x[e] += 2 * eps
            p.write(i, x)
            above = p.outputs()
            _check_same_outputs(base, below)
            _check_same_outputs(below, above)
            for k, (a, b) in enumerate(zip(below, above)):
                if a is not None:
                    per_output[k][e] = (b - a) / (2 * eps)
        p.write(i, orig)
        jacobians.append(per_output)
    return jacobians


def _numerical_jvps(func, inputs, directions, eps):
    """For each input j that requires grad, J_k u_j for every output k (flat; None for non-float outputs)."""
    p = _Perturbed(func, inputs)
    jvps = []
    for i, u in zip(p.index, directions):
        orig = _values(p.inputs[i])
        p.write(i, orig - eps * u)
        below = p.outputs()
        p.write(i, orig + eps * u)
        above = p.outputs()
        p.write(i, orig)
        _check_same_outputs(below, above)
        jvps.append([None if a is None else (b - a) / (2 * eps) for a, b in zip(below, above)])
    return jvps


def _vjps(output, diff_inputs, grad_output, check_grad_dtypes):
    """The gradients of `output` (weighted by grad_output) with respect to each input, flat float64; zeros where
    an input gets none. Raises GradcheckError for a gradient of the wrong shape (or dtype)."""
    grads = _dg().autograd.grad(output, diff_inputs, grad_output, retain_graph=True, allow_unused=True)
    out = []
    for g, x in zip(grads, diff_inputs):
        if g is None:
            out.append(np.zeros(x.numel()))
            continue
        if tuple(g.shape) != tuple(x.shape):
            raise GradcheckError("Analytical gradient has incorrect size")
        if check_grad_dtypes and g.dtype != x.dtype:
            raise GradcheckError("Gradient has dtype mismatch")
        out.append(_values(g))
    return out


def _unit(output, e):
    grad = np.zeros(output.numel())
    grad[e] = 1.0
    return _as_tensor(grad).reshape(tuple(output.shape)).to(output.dtype)


def _analytical_jacobians(output, diff_inputs, nondet_tol, check_grad_dtypes):
    """jacobians[j]: (numel of input j, numel of output), one backward per output element, computed twice."""
    runs = []
    for _ in range(2):
        rows = [_vjps(output, diff_inputs, _unit(output, e), check_grad_dtypes) for e in range(output.numel())]
        runs.append([np.stack([r[j] for r in rows], axis=1) if rows else np.zeros((x.numel(), 0))
                     for j, x in enumerate(diff_inputs)])
    _check_reentrant(runs, nondet_tol)
    return runs[0]


def _check_reentrant(runs, nondet_tol):
    for a, b in zip(*runs):
        if a.size and np.abs(a - b).max() > nondet_tol:
            raise GradcheckError("Backward is not reentrant, i.e., running backward with same input and grad_output "
                                 "multiple times gives different values, although analytical gradient matches "
                                 f"numerical gradient.The tolerance for nondeterminism was {nondet_tol}.")


def _mismatch(numerical, analytical, output_idx, input_idx, fast=False):
    n, a = _as_tensor(numerical), _as_tensor(analytical)
    message = (f"Jacobian mismatch for output {output_idx:d} with respect to input {input_idx:d},\n"
               f"numerical:{n}\nanalytical:{a}\n")
    if fast:
        message += ("\nThe above quantities relating the numerical and analytical jacobians are computed in fast "
                    "mode (v^T J u for random unit vectors u and v). Call gradcheck with fast_mode=False for the "
                    "full Jacobians.\n")
    return GradcheckError(message, n, a)


def _allclose(a, n, rtol, atol):
    return bool(np.all(np.abs(a - n) <= atol + rtol * np.abs(n)))


def _slow_gradcheck(func, inputs, func_out, outputs, eps, rtol, atol, nondet_tol, check_grad_dtypes):
    numerical = _numerical_jacobians(func, inputs, eps)
    if not outputs:
        return _check_no_differentiable_outputs(numerical)
    diff_inputs = [t for t in inputs if _is_tensor(t) and t.requires_grad]
    all_outputs = _as_tuple(func_out)
    differentiable = [k for k, o in enumerate(all_outputs) if _is_tensor(o) and o.requires_grad]
    for i, (k, output) in enumerate(zip(differentiable, outputs)):
        analytical = _analytical_jacobians(output, diff_inputs, nondet_tol, check_grad_dtypes)
        for j, a in enumerate(analytical):
            n = numerical[j][k]
            if not _allclose(a, n, rtol, atol):
                raise _mismatch(n, a, i, j)
    return True


def _check_no_differentiable_outputs(numerical, nondet_tol=0.0):
    for per_input in numerical:
        for jacobian in per_input:
            if jacobian is not None and jacobian.size and np.abs(jacobian).max() > nondet_tol:
                raise GradcheckError("Numerical gradient for function expected to be zero")
    return True


def _random_unit(n, rng):
    v = rng.random(n)
    norm = np.linalg.norm(v)
    return v / norm if norm > 0 else v


def _fast_gradcheck(func, inputs, func_out, outputs, eps, rtol, atol, nondet_tol, check_grad_dtypes):
    rng = np.random.default_rng(0)  # a generator of its own: the user's RNG state is left alone, as in torch
    diff_inputs = [t for t in inputs if _is_tensor(t) and t.requires_grad]
    all_u = [_random_unit(x.numel(), rng) for x in diff_inputs]
    all_v = [_random_unit(o.numel(), rng) for o in outputs]
    jvps = _numerical_jvps(func, inputs, all_u, eps)
    if not outputs:
        return _check_no_differentiable_outputs([[None if j is None else j.reshape(1, -1) for j in per]
                                                 for per in jvps], nondet_tol)
    all_outputs = _as_tuple(func_out)
    differentiable = [k for k, o in enumerate(all_outputs) if _is_tensor(o) and o.requires_grad]
    for i, (k, output, v) in enumerate(zip(differentiable, outputs, all_v)):
        grad_output = _as_tensor(v).reshape(tuple(output.shape)).to(output.dtype)
        runs = [_vjps(output, diff_inputs, grad_output, check_grad_dtypes) for _ in range(2)]
        _check_reentrant([[r.reshape(1, -1) for r in run] for run in runs], nondet_tol)
        for j, (vj, u) in enumerate(zip(runs[0], all_u)):
            analytical = np.array([vj @ u])
            numerical = np.array([v @ jvps[j][k]])
            if not _allclose(analytical, numerical, rtol, atol * u.sum() * v.sum()):
                raise _mismatch(numerical, analytical, i, j, fast=True)
    return True


def _check_backward_mul_by_grad_output(outputs, inputs, each_output):
    """Zero grad_outputs give zero (or no) gradients of the inputs' dtype and shape; each_output
    (check_undefined_grad): so does each output alone, the others' gradients left undefined."""
    dg = _dg()
    diff_inputs = [t for t in inputs if _is_tensor(t) and t.requires_grad]
    subsets = [list(outputs)] + ([[o] for o in outputs] if each_output and len(outputs) > 1 else [])
    for subset in subsets:
        grads = dg.autograd.grad(subset, diff_inputs, [dg.zeros_like(o) for o in subset], retain_graph=True,
                                 allow_unused=True)
        for g, x in zip(grads, diff_inputs):
            if g is None:
                continue
            if np.any(_values(g)):
                raise GradcheckError("backward not multiplied by grad_output")
            if g.dtype != x.dtype:
                raise GradcheckError("grad is incorrect type")
            if tuple(g.shape) != tuple(x.shape):
                raise GradcheckError("grad is incorrect size")
    return True


def _check_batched_grad(outputs, inputs):
    """torch checks vmap over vector-Jacobian products against a loop; dygrad has no vmap: a batch of two random
    grad_outputs summed must give the sum of their gradients (linearity of the backward)."""
    dg = _dg()
    diff_inputs = [t for t in inputs if _is_tensor(t) and t.requires_grad]
    rng = np.random.default_rng(1)
    for k, o in enumerate(outputs):
        a, b = (_as_tensor(rng.standard_normal(o.numel())).reshape(tuple(o.shape)).to(o.dtype) for _ in range(2))
        ga, gb, gs = (_vjps(o, diff_inputs, w, False) for w in (a, b, a + b))
        for j, (x, y, s) in enumerate(zip(ga, gb, gs)):
            if not _allclose(x + y, s, 1e-5, 1e-8):
                raise GradcheckError(f"While computing batched gradients, got: the gradient of output {k} with "
                                     f"respect to input {j} is not linear in grad_output")
    return True


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, nondet_tol=0.0,
              check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
              check_batched_forward_grad=False, check_forward_ad=False, check_backward_ad=True, fast_mode=False,
              masked=None):
    """Checks the gradients of func at inputs (the tensors that require grad, ideally float64) against finite
    differences (torch.autograd.gradcheck). Returns True, or raises GradcheckError (False if not
    raise_exception)."""
    if not (check_forward_ad or check_backward_ad):
        raise AssertionError("Expected at least one of check_forward_ad or check_backward_ad to be True")
    if check_batched_grad and not check_backward_ad:
        raise AssertionError("Setting check_batched_grad=True requires check_backward_ad to be True")
    if check_batched_forward_grad and not check_forward_ad:
        raise AssertionError("Setting check_batched_forward_grad=True requires check_forward_ad to be True")
    if check_forward_ad:
        raise NotImplementedError("[gradcheck] check_forward_ad: dygrad has no forward-mode AD")
    try:
        return _gradcheck(func, inputs, eps, atol, rtol, nondet_tol, check_undefined_grad, check_grad_dtypes,
                          check_batched_grad, fast_mode)
    except GradcheckError:
        if raise_exception:
            raise
        return False


def _gradcheck(func, inputs, eps, atol, rtol, nondet_tol, check_undefined_grad, check_grad_dtypes,
               check_batched_grad, fast_mode):
    inputs = _as_tuple(inputs)
    _check_inputs(inputs)
    func_out = func(*inputs)
    outputs = _differentiable_outputs(func_out)
    check = _fast_gradcheck if fast_mode else _slow_gradcheck
    check(func, inputs, func_out, outputs, eps, rtol, atol, nondet_tol, check_grad_dtypes)
    if not outputs:
        return True
    if check_batched_grad:
        _check_batched_grad(outputs, inputs)
    _check_backward_mul_by_grad_output(outputs, inputs, each_output=check_undefined_grad)
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0, check_undefined_grad=True,
                  check_grad_dtypes=False, check_batched_grad=False, check_fwd_over_rev=False,
                  check_rev_over_rev=True, fast_mode=False, masked=False):
    """Checks the second derivatives of func (torch.autograd.gradgradcheck): gradcheck of (inputs, grad_outputs)
    -> autograd.grad(func(inputs), inputs, grad_outputs, create_graph=True). grad_outputs default to random values
    in [-1, 1) that require grad (drawn from dygrad's global generator, as torch draws from its own)."""
    if not (check_fwd_over_rev or check_rev_over_rev):
        raise AssertionError("Expected at least one of check_fwd_over_rev or check_rev_over_rev to be True")
    if check_undefined_grad and not check_rev_over_rev:
        raise AssertionError("Setting check_undefined_grad=True requires check_rev_over_rev to be True")
    if check_batched_grad and not check_rev_over_rev:
        raise AssertionError("Setting check_batched_grad=True requires check_rev_over_rev to be True")
    dg = _dg()
    inputs = _as_tuple(inputs)
    if grad_outputs is None:
        outputs = _differentiable_outputs(func(*inputs))
        grad_outputs = []
        for o in outputs:
            dtype = o.dtype if o.is_floating_point() else dg.float64
            g = dg.rand(*o.shape, dtype=dtype) * 2 - 1
            if gen_non_contig_grad_outputs and o.dim():
                g = dg.stack([g, dg.zeros_like(g)], dim=-1)[..., 0]  # every other element of a wider buffer
            grad_outputs.append(g.requires_grad_())
        grad_outputs = tuple(grad_outputs)
    else:
        grad_outputs = _as_tuple(grad_outputs)
    count = len(grad_outputs)
    diff_inputs = {i for i, x in enumerate(inputs) if _is_tensor(x) and x.requires_grad}

    def first_derivative(*args):
        input_args = args[:len(args) - count]
        outs = _differentiable_outputs(func(*input_args))
        wrt = tuple(x for i, x in enumerate(input_args) if i in diff_inputs)
        grads = dg.autograd.grad(outs, wrt, args[len(args) - count:], create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_derivative, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, nondet_tol=nondet_tol, check_undefined_grad=check_undefined_grad,
                     check_grad_dtypes=check_grad_dtypes, check_batched_grad=check_batched_grad, fast_mode=fast_mode,
                     check_forward_ad=check_fwd_over_rev, check_backward_ad=check_rev_over_rev, masked=masked)
