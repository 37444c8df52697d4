"""dygrad.models: reference model implementations."""
from . import llama  # noqa: F401
