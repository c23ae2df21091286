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

import threading
import time

from collections.abc import Callable, Iterable

from memvault.indexer.engine.overlay import PendingRow, overlay_of
from memvault.indexer.results import RememberReceipt
from memvault.vault.records import MemoryRecord

#: commit once no Remember has arrived for this long
IDLE_SECONDS = 0.05
#: and at least this often while they keep arriving
MAX_DELAY_SECONDS = 0.5
#: at most this many memories wait for a commit (a bound on what one flush re-reads)
MAX_PENDING_MEMORIES = 4096


class DeferredIndexing:
    def __init__(self) -> None:
        #: held while the pending set is changed or committed; taken after the vault lock, never before
        self.lock = threading.RLock()
        self._paths: set[str] = set()
        self._receipts: dict[str, RememberReceipt] = {}  # content hash → the memory's receipt
        self._since: float | None = None  # monotonic time of the oldest pending write
        #: why the last commit failed (reads say so), None once one succeeded
        self.problem: str | None = None
        #: pending rows by key, read without a lock: replaced whole on every change, never edited
        self.rows: dict[str, PendingRow] = {}
        #: called after every add (the owner's committer wakes to schedule the commit)
        self.on_add: Callable[[], None] | None = None

    @property
    def pending(self) -> bool:
        return bool(self._paths)

    def add(self, relpaths: list[str], receipts: dict[str, RememberReceipt],
            records: Iterable[MemoryRecord] = ()) -> None:
        """Notes written and durable whose index commit is put off; `records`: the rows they
        gained, searched at once beside the committed index. Caller holds `lock`."""
        if relpaths and self._since is None:
            self._since = time.monotonic()
        self._paths.update(relpaths)
        self._receipts.update(receipts)
        fresh = [PendingRow.of(record) for record in records]
        if fresh:
            self.rows = {**self.rows, **{row.key: row for row in fresh}}
        if self.on_add is not None:
            self.on_add()

    def view(self, bm25):
        """`bm25` with the pending rows beside it (itself while none wait)."""
        return overlay_of(bm25, self.rows)

    def receipt(self, digest: str) -> RememberReceipt | None:
        return self._receipts.get(digest)

    def due(self) -> bool:
        """True when the oldest pending write has waited `MAX_DELAY_SECONDS`, or too many wait."""
        if self._since is None:
            return False
        return time.monotonic() - self._since >= MAX_DELAY_SECONDS or len(self._receipts) >= MAX_PENDING_MEMORIES

    def seconds_until_due(self) -> float | None:
        if self._since is None:
            return None
        return max(0.0, MAX_DELAY_SECONDS - (time.monotonic() - self._since))

    def paths(self) -> list[str]:
        return sorted(self._paths)

    def committed(self, relpaths: list[str]) -> None:
        """These notes were just committed whole (a sync, a projection): what waited for them is in."""
        done = set(relpaths) & self._paths
        if not done:
            return
        self._paths -= done
        self._receipts = {digest: r for digest, r in self._receipts.items() if r.source.partition("#")[0] not in done}
        self.rows = {key: row for key, row in self.rows.items() if row.record.path not in done}
        if not self._paths:
            self._since = None

    def clear(self) -> None:
        """After a successful commit of `paths()` (a failed one leaves everything pending)."""
        self._paths, self._receipts, self._since, self.problem = set(), {}, None, None
        self.rows = {}  # after the commit made them searchable there (readers dedupe by key meanwhile)
