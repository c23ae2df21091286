"""One generation's derived state (BM25 + manifest) and how canonical files flow into it.

`DerivedIndex.apply(list[FileIndexing])` is the single place file changes enter the index:
Remember, sync on open, the watcher and rebuild all go through it. It diffs each file's new
records against the rows the index holds for that file (`indexer/maintenance/sync.py`), hands the delta to
every extra component (vectors), commits BM25 (the commit point), then records the files'
states in the manifest. Every step is idempotent, so a crash anywhere is repaired by applying
the same files again.
"""

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from memvault.indexer.maintenance.generations import (
    CONFLICT_PROBLEM,
    MANIFEST,
    FileState,
    Manifest,
    current_generation,
    new_generation,
)
from memvault.indexer.maintenance.sync import IndexDelta, KnownRows, Row, diff_known, is_racy, needs_reading
from memvault.indexer.search.bm25 import SCHEMA_VERSION, Bm25Index, record_key
from memvault.vault.clock import zone
from memvault.vault.errors import IndexUnavailable, InvalidRecord, UnsafePath
from memvault.vault.fsio import MACHINE_DIR_MODE, make_dir, read_bytes_nofollow
from memvault.vault.layout import VaultLayout, parse_note_relpath
from memvault.vault.note import MAX_NOTE_BYTES, Note, parse
from memvault.vault.note_lines import note_lines
from memvault.vault.paths import resolve_inside
from memvault.vault.records import MemoryRecord, note_zone_name, records_from_note, with_context

#: called at named points of an apply ("apply.committed"); crash tests pass one in explicitly
BoundaryHook = Callable[[str], None]


@dataclass
class FileIndexing:
    """What indexing one file produced (records are empty for a removed or unreadable file)."""

    path: str
    state: FileState | None
    records: list[MemoryRecord] = field(default_factory=list)


class IndexComponent(Protocol):
    """A derived structure beside BM25 (the vector index) that follows the same deltas.

    `apply` must be idempotent and durable when it returns: it runs before the BM25 commit.
    `committed` runs after that commit succeeded (a commit that fails, on a full disk, never
    reaches it: its rows are not in the index, so nothing lags behind them).
    """

    def apply(self, delta: IndexDelta) -> None: ...

    def committed(self, delta: IndexDelta) -> None: ...


#: how many notes' rows a DerivedIndex keeps per BM25 reader (`rows_of`): those with the most rows
#: of a commit, which cost the most to read again (the day's note beside a batch of one-turn notes)
_KNOWN_NOTES = 8


def read_note_records(layout: VaultLayout, relpath: str, vault_zone: str) -> FileIndexing:
    """Parse one canonical note into records. Never raises for what a file contains.

    The stat is taken *before* the read: if the file changes in between, the recorded stat is
    the older one and the next sync reads the file again, never the reverse.
    """
    folder, day = parse_note_relpath(relpath)
    try:
        path = resolve_inside(layout.root, relpath)
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return FileIndexing(relpath, None)
    except UnsafePath:
        return _unindexed(relpath, _lstat(layout.root / relpath), "", "symlink (not followed)")
    except OSError as exc:
        return _unindexed(relpath, None, "", f"unreadable ({exc.strerror})")
    if stat.S_ISDIR(info.st_mode):
        return FileIndexing(relpath, None)  # a folder with a note's name holds no memories
    if not stat.S_ISREG(info.st_mode):
        return _unindexed(relpath, info, "", "not a regular file")
    if info.st_size > MAX_NOTE_BYTES:
        return _unindexed(relpath, info, "", f"file is {info.st_size} bytes; the limit is {MAX_NOTE_BYTES}")
    try:
        data = read_bytes_nofollow(path)
    except FileNotFoundError:
        return FileIndexing(relpath, None)
    except (OSError, UnsafePath) as exc:
        return _unindexed(relpath, info, "", f"unreadable ({getattr(exc, 'strerror', None) or exc})")
    digest = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _unindexed(relpath, info, digest, f"invalid UTF-8 at byte {exc.start}")
    try:
        note = parse(text)
        records = records_from_note(relpath, folder, day, note, vault_zone)
    except (ValueError, InvalidRecord, RecursionError) as exc:
        return _unindexed(relpath, info, digest, f"cannot be parsed ({type(exc).__name__})")
    problem = CONFLICT_PROBLEM if note.has_conflicts else None
    state = FileState(
        digest,
        info.st_size,
        info.st_mtime_ns,
        problem=problem,
        racy=is_racy(info),
        rows=len(records),
        issues=note_issues(note, vault_zone),
        ctime_ns=info.st_ctime_ns,
        inode=info.st_ino,
    )
    return FileIndexing(relpath, state, records)


def _unindexed(relpath: str, info: os.stat_result | None, digest: str, problem: str) -> FileIndexing:
    if info is None:  # no stat to trust: the file is read again on every sync until it is fixed
        return FileIndexing(relpath, FileState(digest, 0, 0, problem=problem, racy=True))
    state = FileState(digest, info.st_size, info.st_mtime_ns, problem=problem, racy=is_racy(info),
                      ctime_ns=info.st_ctime_ns, inode=info.st_ino)  # fmt: skip
    return FileIndexing(relpath, state)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path, follow_symlinks=False)
    except OSError:
        return None


def note_issues(note: Note, vault_zone: str) -> tuple[str, ...]:
    """Hand-edit findings that do not stop indexing: a pasted duplicate id, a bad frontmatter zone."""
    issues = []
    for bullet, start in zip(note.bullets, note.starts, strict=True) if note.duplicate_ids else ():
        if bullet.block_id is not None and bullet.id != bullet.block_id:  # (a note of thousands seldom repeats one)
            issues.append(f"duplicate id ^{bullet.block_id} on line {start + 1} (indexed as {bullet.id})")
    zone_name = note_zone_name(note, vault_zone)
    if zone_name != vault_zone:
        try:
            zone(zone_name)
        except InvalidRecord:
            issues.append(f"frontmatter time zone {zone_name!r} is not an IANA zone (times read in {vault_zone})")
    return tuple(issues)


class DerivedIndex:
    """The serving (or being-built) generation: open it, apply file changes, find stale files."""

    def __init__(self, generation: Path, manifest: Manifest, bm25: Bm25Index):
        self.generation = generation
        self.manifest = manifest
        self.bm25 = bm25
        #: extra components (vectors) that follow every delta; BM25 is always last
        self.components: list[IndexComponent] = []
        #: (BM25 reader, a few notes' rows as it sees them): the day's note is diffed on every
        #: save and every commit, and reading its thousands of rows back from Tantivy each time
        #: was the owner's largest cost under many agents (`rows_of`, `apply`)
        #: The rows are kept with the records they were made of, so a diff looks only past the
        #: records a new read shares with them (`diff_known`)
        self._known: tuple[object, dict[str, KnownRows]] = (None, {})

    @classmethod
    def open_current(cls, layout: VaultLayout) -> "DerivedIndex | None":
        generation = current_generation(layout.index_dir)
        if generation is None:
            return None
        return cls.open_generation(generation)

    @classmethod
    def open_generation(cls, generation: Path) -> "DerivedIndex":
        manifest = Manifest.load(generation / MANIFEST)
        if manifest.schema != SCHEMA_VERSION:
            raise IndexUnavailable(
                f"index schema {manifest.schema} is not this memvault's {SCHEMA_VERSION}: run `memvault rebuild`"
            )
        return cls(generation, manifest, Bm25Index(generation / "bm25"))

    @classmethod
    def create(cls, layout: VaultLayout, embedding: dict | None = None) -> "DerivedIndex":
        generation = new_generation(layout.index_dir)
        manifest = Manifest(schema=SCHEMA_VERSION, embedding=embedding)
        created = cls(generation, manifest, Bm25Index(generation / "bm25", create=True))
        created.manifest.save(generation / MANIFEST)
        return created

    # --- writing -----------------------------------------------------------------------------

    def apply(self, indexed: list[FileIndexing], hook: BoundaryHook | None = None) -> IndexDelta:
        """Make the index hold exactly the given files' records; return what changed.

        Caller holds the vault lock. Nothing is committed when no row changed, so a file
        memvault itself just wrote and indexed costs the watcher a read and a diff, nothing more.
        Rows hold no line numbers: a line added above a note's memories changes none of them.
        """
        delta = IndexDelta()
        if not indexed:
            return delta
        after = {}
        for item in indexed:
            note_delta, after[item.path] = self.diff_note(item.path, item.records)
            delta.extend(note_delta)
        if delta.is_empty:
            self._remember_rows(after)  # the same rows, now known with the records just read
        else:
            for component in self.components:
                component.apply(delta)
            self._commit_bm25(delta)
            # the applied files now hold exactly their records: the diffs were against the reader
            # as refreshed by the one writer (the vault lock's holder, or the owner), so no other
            # commit came between; a commit by anyone else shows in meta.json, a new reader
            known = dict(sorted(after.items(), key=lambda item: -len(item[1]))[:_KNOWN_NOTES])  # the costliest
            self._known = (self.bm25.reader(), known)
            for component in self.components:
                component.committed(delta)
            if hook is not None:
                hook("apply.committed")
        changed = self._record_states(indexed)
        if changed:
            self.manifest.save(self.generation / MANIFEST, changed)
        return delta

    def _commit_bm25(self, delta: IndexDelta) -> None:
        with self.bm25.writer(rows=len(delta.upserts)) as writer:
            # deleting every upserted key too makes a stale diff harmless: a key is never doubled
            for key in set(delta.deleted) | {record_key(record.path, record.id) for record in delta.upserts}:
                writer.delete_key(key)
            writer.add(delta.upserts)
            writer.commit()

    def _record_states(self, indexed: list[FileIndexing]) -> list[str]:
        """The paths whose recorded state changed."""
        changed = []
        for item in indexed:
            before = self.manifest.files.get(item.path)
            if item.state is None:
                if self.manifest.files.pop(item.path, None) is not None:
                    changed.append(item.path)
            elif before != item.state:
                self.manifest.files[item.path] = item.state
                changed.append(item.path)
        return changed

    # --- reading -----------------------------------------------------------------------------

    def rows_of(self, path: str) -> dict[str, Row]:
        """Every row the index holds for one file, by key (read from BM25, the commit point)."""
        return dict(self._known_rows(path).rows)

    def diff_note(self, path: str, records: list[MemoryRecord]) -> tuple[IndexDelta, KnownRows]:
        """What turns this file's rows into `records`, and its rows once that is applied."""
        return diff_known(path, self._known_rows(path), records)

    def _known_rows(self, path: str) -> KnownRows:
        reader = self.bm25.reader()
        known_by, known = self._known
        if known_by is reader and path in known:
            return known[path]
        rows = KnownRows({hit.key: Row.of_hit(hit) for hit in self.bm25.hits_for_path(path, reader)})
        if known_by is not reader:
            known = {}
            self._known = (reader, known)  # one swap: a reader on another thread sees either whole
        if len(known) < _KNOWN_NOTES:
            known[path] = rows
        return rows

    def _remember_rows(self, after: dict[str, KnownRows]) -> None:
        """Keep the rows of notes found unchanged, now with the records they were made of."""
        known_by, known = self._known
        if known_by is self.bm25.reader():
            for path, rows in after.items():
                if path in known:
                    known[path] = rows

    def row_counts(self) -> dict[str, int]:
        """Live rows per file path, from the term dictionary (no document is loaded)."""
        return self.bm25.term_counts("path")

    def all_rows(self) -> list[Row]:
        """Every row, sorted by key (health --strict and the parity tests compare these)."""
        return sorted(Row.of_hit(hit) for hit in self.bm25.all_hits())

    def deleted_rows(self) -> int:
        """Rows deleted but still counted by BM25's statistics until Tantivy merges them away.

        Document frequencies include them, so scores drift from a fresh build's; `compact` ends it.
        """
        return self.bm25.deleted_rows()

    def snapshot(self, layout: VaultLayout) -> tuple[list[FileIndexing], dict[str, FileState]]:
        """Every file's rows (as records, in rebuild order) and the manifest. Caller holds the vault lock."""
        by_path: dict[str, list[MemoryRecord]] = {}
        for row in self.all_rows():
            by_path.setdefault(row.path, []).append(row.to_record())
        files = dict(self.manifest.files)
        # context is not stored; it is the neighbours' text, so it is recomputed from the rows in
        # the order their note holds them now (rows hold no line; one the note lost goes last)
        indexed = []
        for path, records in sorted(by_path.items()):
            lines = note_lines(layout.root, path)
            records.sort(key=lambda record: (lines.get(record.id, float("inf")), record.id))
            indexed.append(FileIndexing(path, files.get(path), with_context(records)))
        return indexed, files

    def link_components_into(self, target: "DerivedIndex") -> None:
        """Share every component's files (not BM25's) with `target` by hard links.

        Components replace their files by rename, never in place, so a link is a snapshot.
        """
        for folder in sorted(p for p in self.generation.iterdir() if p.is_dir() and p.name != "bm25"):
            make_dir(target.generation / folder.name, MACHINE_DIR_MODE)
            for item in sorted(folder.iterdir()):
                if item.is_file() and not item.name.startswith("."):
                    os.link(item, target.generation / folder.name / item.name)

    def stale_paths(self, layout: VaultLayout, paths: list[str] | None = None) -> list[str]:
        """Files whose bytes may differ from what the index saw, plus files that disappeared.

        With `paths`, only those are considered (the watcher names what changed); without, every
        note on disk, in the manifest, or with rows in the index. A size/mtime match is trusted
        unless the recorded state is racy.
        """
        if paths is None:
            candidates = set(layout.note_relpaths()) | set(self.manifest.files) | set(self.row_counts())
        else:
            candidates = {path for path in paths if parse_note_relpath(path) is not None}
        return sorted(p for p in candidates if needs_reading(layout.root / p, self.manifest.files.get(p)))
