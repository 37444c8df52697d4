"""torch.nn.modules: the module classes of dygrad.nn under the submodule paths torch defines them in."""
from . import (activation, batchnorm, container, conv, dropout, flatten, linear, loss, module,  # noqa: F401
               normalization, rnn, sparse, transformer)
from .container import *  # noqa: F401,F403
from .linear import *  # noqa: F401,F403
from .module import Module  # noqa: F401
