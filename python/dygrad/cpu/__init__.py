"""dygrad.cpu: torch.cpu's probes dygrad has (torch.cpu.amp.autocast, deprecated in torch 2.13 as here)."""
from . import amp  # noqa: F401


def is_available():
    return True


def device_count():
    return 1
