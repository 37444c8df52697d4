"""torch.UntypedStorage: a flat buffer of bytes on the CPU, what safetensors maps a checkpoint file into before it
views each tensor's bytes (`torch.asarray(storage[a:b], dtype=torch.uint8).view(dtype=...)`). The bytes are a
NumPy uint8 array, so a tensor made from a storage shares its memory, as in torch."""
import os

import numpy as np


class UntypedStorage:
    """`nbytes` bytes, zero-filled (torch leaves them uninitialized)."""

    def __init__(self, nbytes=0, *, device=None):
        from ._factories import _check_device
        _check_device("UntypedStorage", device)
        self._bytes = np.zeros(int(nbytes), dtype=np.uint8)

    @classmethod
    def _of(cls, array):
        storage = cls.__new__(cls)
        storage._bytes = array
        return storage

    @classmethod
    def from_file(cls, filename, shared=False, nbytes=0):
        """The first `nbytes` bytes of the file, mapped: with shared=True writes reach the file, otherwise they stay
        private to this storage (copy-on-write), as torch's."""
        if nbytes == 0:
            return cls._of(np.zeros(0, dtype=np.uint8))
        if os.path.getsize(filename) < nbytes:
            raise RuntimeError(f"unable to mmap {nbytes} bytes from file <{filename}>: file is too small")
        return cls._of(np.memmap(filename, dtype=np.uint8, mode="r+" if shared else "c", shape=(nbytes,)))

    def untyped(self):
        return self

    def nbytes(self):
        return int(self._bytes.shape[0])

    def size(self):
        return self.nbytes()

    def __len__(self):
        return self.nbytes()

    def element_size(self):
        return 1

    @property
    def device(self):
        from ._probes import device
        return device("cpu")

    def data_ptr(self):
        return int(self._bytes.ctypes.data)

    def is_shared(self):
        return False

    def tolist(self):
        return self._bytes.tolist()

    def __getitem__(self, index):
        """A byte (an int), or for a slice a storage over the same memory."""
        if isinstance(index, slice):
            if index.step not in (None, 1):
                raise RuntimeError("slices with steps are not supported by UntypedStorage")
            return UntypedStorage._of(self._bytes[index])
        return int(self._bytes[index])

    def __setitem__(self, index, value):
        self._bytes[index] = value

    def __repr__(self):
        values = "\n".join(f" {v}" for v in self._bytes.tolist())
        return f"{values}\n[dygrad.storage.UntypedStorage(device=cpu) of size {self.nbytes()}]"


def untyped_storage(tensor):
    """Tensor.untyped_storage(): every byte of the tensor's storage (a view starts inside it), same memory."""
    return UntypedStorage._of(tensor.detach()._storage_bytes().numpy())


def _tensor_of(storage, dtype):
    """torch.asarray(storage, dtype=...): the storage's bytes read as `dtype` (int64 when none is given, as torch),
    sharing its memory."""
    from . import _C
    return _C.from_numpy(storage._bytes).view(_C.int64 if dtype is None else dtype)
