"""dygrad.nn: modules and layers, PyTorch-aligned (state-dict keys match torch.nn exactly)."""
from . import functional, init, parallel, utils  # noqa: F401
from .layers import (  # noqa: F401
    GELU, Dropout, Embedding, Flatten, Identity, LayerNorm, Linear, LogSoftmax, ModuleDict, ModuleList, ParameterDict,
    ParameterList, ReLU, RMSNorm, Sequential, Sigmoid, SiLU, Softmax, Tanh, Unflatten)
from .layers import (GLU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, PReLU, ReLU6,  # noqa: F401
                     Softmin, Softshrink, Softsign, Tanhshrink, Threshold)
from .activations import CELU, ELU, SELU, LogSigmoid, Mish, Softplus  # noqa: F401
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d  # noqa: F401
from .multihead import MultiheadAttention  # noqa: F401
from .norms import BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm  # noqa: F401
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase  # noqa: F401
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer,  # noqa: F401
                          TransformerEncoder, TransformerEncoderLayer)
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss  # noqa: F401
from .module import Module  # noqa: F401
from .parameter import Buffer, Parameter  # noqa: F401
from . import attention, modules  # noqa: E402,F401  (torch.nn.attention, torch.nn.modules.<file> paths)
