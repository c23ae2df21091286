"""`MemoryStore`'s MemoryJournal: date-range pages over the daily notes' curated rows.

The logic lives in indexer/journal/ (ranges, snapshots, cursors); these are the store's entry
points to it, and the scan that feeds it rows: after a sync in a process of its own, or, in the
vault's owner (which never commits for a read), from the files for notes changed since their
commit and from the index for the rest.
"""

from memvault.indexer.journal.cursor import snapshot_store_for
from memvault.indexer.maintenance.derived import read_note_records
from memvault.vault.errors import StorageError
from memvault.vault.note_lines import note_lines


class JournalMethods:
    """Mixed into `MemoryStore` (indexer/engine/store.py), which provides `layout`, `sync`,
    `serving_index`, `_deferred`, `_lock`, `time_zone` and `defers_index_commits`."""

    #: BuJo hook: memory id → "valid" | "superseded" | "dropped" at journal snapshot time; None: all valid
    supersession_state = None
    _journal = None

    def journal(self, *, from_date=None, through_date=None, time_zone=None, limit=None, cursor=None):
        """One MemoryJournal page (a JournalPage): a first call with the three range fields, or a
        continuation with only `cursor` (valid within this store object's lifetime)."""
        arguments = {"fromDate": from_date, "throughDate": through_date, "timeZone": time_zone,
                     "limit": limit, "cursor": cursor}  # fmt: skip
        return self.journal_service().query(arguments)

    def journal_service(self, *, persistent: bool = False):
        """The JournalService: in-memory cursors, or (`persistent`, for the CLI) owner-only
        snapshots in `.index/journal/` that a later process can continue."""
        from memvault.indexer.journal.query import JournalService

        if persistent:
            snapshots = snapshot_store_for(self.layout.root, persistent=True)
            return JournalService(self.journal_scan, snapshots=snapshots, supersession_state=self.supersession_state)
        if self._journal is None:
            self._journal = JournalService(self.journal_scan, supersession_state=self.supersession_state)
        return self._journal

    def journal_scan(self, relpaths: list[str]):
        """The curated rows of these daily notes (brought up to date first), and which of them could
        not be read whole (unreadable, not UTF-8, oversized, merge-conflict markers)."""
        from memvault.indexer.journal.query import JournalScan

        if self.defers_index_commits:
            return self._journal_scan_beside_pending(relpaths)
        try:
            self.sync(relpaths)
            unsynced: list[str] = []
        except StorageError:  # a full disk: answer from the index, and name the notes it lags behind
            index = self.serving_index()
            unsynced = [
                path
                for path in index.stale_paths(self.layout, relpaths)
                if path in index.manifest.files or (self.layout.root / path).exists()
            ]
        index = self.serving_index()
        rows = [row for path in relpaths for row in self._in_note_order(path, index.rows_of(path).values())]
        incomplete = [path for path in relpaths if (state := index.manifest.files.get(path)) and state.problem]
        return JournalScan(rows, sorted(set(incomplete) | set(unsynced)))

    def _journal_scan_beside_pending(self, relpaths: list[str]):
        """`journal_scan` in an owner, which never commits for a read: notes changed since their
        last commit (writes waiting for it, a person's edit the watcher has not seen) are read
        from the files as that commit will read them, under the vault lock (never half an
        append); the others come from the index."""
        from memvault.indexer.journal.query import JournalScan
        from memvault.indexer.maintenance.sync import Row

        index = self.serving_index()
        with self._deferred.lock:
            pending = set(self._deferred.paths())
        changed = set(index.stale_paths(self.layout, relpaths)) | (pending & set(relpaths))
        with self._lock:
            fresh = {path: read_note_records(self.layout, path, self.time_zone) for path in relpaths if path in changed}
        rows, incomplete = [], []
        for path in relpaths:
            if path in fresh:
                rows.extend(Row.of_record(record) for record in fresh[path].records)
                state = fresh[path].state
            else:
                rows.extend(self._in_note_order(path, index.rows_of(path).values()))
                state = index.manifest.files.get(path)
            if state is not None and state.problem:
                incomplete.append(path)
        return JournalScan(rows, sorted(incomplete))

    def _in_note_order(self, path: str, rows) -> list:
        """A note's rows in the order the note holds them now (rows hold no line: the journal
        lists the memories of one minute as the note does); one it no longer holds goes last."""
        lines = note_lines(self.layout.root, path)
        return sorted(rows, key=lambda row: (lines.get(row.id, float("inf")), row.key))
