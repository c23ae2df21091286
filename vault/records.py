"""From a parsed note to the memory records the indexes hold. Pure: no I/O."""

from dataclasses import dataclass, replace
from datetime import date, datetime

from vault.clock import bullet_instant, zone
from vault.errors import InvalidRecord
from vault.ids import content_hash
from vault.layout import NOTE_KINDS
from vault.note import Note
from vault.plaintext import plain_text

#: frontmatter keys that set a note's own zone (for a person who travels)
ZONE_KEYS = ("timeZone", "timezone", "tz")
#: bullets on each side of a memory, in the same note, that count as its context: conversation
#: memories are rarely self-contained ("Yes, the blue one!") and their neighbours say what they
#: are about. Both retrievers use it (BM25 as a down-weighted field, vectors in the passage).
CONTEXT_NEIGHBOURS = 2


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
    def context(self) -> str:
        return " ".join(self.neighbours)

    @property
    def source(self) -> str:
        return f"{self.path}#^{self.id}"


def note_zone_name(note: Note, vault_zone: str) -> str:
    for key in ZONE_KEYS:
        if note.frontmatter.get(key):
            return note.frontmatter[key]
    return vault_zone


def records_from_note(relpath: str, folder: str, day: date, note: Note, vault_zone: str) -> list[MemoryRecord]:
    """Every bullet of a note as a record; bullets in conflict hunks are already excluded."""
    zone_name = note_zone_name(note, vault_zone)
    try:
        tz = zone(zone_name)
    except InvalidRecord:
        tz = zone(vault_zone)  # a bad frontmatter zone is reported by health, not fatal to indexing
    records = []
    for bullet in note.bullets:
        text = plain_text(bullet.text)
        if not text:
            continue
        records.append(
            MemoryRecord(
                id=bullet.id,
                path=relpath,
                kind=NOTE_KINDS[folder],
                day=day,
                at=bullet_instant(day, bullet.time, tz),
                text=text,
                content_hash=content_hash(bullet.text),
                line=bullet.first_line + 1,
                heading=bullet.heading,
                explicit_id=bullet.has_explicit_id,
            )
        )
    return with_context(records)


def with_context(records: list[MemoryRecord]) -> list[MemoryRecord]:
    """The records of one note, each carrying its neighbours' text as context."""
    result = []
    for index, record in enumerate(records):
        parts = []
        for distance in range(1, CONTEXT_NEIGHBOURS + 1):
            for other in (index - distance, index + distance):
                if 0 <= other < len(records):
                    parts.append(records[other].text)
        result.append(replace(record, neighbours=tuple(parts)))
    return result
