"""Token files: a flat little-endian binary of uint16 token ids (nanoGPT's train.bin/val.bin), memory-mapped."""
import os

import numpy as np


class TokenDataset:
    """Random (or sequential) windows of `seq_len + 1` tokens from a memory-mapped token file."""

    def __init__(self, path, seq_len):
        if not os.path.exists(path):
            raise FileNotFoundError(f"[TokenDataset] no token file at {path}")
        self.path = path
        self.tokens = np.memmap(path, dtype=np.uint16, mode="r")
        self.seq_len = seq_len
        if len(self.tokens) < seq_len + 2:
            raise ValueError(f"[TokenDataset] {path} holds {len(self.tokens)} tokens: fewer than one window of "
                             f"{seq_len + 1}")

    def __len__(self):
        return len(self.tokens)

    def sample(self, batch_size, rng):
        """x, y int64 arrays [batch_size, seq_len]: y is x shifted by one token."""
        starts = rng.integers(0, len(self.tokens) - self.seq_len - 1, size=batch_size)
        window = np.stack([np.asarray(self.tokens[s:s + self.seq_len + 1]) for s in starts]).astype(np.int64)
        return np.ascontiguousarray(window[:, :-1]), np.ascontiguousarray(window[:, 1:])

    @staticmethod
    def write(path, ids):
        """Writes ids (any integer array with values < 65536) as a token file, atomically."""
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() > 0xFFFF):
            raise ValueError("[TokenDataset] token ids must fit in uint16")
        tmp = path + ".tmp"
        ids.astype("<u2").tofile(tmp)
        os.replace(tmp, path)
