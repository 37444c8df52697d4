"""DataLoader: a background thread samples batches from a TokenDataset and converts them to tensors ahead of
time (a bounded queue), so the training loop's data wait is only what the prefetch cannot hide. The time the
consumer waits is measured (`wait_seconds`) for the profiler's data-loading bucket.

Batch i is drawn from a generator seeded with (seed, i), so a run resumed at step i sees exactly the batches
an uninterrupted run would have seen, whatever the prefetch thread had drawn ahead."""
import queue
import threading
import time

import numpy as np

from .. import _C
from ..profiler import data_wait


class DataLoader:
    def __init__(self, dataset, batch_size, seed=0, start_step=0, prefetch=2):
        self.dataset = dataset
        self.batch_size = batch_size
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
