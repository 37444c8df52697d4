"""dygrad.optim: optimizers with torch.optim's names, defaults and update formulas."""
from .adamw import AdamW  # noqa: F401
from .optimizer import Optimizer  # noqa: F401
from .sgd import SGD  # noqa: F401
