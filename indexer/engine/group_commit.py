"""Group commit in the owner: Remembers that arrive together share one critical section and one
fsync per daily note (`bulk.remember_batch`); each caller is answered once its own note is
durable. Index commits are shared more widely still: the batch's notes join the store's deferred
set (indexer/engine/deferred.py) with every other write the owner makes (projected turns, the
watcher's hand edits), and this thread commits them when no write came for `IDLE_SECONDS`, at
least every `MAX_DELAY_SECONDS`, and when too many wait; never for a read (reads search the
pending rows beside the index, indexer/engine/overlay.py).

One committer thread takes everything waiting, writes it as one batch, and wakes the callers.
While a batch is being written the next one gathers, so under load batches grow by themselves
and an idle owner adds no delay (a lone call is written at once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

from memvault.indexer.engine.bulk import BATCH_ITEMS, RememberItem, remember_batch
from memvault.indexer.engine.deferred import IDLE_SECONDS
from memvault.indexer.results import RememberReceipt
from memvault.vault.errors import VaultError

#: the pause after a failed deferred index commit (a full disk) before the next try
RETRY_SECONDS = 1.0


class _Waiting:
    __slots__ = ("item", "done", "result")

    def __init__(self, item: RememberItem):
        self.item = item
        self.done = threading.Event()
        self.result: RememberReceipt | BaseException | None = None


class GroupCommit:
    def __init__(self, store, lock, now: Callable[[], datetime], log: Callable[[str], None] | None = None):
        self._store = store
        self._log = log or (lambda _message: None)
        self._retry_at = 0.0  # monotonic time before which a failed index commit is not retried
        self._lock = lock  # the owner's request lock: the store is used by one thread at a time
        self._now = now
        self._cond = threading.Condition()
        self._waiting: list[_Waiting] = []
        self._closed = False
        self._poked = False  # a write joined the deferred set outside a batch (the intake worker, the watcher)
        store._deferred.on_add = self.poke
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

    def poke(self) -> None:
        """Something was deferred: schedule its commit (idle pause, or the longest delay)."""
        with self._cond:
            self._poked = True
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(30)
        if self._store._deferred.on_add == self.poke:
            self._store._deferred.on_add = None

    def _run(self) -> None:
        deferred = self._store._deferred
        while True:
            with self._cond:
                wait = None if not deferred.pending else min(IDLE_SECONDS, deferred.seconds_until_due())
                if wait is not None:  # after a failed commit, not before the pause is over
                    wait = max(wait, self._retry_at - time.monotonic())
                self._cond.wait_for(lambda: self._waiting or self._closed or self._poked, timeout=wait)
                poked, self._poked = self._poked, False
                batch, self._waiting = self._waiting[:BATCH_ITEMS], self._waiting[BATCH_ITEMS:]
                closing = self._closed and not batch
            if poked and not batch and not closing and not deferred.due():
                continue  # a write arrived: wait for the pause after it (or until one waited long enough)
            commit_now = (not batch or deferred.due()) and time.monotonic() >= self._retry_at
            if commit_now or closing:  # idle for a moment, a write waited long enough, or closing
                self._flush()
            if closing:
                return
            if not batch:
                continue
            try:
                with self._lock:
                    results = remember_batch(self._store, [w.item for w in batch], self._now, defer_index=True)
            except BaseException as exc:  # the whole batch failed (index unavailable, lock timeout)
                results = [exc] * len(batch)
            for waiting, result in zip(batch, results):
                waiting.result = result
                waiting.done.set()

    def _flush(self) -> None:
        if not self._store._deferred.pending:
            return
        try:
            with self._lock:
                self._store.flush_deferred()
        except Exception as exc:  # kept pending: the next read or a later pause retries; the notes are durable
            self._retry_at = time.monotonic() + RETRY_SECONDS
            self._log(f"index commit of acknowledged remembers failed, retrying in {RETRY_SECONDS:g} s: {exc}")
