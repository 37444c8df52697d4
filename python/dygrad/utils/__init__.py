"""dygrad.utils: torch.utils' training pieces (data loading, hook handles, activation checkpointing)."""
from . import checkpoint, data, hooks  # noqa: F401
