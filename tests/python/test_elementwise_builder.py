"""The elementwise builder's forms and rules (src/dygrad/ops/elementwise_call.h), checked against torch 2.13:
errors name what the user called, in-place casting and broadcasting rules, out=, output layout."""
import pytest
import torch

import dygrad as dg


def raised(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e), str(e)
    return None, None


def test_errors_name_the_function_the_user_called():
    x = dg.ones(3, requires_grad=True)
    kind, message = raised(lambda: dg.ones(2, 3) - dg.ones(4))
    assert kind is ValueError and message.startswith("[sub] shapes (2, 3) and (4,)")
    kind, message = raised(lambda: x.__iadd__(1))
    assert kind is RuntimeError and message.startswith("[Tensor.__iadd__] a leaf Variable")
    kind, message = raised(lambda: x.add_(dg.ones(3)))
    assert message.startswith("[add_] a leaf Variable")
    y = dg.ones(3)
    for dunder, op in [("__iadd__", "+="), ("__isub__", "-="), ("__imul__", "*="), ("__itruediv__", "/=")]:
        kind, message = raised(lambda d=dunder: getattr(y, d)(dg.ones(2, 3)))
        assert kind is RuntimeError and message.startswith(f"[Tensor.{dunder}] output with shape (3,)"), (op, message)
    kind, message = raised(lambda: dg.ones(2, 3).sub_(dg.ones(4)))
    assert message.startswith("[sub_]")


@pytest.mark.parametrize("case", [
    lambda m: m.ones(3).__iadd__(m.ones(2, 3)),                         # broadcast past self's shape
    lambda m: m.ones(3, dtype=m.int64).__iadd__(0.5),                   # float result into int64
    lambda m: m.tensor([True]).__iadd__(1),                             # int result into bool
    lambda m: m.ones(1).expand(3).add_(1),                              # overlapping memory written
    lambda m: m.ones(3, dtype=m.int64).div_(2),                         # true division into int64
    lambda m: m.ones(1).expand(3).mul_(m.ones(3)),
], ids=["broadcast", "float-into-int", "int-into-bool", "overlap", "div-into-int", "overlap-tensor"])
def test_inplace_rules_raise_as_torch_does(case):
    expected, _ = raised(lambda: case(torch))
    got, message = raised(lambda: case(dg))
    assert expected is RuntimeError and got is RuntimeError, message


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("other", ["tensor", "scalar"])
@pytest.mark.parametrize("out_dtype", ["float32", "float64"])
def test_out_writes_and_returns_out(name, other, out_dtype):
    a = [[1.5, -2.0, 3.0], [0.25, 4.0, -1.0]]
    b = [2.0, -0.5, 4.0] if other == "tensor" else 3
    def run(m):
        x = m.tensor(a)
        y = m.tensor(b) if other == "tensor" else b
        out = m.zeros(2, 3, dtype=getattr(m, out_dtype))
        result = getattr(m, name)(x, y, out=out)
        assert result is out
        return out
    theirs, ours = run(torch), run(dg)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    assert ours.flatten().tolist() == pytest.approx(theirs.flatten().tolist())


def test_out_with_an_integer_result_cast_into_a_float_out():
    out = dg.zeros(3)
    dg.add(dg.tensor([1, 2, 3]), dg.tensor([4, 5, 6]), out=out)
    ref = torch.zeros(3)
    torch.add(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]), out=ref)
    assert out.dtype == dg.float32 and out.tolist() == ref.tolist()


def test_out_may_alias_an_input():
    a = dg.tensor([1.0, 2.0, 3.0])
    dg.mul(a, 2, out=a)
    assert a.tolist() == [2.0, 4.0, 6.0]


@pytest.mark.parametrize("case", [
    lambda m: m.div(m.ones(3), 2, out=m.zeros(3, dtype=m.int64)),
    lambda m: m.add(m.ones(3, requires_grad=True), 1, out=m.zeros(3)),
], ids=["float-into-int", "autograd"])
def test_out_refusals_match_torch(case):
    expected, _ = raised(lambda: case(torch))
    got, message = raised(lambda: case(dg))
    assert expected is RuntimeError and got is RuntimeError, message


def test_out_of_the_wrong_shape_is_refused_not_resized():
    # A documented difference (docs/ops.md): torch resizes out with a deprecation warning; dygrad refuses.
    kind, message = raised(lambda: dg.add(dg.ones(3), 1, out=dg.zeros(2)))
    assert kind is RuntimeError and "does not resize out=" in message


@pytest.mark.parametrize("op", [
    lambda m, x: -x,
    lambda m, x: x < 0.5,
    lambda m, x: m.where(x > 0, x, 0.0),
    lambda m, x: x.clamp(-0.5, 0.5),
    lambda m, x: x ** 2,
    lambda m, x: m.maximum(x, x * 2),
    lambda m, x: m.logical_not(x > 0),
    lambda m, x: x.masked_fill(x > 0, 1.0),
], ids=["neg", "lt", "where", "clamp", "pow", "maximum", "logical_not", "masked_fill"])
def test_outputs_follow_the_layout_of_their_inputs(op):
    values = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) / 10 - 1
    ours = op(dg, dg.tensor(values.tolist()).permute(2, 0, 1))
    theirs = op(torch, values.permute(2, 0, 1))
    assert tuple(ours.stride()) == theirs.stride()
    assert ours.tolist() == theirs.tolist()
