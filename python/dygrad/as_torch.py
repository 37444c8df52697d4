"""Run an unmodified PyTorch script on dygrad: `python3 -m dygrad.as_torch script.py ARGS`.

An import hook resolves `torch` and every `torch.<sub>` module to dygrad's (`torch.nn.functional` is
`dygrad.nn.functional`, `torch.utils.data` is `dygrad.utils.data` ...) through thin alias modules. A name
dygrad lacks raises TorchNameMissing (an AttributeError, so `hasattr(torch, ...)` probes keep working) that
names it and points at docs/pytorch-api.md; a missing submodule raises ModuleNotFoundError the same way, and
`from torch import missing` a TorchImportMissing (an ImportError) with the same message. A dygrad submodule
reached as an attribute (`torch.nn.init`) is its torch alias, so its missing names are named the same way.
`torch.__version__` is the API level dygrad implements ("2.13.0+dygrad.0.1.0", a TorchVersion), and where no
real torch is installed the hook also answers `importlib.metadata` for "torch" with that version, so libraries
that gate on the installed package (transformers) find it. `install()` sets the hook up in-process (what
`import dygrad.as_torch; dygrad.as_torch.install()` does)."""
import dis
import importlib
import importlib.metadata
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import runpy
import sys
import types

DOCS = "docs/pytorch-api.md"

# torch module -> dygrad module, where the names differ (otherwise torch.X.Y is dygrad.X.Y).
RENAMED = {"torch": "dygrad"}


class TorchNameMissing(AttributeError):
    """A torch name that dygrad does not provide."""


class TorchImportMissing(ImportError):
    """`from torch... import name` of a name that dygrad does not provide."""


_IMPORT_FROM = dis.opmap["IMPORT_FROM"]


def _importing_from(frame):
    """True when `frame` is executing `from module import name`: a missing name then raises an ImportError that
    names it (Python would turn an AttributeError into a bare "cannot import name" naming dygrad's file)."""
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _IMPORT_FROM


def _missing_message(qualified):
    return (f"{qualified} is not provided by dygrad (running a PyTorch script through dygrad.as_torch); "
            f"see {DOCS} for what dygrad supports and what differs")


class _TorchAlias(types.ModuleType):
    """A module named `torch...` whose attributes are those of the dygrad module it wraps."""

    def __init__(self, name, target):
        super().__init__(name, getattr(target, "__doc__", None))
        object.__setattr__(self, "_dygrad_target", target)
        self.__file__ = getattr(target, "__file__", None)
        self.__path__ = []  # a package, so `import torch.x.y` asks the finder below
        if name in ("torch", "torch.version"):
            from .version import as_torch_version
            self.__version__ = as_torch_version

    def __getattr__(self, attr):
        target = object.__getattribute__(self, "_dygrad_target")
        qualified = f"{self.__name__}.{attr}"
        try:
            value = getattr(target, attr)
        except AttributeError:
            pass
        else:
            # A dygrad submodule is handed out as its torch alias (torch.nn.init, not dygrad.nn.init), so a name
            # missing from it is named as torch's too.
            if isinstance(value, types.ModuleType) and getattr(value, "__name__", "") == dygrad_name(qualified):
                return importlib.import_module(qualified)
            return value
        if attr.startswith("__"):
            raise AttributeError(attr)
        try:  # torch.nn.functional reached as an attribute before it was imported
            return importlib.import_module(qualified)
        except ImportError:
            pass
        if _importing_from(sys._getframe(1)):
            raise TorchImportMissing(_missing_message(qualified), name=qualified)
        raise TorchNameMissing(_missing_message(qualified))

    def __setattr__(self, attr, value):
        if attr.startswith("__"):
            object.__setattr__(self, attr, value)
        else:  # torch.backends.cudnn.benchmark = True sets dygrad's flag
            setattr(object.__getattribute__(self, "_dygrad_target"), attr, value)

    def __dir__(self):
        return dir(object.__getattribute__(self, "_dygrad_target"))


def dygrad_name(torch_name):
    """The dygrad module a torch module name resolves to: torch.nn.functional -> dygrad.nn.functional."""
    head, _, rest = torch_name.partition(".")
    return RENAMED[head] + ("." + rest if rest else "")


def resolve(torch_name):
    """The dygrad object a torch module name stands for: a module, or a namespace attribute of one (as
    torch.cuda.amp is dygrad.cuda's `amp`). Raises ModuleNotFoundError naming the torch module."""
    target = dygrad_name(torch_name)
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        parent, _, attr = target.rpartition(".")
        try:
            return getattr(importlib.import_module(parent), attr)
        except (ImportError, AttributeError, ValueError):
            pass
        raise ModuleNotFoundError(_missing_message(torch_name) + f" (no module {target})", name=torch_name) from e


class _TorchDistribution(importlib.metadata.Distribution):
    """The package metadata of "torch" where no real torch is installed: its version is the API level dygrad
    implements, so `importlib.metadata.version("torch")` (transformers' availability check) finds it."""

    def read_text(self, filename):
        if filename == "METADATA":
            from .version import as_torch_version
            return (f"Metadata-Version: 2.1\nName: torch\nVersion: {as_torch_version}\n"
                    "Summary: dygrad standing in for PyTorch (dygrad.as_torch)\n")
        return None

    def locate_file(self, path):
        return os.path.join(os.path.dirname(os.path.abspath(__file__)), str(path))


class _TorchFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return _TorchAlias(spec.name, resolve(spec.name))

    def exec_module(self, module):
        pass

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        if context.name not in ("torch", None) or _real_torch_installed():
            return iter(())
        return iter([_TorchDistribution()])


def _real_torch_installed():
    """Whether a torch distribution other than this stand-in is installed (its metadata is then the answer)."""
    for finder in sys.meta_path:
        if finder is _FINDER or not hasattr(finder, "find_distributions"):
            continue
        if any(True for _ in finder.find_distributions(importlib.metadata.DistributionFinder.Context(name="torch"))):
            return True
    return False


_FINDER = _TorchFinder()


def install():
    """Makes `import torch` (and torch.*) resolve to dygrad in this process; refuses if torch is loaded."""
    if any(m == "torch" or m.startswith("torch.") for m in sys.modules if not isinstance(sys.modules[m], _TorchAlias)):
        raise RuntimeError("[as_torch] torch is already imported in this process; install the hook before it")
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    from . import _tensor
    _tensor.TYPE_MODULE = "torch"  # Tensor.type() names torch's types ('torch.FloatTensor'), as the script expects


_CANNOT_IMPORT = re.compile(r"cannot import name '([^']+)' from '(torch[\w.]*)'")


def _explain(error):
    """For `from torch.x import y` of a missing y Python raises a bare ImportError: say what y is."""
    match = _CANNOT_IMPORT.search(str(error))
    if match:
        return _missing_message(f"{match.group(2)}.{match.group(1)}")
    return None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python3 -m dygrad.as_torch script.py [ARGS...]\n\n" + __doc__.split("\n\n")[1])
        return 0 if argv else 2
    script = argv[0]
    install()
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except ImportError as e:
        message = _explain(e)
        if message is None:
            raise
        raise TorchNameMissing(message) from e
    except AttributeError as e:
        # A tensor method dygrad lacks surfaces as Python's bare AttributeError: name it as torch's. (Done here,
        # once, rather than with a Tensor.__getattr__ that would tax every attribute access.)
        from . import Tensor
        if isinstance(e, TorchNameMissing) or not isinstance(getattr(e, "obj", None), Tensor):
            raise
        raise TorchNameMissing(_missing_message(f"torch.Tensor.{e.name}")) from e
    return 0


if __name__ == "__main__":
    # Run by `python3 -m dygrad.as_torch`: the hook of the importable module, so a script that imports
    # dygrad.as_torch sees the one installed (not a second copy of this file's names).
    from dygrad.as_torch import main as _main
    sys.exit(_main())
