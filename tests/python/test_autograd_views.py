"""In-place ops on views (CopySlices), the in-place/view errors, `.grad` identity, hook result checks and
version checks of index tensors: each case run side by side with torch (values, gradients, error texts)."""
import numpy as np
import pytest
import torch

import dygrad as dg


def to_np(t):
    return None if t is None else np.asarray(t.detach().tolist(), dtype=np.float64)


def run_both(case):
    """Runs case(lib) with lib = torch and lib = dygrad; each returns a list of tensors (or None)."""
    out_t = case(torch)
    out_d = case(dg)
    assert len(out_t) == len(out_d)
    for k, (a, b) in enumerate(zip(out_t, out_d)):
        if a is None or b is None:
            assert a is None and b is None, f"item {k}: torch {a} vs dygrad {b}"
            continue
        np.testing.assert_allclose(to_np(b), to_np(a), rtol=1e-10, atol=1e-12, err_msg=f"item {k}")


def leaf(lib, shape, seed=0):
    rng = np.random.default_rng(seed)
    return lib.tensor(rng.standard_normal(shape), dtype=lib.float64, requires_grad=True)


def weights(lib, shape, seed=100):
    rng = np.random.default_rng(seed)
    return lib.tensor(rng.standard_normal(shape), dtype=lib.float64)


def raises_both(case, substance, exc=RuntimeError):
    with pytest.raises(exc) as et:
        case(torch)
    with pytest.raises(exc) as ed:
        case(dg)
    assert substance in str(et.value), str(et.value)
    assert substance in str(ed.value), str(ed.value)


# --- CopySlices: every in-place op on a view of a non-leaf ---------------------------------------------------
def _mask(lib):
    return lib.tensor([[True, False, True], [False, False, True]])


INPLACE_ON_VIEW = {
    "add_": lambda lib, v, w: v.add_(w),
    "iadd": lambda lib, v, w: v.__iadd__(w),
    "sub_": lambda lib, v, w: v.sub_(w, alpha=2.0),
    "mul_": lambda lib, v, w: v.mul_(w),
    "div_": lambda lib, v, w: v.div_(w * w + 1),
    "mul_scalar": lambda lib, v, w: v.mul_(3.0),
    "copy_": lambda lib, v, w: v.copy_(w),
    "copy_broadcast": lambda lib, v, w: v.copy_(w[0]),
    "fill_": lambda lib, v, w: v.fill_(2.5),
    "zero_": lambda lib, v, w: v.zero_(),
    "clamp_": lambda lib, v, w: v.clamp_(-0.3, 0.4),
    "masked_fill_": lambda lib, v, w: v.masked_fill_(_mask(lib), 0.5),
    "relu_": lambda lib, v, w: v.relu_(),
    "exp_": lambda lib, v, w: v.exp_(),
    "setitem_tensor": lambda lib, v, w: v.__setitem__((slice(None), 0), w[:, 1]),
    "setitem_mask": lambda lib, v, w: v.__setitem__(_mask(lib), 0.0),
    "setitem_index_add": lambda lib, v, w: v.__setitem__(lib.tensor([1, 0]), v[lib.tensor([1, 0])] + w),
    "scatter_": lambda lib, v, w: v.scatter_(1, lib.tensor([[2, 0, 1], [0, 1, 2]]), w),
    "index_add_": lambda lib, v, w: v.index_add_(1, lib.tensor([2, 0, 2]), w),
}


@pytest.mark.parametrize("name", sorted(INPLACE_ON_VIEW))
def test_inplace_op_on_a_view_of_a_non_leaf(name):
    op = INPLACE_ON_VIEW[name]

    def case(lib):
        x, w = leaf(lib, (4, 3)), leaf(lib, (2, 3), seed=1)
        y = x * 1.5
        view = y[1:3]                        # rows 1 and 2
        op(lib, view, w)
        assert y.grad_fn.name().endswith("CopySlices")
        assert view.grad_fn.name() == "AsStridedBackward0"
        loss = (y * weights(lib, (4, 3))).sum() + (view * weights(lib, (2, 3), seed=7)).sum()
        loss.backward()
        return [y, view, x.grad, w.grad]

    run_both(case)


def test_view_of_a_view_and_a_sibling_view():
    def case(lib):
        x, w = leaf(lib, (4, 5)), leaf(lib, (3,), seed=1)
        y = x.sin()
        rows = y[1:]                         # a view
        column = rows[:, 2]                  # a view of the view: its base is y
        other = y[:, 1]                      # another view of y, made before the write
        column.mul_(w)
        loss = (y * weights(lib, (4, 5))).sum() + (column * 3).sum() + (other * other).sum()
        loss.backward()
        return [y, column, other, x.grad, w.grad]

    run_both(case)


def test_base_modified_after_the_view_was_made():
    def case(lib):
        x = leaf(lib, (6,))
        y = x * 2
        v = y[:3]
        y.mul_(x)                            # the view's history is regenerated from y's new history
        (v * weights(lib, (3,))).sum().backward()
        return [v, x.grad]

    run_both(case)


def test_value_that_requires_grad_written_into_a_tensor_that_does_not():
    def case(lib):
        w = leaf(lib, (2, 3))
        z = lib.zeros(4, 3, dtype=lib.float64)
        other = z[2:]                        # a view of z made before z needs grad
        z[:2] = w * 2
        assert z.requires_grad and not z.is_leaf and other.requires_grad
        (z * weights(lib, (4, 3))).sum().backward()
        return [z, w.grad]

    run_both(case)


def test_sequence_of_inplace_ops_on_the_same_view():
    def case(lib):
        x, w = leaf(lib, (3, 4)), leaf(lib, (3,), seed=1)
        y = x.clone()
        col = y[:, 1]
        col.add_(w)
        col.mul_(w)
        y[:, 3] += col
        (y * weights(lib, (3, 4))).sum().backward()
        return [y, x.grad, w.grad]

    run_both(case)


def test_transposed_and_strided_views():
    def case(lib):
        x, w = leaf(lib, (4, 6)), leaf(lib, (3, 4), seed=1)
        y = x.sin()
        v = y.t()[::2]                       # (3, 4), strides (2, 6)
        v.mul_(w)
        (y * weights(lib, (4, 6))).sum().backward()
        return [y, x.grad, w.grad]

    run_both(case)


def test_double_backward_through_copyslices():
    def case(lib):
        x = leaf(lib, (3, 3))
        y = x * x
        y[:, 0] *= x[:, 1]
        g, = lib.autograd.grad((y * weights(lib, (3, 3))).sum(), x, create_graph=True)
        (g * g).sum().backward()
        return [g, x.grad]

    run_both(case)


def test_autograd_grad_of_a_view_modified_in_place():
    def case(lib):
        x = leaf(lib, (5,))
        y = x.sin()
        v = y[1:4]
        v.mul_(2)
        gv, gx = lib.autograd.grad((y * y).sum() + (v * weights(lib, (3,))).sum(), (v, x))
        return [gv, gx]

    run_both(case)


# --- errors torch raises --------------------------------------------------------------------------------------
def test_inplace_on_a_view_of_a_leaf_raises():
    raises_both(lambda lib: leaf(lib, (3,))[:2].add_(1),
                "a view of a leaf Variable that requires grad is being used in an in-place operation")
    raises_both(lambda lib: leaf(lib, (3,)).__setitem__(0, 1.0),
                "a leaf Variable that requires grad is being used in an in-place operation")


def test_inplace_on_a_view_of_a_leaf_under_no_grad_is_allowed():
    def case(lib):
        p = leaf(lib, (4,))
        with lib.no_grad():
            p[:2].mul_(2)
            p[2:] = 0.0
        (p * p).sum().backward()
        return [p, p.grad]

    run_both(case)


@pytest.mark.parametrize("make", ["split", "chunk", "unbind"])
def test_inplace_on_a_multi_output_view_raises(make):
    def case(lib):
        y = leaf(lib, (4, 2)) * 2
        piece = {"split": lambda: y.split(2)[0], "chunk": lambda: y.chunk(2)[1], "unbind": lambda: y.unbind()[0]}[make]()
        piece.mul_(2)

    raises_both(case, "This view is the output of a function that returns multiple views. Such functions do not "
                      "allow the output views to be modified inplace")
    # the name of the node is in both messages: "Output 0 of SplitBackward0 is a view and is being modified inplace"
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        case(dg)


def test_multi_output_view_whose_base_is_modified_raises_on_use():
    def case(lib):
        y = leaf(lib, (4,)) * 2
        a, b = y.split(2)
        y.mul_(2)
        a.sum().backward()

    raises_both(case, "its base or another view of its base has been modified inplace. This view is the output of "
                      "a function that returns multiple views")


def test_multi_output_views_without_grad_may_be_modified():
    def case(lib):
        y = lib.arange(4.0, dtype=lib.float64)
        a, b = y.split(2)
        a.add_(1)
        return [y]

    run_both(case)


def test_no_grad_view_modified_under_grad_mode_raises():
    def direct(lib):
        y = leaf(lib, (4,)) * 2
        with lib.no_grad():
            v = y[:2]
        v.mul_(2)

    raises_both(direct, "A view was created in no_grad mode and is being modified inplace with grad mode enabled")

    def indirect(lib):
        y = leaf(lib, (4,)) * 2
        with lib.no_grad():
            v = y[:2]
        y.mul_(2)
        (v * 2).sum().backward()

    raises_both(indirect, "A view was created in no_grad mode and its base or another view of its base has been "
                          "modified inplace with grad mode enabled")


def test_version_check_still_catches_a_real_misuse():
    def case(lib):
        x = leaf(lib, (4,))
        y = x * 1
        z = y * y                            # saves y
        y[1:3].mul_(2)                       # modifies y through a view
        z.sum().backward()

    raises_both(case, "one of the variables needed for gradient computation has been modified by an inplace operation")

    def sigmoid_output(lib):                 # torch's docs: the output of sigmoid is saved
        x = leaf(lib, (3,))
        out = x.sigmoid()
        out[0:2].add_(1)
        out.sum().backward()

    raises_both(sigmoid_output, "modified by an inplace operation")


# --- fill_ / copy_ of a constant into a non-leaf ---------------------------------------------------------------
@pytest.mark.parametrize("write", ["fill_", "zero_", "copy_constant", "copy_int"])
def test_overwriting_a_non_leaf_sends_zeros_back(write):
    def case(lib):
        x = leaf(lib, (2, 3))
        y = x * 2
        {"fill_": lambda: y.fill_(1.5), "zero_": lambda: y.zero_(),
         "copy_constant": lambda: y.copy_(lib.ones(2, 3, dtype=lib.float64)),
         "copy_int": lambda: y.copy_(lib.arange(3))}[write]()
        assert y.grad_fn is not None and not y.is_leaf
        (y * 3).sum().backward()
        return [y, x.grad]

    run_both(case)
    assert dg.tensor([1.0], requires_grad=True).clone().copy_(dg.ones(1)).grad_fn.name() == "CopyBackwards"


def test_copy_from_a_tensor_that_requires_grad_into_a_non_leaf():
    def case(lib):
        x, w = leaf(lib, (2, 3)), leaf(lib, (3,), seed=1)
        y = x * 2
        y.copy_(w * w)                       # broadcast source
        (y * weights(lib, (2, 3))).sum().backward()
        return [y, x.grad, w.grad]

    run_both(case)


# --- .grad identity -------------------------------------------------------------------------------------------
def test_grad_is_the_same_object_while_it_is_the_same_tensor():
    x = dg.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    g = x.grad
    assert x.grad is g
    cache = {g: "grad"}
    assert cache[x.grad] == "grad"
    (x * 2).sum().backward()                 # accumulated in place: still the same tensor
    assert x.grad is g and g.tolist() == [4.0, 4.0, 4.0]
    (x * 2).sum().backward(create_graph=True)  # accumulated out of place: a new tensor
    assert x.grad is not g
    x.grad = None
    assert x.grad is None
    replaced = dg.zeros(3)
    x.grad = replaced
    assert x.grad is replaced
    assert x.grad is replaced


def test_retained_grad_identity():
    x = dg.ones(3, requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.sum().backward()
    assert y.grad is y.grad


# --- hooks' returned gradients ---------------------------------------------------------------------------------
@pytest.mark.parametrize("on", ["leaf", "non_leaf"])
def test_hook_changing_the_size_or_type_raises(on):
    def size_hook(g):
        return g[0]

    def type_hook(g):
        return g.double()

    for hook, substance in [(size_hook, "hook 'size_hook' has changed the size of value"),
                            (type_hook, "hook 'type_hook' has changed the type of value (was ")]:
        def case(lib):
            x = lib.ones(2, 3, requires_grad=True)
            t = x if on == "leaf" else x * 1
            t.register_hook(hook)
            (t * 2).sum().backward()

        raises_both(case, substance)


def test_hook_replacing_the_gradient_with_a_valid_one():
    def case(lib):
        x = leaf(lib, (3,))
        y = x * 2
        y.register_hook(lambda g: g * 10)
        (y * y).sum().backward()
        return [x.grad]

    run_both(case)


# --- version checks of index tensors ---------------------------------------------------------------------------
INDEX_USES = {
    "getitem": lambda lib, x, i: (x * 1)[i] ** 2,
    "getitem_mask": lambda lib, x, i: (x * 1)[lib.tensor([True, False, True, True, False])] ** 2,
    "setitem": lambda lib, x, i: _setitem(lib, x, i),
    "index_put_accumulate": lambda lib, x, i: (x * 1).index_put_((i,), x[:2] * 3, accumulate=True),
    "index_add_": lambda lib, x, i: (x * 1).index_add_(0, i, x[:2] * 3),
    "index_select": lambda lib, x, i: x.index_select(0, i) ** 2,
    "gather": lambda lib, x, i: x.gather(0, i) ** 2,
    "scatter_add": lambda lib, x, i: (x * 1).scatter_add(0, i, x[:2] * 3),
}


def _setitem(lib, x, i):
    y = x * 1
    y[i] = x[2:4] * 3
    return y


@pytest.mark.parametrize("use", sorted(INDEX_USES))
def test_modifying_a_saved_index_tensor_before_backward_raises(use):
    def case(lib):
        x = leaf(lib, (5,))
        i = lib.tensor([0, 2])
        out = INDEX_USES[use](lib, x, i)
        if use == "getitem_mask":
            return out, None
        return out, i

    def modified(lib):
        out, i = case(lib)
        if i is None:                                 # the mask: rebuild to mutate it
            x = leaf(lib, (5,))
            m = lib.tensor([True, False, True, True, False])
            out = (x * 1)[m] ** 2
            m[1] = True
        else:
            i[0] = 1
        out.sum().backward()

    raises_both(modified, "one of the variables needed for gradient computation has been modified by an inplace "
                          "operation")


# --- the examples of torch's docs -----------------------------------------------------------------------------
def test_detach_docs_example_inplace_on_the_detached_tensor_is_caught():
    # torch.Tensor.detach: "c.zero_() ... out.sum().backward() requires the original value of out"
    def case(lib):
        a = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        out = a.sigmoid()
        c = out.detach()
        c.zero_()
        out.sum().backward()

    raises_both(case, "one of the variables needed for gradient computation has been modified by an inplace operation")


def test_tensor_views_docs_example_with_autograd():
    # tensor_view.html: b = t.view(2, 8); b[0][0] = 3.14 changes t[0][0]; here t needs grad
    def case(lib):
        x = leaf(lib, (4, 4))
        t = x * 2
        b = t.view(2, 8)
        b[0][0] = 3.14
        assert t.grad_fn.name().endswith("CopySlices")
        (t * weights(lib, (4, 4))).sum().backward()
        return [t, b, x.grad]

    run_both(case)


def test_inplace_on_a_view_inside_a_model_step():
    # the pattern the issue names: h[mask] = 0 and x[:, 0] += y on activations, then an optimizer step
    def case(lib):
        lib.manual_seed(0)
        w = lib.tensor(np.random.default_rng(3).standard_normal((4, 4)), dtype=lib.float64, requires_grad=True)
        x = weights(lib, (3, 4))
        h = x @ w
        h[h < 0] = 0
        h[:, 0] += h[:, 1]
        loss = (h * h).sum()
        loss.backward()
        with lib.no_grad():
            w -= 0.1 * w.grad
        return [h, w.grad, w]

    run_both(case)


def test_graphs_with_copyslices_are_freed():
    # The base holds CopySlices, which holds the in-place op's node: no cycle through the view's base, with or
    # without backward.
    def step():
        x = dg.ones(64, 64, requires_grad=True)
        h = x * 2
        h[:, 0] += h[:, 1]
        v = h[1:]
        v.mul_(3)
        h[h > 3] = 0
        (h * h).sum().backward()
        y = x * 1
        y[0].add_(1)

    step()
    dg.synchronize()
    before = dg._C.memory_allocated()
    for _ in range(5):
        step()
    dg.synchronize()
    assert dg._C.memory_allocated() == before


def test_hooks_on_a_view_modified_in_place():
    # A hook registered before the write stays on the view's old history, which the gradient no longer
    # reaches (torch's too); one registered after fires with the new value's gradient.
    def case(lib):
        x = lib.ones(4, dtype=lib.float64, requires_grad=True)
        v = (x * 1)[:2]
        seen = []
        v.register_hook(lambda g: seen.append(("before", g.tolist())))
        v.mul_(3)
        v.register_hook(lambda g: seen.append(("after", g.tolist())))
        (v * 5).sum().backward()
        y = x * 1
        a, b = y[:2], y[2:]
        b.register_hook(lambda g: seen.append(("sibling", g.tolist())))
        a.mul_(3)                            # b's history is regenerated
        (b * 5).sum().backward()
        return seen, x.grad.tolist()

    assert case(dg) == case(torch)
