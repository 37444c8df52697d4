"""dygrad.utils.hooks: torch.utils.hooks.RemovableHandle, what every register_*_hook returns."""
import itertools


class RemovableHandle:
    """handle.remove() unregisters the hook (once; later calls do nothing); also a context manager."""

    _ids = itertools.count()

    def __init__(self, remove):
        self._remove = remove
        self.id = next(RemovableHandle._ids)

    def remove(self):
        if self._remove is not None:
            remove, self._remove = self._remove, None
            remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
