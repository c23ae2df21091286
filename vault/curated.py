"""Writing one curated fact into `daily/`: the vault half of Remember.

The caller holds the vault lock and indexes the note in the same critical section. Lines are
appended in place (`vault/note_append.py`), so a person saving the same note in an editor at
that moment never loses their save, and a save that drops memvault's line is repaired
(`vault/recent_writes.py`). The wall time is written in the zone the note is read in.
"""

import unicodedata
from dataclasses import dataclass
from datetime import datetime

from memvault.vault.clock import local_day_and_time, zone
from memvault.vault.credentials import refuse_credentials
from memvault.vault.errors import InvalidRecord, VaultError
from memvault.vault.ids import content_hash, memory_id, normalize_text, without_bidi_controls
from memvault.vault.layout import DAILY, VaultLayout
from memvault.vault.note import Note, parse, region_left_open
from memvault.vault.note_append import NewBullet, NoteNotWritable, read_note_if_any
from memvault.vault.note_append import append_bullets_once as _append_in_place
from memvault.vault.recent_writes import forget_written, note_written, take_back_noted
from memvault.vault.records import note_zone_name

__all__ = ["CuratedWrite", "NewBullet", "NoteNotWritable", "append_bullet_once", "append_bullets_once",
           "plan_bullet", "prepare_fact", "write_fact"]  # fmt: skip

#: a remembered fact is one line of prose, not a document
MAX_FACT_BYTES = 4096
#: a person may have edited a remembered line (keeping its id): the same text then takes a
#: variant id, so it is written again and findable, and an id is never used twice
_MAX_ID_VARIANTS = 16
#: the lines git writes around a conflict's two (or three, with diff3) sides
_CONFLICT_MARKERS = ("<<<<<<<", "=======", ">>>>>>>", "|||||||")


@dataclass(frozen=True)
class CuratedWrite:
    id: str
    path: str  # vault-relative note path
    wall_time: str
    written: bool  # False when the bullet was already in the note (a retry after a crash)


def prepare_fact(text: str) -> str:
    """The single-line text Remember stores, or InvalidRecord / CredentialRefused saying why not."""
    if not isinstance(text, str):
        raise InvalidRecord(f"a fact must be text, not {type(text).__name__}")
    fact = normalize_text(without_bidi_controls(text))
    if not fact:
        raise InvalidRecord("the fact is empty: pass the sentence to remember")
    size = len(fact.encode("utf-8"))
    if size > MAX_FACT_BYTES:
        raise InvalidRecord(f"the fact is {size} bytes; the limit is {MAX_FACT_BYTES}: store long text as a document")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in fact):
        raise InvalidRecord("the fact contains control characters: remove them and try again")
    left_open = region_left_open(fact)
    if left_open is not None:
        raise InvalidRecord(
            f"the fact would start {left_open}, hiding every line written after it in its "
            "note; nothing was written. Close it in the same text, or leave the marker out"
        )

    refuse_credentials(fact, "the fact")
    return fact


def write_fact(layout: VaultLayout, fact: str, at: datetime, vault_zone: str) -> CuratedWrite:
    """Append `fact` (already prepared) to the daily note of `at`'s local date, once."""
    return append_bullet_once(layout, DAILY, fact, memory_id(fact), at, vault_zone, content_identity=True)


def append_bullet_once(
    layout: VaultLayout, folder: str, text: str, block_id: str, at: datetime, vault_zone: str,
    *, content_identity: bool = False,
) -> CuratedWrite:  # fmt: skip
    """Append `- HH:MM text ^block_id` to `folder/<local date of at>.md` unless that id is there.

    The one write every projection shares (Remember, turn intake, capture): a replay after a
    crash finds its block id already in the note and writes nothing. With `content_identity`
    (Remember), an id whose line a person has since edited is not reused: the fact takes a
    variant id. The date comes from the vault's zone (it names the file); the wall time from
    the note's own zone (its frontmatter `timeZone`), which is the zone it is read back in.
    Caller holds the vault lock.
    """
    relpath, title, bullet = plan_bullet(layout, folder, text, block_id, at, vault_zone,
                                         content_identity=content_identity)  # fmt: skip
    written = append_bullets_once(layout, relpath, title, [bullet])
    return CuratedWrite(bullet.block_id, relpath, bullet.wall_time, written=bool(written))


def plan_bullet(
    layout: VaultLayout, folder: str, text: str, block_id: str, at: datetime, vault_zone: str,
    *, content_identity: bool = False, notes: dict | None = None, places: dict | None = None,
) -> tuple[str, str, NewBullet]:  # fmt: skip
    """Where and how a memory is written: (note relpath, title for a new note, the bullet).

    Reads the note as it is now (its zone, the ids in it); batch writers (the engine's group
    commit) plan every item with it, passing one `notes` dict so each note is read once (and one
    `places` dict so each day's note is looked for once), and then append per note in one go.
    """
    day, _ = local_day_and_time(at, zone(vault_zone))
    relpath = places.get((folder, day)) if places is not None else None
    if relpath is None:
        relpath = layout.note_relpath(folder, day)
        if places is not None:
            places[(folder, day)] = relpath
    if notes is None or relpath not in notes:
        note = read_note_if_any(layout.root, relpath)
        if notes is not None:
            notes[relpath] = note
    else:
        note = notes[relpath]
    wall_time = _wall_time_for(note, at, day, vault_zone)
    if content_identity and note is not None:
        _refuse_if_in_a_conflict(note, relpath, text)
        block_id = _unused_id_for(note, text, block_id)
    return relpath, day.isoformat(), NewBullet(text, block_id, wall_time)


_UNREAD = object()


def append_bullets_once(layout: VaultLayout, relpath: str, title: str, bullets: list[NewBullet], *,
                        as_read: Note | None | object = _UNREAD) -> list[str]:  # fmt: skip
    """Append, in one in-place write, every bullet whose block id the note lacks; the ids written.

    The lines are noted in the recent-writes ledger *before* the append: a failure there leaves
    the note untouched, and a line whose append fails half-way is finished by the next sync.
    A new note starts with `# title`. Caller holds the vault lock. `as_read`: the note as the
    caller read it in this same lock hold (None: it was absent), so it is not read again here;
    the append itself still decides from the note's bytes as they are (vault/note_append.py).
    """
    note = read_note_if_any(layout.root, relpath) if as_read is _UNREAD else as_read
    held = {} if note is None else note.by_block_id
    pending = [bullet for bullet in bullets if bullet.block_id not in held]
    if not pending:
        return []
    noted = note_written(layout, relpath, title, pending)
    try:
        return _append_in_place(layout, relpath, title, pending)
    except NoteNotWritable:
        forget_written(layout, relpath, [bullet.block_id for bullet in pending])  # refused: never repaired later
        raise
    except Exception:
        _forget_taken_back(layout, relpath, pending, noted)
        raise


def _forget_taken_back(layout: VaultLayout, relpath: str, pending: list[NewBullet], noted: int | None) -> None:
    """An append that failed (a full disk) was taken back, and its caller is told nothing was
    written: the ledger must not let the next sync write those lines after all (issue 24: a
    refused import appeared in full once space was freed). Only lines absent from the note go."""
    try:
        note = read_note_if_any(layout.root, relpath)
        there = set() if note is None else {memory.block_id for memory in note.bullets}
        absent = [bullet.block_id for bullet in pending if bullet.block_id not in there]
        if len(absent) == len(pending) and noted is not None:
            take_back_noted(layout, noted)  # a truncation: works on the full disk that refused the note
        elif absent:
            forget_written(layout, relpath, absent)
    except (OSError, VaultError):
        pass  # the original failure is what the caller must hear; a repair may then write them


def _wall_time_for(note: Note | None, at: datetime, day, vault_zone: str) -> str:
    """The bullet time that reads back as `at` in the zone this note is read in.

    When that zone puts `at` on another date than the note's (named in the vault's zone), the
    vault zone's wall time is written with its explicit UTC offset, which reads back exactly.
    """
    note_zone = vault_zone if note is None else note_zone_name(note, vault_zone)
    try:
        tz = zone(note_zone)
    except InvalidRecord:
        tz = zone(vault_zone)  # health reports the bad frontmatter zone; the vault's is used to read it
    local_day, wall = local_day_and_time(at, tz)
    if local_day == day:
        return wall
    _, vault_wall = local_day_and_time(at, zone(vault_zone))
    offset = at.astimezone(zone(vault_zone)).strftime("%z")
    return vault_wall[:5] + f"{offset[:3]}:{offset[3:]}"


def _refuse_if_in_a_conflict(note: Note, relpath: str, text: str) -> None:
    """A fact already standing in an unresolved merge-conflict hunk is there, but not searchable:
    a second copy below the hunk would double it once the person resolves the conflict."""
    wanted = normalize_text(text)
    for first, end in note.conflicts:
        inside = [line for line in note.lines[first:end] if not line.startswith(_CONFLICT_MARKERS)]
        for memory in parse("".join(inside)).bullets:
            if normalize_text(memory.text) == wanted:
                raise NoteNotWritable(
                    f"{relpath} already holds this fact inside an unresolved merge conflict (line {first + 1}); "
                    f"nothing was written. Fix: resolve the merge conflict in {relpath} first, then retry"
                )


def _unused_id_for(note: Note, text: str, block_id: str) -> str:
    wanted = content_hash(text)
    by_id = note.by_block_id
    candidate = block_id
    for variant in range(_MAX_ID_VARIANTS):
        existing = by_id.get(candidate)
        if existing is not None and content_hash(existing.text) == wanted:
            return candidate  # already there, unchanged: a replay writes nothing
        if existing is None:
            return candidate  # a copy in a hidden region (a hunk, a fence) is refused by the append
        candidate = memory_id(f"{text}\0{variant + 1}")
    return candidate
