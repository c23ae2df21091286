"""Writing one curated fact into `daily/`: the vault half of Remember.

The caller holds the vault lock and indexes the note in the same critical section. The write is
a compare-and-swap of the whole note against the bytes just read, so a person saving the same
note in an editor at that moment is never overwritten: the write fails with Conflict instead.
"""

import unicodedata
from dataclasses import dataclass
from datetime import datetime

from memvault.vault.clock import local_day_and_time, zone
from memvault.vault.credentials import refuse_credentials
from memvault.vault.errors import InvalidRecord
from memvault.vault.fsio import PUBLIC_DIR_MODE, fsync_dir, make_dir, read_bytes_nofollow
from memvault.vault.ids import memory_id, normalize_text, without_bidi_controls
from memvault.vault.layout import DAILY, VaultLayout
from memvault.vault.locks import replace_if_unchanged
from memvault.vault.note import append_line, format_bullet, new_note_text, parse
from memvault.vault.paths import resolve_inside

#: a remembered fact is one line of prose, not a document
MAX_FACT_BYTES = 4096


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
    refuse_credentials(fact, "the fact")
    return fact


def write_fact(layout: VaultLayout, fact: str, at: datetime, vault_zone: str) -> CuratedWrite:
    """Append `fact` (already prepared) to the daily note of `at`'s local date, once."""
    return append_bullet_once(layout, DAILY, fact, memory_id(fact), at, vault_zone)


def append_bullet_once(
    layout: VaultLayout, folder: str, text: str, block_id: str, at: datetime, vault_zone: str
) -> CuratedWrite:
    """Append `- HH:MM text ^block_id` to `folder/<local date of at>.md` unless that id is there.

    The one write every projection shares (Remember, turn intake, capture): a replay after a
    crash finds its block id already in the note and writes nothing. Caller holds the vault lock.
    """
    day, wall_time = local_day_and_time(at, zone(vault_zone))
    relpath = layout.note_relpath(folder, day)
    written = append_bullets_once(layout, relpath, day.isoformat(), [NewBullet(text, block_id, wall_time)])
    return CuratedWrite(block_id, relpath, wall_time, written=bool(written))


@dataclass(frozen=True)
class NewBullet:
    text: str
    block_id: str
    wall_time: str | None


def append_bullets_once(layout: VaultLayout, relpath: str, title: str, bullets: list[NewBullet]) -> list[str]:
    """Append, in one compare-and-swap write, every bullet whose block id the note lacks.

    Returns the ids written (empty when all were already there). A new note starts with `# title`.
    """
    path = resolve_inside(layout.root, relpath)
    if not path.parent.is_dir():
        make_dir(path.parent, PUBLIC_DIR_MODE, parents=True)  # daily/, audit/: 0755 whatever the umask
        fsync_dir(layout.root)
    try:
        old = read_bytes_nofollow(path)
    except FileNotFoundError:
        old = None
    note = parse(_decode_note(old, relpath) if old is not None else new_note_text(title))
    present = {bullet.block_id for bullet in note.bullets}
    missing = [bullet for bullet in bullets if bullet.block_id not in present]
    if not missing:
        return []
    for bullet in missing:
        note = append_line(note, format_bullet(bullet.text, bullet.block_id, bullet.wall_time))
    replace_if_unchanged(path, old, "".join(note.lines).encode("utf-8"), mode=0o644)
    return [bullet.block_id for bullet in missing]


def _decode_note(data: bytes, relpath: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(
            f"{relpath} is not valid UTF-8 (byte {exc.start}); memvault will not rewrite it: "
            "fix or re-save the file as UTF-8, then try again (pending turns and captures are retried)"
        ) from exc
