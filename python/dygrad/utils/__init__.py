"""dygrad.utils: torch.utils' training pieces (data loading, hook handles)."""
from . import data, hooks  # noqa: F401
