"""SGD with momentum, dampening, weight decay and Nesterov, as torch.optim.SGD (single-tensor formula,
composed of in-place ops; `foreach` and `fused` are accepted for torch's signature)."""
from .. import _C
from ..autograd import no_grad
from .optimizer import Optimizer, required, state_tensor


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *, maximize=False,
                 foreach=None, differentiable=False, fused=None):
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable:
            raise NotImplementedError("SGD: differentiable=True is not supported by dygrad")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        with no_grad():
            for group in self.param_groups:
                lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    d_p = p.grad if not group["maximize"] else -p.grad
                    if group["weight_decay"] != 0:
                        d_p = d_p.add(p, alpha=group["weight_decay"])
                    if momentum != 0:
                        # Every write into the buffer and the parameter reads this step's gradient: if it is
                        # poisoned (a failed op in this batch), each write is skipped and both keep their
                        # values (docs/async-errors.md, "The poisoned-input rule"). buf.mul_() first would
                        # run and corrupt the buffer, and p.add_(buf) would apply the old one.
                        state = self.state[p]
                        buf = state.get("momentum_buffer")
                        if buf is None:
                            # torch's first step: buf = d_p. A fresh buffer filled by copy_, so a failed first
                            # step leaves zeros (0 * momentum + d_p == d_p next time) and no poisoned state.
                            buf = state_tensor(_C.zeros_like(p))
                            state["momentum_buffer"] = buf
                            new_buf = d_p
                        else:
                            new_buf = (buf * momentum).add_(d_p, alpha=1 - dampening)  # same rounding as in place
                        buf.copy_(new_buf)
                        d_p = d_p.add(new_buf, alpha=momentum) if group["nesterov"] else new_buf
                    p.add_(d_p, alpha=-lr)
        return loss
