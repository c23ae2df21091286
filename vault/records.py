"""From a parsed note to the memory records the indexes hold. Pure: no I/O."""

import threading
from bisect import bisect_left
from dataclasses import dataclass, fields, replace
from datetime import date, datetime
from operator import attrgetter

from memvault.vault.clock import bullet_instant, zone
from memvault.vault.errors import InvalidRecord
from memvault.vault.ids import content_hash
from memvault.vault.layout import NOTE_KINDS
from memvault.vault.note import Bullet, Note, common_prefix
from memvault.vault.plaintext import plain_text, task_state

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
    id: str
    path: str
    kind: str  # "curated" (daily/) or "audit" (audit/)
    day: date
    at: datetime  # UTC
    text: str  # plain text, what is indexed and shown
    content_hash: str
    line: int  # 1-based line of the bullet, for people
    heading: str | None
    explicit_id: bool
    #: the plain text of up to CONTEXT_NEIGHBOURS bullets on each side, nearest first
    neighbours: tuple[str, ...] = ()

    @property
    def task(self) -> str | None:
        """"open" or "done" when the memory is a task (`- [ ] …`, `- [x] …`), else None."""
        return task_state(self.text)

    @property
    def context(self) -> str:
        # a task's state is part of what it is about: "which tasks are still open?" finds it
        words = TASK_WORDS.get(self.task)
        return " ".join((*self.neighbours, words) if words else self.neighbours)

    @property
    def source(self) -> str:
        return f"{self.path}#^{self.id}"


#: every field of a record but its line, as one tuple (C speed)
_ALL_BUT_LINE = attrgetter(*(f.name for f in fields(MemoryRecord) if f.name != "line"))


def same_but_line(old: MemoryRecord, new: MemoryRecord) -> bool:
    """Whether two records differ in their line at most (a memory that moved within its note)."""
    return old is new or _ALL_BUT_LINE(old) == _ALL_BUT_LINE(new)


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


#: note path -> the records last made of it: a note that grew or was saved again at its end keeps
#: its earlier Bullet objects (vault/note.py parses from the last memory the versions share), and
#: their records are made again only where a neighbour changed
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
    if last is not None and last.basis != basis:
        last = None
    shared = common_prefix(last.bullets, note.bullets) if last is not None else 0
    # what the shared bullets had stands as it was (slices: a note of thousands of memories that
    # grew by a few costs what the few cost), and what follows them is made now
    held = bisect_left(last.positions, shared) if shared else 0  # kept bullets among the shared
    kept = last.kept[:held] if held else []
    kept_texts = last.kept_texts[:held] if held else []
    positions = last.positions[:held] if held else []
    moved = note.moved if last is not None and note.moved is not None and note.moved.before is last.bullets else None
    if moved is not None and shared > moved.to:
        moved = None  # bullets equal to those they replaced (the same lines rewritten): made from `shared` on
    for place in range(shared, len(note.bullets) if moved is None else moved.to):
        bullet = note.bullets[place]
        text = plain_text(bullet.text)
        if text:
            kept.append(bullet)
            kept_texts.append(text)
            positions.append(place)
    below = len(kept)  # where the bullets taken up again from the version before start, if any
    if moved is not None:  # their texts are what they were, each in a new place
        was_below = bisect_left(last.positions, moved.first)
        shift = moved.to - moved.first
        positions += [place + shift for place in last.positions[was_below:]]
        kept += [note.bullets[place] for place in positions[below:]]
        kept_texts += last.kept_texts[was_below:]
    # the records of kept bullets stand (those below the change, moved with it), but for those
    # near a change: a new bullet may be their neighbour
    unchanged = max(0, held - CONTEXT_NEIGHBOURS)
    remade_to = len(kept) if moved is None else min(len(kept), below + CONTEXT_NEIGHBOURS)
    kind = NOTE_KINDS[folder]
    records = last.records[:unchanged] if unchanged else []
    records += [
        MemoryRecord(
            id=bullet.id,
            path=relpath,
            kind=kind,
            day=day,
            at=bullet_instant(day, bullet.time, tz),
            text=text,
            content_hash=content_hash(bullet.text),
            line=bullet.first_line + 1,
            heading=bullet.heading,
            explicit_id=bullet.has_explicit_id,
            neighbours=neighbour_texts(kept_texts, index),
        )
        for index, (bullet, text) in enumerate(zip(kept[unchanged:remade_to], kept_texts[unchanged:remade_to]),
                                               start=unchanged)
    ]
    if moved is not None:
        taken_up = last.records[was_below + remade_to - below:]
        records += taken_up if moved.by == 0 else [_moved(record, moved.by) for record in taken_up]
    with _made_lock:
        if len(_made) >= _MADE_NOTES and relpath not in _made:
            _made.pop(next(iter(_made)))
        _made[relpath] = _Made(basis, note.bullets, kept, kept_texts, positions, records)
    return list(records)


def _moved(record: MemoryRecord, by: int) -> MemoryRecord:
    return MemoryRecord(record.id, record.path, record.kind, record.day, record.at, record.text, record.content_hash,
                        record.line + by, record.heading, record.explicit_id, record.neighbours)  # fmt: skip


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
