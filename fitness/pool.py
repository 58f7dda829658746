"""The parallel pool: a bounded number of evaluations at a time, each in its own fresh
sandboxed process, driven by one thread per slot.

A kernel process is never reused, so a crashed one is simply not there for the next
evaluation: the slot starts a new process. Work submitted under a key that is already in
flight joins the running evaluation instead of starting another one. Results stream back in
completion order behind an optional progress bar.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import Callable, Iterator, Sequence, TypeVar

T = TypeVar("T")


class EvalPool:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evaluation")
        self._lock = threading.Lock()
        self._inflight: dict[str, Future] = {}

    def submit(self, key: str, fn: Callable[[], T]) -> Future:
        """A future of `fn()`; the running one when `key` is already being evaluated."""
        with self._lock:
            running = self._inflight.get(key)
            if running is not None:
                return running
            future = self._executor.submit(fn)
            self._inflight[key] = future
        future.add_done_callback(lambda _f, key=key: self._forget(key, _f))
        return future

    def pending(self) -> int:
        """Evaluations submitted and not done (running or waiting for a slot)."""
        with self._lock:
            return len(self._inflight)

    def _forget(self, key: str, future: Future) -> None:
        with self._lock:
            if self._inflight.get(key) is future:
                del self._inflight[key]

    def completed(self, futures: Sequence[Future], progress: bool | str = False) -> Iterator[Future]:
        """`futures` as they finish, with a tqdm bar labelled `progress` (True: "evaluating")."""
        if not progress:
            yield from as_completed(futures)
            return
        from tqdm import tqdm

        label = progress if isinstance(progress, str) else "evaluating"
        with tqdm(total=len(futures), desc=label, unit="kernel", leave=False, dynamic_ncols=True) as bar:
            for future in as_completed(futures):
                bar.update(1)
                yield future

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
