"""torch.accelerator: the device-agnostic probes. dygrad has no accelerator backend yet, so they answer as torch
does on a CPU-only machine (no accelerator; current_accelerator() is None)."""


def is_available():
    return False


def current_accelerator(check_available=False):
    return None


def device_count():
    return 0


def current_device_index():
    raise RuntimeError("torch.accelerator.current_device_index: no accelerator is available (dygrad runs on the CPU)")


def set_device_index(device):
    raise RuntimeError("torch.accelerator.set_device_index: no accelerator is available (dygrad runs on the CPU)")


def synchronize(device=None):
    raise RuntimeError("torch.accelerator.synchronize: no accelerator is available (dygrad runs on the CPU)")
