"""Host settings and probes a PyTorch CPU script reads, with torch's names: dygrad.device,
set/get_float32_matmul_precision, and dygrad.compile as a pass-through until dygrad has a JIT.
(get_num_threads/set_num_threads are the extension's; dygrad.cuda, dygrad.backends and dygrad.amp are
modules of their own.)"""
import functools
import warnings

_PRECISIONS = ("highest", "high", "medium")
_matmul_precision = "highest"


def set_float32_matmul_precision(precision):
    """Accepted as torch accepts it; dygrad's float32 GEMM is full float32 at every setting (no TF32 on CPU).
    An unknown value warns and changes nothing, as torch's."""
    global _matmul_precision
    if precision not in _PRECISIONS:
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      "set_float32_matmul_precision call has no effect.")
        return
    _matmul_precision = precision


def get_float32_matmul_precision():
    return _matmul_precision


class device(str):  # noqa: N801 -- torch's spelling
    """torch.device: 'cpu', 'test:N' (the asynchronous test device, docs/devices.md, when it is on), or a name probed
    and not used, such as 'cuda'. A str, so tensor.device == dygrad.device('cpu') and .to(device) take it as 'cpu'
    (torch's device compares unequal to a str: a deliberate difference)."""

    def __new__(cls, type, index=None):  # noqa: A002 -- torch's argument name
        if isinstance(type, device):
            return type
        if not isinstance(type, str):
            raise TypeError(f"device() received an invalid combination of arguments - got ({type!r})")
        name, _, number = type.partition(":")
        if number:
            if index is not None:
                raise RuntimeError(f"type (string) must not include an index because index was passed explicitly: {type}")
            index = int(number)
        if name not in ("cpu", "cuda", "mps", "meta", "xpu", "test"):
            raise RuntimeError(f"Expected one of cpu, cuda, mps, meta, xpu, test device type at start of device string: "
                               f"{type}")
        self = super().__new__(cls, name if index is None else f"{name}:{index}")
        self.type, self.index = name, index
        return self

    def __repr__(self):
        return f"device(type='{self.type}')" if self.index is None else f"device(type='{self.type}', index={self.index})"

    # `with torch.device(d):` makes d the default device of the factories inside that take no device= (torch's
    # DeviceContext): the CPU, "test:N" (when the test device is on), or "meta", where libraries build a model
    # before loading its weights. Per thread, as torch's; the device before the block is the default again after it.
    def __enter__(self):
        from . import _C
        if self.type != "meta" and _meta_depth:
            from ._not_provided import not_provided
            raise not_provided(f"a {self.type} default device inside torch.device('meta')")
        saved = _C._get_default_device()
        # meta evaluation builds its tensors as the CPU's (address space only), whatever the default device was
        _C._set_default_device("cpu" if self.type == "meta" else self, "device")  # raises when not available
        if self.type == "meta":
            _enter_meta()
            _default_devices.append(self)
        _scopes().append((self, saved))
        return self

    def __exit__(self, *exc):
        from . import _C
        entered, saved = _scopes().pop()
        if entered.type == "meta":
            _default_devices.pop()
            _exit_meta()
        _C._set_default_device(saved, "device")
        return False


# This thread's `with torch.device(...)` blocks, innermost last: (the device, the default device before the block).
_thread_state = __import__("threading").local()


def _scopes():
    scopes = getattr(_thread_state, "scopes", None)
    if scopes is None:
        scopes = _thread_state.scopes = []
    return scopes


# The `with torch.device("meta")` blocks the program is in (meta evaluation is process-wide, docs/memory.md).
_default_devices = []

# Meta tensors (torch.device("meta")): inside the block every op runs under meta evaluation (ops/meta_eval.h, as
# dg.memory.estimate): it computes its outputs' shapes and dtypes, allocates address space only and runs no kernel.
# A tensor made there reports device "meta" (meta::is_meta_storage) after the block too; it holds no data
# (docs/memory.md, "Meta tensors"). As in torch, building on meta draws no random numbers: the generators' states
# are put back.
_meta_depth = 0
_meta_saved_rng = None


def _enter_meta():
    global _meta_depth, _meta_saved_rng
    from . import _C
    if _meta_depth == 0:
        from ._generator import default_generator
        _meta_saved_rng = (default_generator.get_state(), _C.get_rng_state())
        _C._meta_begin()
    _meta_depth += 1


def _exit_meta():
    global _meta_depth
    from . import _C
    _meta_depth -= 1
    if _meta_depth == 0:
        from ._generator import default_generator
        _C._meta_end()
        default_generator.set_state(_meta_saved_rng[0])
        _C.set_rng_state(_meta_saved_rng[1])
