"""The Optimizer base class: parameter groups, per-parameter state, zero_grad and state_dict, as torch.optim.

Devices (docs/devices.md): every state tensor lives on its parameter's device, the step counts too (the fused step
Task increments them on the stream: torch keeps them on the CPU unless fused or capturable), and a group's
hyper-parameter tensors exist once per device its parameters are on. A group may hold parameters of several devices:
the fused steps run once per device (by_device), as torch's foreach and fused steps group their tensors."""
import functools
from collections import OrderedDict, defaultdict
from itertools import chain

from .. import _C
from .._C import Tensor
from ..autograd import no_grad
from ..utils.hooks import RemovableHandle

# torch.optim.optimizer's global step hooks: every optimizer's step runs them (the tuner's script trials record
# each step with one, docs/tune.md)
_global_optimizer_pre_hooks = OrderedDict()
_global_optimizer_post_hooks = OrderedDict()


def register_optimizer_step_pre_hook(hook):
    """hook(optimizer, args, kwargs) -> None or (args, kwargs), called before every optimizer's step."""
    handle = RemovableHandle(_global_optimizer_pre_hooks)
    _global_optimizer_pre_hooks[handle.id] = hook
    return handle


def register_optimizer_step_post_hook(hook):
    """hook(optimizer, args, kwargs) -> None, called after every optimizer's step."""
    handle = RemovableHandle(_global_optimizer_post_hooks)
    _global_optimizer_post_hooks[handle.id] = hook
    return handle


def _with_step_hooks(step):
    """A class's own step, running the global and the instance's hooks around it as torch does: global pre, instance
    pre, step, instance post, global post; `args` includes the optimizer itself (a pre-hook returning (args, kwargs)
    returns it too). As in torch, a step that calls its base class's step runs the hooks at both levels."""
    @functools.wraps(step)
    def hooked(*args, **kwargs):
        self = args[0]
        for pre_hook in chain(_global_optimizer_pre_hooks.values(), self._step_hooks("pre").values()):
            result = pre_hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{pre_hook} must return None or a tuple of (new_args, new_kwargs), but got "
                                       f"{result}.")
                args, kwargs = result
        out = step(*args, **kwargs)
        for post_hook in chain(self._step_hooks("post").values(), _global_optimizer_post_hooks.values()):
            post_hook(self, args, kwargs)
        return out
    hooked._step_hooks_wrapped = True
    return hooked


def state_tensor(tensor):
    """Tags an optimizer state tensor (moments, momentum buffers) for the allocator's memory breakdown and
    returns it (op outputs are counted as activations otherwise)."""
    _C._set_memory_category(tensor, "optimizer_state")
    return tensor


def bookkeeping_tensor(tensor):
    """Tags a small tensor an optimizer keeps beside its state (a group's hyper-parameter tensors, SGD's first-step
    flags) as "other" memory and returns it: neither state proportional to the parameters nor an activation."""
    _C._set_memory_category(tensor, "other")
    return tensor


class _RequiredParameter:
    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def _zero_dim(lr):
    """A 1-element Tensor lr as the 0-d tensor a step Task reads (torch's _to_scalar squeezes it): a view, so a
    scheduler's fill_ of the group's tensor reaches it."""
    return lr if lr.dim() == 0 else lr.reshape(())


def _lr_on(lr, own_lr, device):
    """The lr a step on `device` reads: the group's own tensor there, or the user's Tensor lr (a view of it; copied
    when it is on another device, at each step, so a scheduler's fill_ before the step reaches it, as torch's fused
    step copies it)."""
    if not isinstance(lr, Tensor):
        return own_lr
    lr = _zero_dim(lr)
    return lr if lr.is_cpu and device == "cpu" or str(lr.device) == device else lr.to(device)


def on_device_of(value, param, dtype=None):
    """A state tensor loaded for `param`: a copy of `value` on param's device (cast to `dtype` when given), as torch's
    load_state_dict moves state to its parameter."""
    dtype = value.dtype if dtype is None else dtype
    if value.is_cpu and param.is_cpu or str(value.device) == str(param.device):
        return value.to(dtype, copy=True)
    return value.to(param.device).to(dtype)  # the copy between devices is the copy


def by_device(*lists):
    """Parallel lists split by the device of the first list's tensors: {device name: [list, ...]}, devices in order of
    first appearance (the fused steps take the tensors of one device at a time). All on the CPU: the lists themselves,
    without asking each tensor for its device object."""
    if all(t.is_cpu for t in lists[0]):
        return {"cpu": list(lists)}
    groups = {}
    for items in zip(*lists):
        buckets = groups.setdefault(str(items[0].device), [[] for _ in lists])
        for bucket, item in zip(buckets, items):
            bucket.append(item)
    return groups


class ParamGroup(dict):
    """A parameter group: torch's dict, whose hyper-parameters a fused step Task also reads as tensors when it runs
    (issue 31, part 4): `lr` as a 0-d tensor (the user's own when lr is a Tensor, else the group's float64 one) and
    the optimizer's other values (Adam: betas, eps, weight_decay; SGD: momentum, dampening, weight_decay) as one
    float64 tensor, each once per device the group's parameters are on. Assigning a key (a scheduler, the user)
    writes the tensors on the stream, after everything enqueued before, so a recorded step re-run later sees the new
    values. State dicts hold the plain values, as torch's."""
    __slots__ = ("_lr", "_hyper", "_values_of", "_written")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lr = self._hyper = self._values_of = self._written = None

    def step_tensors(self, values_of, device="cpu"):
        """(lr, hyper) on `device`: made at the first step there from the group's values; `values_of(group)` lists
        the floats. Made under meta evaluation (memory.estimate), they serve that step only: a meta buffer holds no
        values."""
        lr = self["lr"]
        if self._hyper is None or device not in self._hyper:
            written = [float(v) for v in values_of(self)]
            hyper = bookkeeping_tensor(_C.tensor(written, dtype=_C.float64, device=device))
            own_lr = bookkeeping_tensor(_C.tensor(0.0 if isinstance(lr, Tensor) else float(lr), dtype=_C.float64,
                                                  device=device))
            if _C._meta_active():
                return _lr_on(lr, own_lr, device), hyper
            if self._hyper is None:
                self._values_of, self._written, self._hyper, self._lr = values_of, written, {}, {}
            self._hyper[device], self._lr[device] = hyper, own_lr
        return _lr_on(lr, self._lr[device], device), self._hyper[device]

    def _write_lr(self):
        lr = self["lr"]
        if not isinstance(lr, Tensor):  # a tensor lr is read where it is (a scheduler fills it in place)
            with no_grad():
                for own_lr in self._lr.values():
                    own_lr.fill_(float(lr))

    def _write(self, key):
        if self._hyper is None or key == "params":
            return
        if _C._meta_active():  # the write would not reach the buffer: make the tensors again at the next step
            self._hyper = self._lr = None
            return
        if key == "lr":
            self._write_lr()
            return
        values = [float(v) for v in self._values_of(self)]
        with no_grad():
            for i, (old, new) in enumerate(zip(self._written, values)):
                if old != new:  # a nan compares unequal to itself: written again, harmlessly
                    for hyper in self._hyper.values():
                        hyper[i].fill_(new)
        self._written = values

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._write(key)

    def update(self, *args, **kwargs):
        changed = dict(*args, **kwargs)
        super().update(changed)
        for key in changed:
            self._write(key)

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def __reduce__(self):  # copies and pickles hold the values; the tensors are made again at the next step
        return (ParamGroup, (dict(self),))


class Optimizer:
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and callable(step) and not getattr(step, "_step_hooks_wrapped", False):
            cls.step = _with_step_hooks(step)

    def _step_hooks(self, kind):
        name = f"_optimizer_step_{kind}_hooks"
        hooks = self.__dict__.get(name)
        if hooks is None:
            hooks = self.__dict__[name] = OrderedDict()
        return hooks

    def register_step_pre_hook(self, hook):
        """hook(optimizer, args, kwargs) -> None or (args, kwargs), called before this optimizer's step."""
        hooks = self._step_hooks("pre")
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    def register_step_post_hook(self, hook):
        """hook(optimizer, args, kwargs) -> None, called after this optimizer's step."""
        hooks = self._step_hooks("post")
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        self.state = defaultdict(dict)
        self.param_groups = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            "but got " + type(params).__name__)
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group):
        group = ParamGroup(group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is " + type(p).__name__)
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {k}")
            group.setdefault(k, v)
        existing = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in existing for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                main_grad = getattr(p, "main_grad", None)  # dygrad.amp.use_main_grad: an fp32 buffer, zeroed
                if main_grad is not None:
                    with no_grad():
                        main_grad.zero_()
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    with no_grad():
                        p.grad.zero_()

    @staticmethod
    def _closure_loss(closure):
        """torch's `step(closure)`: the closure re-evaluates the loss with grad enabled; None without one."""
        if closure is None:
            return None
        from ..autograd import enable_grad
        with enable_grad():
            return closure()

    def step(self, closure=None):
        raise NotImplementedError

    def state_dict(self):
        index = {}
        packed_groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                if id(p) not in index:
                    index[id(p)] = len(index)
                ids.append(index[id(p)])
            packed["params"] = ids
            packed_groups.append(packed)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p in self.state:
                    state[index[id(p)]] = dict(self.state[p])
        return {"state": state, "param_groups": packed_groups}

    def _load_param_groups(self, groups):
        """A state dict's param_groups checked against this optimizer's (their count and sizes, torch's errors) and
        their hyper-parameters taken; returns the parameters in the state dict's index order."""
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                                 "optimizer's group")
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = v
        return [p for g in self.param_groups for p in g["params"]]

    def load_state_dict(self, state_dict):
        params = self._load_param_groups(state_dict["param_groups"])
        self.state = defaultdict(dict)
        for i, s in state_dict["state"].items():
            p = params[int(i)]
            restored = {}
            for k, v in s.items():
                if not isinstance(v, Tensor):
                    restored[k] = v
                elif k == "step":  # torch keeps step counts float32 whatever the param's dtype
                    restored[k] = on_device_of(v, p)
                elif v.is_floating_point() and v.dtype != p.dtype:  # moments follow the param, as torch casts
                    restored[k] = state_tensor(on_device_of(v, p, p.dtype))
                else:
                    restored[k] = state_tensor(on_device_of(v, p))
            self.state[p] = restored

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        lines.append(")")
        return "\n".join(lines)
