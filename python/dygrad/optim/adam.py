"""Adam and AdamW with torch.optim's signatures, defaults, state and update formulas (AdamW is Adam with
decoupled weight decay, as in torch 2.13). Each parameter's state is torch's: `step` (a 0-d float32 tensor),
`exp_avg`, `exp_avg_sq` (and `max_exp_avg_sq` with amsgrad), so state dicts load in either framework.

The update of all parameters of a group runs as one multi-tensor Task (dygrad's adamw_step), which also
increments every `step` tensor on the stream: no host-side count, no sync. `foreach` and `fused` are accepted
for torch's signature; dygrad's step is always the fused one. amsgrad (and parameters the Task cannot take:
non-contiguous ones) take the composed path, torch's single-tensor formula op by op.

dygrad extension (torch has none built in; Megatron-LM's mixed-precision optimizer is the reference):
a parameter group with `"master_weights": True` (a group key, so the constructors keep torch's signatures:
`AdamW([{"params": model.parameters(), "master_weights": True}], lr=...)`) keeps, for every bfloat16 / float16
parameter, a float32 master copy (state["master_param"])
and float32 moments; the step reads the parameter's float32 `main_grad` when it has one (dygrad.amp.use_main_grad)
and its 16-bit `.grad` otherwise, updates the master in float32 and writes it, rounded once, into the parameter:
one adamw_step Task for the group. float32 parameters of the same group take the plain update. See
docs/mixed-precision.md."""
import math

from .. import _C
from .._C import Tensor
from ..autograd import no_grad
from .optimizer import Optimizer, by_device, state_tensor


def _step_tensor(param, value=0.0):
    """A parameter's step count: a 0-d float32 tensor on its device (the fused step increments it there)."""
    return _C.tensor(float(value), dtype=_C.float32, device=param.device)


class Adam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable:
            raise NotImplementedError(f"{type(self).__name__}: differentiable=True is not supported by dygrad")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group.setdefault("decoupled_weight_decay", isinstance(self, AdamW))
            for p in group["params"]:
                state = self.state.get(p)
                if state and not isinstance(state["step"], Tensor):  # a count saved as a number
                    state["step"] = _step_tensor(p, state["step"])

    def _init_group(self, group):
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = [], [], [], [], [], []
        for p in group["params"]:
            if p.grad is None or (group.get("master_weights") and p.dtype in (_C.bfloat16, _C.float16)):
                continue
            state = self.state[p]
            if not state:
                state["step"] = _step_tensor(p)
                state["exp_avg"] = state_tensor(_C.zeros_like(p))
                state["exp_avg_sq"] = state_tensor(_C.zeros_like(p))
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = state_tensor(_C.zeros_like(p))
            params.append(p)
            grads.append(-p.grad if group["maximize"] else p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            if group["amsgrad"]:
                max_exp_avg_sqs.append(state["max_exp_avg_sq"])
            steps.append(state["step"])
        return params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps

    def _master_group(self, group):
        """The 16-bit params of a master_weights group with a gradient (main_grad first): (masters, grads, m, v,
        steps, model params); the float32 ones are left to the plain path."""
        masters, grads, exp_avgs, exp_avg_sqs, steps, low = [], [], [], [], [], []
        for p in group["params"]:
            if p.dtype not in (_C.bfloat16, _C.float16):
                continue
            g = getattr(p, "main_grad", None)
            if g is None:
                g = p.grad
            if g is None:
                continue
            state = self.state[p]
            if not state:
                state["step"] = _step_tensor(p)
                state["master_param"] = state_tensor(p.detach().to(_C.float32, copy=True))
                state["exp_avg"] = state_tensor(_C.zeros_like(state["master_param"]))
                state["exp_avg_sq"] = state_tensor(_C.zeros_like(state["master_param"]))
            masters.append(state["master_param"])
            grads.append(-g if group["maximize"] else g)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
            low.append(p)
        return masters, grads, exp_avgs, exp_avg_sqs, steps, low

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        with no_grad():
            for group in self.param_groups:
                if group.get("master_weights"):
                    if group["amsgrad"]:
                        raise NotImplementedError(f"{type(self).__name__}: master_weights with amsgrad is not "
                                                  "supported by dygrad")
                    masters, grads, exp_avgs, exp_avg_sqs, steps, low = self._master_group(group)
                    for device, lists in (by_device(masters, grads, exp_avgs, exp_avg_sqs, steps, low).items()
                                          if masters else ()):
                        lr, hyper = group.step_tensors(_adam_hyper, device)
                        _C.adamw_step(*lists[:5], lr=lr, hyper=hyper,
                                      decoupled_weight_decay=group["decoupled_weight_decay"], model_params=lists[5])
                params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = self._init_group(group)
                if not params:
                    continue
                if not group["amsgrad"] and all(p.is_contiguous() for p in params):
                    for device, lists in by_device(params, grads, exp_avgs, exp_avg_sqs, steps).items():
                        lr, hyper = group.step_tensors(_adam_hyper, device)
                        _C.adamw_step(*lists, lr=lr, hyper=hyper,
                                      decoupled_weight_decay=group["decoupled_weight_decay"])
                    continue
                _composed_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, group)
        return loss


def _adam_hyper(group):
    """The values adamw_step reads from its hyper tensor, in its order."""
    beta1, beta2 = group["betas"]
    return [beta1, beta2, group["eps"], group["weight_decay"]]


def _composed_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, group):
    """torch.optim.adam._single_tensor_adam (capturable=False), op for op: the step count (and a tensor lr, as torch's
    _to_scalar) is read on the host."""
    lr, (beta1, beta2), eps, weight_decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
    if isinstance(lr, Tensor):
        with _C._HostReader("Adam.step"):
            lr = lr.item()
    for i, (p, g, m, v, step_t) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs, steps)):
        # New values out of place, then one copy_ each: every write into p, m, v reads the gradient, so a
        # poisoned gradient leaves all three unchanged (docs/async-errors.md, "The poisoned-input rule"); the
        # same kernels and rounding as torch's in-place chain. (The step count is bumped regardless.)
        step_t.add_(1)
        p_new = p
        if weight_decay != 0:
            if group["decoupled_weight_decay"]:
                p_new = p * (1 - lr * weight_decay)
            else:
                g = g.add(p, alpha=weight_decay)
        if 1 - beta1 < 0.5:  # torch's lerp_(g, 1 - beta1), which picks its formula by the weight
            m_new = m.add(g - m, alpha=1 - beta1)
        else:
            m_new = g - (g - m) * beta1
        v_new = (v * beta2).add_(g * (1 - beta2) * g)  # addcmul_(g, g, value=1 - beta2)
        with _C._HostReader("Adam.step"):  # a host read the op sinks see as the optimizer's, at the user's line
            step = step_t.item()
        bias_correction1 = 1 - beta1 ** step
        bias_correction2_sqrt = math.sqrt(1 - beta2 ** step)
        v_denominator = v_new
        if group["amsgrad"]:
            max_new = _C.maximum(max_exp_avg_sqs[i], v_new)
            max_exp_avg_sqs[i].copy_(max_new)
            v_denominator = max_new
        denom = (_C.sqrt(v_denominator) / bias_correction2_sqrt).add_(eps)
        p_new = p_new.add(m_new * (-lr / bias_correction1) / denom)  # addcdiv_(m, denom, value=-step_size)
        m.copy_(m_new)
        v.copy_(v_new)
        p.copy_(p_new)


class AdamW(Adam):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
