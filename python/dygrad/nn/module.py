"""nn.Module: attribute registration of parameters, buffers and submodules, traversal, train/eval, and
state_dict/load_state_dict with the same keys PyTorch produces."""
import functools
import warnings
from collections import OrderedDict, namedtuple

from .. import _C
from .._C import Tensor
from .._probes import device as _device
from ..autograd import no_grad
from ..utils.hooks import RemovableHandle
from .parameter import Buffer, Parameter
from ..profiler import _scopes
from ..profiler._scopes import TRACKING as _SCOPE_TRACKING

_HOOK_STORES = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs",
                "_forward_hooks_always_called", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
                "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")

_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])
# The state_dict key of a module's extra state (what an overridden get_extra_state returns), after its prefix.
_EXTRA_STATE_KEY_SUFFIX = "_extra_state"


class Module:
    training: bool

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", OrderedDict())
        for store in _HOOK_STORES:
            object.__setattr__(self, store, OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        if _SCOPE_TRACKING[0]:  # a profile(with_modules=True) records: per-module costs (profiler/_scopes.py)
            return _scopes.call(self, args, kwargs)
        d = self.__dict__
        try:
            hooked = d["_forward_pre_hooks"] or d["_forward_hooks"] or d["_backward_hooks"] or d["_backward_pre_hooks"]
        except KeyError:  # a module pickled before the hook stores existed
            hooked = False
        if not hooked:
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def _call_unscoped(self, *args, **kwargs):
        """__call__ without the profiler's module scope (what _scopes.call runs inside the scope)."""
        d = self.__dict__
        try:
            hooked = d["_forward_pre_hooks"] or d["_forward_hooks"] or d["_backward_hooks"] or d["_backward_pre_hooks"]
        except KeyError:
            hooked = False
        if not hooked:
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def __setstate__(self, state):
        self.__dict__.update(state)
        for store in _HOOK_STORES:  # modules pickled by an older dygrad lack them
            if store not in self.__dict__:
                object.__setattr__(self, store, OrderedDict())

    def _call_with_hooks(self, args, kwargs):
        """torch's Module._call_impl: forward pre-hooks, the backward hooks' identity views of the inputs,
        forward, forward hooks (always_call ones also when forward raised), then the outputs' views."""
        for hook_id, hook in list(self._forward_pre_hooks.items()):
            if hook_id in self._forward_pre_hooks_with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    if isinstance(result, tuple) and len(result) == 2:
                        args, kwargs = result
                    else:
                        raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                           f"but got {result}.")
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        backward_hook = None
        if self._backward_hooks or self._backward_pre_hooks:
            backward_hook = _BackwardHook(self, list(self._backward_hooks.values()),
                                          list(self._backward_pre_hooks.values()))
            args = backward_hook.setup_input_hook(args)
        called = set()
        try:
            result = self.forward(*args, **kwargs)
            for hook_id, hook in list(self._forward_hooks.items()):
                called.add(hook_id)
                if hook_id in self._forward_hooks_with_kwargs:
                    hook_result = hook(self, args, kwargs, result)
                else:
                    hook_result = hook(self, args, result)
                if hook_result is not None:
                    result = hook_result
        except Exception:
            for hook_id, hook in list(self._forward_hooks.items()):
                if hook_id in self._forward_hooks_always_called and hook_id not in called:
                    try:
                        if hook_id in self._forward_hooks_with_kwargs:
                            hook(self, args, kwargs, None)
                        else:
                            hook(self, args, None)
                    except Exception as e:
                        warnings.warn(f"forward hook with always_call=True raised an exception that was ignored: {e!r}")
            raise
        if backward_hook is not None:
            result = backward_hook.setup_output_hook(result)
        return result

    def recompute(self, mode=True, policy=None, **kwargs):
        """MindSpore's Cell.recompute(): with mode True the module's forward runs under
        dygrad.utils.checkpoint.checkpoint (non-reentrant; its activations are recomputed in backward),
        with False it runs plainly again. `policy` (a policy function or a list of dg.ops handles, e.g.
        dygrad.utils.checkpoint.policies.memory_bound) makes it selective: what the policy saves is kept.
        MindSpore's communication options (kwargs) have no effect here. Returns the module."""
        if mode:
            object.__setattr__(self, "forward", functools.partial(_recompute_forward, self, policy))
        else:
            self.__dict__.pop("forward", None)
        return self

    # --- hooks -----------------------------------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        handle = RemovableHandle(self._forward_pre_hooks, extra_dict=self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        handle = RemovableHandle(self._forward_hooks,
                                 extra_dict=[self._forward_hooks_with_kwargs, self._forward_hooks_always_called])
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_hook(self, hook, prepend=False):
        """hook(module, grad_input, grad_output) -> None or a replacement grad_input, once the gradients of the
        module's positional Tensor inputs are computed (tuples, None where an input needs no gradient)."""
        handle = RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        if prepend:
            self._backward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """hook(module, grad_output) -> None or a replacement grad_output, before the module's backward runs."""
        handle = RemovableHandle(self._backward_pre_hooks)
        self._backward_pre_hooks[handle.id] = hook
        if prepend:
            self._backward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_backward_hook(self, hook):
        raise NotImplementedError("register_backward_hook (the deprecated non-full form) is not supported: use "
                                  "register_full_backward_hook")

    def _register_state_dict_hook(self, hook):
        """hook(module, state_dict, prefix, local_metadata), after this module's entries; may return a new dict."""
        handle = RemovableHandle(self._state_dict_hooks)
        self._state_dict_hooks[handle.id] = hook
        return handle

    def register_state_dict_post_hook(self, hook):
        hook._from_public_api = True
        return self._register_state_dict_hook(hook)

    def register_state_dict_pre_hook(self, hook):
        """hook(module, prefix, keep_vars), before state_dict collects this module's entries."""
        handle = RemovableHandle(self._state_dict_pre_hooks)
        self._state_dict_pre_hooks[handle.id] = hook
        return handle

    def _register_load_state_dict_pre_hook(self, hook, with_module=False):
        handle = RemovableHandle(self._load_state_dict_pre_hooks)
        self._load_state_dict_pre_hooks[handle.id] = functools.partial(hook, self) if with_module else hook
        return handle

    def register_load_state_dict_pre_hook(self, hook):
        """hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def register_load_state_dict_post_hook(self, hook):
        """hook(module, incompatible_keys) -> None; may edit incompatible_keys' lists in place."""
        handle = RemovableHandle(self._load_state_dict_post_hooks)
        self._load_state_dict_post_hooks[handle.id] = hook
        return handle

    # --- registration ------------------------------------------------------------------------------------
    def _check_ready(self):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign to a Module before Module.__init__() call")

    def register_parameter(self, name, param):
        self._check_ready()
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f'parameter name must be a non-empty string without ".", got {name!r}')
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(dygrad.nn.Parameter or None required)")
        if param is not None and hasattr(_C, "_set_memory_category"):
            _C._set_memory_category(param, "parameter")  # for the memory breakdown
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        self._check_ready()
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f'buffer name must be a non-empty string without ".", got {name!r}')
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(dygrad.Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        self._check_ready()
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str) or "." in name or not name:
            raise KeyError(f'module name must be a non-empty string without ".", got {name!r}')
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name, value):
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self.__dict__.pop(name, None)
            self._buffers.pop(name, None)
            self._modules.pop(name, None)
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(dygrad.nn.Parameter or None expected)")
            self.register_parameter(name, value)
            return
        modules = self.__dict__.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self.__dict__.pop(name, None)
            params.pop(name, None)
            self._buffers.pop(name, None)
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(dygrad.nn.Module or None expected)")
            modules[name] = value
            return
        buffers = self.__dict__.get("_buffers")
        if isinstance(value, Buffer):  # nn.Buffer: registered as a buffer, persistent or not as it says
            if buffers is None:
                raise AttributeError("cannot assign buffer before Module.__init__() call")
            self.__dict__.pop(name, None)
            params.pop(name, None)
            modules.pop(name, None)
            self.register_buffer(name, value, value.persistent)
            return
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(dygrad.Tensor or None expected)")
            buffers[name] = value
            return
        object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))

    # --- traversal -------------------------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, get_members, prefix="", recurse=True, remove_duplicate=True):
        seen = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in get_members(module):
                if value is None:
                    continue
                if remove_duplicate:
                    if id(value) in seen:
                        continue
                    seen.add(id(value))
                yield module_prefix + ("." if module_prefix else "") + name, value

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target):
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def get_parameter(self, target):
        module_path, _, param_name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, param_name):
            raise AttributeError(mod._get_name() + " has no attribute `" + param_name + "`")
        param = getattr(mod, param_name)
        if not isinstance(param, Parameter):
            raise AttributeError("`" + param_name + "` is not an nn.Parameter")
        return param

    def get_buffer(self, target):
        module_path, _, buffer_name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, buffer_name):
            raise AttributeError(mod._get_name() + " has no attribute `" + buffer_name + "`")
        if buffer_name not in mod._buffers:
            raise AttributeError("`" + buffer_name + "` is not a buffer")
        return getattr(mod, buffer_name)

    def _get_name(self):
        return type(self).__name__

    def apply(self, fn):
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # --- modes ---------------------------------------------------------------------------------------------
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        object.__setattr__(self, "training", mode)
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def _apply_to_tensors(self, fn):
        """Replaces every parameter's and buffer's data with fn(data) (the Parameter objects stay the same)."""
        with no_grad():
            for module in self.modules():
                for p in module._parameters.values():
                    if p is not None:
                        p.data = fn(p.data)
                        _C._set_memory_category(p, "parameter")  # new storage: an op output until tagged
                        if p.grad is not None:
                            p.grad = fn(p.grad)
                            _C._set_memory_category(p.grad, "gradient")
                for name, b in module._buffers.items():
                    if b is not None:
                        module._buffers[name] = fn(b)
        return self

    def to(self, *args, dtype=None, **kwargs):
        """module.to(device), .to(dtype), .to(device, dtype), .to(tensor), as torch: floating and complex parameters and
        buffers take the dtype (a complex buffer cast to a real dtype keeps its real part, as torch's does: a LLaMA
        freqs_cis buffer does not survive .to(torch.bfloat16)), every parameter and buffer (and gradient) the device;
        the Parameter objects stay the same."""
        kwargs.pop("non_blocking", None)
        kwargs.pop("memory_format", None)
        device = kwargs.pop("device", None)
        if kwargs:
            raise TypeError(f"to() got an unexpected keyword argument '{next(iter(kwargs))}'")
        for a in args:
            if isinstance(a, _C.dtype):
                dtype = a
            elif isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, bool):  # non_blocking given by position
                continue
            else:
                device = a
        if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired dtype={dtype}")
        if dtype is not None and dtype.is_complex:
            warnings.warn("Complex modules are a new feature under active development whose design may change, and "
                          "some modules might not work as expected when using complex tensors as parameters or "
                          "buffers.", stacklevel=2)
        if device is not None:
            device = _device(device)
            if device.type not in ("cpu", "test", "cuda"):
                raise NotImplementedError(f"Module.to: device {device!r} is not available")
        if dtype is None and device is None:
            return self

        def convert(t):
            if dtype is not None and (t.is_floating_point() or t.is_complex()):
                t = t.to(dtype)
            return t if device is None else t.to(device)
        return self._apply_to_tensors(convert)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        """Moves every parameter and buffer to the GPU, as Tensor.cuda (raises, as torch does, without one)."""
        from .. import cuda
        if not cuda._built():
            raise RuntimeError("[Module.cuda] dygrad was built without the cuda backend (dygrad.cuda.is_available() "
                               "is False)")
        return self.to(cuda._device(device))

    def type(self, dst_type):
        """Casts every parameter and buffer to dst_type (torch's Module.type: integer ones too)."""
        return self._apply_to_tensors(lambda t: t.to(dst_type))

    # double/float/half/bfloat16 cast the floating tensors only (complex ones stay), unlike to(dtype): torch's rule.
    def double(self):
        return self._apply_to_tensors(lambda t: t.to(_C.float64) if t.is_floating_point() else t)

    def float(self):
        return self._apply_to_tensors(lambda t: t.to(_C.float32) if t.is_floating_point() else t)

    def half(self):
        return self._apply_to_tensors(lambda t: t.to(_C.float16) if t.is_floating_point() else t)

    def bfloat16(self):
        return self._apply_to_tensors(lambda t: t.to(_C.bfloat16) if t.is_floating_point() else t)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                with no_grad():
                    p.grad.zero_()

    # --- state -----------------------------------------------------------------------------------------------
    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        if args:  # torch's deprecated positional form: (destination, prefix, keep_vars)
            destination = args[0]
            if len(args) > 1:
                prefix = args[1]
            if len(args) > 2:
                keep_vars = args[2]
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        local_metadata = dict(version=getattr(self, "_version", 1))
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            hook_result = hook(self, destination, prefix, local_metadata)
            if getattr(hook, "_from_public_api", False):
                if hook_result is not None:
                    raise RuntimeError("state_dict post-hook must return None")
            elif hook_result is not None:
                destination = hook_result
        return destination

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()
        if type(self).get_extra_state is not Module.get_extra_state:
            destination[prefix + _EXTRA_STATE_KEY_SUFFIX] = self.get_extra_state()

    def get_extra_state(self):
        """Extra state (any picklable object) a subclass saves in its state_dict by overriding this."""
        raise RuntimeError("Reached a code path in Module.get_extra_state() that should never be called. Please file an "
                           "issue at https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml to report "
                           "this bug.")

    def set_extra_state(self, state):
        """Restores what get_extra_state returned (a subclass overrides both)."""
        raise RuntimeError("Reached a code path in Module.set_extra_state() that should never be called. Please file an "
                           "issue at https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml to report "
                           "this bug.")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        for hook in self._load_state_dict_pre_hooks.values():
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        persistent = {k: v for k, v in self._buffers.items() if k not in self._non_persistent_buffers_set}
        local_state = {k: v for k, v in list(self._parameters.items()) + list(persistent.items()) if v is not None}
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name, target in local_state.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                value = _C.tensor(value, dtype=target.dtype)
            if tuple(value.shape) != tuple(target.shape):
                error_msgs.append(f"size mismatch for {key}: copying a param with shape {tuple(value.shape)} from "
                                  f"checkpoint, the shape in current model is {tuple(target.shape)}.")
                continue
            if assign and name in self._parameters and not isinstance(value, Parameter):
                setattr(self, name, Parameter(value.detach(), requires_grad=target.requires_grad))
            elif assign and name in self._buffers:
                self._buffers[name] = value
            else:
                with no_grad():
                    target.copy_(value)
        extra_state_key = prefix + _EXTRA_STATE_KEY_SUFFIX
        if type(self).set_extra_state is not Module.set_extra_state:
            if extra_state_key in state_dict:
                self.set_extra_state(state_dict[extra_state_key])
            elif strict:
                missing_keys.append(extra_state_key)
        elif strict and extra_state_key in state_dict:
            unexpected_keys.append(extra_state_key)
        if strict:
            for key in state_dict.keys():
                if key.startswith(prefix) and key != extra_state_key:
                    input_name = key[len(prefix):].split(".", 1)
                    if input_name[0] not in self._modules and input_name[0] not in local_state:
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        if not hasattr(state_dict, "items"):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict).__name__}.")
        missing_keys, unexpected_keys, error_msgs = [], [], []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata

        def load(module, local_state_dict, prefix=""):
            local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
            if assign:
                local_metadata["assign_to_params_buffers"] = assign
            module._load_from_state_dict(local_state_dict, prefix, local_metadata, True, missing_keys,
                                         unexpected_keys, error_msgs)
            for name, child in module._modules.items():
                if child is not None:
                    child_prefix = prefix + name + "."
                    child_state_dict = {k: v for k, v in local_state_dict.items() if k.startswith(child_prefix)}
                    load(child, child_state_dict, child_prefix)
            incompatible = _IncompatibleKeys(missing_keys, unexpected_keys)
            for hook in module._load_state_dict_post_hooks.values():
                if hook(module, incompatible) is not None:
                    raise RuntimeError("load_state_dict post-hook must return None")

        load(self, state_dict)
        if strict:
            if unexpected_keys:
                error_msgs.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected_keys)
                                  + ". ")
            if missing_keys:
                error_msgs.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing_keys) + ". ")
        if error_msgs:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(error_msgs))
        return _IncompatibleKeys(missing_keys, unexpected_keys)

    # --- printing --------------------------------------------------------------------------------------------
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, module in self._modules.items():
            body = repr(module).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        main = type(self).__name__ + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


class _BackwardHook:
    """Full backward (pre-)hooks of one module call, as torch.utils.hooks.BackwardHook: the positional Tensor
    inputs and the Tensor outputs pass through identity views whose gradient hooks see (and may replace) the
    gradients. Once every output that needs one has its gradient, the pre-hooks run with grad_output; once every
    input that needs one has its gradient, the hooks run with (grad_input, grad_output). Difference from torch,
    whose single identity node sees all of them at once: with several inputs (outputs) that need gradients, a
    hook may not replace grad_input (grad_output): the earlier ones have already gone on (NotImplementedError)."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module = module
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.n_inputs = 0
        self.input_index = []
        self.grad_inputs = {}
        self.n_outputs = 0
        self.output_index = []
        self.grad_outputs = {}
        self.packed_grad_outputs = None

    @staticmethod
    def _identity(t):
        return t.view(tuple(t.shape))

    def setup_input_hook(self, args):
        self.n_inputs = len(args)
        if not _C.is_grad_enabled():
            return args
        new_args = list(args)
        for i, a in enumerate(args):
            if isinstance(a, Tensor) and a.requires_grad:
                new_args[i] = self._identity(a)
                new_args[i].register_hook(self._make_input_hook(i))
                self.input_index.append(i)
        return tuple(new_args)

    def setup_output_hook(self, result):
        single = isinstance(result, Tensor)
        outputs = (result,) if single else result
        if not isinstance(outputs, tuple) or not _C.is_grad_enabled():
            return result
        self.n_outputs = len(outputs)
        new_outputs = list(outputs)
        for j, o in enumerate(outputs):
            if isinstance(o, Tensor) and o.requires_grad:
                new_outputs[j] = self._identity(o)
                new_outputs[j].register_hook(self._make_output_hook(j))
                self.output_index.append(j)
        return new_outputs[0] if single else tuple(new_outputs)

    def _packed_outputs(self):
        if self.packed_grad_outputs is not None:
            return self.packed_grad_outputs
        return tuple(self.grad_outputs.get(j) for j in range(self.n_outputs))

    def _make_output_hook(self, j):
        def hook(grad):
            self.grad_outputs[j] = grad
            if len(self.grad_outputs) < len(self.output_index):
                return None
            packed = self._packed_outputs()
            for pre_hook in self.user_pre_hooks:
                replaced = pre_hook(self.module, packed)
                if replaced is None:
                    continue
                if not isinstance(replaced, tuple):
                    replaced = (replaced,)
                if len(replaced) != len(packed):
                    raise RuntimeError(f"Backward pre hook returned an invalid number of grad_output, got "
                                       f"{len(replaced)}, but expected {len(packed)}")
                if len(self.output_index) > 1:
                    raise NotImplementedError("a full backward pre-hook of a module with several outputs that need "
                                              "gradients cannot replace grad_output in dygrad")
                packed = replaced
            self.packed_grad_outputs = packed
            if not self.input_index:  # no input needs a gradient: the hooks run now, with None for grad_input
                if self.user_hooks:
                    warnings.warn("Full backward hook is firing when gradients are computed with respect to module "
                                  "outputs since no inputs require gradients. See https://docs.pytorch.org/docs/main/"
                                  "generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook for more "
                                  "details.", stacklevel=2)
                for user_hook in self.user_hooks:
                    res = user_hook(self.module, (None,) * self.n_inputs, packed)
                    if res is not None and not (isinstance(res, tuple) and all(r is None for r in res)):
                        raise RuntimeError("Backward hook for Modules where no input requires gradient should always "
                                           "return None or None for all gradients.")
            return packed[j]
        return hook

    def _make_input_hook(self, i):
        def hook(grad):
            self.grad_inputs[i] = grad
            if len(self.grad_inputs) < len(self.input_index):
                return None
            grad_input = tuple(self.grad_inputs.get(k) for k in range(self.n_inputs))
            for user_hook in self.user_hooks:
                res = user_hook(self.module, grad_input, self._packed_outputs())
                if res is None:
                    continue
                if not isinstance(res, tuple):
                    res = (res,)
                if len(res) != len(grad_input):
                    raise RuntimeError(f"Backward hook returned an invalid number of grad_input, got {len(res)}, but "
                                       f"expected {len(grad_input)}")
                if len(self.input_index) > 1:
                    raise NotImplementedError("a full backward hook of a module with several inputs that need "
                                              "gradients cannot replace grad_input in dygrad")
                grad_input = res
            return grad_input[i]
        return hook


def _recompute_forward(module, policy, *args, **kwargs):
    # Module.recompute(): the class's forward under checkpoint (a partial of this, so the module still pickles)
    return _recompute_forward_fn(type(module).forward, module, policy, *args, **kwargs)


def _recompute_forward_fn(fn, module, policy, *args, **kwargs):
    # fn(module, *args, **kwargs) under a non-reentrant checkpoint (selective with a policy); plainly under no_grad
    if not _C.is_grad_enabled():
        return fn(module, *args, **kwargs)
    from ..utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, noop_context_fn
    context_fn = noop_context_fn if policy is None else functools.partial(create_selective_checkpoint_contexts,
                                                                          policy)
    return checkpoint(fn, module, *args, use_reentrant=False, context_fn=context_fn, **kwargs)
