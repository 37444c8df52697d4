"""A leaf's gradient hooks as torch's (issue 32): a leaf gathers the gradients of all its uses (torch's
AccumulateGrad), so its tensor hooks see, and its post-accumulate hooks fire after, the whole gradient once per
backward; `.grad` set from a hook during backward ends as in torch. Each case runs in dygrad and torch 2.13."""
import pytest
import torch

import dygrad as dg


def scenario(lib, name):
    x = lib.tensor([1.0, -2.0], requires_grad=True)
    calls = []
    if name == "used twice, post-accumulate hook":
        x.register_post_accumulate_grad_hook(lambda p: calls.append(p.grad.tolist()))
        (x * 2 + x * 3).sum().backward()
    elif name == "used twice, tensor hook":
        x.register_hook(lambda g: calls.append(g.tolist()))
        (x * 2 + x * 3).sum().backward()
    elif name == "tensor hook replaces the sum":
        x.register_hook(lambda g: g * 10)
        x.register_post_accumulate_grad_hook(lambda p: calls.append(p.grad.tolist()))
        (x * 2 + (x * x)).sum().backward()
    elif name == "tied weight in a chain":  # an embedding and an output head sharing a weight
        w = lib.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
        w.register_post_accumulate_grad_hook(lambda p: calls.append(p.grad.tolist()))
        h = w[lib.tensor([1, 0, 1])]
        (h @ w.t()).pow(2).sum().backward()
        return calls, w.grad.tolist()
    elif name == "accumulates onto an existing grad":
        x.grad = lib.tensor([3.0, 3.0])
        x.register_post_accumulate_grad_hook(lambda p: calls.append(p.grad.tolist()))
        (x * 2 + x * 3).sum().backward()
    elif name == "grad set to None by a hook between the uses":
        x.grad = lib.tensor([3.0, 3.0])
        a = x * 2
        c = a * 1.0
        c.register_hook(lambda g: setattr(x, "grad", None))
        (c + x * 3).sum().backward()
    elif name == "grad set to None by the post-accumulate hook":
        x.grad = lib.tensor([3.0, 3.0])

        def hook(p):
            calls.append(p.grad.tolist())
            p.grad = None

        x.register_post_accumulate_grad_hook(hook)
        (x * 2 + x * 3).sum().backward()
    elif name == "a leaf root and a use":
        y = x * 4
        lib.autograd.backward([x, y], [lib.ones(2), lib.ones(2)])
    elif name == "two backward passes":
        x.register_post_accumulate_grad_hook(lambda p: calls.append(p.grad.tolist()))
        (x * 2 + x).sum().backward()
        (x * x + x).sum().backward()
    elif name == "autograd.grad leaves .grad and post hooks alone":
        x.register_hook(lambda g: calls.append(("hook", g.tolist())))
        x.register_post_accumulate_grad_hook(lambda p: calls.append("post"))
        (g,) = lib.autograd.grad((x * 2 + x * 3).sum(), x)
        calls.append(g.tolist())
    return calls, None if x.grad is None else x.grad.tolist()


CASES = ["used twice, post-accumulate hook", "used twice, tensor hook", "tensor hook replaces the sum",
         "tied weight in a chain", "accumulates onto an existing grad", "grad set to None by a hook between the uses",
         "grad set to None by the post-accumulate hook", "a leaf root and a use", "two backward passes",
         "autograd.grad leaves .grad and post hooks alone"]


@pytest.mark.parametrize("name", CASES)
def test_leaf_hooks_match_torch(name):
    assert scenario(dg, name) == scenario(torch, name)
