"""Semantic indexing off the write path: a bounded queue drained by one background thread.

BM25 is updated inside the write's critical section; embeddings are not (an HTTP embedding call
must never sit between an agent and its answer). Deltas wait here (at most 256 memories / 2 MiB
of passage text, the spec's bounds) and a worker embeds them in batches of 32 and commits them.
What does not fit, or fails, is not lost: the process's lag marker stays on disk and the next
open catches the vectors up from the files. A process that stays up (the vault's owner) does not
wait for that: an overflow schedules a catch-up from the files on this queue's own thread, run as
soon as the queued batches are in (`catch_up`, supplied by the store, told which notes overflowed
so it reads only those, or None past `MAX_LAGGING_NOTES`); until it has run, recall says
`degraded` with the number of memories waiting. A batch that fails (a full disk refusing the
vector file, an embedding server that is down) is handled the same way: its memories are counted
as waiting and the catch-up retries, pausing 1 s after a failure and doubling up to a minute, so
vectors are never left missing while the owner runs and recall says so meanwhile.
"""

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from memvault.indexer.maintenance.sync import IndexDelta
from memvault.indexer.search.context import passage
from memvault.vault.fsio import MACHINE_DIR_MODE, make_dir
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS
from memvault.vault.locks import pid_alive

MAX_QUEUE_ITEMS = 256
MAX_QUEUE_BYTES = 2 * 1024 * 1024
#: past this many notes waiting for a catch-up (a big checkout), the catch-up compares every row
MAX_LAGGING_NOTES = 1024
MARKER_PREFIX = "lag-"
MARKER_MODE = 0o600
#: the pause after a failed catch-up, doubled after each further failure up to the cap
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0
#: vectors committed in memory are saved to disk at most this long after the first unsaved batch
#: (and at once when someone drains or stops the queue): a save writes the whole vector index, so
#: saving after every batch cost a busy owner an O(vault) write under the vault lock many times a
#: second (and every 2 s still cost a loaded owner ~5% of its time and a 0.1 s stall of every
#: writer each time). A process killed meanwhile leaves its lag marker, and the next open catches
#: up: at most this long's vectors are embedded again.
SAVE_AFTER_SECONDS = 10.0


def marker_path(index_dir: Path, pid: int | None = None) -> Path:
    return index_dir / f"{MARKER_PREFIX}{pid or os.getpid()}"


def dead_markers(index_dir: Path) -> list[Path]:
    """Lag markers left by processes that are gone (their queued vectors never landed)."""
    found = []
    for entry in index_dir.glob(MARKER_PREFIX + "*"):
        pid = entry.name[len(MARKER_PREFIX) :]
        if pid.isdigit() and not pid_alive(int(pid)):
            found.append(entry)
    return found


def clear_marker(path: Path) -> None:
    """Remove a lag marker if there is one. Nothing is touched when there is none: on a read-only
    vault even unlinking a missing file fails (EROFS), and a reader never made a marker."""
    if os.path.lexists(path):
        path.unlink(missing_ok=True)


def delta_size(delta: IndexDelta) -> tuple[int, int]:
    items = len(delta.upserts) + len(delta.removed)
    return items, sum(len(passage(r).encode("utf-8")) for r in delta.upserts)


class SemanticQueue:
    """One worker thread; `run_batch(deltas)` embeds and commits (the store supplies it)."""

    def __init__(
        self,
        index_dir: Path,
        run_batch: Callable[[list[IndexDelta]], None],
        catch_up: Callable[[], None] | None = None,
        save: Callable[[], None] | None = None,
    ):
        self._index_dir = index_dir
        self._run_batch = run_batch
        self._catch_up = catch_up
        #: persists what batches committed in memory (None: `run_batch` saves itself)
        self._save = save
        self._unsaved_since: float | None = None  # monotonic time of the first batch not yet saved
        self._save_wanted = False  # a drain or stop asked for the save now
        #: memories whose vectors did not fit in the queue and wait for the catch-up (0: none)
        self.overflowed = 0
        #: the notes those memories are in, for the catch-up to read (None: any note may lag)
        self._lagging_notes: set[str] | None = set()
        self._items: list[IndexDelta] = []
        self._counts = (0, 0)
        self._cond = threading.Condition()
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        #: why vectors are behind (a failed batch or an overflow), or None
        self.lag_reason: str | None = None
        self._retry_pause = RETRY_FIRST_SECONDS

    def offer(self, delta: IndexDelta) -> bool:
        """Queue a delta; False (and a lag note) when it would exceed the bounds."""
        items, size = delta_size(delta)
        if items == 0:
            return True
        with self._cond:
            if self._stopping:
                return False
            self._mark_lagging()
            count, total = self._counts
            if count + items > MAX_QUEUE_ITEMS or total + size > MAX_QUEUE_BYTES:
                self.overflowed += items
                self._note_lagging([delta])
                if self._catch_up is None:
                    self.lag_reason = "semantic queue full: vectors catch up on the next open"
                else:  # this process catches up from the files once the queue is empty
                    self.lag_reason = f"semantic queue full: {self.overflowed} memories wait for vectors"
                    self._ensure_thread()
                    self._cond.notify()
                return False
            self._items.append(delta)
            self._counts = (count + items, total + size)
            self._ensure_thread()
            self._cond.notify()
            return True

    def mark_lagging(self, delta: IndexDelta) -> None:
        """Put this process's lag marker on disk before a delta is committed to BM25 (`offer`
        follows the commit); a process left with nothing queued clears it when it stops."""
        if delta.upserts or delta.removed:
            with self._cond:
                self._mark_lagging()

    def drain(self, timeout: float) -> bool:
        """Wait until everything queued so far is committed and saved; False on timeout."""
        with self._cond:
            self._save_wanted = True
            self._cond.notify_all()
            return self._cond.wait_for(lambda: not self._items and not self._busy and not self._catch_up_due()
                                       and self._unsaved_since is None, timeout)  # fmt: skip

    def _save_due(self) -> bool:
        if self._unsaved_since is None:
            return False
        return self._save_wanted or self._stopping or time.monotonic() - self._unsaved_since >= SAVE_AFTER_SECONDS

    def _until_save(self) -> float | None:
        if self._unsaved_since is None:
            return None
        return max(0.0, SAVE_AFTER_SECONDS - (time.monotonic() - self._unsaved_since))

    def _catch_up_due(self) -> bool:
        return self.overflowed > 0 and self._catch_up is not None

    def stop(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> bool:
        """Drain for up to `timeout` seconds, then stop the worker. True when nothing was left."""
        drained = self.drain(timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if drained and self.lag_reason is None:
            clear_marker(marker_path(self._index_dir))
        return drained

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="memvault-semantic", daemon=True)
            self._thread.start()

    def _mark_lagging(self) -> None:
        path = marker_path(self._index_dir)
        if not path.exists():
            make_dir(self._index_dir, MACHINE_DIR_MODE, parents=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, MARKER_MODE)
            try:
                os.fchmod(fd, MARKER_MODE)  # machine state: owner-only whatever the umask
            finally:
                os.close(fd)

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._items or self._stopping or self._catch_up_due() or self._save_due(),
                                    self._until_save())  # fmt: skip
                if not self._items and self._save_due():
                    self._busy, self._unsaved_since, self._save_wanted = True, None, False
                    work, waiting, batch = "save", 0, None
                elif not self._items and self._catch_up_due() and not self._stopping:
                    self._busy = True
                    work, waiting, batch = "catch_up", self.overflowed, None
                    notes, self._lagging_notes = self._lagging_notes, set()
                elif not self._items:
                    if self._stopping:
                        return
                    continue  # woken early for a save not yet due
                else:
                    batch, self._items, self._counts = self._items, [], (0, 0)
                    self._busy = True
                    work, waiting = "batch", 0
            try:
                if work == "save":
                    self._save()
                elif work == "catch_up":
                    self._run_catch_up(waiting, notes)
                else:
                    self._run_batch(batch)
                if work != "save" and self._save is not None:
                    with self._cond:
                        self._unsaved_since = self._unsaved_since or time.monotonic()
            except Exception as exc:  # the worker must survive provider outages; the marker stays
                self._batch_failed(batch, exc, unsaved=work == "save")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _batch_failed(self, batch: list[IndexDelta] | None, exc: Exception, *, unsaved: bool = False) -> None:
        """A failed batch is not dropped: where this process catches up, its memories wait for
        the catch-up from the files (the failed catch-up's own memories are still counted). A
        failed save (a full disk) has the catch-up compare the notes with what the disk holds."""
        reason = f"semantic indexing failed ({type(exc).__name__}: {exc})"
        with self._cond:
            if batch is not None and self._catch_up is not None:
                self.overflowed += sum(delta_size(delta)[0] for delta in batch)
                self._note_lagging(batch)
            if unsaved and self._catch_up is not None:
                self.overflowed = max(self.overflowed, 1)
                self._lagging_notes = None  # the disk lacks what memory held: compare every row
            if self._catch_up is not None:
                reason += f": {self.overflowed} memories wait for vectors, retried"
            self.lag_reason = reason

    def _note_lagging(self, deltas: list[IndexDelta]) -> None:
        """Remember which notes these deltas' memories are in (cond held)."""
        if self._lagging_notes is None:
            return
        for delta in deltas:
            self._lagging_notes |= {record.path for record in delta.upserts}
            self._lagging_notes |= {key.rpartition("#")[0] for key in delta.removed}
        if len(self._lagging_notes) > MAX_LAGGING_NOTES:
            self._lagging_notes = None

    def _run_catch_up(self, waiting: int, notes: set[str] | None) -> None:
        """Embed what the overflow (or a failed batch) left out, from the files: `notes`, or any
        note when None. Memories that overflowed while it ran stay counted, so another catch-up
        follows."""
        try:
            self._catch_up(notes)
        except Exception:
            with self._cond:  # a pause before the retry (provider outage, full disk, held lock)
                if notes is None or self._lagging_notes is None:
                    self._lagging_notes = None
                else:
                    self._lagging_notes |= notes
                self._cond.wait_for(lambda: self._stopping, self._retry_pause)
                self._retry_pause = min(self._retry_pause * 2, RETRY_MAX_SECONDS)
            raise
        with self._cond:
            self._retry_pause = RETRY_FIRST_SECONDS
            self.overflowed = max(0, self.overflowed - waiting)
            if self.overflowed == 0:
                self.lag_reason = None
