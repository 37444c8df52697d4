"""What the checkpoint loaders and savers share: the check of a tensor record against its storage, the complete
check of a safetensors header (every file is untrusted: docs/reliability.md, "Loading files"), and the atomic
write of a file by path (temp file, fsync, rename, directory fsync)."""
import contextlib
import json
import operator
import os
import stat
import struct

INT64_MAX = 2**63 - 1
MAX_DIMS = 64  # NumPy's limit; the views are made with NumPy
MAX_BYTES = 2**62  # an element count times the item size at or past this is refused (4 EiB)
INT_MIN = -(2**62)  # torch reads integers below as symbolic ones, and refuses them in a record


def _ints(values, what, name):
    try:
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise RuntimeError(f"[load] tensor {name}: {what} {values!r} is not a sequence of integers") from None


def contiguous_strides(size):
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def check_tensor_record(name, size, stride, storage_offset, storage_numel, itemsize):
    """Checks that the view (size, stride, storage_offset) of a storage of `storage_numel` elements of `itemsize`
    bytes addresses only elements inside it, before any view is made; returns (size, stride, offset, numel) as
    Python ints. The rules are torch's for a storage-backed tensor (set_ / as_strided): sizes >= 0, an element
    count, a byte extent and each stride times its size below 2**62 bytes, offset >= 0, no negative stride on a
    dimension of size > 1, and offset + sum((size - 1) * stride) < storage_numel unless the tensor is empty; every
    value in [-2**62, 2**63). The stride returned for a dimension of size 1 is 0 if negative or huge (it addresses
    nothing). Raises RuntimeError naming the tensor, the record and the storage size."""
    size = _ints(size, "size", name)
    stride = _ints(stride, "stride", name)
    try:
        offset = operator.index(storage_offset)
    except TypeError:
        raise RuntimeError(f"[load] tensor {name}: storage offset {storage_offset!r} is not an integer") from None

    def refuse(why):
        return RuntimeError(f"[load] tensor {name}: size {list(size)}, stride {list(stride)}, storage offset "
                            f"{offset} over a storage of {storage_numel} elements: {why}")

    if len(size) != len(stride):
        raise refuse(f"{len(size)} sizes but {len(stride)} strides")
    if len(size) > MAX_DIMS:
        raise refuse(f"{len(size)} dimensions; at most {MAX_DIMS} are supported")
    if not all(INT_MIN <= v <= INT64_MAX for v in size + stride + (offset,)):
        raise refuse(f"a value is outside [-2**62, 2**63 - 1] (torch's concrete integers)")
    if any(n < 0 for n in size):
        raise refuse("a size is negative")
    if offset < 0:
        raise refuse("the storage offset is negative")
    # torch refuses a stride whose step over its dimension overflows, even for an empty tensor ("Stride
    # calculation overflowed"); dygrad refuses from 2**62 bytes on (no tensor nears 4 EiB)
    if not all(abs(s) * max(n, 1) * itemsize < MAX_BYTES for n, s in zip(size, stride)):
        raise refuse("a stride times its size overflows (2**62 bytes or more)")
    numel, nonzero = 1, 1
    for n in size:
        numel *= n
        nonzero *= max(n, 1)
    # even for an empty tensor, as torch (whose stride arithmetic overflows on some); no tensor nears 4 EiB
    if nonzero * itemsize >= MAX_BYTES:
        raise refuse("the element count overflows")
    if numel == 0:  # addresses nothing: torch accepts any offset and stride
        return size, stride, offset, 0
    # a dimension of size 1 steps nowhere: its stride is kept unless NumPy could not take it in bytes
    stride = tuple(s if n > 1 or 0 <= s * itemsize <= INT64_MAX else 0 for n, s in zip(size, stride))
    if any(s < 0 for s in stride):
        raise refuse("a negative stride (torch refuses them for a tensor over a storage)")
    highest = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if (highest + 1) * itemsize >= MAX_BYTES:
        raise refuse("the byte extent overflows")
    if highest >= storage_numel:
        raise refuse(f"its last element is element {highest}, past the storage's end")
    return size, stride, offset, numel


def normalize_bool(array):
    """A bool storage from a file may hold bytes other than 0 and 1, which no kernel expects (a count of true
    elements and the loop that writes them could disagree); they are read as true, as NumPy's and torch's
    nonzero would. Returns the array, copied only when it held such bytes."""
    as_bytes = array.view("u1")
    if as_bytes.size and as_bytes.max() > 1:
        return (as_bytes != 0).view(array.dtype)
    return array


# --- safetensors ---------------------------------------------------------------------------------------------------
# The dtypes of the format and their sizes in bytes (safetensors' Dtype); a reader may support fewer.
SAFETENSORS_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
                        "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8, "C64": 8}
SAFETENSORS_MAX_HEADER = 100_000_000  # the safetensors package's limit


class SafetensorsEntry:
    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name, dtype, shape, begin, end):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end


def _refuse_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"[safetensors] the header names {key!r} twice")
        out[key] = value
    return out


def read_safetensors_header(fh, file_size):
    """Reads and checks the header of a safetensors file whose first byte is at fh's position and which is
    `file_size` bytes long. Returns ([SafetensorsEntry] in file order, {str: str} metadata, data_size); the data
    section is the `data_size` bytes after the header. Checks what the safetensors package checks, and refuses
    duplicate names (JSON keeps the last; a reader that kept the first would see another tensor): the length
    within the file and at most 100 MB, UTF-8, a JSON object, metadata a map of strings, each entry's dtype known,
    its shape non-negative integers, data_offsets [begin, end] integers with the entries sorted by begin tiling
    the data section exactly (no overlap, no hole, nothing after), end - begin == numel * itemsize. Raises
    ValueError naming the entry."""
    prefix = fh.read(8)
    if len(prefix) < 8:
        raise ValueError(f"[safetensors] the file is {file_size} bytes: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", prefix)
    if n > SAFETENSORS_MAX_HEADER:
        raise ValueError(f"[safetensors] header length {n} is more than the format's limit of "
                         f"{SAFETENSORS_MAX_HEADER} bytes")
    if 8 + n > file_size:
        raise ValueError(f"[safetensors] header length {n} runs past the end of the {file_size}-byte file")
    raw = fh.read(n)
    if len(raw) != n:
        raise ValueError(f"[safetensors] the header is cut: {len(raw)} of {n} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"[safetensors] the header is not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        header = json.loads(text, object_pairs_hook=_refuse_duplicates)
    except json.JSONDecodeError as e:
        raise ValueError(f"[safetensors] the header is not JSON: {e}") from None
    except RecursionError:
        raise ValueError("[safetensors] the header nests too deeply") from None
    if not isinstance(header, dict):
        raise ValueError(f"[safetensors] the header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError("[safetensors] __metadata__ must map strings to strings")
    entries = [_entry(name, info) for name, info in header.items()]
    data_size = file_size - 8 - n
    position = 0
    for e in sorted(entries, key=lambda e: (e.begin, e.end)):
        if e.begin != position:
            why = "overlaps the previous entry" if e.begin < position else f"leaves a hole after byte {position}"
            raise ValueError(f"[safetensors] tensor {e.name!r}: data_offsets [{e.begin}, {e.end}] {why}")
        position = e.end
    if position != data_size:
        raise ValueError(f"[safetensors] the entries cover {position} bytes of a data section of {data_size} bytes "
                         f"(the file is cut, or has bytes no entry describes)")
    return entries, metadata, data_size


def _entry(name, info):
    if not isinstance(info, dict) or set(info) - {"dtype", "shape", "data_offsets"} or len(info) != 3:
        raise ValueError(f"[safetensors] tensor {name!r}: expected {{dtype, shape, data_offsets}}, got {info!r}"[:300])
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype not in SAFETENSORS_ITEMSIZE:
        raise ValueError(f"[safetensors] tensor {name!r}: unknown dtype {dtype!r}")

    def is_int(v):
        return type(v) is int and 0 <= v <= INT64_MAX

    if not isinstance(shape, list) or not all(is_int(d) for d in shape):
        raise ValueError(f"[safetensors] tensor {name!r}: shape {shape!r} is not a list of non-negative integers")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(is_int(v) for v in offsets):
        raise ValueError(f"[safetensors] tensor {name!r}: data_offsets {offsets!r} are not two non-negative "
                         f"integers")
    begin, end = offsets
    if end < begin:
        raise ValueError(f"[safetensors] tensor {name!r}: data_offsets [{begin}, {end}] end before they begin")
    numel = 1
    for d in shape:
        numel *= d
    nbytes = numel * SAFETENSORS_ITEMSIZE[dtype]
    if nbytes != end - begin:
        raise ValueError(f"[safetensors] tensor {name!r}: shape {shape} of {dtype} is {nbytes} bytes, its "
                         f"data_offsets [{begin}, {end}] hold {end - begin}")
    return SafetensorsEntry(name, dtype, shape, begin, end)


def file_size_of(fh):
    position = fh.tell()
    size = fh.seek(0, os.SEEK_END)
    fh.seek(position)
    return size


# --- atomic writes -------------------------------------------------------------------------------------------------
# Whether atomic_write replaces a symbolic link's target (as writing through the link would) or the link itself.
# The tuner's script trials set it False: their working directory is an overlay of links to the user's files, and a
# save there must replace the link with a scratch file, never the user's file (docs/tune.md, "A script of your own").
FOLLOW_LINKS = True


@contextlib.contextmanager
def atomic_write(path):
    """Yields a binary file to write `path`'s new contents into: a temp file `<path>.tmp.<pid>` in the same
    directory, fsynced and renamed over `path` (atomic on POSIX), then the directory fsynced; on an error the
    temp file is removed and `path` is untouched. A kill at any moment leaves the old file or the new one, never
    a torn one (train.remove_stale_temp_files removes a killed save's temp file). A symbolic link is followed
    (its target is replaced, as writing through it would; with FOLLOW_LINKS False the link itself is); a path that
    exists and is not a regular file (a device, a FIFO) is written in place, as it cannot be replaced."""
    path = os.path.realpath(os.fspath(path)) if FOLLOW_LINKS else os.path.abspath(os.fspath(path))
    try:
        existing = os.stat(path)
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        with open(path, "wb") as fh:
            yield fh
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            if existing is not None:  # the new file keeps the old one's permissions, as writing in place would
                os.chmod(tmp, stat.S_IMODE(existing.st_mode))
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    dir_fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
