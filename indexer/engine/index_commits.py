"""`MemoryStore`'s index commits: the notes memvault wrote, or a person saved, made to hold in
the serving generation (`_apply`), at once or, in an owner, put off to its commit timer with
their rows searchable beside the index meanwhile (`deferred.py`). The engine
(`backend.base.IndexGenerations`) gives the generation; this is what is written to it."""

from collections.abc import Iterable

from memvault.indexer.maintenance.derived import BoundaryHook, read_note_records
from memvault.indexer.maintenance.sync import IndexDelta
from memvault.vault.errors import StorageError, VaultError
from memvault.vault.layout import parse_note_relpath
from memvault.vault.note_append import written_last_by_us
from memvault.vault.paths import resolve_inside
from memvault.vault.recent_writes import lines_lost_from, repair_lost_lines
from memvault.vault.storage_errors import translates_storage_errors

#: how often a commit repairs and reads its notes again while saves keep dropping memvault's lines
_REPAIRED_READ_ATTEMPTS = 4
#: why an index commit failed, said in recall's `degraded` (by StorageError code)
_LAG_REASONS = {"disk_full": "no space left on the device", "read_only": "the vault is read-only",
                "permission_denied": "permission denied"}  # fmt: skip


class IndexCommits:
    """Mixed into `MemoryStore` (store.py), which provides `layout`, `time_zone`, `_lock`,
    `_index_lock`, `_deferred`, `_engine` and `_intake_hook`."""

    def _read_ahead(self, paths: list[str]) -> None:
        """Read and parse the notes a save changed before the vault lock is taken. A person who
        adds a line above a day's 20,000 memories makes every memory below it parse again (0.9 s):
        under the lock, the repair and the read then find this parse and these records kept
        (vault/note.py, vault/records.py), and every writer waits only for what changed since,
        seldom anything.
        A note exactly as this process's last append left it (the watcher's event for that
        append) is not read."""
        for path in paths:
            if parse_note_relpath(path) is None:
                continue
            try:
                if written_last_by_us(resolve_inside(self.layout.root, path)):
                    continue
            except VaultError:
                continue  # a symlinked folder: the sync under the lock says so
            read_note_records(self.layout, path, self.time_zone)

    def _defer_edits(self, paths: list[str], *, skip_own_appends: bool = False) -> tuple[IndexDelta, list[str]]:
        """The owner's watcher: what a save changed in these notes, searchable at once beside the
        index (new and edited rows; a removed row stays until the commit; rows hold no line, so
        a line added above a day's memories changes none of them) and committed on the
        committer's timer. Vault lock held; the index lock is not taken, so a save never waits
        for a commit in flight (reading rows beside it is safe). With `skip_own_appends` (the
        watcher), a note exactly as this process's own last append left it is skipped: its new
        rows joined the deferred set with the append, and the commit reads the note anyway."""
        index = self.writable_index()
        stale = index.stale_paths(self.layout, paths)
        if skip_own_appends:
            stale = [path for path in stale if not written_last_by_us(resolve_inside(self.layout.root, path))]
        delta = IndexDelta()
        for item in (read_note_records(self.layout, path, self.time_zone) for path in stale):
            delta.extend(index.diff_note(item.path, item.records)[0])
        with self._deferred.lock:
            self._deferred.add(stale, {}, delta.upserts)
        return delta, stale

    #: set by the owner: index commits of memvault's own writes (and the watcher's) run on its
    #: commit timer, and reads search the pending rows beside the index (indexer/engine/deferred.py)
    defers_index_commits = False

    @translates_storage_errors
    def index_notes(self, relpaths: Iterable[str]) -> None:
        """Index these notes now, under the vault lock (re-entrant for a caller that holds it);
        in an owner, on its commit timer."""
        with self._lock:
            if self.defers_index_commits:  # their rows searchable at once (capture's next candidate lookup)
                self._defer_edits(list(relpaths))
                return
            self._apply(self.writable_index(), list(relpaths))

    def flush_deferred(self) -> None:
        """Commit to the index the notes the owner acknowledged meanwhile (indexer/engine/deferred.py).
        A failure leaves them pending; raises it.

        The notes are read under the vault lock (an append is never seen half-written); the
        commit itself, the costly part, runs under the index lock alone, so writers go on
        appending to notes meanwhile. What they add after the read stays pending for the next."""
        if not self._deferred.pending:
            return
        self._lock.acquire()
        try:
            with self._deferred.lock:
                paths, through, read_at = self._deferred.read_point()
            paths = sorted(set(paths))
            if not paths:
                return
            self._index_lock.acquire()  # before the vault lock is let go: no other index write between
            try:
                indexed = self._read_repaired(paths)
                index = self.writable_index()
            except BaseException:
                self._index_lock.release()
                raise
        finally:
            self._lock.release()
        try:
            self._apply(index, paths, self._intake_hook, indexed=indexed, through=through, read_at=read_at)
        finally:
            self._index_lock.release()

    def _read_repaired(self, paths: list[str]) -> list:
        """The notes as a commit reads them, with every line memvault wrote lately: a save that
        dropped one is repaired first, and a save landing between that repair and the read
        (an editor saving many times a second) is repaired and read again, a few times at most.
        Committed without its line, a memory would leave the pending rows before the index
        had it, and for the moment until the watcher's repair no read would find it."""
        for _ in range(_REPAIRED_READ_ATTEMPTS):
            repair_lost_lines(self.layout, paths)
            indexed = [read_note_records(self.layout, path, self.time_zone) for path in paths]
            if not lines_lost_from(self.layout, {item.path: [r.id for r in item.records] for item in indexed}):
                break
        return indexed

    def _index_written(self, index, relpaths: list[str], receipts: dict, records=()) -> None:
        """Index notes that now durably hold new lines. The note is the commit point: in an owner
        the commit is put off (its rows are searchable at once meanwhile); elsewhere, if the index
        cannot take them (a full disk), the write still stands: the notes wait in the deferred
        set, the next write or open retries the commit, and recall says in `degraded` why it lags."""
        if self.defers_index_commits:
            with self._deferred.lock:
                self._deferred.add(relpaths, receipts, records)
            return
        try:
            self._apply(index, relpaths)
        except (OSError, StorageError) as exc:
            reason = getattr(exc, "strerror", None) or _LAG_REASONS.get(getattr(exc, "code", None), str(exc))
            with self._deferred.lock:
                self._deferred.add(relpaths, receipts, records)
                self._deferred.problem = (f"written to {', '.join(relpaths)} but not indexed yet ({reason}): "
                                          "free space or fix the index folder's mode; every read retries")  # fmt: skip

    def _commit_acknowledged(self) -> None:
        """Before a read: commit what the owner acknowledged and put off. Never raises: the read
        is served, and says in recall's `degraded` what it may miss (until a commit succeeds)."""
        if not self._deferred.pending:
            return
        try:
            self.flush_deferred()
        except (VaultError, OSError) as exc:
            self._deferred.problem = f"acknowledged writes not yet indexed: {exc}"

    # --- index plumbing ----------------------------------------------------------------------

    def _apply(self, index, relpaths: list[str], hook: BoundaryHook | None = None, *, indexed=None,
               through: int | None = None, read_at: float | None = None) -> IndexDelta:  # fmt: skip
        """Make `index` hold these notes as they are (`indexed`: as they were read, under the
        vault lock, `through` that version of the deferred set). Vault lock held, or the index
        lock taken while it was and `indexed` given: reading the serving index's notes here
        repairs them first (`_read_repaired`), which writes."""
        with self._index_lock:
            serving = index is self._engine.current
            if indexed is None and serving and self._deferred.pending:
                indexed = self._read_repaired(relpaths)  # its commit drops pending rows (an owner's)
            elif indexed is None:
                indexed = [read_note_records(self.layout, path, self.time_zone) for path in relpaths]
            if self._intake_hook is not None and serving and self._deferred.pending:
                if not set(self._deferred.paths()).isdisjoint(relpaths):
                    # crash tests: acknowledged, not committed (whichever commit takes them: the
                    # committer's timer, or a rescan of the watcher's that came first)
                    self._intake_hook("deferred.committing")
            delta = index.apply(indexed, hook)
            if serving:
                self._engine.seen(index)
                if self._deferred.pending:  # committed now: what waited for these notes steps aside
                    with self._deferred.lock:
                        self._deferred.committed(relpaths, through, read_at)
        return delta

    @property
    def index_files_on_this_machine(self) -> bool:
        """The index is files on this machine that another process of the vault may open and read
        itself (False: on a server, where the owner answers its reads)."""
        return self._engine.files_on_this_machine

    def writable_index(self):
        """The serving generation, current with other processes' commits; created if missing.
        Caller holds the vault lock."""
        return self._engine.writable()

    def serving_index(self, create_missing: bool = False, *, flush: bool = False):
        """The serving generation for a read. Reads never wait for an index commit: recall
        searches the acknowledged, uncommitted rows beside it (`self._deferred.view`). With
        `flush` (health, which compares files with the index) they are committed first."""
        if flush:
            self._commit_acknowledged()
        return self._engine.serving(create_missing)
