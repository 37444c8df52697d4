"""torch.distributions: the constraints module (libraries import it for parameter checks). The distribution
classes themselves are not provided yet (docs/pytorch-api.md)."""
from . import constraints  # noqa: F401
