"""dygrad.Generator: torch's CPU generator, an MT19937 seeded as torch seeds it, so the draws that decide data
order (randperm for shuffling and random_split, randint for sampling with replacement, the loader's base
seed) give the same numbers as torch for the same seed. dygrad's tensor RNG (rand, randn, dropout, init) is
its own counter-based generator (docs/rng.md) and is not affected by a Generator.

The 32-bit stream is NumPy's MT19937 with the legacy integer seeding, which is MT19937's init_genrand,
torch's too: RandomState(seed).randint(0, 2**32, dtype=uint64) returns one raw 32-bit output per value."""
import os

import numpy as np

from . import _C


class Generator:
    def __init__(self, device="cpu"):
        if str(device) != "cpu":
            raise RuntimeError(f"Generator: device {device!r} is not available (dygrad has the cpu device only)")
        self.device = "cpu"
        self.manual_seed(67280421310721)  # torch's default seed

    def manual_seed(self, seed):
        seed = int(seed)
        if not -0x8000_0000_0000_0000 <= seed <= 0xFFFF_FFFF_FFFF_FFFF:
            raise RuntimeError(f"Overflow when unpacking long long: {seed}")
        self._seed = seed & 0xFFFF_FFFF_FFFF_FFFF
        self._state = np.random.RandomState(self._seed & 0xFFFF_FFFF)
        return self

    def initial_seed(self):
        return self._seed

    def seed(self):
        """Seeds from the OS's entropy and returns the seed, as torch's Generator.seed()."""
        seed = int.from_bytes(os.urandom(8), "little") & 0x7FFF_FFFF_FFFF_FFFF
        self.manual_seed(seed)
        return seed

    def get_state(self):
        """The MT19937 state as a uint8 tensor (dygrad's layout: 624 words and a position, not torch's bytes)."""
        _, key, pos, _, _ = self._state.get_state()
        raw = np.concatenate([key.astype("<u4"), np.array([pos], dtype="<u4")]).view(np.uint8)
        return _C.from_numpy(raw.copy())

    def set_state(self, new_state):
        raw = np.ascontiguousarray(new_state.numpy()).view("<u4")
        if raw.size != 625:
            raise RuntimeError("Generator.set_state: expected the 2500-byte state Generator.get_state() returns")
        self._state.set_state(("MT19937", raw[:624].astype(np.uint32), int(raw[624])))
        return self

    # --- draws, as torch's CPU kernels make them ---------------------------------------------------------------
    def _random32(self, count):
        return self._state.randint(0, 2 ** 32, size=count, dtype=np.uint64)

    def _random64(self):
        hi, lo = (int(v) for v in self._random32(2))
        return (hi << 32) | lo

    def _randperm(self, n):
        """torch's randperm_cpu: a Fisher-Yates shuffle from the front, z = random() % (n - i)."""
        result = list(range(n))
        if n > 1:
            draws = self._random32(n - 1).tolist()
            for i, r in enumerate(draws):
                z = i + r % (n - i)
                result[i], result[z] = result[z], result[i]
        return result

    def _randint(self, low, high, count):
        """torch's random_from_to for a range below 2**32: (random() % range) + low."""
        span = high - low
        if span <= 0:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
        if span >= 2 ** 32:
            return [low + self._random64() % span for _ in range(count)]
        return [low + int(v) % span for v in self._random32(count).tolist()]


default_generator = Generator()


def manual_seed(seed):
    """Seeds dygrad's tensor RNG and the default Generator (as torch.manual_seed seeds torch's); returns it."""
    _C.manual_seed(int(seed))
    return default_generator.manual_seed(seed)


def seed():
    """Seeds dygrad's tensor RNG and the default Generator from the OS's entropy and returns the seed (torch.seed)."""
    s = default_generator.seed()
    _C.manual_seed(s)
    return s


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A random permutation of 0..n-1 (int64) on device= (else the default device). With a Generator: torch's
    permutation for the same seed."""
    from ._factories import _factory_device, _placed
    device = _factory_device("randperm", device)
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    perm = (generator or default_generator)._randperm(int(n))
    out = _C.tensor(perm, dtype=_C.int64, device="cpu") if perm else _C.zeros((0,), dtype=_C.int64, device="cpu")
    return _placed(out if dtype is None else out.to(dtype), device, requires_grad, pin_memory)
