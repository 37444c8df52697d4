"""dygrad.optim: optimizers and learning-rate schedules with torch.optim's names, defaults and formulas."""
from . import lr_scheduler  # noqa: F401
from .adam import Adam, AdamW  # noqa: F401
from .composed import Adagrad, Adamax, NAdam, RAdam, RMSprop  # noqa: F401
from .optimizer import Optimizer  # noqa: F401
from .sgd import SGD  # noqa: F401
