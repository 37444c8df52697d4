"""dygrad.jit's O1 (docs/jit-fusion.md): the passes' switches (`dygrad.jit.config`), the compile of a graph's
generated kernels by the system's C++ compiler in the background, their on-disk cache, and what shows them
(`dygrad.jit.graph(..., passes=True)`, `dygrad.jit.source`).

A captured graph at O1 is optimized at once (DCE, CSE, elementwise fusion: jit/fusion.cpp). Where it has fused
sub-ops, its translation unit (one per graph) is looked up in the cache, keyed by the source, the contents of the
headers it includes (a changed functor must not be served from an old entry), the compiler's version and the flags
(the kernel level's ISA among them): a hit is loaded at once (a second process starts warm); a miss is
compiled on a background thread while the function keeps replaying its unfused graph, and the optimized graph takes
over at the first call after the compile finished. Without a compiler the fused sub-ops run the interpreter (a
warning says so once)."""
import concurrent.futures
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

from . import _C


class JitFusionWarning(UserWarning):
    """The generated kernels cannot be compiled here: fused sub-ops run dygrad's interpreter."""


class _Config:
    """dygrad.jit.config: which O1 passes run and how generated kernels are made. Each pass but `patterns` keeps
    eager's bits (no reassociation, contraction as the eager functors), so deterministic mode runs them; `patterns`
    (composed code into dygrad's fused ops) is equal within float rounding, and deterministic mode skips it."""

    _FIELDS = ("dce", "cse", "fold", "patterns", "rematerialize", "fusion", "inplace", "codegen", "measure",
               "background", "cache_dir", "compiler")

    def __init__(self):
        self.dce = True          # dead-code elimination
        self.cse = True          # common subexpressions
        self.fold = True         # constant folding: factories and elementwise ops on them computed once
        self.patterns = True     # composed attention and cross-entropy into the fused ops (off in deterministic mode)
        self.rematerialize = True  # elementwise results the backward reads late computed again there, not held
        self.fusion = True       # elementwise fusion into generated kernels
        self.inplace = True      # an elementwise sub-op's output written over an input that dies with it
        self.codegen = True      # False: fused sub-ops run the interpreter (no compiler is called)
        self.measure = True      # each generated kernel's first launches timed against the interpreter; the faster runs
        self.background = True   # False: a capture waits for its kernels' compile
        self.cache_dir = None    # None: $DG_JIT_CACHE_DIR, else ~/.cache/dygrad/jit
        self.compiler = None     # None: $CXX, else c++, g++, clang++ from PATH

    def __repr__(self):
        return "dygrad.jit.config(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self._FIELDS) + ")"


config = _Config()

_lock = threading.Lock()
_executor = None
_compilers = {}
_warned = set()


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, JitFusionWarning, stacklevel=4)


def cache_dir():
    d = config.cache_dir or os.environ.get("DG_JIT_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "dygrad", "jit")
    return Path(d)


def compiler():
    """(path, version line) of the C++ compiler, or None."""
    names = [config.compiler] if config.compiler else ([os.environ["CXX"]] if os.environ.get("CXX") else []) + [
        "c++", "g++", "clang++"]
    for name in names:
        path = shutil.which(name)
        if not path:
            continue
        if path not in _compilers:
            try:
                out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
                _compilers[path] = out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else None
            except (OSError, subprocess.SubprocessError):
                _compilers[path] = None
        if _compilers[path]:
            return path, _compilers[path]
    return None


def include_dir():
    """Where dygrad's headers are (the generated code includes math/): $DG_JIT_INCLUDE, the package's include/, or
    the source tree's src/ (an editable install)."""
    here = Path(__file__).resolve().parent
    for d in (os.environ.get("DG_JIT_INCLUDE"), here / "include", here.parent.parent / "src"):
        if d and (Path(d) / "dygrad" / "math" / "scalar.h").is_file():
            return str(d)
    return None


def isa_flags():
    """The flags of the kernel level this process runs (docs/ops.md, "One binary for every CPU"): the generated code
    computes what that level's eager kernels compute."""
    from .backends import cpu
    level = cpu.kernel_isa()[0]
    if level == "avx512":
        return ["-march=x86-64-v4", "-mtune=generic"]
    if level == "avx2":
        return ["-march=x86-64-v3", "-mtune=generic", "-mno-avx256-split-unaligned-load",
                "-mno-avx256-split-unaligned-store"]
    if level == "native":
        return ["-march=native"]
    base = cpu.baseline_isa()
    flags = [f"-march={base}", "-mtune=generic"]
    if base == "x86-64-v3":
        flags += ["-mno-avx256-split-unaligned-load", "-mno-avx256-split-unaligned-store"]
    return flags


def flags():
    # As the kernel plugins are compiled (CMakeLists.txt): no fast-math, contraction only where the code asks. -O2 with
    # -O3's vectoriser cost model rather than -O3: the same vectorised loops (and the same bits: the optimisation level
    # changes no floating-point semantics without fast-math or contraction) in 0.25-0.5x the compile time (the 121
    # kernels of the composed LLaMA step: 2.3 s against 4.8 s; bench/RESULTS.md).
    return ["-O2", "-fvect-cost-model=dynamic", "-std=c++20", "-fPIC", "-shared", "-fvisibility=hidden",
            "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off"] + isa_flags()


# The headers the generated code includes (generate_cpp in jit/fusion_codegen.cpp) and every header they include.
_HEADERS = ("math/activations.h", "math/arithmetic.h", "math/elementary.h", "math/scalar.h",
            "backend/cpu/accumulate.h", "backend/cpu/row_reductions.h")
_header_digests = {}


def headers_digest(include):
    """A digest of the included headers' contents under `include` (computed once per directory)."""
    if include not in _header_digests:
        h = hashlib.sha256()
        for name in _HEADERS:
            path = Path(include) / "dygrad" / name
            h.update(name.encode())
            h.update(path.read_bytes() if path.is_file() else b"(missing)")
        _header_digests[include] = h.hexdigest()
    return _header_digests[include]


def cache_key(source, version, flag_list, headers=""):
    h = hashlib.sha256()
    for part in (source, headers, version, " ".join(flag_list), "dygrad-jit-1"):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def _compile(cxx, flag_list, include, source, target):
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        src = Path(tmp) / "kernels.cpp"
        src.write_text(source)
        out = Path(tmp) / "kernels.so"
        r = subprocess.run([cxx, *flag_list, "-I", include, str(src), "-o", str(out)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{cxx} failed on the generated kernels:\n{r.stderr[-4000:]}")
        os.replace(out, target)  # atomic: another process finds a whole file or none
        target.with_suffix(".cpp").write_text(source)
    return target


def _pool():
    global _executor
    with _lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="dygrad-jit-cc")
        return _executor


class Pending:
    """An optimized graph whose kernels are being compiled."""
    __slots__ = ("graph", "future")

    def __init__(self, graph, future):
        self.graph = graph
        self.future = future


def _passes():
    """The switches of graph.optimized: dygrad.jit.config's, with `patterns` off under deterministic mode (it changes
    rounding; a graph is captured again when the mode changes: it is part of the guard key)."""
    deterministic = _C._get_context()[0]
    return dict(dce=config.dce, cse=config.cse, fusion=config.fusion, patterns=config.patterns and not deterministic,
                rematerialize=config.rematerialize, fold=config.fold, inplace=config.inplace)


def optimize(graph, name):
    """O1 for a built graph: (the graph to replay now, a Pending or None)."""
    passes = _passes()
    if not any(passes.values()):
        return graph, None
    opt, _ = graph.optimized(**passes)
    if opt.num_fused == 0 or not config.codegen:
        return opt, None
    cxx = compiler()
    include = include_dir()
    if cxx is None or include is None:
        why = ("no C++ compiler on PATH (set CXX)" if cxx is None
               else "dygrad's headers are not found (set DG_JIT_INCLUDE)")
        _warn_once("nocompiler", f"dygrad.jit: {why}: the fused kernels of {name} run dygrad's interpreter")
        return opt, None
    flag_list = flags()
    source = opt.source()
    target = cache_dir() / (cache_key(source, cxx[1], flag_list, headers_digest(include)) + ".so")
    if target.is_file():
        try:
            opt.load_kernels(str(target), measure=config.measure)
            return opt, None
        except RuntimeError:
            pass  # a damaged entry: compiled again
    future = _pool().submit(_compile, cxx[0], flag_list, include, source, target)
    pending = Pending(opt, future)
    if not config.background:
        return finish(pending, name, wait=True), None
    return graph, pending


def finish(pending, name, wait=False):
    """The optimized graph once its compile is done (loaded; the interpreter where the compile failed), else None."""
    if not wait and not pending.future.done():
        return None
    try:
        target = pending.future.result()
        pending.graph.load_kernels(str(target), measure=config.measure)
    except Exception as e:  # noqa: BLE001 (a failed compile is a warning: the interpreter runs the kernels)
        _warn_once(("compile", name), f"dygrad.jit: the generated kernels of {name} could not be compiled; the "
                   f"interpreter runs them: {e}")
    return pending.graph


def describe_passes(graph):
    """The graph before and after each pass, as text."""
    _, log = graph.optimized(**_passes(), log=True)
    out = []
    for name, lines, note in log:
        out.append(f"=== {name}" + (f": {note}" if note else "") + " ===")
        out += [f"{i:4d}  {line}" for i, line in enumerate(lines)]
    return "\n".join(out)


def source(graph):
    opt, _ = graph.optimized(**_passes())
    return opt.source() or "// no fused kernels: no run of two or more fusible elementwise ops\n"
