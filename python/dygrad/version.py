"""dygrad's version, and the PyTorch API level it implements (what `torch.__version__` reports under
dygrad.as_torch, so version-gated libraries take their current code paths; docs/pytorch-api.md)."""

__version__ = "0.1.0"
# The torch release whose API dygrad follows (the peer its tests compare against).
torch_api = "2.13.0"
cuda = None   # torch.version.cuda: no CUDA build yet
hip = None    # torch.version.hip
debug = False
git_version = "unknown"


def _release(text):
    """The release numbers of a version string ("2.13.0+dygrad.0.1.0" -> (2, 13, 0)); pre/dev parts ignored."""
    numbers = []
    for part in str(text).split("+")[0].split("."):
        digits = ""
        for c in part:
            if not c.isdigit():
                break
            digits += c
        if not digits:
            break
        numbers.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(numbers)


class TorchVersion(str):
    """A version string that compares with strings and tuples by its release numbers, as torch's
    torch.torch_version.TorchVersion does: `torch.__version__ >= "2.0"`, `>= (2, 6)`."""

    def _key(self, other):
        mine = _release(self)
        theirs = tuple(other) if isinstance(other, tuple) else _release(other)
        width = max(len(mine), len(theirs))
        return mine + (0,) * (width - len(mine)), tuple(theirs) + (0,) * (width - len(theirs))

    def __lt__(self, other):
        a, b = self._key(other)
        return a < b

    def __le__(self, other):
        a, b = self._key(other)
        return a <= b

    def __gt__(self, other):
        a, b = self._key(other)
        return a > b

    def __ge__(self, other):
        a, b = self._key(other)
        return a >= b

    def __eq__(self, other):
        if isinstance(other, (str, tuple)):
            a, b = self._key(other)
            return a == b if isinstance(other, tuple) or "+" not in str(other) else str.__eq__(self, other)
        return NotImplemented

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = str.__hash__


# What torch.__version__ and torch.version.__version__ say under dygrad.as_torch: the API level, then dygrad's own
# version as a local label (PEP 440: "2.13.0+dygrad.0.1.0").
as_torch_version = TorchVersion(f"{torch_api}+dygrad.{__version__}")
