"""DataLoader: a background thread samples batches from a TokenDataset and converts them to tensors ahead of
time (a bounded queue), so the training loop's data wait is only what the prefetch cannot hide. The time the
consumer waits is measured (`wait_seconds`) for the profiler's data-loading bucket.

Batch i is drawn from a generator seeded with (seed, i), so a run resumed at step i sees exactly the batches
an uninterrupted run would have seen, whatever the prefetch thread had drawn ahead. `share=(index, count)`: each
batch is drawn whole and the index-th of `count` equal contiguous shares of its rows is yielded (the ranks of
dygrad.train --batch-split: together they see exactly the single process's batches)."""
import queue
import threading
import time

import numpy as np

from .. import _C
from ..profiler import data_wait


class DataLoader:
    def __init__(self, dataset, batch_size, seed=0, start_step=0, prefetch=2, share=(0, 1)):
        index, count = share
        if count < 1 or not 0 <= index < count or batch_size % count:
            raise ValueError(f"[DataLoader] share {tuple(share)} of batch_size {batch_size}: expected 0 <= index < "
                             "count and a batch size that divides by count")
        self.dataset = dataset
        self.batch_size = batch_size
        self.share_rows = slice(index * batch_size // count, (index + 1) * batch_size // count)
        self.seed = seed
        self.next_index = start_step
        self.queue = queue.Queue(maxsize=max(prefetch, 1))
        self.stop = threading.Event()
        self.wait_seconds = 0.0  # total time next() waited for a batch
        self.last_wait = 0.0
        self.error = None
        self.thread = threading.Thread(target=self._produce, name="dygrad-dataloader", daemon=True)
        self.thread.start()

    def _produce(self):
        try:
            while not self.stop.is_set():
                rng = np.random.default_rng([self.seed, self.next_index])
                self.next_index += 1
                x, y = self.dataset.sample(self.batch_size, rng)
                x, y = x[self.share_rows], y[self.share_rows]
                batch = (_C.from_numpy(x), _C.from_numpy(y))
                while not self.stop.is_set():
                    try:
                        self.queue.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as e:  # surfaced in the consumer
            self.error = e
            self.queue.put(None)

    def __iter__(self):
        return self

    def __next__(self):
        start = time.perf_counter()
        with data_wait():  # the profiler's data-loading bucket
            batch = self.queue.get()
        self.last_wait = time.perf_counter() - start
        self.wait_seconds += self.last_wait
        if batch is None:
            raise RuntimeError("[DataLoader] the prefetch thread failed") from self.error
        return batch

    def close(self):
        self.stop.set()
        try:
            while True:
                self.queue.get_nowait()
        except queue.Empty:
            pass
        self.thread.join(timeout=1.0)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
