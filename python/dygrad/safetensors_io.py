"""Reading and writing the safetensors format (a little-endian u64 header length, a JSON header mapping names
to dtype/shape/data_offsets plus optional string __metadata__, then the raw tensor bytes), with atomic saves:
the file is written under a temporary name, fsynced, then renamed over the old one, so a crash mid-save never
loses the previous checkpoint (_checkpoint_files.atomic_write). Loading checks the header completely and each
tensor against its bytes before reading it (_checkpoint_files.read_safetensors_header, check_tensor_record)."""
import json
import struct

import numpy as np

from ._checkpoint_files import (SAFETENSORS_ITEMSIZE, atomic_write, check_tensor_record, contiguous_strides,
                                file_size_of, normalize_bool, read_safetensors_header)

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
           "BOOL": np.bool_, "C64": np.complex64}  # C64: complex64 (safetensors has no complex128)
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def save_file(arrays, path, metadata=None):
    """arrays: {name: numpy array}; metadata: {str: str}."""
    header, offset, blobs = {}, 0, []
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        if a.dtype not in _NAMES:
            raise TypeError(f"[safetensors] unsupported dtype {a.dtype} for {name}")
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # align the data section to 8 bytes
    with atomic_write(path) as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for b in blobs:
            fh.write(b)


def load_file(path):
    """Returns ({name: numpy array}, metadata dict)."""
    with open(path, "rb") as fh:
        entries, metadata, data_size = read_safetensors_header(fh, file_size_of(fh))
        data = fh.read(data_size)
    arrays = {}
    for e in entries:
        if e.dtype not in _DTYPES:
            raise TypeError(f"[safetensors] dtype {e.dtype} of {e.name} is not supported here")
        dtype = np.dtype(_DTYPES[e.dtype]).newbyteorder("<")
        numel = (e.end - e.begin) // SAFETENSORS_ITEMSIZE[e.dtype]
        shape, _, _, _ = check_tensor_record(repr(e.name), e.shape, contiguous_strides(e.shape), 0, numel,
                                             dtype.itemsize)
        array = np.frombuffer(data, dtype=dtype, count=numel, offset=e.begin).reshape(shape).copy()
        arrays[e.name] = normalize_bool(array) if e.dtype == "BOOL" else array
    return arrays, metadata
