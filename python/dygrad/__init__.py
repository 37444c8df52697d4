"""dygrad: eager-mode deep learning with an async stream executor and a PyTorch-aligned API.

`import dygrad as dg`, then use it as you would use torch: dg.tensor, dg.zeros, dg.add, x + y, x.backward(),
dg.no_grad(). Ops are bound straight to the C++ core (dygrad._C); this package adds the Python-only pieces.
"""
import atexit as _atexit

from . import _C
from ._C import Tensor, dtype  # noqa: F401

# A deferred error names the user's line, not dygrad's own nn/functional frames (docs/async-errors.md).
_C._set_package_dir(__import__("os").path.join(__import__("os").path.dirname(__file__), ""))

# Every public name of the extension (ops, factories, dtypes, runtime functions) is dygrad.<name>.
for _name in dir(_C):
    if not _name.startswith("_"):
        globals()[_name] = getattr(_C, _name)
del _name

from ._size import Size  # noqa: E402
from . import return_types  # noqa: E402,F401
from . import _tensor  # noqa: E402
from . import autograd  # noqa: E402
from . import testing  # noqa: E402,F401
from .autograd import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad,  # noqa: E402,F401
                       set_grad_enabled)
from .runtime import (Context, are_deterministic_algorithms_enabled, get_context,  # noqa: E402,F401
                      is_deterministic_algorithms_warn_only_enabled, set_context, use_deterministic_algorithms)
from ._generator import Generator, default_generator, manual_seed, randperm, seed  # noqa: E402,F401
from ._probes import device, get_float32_matmul_precision, set_float32_matmul_precision  # noqa: E402,F401

_C._set_size_type(Size)
_C._set_cpu_device(device("cpu"))  # Tensor.device
_C._set_meta_device(device("meta"))  # the device of a tensor made under torch.device("meta")
_C._set_device_class(device)  # the other devices' Tensor.device
testing._enable_from_environment()  # DYGRAD_TEST_DEVICES=n: the asynchronous test device (docs/devices.md)
_tensor.install()
from . import _inplace  # noqa: E402
_inplace.install()  # torch's in-place methods without a kernel of their own: twin + copy_
# Finish queued work while Python can still release what the stream holds (see python/src/interop.cpp).
_atexit.register(_C._interpreter_exiting)

from .version import __version__  # noqa: E402
from ._dtype_info import finfo, iinfo  # noqa: E402,F401
from ._not_provided import UNPROVIDED_DTYPES as _UNPROVIDED_DTYPES, NotProvidedDtype  # noqa: E402
for _name, _properties in _UNPROVIDED_DTYPES.items():  # torch's dtypes dygrad has no storage for (fnuz, e8m0)
    globals()[_name] = NotProvidedDtype(_name, *_properties)
del _name, _properties
from ._factories import (addcdiv, addcmul, as_tensor, asarray, channels_last, channels_last_3d,  # noqa: E402,F401
                         contiguous_format, eye, get_default_device, get_default_dtype, isin, memory_format, normal,
                         preserve_format, randint_like, scalar_tensor, set_default_device, set_default_dtype,
                         layout, sparse_coo, sparse_csr, strided)
from ._factories import (BFloat16Tensor, BoolTensor, ByteTensor, CharTensor, DoubleTensor,  # noqa: E402,F401
                         FloatTensor, HalfTensor, IntTensor, LongTensor, ShortTensor)
from . import _factories  # noqa: E402
_factories.install()
from .storage import UntypedStorage, untyped_storage as _untyped_storage  # noqa: E402,F401
Tensor.untyped_storage = _untyped_storage
from ._composed import (atleast_1d, atleast_2d, atleast_3d, column_stack, dstack, hstack, prod,  # noqa: E402,F401
                        row_stack, vstack)
Tensor.prod = prod

# torch's constants (torch.pi is math.pi ...).
pi = 3.141592653589793
e = 2.718281828459045
inf = __import__("math").inf
nan = __import__("math").nan
newaxis = None


def _rebuild_tensor(array, dtype_name, requires_grad, device="cpu"):
    """Unpickles a Tensor (see dygrad/_tensor.py): onto the device it was pickled from."""
    t = tensor(array, dtype=getattr(_C, dtype_name.split(".")[-1]), device=device)
    return t.requires_grad_(True) if requires_grad else t


def is_tensor(obj):
    """True when obj is a dygrad Tensor (or a subclass such as nn.Parameter)."""
    return isinstance(obj, Tensor)


def is_floating_point(input):
    return input.is_floating_point()


def numel(input):
    return input.numel()


# Subpackages in pure Python on top of the ops (imported last: they use the names above).
from . import nn, optim  # noqa: E402,F401
from . import data, models, profiler, tune  # noqa: E402,F401
from . import amp, backends, cpu, cuda, distributed, linalg, ops, serialization, utils  # noqa: E402,F401
from . import memory  # noqa: E402,F401
from . import accelerator, compiler, jit, library, onnx  # noqa: E402,F401
compile = jit.compile_  # noqa: A001  (torch.compile's signature on dygrad.jit, docs/jit.md)
from ._not_provided import NotProvidedError  # noqa: E402,F401
from .amp import (autocast, autocast_decrement_nesting, autocast_increment_nesting, clear_autocast_cache,  # noqa: E402,F401
                  get_autocast_dtype, is_autocast_cache_enabled, is_autocast_enabled, set_autocast_cache_enabled,
                  set_autocast_dtype, set_autocast_enabled)
from .memory import get_memory_limit, set_memory_limit  # noqa: E402,F401
from .serialization import load, save  # noqa: E402,F401
