"""dygrad.memory: memory tools (docs/memory.md)."""
from ._memory_estimate import MemoryEstimate, estimate  # noqa: F401
