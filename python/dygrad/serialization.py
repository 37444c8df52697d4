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

Devices (docs/devices.md): a tensor on a device is saved as its host copy with the device as its storage's location
('test:0'), as torch records 'cuda:0'; loading puts each storage where map_location says, in torch's forms (None: the
saved location; a str or device; a dict remapping locations; a callable(storage, location), given the storage on the
host). On a device, the contiguous tensors over one storage are views of one copy of it (tied weights stay tied).

Loading is safe by default (weights_only=True, as torch 2.6+): an allow-list unpickler that resolves only
containers, tensors, storages, dtypes, Size and device (plus what add_safe_globals allows) and refuses any
other global with an error naming it, so a crafted file cannot run code. mmap=True maps storages from the
file (copy-on-write) instead of reading them. A safetensors file loads too (a dict of tensors).

Every file is untrusted (docs/reliability.md, "Loading files"): each tensor record is checked against its storage
before a view is made (_checkpoint_files.check_tensor_record), a storage's size against its zip entry, a
safetensors header completely; a damaged file raises, it never yields a tensor that reads outside its storage.
save() to a path is atomic (_checkpoint_files.atomic_write)."""
import codecs
import collections
import contextlib
import io
import os
import pickle
import pickletools
import random
import struct
import zipfile
import zlib

import numpy as np

from . import _C
from ._checkpoint_files import (SAFETENSORS_ITEMSIZE, atomic_write, check_tensor_record, contiguous_strides,
                                file_size_of, normalize_bool, read_safetensors_header)
from ._C import Tensor
from ._probes import device
from ._size import Size

# torch storage type name <-> dtype name (dygrad's name == torch's) and the NumPy layout of the bytes.
_STORAGES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
             "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
             "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
             "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128",
             "UntypedStorage": "uint8"}
# torch has no typed storage for uint16/32/64 and float8: it saves their tensors with _rebuild_tensor_v3 over an
# UntypedStorage (bytes) and the dtype; dygrad writes and reads them the same way.
_STORAGE_OF = {v: k for k, v in _STORAGES.items() if k != "UntypedStorage"}
_UNTYPED_DTYPES = ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")
_NUMPY = {"float32": "<f4", "float64": "<f8", "float16": "<f2", "bfloat16": "<u2", "int64": "<i8", "int32": "<i4",
          "int16": "<i2", "int8": "i1", "uint8": "u1", "bool": "?", "uint16": "<u2", "uint32": "<u4",
          "uint64": "<u8", "float8_e4m3fn": "u1", "float8_e5m2": "u1", "complex64": "<c8", "complex128": "<c16"}
_DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
                "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "complex64", "complex128")
# NumPy has no float8: their bytes travel as uint8 and are viewed as the dtype (Tensor.view(dtype)).
_FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
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
_REBUILD_TENSOR_V3 = _TorchGlobal("torch._utils", "_rebuild_tensor_v3")
_REBUILD_PARAMETER = _TorchGlobal("torch._utils", "_rebuild_parameter")


class _StorageRef:
    __slots__ = ("key", "tensor", "dtype", "location")

    def __init__(self, key, tensor, dtype, location):
        self.key, self.tensor, self.dtype, self.location = key, tensor, dtype, location


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
        if dtype not in _STORAGE_OF and dtype not in _UNTYPED_DTYPES:
            raise TypeError(f"[save] tensors of dtype {dtype} have no storage type in torch's format")
        # one storage for a tensor saved twice
        identity = (str(t.device), t.data_ptr(), dtype, tuple(t.shape), tuple(t.stride()))
        ref = self._storage_of.get(identity)
        if ref is None:
            if t.is_cpu or t.is_meta:
                ref = _StorageRef(str(len(self.storages)), t.detach().contiguous(), dtype, "cpu")
            else:  # a device's tensor: its host copy, saved with the device as its location (torch's 'cuda:0')
                ref = _StorageRef(str(len(self.storages)), t.detach().cpu(), dtype, str(t.device))
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
            if ref.dtype in _UNTYPED_DTYPES:
                return (_REBUILD_TENSOR_V3, (ref, 0, shape, tuple(reversed(stride)), obj.requires_grad,
                                             collections.OrderedDict(), obj.dtype))
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
            if obj.dtype in _UNTYPED_DTYPES:  # an UntypedStorage counts bytes
                return ("storage", _TorchGlobal("torch.storage", "UntypedStorage"), obj.key, obj.location,
                        obj.tensor.numel() * obj.tensor.element_size())
            return ("storage", _TorchGlobal("torch", _STORAGE_OF[obj.dtype]), obj.key, obj.location,
                    obj.tensor.numel())
        return None


def _storage_bytes(ref):
    t = ref.tensor
    if ref.dtype == "bfloat16":  # NumPy has no bfloat16: its bits are the top half of the float32's
        array = (t.float().numpy().view("<u4") >> 16).astype("<u2")
    elif ref.dtype in _FLOAT8:
        array = t.view(_C.uint8).numpy()
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
        with atomic_write(f) as fh:  # a failed save (a full disk) keeps the previous file whole
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
    """A storage read from a file: its elements on the host (`array`), and the device its tensors go to (None: the
    CPU, as views of `array`); `on_device` is the storage copied there, made at its first contiguous tensor."""
    __slots__ = ("array", "dtype", "key", "device", "on_device")

    def __init__(self, array, dtype, key, device=None):
        self.array, self.dtype, self.key, self.device, self.on_device = array, dtype, key, device, None


# A bfloat16 record is copied (NumPy has no bfloat16: its bits are widened to float32, then narrowed); a copy
# larger than its storage (an overlapping or expanded view: size [2**40], stride [0]) is refused past this many
# elements, so that a 2-byte storage cannot make the loader allocate terabytes.
_MAX_BFLOAT16_COPY = 1 << 26


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    if not isinstance(storage, _LoadedStorage):
        raise RuntimeError(f"[load] a tensor record's storage is a {type(storage).__name__}, not a storage")
    array = storage.array
    size, stride, storage_offset, numel = check_tensor_record(f"over storage {storage.key!r}", size, stride,
                                                              storage_offset, array.size, array.itemsize)
    if numel == 0:
        view = array[:0].reshape(size)
    else:  # every element the view addresses lies inside the storage (checked just above)
        view = np.lib.stride_tricks.as_strided(array[storage_offset:], shape=size,
                                               strides=tuple(s * array.itemsize for s in stride))
    if storage.dtype == "bfloat16":
        if numel > max(array.size, _MAX_BFLOAT16_COPY):
            raise RuntimeError(f"[load] tensor over storage {storage.key!r}: a bfloat16 view of {numel} elements "
                               f"over {array.size} would be copied; dygrad copies at most {_MAX_BFLOAT16_COPY} "
                               f"elements more than its storage holds")
        t = _C.from_numpy((view.astype("<u4") << 16).view("<f4")).to(_C.bfloat16)
    else:  # a view of the loaded (or mapped) storage, strided as the record says: no copy, as torch's
        t = _C.from_numpy(view)
        if storage.dtype in _FLOAT8:
            t = t.view(getattr(_C, storage.dtype))
    if storage.device is not None:
        t = _on_device(storage, t, storage_offset, size, stride, numel)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
    """torch's record for dtypes without a typed storage: a view of an UntypedStorage's bytes as `dtype`."""
    if not isinstance(storage, _LoadedStorage) or storage.dtype != "uint8":
        raise RuntimeError("[load] a _rebuild_tensor_v3 record's storage is not an UntypedStorage")
    name = _dtype_name(dtype)
    if not isinstance(dtype, _C.dtype) or name not in _NUMPY:
        raise RuntimeError(f"[load] a _rebuild_tensor_v3 record of dtype {dtype!r}, which dygrad does not load")
    layout = np.dtype(_NUMPY[name])
    if storage.array.size % layout.itemsize:
        raise RuntimeError(f"[load] storage {storage.key!r}: {storage.array.size} bytes do not hold whole {name} "
                           f"elements")
    typed = _LoadedStorage(storage.array.view(layout), name, storage.key, storage.device)
    return _rebuild_tensor_v2(typed, storage_offset, size, stride, requires_grad, backward_hooks, metadata)


def _host_elements(storage):
    """The storage's elements as a 1-d tensor on the host (bfloat16 widened from its bits, as _rebuild_tensor_v2)."""
    if storage.dtype == "bfloat16":
        return _C.from_numpy((storage.array.astype("<u4") << 16).view("<f4")).to(_C.bfloat16)
    if storage.dtype in _FLOAT8:
        return _C.from_numpy(storage.array).view(getattr(_C, storage.dtype))
    return _C.from_numpy(storage.array)


def _on_device(storage, host_view, storage_offset, size, stride, numel):
    """A loaded tensor on its storage's device: a contiguous one is a view of the storage copied there once, so the
    tensors over one storage share its memory there as on the host (torch's); any other layout is a copy of its own
    (dygrad has no strided view of a flat buffer)."""
    if tuple(stride) == contiguous_strides(size):
        if storage.on_device is None:
            storage.on_device = _host_elements(storage).to(storage.device)
        return storage.on_device[storage_offset:storage_offset + numel].view(size)
    return host_view.to(storage.device)


def _rebuild_parameter(data, requires_grad, backward_hooks):
    from .nn import Parameter
    return Parameter(data, requires_grad)


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    param = _rebuild_parameter(data, requires_grad, backward_hooks)
    if state:
        param.__dict__.update(state)
    return param


def _from_literal(kind):
    """set, frozenset and bytearray as a file may call them: from the literal (a list, str or bytes) the pickle
    spells out, as pickle writes them; `bytearray(2**40)` or `set(range(2**40))` would fill memory."""
    def build(*args):
        if args and not isinstance(args[0], (list, tuple, str, bytes)):
            raise pickle.UnpicklingError(f"[load] {kind.__name__}() of a {type(args[0]).__name__}: a file may "
                                         f"build a {kind.__name__} from a literal only")
        return kind(*args)
    build.__name__ = build.__qualname__ = kind.__name__
    return build


def _torch_globals():
    table = {("collections", "OrderedDict"): collections.OrderedDict,
             ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
             ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
             ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
             ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
             ("torch", "Size"): Size, ("torch", "device"): device,
             ("builtins", "set"): _from_literal(set), ("builtins", "frozenset"): _from_literal(frozenset),
             ("builtins", "complex"): complex, ("builtins", "slice"): slice, ("builtins", "range"): range,
             ("builtins", "bytearray"): _from_literal(bytearray),
             ("_codecs", "encode"): codecs.encode}
    for name in _STORAGES:
        table[("torch", name)] = _StorageType(name)
    table[("torch.storage", "UntypedStorage")] = table[("torch", "UntypedStorage")]  # where torch's pickles name it
    for name in _DTYPE_NAMES:
        table[("torch", name)] = getattr(_C, name)
    for alias, name in (("float", "float32"), ("double", "float64"), ("half", "float16"), ("long", "int64"),
                        ("int", "int32"), ("short", "int16")):
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


def _restore_location(location):
    """The device a storage tagged `location` is restored to (torch's default_restore_location): None for the CPU."""
    if not isinstance(location, str):
        raise RuntimeError(f"[load] don't know how to restore data location {str(location)[:50]!r} (a storage's "
                           f"location is a str such as 'cpu' or 'test:0')")
    kind = location.split(":")[0]
    if kind == "cpu":
        return None
    if kind == "cuda":
        raise RuntimeError("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
                           "False. If you are running on a CPU-only machine, please use torch.load with "
                           "map_location=torch.device('cpu') to map your storages to the CPU.")
    if kind == "test":
        try:
            return device(_C._check_device("load", location))
        except RuntimeError as e:
            raise RuntimeError(f"[load] attempting to deserialize a storage on device {location!r}, which is not "
                               f"available ({e}); pass map_location (such as 'cpu') to put it elsewhere") from None
    raise RuntimeError(f"[load] don't know how to restore data location {location[:50]!r} (as torch: a storage is "
                       f"'cpu' or a device's; pass map_location to choose)")


def _map_storage(storage, location, map_location):
    """Sets where the tensors of a storage saved at `location` go, as torch's map_location says: None, the saved
    location; a str or device, that device; a dict, the location it maps `location` to (itself when absent); a
    callable, called with the storage (on the host, a dygrad.UntypedStorage) and the location: None means the saved
    location, a host storage its bytes on the host (dygrad's storages are host memory: map to a device with a str,
    device or dict)."""
    if map_location is None:
        target = location
    elif isinstance(map_location, dict):
        target = map_location.get(location, location)
    elif isinstance(map_location, str):
        target = map_location
    elif callable(map_location):
        from .storage import UntypedStorage
        given = UntypedStorage._of(storage.array.reshape(-1).view(np.uint8))
        result = map_location(given, location)
        if result is None:
            target = location
        elif isinstance(result, UntypedStorage):
            if result is not given:
                if result.nbytes() != given.nbytes():
                    raise RuntimeError(f"[load] map_location returned a storage of {result.nbytes()} bytes for "
                                       f"storage {storage.key!r} of {given.nbytes()} bytes")
                storage.array = result._bytes.view(storage.array.dtype)
            return
        else:
            raise RuntimeError(f"[load] map_location(storage, location) returned a {type(result).__name__}: expected "
                            f"None or a storage (to put storages on a device, pass map_location as a str, a "
                            f"device or a dict)")
    else:
        raise TypeError(f"[load] map_location must be None, a str, a device, a dict or a callable, not "
                        f"{type(map_location).__name__}")
    storage.device = _restore_location(str(target))


def _entry_offset(path_or_file, info):
    """Where an uncompressed entry's bytes start in the file (after its local header)."""
    path_or_file.seek(info.header_offset)
    header = path_or_file.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise RuntimeError(f"[load] the zip archive is damaged: no local header for {info.filename}")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    if path_or_file.read(name_length) != info.filename.encode("utf-8"):  # as zipfile checks when it reads
        raise RuntimeError(f"[load] the zip archive is damaged: the local header of {info.filename} names "
                           f"another file")
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
            return _load_safetensors(fh, map_location)
        raise RuntimeError("[load] not a checkpoint dygrad reads: expected torch's zip format (torch >= 1.6) or "
                           "safetensors; the legacy (pre-1.6) torch format is not supported")
    finally:
        if is_path:
            fh.close()


# What zipfile raises on a damaged archive; each becomes a RuntimeError, as torch's reader raises.
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, struct.error, zlib.error, NotImplementedError,
               ValueError, OverflowError)


def _load_zip(fh, path, map_location, weights_only, use_mmap):
    archive_size = file_size_of(fh)
    try:
        zf = zipfile.ZipFile(fh)
    except _ZIP_ERRORS as e:
        raise RuntimeError(f"[load] the zip archive is damaged: {e}") from None
    with zf:
        names = zf.namelist()
        pkl = next((n for n in names if n.endswith("/data.pkl") and n.count("/") == 1), None)
        if pkl is None:
            raise RuntimeError("[load] the zip archive has no <prefix>/data.pkl: not a torch checkpoint")
        prefix = pkl[: -len("data.pkl")]

        def check_entry(info):
            if info.compress_type != zipfile.ZIP_STORED:  # (mmap maps the bytes as they are stored)
                raise RuntimeError(f"[load] {info.filename} is compressed; torch writes every entry stored")
            if info.flag_bits & 0x61:  # encrypted (0x1, 0x40) or patched (0x20): zipfile refuses to read them
                raise RuntimeError(f"[load] {info.filename} is encrypted or patched (zip flags {info.flag_bits:#x})")
            # before reading: a size the archive cannot hold is never allocated
            if info.header_offset < 0 or info.header_offset + info.file_size > archive_size:
                raise RuntimeError(f"[load] {info.filename} claims {info.file_size} bytes at offset "
                                   f"{info.header_offset}, past the end of the {archive_size}-byte archive")

        def read(info):
            check_entry(info)
            try:
                return zf.read(info)
            except _ZIP_ERRORS as e:
                raise RuntimeError(f"[load] the zip archive is damaged: {info.filename}: {e}") from None

        byteorder = read(zf.getinfo(prefix + "byteorder")) if prefix + "byteorder" in names else b"little"
        if byteorder not in (b"little", b"big"):
            raise RuntimeError(f"[load] {prefix}byteorder is {byteorder[:20]!r}, not 'little' or 'big'")
        loaded = {}

        def load_storage(storage_type, key, location, numel):
            if key in loaded:  # the first reference to a storage says what it is; later ones reuse it, as torch
                return loaded[key]
            name = f"{prefix}data/{key}"
            if name not in names:
                raise RuntimeError(f"[load] storage {key!r}: the archive has no entry {name}")
            info = zf.getinfo(name)
            layout = np.dtype(_NUMPY[storage_type.dtype]).newbyteorder("<" if byteorder == b"little" else ">")
            if not isinstance(numel, int) or numel < 0 or numel * layout.itemsize != info.file_size:
                raise RuntimeError(f"[load] storage {key!r}: {name} holds {info.file_size} bytes, the file says "
                                   f"{numel!r} elements of {layout.itemsize} bytes ({storage_type.name})")
            check_entry(info)
            if use_mmap:
                data_offset = _entry_offset(fh, info)
                if data_offset + info.file_size > archive_size:
                    raise RuntimeError(f"[load] storage {key!r}: {name} runs past the end of the archive")
                array = (np.memmap(path, dtype=layout, mode="c", offset=data_offset, shape=(numel,)) if numel
                         else np.empty(0, dtype=layout))
            else:
                array = np.frombuffer(bytearray(read(info)), dtype=layout)
            if array.dtype.byteorder == ">":  # once per storage: the views are then native, never copied
                array = array.byteswap().view(array.dtype.newbyteorder("="))
            if storage_type.dtype == "bool":
                array = normalize_bool(array)
            storage = _LoadedStorage(array, storage_type.dtype, key)
            _map_storage(storage, location, map_location)
            loaded[key] = storage
            return storage

        data = read(zf.getinfo(pkl))
        unpickler = _Unpickler(io.BytesIO(data), load_storage, weights_only)
        if not weights_only:  # the caller trusts the file: its code's exceptions are its own
            return unpickler.load()
        _check_opcodes(data, pkl)
        try:
            return unpickler.load()
        except (RuntimeError, pickle.UnpicklingError, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001: a damaged pickle raises anything; weights_only names it one way
            raise pickle.UnpicklingError(f"[load] the pickle in {pkl} is damaged: {type(e).__name__}: "
                                         f"{str(e)[:300]}") from e


# Pickle protocol 5's buffer opcodes: torch never writes them, and CPython's C unpickler mishandles a BYTEARRAY8
# whose length lies (it frees the bytearray while a view of it is exported: "SystemError: deallocated bytearray
# object has exported buffers").
_REFUSED_OPCODES = {"BYTEARRAY8", "NEXT_BUFFER", "READONLY_BUFFER"}


def _check_opcodes(data, name):
    """Walks the pickle's opcodes before it is run (pickletools checks each length against the bytes left)."""
    try:
        for opcode, _, _ in pickletools.genops(data):
            if opcode.name in _REFUSED_OPCODES:
                raise pickle.UnpicklingError(f"[load] the pickle in {name} uses {opcode.name}, which "
                                             f"weights_only=True refuses (torch never writes it)")
    except (ValueError, struct.error) as e:
        raise pickle.UnpicklingError(f"[load] the pickle in {name} is damaged: {e}") from None


# safetensors dtype -> (NumPy layout of the bytes, dygrad dtype name); BF16 is read as its 16-bit pattern.
_SAFETENSORS_DTYPES = {"F64": ("<f8", "float64"), "F32": ("<f4", "float32"), "F16": ("<f2", "float16"),
                       "BF16": ("<u2", "bfloat16"), "I64": ("<i8", "int64"), "I32": ("<i4", "int32"),
                       "I16": ("<i2", "int16"), "I8": ("i1", "int8"), "U64": ("<u8", "uint64"),
                       "U32": ("<u4", "uint32"), "U16": ("<u2", "uint16"), "U8": ("u1", "uint8"),
                       "BOOL": ("?", "bool"), "F8_E4M3": ("u1", "float8_e4m3fn"), "F8_E5M2": ("u1", "float8_e5m2"),
                       "C64": ("<c8", "complex64")}


def _load_safetensors(fh, map_location=None):
    entries, _, data_size = read_safetensors_header(fh, file_size_of(fh) - fh.tell())
    data = bytearray(fh.read(data_size))
    out = collections.OrderedDict()
    for e in entries:
        if e.dtype not in _SAFETENSORS_DTYPES:
            raise TypeError(f"[load] safetensors dtype {e.dtype} of {e.name} is not supported by dygrad")
        layout, dtype = _SAFETENSORS_DTYPES[e.dtype]
        itemsize = SAFETENSORS_ITEMSIZE[e.dtype]
        array = np.frombuffer(data, dtype=layout, count=(e.end - e.begin) // itemsize, offset=e.begin)
        if dtype == "bool":
            array = normalize_bool(array)
        storage = _LoadedStorage(array, dtype, e.name)
        _map_storage(storage, "cpu", map_location)  # a safetensors file's tensors are saved from the host
        out[e.name] = _rebuild_tensor_v2(storage, 0, e.shape, contiguous_strides(e.shape), False, None)
    return out
