"""Issue 12 item 3: dygrad.utils.data and dygrad.Generator against torch.utils.data 2.13: the same batches in
the same order for the same seeds (shuffle, random_split, samplers), torch's collation rules and dtypes,
worker processes, IterableDataset sharding, torch's argument errors; batches built with from_numpy; the
loop's waits recorded in the profiler's data-wait bucket."""
import collections
import subprocess
import sys

import numpy as np
import pytest
import torch

import dygrad as dg
from dygrad.utils import data as dgdata
from torch.utils import data as tdata

rng = np.random.default_rng(0)
X = rng.standard_normal((103, 4)).astype(np.float32)
Y = rng.integers(0, 5, size=103)


def both(x=X, y=Y):
    return dgdata.TensorDataset(dg.tensor(x), dg.tensor(y)), tdata.TensorDataset(torch.tensor(x), torch.tensor(y))


def values(batch):
    """A batch as nested Python values (tensors of either framework -> lists) for comparison."""
    if hasattr(batch, "tolist") and not isinstance(batch, (list, tuple)):
        return ("tensor", str(batch.dtype).split(".")[-1], tuple(batch.shape), batch.tolist())
    if isinstance(batch, dict):
        return {k: values(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return (type(batch).__name__, [values(v) for v in batch])
    return batch


def assert_same_epochs(d_loader, t_loader, epochs=3):
    for _ in range(epochs):
        d_batches, t_batches = [values(b) for b in d_loader], [values(b) for b in t_loader]
        assert d_batches == t_batches
    assert len(d_loader) == len(t_loader)


@pytest.mark.parametrize("seed", [0, 42, 2 ** 40 + 3])
def test_generator_draws_torchs_numbers(seed):
    g, t = dg.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    assert g.initial_seed() == t.initial_seed()
    for n in (1, 2, 10, 1000):
        assert dg.randperm(n, generator=g).tolist() == torch.randperm(n, generator=t).tolist()
    assert g._randint(3, 11, 50) == torch.randint(3, 11, (50,), generator=t).tolist()
    assert g._random64() % (1 << 63) == torch.empty((), dtype=torch.int64).random_(generator=t).item()
    state = g.get_state()
    first = dg.randperm(30, generator=g).tolist()
    assert dg.randperm(30, generator=g.set_state(state)).tolist() == first
    assert dg.Generator().initial_seed() == torch.Generator().initial_seed()


def test_manual_seed_seeds_the_default_generator_as_torch():
    assert isinstance(dg.manual_seed(7), dg.Generator)
    torch.manual_seed(7)
    assert dg.randperm(25).tolist() == torch.randperm(25).tolist()
    dg.manual_seed(7)
    a = dg.rand(3).tolist()
    dg.manual_seed(7)
    assert dg.rand(3).tolist() == a  # the tensor RNG is seeded too


@pytest.mark.parametrize("lengths", [[80, 23], [0.5, 0.3, 0.2], [0.7, 0.3]])
def test_random_split_matches_torch(lengths):
    d_ds, t_ds = both()
    d_parts = dgdata.random_split(d_ds, lengths, generator=dg.Generator().manual_seed(3))
    t_parts = tdata.random_split(t_ds, lengths, generator=torch.Generator().manual_seed(3))
    assert [p.indices for p in d_parts] == [p.indices for p in t_parts]
    assert values(d_parts[0][5]) == values(t_parts[0][5])
    with pytest.raises(ValueError, match="Sum of input lengths"):
        dgdata.random_split(d_ds, [10, 10])
    with pytest.raises(ValueError, match="Fraction at index 0"):
        dgdata.random_split(d_ds, [1.5, -0.5])


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("options", [dict(batch_size=16, shuffle=True), dict(batch_size=16, shuffle=True, drop_last=True),
                                     dict(batch_size=10), dict(batch_size=None), dict(batch_size=7, shuffle=False)],
                         ids=["shuffle", "drop_last", "sequential", "no-batching", "no-shuffle"])
def test_batches_match_torch(options, workers):
    d_ds, t_ds = both()
    extra = dict(generator=dg.Generator().manual_seed(5)) if options.get("shuffle") else {}
    t_extra = dict(generator=torch.Generator().manual_seed(5)) if options.get("shuffle") else {}
    d_loader = dgdata.DataLoader(d_ds, num_workers=workers, **options, **extra)
    t_loader = tdata.DataLoader(t_ds, num_workers=workers, **options, **t_extra)
    assert_same_epochs(d_loader, t_loader, epochs=2 if workers else 3)


def test_subsets_samplers_and_batch_samplers_match_torch():
    d_ds, t_ds = both()
    d_train, _ = dgdata.random_split(d_ds, [90, 13], generator=dg.Generator().manual_seed(1))
    t_train, _ = tdata.random_split(t_ds, [90, 13], generator=torch.Generator().manual_seed(1))
    pairs = [
        (dict(batch_size=8, shuffle=True, generator=dg.Generator().manual_seed(2)),
         dict(batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(2))),
        (dict(sampler=dgdata.RandomSampler(d_train, replacement=True, num_samples=70, generator=dg.Generator().manual_seed(4)),
              batch_size=9),
         dict(sampler=tdata.RandomSampler(t_train, replacement=True, num_samples=70, generator=torch.Generator().manual_seed(4)),
              batch_size=9)),
        (dict(sampler=dgdata.RandomSampler(d_train, num_samples=200, generator=dg.Generator().manual_seed(4)), batch_size=32),
         dict(sampler=tdata.RandomSampler(t_train, num_samples=200, generator=torch.Generator().manual_seed(4)), batch_size=32)),
        (dict(batch_sampler=dgdata.BatchSampler(dgdata.SequentialSampler(d_train), 6, drop_last=True)),
         dict(batch_sampler=tdata.BatchSampler(tdata.SequentialSampler(t_train), 6, drop_last=True))),
        (dict(sampler=dgdata.SubsetRandomSampler(list(range(0, 90, 3)), generator=dg.Generator().manual_seed(8)), batch_size=4),
         dict(sampler=tdata.SubsetRandomSampler(list(range(0, 90, 3)), generator=torch.Generator().manual_seed(8)), batch_size=4)),
    ]
    for d_options, t_options in pairs:
        assert_same_epochs(dgdata.DataLoader(d_train, **d_options), tdata.DataLoader(t_train, **t_options))


Pair = collections.namedtuple("Pair", "a b")


class Records:
    """A map-style dataset of dicts, tuples, namedtuples, NumPy arrays and Python numbers and strings."""

    def __init__(self, framework):
        self.framework = framework

    def __len__(self):
        return 11

    def __getitem__(self, i):
        return {"x": np.full((2, 3), i, dtype=np.float32), "n": i, "f": i / 3, "flag": i % 2 == 0, "name": f"r{i}",
                "pair": Pair(np.int64(i), [i, i + 1]), "t": self.framework.tensor([i, -i])}


@pytest.mark.parametrize("workers", [0, 2])
def test_default_collate_follows_torchs_rules_and_dtypes(workers):
    d_loader = dgdata.DataLoader(Records(dg), batch_size=4, num_workers=workers)
    t_loader = tdata.DataLoader(Records(torch), batch_size=4, num_workers=workers)
    assert_same_epochs(d_loader, t_loader, epochs=1)
    sample = [Records(dg)[i] for i in range(3)]
    assert values(dgdata.default_collate(sample)) == values(tdata.default_collate([Records(torch)[i] for i in range(3)]))
    assert values(dgdata.default_convert(np.arange(3))) == values(tdata.default_convert(np.arange(3)))
    with pytest.raises(RuntimeError, match="equal size"):
        dgdata.default_collate([[1, 2], [3]])


def test_default_collate_builds_batches_with_from_numpy(monkeypatch):
    calls = {"from_numpy": 0, "stack": 0}
    real_from_numpy, real_stack = dg._C.from_numpy, dg._C.stack

    def counting(name, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return wrapper

    from dygrad.utils.data import _collate
    monkeypatch.setattr(_collate._C, "from_numpy", counting("from_numpy", real_from_numpy))
    monkeypatch.setattr(_collate._C, "stack", counting("stack", real_stack))
    d_ds, _ = both()
    x, y = next(iter(dgdata.DataLoader(d_ds, batch_size=8)))
    assert calls == {"from_numpy": 2, "stack": 0}  # one stacked array per field, wrapped without a copy
    assert x.tolist() == X[:8].tolist()


def test_custom_collate_fn_and_worker_init_fn():
    def collate(samples):
        xs, ys = zip(*samples)
        return dg.stack(list(xs)) * 2, [int(v) for v in ys]

    d_ds, _ = both()
    for workers in (0, 2):
        loader = dgdata.DataLoader(d_ds, batch_size=10, collate_fn=collate, num_workers=workers,
                                   worker_init_fn=lambda wid: np.random.seed(wid))
        batches = list(loader)
        assert len(batches) == 11 and batches[0][0].tolist() == (X[:10] * 2).tolist()
        assert batches[-1][1] == Y[100:].tolist()


class ShardedRange:
    """torch's documented pattern: each worker yields its own slice of the range."""

    def __init__(self, get_worker_info, n=23):
        self.get_worker_info, self.n = get_worker_info, n

    def __iter__(self):
        info = self.get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


class Sharded(ShardedRange, tdata.IterableDataset):
    pass


class DgSharded(ShardedRange, dgdata.IterableDataset):
    pass


@pytest.mark.parametrize("workers", [0, 2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_iterable_dataset_with_workers_matches_torch(workers, drop_last):
    d_loader = dgdata.DataLoader(DgSharded(dgdata.get_worker_info), batch_size=4, num_workers=workers, drop_last=drop_last)
    t_loader = tdata.DataLoader(Sharded(tdata.get_worker_info), batch_size=4, num_workers=workers, drop_last=drop_last)
    assert [values(b) for b in d_loader] == [values(b) for b in t_loader]


class Failing(dgdata.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise KeyError(f"no sample {i}")
        return np.float32(i)


@pytest.mark.parametrize("workers", [0, 2])
def test_errors_in_samples_reach_the_loop_with_their_type(workers):
    with pytest.raises(KeyError, match="no sample 5"):
        list(dgdata.DataLoader(Failing(), batch_size=2, num_workers=workers))


class FailingUnpicklably(dgdata.Dataset):
    """Raises an exception whose class is local to a function: it cannot be pickled to the main process."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        class LocalError(Exception):
            pass

        raise LocalError(f"local failure at sample {i}")


def test_a_worker_exception_that_cannot_be_pickled_names_its_type():
    """Such an exception was dropped by the result queue's feeder thread and the loop waited forever (torch too,
    issue 32): it is raised as a RuntimeError carrying the worker's traceback and the class's name."""
    loader = dgdata.DataLoader(FailingUnpicklably(), batch_size=2, num_workers=1, timeout=60)
    with pytest.raises(RuntimeError, match=r"(?s)Caught LocalError in DataLoader worker process 0.*local failure at "
                                           r"sample 0.*cannot be sent to the main process"):
        next(iter(loader))


def test_workers_get_torchs_seeds_and_worker_info():
    def report(_):
        info = dgdata.get_worker_info()
        return np.array([info.id, info.num_workers, info.seed % 1000003])

    class Ids(dgdata.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return report(i)

    loader = dgdata.DataLoader(Ids(), batch_size=1, num_workers=2, generator=dg.Generator().manual_seed(9))
    rows = [b.tolist()[0] for b in loader]
    base = torch.empty((), dtype=torch.int64).random_(generator=torch.Generator().manual_seed(9)).item()
    assert rows == [[w, 2, (base + w) % 1000003] for w in (0, 1, 0, 1)]
    assert dgdata.get_worker_info() is None


def test_pin_memory_without_an_accelerator_warns_as_torch():
    # A fresh process: no device backend is up (test_devices.py brings the test device up for its process).
    code = """if True:
        import warnings, dygrad as dg, dygrad.utils.data as dgdata
        ds = dgdata.TensorDataset(dg.arange(8.0).reshape(4, 2))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batch = next(iter(dgdata.DataLoader(ds, batch_size=2, pin_memory=True)))
        assert any("pin_memory" in str(w.message) for w in caught), caught
        assert batch[0].tolist() == [[0.0, 1.0], [2.0, 3.0]] and not batch[0].is_pinned()
        print("ok")
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize("kwargs", [dict(num_workers=-1), dict(timeout=-1), dict(prefetch_factor=2),
                                    dict(persistent_workers=True), dict(shuffle=True, sampler=[0, 1]),
                                    dict(batch_sampler=[[0, 1]], batch_size=2), dict(batch_size=None, drop_last=True)])
def test_argument_errors_match_torch(kwargs):
    d_kwargs = {k: (dgdata.SequentialSampler(range(2)) if k == "sampler" else v) for k, v in kwargs.items()}
    t_kwargs = {k: (tdata.SequentialSampler(range(2)) if k == "sampler" else v) for k, v in kwargs.items()}
    d_ds, t_ds = both()
    with pytest.raises(ValueError) as t_err:
        tdata.DataLoader(t_ds, **t_kwargs)
    with pytest.raises(ValueError) as d_err:
        dgdata.DataLoader(d_ds, **d_kwargs)
    assert str(d_err.value) == str(t_err.value)
    with pytest.raises(ValueError, match="expected unspecified shuffle"):
        dgdata.DataLoader(DgSharded(dgdata.get_worker_info), shuffle=True)
    with pytest.raises(AssertionError, match="Size mismatch"):
        dgdata.TensorDataset(dg.zeros(3), dg.zeros(4))


def test_loader_waits_are_recorded_as_data_wait():
    d_ds, _ = both()
    loader = dgdata.DataLoader(d_ds, batch_size=16, num_workers=1)
    with dg.profiler.profile() as prof:
        for _ in loader:
            prof.step()
    assert len(prof.result.ranges_of("data_wait")) == len(loader) + 1  # the last wait ends the epoch
