"""dygrad.save / dygrad.load in PyTorch's own checkpoint format, so files move both ways between torch 2.x and
dygrad: state dicts, optimizer states, nested containers. No torch import: the format is written here.

The format (torch 2.x, `_use_new_zipfile_serialization=True`): an uncompressed zip whose entries sit under one
prefix directory (the file's stem; "archive" for a buffer):
    {prefix}/data.pkl                pickle protocol 2 of the object; each tensor is
                                     torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
                                     requires_grad, OrderedDict()) and each storage a persistent id
                                     ('storage', torch.FloatStorage, key, 'cpu', numel)
    {prefix}/data/{key}              the storage's raw little-endian bytes, aligned to 64 bytes in the file
    {prefix}/byteorder               "little";   {prefix}/version "3";   {prefix}/.format_version "1"
    {prefix}/.storage_alignment      "64";       {prefix}/.data/serialization_id (an opaque id)

Loading is safe by default (weights_only=True, as torch 2.6+): an allow-list unpickler that resolves only
containers, tensors, storages, dtypes, Size and device (plus what add_safe_globals allows) and refuses any
other global with an error naming it, so a crafted file cannot run code. mmap=True maps storages from the
file (copy-on-write) instead of reading them. A safetensors file loads too (a dict of tensors)."""
import codecs
import collections
import contextlib
import io
import os
import pickle
import random
import struct
import zipfile

import numpy as np

from . import _C
from ._C import Tensor
from ._probes import device
from ._size import Size

# torch storage type name <-> dtype name (dygrad's name == torch's) and the NumPy layout of the bytes.
_STORAGES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
             "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32", "ByteStorage": "uint8",
             "BoolStorage": "bool"}
_STORAGE_OF = {v: k for k, v in _STORAGES.items()}
_NUMPY = {"float32": "<f4", "float64": "<f8", "float16": "<f2", "bfloat16": "<u2", "int64": "<i8", "int32": "<i4",
          "uint8": "u1", "bool": "?"}
_DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool", "uint16")
_ALIGNMENT = 64


def _dtype_name(dtype):
    return str(dtype).split(".")[-1]


# --- safe globals (torch.serialization.add_safe_globals) --------------------------------------------------------
_safe_globals = {}


def _global_key(entry):
    if isinstance(entry, tuple):
        obj, name = entry
        module, _, qualname = name.rpartition(".")
        return (module, qualname), obj
    return (entry.__module__, entry.__qualname__), entry


def add_safe_globals(safe_globals):
    """Allows these classes/functions in weights_only loads (entries: objects or (object, "module.name"))."""
    for entry in safe_globals:
        key, obj = _global_key(entry)
        _safe_globals[key] = obj


def get_safe_globals():
    return list(_safe_globals.values())


def clear_safe_globals():
    _safe_globals.clear()


@contextlib.contextmanager
def safe_globals(safe_globals):
    saved = dict(_safe_globals)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        _safe_globals.clear()
        _safe_globals.update(saved)


# --- writing -------------------------------------------------------------------------------------------------------
class _TorchGlobal:
    """A global of torch's namespace, written into the pickle by name (torch need not be importable)."""
    __slots__ = ("module", "name")

    def __init__(self, module, name):
        self.module, self.name = module, name

    def __call__(self, *args):  # pickle requires a reduce callable; this one is only ever written by name
        raise TypeError(f"{self.module}.{self.name} is torch's; dygrad writes it into checkpoints only")


_REBUILD_TENSOR = _TorchGlobal("torch._utils", "_rebuild_tensor_v2")
_REBUILD_PARAMETER = _TorchGlobal("torch._utils", "_rebuild_parameter")


class _StorageRef:
    __slots__ = ("key", "tensor", "dtype")

    def __init__(self, key, tensor, dtype):
        self.key, self.tensor, self.dtype = key, tensor, dtype


class _TorchPickler(pickle._Pickler):
    """Pickles dygrad objects as torch's: tensors by _rebuild_tensor_v2 over persistent storages, dtypes,
    Size and device as torch's globals. (The pure-Python pickler, to write torch's globals by name.)"""
    dispatch = dict(pickle._Pickler.dispatch)

    def __init__(self, file):
        super().__init__(file, protocol=2)
        self.storages = []
        self._storage_of = {}

    def save_torch_global(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("utf-8"))
        self.memoize(obj)

    dispatch[_TorchGlobal] = save_torch_global

    def _storage(self, t):
        dtype = _dtype_name(t.dtype)
        if dtype not in _STORAGE_OF:
            raise TypeError(f"[save] tensors of dtype {dtype} have no storage type in torch's format")
        identity = (t.data_ptr(), dtype, tuple(t.shape), tuple(t.stride()))  # one storage for a tensor saved twice
        ref = self._storage_of.get(identity)
        if ref is None:
            ref = _StorageRef(str(len(self.storages)), t.detach().contiguous(), dtype)
            self.storages.append(ref)
            self._storage_of[identity] = ref
        return ref

    def reducer_override(self, obj):
        if isinstance(obj, Tensor):
            if type(obj) is not Tensor:  # nn.Parameter
                return (_REBUILD_PARAMETER, (obj.detach(), obj.requires_grad, collections.OrderedDict()))
            if obj.grad_fn is not None and obj.requires_grad:
                raise RuntimeError("[save] cannot save a tensor that is part of an autograd graph (detach it "
                                   "first), as torch refuses")
            ref = self._storage(obj)
            shape = tuple(obj.shape)
            stride, s = [], 1
            for n in reversed(shape):
                stride.append(s)
                s *= n
            return (_REBUILD_TENSOR, (ref, 0, shape, tuple(reversed(stride)), obj.requires_grad,
                                      collections.OrderedDict()))
        if isinstance(obj, Size):
            return (_TorchGlobal("torch", "Size"), (tuple(obj),))
        if isinstance(obj, device):
            return (_TorchGlobal("torch", "device"), (str(obj),))
        return NotImplemented

    def save(self, obj, save_persistent_id=True):
        if isinstance(obj, _C.dtype):  # a dtype is the global torch.<name>
            return self.save_torch_global(_TorchGlobal("torch", _dtype_name(obj)))
        return super().save(obj, save_persistent_id)

    def persistent_id(self, obj):
        if isinstance(obj, _StorageRef):
            return ("storage", _TorchGlobal("torch", _STORAGE_OF[obj.dtype]), obj.key, "cpu", obj.tensor.numel())
        return None


def _storage_bytes(ref):
    t = ref.tensor
    if ref.dtype == "bfloat16":  # NumPy has no bfloat16: its bits are the top half of the float32's
        array = (t.float().numpy().view("<u4") >> 16).astype("<u2")
    else:
        array = t.numpy()
    array = np.ascontiguousarray(array).reshape(-1)
    if array.dtype.byteorder == ">":
        array = array.byteswap()
    return memoryview(array.view(np.uint8))


def _write_entry(zf, name, data, align=False):
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.file_size = len(data)
    if align:  # pad the local header's extra field so the data starts at a multiple of 64, as torch does
        zip64 = 20 if len(data) * 1.05 > zipfile.ZIP64_LIMIT else 0
        start = zf.fp.tell() + 30 + len(name.encode("utf-8")) + 4 + zip64
        pad = -start % _ALIGNMENT
        info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    with zf.open(info, "w", force_zip64=len(data) * 1.05 > zipfile.ZIP64_LIMIT) as fh:
        fh.write(data)


def save(obj, f, pickle_module=pickle, pickle_protocol=2, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False):
    """torch.save: writes obj to a path or a binary file object in torch's zip checkpoint format."""
    if not _use_new_zipfile_serialization:
        raise NotImplementedError("[save] the legacy (pre-1.6) format is not supported by dygrad; it writes the "
                                  "zip format torch 1.6+ reads")
    if isinstance(f, (str, os.PathLike)):
        prefix = os.path.splitext(os.path.basename(os.fspath(f)))[0] or "archive"
        with open(f, "wb") as fh:
            return _save(obj, fh, prefix)
    return _save(obj, f, "archive")


def _save(obj, fh, prefix):
    buffer = io.BytesIO()
    pickler = _TorchPickler(buffer)
    pickler.dump(obj)
    with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as zf:
        _write_entry(zf, f"{prefix}/data.pkl", buffer.getvalue())
        _write_entry(zf, f"{prefix}/.format_version", b"1")
        _write_entry(zf, f"{prefix}/.storage_alignment", str(_ALIGNMENT).encode())
        _write_entry(zf, f"{prefix}/byteorder", b"little")
        for ref in pickler.storages:
            _write_entry(zf, f"{prefix}/data/{ref.key}", _storage_bytes(ref), align=True)
        _write_entry(zf, f"{prefix}/version", b"3\n")
        _write_entry(zf, f"{prefix}/.data/serialization_id", str(random.getrandbits(128)).zfill(40).encode())


# --- reading -------------------------------------------------------------------------------------------------------
class _StorageType:
    """What torch.FloatStorage & co. resolve to while loading: their dtype."""

    def __init__(self, name):
        self.name, self.dtype = name, _STORAGES[name]


class _LoadedStorage:
    __slots__ = ("array", "dtype")

    def __init__(self, array, dtype):
        self.array, self.dtype = array, dtype


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    array = storage.array
    view = np.lib.stride_tricks.as_strided(array[storage_offset:], shape=tuple(size),
                                           strides=tuple(s * array.itemsize for s in stride))
    if storage.dtype == "bfloat16":
        t = _C.from_numpy((view.astype("<u4") << 16).view("<f4")).to(_C.bfloat16)
    else:
        if not view.flags.c_contiguous:
            view = np.ascontiguousarray(view)
        if view.dtype.byteorder == ">":
            view = view.astype(view.dtype.newbyteorder("="))
        t = _C.from_numpy(view)  # shares the loaded (or mapped) storage: no copy
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_parameter(data, requires_grad, backward_hooks):
    from .nn import Parameter
    return Parameter(data, requires_grad)


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    param = _rebuild_parameter(data, requires_grad, backward_hooks)
    if state:
        param.__dict__.update(state)
    return param


def _torch_globals():
    table = {("collections", "OrderedDict"): collections.OrderedDict,
             ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
             ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
             ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
             ("torch", "Size"): Size, ("torch", "device"): device,
             ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "complex"): complex,
             ("builtins", "slice"): slice, ("builtins", "range"): range, ("builtins", "bytearray"): bytearray,
             ("_codecs", "encode"): codecs.encode}
    for name in _STORAGES:
        table[("torch", name)] = _StorageType(name)
    for name in _DTYPE_NAMES:
        table[("torch", name)] = getattr(_C, name)
    for alias, name in (("float", "float32"), ("double", "float64"), ("half", "float16"), ("long", "int64"),
                        ("int", "int32")):
        table[("torch", alias)] = getattr(_C, name)
    return table


_TORCH_GLOBALS = _torch_globals()


def _weights_only_error(module, name):
    return pickle.UnpicklingError(
        f"Weights only load failed: the file refers to the global {module}.{name}, which is not allowed (it "
        f"could run code). dygrad.load(weights_only=True) resolves only tensors, containers, dtypes, Size and "
        f"device. If you trust the file, allow it with dygrad.serialization.add_safe_globals([{name}]) or load "
        f"with weights_only=False.")


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, storage_loader, weights_only):
        super().__init__(file)
        self._storage_loader = storage_loader
        self._weights_only = weights_only

    def find_class(self, module, name):
        if module == "__builtin__":  # protocol 2 spells builtins as Python 2 did
            module = "builtins"
        found = _TORCH_GLOBALS.get((module, name))
        if found is not None:
            return found
        found = _safe_globals.get((module, name))
        if found is not None:
            return found
        if self._weights_only:
            raise _weights_only_error(module, name)
        if module == "torch" or module.startswith("torch."):
            raise pickle.UnpicklingError(f"[load] the file needs {module}.{name}, which dygrad does not provide")
        return super().find_class(module, name)

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)
                and isinstance(pid[2], str)):
            raise pickle.UnpicklingError(f"[load] unexpected persistent id {pid!r} (not a torch storage)")
        return self._storage_loader(pid[1], pid[2], pid[3], int(pid[4]))


def _check_location(location, map_location):
    if map_location is None and str(location).startswith("cuda"):
        raise RuntimeError("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
                           "False. If you are running on a CPU-only machine, please use torch.load with "
                           "map_location=torch.device('cpu') to map your storages to the CPU.")
    target = map_location
    if isinstance(map_location, dict):
        target = map_location.get(str(location), str(location))
    if callable(map_location) and not isinstance(map_location, str):
        return
    if target is not None and str(target).split(":")[0] != "cpu":
        raise RuntimeError(f"[load] map_location {target!r}: dygrad has the cpu device only")


def _entry_offset(path_or_file, info):
    """Where an uncompressed entry's bytes start in the file (after its local header)."""
    path_or_file.seek(info.header_offset)
    header = path_or_file.read(30)
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_length + extra_length


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **pickle_load_args):
    """torch.load: reads a checkpoint written by torch 2.x (or dygrad.save), or a safetensors file."""
    if weights_only is None:
        weights_only = True
    if pickle_module is not None and weights_only:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    is_path = isinstance(f, (str, os.PathLike))
    if mmap and not is_path:
        raise ValueError("f must be a file path in order to use the mmap argument")
    fh = open(f, "rb") if is_path else f
    try:
        start = fh.tell()
        magic = fh.read(8)
        fh.seek(start)
        if magic[:4] == b"PK\x03\x04":
            return _load_zip(fh, os.fspath(f) if is_path else None, map_location, weights_only, bool(mmap))
        if len(magic) == 8 and fh.read(9)[8:9] == b"{":
            fh.seek(start)
            return _load_safetensors(fh)
        raise RuntimeError("[load] not a checkpoint dygrad reads: expected torch's zip format (torch >= 1.6) or "
                           "safetensors; the legacy (pre-1.6) torch format is not supported")
    finally:
        if is_path:
            fh.close()


def _load_zip(fh, path, map_location, weights_only, use_mmap):
    with zipfile.ZipFile(fh) as zf:
        names = zf.namelist()
        pkl = next((n for n in names if n.endswith("/data.pkl") and n.count("/") == 1), None)
        if pkl is None:
            raise RuntimeError("[load] the zip archive has no <prefix>/data.pkl: not a torch checkpoint")
        prefix = pkl[: -len("data.pkl")]
        byteorder = zf.read(prefix + "byteorder").decode() if prefix + "byteorder" in names else "little"
        loaded = {}

        def load_storage(storage_type, key, location, numel):
            _check_location(location, map_location)
            if key in loaded:
                return loaded[key]
            info = zf.getinfo(f"{prefix}data/{key}")
            if info.compress_type != zipfile.ZIP_STORED:
                raise RuntimeError(f"[load] storage {key} is compressed; torch writes them stored")
            layout = np.dtype(_NUMPY[storage_type.dtype]).newbyteorder("<" if byteorder == "little" else ">")
            if use_mmap:
                array = np.memmap(path, dtype=layout, mode="c", offset=_entry_offset(fh, info),
                                  shape=(info.file_size // layout.itemsize,))
            else:
                array = np.frombuffer(bytearray(zf.read(info)), dtype=layout)
            if array.size < numel:
                raise RuntimeError(f"[load] storage {key} holds {array.size} elements, the file says {numel}")
            loaded[key] = _LoadedStorage(array, storage_type.dtype)
            return loaded[key]

        return _Unpickler(io.BytesIO(zf.read(pkl)), load_storage, weights_only).load()


def _load_safetensors(fh):
    (n,) = struct.unpack("<Q", fh.read(8))
    import json
    header = json.loads(fh.read(n).decode("utf-8"))
    data = bytearray(fh.read())
    header.pop("__metadata__", None)
    kinds = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "U16": "<u2",
             "U8": "u1", "BOOL": "?"}
    out = collections.OrderedDict()
    for name, meta in header.items():
        if meta["dtype"] not in kinds:
            raise TypeError(f"[load] safetensors dtype {meta['dtype']} of {name} is not supported by dygrad")
        begin, end = meta["data_offsets"]
        array = np.frombuffer(data, dtype=kinds[meta["dtype"]], count=(end - begin) // np.dtype(kinds[meta["dtype"]]).itemsize,
                              offset=begin).reshape(meta["shape"])
        storage = _LoadedStorage(array.reshape(-1), "bfloat16" if meta["dtype"] == "BF16" else "-")
        out[name] = (_rebuild_tensor_v2(storage, 0, array.shape, [int(s // array.itemsize) for s in array.strides],
                                        False, None) if meta["dtype"] == "BF16" else _C.from_numpy(array))
    return out
