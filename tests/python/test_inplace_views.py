"""The in-place metadata methods (t_, transpose_, swapdims_/swapaxes_, squeeze_, unsqueeze_, as_strided_, detach_,
resize_, resize_as_): the tensor object itself changes, as torch's does. Each case runs side by side with torch
(sizes, strides, offsets, values, version counters, gradients, error texts), and the stream cases check that a Task
queued before the change still sees the old metadata (docs/tensor.md, "Metadata changed in place")."""
import numpy as np
import pytest
import torch

import dygrad as dg
from test_autograd_views import raises_both  # torch and dygrad raise the same error


def geometry(t):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def same(case):
    """case(lib) returns a list of tensors or plain values; dygrad's must equal torch's."""
    out_t, out_d = case(torch), case(dg)
    assert len(out_t) == len(out_d)
    for k, (a, b) in enumerate(zip(out_t, out_d)):
        if isinstance(a, torch.Tensor):
            assert geometry(b) == geometry(a), f"item {k}: {geometry(b)} vs torch {geometry(a)}"
            np.testing.assert_allclose(np.asarray(b.detach().tolist(), dtype=np.float64),
                                       np.asarray(a.detach().tolist(), dtype=np.float64), rtol=1e-12,
                                       err_msg=f"item {k}")
        else:
            assert b == a, f"item {k}: {b} vs torch {a}"


def grid(lib, *shape, requires_grad=False):
    n = int(np.prod(shape))  # a tensor of its own (not a view of the arange), as a leaf
    return lib.tensor(np.arange(n, dtype=np.float64).reshape(shape)).requires_grad_(requires_grad)


@pytest.mark.parametrize("op", [
    lambda x: x.t_(), lambda x: x.transpose_(0, 1), lambda x: x.transpose_(-1, 0), lambda x: x.swapdims_(0, 1),
    lambda x: x.swapaxes_(1, 0), lambda x: x.unsqueeze_(0), lambda x: x.unsqueeze_(-1), lambda x: x.unsqueeze_(1),
])
def test_metadata_methods_change_the_tensor_itself(op):
    def case(lib):
        x = grid(lib, 2, 3)
        version = x._version
        result = op(x)
        later = x * 1  # an op after the change reads the new metadata
        return [x, later, result is x, x._version - version]
    same(case)


def test_swapdims_and_swapaxes_are_transpose():
    same(lambda lib: [grid(lib, 2, 3, 4).swapdims(0, 2), grid(lib, 2, 3, 4).swapaxes(-1, 1),
                      lib.swapdims(grid(lib, 2, 3), 1, 0), lib.swapaxes(grid(lib, 2, 3), 0, 1)])


def test_squeeze_all_overloads():
    def case(lib):
        out = []
        for args in [(), (0,), (2,), (-1,), (1,), ((0, 2),), ((0, 1, 2),)]:
            x = grid(lib, 1, 3, 1)
            version = x._version
            assert x.squeeze_(*args) is x
            out += [x, x._version - version]
        x = grid(lib, 1)[0]  # 0-d
        out += [x.squeeze_(), x.squeeze_(0), x.unsqueeze_(0)]
        return out
    same(case)


def test_t_of_0d_and_1d_and_errors():
    same(lambda lib: [grid(lib, 3).t_(), lib.tensor(2.0).t_()])
    raises_both(lambda lib: grid(lib, 2, 3, 4).t_(), "t_() expects a tensor with <= 2 dimensions, but self is 3D")
    raises_both(lambda lib: grid(lib, 2, 3).transpose_(0, 2), "out of range", IndexError)
    raises_both(lambda lib: grid(lib, 2, 3).unsqueeze_(3), "out of range", IndexError)
    raises_both(lambda lib: grid(lib, 2, 3).squeeze_(5), "out of range", IndexError)


def test_as_strided_():
    def case(lib):
        x = grid(lib, 2, 3)
        a = x.as_strided_((2, 2), (1, 2))
        y = grid(lib, 2, 3)
        y.as_strided_((2, 2), (1, 2), 1)
        z = grid(lib, 6)[2:]
        z.as_strided_((2,), (2,))  # storage_offset=None keeps the view's offset
        return [a, a is x, y, z]
    same(case)
    raises_both(lambda lib: grid(lib, 2, 3).as_strided_((3,), (-1,)), "Negative strides are not supported")
    raises_both(lambda lib: grid(lib, 2, 3).as_strided_((7,), (1,)), "out of bounds for storage of size")


def test_autograd_through_in_place_view_ops():
    w = np.random.default_rng(0).standard_normal((4, 3, 2))

    def case(lib):
        x = grid(lib, 2, 3, 4, requires_grad=True)
        y = x * 2
        y.transpose_(0, 2)                  # [4, 3, 2]
        y.unsqueeze_(0).squeeze_(0)
        y.swapdims_(1, 2).swapaxes_(1, 2)
        loss = (y * lib.tensor(w)).sum()
        loss.backward()
        return [x.grad, y.requires_grad, y.is_leaf]
    same(case)


def test_in_place_on_a_view_keeps_it_a_view_and_reaches_the_base():
    def case(lib):
        x = grid(lib, 3, 4, requires_grad=True)
        c = x * 1
        v = c[1:3]
        v.t_()
        (v * lib.arange(8, dtype=lib.float64).reshape(4, 2)).sum().backward()
        return [v, x.grad]
    same(case)


def test_other_views_of_a_base_changed_in_place_keep_their_elements():
    def case(lib):
        x = grid(lib, 2, 3, requires_grad=True)
        b = x * 1
        row = b[0]
        b.t_()
        (row * lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)).sum().backward()
        return [row, b, x.grad]
    same(case)


def test_leaf_and_view_of_leaf_raise_under_grad_mode_only():
    raises_both(lambda lib: grid(lib, 2, 3, requires_grad=True).t_(),
                "a leaf Variable that requires grad is being used in an in-place operation")
    raises_both(lambda lib: grid(lib, 2, 3, requires_grad=True)[0:1].t_(),
                "a view of a leaf Variable that requires grad is being used in an in-place operation")

    def case(lib):
        x = grid(lib, 2, 3, requires_grad=True)
        with lib.no_grad():
            x.t_()
        return [x, x.is_leaf, x.requires_grad]
    same(case)


def test_a_saved_tensor_changed_in_place_raises_at_backward():
    def case(lib):
        b = grid(lib, 2, 3, requires_grad=True) * 1
        y = b * b
        b.t_()
        y.sum().backward()
    raises_both(case, "modified by an inplace operation")


def test_detach_():
    def case(lib):
        x = grid(lib, 3, requires_grad=True)
        (x * 2).sum().backward()
        version = x._version
        assert x.detach_() is x
        y = grid(lib, 3, requires_grad=True) * 2
        y.retain_grad()
        y.detach_()
        return [x, x.grad, x.requires_grad, x._version - version, y.requires_grad, y.is_leaf, y.grad_fn is None]
    same(case)
    raises_both(lambda lib: grid(lib, 3)[0:2].detach_(), "Can't detach views in-place. Use detach() instead.")


def test_resize_():
    def case(lib):
        x = grid(lib, 2, 3)
        v0 = x._version
        x.resize_(3, 2)
        shrunk = grid(lib, 2, 3).resize_(4)
        strided = grid(lib, 2, 3).t().resize_(3, 2)      # contiguous strides, the same offset
        offset = grid(lib, 4)[1:]
        offset.resize_(2)
        grown = grid(lib, 2, 3)
        view = grown[:]
        grown.resize_(4, 4)
        grown.fill_(1.0)                                  # the old view sees the new memory
        resized_as = grid(lib, 2, 3).resize_as_(lib.zeros(6, 1, dtype=lib.int64))
        return [x, x._version - v0, shrunk, strided, offset, grown[0:1, 0:3], view,
                grown.untyped_storage().data_ptr() == view.untyped_storage().data_ptr(), resized_as]
    same(case)
    raises_both(lambda lib: grid(lib, 2, requires_grad=True).resize_(3), "cannot resize variables that require grad")
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
            grid(torch, 2, requires_grad=True).resize_(3)
    with dg.no_grad():
        with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
            grid(dg, 2, requires_grad=True).resize_(3)
    raises_both(lambda lib: lib.from_numpy(np.zeros(3, dtype=np.float32)).resize_(10),
                "Trying to resize storage that is not resizable")


def test_resize_keeps_the_first_values_when_it_grows():
    x = dg.arange(6.0)
    x.resize_(2, 5)
    assert x.reshape(-1)[:6].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_tasks_queued_before_the_change_see_the_old_metadata():
    original = dg.get_context()
    dg.set_context(inline_small_ops=False)
    try:
        n = 256
        base = np.arange(n * n, dtype=np.float32).reshape(n, n)
        x = dg.tensor(base)
        before = x + 1           # queued: reads x as [n, n] row-major
        x.t_()
        after = x + 1            # reads x transposed
        np.testing.assert_array_equal(np.asarray(before.tolist()), base + 1)
        np.testing.assert_array_equal(np.asarray(after.tolist()), base.T + 1)

        y = dg.zeros(n * n)
        y.add_(2.0)              # queued write into y's storage
        y.resize_(2 * n * n)     # grows: the write lands before the memory moves
        np.testing.assert_array_equal(np.asarray(y[: n * n].tolist()), np.full(n * n, 2.0))
        z = dg.tensor(base)
        summed = z.sum(dim=1)
        z.unsqueeze_(0).as_strided_((n,), (n + 1,))   # the diagonal
        np.testing.assert_array_equal(np.asarray(summed.tolist()), base.sum(axis=1))
        np.testing.assert_array_equal(np.asarray(z.tolist()), np.diagonal(base))
    finally:
        dg.set_context(original)
