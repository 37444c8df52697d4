"""AdamW with torch.optim.AdamW's defaults and update formula. The update of all parameters of a group runs
as one fused multi-tensor Task (dygrad's adamw_step kernel) when it is available."""
import math

from .. import _C
from ..autograd import no_grad
from .optimizer import Optimizer, state_tensor


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, fused=None):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameters: {betas}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if amsgrad:
            raise NotImplementedError("AdamW: amsgrad is not supported yet")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize))
        self.fused = hasattr(_C, "adamw_step") if fused is None else fused

    def step(self, closure=None):
        loss = None
        if closure is not None:
            from ..autograd import enable_grad
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                params, grads, exp_avgs, exp_avg_sqs = [], [], [], []
                step = None
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["step"] = 0
                        state["exp_avg"] = state_tensor(_C.zeros_like(p))
                        state["exp_avg_sq"] = state_tensor(_C.zeros_like(p))
                    state["step"] += 1
                    step = state["step"]
                    params.append(p)
                    grads.append(-p.grad if group["maximize"] else p.grad)
                    exp_avgs.append(state["exp_avg"])
                    exp_avg_sqs.append(state["exp_avg_sq"])
                if not params:
                    continue
                beta1, beta2 = group["betas"]
                if self.fused:
                    _C.adamw_step(params, grads, exp_avgs, exp_avg_sqs, step, lr=group["lr"], beta1=beta1,
                                  beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"])
                    continue
                bias1 = 1 - beta1 ** step
                bias2_sqrt = math.sqrt(1 - beta2 ** step)
                step_size = group["lr"] / bias1
                for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
                    # New values out of place, then one copy_ each: every write into p, m, v reads the
                    # gradient, so a poisoned gradient leaves all three unchanged (docs/async-errors.md,
                    # "The poisoned-input rule"). Same kernels and rounding as the in-place chain.
                    m_new = (m * beta1).add_(g, alpha=1 - beta1)
                    v_new = (v * beta2).add_(g * g, alpha=1 - beta2)
                    denom = (_C.sqrt(v_new) / bias2_sqrt).add_(group["eps"])
                    p_new = (p * (1 - group["lr"] * group["weight_decay"])).add_(m_new / denom, alpha=-step_size)
                    m.copy_(m_new)
                    v.copy_(v_new)
                    p.copy_(p_new)
        return loss
