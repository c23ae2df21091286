"""Group commit in the owner: Remembers that arrive together share one critical section, one
fsync per daily note and one index commit (`bulk.remember_batch`); each caller is answered only
once its own write is durable and indexed.

One committer thread takes everything waiting, writes it as one batch, and wakes the callers.
While a batch is being written the next one gathers, so under load batches grow by themselves
and an idle owner adds no delay (a lone call is written at once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from memvault.indexer.engine.bulk import BATCH_ITEMS, RememberItem, remember_batch
from memvault.indexer.results import RememberReceipt
from memvault.vault.errors import VaultError


class _Waiting:
    __slots__ = ("item", "done", "result")

    def __init__(self, item: RememberItem):
        self.item = item
        self.done = threading.Event()
        self.result: RememberReceipt | BaseException | None = None


class GroupCommit:
    def __init__(self, store, lock, now: Callable[[], datetime]):
        self._store = store
        self._lock = lock  # the owner's request lock: the store is used by one thread at a time
        self._now = now
        self._cond = threading.Condition()
        self._waiting: list[_Waiting] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="memvault-group-commit", daemon=True)
        self._thread.start()

    def remember(self, text: str, at: datetime | None) -> RememberReceipt:
        """Queue one Remember and wait until its batch is durable; raises what a single call raises."""
        waiting = _Waiting(RememberItem(text, at))
        with self._cond:
            if self._closed:
                raise VaultError("the engine is stopping: retry in a moment")
            self._waiting.append(waiting)
            self._cond.notify()
        waiting.done.wait()
        if isinstance(waiting.result, BaseException):
            raise waiting.result
        return waiting.result

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(30)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._waiting or self._closed)
                if not self._waiting:
                    return
                batch, self._waiting = self._waiting[:BATCH_ITEMS], self._waiting[BATCH_ITEMS:]
            try:
                with self._lock:
                    results = remember_batch(self._store, [w.item for w in batch], self._now)
            except BaseException as exc:  # the whole batch failed (index unavailable, lock timeout)
                results = [exc] * len(batch)
            for waiting, result in zip(batch, results):
                waiting.result = result
                waiting.done.set()
