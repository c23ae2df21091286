"""Group commit in the owner: Remembers that arrive together share one critical section and one
fsync per daily note (`bulk.remember_batch`); each caller is answered once its own note is
durable. Index commits are shared more widely still: the batch's notes join the store's deferred
set (indexer/engine/deferred.py) with every other write the owner makes (projected turns, the
watcher's hand edits), and a second thread commits them when no write came for `IDLE_SECONDS`,
at least every `MAX_DELAY_SECONDS`, and when too many wait; never for a read (reads search the
pending rows beside the index, indexer/engine/overlay.py).

The intake worker's projected Journal turns join the same batches (`remember_together`), so a
turn and the remembers beside it cost one append and one fsync of the day's note, and the
worker holds no vault lock of its own while they wait.

The writer thread takes every Remember waiting, writes it as one batch, and wakes the callers.
While a batch is being written the next one gathers, so under load batches grow by themselves
and an idle owner adds no delay (a lone call is written at once). The committer thread runs
beside it: a commit reads the notes under the vault lock and commits without it
(`MemoryStore.flush_deferred`), so batches keep being written while the index commits.
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
        self._lock = lock  # the owner's request lock: batches are written one request at a time
        self._now = now
        self._cond = threading.Condition()
        self._waiting: list[_Waiting] = []
        self._closed = False
        store._deferred.on_add = self.poke
        store.group_commit = self  # the intake worker's projected turns join the batches
        self._writer = threading.Thread(target=self._write_batches, name="memvault-group-commit", daemon=True)
        self._committer = threading.Thread(target=self._commit_when_due, name="memvault-index-commit", daemon=True)
        self._writer.start()
        self._committer.start()

    def remember(self, text: str, at: datetime | None) -> RememberReceipt:
        """Queue one Remember and wait until its batch is durable; raises what a single call raises."""
        waiting = _Waiting(RememberItem(text, at))
        with self._cond:
            if self._closed:
                raise VaultError("the engine is stopping: retry in a moment")
            self._waiting.append(waiting)
            self._cond.notify_all()
        waiting.done.wait()
        if isinstance(waiting.result, BaseException):
            raise waiting.result
        return waiting.result

    def remember_together(self, facts: list[tuple[str, datetime | None]]) -> list:
        """Queue many Remembers at once (the intake worker's projected turns) and wait until they
        are durable: one RememberReceipt, or the error that refused it, per fact, in order. Once
        the group commit is closing, written directly (`MemoryStore.remember_together`)."""
        waiting = [_Waiting(RememberItem(text, at)) for text, at in facts]
        with self._cond:
            queued = not self._closed
            if queued:
                self._waiting.extend(waiting)
                self._cond.notify_all()
        if not queued:
            with self._store._lock:
                return self._store.remember_together(facts)
        for each in waiting:
            each.done.wait()
        return [each.result for each in waiting]

    def poke(self) -> None:
        """Something joined the deferred set: the committer schedules its commit."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Write what waits, commit everything deferred, stop both threads."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._store.group_commit is self:
            self._store.group_commit = None
        self._writer.join(30)
        self._committer.join(30)
        if self._store._deferred.on_add == self.poke:
            self._store._deferred.on_add = None

    # --- the writer ------------------------------------------------------------------------------

    def _write_batches(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._waiting or self._closed)
                batch, self._waiting = self._waiting[:BATCH_ITEMS], self._waiting[BATCH_ITEMS:]
                if not batch:
                    return  # closed and nothing left
            try:
                with self._lock:
                    results = remember_batch(self._store, [w.item for w in batch], self._now, defer_index=True)
            except BaseException as exc:  # the whole batch failed (index unavailable, lock timeout)
                results = [exc] * len(batch)
            for waiting, result in zip(batch, results, strict=True):
                waiting.result = result
                waiting.done.set()

    # --- the committer ---------------------------------------------------------------------------

    def _commit_when_due(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    wait = self._until_due()
                    if wait is not None and wait <= 0:
                        break
                    self._cond.wait(wait)
                closing = self._closed
            if closing:
                self._writer.join(30)  # its last batch is in the deferred set before the last commit
            self._commit(closing)
            if closing:
                return

    def _until_due(self) -> float | None:
        """Seconds until the next commit is due (0: now), None while no write waits for one."""
        deferred = self._store._deferred
        if not deferred.pending:
            return None
        now = time.monotonic()
        if now < self._retry_at:
            return self._retry_at - now
        idle = now - deferred.last_add
        if idle >= IDLE_SECONDS or deferred.due():
            return 0.0
        return min(IDLE_SECONDS - idle, deferred.seconds_until_due())

    def _commit(self, closing: bool = False) -> None:
        try:
            self._store.flush_deferred()
        except Exception as exc:  # kept pending: a later pause retries; the notes are durable
            self._retry_at = time.monotonic() + RETRY_SECONDS
            self._log(f"index commit of acknowledged writes failed, retrying in {RETRY_SECONDS:g} s: {exc}")
