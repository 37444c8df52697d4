"""Stand-ins for torch features dygrad does not provide yet (issue 41): they import, and serve the checks
libraries make at import (isinstance, decorators, version gates); using one raises NotProvidedError naming it."""


class NotProvidedError(NotImplementedError):
    """A torch feature dygrad does not provide (yet)."""


def not_provided(name, why=""):
    return NotProvidedError(f"{name} is not provided by dygrad{': ' + why if why else ''} (see docs/pytorch-api.md)")


class StandInMeta(type):
    """A class nothing is an instance of, whose construction raises NotProvidedError."""

    def __call__(cls, *args, **kwargs):
        raise not_provided(f"{cls.__module__.replace('dygrad', 'torch', 1)}.{cls.__name__}", cls._why)

    def __instancecheck__(cls, obj):
        return False


def stand_in(name, module, why):
    """A stand-in class `name` of `module` (torch's path is reported)."""
    return StandInMeta(name, (), {"__module__": module, "_why": why})


def stand_in_function(qualified, why):
    def function(*args, **kwargs):
        raise not_provided(qualified, why)
    function.__name__ = qualified.rpartition(".")[2]
    function.__qualname__ = function.__name__
    return function


class NotProvidedDtype:
    """A torch dtype dygrad has no storage for yet (issue 41, part 2: the fnuz and e8m0 float8 types).
    It exists so that libraries can name it (safetensors' dtype tables, dtype checks, `x.dtype == torch.int8`), and
    it carries torch's properties; no tensor has it: a factory or conversion given one raises, and nothing compares
    equal to it but itself."""

    def __init__(self, name, itemsize, is_floating_point=False, is_signed=True, is_complex=False):
        self._name, self.itemsize = name, itemsize
        self.is_floating_point, self.is_signed, self.is_complex = is_floating_point, is_signed, is_complex

    def __repr__(self):
        return f"dygrad.{self._name}"

    def __reduce__(self):
        return (_dtype_named, (self._name,))

    def to_real(self):
        raise not_provided(f"torch.{self._name}.to_real", "not a dtype with storage in dygrad")

    def to_complex(self):
        raise not_provided(f"torch.{self._name}.to_complex", "not a dtype with storage in dygrad")


def _dtype_named(name):
    """Unpickles a NotProvidedDtype: the one dygrad.<name>."""
    import dygrad
    return getattr(dygrad, name)


# torch's dtypes without storage in dygrad: name -> (itemsize, is_floating_point, is_signed, is_complex).
UNPROVIDED_DTYPES = {
    "float8_e4m3fnuz": (1, True, True, False), "float8_e5m2fnuz": (1, True, True, False),
    "float8_e8m0fnu": (1, True, False, False),
}
