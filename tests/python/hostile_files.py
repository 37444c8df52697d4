"""Hostile checkpoint files, crafted here (nothing downloaded): torch zip files whose tensor records, storages,
archive or pickle lie, and safetensors files whose headers lie; plus valid files the fuzzer (fuzz_loaders.py)
mutates. Pure Python: neither dygrad nor torch is imported, so both load the same bytes.

`corpus()` returns Case(name, format, data, expect) where expect maps a loader ("load", "load_mmap",
"load_file") to ("ok", None) or (exception type name, regex of its message); `run_cases(directory)` (the child
of test_untrusted_files.py: `python hostile_files.py --run DIR`) loads each file with each loader and prints one
JSON line per attempt, so a crash names the case it died in."""
import collections
import io
import json
import os
import pickle
import struct
import sys
import zipfile


# --- torch's zip format, written by name ---------------------------------------------------------------------------
class TorchGlobal:
    """A global written into the pickle by name (torch._utils._rebuild_tensor_v2, torch.FloatStorage, ...)."""

    def __init__(self, module, name):
        self.module, self.name = module, name

    def __call__(self, *args):  # pickle wants a callable in a reduce tuple; this one is only written
        raise TypeError("written by name only")


class Storage:
    def __init__(self, key, numel, kind="FloatStorage"):
        self.key, self.numel, self.kind = key, numel, kind


class Record:
    """A tensor record: torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)."""

    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())


class Call:
    """Any global called with arguments: module.name(*args)."""

    def __init__(self, module, name, *args):
        self.function, self.args = TorchGlobal(module, name), args


class _Pickler(pickle._Pickler):
    dispatch = dict(pickle._Pickler.dispatch)

    def save_global_by_name(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
        self.memoize(obj)

    dispatch[TorchGlobal] = save_global_by_name

    def reducer_override(self, obj):
        if isinstance(obj, Record):
            return (TorchGlobal("torch._utils", "_rebuild_tensor_v2"), obj.args)
        if isinstance(obj, Call):
            return (obj.function, obj.args)
        return NotImplemented

    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", TorchGlobal("torch", obj.kind), obj.key, "cpu", obj.numel)
        return None


def pickle_bytes(obj):
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue()


def torch_zip(obj=None, storages=None, data_pkl=None, byteorder=b"little", compress=()):
    """A torch checkpoint: archive/data.pkl (the pickle of obj, or data_pkl's bytes), archive/data/<key>."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        def put(name, data):
            zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data,
                        zipfile.ZIP_DEFLATED if name in compress else zipfile.ZIP_STORED)
        put("archive/data.pkl", data_pkl if data_pkl is not None else pickle_bytes(obj))
        if byteorder is not None:
            put("archive/byteorder", byteorder)
        for key, data in (storages or {}).items():
            put(f"archive/data/{key}", data)
        put("archive/version", b"3\n")
    return out.getvalue()


def patch_central_directory(archive, name, offset, value):
    """The archive with the bytes at `offset` of `name`'s central directory record (what zipfile reads) set."""
    data = bytearray(archive)
    at = data.index(b"PK\x01\x02")
    while True:
        name_length = struct.unpack("<H", data[at + 28:at + 30])[0]
        if data[at + 46:at + 46 + name_length] == name.encode():
            data[at + offset:at + offset + len(value)] = value
            return bytes(data)
        at = data.index(b"PK\x01\x02", at + 4)


def patch_entry_size(archive, name, size):
    """The archive with `name`'s compressed and uncompressed sizes in the central directory set to `size`."""
    return patch_central_directory(archive, name, 20, struct.pack("<II", size, size))


FOUR_FLOATS = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)


def one_record(offset, size, stride, numel=4, data=FOUR_FLOATS, kind="FloatStorage"):
    return torch_zip({"t": Record(Storage("0", numel, kind), offset, size, stride)}, {"0": data})


def valid_pt():
    """A state dict of several dtypes, shared storages and views: the fuzzer's seed."""
    base = Storage("0", 12)
    return torch_zip(collections.OrderedDict([
        ("w", Record(base, 0, (3, 4), (4, 1))), ("view", Record(base, 5, (2, 2), (4, 1))),
        ("t", Record(base, 0, (4, 3), (1, 4))), ("i", Record(Storage("1", 3, "LongStorage"), 0, (3,), (1,))),
        ("b16", Record(Storage("2", 2, "BFloat16Storage"), 0, (2,), (1,))),
        ("mask", Record(Storage("3", 3, "BoolStorage"), 0, (3,), (1,))),
        ("step", 7), ("lr", 0.5), ("names", ["a", "b"])]),
        {"0": struct.pack("<12f", *range(12)), "1": struct.pack("<3q", 5, -6, 7), "2": b"\x80\x3f\x00\x40",
         "3": b"\x01\x00\x01"})


# --- safetensors ---------------------------------------------------------------------------------------------------
def safetensors(header, data, length=None, raw_header=None):
    raw = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def st_entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def valid_safetensors(bf16=False):
    """The fuzzer's seed: several dtypes, metadata; with a BF16 tensor (which the trainer's load_file refuses)."""
    data = struct.pack("<6f", *range(6)) + struct.pack("<2q", 3, -4) + b"\x01\x00" + b"\x80\x3f\x00\x40" * bf16
    header = {"__metadata__": {"step": "3"}, "w": st_entry("F32", [2, 3], 0, 24), "n": st_entry("I64", [2], 24, 40),
              "mask": st_entry("BOOL", [2], 40, 42)}
    if bf16:
        header["h"] = st_entry("BF16", [2], 42, 46)
    return safetensors(header, data)


# --- the corpus ----------------------------------------------------------------------------------------------------
Case = collections.namedtuple("Case", "name format data expect")
PT_LOADERS = ("load", "load_mmap")
ST_LOADERS = ("load", "load_file")


def pt_case(name, data, error, message=None):
    expect = ("ok", None) if error == "ok" else (error, message)
    return Case(name, "pt", data, {loader: expect for loader in PT_LOADERS})


def st_case(name, data, error, message=None, load_error=None):
    expect = ("ok", None) if error == "ok" else (error, message)
    return Case(name, "safetensors", data, {"load": load_error or expect, "load_file": expect})


def corpus():
    valid = valid_pt()
    st_data16 = struct.pack("<4f", 1, 2, 3, 4)
    past = "past the storage's end"
    cases = [
        pt_case("pt_valid", valid, "ok"),
        # the findings: a record that claims more than its storage holds
        pt_case("pt_size_past_storage", one_record(0, [8], [1]), "RuntimeError", past),
        pt_case("pt_offset_past_storage", one_record(3, [4], [1]), "RuntimeError", past),
        pt_case("pt_negative_stride", one_record(3, [4], [-1]), "RuntimeError", "negative stride"),
        pt_case("pt_huge_stride", one_record(0, [2], [2**40]), "RuntimeError", past),
        pt_case("pt_huge_stride_2d", one_record(0, [2, 2], [1, 2**61]), "RuntimeError", f"{past}|overflows"),
        pt_case("pt_negative_size", one_record(0, [-1], [1]), "RuntimeError", "negative"),
        pt_case("pt_negative_offset", one_record(-1, [2], [1]), "RuntimeError", "offset is negative"),
        pt_case("pt_numel_overflow", one_record(0, [2**32, 2**32], [1, 1]), "RuntimeError", "overflow"),
        pt_case("pt_stride_extent_overflow", one_record(0, [2], [2**63 - 1]), "RuntimeError", "overflow|past"),
        pt_case("pt_empty_stride_bytes_overflow", one_record(1, [0, 4], [-1, 2**61], numel=2, kind="LongStorage"),
                "RuntimeError", "stride times its size overflows"),
        pt_case("pt_strides_fewer_than_sizes", one_record(0, [2, 2], [1]), "RuntimeError", "2 sizes but 1"),
        pt_case("pt_size_not_integers", one_record(0, ["a"], [1]), "RuntimeError", "not a sequence of integers"),
        # what torch accepts and so does dygrad: nothing addressed, or a dimension of size 1
        pt_case("pt_empty_far_offset", one_record(100, [0], [1]), "ok"),
        pt_case("pt_stride_zero", one_record(0, [5], [0]), "ok"),
        pt_case("pt_size_one_negative_stride", one_record(0, [1], [-1]), "ok"),
        pt_case("pt_bool_byte_two", one_record(0, [3], [1], numel=3, data=b"\x02\x00\x01", kind="BoolStorage"),
                "ok"),
        # storages that lie about their size
        pt_case("pt_storage_bigger_than_entry", one_record(0, [8], [1], numel=8), "RuntimeError", "holds 16 bytes"),
        pt_case("pt_storage_smaller_than_entry", one_record(0, [2], [1], numel=2), "RuntimeError", "holds 16 bytes"),
        pt_case("pt_storage_huge_numel", one_record(0, [2], [1], numel=2**61), "RuntimeError", "holds 16 bytes"),
        pt_case("pt_storage_negative_numel", one_record(0, [2], [1], numel=-1), "RuntimeError", "holds 16 bytes"),
        pt_case("pt_storage_missing_entry", torch_zip({"t": Record(Storage("7", 4), 0, [4], [1])}, {}),
                "RuntimeError", "no entry archive/data/7"),
        pt_case("pt_record_storage_is_an_int", torch_zip({"t": Call("torch._utils", "_rebuild_tensor_v2", 5, 0, (1,),
                                                                    (1,), False, collections.OrderedDict())}),
                "RuntimeError", "not a storage"),
        # a damaged archive
        pt_case("pt_truncated_zip", valid[: len(valid) // 2], "RuntimeError", "zip archive is damaged"),
        pt_case("pt_truncated_to_local_header", valid[:40], "RuntimeError", "zip archive is damaged"),
        pt_case("pt_compressed_storage", torch_zip({"t": Record(Storage("0", 4), 0, [4], [1])}, {"0": FOUR_FLOATS},
                                                   compress=("archive/data/0",)), "RuntimeError", "compressed"),
        pt_case("pt_entry_size_lies", patch_entry_size(one_record(0, [2**29 - 4], [1], numel=2**29 - 4),
                                                       "archive/data/0", 2**31 - 16), "RuntimeError", "past the end"),
        pt_case("pt_entry_encrypted", patch_central_directory(one_record(0, [4], [1]), "archive/data/0", 8,
                                                              b"\x01\x00"),
                "RuntimeError", "encrypted"),
        pt_case("pt_byteorder_garbage", torch_zip({"t": 1}, byteorder=b"sideways"), "RuntimeError", "byteorder"),
        # a pickle that is refused (weights_only) or damaged
        pt_case("pt_pickle_calls_os_system", torch_zip({"t": Call("os", "system", "true")}), "UnpicklingError",
                "os.system"),
        pt_case("pt_pickle_bad_opcode", torch_zip(data_pkl=b"\x80\x02\xff."), "UnpicklingError", ""),
        pt_case("pt_pickle_truncated", torch_zip(data_pkl=pickle_bytes({"t": [1, 2, 3]})[:-4]), "UnpicklingError", ""),
        pt_case("pt_pickle_stack_underflow", torch_zip(data_pkl=b"\x80\x02s."), "UnpicklingError", ""),
        pt_case("pt_pickle_bytearray8_length_lies",
                torch_zip(data_pkl=b"\x80\x05\x96" + struct.pack("<Q", 2**61) + b"x."),
                "UnpicklingError", "damaged"),
        pt_case("pt_pickle_next_buffer", torch_zip(data_pkl=b"\x80\x05\x97."), "UnpicklingError", "NEXT_BUFFER"),
        pt_case("pt_pickle_bytearray_huge", torch_zip({"t": Call("builtins", "bytearray", 2**40)}), "UnpicklingError",
                "from a literal"),
        pt_case("pt_pickle_set_of_range", torch_zip({"t": Call("builtins", "set", Call("builtins", "range", 2**40))}),
                "UnpicklingError", "from a literal"),
        pt_case("pt_pickle_ordered_dict_of_int", torch_zip({"t": Call("collections", "OrderedDict", 1)}),
                "UnpicklingError", "damaged"),
        # safetensors
        st_case("st_valid", valid_safetensors(), "ok"),
        st_case("st_valid_bf16", valid_safetensors(bf16=True), "TypeError", "BF16 of h is not supported",
                load_error=("ok", None)),
        st_case("st_empty_tensor", safetensors({"e": st_entry("F32", [0, 3], 0, 0), "w": st_entry("F32", [4], 0, 16)},
                                               st_data16), "ok"),
        st_case("st_bool_byte_two", safetensors({"m": st_entry("BOOL", [2], 0, 2)}, b"\x07\x00"), "ok"),
        st_case("st_negative_offset", safetensors({"w": st_entry("F32", [1], -4, 0), "v": st_entry("F32", [4], 0, 16)},
                                                  st_data16), "ValueError", "two non-negative integers"),
        st_case("st_end_before_begin", safetensors({"w": st_entry("F32", [1], 16, 12)}, st_data16), "ValueError",
                "end before they begin"),
        st_case("st_overlapping", safetensors({"a": st_entry("F32", [4], 0, 16), "b": st_entry("F32", [2], 8, 16)},
                                              st_data16), "ValueError", "overlaps"),
        st_case("st_hole", safetensors({"a": st_entry("F32", [1], 0, 4), "b": st_entry("F32", [2], 8, 16)}, st_data16),
                "ValueError", "hole"),
        st_case("st_offsets_past_data", safetensors({"w": st_entry("F32", [16], 0, 64)}, st_data16), "ValueError",
                "cover 64 bytes of a data section of 16"),
        st_case("st_trailing_bytes", safetensors({"w": st_entry("F32", [2], 0, 8)}, st_data16), "ValueError",
                "cover 8 bytes of a data section of 16"),
        st_case("st_shape_negative", safetensors({"w": st_entry("F32", [-1], 0, 16)}, st_data16), "ValueError",
                "not a list of non-negative integers"),
        st_case("st_shape_float", safetensors({"w": st_entry("F32", [4.0], 0, 16)}, st_data16), "ValueError",
                "not a list of non-negative integers"),
        st_case("st_shape_disagrees_with_offsets", safetensors({"w": st_entry("F32", [2], 0, 16)}, st_data16),
                "ValueError", "is 8 bytes"),
        st_case("st_shape_huge_dims_and_a_zero",
                safetensors({"w": st_entry("F32", [2**62, 2**62, 0], 0, 16)}, st_data16),
                "ValueError", "is 0 bytes"),
        st_case("st_huge_shape", safetensors({"w": st_entry("F32", [2**40], 0, 2**42)}, st_data16), "ValueError",
                "cover 4398046511104 bytes"),
        st_case("st_unknown_dtype", safetensors({"w": st_entry("F128", [1], 0, 16)}, st_data16), "ValueError",
                "unknown dtype"),
        # every dtype of the format loads now (issue 41): the 4-byte and 1-byte ones over the same bytes
        st_case("st_u32", safetensors({"w": st_entry("U32", [4], 0, 16)}, st_data16), "ok"),
        # (the trainer's NumPy reader, safetensors_io.load_file, has no float8: it refuses the dtype)
        st_case("st_float8", safetensors({"w": st_entry("F8_E4M3", [16], 0, 16)}, st_data16), "TypeError",
                "not supported here", load_error=("ok", None)),
        st_case("st_duplicate_keys", safetensors(None, st_data16, raw_header=b'{"w":{"dtype":"F32","shape":[4],'
                                                 b'"data_offsets":[0,16]},"w":{"dtype":"F32","shape":[2],'
                                                 b'"data_offsets":[0,8]}}'), "ValueError", "twice"),
        st_case("st_metadata_not_strings", safetensors({"__metadata__": {"step": 3}, "w": st_entry("F32", [4], 0, 16)},
                                                       st_data16), "ValueError", "__metadata__"),
        st_case("st_entry_extra_field", safetensors({"w": {**st_entry("F32", [4], 0, 16), "x": 1}}, st_data16),
                "ValueError", "expected"),
        st_case("st_header_length_past_eof", safetensors({"w": st_entry("F32", [4], 0, 16)}, st_data16,
                                                         length=2**40), "ValueError", "more than the format's limit"),
        st_case("st_header_length_past_eof_small", safetensors({"w": st_entry("F32", [4], 0, 16)}, st_data16,
                                                               length=4096), "ValueError", "runs past the end"),
        st_case("st_header_not_utf8", safetensors(None, st_data16, raw_header=b'{"w\xff":{"dtype":"F32","shape":[4],'
                                                  b'"data_offsets":[0,16]}}'), "ValueError", "not UTF-8"),
        st_case("st_header_not_json", safetensors(None, st_data16, raw_header=b'{"w":{"dtype":'), "ValueError",
                "not JSON"),
        st_case("st_header_deep_nesting", safetensors(None, b"", raw_header=b'{"w":' + b"[" * 200000),
                "ValueError", "not JSON|nests too deeply"),
        st_case("st_header_not_an_object", safetensors(None, st_data16, raw_header=b"[1, 2]"), "ValueError",
                "not an object", load_error=("RuntimeError", "not a checkpoint")),
        st_case("st_shorter_than_length_field", b"\x10\x00\x00", "ValueError", "shorter than",
                load_error=("RuntimeError", "not a checkpoint")),
    ]
    return cases


# --- the child: load each file, report each attempt ----------------------------------------------------------------
def tensors_of(value, kind):
    """The tensors (instances of `kind`) in a loaded value, through dicts, lists and tuples, in order."""
    out = []

    def walk(v):
        if isinstance(v, kind):
            out.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
    walk(value)
    return out


def touch_everything(dg, value):
    """Reads every element of every tensor in `value` and writes into each tensor (what a caller would do)."""
    tensors = tensors_of(value, dg.Tensor)
    summary = {i: t.float().tolist() if t.dtype == dg.bfloat16 else t.tolist() for i, t in enumerate(tensors)}
    for t in tensors:  # after every read: tensors of one storage share it, as torch's do
        t.detach().fill_(0)
    dg.synchronize()
    return summary


def load_with(loader, path):
    import dygrad as dg
    if loader == "load":
        return dg.load(path)
    if loader == "load_mmap":
        return dg.load(path, mmap=True)
    from dygrad.safetensors_io import load_file
    arrays, metadata = load_file(path)
    return {k: dg.from_numpy(v) for k, v in arrays.items()}


def run_cases(directory, skip=0):
    """Loads every file of `directory`'s cases.json with each of its loaders; prints a JSON line per attempt
    ({"case", "loader", "outcome": "ok" | exception type, "message", "values"}) before ("start") and after."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # an attempt to allocate terabytes fails here
    import dygrad as dg
    with open(os.path.join(directory, "cases.json")) as fh:
        attempts = json.load(fh)
    for index, (name, loader) in enumerate(attempts):
        if index < skip:
            continue
        print(json.dumps({"start": index}), flush=True)
        try:
            values = touch_everything(dg, load_with(loader, os.path.join(directory, name)))
            result = {"outcome": "ok", "message": None, "values": values}
        except Exception as e:  # noqa: BLE001: the test judges the exception
            result = {"outcome": type(e).__name__, "message": str(e)[:500]}
        print(json.dumps({"case": name, "loader": loader, **result}), flush=True)


def write_corpus(directory):
    """Writes every case's file into `directory` and cases.json (the (file, loader) attempts in order)."""
    attempts = []
    for case in corpus():
        with open(os.path.join(directory, case.name), "wb") as fh:
            fh.write(case.data)
        attempts += [(case.name, loader) for loader in case.expect]
    with open(os.path.join(directory, "cases.json"), "w") as fh:
        json.dump(attempts, fh)
    return attempts


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--run":
        run_cases(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    else:
        print(__doc__)
