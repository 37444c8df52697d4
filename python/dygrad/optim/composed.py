"""RMSprop, Adagrad, Adamax, NAdam and RAdam as torch.optim 2.13's: each parameter's update is torch's single-tensor
formula (the path torch takes on the CPU with foreach=False), op for op with dygrad's in-place ops, so results
agree with torch's to float rounding (the ops' own rounding is torch's; no fused kernel). State is torch's layout
(a 0-d float32 `step` and the named moments), so state dicts load in either framework. `foreach`, `capturable` and
`fused` are accepted for the signature; `differentiable=True` raises. Where a formula reads a step count or a
product on the host (torch's `_get_value`: RAdam's rectification branch, NAdam's mu product), dygrad reads it too
(a sync, as torch's CPU step is synchronous)."""
from .. import _C
from .._C import Tensor
from ..autograd import no_grad
from .optimizer import Optimizer, state_tensor


def _number(value):
    """torch's _get_value: a Python number from a 0-d tensor (read on the host) or a number."""
    if isinstance(value, Tensor):
        with _C._HostReader("optimizer.step"):
            return value.item()
    return value


def _step_tensor(param, value=0.0):
    return _C.tensor(float(value), dtype=_C.float32, device=param.device)


def _check(name, value, low=0.0):
    if isinstance(value, Tensor) and value.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not low <= value:
        raise ValueError(f"Invalid {name}: {value}")


def _refuse_differentiable(name, differentiable):
    if differentiable:
        raise NotImplementedError(f"{name}: differentiable=True is not supported by dygrad")


def _check_betas(betas):
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")


class _Composed(Optimizer):
    """The step loop: each group's parameters with a gradient, the gradient negated under maximize, then the
    subclass's `_update(p, grad, state, group)`."""

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    grad = p.grad if not group["maximize"] else -p.grad
                    self._update(p, grad, self.state[p], group)
        return loss


class RMSprop(_Composed):
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        _check("learning rate", lr)
        _check("epsilon value", eps)
        _check("momentum value", momentum)
        _check("weight_decay value", weight_decay)
        _check("alpha value", alpha)
        _refuse_differentiable("RMSprop", differentiable)
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                                      weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def _update(self, p, grad, state, group):
        if not state:
            state["step"] = _step_tensor(p)
            state["square_avg"] = state_tensor(_C.zeros_like(p))
            if group["momentum"] > 0:
                state["momentum_buffer"] = state_tensor(_C.zeros_like(p))
            if group["centered"]:
                state["grad_avg"] = state_tensor(_C.zeros_like(p))
        lr, alpha, eps = _number(group["lr"]), group["alpha"], group["eps"]
        state["step"].add_(1)
        if group["weight_decay"] != 0:
            grad = grad.add(p, alpha=group["weight_decay"])
        square_avg = state["square_avg"]
        square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        if group["centered"]:
            grad_avg = state["grad_avg"]
            grad_avg.lerp_(grad, 1 - alpha)
            avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()  # (dygrad/_inplace.py)
        else:
            avg = square_avg.sqrt()
        avg = avg.add_(eps)
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            buf.mul_(group["momentum"]).addcdiv_(grad, avg)
            p.add_(buf, alpha=-lr)
        else:
            p.addcdiv_(grad, avg, value=-lr)


class Adagrad(_Composed):
    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        _check("learning rate", lr)
        _check("lr_decay value", lr_decay)
        _check("weight_decay value", weight_decay)
        _check("initial_accumulator_value value", initial_accumulator_value)
        _check("epsilon value", eps)
        _refuse_differentiable("Adagrad", differentiable)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, fused=fused))
        for group in self.param_groups:  # torch makes Adagrad's state at construction
            for p in group["params"]:
                self._init_state(p, group)

    def _init_state(self, p, group):
        state = self.state[p]
        state["step"] = _step_tensor(p)
        state["sum"] = state_tensor(_C.full_like(p, group["initial_accumulator_value"]))

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            if not self.state[p]:
                self._init_state(p, group)

    def _update(self, p, grad, state, group):
        if not state:
            self._init_state(p, group)
        state["step"].add_(1)
        step = _number(state["step"])
        if group["weight_decay"] != 0:
            grad = grad.add(p, alpha=group["weight_decay"])
        clr = _number(group["lr"]) / (1 + (step - 1) * group["lr_decay"])
        state["sum"].addcmul_(grad, grad, value=1)
        std = state["sum"].sqrt().add_(group["eps"])
        p.addcdiv_(grad, std, value=-clr)


class Adamax(_Composed):
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
                 maximize=False, differentiable=False, capturable=False):
        _check("learning rate", lr)
        _check("epsilon value", eps)
        _check_betas(betas)
        _check("weight_decay value", weight_decay)
        _refuse_differentiable("Adamax", differentiable)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, capturable=capturable))

    def _update(self, p, grad, state, group):
        if not state:
            state["step"] = _step_tensor(p)
            state["exp_avg"] = state_tensor(_C.zeros_like(p))
            state["exp_inf"] = state_tensor(_C.zeros_like(p))
        beta1, beta2 = group["betas"]
        exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
        state["step"].add_(1)
        if group["weight_decay"] != 0:
            grad = grad.add(p, alpha=group["weight_decay"])
        exp_avg.lerp_(grad, 1 - beta1)
        exp_inf.copy_(_C.maximum(exp_inf.mul_(beta2), grad.abs().add_(group["eps"])))
        clr = _number(group["lr"]) / (1 - beta1 ** _number(state["step"]))
        p.addcdiv_(exp_avg, exp_inf, value=-clr)


class NAdam(_Composed):
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        _check("learning rate", lr)
        _check("epsilon value", eps)
        _check_betas(betas)
        _check("weight_decay value", weight_decay)
        _check("momentum_decay value", momentum_decay)
        _refuse_differentiable("NAdam", differentiable)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, p, grad, state, group):
        if not state:
            state["step"] = _step_tensor(p)
            state["mu_product"] = _C.tensor(1.0, dtype=_C.float32, device=p.device)
            state["exp_avg"] = state_tensor(_C.zeros_like(p))
            state["exp_avg_sq"] = state_tensor(_C.zeros_like(p))
        lr, (beta1, beta2), wd = _number(group["lr"]), group["betas"], group["weight_decay"]
        exp_avg, exp_avg_sq, mu_product = state["exp_avg"], state["exp_avg_sq"], state["mu_product"]
        state["step"].add_(1)
        step = _number(state["step"])
        bias_correction2 = 1 - beta2 ** step
        if wd != 0:
            if group["decoupled_weight_decay"]:
                p.mul_(1 - lr * wd)
            else:
                grad = grad.add(p, alpha=wd)
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * group["momentum_decay"])))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * group["momentum_decay"])))
        mu_product.mul_(mu)  # a float32 product, as torch's
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = exp_avg_sq.div(bias_correction2).sqrt()
        product = _number(mu_product)
        denom.add_(group["eps"])
        p.addcdiv_(grad, denom, value=(-lr * (1.0 - mu) / (1.0 - product)))
        p.addcdiv_(exp_avg, denom, value=(-lr * mu_next) / (1.0 - product * mu_next))


class RAdam(_Composed):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
                 *, foreach=None, maximize=False, capturable=False, differentiable=False):
        _check("learning rate", lr)
        _check("epsilon value", eps)
        _check_betas(betas)
        _check("weight_decay value", weight_decay)
        _refuse_differentiable("RAdam", differentiable)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, capturable=capturable,
                                      decoupled_weight_decay=decoupled_weight_decay, differentiable=differentiable))

    def _update(self, p, grad, state, group):
        if not state:
            state["step"] = _step_tensor(p)
            state["exp_avg"] = state_tensor(_C.zeros_like(p))
            state["exp_avg_sq"] = state_tensor(_C.zeros_like(p))
        lr, (beta1, beta2), wd = _number(group["lr"]), group["betas"], group["weight_decay"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        state["step"].add_(1)
        step = _number(state["step"])
        if wd != 0:
            if group["decoupled_weight_decay"]:
                p.mul_(1 - lr * wd)
            else:
                grad = grad.add(p, alpha=wd)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        corrected = exp_avg / bias_correction1
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        if rho_t > 5.0:  # the variance is tractable: the rectified adaptive step
            rect = (((rho_t - 4) * (rho_t - 2) * rho_inf) / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            adaptive = (bias_correction2 ** 0.5) / exp_avg_sq.sqrt().add_(group["eps"])
            p.add_(corrected * lr * adaptive * rect, alpha=-1.0)
        else:
            p.add_(corrected * lr, alpha=-1.0)
