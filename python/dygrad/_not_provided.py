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
