"""torch.nn.modules.activation: the classes of dygrad.nn that torch defines in this module (pickled torch models and
torch.serialization.safe_globals name them by this path). A name torch has here and dygrad lacks is missing."""

from ..layers import (GELU, GLU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSoftmax, PReLU,  # noqa: F401
                      ReLU, ReLU6, SiLU, Sigmoid, Softmax, Softmin, Softshrink, Softsign, Tanh, Tanhshrink, Threshold)
from ..activations import CELU, ELU, SELU, LogSigmoid, Mish, Softplus  # noqa: F401
from ..multihead import MultiheadAttention  # noqa: F401

__all__ = ['GELU', 'GLU', 'Hardshrink', 'Hardsigmoid', 'Hardswish', 'Hardtanh', 'LeakyReLU', 'LogSoftmax', 'PReLU',
           'ReLU', 'ReLU6', 'SiLU', 'Sigmoid', 'Softmax', 'Softmin', 'Softshrink', 'Softsign', 'Tanh', 'Tanhshrink',
           'Threshold', 'CELU', 'ELU', 'SELU', 'LogSigmoid', 'Mish', 'Softplus', 'MultiheadAttention']
