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
    and not used, such as 'cuda'. A str, so tensor.device == dygrad.device('cpu') and .to(device) take it as 'cpu'."""

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

    # `with torch.device(d):` makes d the default device of the factories inside: the CPU, or "meta", where
    # libraries build a model before loading its weights. Another device raises.
    def __enter__(self):
        if self.type == "meta":
            _enter_meta()
        elif self.type != "cpu":
            raise RuntimeError(f"[device] {self!r} as the default device: dygrad's tensors live on the CPU")
        elif _meta_depth:
            from ._not_provided import not_provided
            raise not_provided("a CPU default device inside torch.device('meta')")
        _default_devices.append(self)
        return self

    def __exit__(self, *exc):
        _default_devices.pop()
        if self.type == "meta":
            _exit_meta()
        return False


# The devices of the `with torch.device(...)` blocks the program is in, innermost last.
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
