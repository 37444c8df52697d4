"""dygrad.amp: autocast (torch.autocast on the CPU: bfloat16 or float16 mixed precision, docs/mixed-precision.md)
and GradScaler, accepted where it does nothing (disabled, or asked for CUDA on a machine without it, which torch
also turns off with a warning); loss scaling itself raises until dygrad has it (bfloat16 needs none)."""
import functools
import warnings

from . import _C

_DEVICE_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia",
                 "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone")


def _check_device(device, cls):
    if not isinstance(device, str):
        raise TypeError(f"{cls}: expected a device type string such as 'cuda' or 'cpu', got {type(device).__name__}")


def use_main_grad(params):
    """Megatron-LM's main_grad (dygrad extension; torch has none built in): gives each parameter (a Module's, or an
    iterable of them) a float32 `main_grad` buffer, zeroed, into which every gradient is accumulated in float32 as
    soon as autograd has produced it (a post-accumulate-grad hook adds `.grad` and sets it to None), so gradient
    accumulation over micro-batches of a bfloat16 model sums in float32. Optimizer.zero_grad zeroes the buffers;
    a master-weights group of Adam/AdamW reads them. Returns the hook handles (remove() each to stop)."""
    from .autograd import no_grad
    if hasattr(params, "parameters"):
        params = params.parameters()
    handles = []
    for p in params:
        if not p.requires_grad:
            continue
        p.main_grad = _C.zeros(tuple(p.shape), dtype=_C.float32, device=p.device)

        def accumulate(_, param=p):  # the hook's argument is the leaf, not this Python object: bind p
            with no_grad():
                param.main_grad.add_(param.grad)
            param.grad = None
        handles.append(p.register_post_accumulate_grad_hook(accumulate))
    return handles


class GradScaler:
    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        _check_device(device, "GradScaler")
        self._device = device
        if enabled and device == "cuda":
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.")
            enabled = False
        if enabled:
            raise NotImplementedError(f"GradScaler: loss scaling on '{device}' is not supported by dygrad yet "
                                      "(see docs/pytorch-api.md); pass enabled=False")
        self._enabled = False
        self._init_scale = init_scale

    def is_enabled(self):
        return self._enabled

    def scale(self, outputs):
        return outputs

    def unscale_(self, optimizer):
        pass

    def step(self, optimizer, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        pass

    def get_scale(self):
        return 1.0

    def state_dict(self):
        return {}

    def load_state_dict(self, state_dict):
        pass


def _check_autocast_device(device_type):
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if device_type not in _DEVICE_TYPES:
        raise RuntimeError(f"Expected one of {', '.join(_DEVICE_TYPES)} device type at start of device string: "
                           f"{device_type}")


def is_autocast_enabled(device_type=None):
    """torch.is_autocast_enabled(device_type): whether autocast is on for that device on this thread (no argument:
    CUDA's, deprecated in torch, always False here)."""
    if device_type is None:
        return False
    _check_autocast_device(device_type)
    return device_type == "cpu" and _C._autocast_state()[0]


def get_autocast_dtype(device_type):
    _check_autocast_device(device_type)
    return _C._autocast_state()[1] if device_type == "cpu" else _C.float16


def set_autocast_enabled(device_type, enabled):
    _check_autocast_device(device_type)
    if device_type == "cpu":
        _, dtype, cache = _C._autocast_state()
        _C._autocast_set(bool(enabled), dtype, cache)


def set_autocast_dtype(device_type, dtype):
    _check_autocast_device(device_type)
    if device_type == "cpu":
        enabled, _, cache = _C._autocast_state()
        _C._autocast_set(enabled, dtype, cache)


def is_autocast_cache_enabled():
    return _C._autocast_state()[2]


def set_autocast_cache_enabled(enabled):
    on, dtype, _ = _C._autocast_state()
    _C._autocast_set(on, dtype, bool(enabled))


def autocast_increment_nesting():
    return _C._autocast_increment_nesting()


def autocast_decrement_nesting():
    return _C._autocast_decrement_nesting()


clear_autocast_cache = _C.clear_autocast_cache


# How many enabled CPU autocast regions have been entered in this process, per dtype name ("bfloat16"): the
# profiler compares the counts at the start and the end of a recording to know a run computed in that dtype
# (the MFU denominator is the GEMM peak of the dtype the GEMMs ran in, docs/profiler-python.md).
_regions_entered = {}


def autocast_regions_entered():
    """{dtype name: enabled CPU autocast regions entered so far in this process} (dygrad extension)."""
    return dict(_regions_entered)


class autocast:  # noqa: N801 -- torch's spelling
    """torch.autocast: within the region, ops in torch's CPU autocast lists run in `dtype` (matmul, linear,
    attention ...) or float32 (the losses), the others follow their inputs. The casts happen in C++ at the op call
    (python/src/autocast.h); each float32 parameter is cast once per region (cache_enabled). A context manager
    and a decorator; regions nest, `enabled=False` inside turns it off."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        _check_autocast_device(device_type)
        if not isinstance(enabled, bool):
            raise ValueError(f"Expected `enabled` parameter to be of type bool, got: `{type(enabled)}`")
        self.device = device_type
        self.fast_dtype = get_autocast_dtype(device_type) if dtype is None else dtype
        self._cache_enabled = is_autocast_cache_enabled() if cache_enabled is None else cache_enabled
        if enabled and device_type == "cuda":
            warnings.warn("User provided device_type of 'cuda', but CUDA is not available. Disabling")
            enabled = False
        elif enabled and device_type != "cpu":
            warnings.warn(f"User provided device_type of '{device_type}', but dygrad has no such device. Disabling")
            enabled = False
        if enabled and device_type == "cpu" and self.fast_dtype not in (_C.bfloat16, _C.float16):
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
                          "CPU Autocast only supports dtypes of torch.bfloat16, torch.float16 currently.")
            enabled = False
        self._enabled = enabled

    def __enter__(self):
        self._prev = _C._autocast_state()
        if self.device == "cpu":
            _C._autocast_set(self._enabled, self.fast_dtype, self._cache_enabled)
            if self._enabled:
                name = str(self.fast_dtype).replace("dygrad.", "")
                _regions_entered[name] = _regions_entered.get(name, 0) + 1
        else:
            _C._autocast_set(self._prev[0], self._prev[1], self._cache_enabled)
        _C._autocast_increment_nesting()
        return self

    def __exit__(self, *exc):
        _C._autocast_decrement_nesting()  # clears the cast cache when the outermost region exits
        _C._autocast_set(*self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def decorate_autocast(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return decorate_autocast
