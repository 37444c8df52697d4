"""dygrad.tune: the auto-tuner (docs/tune.md). `python3 -m dygrad.tune -- -m dygrad.train ...` tries the
advisor's advice on a training command, each change measured A B A B in fresh processes against the incumbent,
and writes tune.json; dg.tune.apply loads it in a script, dg.tune.run tunes a loop of your own in-process."""
from .loop import run  # noqa: F401
from .settings import apply, load, save  # noqa: F401
from .candidates import CANDIDATES, NUMERICS  # noqa: F401

__all__ = ["run", "apply", "load", "save", "CANDIDATES", "NUMERICS"]
