"""From a parsed note to the memory records the indexes hold. Pure: no I/O."""

import threading
from bisect import bisect_left
from dataclasses import dataclass, replace
from datetime import date, datetime
from functools import cached_property

from memvault.vault.clock import bullet_instant, zone
from memvault.vault.errors import InvalidRecord
from memvault.vault.ids import content_hash
from memvault.vault.layout import NOTE_KINDS
from memvault.vault.note import Bullet, Note
from memvault.vault.plaintext import plain_text, task_state
from memvault.vault.sequences import shared_runs

#: frontmatter keys that set a note's own zone (for a person who travels)
ZONE_KEYS = ("timeZone", "timezone", "tz")
#: bullets on each side of a memory, in the same note, that count as its context: conversation
#: memories are rarely self-contained ("Yes, the blue one!") and their neighbours say what they
#: are about. Both retrievers use it (BM25 as a down-weighted field, vectors in the passage).
CONTEXT_NEIGHBOURS = 2
#: the words a task's state adds to its context (a down-weighted field: its own words rank first)
TASK_WORDS = {"open": "open task", "done": "done task completed"}


@dataclass(frozen=True)
class MemoryRecord:
    """One memory as the indexes hold it. Its address is `path#^id` (`source`): it holds no line
    number, so moving lines within a note changes no record (vault/note_lines.py finds one for people)."""

    id: str
    path: str
    kind: str  # "curated" (daily/) or "audit" (audit/)
    day: date
    at: datetime  # UTC
    text: str  # plain text, what is indexed and shown
    content_hash: str
    heading: str | None
    explicit_id: bool
    #: the plain text of up to CONTEXT_NEIGHBOURS bullets on each side, nearest first
    neighbours: tuple[str, ...] = ()

    # computed once a record (its fields never change): each index reads them two or three times
    @cached_property
    def task(self) -> str | None:
        """ "open" or "done" when the memory is a task (`- [ ] …`, `- [x] …`), else None."""
        return task_state(self.text)

    @cached_property
    def context(self) -> str:
        # a task's state is part of what it is about: "which tasks are still open?" finds it
        words = TASK_WORDS.get(self.task)
        return " ".join((*self.neighbours, words) if words else self.neighbours)

    @property
    def source(self) -> str:
        return f"{self.path}#^{self.id}"


def note_zone_name(note: Note, vault_zone: str) -> str:
    for key in ZONE_KEYS:
        if note.frontmatter.get(key):
            return note.frontmatter[key]
    return vault_zone


@dataclass
class _Made:
    """The records last made of one note, and of which of its bullets (`records_from_note`)."""

    basis: tuple
    bullets: tuple[Bullet, ...]
    kept: list[Bullet]  # the bullets that hold text
    kept_texts: list[str]  # their texts (the neighbours' list)
    positions: list[int]  # each kept bullet's place among `bullets`, ascending
    records: list[MemoryRecord]  # one per kept bullet


#: note path -> the records last made of it: a note that grew or was saved again keeps its earlier
#: Bullet objects (vault/note.py parses from the last memory the versions share, and takes those
#: below a change up again), and their records are made again only where a neighbour changed
_made: dict[str, _Made] = {}
_MADE_NOTES = 16
_made_lock = threading.Lock()  # the owner indexes on several threads


def records_from_note(relpath: str, folder: str, day: date, note: Note, vault_zone: str) -> list[MemoryRecord]:
    """Every bullet of a note as a record; bullets in conflict hunks are already excluded."""
    zone_name = note_zone_name(note, vault_zone)
    try:
        tz = zone(zone_name)
    except InvalidRecord:
        tz = zone(vault_zone)  # a bad frontmatter zone is reported by health, not fatal to indexing
    basis = (folder, day, tz.key)
    last = _made.get(relpath)
    made = _Made(basis, note.bullets, [], [], [], [])
    runs = _runs(made, note, None if last is None or last.basis != basis else last)
    kind = NOTE_KINDS[folder]

    def record(index: int) -> MemoryRecord:
        bullet = made.kept[index]
        return MemoryRecord(
            id=bullet.id,
            path=relpath,
            kind=kind,
            day=day,
            at=bullet_instant(day, bullet.time, tz),
            text=made.kept_texts[index],
            content_hash=content_hash(bullet.text),
            heading=bullet.heading,
            explicit_id=bullet.has_explicit_id,
            neighbours=neighbour_texts(made.kept_texts, index),
        )

    records = made.records
    for start, end, since in runs:
        if since is None:
            records += [record(index) for index in range(start, end)]
            continue
        # a record stands where its neighbours are what they were: inside the run, and at an end
        # of the note that was the same end before
        inner_from = start if start == since == 0 else min(start + CONTEXT_NEIGHBOURS, end)
        at_both_ends = end == len(made.kept) and since + end - start == len(last.kept)
        inner_to = max(inner_from, end if at_both_ends else end - CONTEXT_NEIGHBOURS)
        records += [record(index) for index in range(start, inner_from)]
        taken = last.records[since + inner_from - start : since + inner_to - start]
        records += taken
        records += [record(index) for index in range(inner_to, end)]
    with _made_lock:
        if len(_made) >= _MADE_NOTES and relpath not in _made:
            _made.pop(next(iter(_made)))
        _made[relpath] = made
    return list(records)


def _runs(made: _Made, note: Note, last: _Made | None) -> list[tuple[int, int, int | None]]:
    """Fill `made`'s kept bullets, their texts and places, in runs of the note's bullets: each run
    is (its first kept bullet, the one past it, and for bullets that `last` has (the runs both
    versions share, `shared_runs`) the index of the first among `last`'s kept ones; None for
    bullets whose text is read now). A bullet holds no line, so those below a change are `last`'s
    own objects (vault/note.py takes them up again) and so are their records.
    Slices: a note of thousands of memories that grew or changed by a few costs what the few cost."""
    runs: list[tuple[int, int, int | None]] = []

    def take(start: int, end: int, shift: int) -> None:  # last's kept bullets [start, end)
        first = len(made.kept)
        made.kept.extend(last.kept[start:end])
        made.kept_texts.extend(last.kept_texts[start:end])
        made.positions.extend(last.positions[start:end] if shift == 0 else
                              [place + shift for place in last.positions[start:end]])  # fmt: skip
        if end > start:
            runs.append((first, len(made.kept), start))

    def read(start: int, end: int) -> None:  # the bullets [start, end) of the note, read now
        first = len(made.kept)
        for place in range(start, end):
            bullet = note.bullets[place]
            text = plain_text(bullet.text)
            if text:
                made.kept.append(bullet)
                made.kept_texts.append(text)
                made.positions.append(place)
        if len(made.kept) > first:
            runs.append((first, len(made.kept), None))

    place = 0
    for old_from, new_from, count in shared_runs(last.bullets, note.bullets) if last is not None else ():
        read(place, new_from)
        take(bisect_left(last.positions, old_from), bisect_left(last.positions, old_from + count), new_from - old_from)
        place = new_from + count
    read(place, len(note.bullets))
    return runs


def neighbour_texts(texts: list[str], index: int) -> tuple[str, ...]:
    """Up to CONTEXT_NEIGHBOURS texts on each side of `texts[index]`, nearest first."""
    parts = []
    for distance in range(1, CONTEXT_NEIGHBOURS + 1):
        for other in (index - distance, index + distance):
            if 0 <= other < len(texts):
                parts.append(texts[other])
    return tuple(parts)


def with_context(records: list[MemoryRecord]) -> list[MemoryRecord]:
    """One note's records (in note order) with their neighbours recomputed from their texts."""
    texts = [record.text for record in records]
    return [replace(record, neighbours=neighbour_texts(texts, index)) for index, record in enumerate(records)]
