"""dygrad.utils: torch.utils' training pieces (data loading)."""
from . import data  # noqa: F401
