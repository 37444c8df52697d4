"""dygrad.amp: GradScaler and autocast accepted where they do nothing (disabled, or asked for CUDA on a machine
without it, which torch also turns off with a warning); mixed precision itself raises until dygrad has it."""
import warnings


def _check_device(device, cls):
    if not isinstance(device, str):
        raise TypeError(f"{cls}: expected a device type string such as 'cuda' or 'cpu', got {type(device).__name__}")


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


class autocast:  # noqa: N801 -- torch's spelling
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        _check_device(device_type, "autocast")
        if enabled and device_type == "cuda":
            warnings.warn("User provided device_type of 'cuda', but CUDA is not available. Disabling")
            enabled = False
        if enabled:
            raise NotImplementedError(f"autocast: mixed precision on '{device_type}' is not supported by dygrad yet "
                                      "(see docs/pytorch-api.md); cast the model with .to(dtype) or pass "
                                      "enabled=False")
        self.device = device_type
        self.fast_dtype = dtype

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        return fn
