"""DataLoader as torch.utils.data.DataLoader: the same arguments, checks, sampling order (a seeded Generator
gives torch's batches) and collation, single-process or with worker processes.

Workers (see docs/pytorch-api.md, "DataLoader workers"): processes forked as torch forks them on Linux, each
switching dygrad to synchronous execution first (a forked child has no stream worker or pool threads, so a
queued op would never run; inline ops do). A worker fetches samples and collates them into NumPy arrays,
never dygrad tensors; the parent wraps each batch array with from_numpy. Every wait of the training loop for
a batch is timed into the profiler's data-wait bucket."""
import collections.abc
import itertools
import multiprocessing
import os
import pickle
import queue
import random
import sys
import traceback
import warnings

import numpy as np

from ... import _C, _generator
from ...profiler import data_wait
from . import _collate
from .dataset import IterableDataset, Subset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler

_worker_info = None


class WorkerInfo:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def __repr__(self):
        return "WorkerInfo(" + ", ".join(f"{k}={v}" for k, v in self.__dict__.items()) + ")"


def get_worker_info():
    """In a worker process: its id, num_workers, seed and dataset copy; None in the main process."""
    return _worker_info


class DataLoader:
    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if isinstance(shuffle, bool) and shuffle:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler option, but got "
                                 f"sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified batch_sampler option, but "
                                 f"got batch_sampler={batch_sampler}")
        else:
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                                 "drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        self.collate_fn = collate_fn
        self._auto_collation = batch_sampler is not None or (self._iterable and batch_size is not None)
        self._iterator = None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def __len__(self):
        if self._iterable:
            length = len(self.dataset)
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else -(-length // self.batch_size)
            return length
        return len(self._index_sampler)

    def __iter__(self):
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None:
                self._iterator = _MultiProcessIter(self)
            else:
                self._iterator._reset()
            return self._iterator
        return _SingleProcessIter(self) if self.num_workers == 0 else _MultiProcessIter(self)

    # --- what a fetch does, in the main process or a worker ----------------------------------------------------
    def _collate(self, samples):
        if self.collate_fn is not None:
            return self.collate_fn(samples)
        return _collate.to_arrays(samples) if self._auto_collation else _convert_arrays(samples)


def _convert_arrays(sample):
    """batch_size=None: default_convert, with tensors' NumPy stage kept for the parent."""
    return _collate.detach_tensors(_collate.default_convert(sample))


def _tensor_rows(dataset, indices):
    """The batch default_collate would make from a TensorDataset (or Subsets of one), as NumPy arrays gathered
    in one step per tensor instead of one tensor per sample and field; None for any other dataset (whose
    __getitem__ may do anything). Same values, dtypes and shapes as the per-sample path."""
    while type(dataset) is Subset:
        subset_indices = dataset.indices
        indices = [subset_indices[i] for i in indices]
        dataset = dataset.dataset
    if type(dataset) is not TensorDataset or not dataset.tensors:
        return None
    arrays = dataset._row_arrays()
    index = np.asarray(indices, dtype=np.int64)
    n = len(dataset)
    if index.size and (index.min() < -n or index.max() >= n):
        return None  # out of range: the per-sample path raises torch's IndexError
    return [_collate.TensorData(np.take(a, index, axis=0), dtype) for a, dtype in arrays]


def _fetch_map(dataset, indices, auto_collation):
    if auto_collation:
        getitems = getattr(dataset, "__getitems__", None)
        return getitems(indices) if callable(getitems) else [dataset[i] for i in indices]
    return dataset[indices]


def pin_memory(data):
    """data with every tensor in it pinned (torch.utils.data's pin_memory): tensors, mappings, named tuples, tuples and
    lists, and objects with a pin_memory() method; anything else as it is."""
    if isinstance(data, _C.Tensor):
        return data.pin_memory()
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        pinned = {k: pin_memory(v) for k, v in data.items()}
        try:
            return type(data)(pinned)
        except TypeError:  # a mapping type that cannot be made from a dict
            return pinned
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a named tuple
        return type(data)(*(pin_memory(v) for v in data))
    if isinstance(data, tuple):
        return tuple(pin_memory(v) for v in data)
    if isinstance(data, collections.abc.Sequence):
        pinned = [pin_memory(v) for v in data]
        try:
            return type(data)(pinned)
        except TypeError:
            return pinned
    if hasattr(data, "pin_memory"):
        return data.pin_memory()
    return data


class _BaseIter:
    def __init__(self, loader):
        self._loader = loader
        self._dataset = loader.dataset
        self._auto_collation = loader._auto_collation
        self._sampler_iter = iter(loader._index_sampler) if not loader._iterable else None
        self._base_seed = (loader.generator or _generator.default_generator)._random64() % (1 << 63)
        self._num_yielded = 0
        # torch's: batches in page-locked memory while a device backend provides it (a device's non-blocking copy then
        # reads them directly, docs/devices.md "Pinned host memory"), else a warning and pageable batches.
        self._pin = bool(loader.pin_memory) and _C._pinned_memory_available()
        if loader.pin_memory and not self._pin:
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then device pinned "
                          "memory won't be used.")

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._loader)

    def __next__(self):
        with data_wait():  # the profiler's data-loading bucket: the whole time the loop waits for a batch
            data = self._next_data()
            if self._pin:
                data = pin_memory(data)
        self._num_yielded += 1
        return data


class _SingleProcessIter(_BaseIter):
    def __init__(self, loader):
        super().__init__(loader)
        if loader._iterable:
            self._dataset_iter = iter(self._dataset)

    def _next_data(self):
        loader = self._loader
        if loader._iterable:
            if self._auto_collation:
                samples = list(itertools.islice(self._dataset_iter, loader.batch_size))
                if not samples or (loader.drop_last and len(samples) < loader.batch_size):
                    raise StopIteration
            else:
                samples = next(self._dataset_iter)
        else:
            indices = next(self._sampler_iter)
            if self._auto_collation and loader.collate_fn is None:
                rows = _tensor_rows(self._dataset, indices)
                if rows is not None:
                    return _collate.materialize(rows)
            samples = _fetch_map(self._dataset, indices, self._auto_collation)
        if loader.collate_fn is not None:
            return loader.collate_fn(samples)
        if self._auto_collation:
            return _collate.default_collate(samples)
        return _collate.default_convert(samples)


# --- worker processes ------------------------------------------------------------------------------------------
class _WorkerError:
    """An exception raised in a worker, re-raised in the parent with the worker's traceback."""

    def __init__(self, worker_id, exc):
        self.exc_type = type(exc)
        self.message = (f"Caught {type(exc).__name__} in DataLoader worker process {worker_id}.\nOriginal "
                        + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        try:  # sent through the result queue, whose feeder thread would drop it silently (a hang in the parent)
            pickle.dumps(self.exc_type, pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 (a class defined in a function, ...): raised as RuntimeError
            self.exc_type = None
            self.message += (f"(raised as RuntimeError: the exception's class "
                             f"{type(exc).__module__}.{type(exc).__qualname__} cannot be sent to the main process: "
                             f"{type(e).__name__}: {e})\n")

    def reraise(self):
        try:
            error = self.exc_type(self.message) if self.exc_type is not None else RuntimeError(self.message)
        except Exception:
            error = RuntimeError(self.message)
        raise error


class _IterableEnd:
    def __init__(self, worker_id):
        self.worker_id = worker_id


def _worker_loop(loader, worker_id, num_workers, base_seed, index_queue, result_queue):
    global _worker_info
    # A forked child has no stream worker or pool threads: run every dygrad op inline on this thread.
    from ... import runtime
    runtime.set_context(synchronize=True)
    seed = base_seed + worker_id
    random.seed(seed)
    _generator.manual_seed(seed)
    np.random.seed(np.random.SeedSequence([worker_id, base_seed & 0xFFFFFFFF, base_seed >> 32, 0]).generate_state(4))
    _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=loader.dataset)
    init_error = None
    try:
        if loader.worker_init_fn is not None:
            loader.worker_init_fn(worker_id)
        dataset_iter = iter(loader.dataset) if loader._iterable else None
    except Exception as e:
        init_error = _WorkerError(worker_id, e)
    while True:
        try:
            task = index_queue.get(timeout=5.0)
        except queue.Empty:
            if os.getppid() == 1:  # the parent died
                return
            continue
        if task is None:
            return
        task_id, indices = task
        if init_error is not None:
            result_queue.put((task_id, init_error))
            init_error = None
            continue
        try:
            if loader._iterable:
                if loader._auto_collation:
                    samples = list(itertools.islice(dataset_iter, loader.batch_size))
                    if not samples or (loader.drop_last and len(samples) < loader.batch_size):
                        result_queue.put((task_id, _IterableEnd(worker_id)))
                        continue
                else:
                    try:
                        samples = next(dataset_iter)
                    except StopIteration:
                        result_queue.put((task_id, _IterableEnd(worker_id)))
                        continue
            else:
                rows = (_tensor_rows(loader.dataset, indices) if loader._auto_collation and loader.collate_fn is None
                        else None)
                if rows is not None:
                    result_queue.put((task_id, pickle.dumps(rows, pickle.HIGHEST_PROTOCOL)))
                    continue
                samples = _fetch_map(loader.dataset, indices, loader._auto_collation)
            data = loader._collate(samples)
            # Pickled here, not in the queue's feeder thread, which would drop an unpicklable batch silently.
            result_queue.put((task_id, pickle.dumps(_collate.detach_tensors(data), pickle.HIGHEST_PROTOCOL)))
        except Exception as e:
            result_queue.put((task_id, _WorkerError(worker_id, e)))


class _MultiProcessIter(_BaseIter):
    def __init__(self, loader):
        super().__init__(loader)
        context = loader.multiprocessing_context
        if context is None:
            context = "fork" if sys.platform.startswith("linux") else None
        if isinstance(context, str) or context is None:
            context = multiprocessing.get_context(context)
        _C.synchronize()  # nothing queued may be pending when the stream's memory is forked
        self._result_queue = context.Queue()
        self._index_queues, self._workers = [], []
        for worker_id in range(loader.num_workers):
            index_queue = context.Queue()
            w = context.Process(target=_worker_loop, daemon=True,
                                args=(loader, worker_id, loader.num_workers, self._base_seed, index_queue,
                                      self._result_queue))
            w.start()
            self._index_queues.append(index_queue)
            self._workers.append(w)
        self._shutdown = False
        self._reset(first=True)

    def _reset(self, first=False):
        if not first:
            self._sampler_iter = iter(self._loader._index_sampler) if not self._loader._iterable else None
            self._num_yielded = 0
        self._send_idx = 0  # next task to send
        self._rcvd_idx = 0  # next task to return
        self._task_worker = {}  # task -> worker, for outstanding tasks
        self._results = {}  # task -> data received out of order
        self._active = [True] * self._loader.num_workers
        self._worker_cycle = itertools.cycle(range(self._loader.num_workers))
        self._sampler_done = False
        if self._loader._iterable and not first:  # persistent workers restart their dataset iterators
            raise NotImplementedError("DataLoader: persistent_workers with an IterableDataset is not supported "
                                      "by dygrad yet")
        for _ in range(self._loader.prefetch_factor * self._loader.num_workers):
            self._try_put_index()

    def _try_put_index(self):
        if self._sampler_done or not any(self._active):
            return
        if self._loader._iterable:
            indices = None
        else:
            try:
                indices = next(self._sampler_iter)
            except StopIteration:
                self._sampler_done = True
                return
        for _ in range(self._loader.num_workers):
            worker = next(self._worker_cycle)
            if self._active[worker]:
                break
        self._index_queues[worker].put((self._send_idx, indices))
        self._task_worker[self._send_idx] = worker
        self._send_idx += 1

    def _get_result(self):
        timeout = self._loader.timeout if self._loader.timeout > 0 else 5.0
        while True:
            try:
                return self._result_queue.get(timeout=timeout)
            except queue.Empty:
                if self._loader.timeout > 0:
                    raise RuntimeError(f"DataLoader timed out after {self._loader.timeout} seconds") from None
                dead = [str(w.pid) for w in self._workers if not w.is_alive()]
                if dead:
                    self._shutdown_workers()
                    raise RuntimeError(f"DataLoader worker (pid(s) {', '.join(dead)}) exited unexpectedly") from None

    def _next_data(self):
        while True:
            if self._rcvd_idx >= self._send_idx:  # nothing outstanding: the epoch is over
                if not self._loader.persistent_workers:
                    self._shutdown_workers()
                raise StopIteration
            if self._rcvd_idx not in self._task_worker:  # a task of a worker whose iterable ended
                self._rcvd_idx += 1
                continue
            if self._rcvd_idx in self._results:
                data = self._results.pop(self._rcvd_idx)
            else:
                task_id, data = self._get_result()
                if task_id != self._rcvd_idx:  # batches come back in sampler order (in_order=False too)
                    self._results[task_id] = data
                    continue
            task_id = self._rcvd_idx
            self._task_worker.pop(task_id)
            self._rcvd_idx += 1
            if isinstance(data, _IterableEnd):
                self._active[data.worker_id] = False
                for t in [t for t, w in self._task_worker.items() if w == data.worker_id]:
                    self._task_worker.pop(t)
                    self._results.pop(t, None)
                continue
            self._try_put_index()
            if isinstance(data, _WorkerError):
                self._shutdown_workers()
                data.reraise()
            return _collate.materialize(pickle.loads(data))

    def _shutdown_workers(self):
        if self._shutdown:
            return
        self._shutdown = True
        for q in self._index_queues:
            q.put(None)
        for w in self._workers:
            w.join(timeout=5.0)
            if w.is_alive():
                w.terminate()
        for q in self._index_queues + [self._result_queue]:
            q.cancel_join_thread()
            q.close()

    def __del__(self):
        try:
            self._shutdown_workers()
        except Exception:
            pass
