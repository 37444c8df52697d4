"""torch.nn.modules: the module classes of dygrad.nn under the submodule paths torch defines them in."""
from . import activation, container, dropout, flatten, linear, loss, module, normalization, sparse, transformer  # noqa: F401
from .container import *  # noqa: F401,F403
from .linear import *  # noqa: F401,F403
from .module import Module  # noqa: F401
