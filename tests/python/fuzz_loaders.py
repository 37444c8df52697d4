"""The loader fuzzer: mutates valid torch (.pt) and safetensors files (bytes, the pickle, tensor records, storage
sizes, header fields) and loads each with dg.load, dg.load(mmap=True) and the trainer's load_file. Each load
must either raise one of LOAD_ERRORS or return tensors equal to a reference read that cannot leave the file
(for .pt, an unpickler here that gathers each element by checked indexing; for safetensors, the bytes the header
names sliced out of the file in Python), and torch 2.13 must not refuse a .pt dygrad loads for its records.
Every loaded tensor is then read whole and written (fill_), so a view past its storage crashes here.

The iterations run in a child process (`python fuzz_loaders.py --child SEED ...`) that writes each input to
a file before loading it; the parent restarts the child after a crash (a signal) and keeps the input that did
it in tests/python/fuzz_regressions/loaders/ (replayed by test_load_fuzz.py). Bounded in `make test`
(test_load_fuzz.py: fixed seed, fixed iterations); `make fuzz` runs it for FUZZ_SECONDS:

    python tests/python/fuzz_loaders.py --seconds 1800 --seed 1
"""
import argparse
import io
import json
import os
import pickle
import random
import re
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REGRESSIONS = os.path.join(HERE, "fuzz_regressions", "loaders")
sys.path.insert(0, HERE)
import hostile_files as hf  # noqa: E402

# What a loader may raise for a damaged file (docs/reliability.md, "Loading files"); anything else is a finding.
# torch's errors about a tensor record or a storage: where torch raises one, dygrad must refuse the file too.
TORCH_RECORD_ERRORS = re.compile(r"storage|numel|stride|size|offset|record", re.IGNORECASE)
TORCH_ARCHIVE_ERRORS = re.compile(r"PytorchStreamReader|hasRecord|inline_container")  # its zip reader's
LOAD_ERRORS = (RuntimeError, ValueError, TypeError, pickle.UnpicklingError, MemoryError)
INTERESTING = [0, 1, 2, 3, 4, 7, 8, 12, 16, -1, -2, -4, 2**31 - 1, 2**31, 2**32, 2**40, 2**61, 2**62, 2**63 - 1,
               -(2**63), 2**63, 2**64]


# --- inputs --------------------------------------------------------------------------------------------------------
def mutate_bytes(data, rng):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        if not data:
            break
        at = rng.randrange(len(data))
        if kind == 0:
            data[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            data[at] = rng.choice([0, 0xFF, 0x7F, 0x80, ord("["), ord("-"), ord("9")])
        elif kind == 2:
            del data[at:at + rng.randint(1, 16)]
        elif kind == 3:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            del data[rng.randrange(len(data)):]  # truncated
    return bytes(data)


def random_record_file(rng):
    """A .pt of a few records whose offsets, sizes and strides are drawn near and far from their storage's."""
    kinds = [("FloatStorage", 4), ("LongStorage", 8), ("BFloat16Storage", 2), ("BoolStorage", 1),
             ("HalfStorage", 2), ("ByteStorage", 1)]
    storages, blobs = [], {}
    for key in range(rng.randint(1, 2)):
        kind, itemsize = rng.choice(kinds)
        numel = rng.randint(0, 12)
        declared = numel if rng.random() < 0.85 else rng.choice(INTERESTING + [numel + 1, numel - 1])
        storages.append(hf.Storage(str(key), declared, kind))
        blobs[str(key)] = bytes(rng.randrange(256) for _ in range(numel * itemsize))
    obj = {}
    for i in range(rng.randint(1, 3)):
        storage = rng.choice(storages)
        rank = rng.randint(0, 3)
        size = [rng.choice([0, 1, 2, 3, 4]) if rng.random() < 0.8 else rng.choice(INTERESTING) for _ in range(rank)]
        stride = [rng.choice([0, 1, 2, 3, 4, -1]) if rng.random() < 0.8 else rng.choice(INTERESTING)
                  for _ in range(rank)]
        if rng.random() < 0.05 and stride:
            stride.pop()
        offset = rng.choice([0, 0, 1, 2, 5]) if rng.random() < 0.8 else rng.choice(INTERESTING)
        obj[f"t{i}"] = hf.Record(storage, offset, size, stride)
    return hf.torch_zip(obj, blobs)


def mutate_pickle(seed_file, rng):
    """The seed .pt with its data.pkl's bytes mutated (the zip around it intact)."""
    with zipfile.ZipFile(io.BytesIO(seed_file)) as zf:
        entries = {name: zf.read(name) for name in zf.namelist()}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, mutate_bytes(data, rng) if name.endswith("data.pkl") else data)
    return out.getvalue()


def mutate_safetensors_header(rng):
    data = hf.valid_safetensors(bf16=rng.random() < 0.5)
    (n,) = struct.unpack("<Q", data[:8])
    header, body = json.loads(data[8:8 + n]), data[8 + n:]
    names = [k for k in header if k != "__metadata__"]
    for _ in range(rng.randint(1, 3)):
        try:
            mutate_entry(header, names, rng)
        except (KeyError, IndexError, AttributeError):  # a field an earlier mutation dropped
            pass
    length = None if rng.random() < 0.9 else rng.choice(INTERESTING[:12] + [n + 8, n - 8])
    return hf.safetensors(header, body, length=length if length is None else length % 2**64)


def mutate_entry(header, names, rng):
    entry = header[rng.choice(names)]
    field = rng.choice(["dtype", "shape", "begin", "end", "swap", "copy", "metadata", "drop"])
    if field == "dtype":
        entry["dtype"] = rng.choice(list(hf_itemsizes()) + ["F128", "", 3])
    elif field == "shape":
        entry["shape"] = [rng.choice(INTERESTING + [0, 1, 2, 3, 6]) for _ in range(rng.randint(0, 3))]
    elif field in ("begin", "end"):
        entry["data_offsets"][field == "end"] = rng.choice(INTERESTING + [6, 24, 40, 42, 46])
    elif field == "swap":
        entry["data_offsets"].reverse()
    elif field == "copy":
        entry["data_offsets"] = list(header[rng.choice(names)]["data_offsets"])
    elif field == "metadata":
        header["__metadata__"] = rng.choice([{"a": 1}, [], "x", {"a": "b"}])
    else:
        entry.pop(rng.choice(["dtype", "shape", "data_offsets"]))


def hf_itemsizes():
    return {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
            "F64": 8, "I64": 8, "U64": 8}


def make_input(rng, seeds):
    """(format, bytes) of one fuzzed file."""
    choice = rng.random()
    if choice < 0.3:
        return "pt", random_record_file(rng)
    if choice < 0.45:
        return "pt", mutate_pickle(rng.choice(seeds["pt"]), rng)
    if choice < 0.6:
        return "pt", mutate_bytes(rng.choice(seeds["pt"]), rng)
    if choice < 0.85:
        return "safetensors", mutate_safetensors_header(rng)
    return "safetensors", mutate_bytes(rng.choice(seeds["safetensors"]), rng)


def seed_files(dg):
    buffer = io.BytesIO()
    base = dg.arange(12.0).reshape(3, 4)
    dg.save({"w": base, "view": base[1:, ::2], "t": base.t(), "i": dg.arange(3), "b": dg.ones(2, dtype=dg.bfloat16),
             "m": dg.tensor([True, False]), "step": 3}, buffer)
    return {"pt": [hf.valid_pt(), buffer.getvalue()],
            "safetensors": [hf.valid_safetensors(), hf.valid_safetensors(bf16=True)]}


# --- one iteration: load, check -------------------------------------------------------------------------------------
def corners(t):
    """The tensor itself, or for one too big to read whole (an expanded view: size [2**32], stride [0]) the view
    of its first and last index along every dimension, which holds its lowest and highest addressed elements."""
    if t.numel() <= 1 << 20:
        return t
    return t[tuple(slice(0, n, max(n - 1, 1)) for n in t.shape)]


def as_array(t):
    """A tensor's values as NumPy (bfloat16 as float32; bool as 0/1, whatever byte a file held)."""
    t = corners(t)
    if "bfloat16" in str(t.dtype) or "float8" in str(t.dtype):  # NumPy has neither
        return t.detach().float().numpy()
    array = np.array(t.detach().numpy())
    return array.view(np.uint8) != 0 if array.dtype == np.bool_ else array


def safetensors_reference(data):
    """{name: array} read by slicing the file in Python (never outside it), for a file a loader accepted."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    layouts = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
               "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "u1", "BF16": "<u2", "F8_E4M3": "u1",
               "F8_E5M2": "u1"}
    float8 = {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}  # decoded by torch, the peer
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        array = np.frombuffer(raw, dtype=layouts[info["dtype"]]).reshape(info["shape"])
        if info["dtype"] == "BF16":
            array = (array.astype("<u4") << 16).view("<f4")
        elif info["dtype"] in float8:
            import torch
            array = torch.from_numpy(array.copy()).view(getattr(torch, float8[info["dtype"]])).float().numpy()
        elif info["dtype"] == "BOOL":
            array = array != 0
        out[name] = array
    return out


class _ReferenceArray(np.ndarray):
    __hash__ = object.__hash__  # a tensor may be a dict key or a set member, as a dygrad tensor may


class _ReferenceStorage:
    def __init__(self, kind, array):
        self.kind, self.array = kind, array


class _ReferenceUnpickler(pickle.Unpickler):
    """A reference reader of torch's format for the fuzzer, written apart from dygrad's: each tensor is gathered
    element by element with NumPy fancy indexing into its zip entry's bytes, so an index outside the entry
    raises (IndexError) instead of reading memory. Big views (numel > 2**20) are gathered at their corners."""
    LAYOUTS = {"FloatStorage": "f4", "DoubleStorage": "f8", "HalfStorage": "f2", "BFloat16Storage": "u2",
               "LongStorage": "i8", "IntStorage": "i4", "ByteStorage": "u1", "BoolStorage": "u1"}

    def __init__(self, data, zf, prefix, byteorder):
        super().__init__(io.BytesIO(data))
        self.zf, self.prefix, self.order = zf, prefix, "<" if byteorder == b"little" else ">"
        self.storages = {}

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return self.rebuild
        if (module, name) == ("collections", "OrderedDict"):
            return dict
        if module == "torch" and name in self.LAYOUTS:
            return name
        raise pickle.UnpicklingError(f"reference: {module}.{name}")

    def persistent_load(self, pid):
        kind, key, numel = pid[1], pid[2], pid[4]
        if key in self.storages:  # the first reference says what the storage is, as torch reads it
            return self.storages[key]
        raw = self.zf.read(f"{self.prefix}data/{key}")
        array = np.frombuffer(raw, dtype=self.order + self.LAYOUTS[kind])
        if numel != array.size:
            raise ValueError("reference: storage size")
        self.storages[key] = _ReferenceStorage(kind, array)
        return self.storages[key]

    @staticmethod
    def rebuild(storage, offset, size, stride, *rest):
        return _ReferenceUnpickler.gather(storage.kind, storage.array, offset, size, stride).view(_ReferenceArray)

    @staticmethod
    def gather(kind, array, offset, size, stride):
        size, stride = list(size), list(stride)
        if len(size) != len(stride) or min(size + [0]) < 0 or offset < 0:
            raise ValueError("reference: record")
        numel = int(np.prod(size, dtype=object))
        if numel == 0:
            return np.zeros(size, dtype=array.dtype)
        if numel > 1 << 20:  # the corners only, as corners() reads dygrad's
            stride = [s * (n - 1) if n > 1 else s for n, s in zip(size, stride)]
            size = [min(n, 2) for n in size]
        index = np.full(size, offset, dtype=object)
        for dim, (n, s) in enumerate(zip(size, stride)):
            shape = [1] * len(size)
            shape[dim] = n
            if n > 1:
                index = index + (np.arange(n, dtype=object) * s).reshape(shape)
        index = np.asarray(index, dtype=object)
        if min(index.flat) < 0 or max(index.flat) >= array.size:
            raise IndexError("reference: an element outside the storage")
        values = np.asarray(array[index.astype(np.int64)])
        if kind == "BFloat16Storage":
            return np.asarray((values.astype("<u4") << 16).view("<f4"))
        return np.asarray(values != 0) if kind == "BoolStorage" else values


def reference_pt(data):
    """The tensors of a .pt file read by _ReferenceUnpickler, in dygrad's traversal order."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
        pkl = next(n for n in names if n.endswith("/data.pkl") and n.count("/") == 1)
        prefix = pkl[: -len("data.pkl")]
        byteorder = zf.read(prefix + "byteorder") if prefix + "byteorder" in names else b"little"
        return hf.tensors_of(_ReferenceUnpickler(zf.read(pkl), zf, prefix, byteorder).load(), np.ndarray)


def check_one(dg, load_file, torch, fmt, data, path):
    """Loads `data` (written at `path`) with each loader; returns a finding (a string) or None.
    A .pt's values are compared with _ReferenceUnpickler's (torch's own values cannot be the reference: on
    some mutated archives torch 2.13 returns values found nowhere in the file). (*) torch must not refuse a file
    dygrad loads for a tensor record or a storage size; it may for what dygrad reads more leniently (its zip
    reader, miniz, checks fields Python's zipfile ignores, such as a disk number; it decodes strings strictly)."""
    loaders = ["load", "load_mmap"] if fmt == "pt" else ["load", "load_file"]
    for loader in loaders:
        try:
            if loader == "load":
                value = dg.load(io.BytesIO(data))
            elif loader == "load_mmap":
                value = dg.load(path, mmap=True)
            else:
                value = {k: dg.from_numpy(v) for k, v in load_file(path)[0].items()}
        except LOAD_ERRORS:
            continue
        except Exception as e:  # noqa: BLE001: any other exception type is a finding
            return f"{loader}: unclean exception {type(e).__name__}: {str(e)[:300]}"
        ours = hf.tensors_of(value, dg.Tensor)
        arrays = [as_array(t) for t in ours]  # every element read
        for t in ours:
            try:
                corners(t.detach()).fill_(0)  # every element written
            except RuntimeError as e:  # as torch, an overlapping view is not written in place
                if "single memory location" not in str(e):
                    raise
        dg.synchronize()
        if fmt == "pt":
            try:
                torch.load(io.BytesIO(data))
            except Exception as e:  # noqa: BLE001
                if TORCH_RECORD_ERRORS.search(str(e)) and not TORCH_ARCHIVE_ERRORS.search(str(e)):  # (*)
                    return f"{loader}: dygrad loads a file torch refuses ({type(e).__name__}: {str(e)[:200]})"
            try:
                theirs = reference_pt(data)
            except zipfile.BadZipFile as e:
                if loader == "load_mmap" and "CRC" in str(e):  # mapping reads no checksum (nor does torch's)
                    continue
                return f"{loader}: dygrad loads a file the reference refuses ({type(e).__name__}: {str(e)[:200]})"
            except Exception as e:  # noqa: BLE001
                return f"{loader}: dygrad loads a file the reference refuses ({type(e).__name__}: {str(e)[:200]})"
        else:
            reference = safetensors_reference(data)
            theirs = [reference[name] for name in value]
        if len(arrays) != len(theirs):
            return f"{loader}: {len(arrays)} tensors, the reference has {len(theirs)}"
        for i, (a, b) in enumerate(zip(arrays, theirs)):
            if a.shape != b.shape or not np.array_equal(a.astype(b.dtype) if a.dtype != b.dtype else a, b,
                                                        equal_nan=a.dtype.kind == "f"):
                return f"{loader}: tensor {i} differs from the reference ({a.shape} vs {b.shape})"
    return None


# --- the child and the parent --------------------------------------------------------------------------------------
def child(seed, iterations, seconds, workdir):
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # a lie that allocates terabytes fails here
    import torch
    import dygrad as dg
    from dygrad.safetensors_io import load_file
    seeds = seed_files(dg)
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    count = 0
    while count < iterations and time.monotonic() < deadline:
        case_rng = random.Random(rng.randrange(2**63))
        fmt, data = make_input(case_rng, seeds)
        path = os.path.join(workdir, f"input.{fmt}")
        with open(path, "wb") as fh:
            fh.write(data)
        with open(os.path.join(workdir, "progress.json"), "w") as fh:
            json.dump({"seed": seed, "iteration": count, "format": fmt}, fh)
        finding = check_one(dg, load_file, torch, fmt, data, path)
        if finding:
            print(json.dumps({"seed": seed, "iteration": count, "format": fmt, "finding": finding,
                              "input": data.hex() if len(data) < 20000 else None}), flush=True)
        count += 1
    print(f"iterations {count}", flush=True)


def run(seed, iterations=None, seconds=None, keep=True, max_findings=20):
    """Runs children until `iterations` (in all) or `seconds` pass; returns (findings, iterations run)."""
    iterations = iterations if iterations is not None else 2**62
    seconds = seconds if seconds is not None else 1e9
    findings, done = [], 0
    deadline = time.monotonic() + seconds
    workdir = tempfile.mkdtemp(prefix="dygrad-fuzz-loaders-")
    try:
        while done < iterations and time.monotonic() < deadline and len(findings) < max_findings:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(seed),
                                   "--iterations", str(iterations - done),
                                   "--seconds", str(max(1.0, deadline - time.monotonic())), "--workdir", workdir],
                                  capture_output=True, text=True)
            for line in proc.stdout.splitlines():
                if line.startswith("iterations "):
                    done += int(line.split()[1])
                elif line.startswith("{"):
                    findings.append(json.loads(line))
            for line in proc.stderr.splitlines():  # CPython reports some memory errors and goes on
                if "SystemError" in line or "Exception ignored" in line:
                    findings.append({"seed": seed, "iteration": -1, "finding": line[:500]})
            if proc.returncode != 0:  # a crash: the input it died on is on disk
                with open(os.path.join(workdir, "progress.json")) as fh:
                    progress = json.load(fh)
                with open(os.path.join(workdir, f"input.{progress['format']}"), "rb") as fh:
                    data = fh.read()
                findings.append({**progress, "finding": f"crash (exit status {proc.returncode})",
                                 "stderr": proc.stderr[-2000:], "input": data.hex()})
                done += progress["iteration"] + 1
            seed += 1  # a fresh child starts a fresh sequence
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if keep:
        os.makedirs(REGRESSIONS, exist_ok=True)
        for f in findings:
            if f.get("input"):
                with open(os.path.join(REGRESSIONS, f"seed{f['seed']}_iteration{f['iteration']}.json"), "w") as fh:
                    json.dump(f, fh, indent=1)
    return findings, done


def replay(path):
    """Loads a kept input again, in this process; returns the finding (None when it is fixed)."""
    import torch
    import dygrad as dg
    from dygrad.safetensors_io import load_file
    with open(path) as fh:
        found = json.load(fh)
    data = bytes.fromhex(found["input"])
    with tempfile.TemporaryDirectory() as workdir:
        file = os.path.join(workdir, f"input.{found['format']}")
        with open(file, "wb") as fh:
            fh.write(data)
        return check_one(dg, load_file, torch, found["format"], data, file)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--iterations", type=int, default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--replay", default=None, help="load one kept input (a JSON file) in this process")
    args = p.parse_args()
    if args.child is not None:
        child(args.child, args.iterations, args.seconds, args.workdir)
        return 0
    if args.replay:
        finding = replay(args.replay)
        print(finding or "clean")
        return 1 if finding else 0
    findings, done = run(args.seed, args.iterations, args.seconds if args.seconds or args.iterations else 1800)
    print(f"fuzz loaders: {done} inputs, {len(findings)} findings"
          + "".join(f"\n  {json.dumps({k: v for k, v in f.items() if k != 'input'})[:500]}" for f in findings))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
