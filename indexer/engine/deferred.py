"""Index commits put off: notes written, fsynced and acknowledged, whose rows are not in the
index yet (the owner's group commit puts them off on purpose; an in-process remember whose index
save failed, on a full disk, leaves them here too, `MemoryStore._index_written`).

A Remember through the owner is acknowledged once its daily note is durable (the note is the
truth; the index is derived from it). Its index commit, the costly part of a lone write, is then
shared with whatever arrives next: the owner's committer (indexer/engine/group_commit.py)
commits when no write came for `IDLE_SECONDS`, at least every `MAX_DELAY_SECONDS` under a steady
stream, and when `MAX_PENDING_MEMORIES` wait, never because someone reads: the rows of the
memories waiting are kept here (`rows`) and every read searches them beside the committed index
(indexer/engine/overlay.py), so every read through the owner sees every acknowledged write at
once. If the owner dies in between, the next open's sync indexes the notes (their stat no longer
matches the manifest): nothing acknowledged is lost, and nothing is doubled (rows are keyed by
the bullet's block id).

The receipts of the memories added meanwhile answer a repeated Remember as `duplicate`, as the
index would once committed.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable

from memvault.indexer.engine.overlay import PendingRow, overlay_of
from memvault.indexer.results import RememberReceipt
from memvault.indexer.search.bm25 import record_key
from memvault.vault.records import MemoryRecord

#: commit once no write has arrived for this long (reads do not need the commit: a pause suffices)
IDLE_SECONDS = 0.2
#: and at least this often while they keep arriving
MAX_DELAY_SECONDS = 1.0
#: at most this many memories wait for a commit (a bound on what one flush re-reads)
MAX_PENDING_MEMORIES = 4096


class DeferredIndexing:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: held while the pending set changes; taken last, after any other lock, and held briefly
        self.lock = threading.RLock()
        self._paths: set[str] = set()
        #: content hash → (the memory's receipt, the version it was added at)
        self._receipts: dict[str, tuple[RememberReceipt, int]] = {}
        self._since: float | None = None  # monotonic time of the oldest pending write
        #: why the last commit failed (reads say so), None once one succeeded
        self.problem: str | None = None
        #: pending rows by key, read without a lock: replaced whole on every change, never edited
        self.rows: dict[str, PendingRow] = {}
        #: called after every add (the owner's committer wakes to schedule the commit)
        self.on_add: Callable[[], None] | None = None
        #: counts adds; a commit of the notes as read at version v settles what was added by then
        self.version = 0
        #: names this count: a client holding rows up to a version of another epoch starts over
        self.epoch = secrets.token_hex(8)
        self._path_versions: dict[str, int] = {}
        #: monotonic time of the latest add (the committer waits for a pause after it)
        self.last_add = 0.0

    @property
    def pending(self) -> bool:
        return bool(self._paths)

    def add(
        self, relpaths: list[str], receipts: dict[str, RememberReceipt], records: Iterable[MemoryRecord] = ()
    ) -> None:
        """Notes written and durable whose index commit is put off; `records`: the rows they
        gained, searched at once beside the committed index. Caller holds `lock`."""
        if not relpaths:
            return
        if relpaths and self._since is None:
            self._since = self._clock()
        self.version += 1
        self.last_add = self._clock()
        self._paths.update(relpaths)
        self._path_versions.update(dict.fromkeys(relpaths, self.version))
        self._receipts.update({digest: (receipt, self.version) for digest, receipt in receipts.items()})
        fresh = [
            PendingRow.again(self.rows.get(record_key(record.path, record.id)), record, self.version)
            for record in records
        ]  # a person's save of the day's note reads the pending rows again
        if fresh:
            self.rows = {**self.rows, **{row.key: row for row in fresh}}
        if self.on_add is not None:
            self.on_add()

    def view(self, bm25):
        """`bm25` with the pending rows beside it (itself while none wait)."""
        return overlay_of(bm25, self.rows)

    def receipt(self, digest: str) -> RememberReceipt | None:
        found = self._receipts.get(digest)
        return None if found is None else found[0]

    def due(self) -> bool:
        """True when the oldest pending write has waited `MAX_DELAY_SECONDS`, or too many wait."""
        if self._since is None:
            return False
        return self._clock() - self._since >= MAX_DELAY_SECONDS or len(self._receipts) >= MAX_PENDING_MEMORIES

    def seconds_until_due(self) -> float | None:
        if self._since is None:
            return None
        return max(0.0, MAX_DELAY_SECONDS - (self._clock() - self._since))

    def paths(self) -> list[str]:
        return sorted(self._paths)

    def read_point(self) -> tuple[list[str], int, float]:
        """What a commit of everything pending reads: the notes, the version and the time it
        reads them at (`committed` takes the latter two back). Caller holds `lock`."""
        return self.paths(), self.version, self._clock()

    def committed(self, relpaths: list[str], through: int | None = None, read_at: float | None = None) -> None:
        """These notes were just committed as read at version `through` (None: as they are now,
        the vault lock held): what was added for them by then is in the index. With `read_at`
        (`read_point`: every note pending then was read), what still waits was added after it,
        so the next commit is due `MAX_DELAY_SECONDS` after the read, not after the oldest add
        (a commit under a steady stream of writes was otherwise due again at once, and the
        committer never paused)."""
        through = self.version if through is None else through
        done = {path for path in relpaths if path in self._paths and self._path_versions.get(path, 0) <= through}
        if done:
            self._paths -= done
            for path in done:
                self._path_versions.pop(path, None)
        paths = set(relpaths)
        self._receipts = {digest: (r, v) for digest, (r, v) in self._receipts.items()
                          if not (v <= through and r.source.partition("#")[0] in paths)}  # fmt: skip
        self.rows = {
            key: row for key, row in self.rows.items() if not (row.version <= through and row.record.path in paths)
        }
        if not self._paths:
            self._since, self.problem = None, None
        elif read_at is not None and self._since is not None:
            self._since = max(self._since, read_at)

    def clear(self) -> None:
        """After a successful commit of `paths()` (a failed one leaves everything pending)."""
        self._paths, self._receipts, self._since, self.problem = set(), {}, None, None
        self._path_versions = {}
        self.rows = {}  # after the commit made them searchable there (readers dedupe by key meanwhile)
