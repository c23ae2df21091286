"""Incremental sync: which files to look at, and which rows of theirs actually changed.

Two levels of content hash decide the work:

* per file: the manifest keeps each note's size, mtime, ctime, inode and SHA-256. A file whose
  stat still matches is not read at all (the stat fast path); one whose stat moved is read,
  hashed and parsed. ctime and inode are there because mtime can be put back (`cp -p`,
  `rsync -t`, `touch -d`) and a same-size edit would then look untouched; ctime cannot be set
  by anyone but the kernel. A file whose mtime was too close to the moment it was read is "racy" and is hashed
  on the next sync even if its stat matches, so a same-size edit within one timestamp tick
  is never missed.
* per bullet: every index row stores its memory's content hash. A re-read file is diffed row by
  row against what the index *really* holds (not against the manifest), so a crash between the
  index commit and the manifest write is repaired by the next sync, and a row is rewritten only
  when one of its stored fields changed. Only rows whose content hash is new to the batch need
  a new embedding (`IndexDelta.new_content`): moving a bullet, changing its time, renaming a
  file or checking out an older vault re-embeds nothing that was already embedded.
"""

import os
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

from memvault.indexer.maintenance.generations import FileState
from memvault.indexer.results import SyncReport
from memvault.indexer.search.bm25 import Bm25Hit, context_hash, record_key
from memvault.vault.ids import DERIVED_ID_PREFIX
from memvault.vault.records import MemoryRecord
from memvault.vault.sequences import shared_runs

#: a file modified less than this before it was read may change again within the same mtime
#: tick (ext4 ticks are a few ms; FAT and some network filesystems tick in seconds)
RACY_WINDOW_NS = 2_000_000_000
#: rows made lately, by the identity of their record (kept beside it, so an id is never reused
#: while cached): the records of a note's unchanged bullets are the same objects from one parse
#: to the next (vault/records.py), and the rows of a day's note are asked for again and again
#: (the rows a commit knows, a journal read of the day)
_ROWS_MADE: dict[int, tuple[MemoryRecord, "Row"]] = {}
_ROWS_MADE_MOST = 64_000


@dataclass(frozen=True, order=True)
class Row:
    """The stored fields of one index row: what "the same row" means for sync and health. No line
    number: a memory's address is its note and id, so a line added above it changes no row."""

    key: str
    id: str
    path: str
    kind: str
    day: str
    content_hash: str
    text: str
    at: int  # UTC epoch seconds, as BM25 stores it
    context_hash: str = ""  # a neighbour's edit changes this row's context too

    @classmethod
    def of_record(cls, record: MemoryRecord) -> "Row":
        """The row of `record` (made once while cached: `_ROWS_MADE`)."""
        made = _ROWS_MADE.get(id(record))
        if made is not None and made[0] is record:
            return made[1]
        row = cls._made_of(record)
        if len(_ROWS_MADE) >= _ROWS_MADE_MOST:
            _ROWS_MADE.clear()  # threads share it: each call is one atomic dict operation
        _ROWS_MADE[id(record)] = (record, row)
        return row

    @classmethod
    def _made_of(cls, record: MemoryRecord) -> "Row":
        return cls(
            record_key(record.path, record.id),
            record.id,
            record.path,
            record.kind,
            record.day.isoformat(),
            record.content_hash,
            record.text,
            int(record.at.timestamp()),
            context_hash(record.context),
        )

    def to_record(self) -> MemoryRecord:
        """The record this row was written from (heading is not stored, so it comes back None)."""
        return MemoryRecord(
            self.id,
            self.path,
            self.kind,
            date.fromisoformat(self.day),
            datetime.fromtimestamp(self.at, UTC),
            self.text,
            self.content_hash,
            heading=None,
            explicit_id=not self.id.startswith(DERIVED_ID_PREFIX),
        )

    @classmethod
    def of_hit(cls, hit: Bm25Hit) -> "Row":
        return cls(
            hit.key,
            hit.id,
            hit.path,
            hit.kind,
            hit.day.isoformat(),
            hit.content_hash,
            hit.text,
            int(hit.at.timestamp()),
            hit.context_hash,
        )


@dataclass
class IndexDelta:
    """What one apply changes in the index, row by row.

    Components other than BM25 (vectors) apply it idempotently and persist *before* the BM25
    commit, which is the commit point: after a crash the next diff is taken against BM25 again
    and repeats whatever the other components may already have done.
    """

    #: key → content hash, for every row that leaves the index or is rewritten
    deleted: dict[str, str] = field(default_factory=dict)
    #: rows to write (new keys, and keys whose stored fields changed)
    upserts: list[MemoryRecord] = field(default_factory=list)
    #: keys that were removed without a replacement
    removed: set[str] = field(default_factory=set)
    #: rows that were already exactly right
    unchanged: int = 0
    #: files whose rows changed
    files: list[str] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.deleted and not self.upserts

    @property
    def added(self) -> int:
        """New keys (a bullet the index did not have)."""
        return sum(1 for record in self.upserts if record_key(record.path, record.id) not in self.deleted)

    @property
    def updated(self) -> int:
        """Existing keys rewritten (text, time or neighbours changed)."""
        return len(self.upserts) - self.added

    def new_content(self) -> list[MemoryRecord]:
        """Upserted rows whose text no row leaving the index had: the ones to embed.

        A bullet that moved (time, neighbours, file rename, `git checkout`) keeps its content hash, so
        its vector can be carried over instead of computed again.
        """
        known = set(self.deleted.values())
        return [record for record in self.upserts if record.content_hash not in known]

    def extend(self, other: "IndexDelta") -> None:
        self.deleted.update(other.deleted)
        self.upserts.extend(other.upserts)
        self.removed |= other.removed
        self.unchanged += other.unchanged
        self.files.extend(other.files)


def diff_rows(path: str, old: dict[str, Row], records: list[MemoryRecord]) -> IndexDelta:
    """The delta that turns the index rows `old` of one file into exactly `records`."""
    delta = IndexDelta()
    new_keys = set()
    for record in records:
        row = Row.of_record(record)
        new_keys.add(row.key)
        before = old.get(row.key)
        if before is row or before == row:  # the same Row object: the record was reused (vault/records.py)
            delta.unchanged += 1
            continue
        if before is not None:
            delta.deleted[row.key] = before.content_hash
        delta.upserts.append(record)
    for key, row in old.items():
        if key not in new_keys:
            delta.deleted[key] = row.content_hash
            delta.removed.add(key)
    if not delta.is_empty:
        delta.files.append(path)
    return delta


class KnownRows:
    """The rows the index holds for one note, by key, and the records they were made of, in the
    note's order (None when they were read back from the index, not made of records). Rows of
    records are made when first asked for: a commit's diff compares records (`diff_known`)."""

    __slots__ = ("records", "_rows")

    def __init__(self, rows: dict[str, Row] | None, records: tuple[MemoryRecord, ...] | None = None):
        if rows is None and records is None:
            raise ValueError("KnownRows needs its rows, its records, or both")
        self.records = records
        self._rows = rows

    @classmethod
    def made_of(cls, records: tuple[MemoryRecord, ...]) -> "KnownRows":
        return cls(None, records)

    def __len__(self) -> int:
        return len(self._rows) if self.records is None else len(self.records)

    @property
    def rows(self) -> dict[str, Row]:
        if self._rows is None:  # two threads may both make them: the same rows, one kept
            self._rows = {row.key: row for row in map(Row.of_record, self.records)}
        return self._rows


def diff_known(path: str, known: KnownRows, records: list[MemoryRecord]) -> tuple[IndexDelta, KnownRows]:
    """`diff_rows` against rows made of records, and the rows the index holds once it is applied.

    Records are compared, not rows: a row is made only of a record whose fields changed (to see
    whether a stored field did). The records of a note's unchanged bullets are the same objects
    from one parse to the next (vault/records.py), so the runs of records the two lists share are
    found by C comparisons of slices (`shared_runs`) and only what lies between them is diffed.
    A record holds no position, so a line added above a day's 20,000 memories leaves their records
    the same objects and re-indexes only what really changed."""
    now = tuple(records)
    if known.records is None:
        return diff_rows(path, known.rows, records), KnownRows.made_of(now)
    return _diff_records(path, known.records, now), KnownRows.made_of(now)


def _diff_records(path: str, earlier: tuple[MemoryRecord, ...], now: tuple[MemoryRecord, ...]) -> IndexDelta:
    """The delta from the rows of `earlier` to `now`, outside the runs of records they share. A
    key is never in a run and outside one (ids are unique within a note), so the runs' rows stand."""
    runs = shared_runs(earlier, now)
    before = {record.id: record for record in _outside(earlier, sorted((old, count) for old, _, count in runs))}
    delta = IndexDelta(unchanged=sum(count for _, _, count in runs))
    for record in _outside(now, [(new, count) for _, new, count in runs]):
        was = before.pop(record.id, None)
        if was is not None:
            if was is record or was == record or Row.of_record(was) == Row.of_record(record):
                delta.unchanged += 1  # the same, or differing in a field rows do not store (the heading)
                continue
            delta.deleted[record_key(path, record.id)] = was.content_hash
        delta.upserts.append(record)
    for was in before.values():
        key = record_key(path, was.id)
        delta.deleted[key] = was.content_hash
        delta.removed.add(key)
    if not delta.is_empty:
        delta.files.append(path)
    return delta


def _outside(items: tuple, runs: list[tuple[int, int]]):
    """The items not in any of `runs` ((start, how many), ascending and apart)."""
    place = 0
    for start, count in runs:
        yield from items[place:start]
        place = start + count
    yield from items[place:]


def stat_state(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path, follow_symlinks=False)
    except OSError:
        return None


def is_racy(info: os.stat_result, now_ns: int | None = None) -> bool:
    """True when the file could still change within its current mtime tick (or is from the future)."""
    now = time.time_ns() if now_ns is None else now_ns
    return now - info.st_mtime_ns < RACY_WINDOW_NS


def needs_reading(path: Path, known: FileState | None) -> bool:
    """Whether the stat fast path can no longer vouch for `known` (absent files included)."""
    info = stat_state(path)
    if known is None or info is None:
        return True
    if known.racy or info.st_size != known.size or info.st_mtime_ns != known.mtime_ns:
        return True
    # an mtime put back by `cp -p`, `rsync -t` or `touch -d` still moves ctime, and a file
    # replaced by rename has another inode; a state recorded before these were kept is re-read once
    return (info.st_ctime_ns, info.st_ino) != (known.ctime_ns, known.inode)


@dataclass(frozen=True)
class SyncOutcome(SyncReport):
    """A `SyncReport` with the row-level detail the watcher logs and tests check.

    `files` are the files whose index rows changed and `memories` the rows written.
    """

    checked: int = 0  # files re-read because the stat fast path could not vouch for them
    added: int = 0
    updated: int = 0
    removed: int = 0
    seconds: float = 0.0

    @classmethod
    def of_delta(cls, checked: int, delta: IndexDelta, seconds: float) -> "SyncOutcome":
        return cls(
            tuple(delta.files),
            len(delta.upserts),
            checked=checked,
            added=delta.added,
            updated=delta.updated,
            removed=len(delta.removed),
            seconds=round(seconds, 4),
        )

    @classmethod
    def skipped_because(cls, reason: str) -> "SyncOutcome":
        return cls((), 0, skipped=reason)
