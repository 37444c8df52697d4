"""SGD with momentum, dampening, weight decay, Nesterov and maximize, as torch.optim.SGD (its single-tensor formula,
the path torch takes on the CPU by default and with foreach=False). `foreach` and `fused` are accepted for torch's
signature; dygrad's step is always the fused one.

The update of all parameters of a group with a gradient runs as one multi-tensor Task (dygrad's sgd_step) that reads
lr and {momentum, dampening, weight_decay} from the group's tensors (ParamGroup.step_tensors, optim/optimizer.py), so
a recorded step re-run later follows a scheduler (issue 31, part 4). Each parameter's state is torch's:
`momentum_buffer` (with momentum != 0), so state dicts load in either framework. Whether a buffer has had its first
step (torch's `buf = d_p.clone()`, a host-side `buf is None` branch in torch) is a 0-d bool tensor beside it, read and
set by the Task: a Task recorded at the first step and re-run later continues with the momentum update, as torch's
following steps do. The flags are not state (a loaded or assigned buffer counts as initialized), so state dicts are
unchanged. Parameters the Task cannot take (non-contiguous ones, a gradient of another dtype) take the composed path,
torch's formula op by op. Differences from torch: sparse gradients (torch's single-tensor path takes them) do not
exist in dygrad; weight_decay must be a number (torch also takes a Tensor)."""
from .. import _C
from .._C import Tensor
from ..autograd import no_grad
from .optimizer import Optimizer, bookkeeping_tensor, by_device, required, state_tensor


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *, maximize=False,
                 foreach=None, differentiable=False, fused=None):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
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
        self._initialized = {}  # param -> (its momentum buffer, the 0-d bool the Task reads and sets)

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        with no_grad():
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                if not params:
                    continue
                grads = [p.grad for p in params]
                momentum = group["momentum"] != 0
                if not self._fusable(params, grads, momentum):
                    _composed_sgd(self, params, grads, group)
                    continue
                buffers, initialized = [], []
                if momentum:
                    for p in params:
                        buf, flag = self._buffer_and_flag(p)
                        buffers.append(buf)
                        initialized.append(flag)
                lists = (params, grads, buffers, initialized) if momentum else (params, grads)
                for device, on_device in by_device(*lists).items():
                    lr, hyper = group.step_tensors(_sgd_hyper, device)
                    ps, gs = on_device[:2]
                    bufs, flags = on_device[2:] if momentum else ([], [])
                    _C.sgd_step(ps, gs, bufs, flags, lr=lr, hyper=hyper, nesterov=momentum and group["nesterov"],
                                maximize=group["maximize"])
        return loss

    def _fusable(self, params, grads, momentum):
        """Whether sgd_step takes the group's params: contiguous, with contiguous buffers, each gradient of its
        param's dtype."""
        if not all(p.is_contiguous() and g.dtype == p.dtype for p, g in zip(params, grads)):
            return False
        buffers = [self.state[p].get("momentum_buffer") for p in params] if momentum else []
        return all(b is None or b.is_contiguous() for b in buffers)

    def _buffer_and_flag(self, p):
        """p's momentum buffer and its initialized flag (a 0-d bool the Task reads, then sets): made with a zero
        buffer and a false flag at p's first step, so the Task stores that step's d_p in the buffer (torch's
        `buf = d_p.clone()`). A buffer the state holds that no flag was made for (loaded from a state dict, assigned,
        or written by the composed path) has had its first step. Under meta evaluation (memory.estimate) the flag
        serves that step only, as the state the estimate restores."""
        state = self.state[p]
        buf = state.get("momentum_buffer")
        known = self._initialized.get(p)
        if known is not None and known[0] is buf:
            return known
        first = buf is None
        if first:
            buf = state["momentum_buffer"] = state_tensor(_C.zeros_like(p))
        flag = bookkeeping_tensor(_C.tensor(not first, dtype=_C.bool, device=p.device))
        if not _C._meta_active():
            self._initialized[p] = (buf, flag)
        return buf, flag

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self._initialized = {}  # the loaded buffers have had their first step


def _sgd_hyper(group):
    """The values sgd_step reads from its hyper tensor, in its order."""
    return [group["momentum"], group["dampening"], group["weight_decay"]]


def _composed_sgd(optimizer, params, grads, group):
    """torch.optim.sgd._single_tensor_sgd op for op, for parameters the fused Task cannot take; a Tensor lr is read on
    the host (as torch's Scalar alpha)."""
    lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
    if isinstance(lr, Tensor):
        with _C._HostReader("SGD.step"):
            lr = lr.item()
    for p, g in zip(params, grads):
        d_p = g if not group["maximize"] else -g
        if group["weight_decay"] != 0:
            d_p = d_p.add(p, alpha=group["weight_decay"])
        if momentum != 0:
            # Every write into the buffer and the parameter reads this step's gradient: if it is poisoned (a failed
            # op in this batch), each write is skipped and both keep their values (docs/async-errors.md, "The
            # poisoned-input rule"). buf.mul_() first would run and corrupt the buffer, and p.add_(buf) would apply
            # the old one.
            state = optimizer.state[p]
            buf = state.get("momentum_buffer")
            if buf is None:
                # torch's first step: buf = d_p, into a fresh buffer by copy_.
                buf = state_tensor(_C.zeros_like(p))
                state["momentum_buffer"] = buf
                new_buf = d_p
            else:
                new_buf = (buf * momentum).add_(d_p, alpha=1 - dampening)  # same rounding as in place
            buf.copy_(new_buf)
            d_p = d_p.add(new_buf, alpha=momentum) if group["nesterov"] else new_buf
        p.add_(d_p, alpha=-lr)
