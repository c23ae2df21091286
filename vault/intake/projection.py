"""Projecting an admitted turn into the vault's markdown, exactly once across crashes.

Lite writes the host observation to `daily/YYYY-MM-DD.md`, BuJo to `audit/YYYY-MM-DD.md`
(raw observations, outside curated recall), on the local date of `completedAt` in the vault's
zone. The bullet's block id derives from the run (`^t-` + the first 10 hex digits of the
intake id), so a replay after a crash finds the bullet already there and does not write it
again. The write is a compare-and-swap of the whole note, like Remember's, so a person saving
the same note at that moment is never overwritten.

Journal turns converge by content instead: their bullet id is the content identity (SHA-256
of the NFKC/whitespace-normalised text, as Remember's), so repeated content lands on one
bullet and one index row; the store projects them (`MemoryStore.project_journal_turn`).

    - 14:03 Deployed the fix and closed the incident. ^t-9f2c01ab3e

The projected text is the host's, not a person's: an answer holding an unclosed `<!--` or `%%`
would open a comment that hides every line after it (the note writer refuses such a line), so
`projected_text` breaks those openers up (`<! --`, `% %`). The words stay readable and
searchable; the turn is projected instead of retried until it is a dead letter.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from memvault.vault.clock import local_day_and_time, zone
from memvault.vault.curated import append_bullet_once
from memvault.vault.intake.files import CrashHook, hit
from memvault.vault.intake.record import IntakeRecord
from memvault.vault.layout import AUDIT, DAILY, VaultLayout
from memvault.vault.note import region_left_open
from memvault.vault.note_append import read_note_if_any

TURN_ID_PREFIX = "t-"
TURN_ID_HEX = 10


@dataclass(frozen=True)
class Projection:
    relpath: str  # vault-relative note path
    block_id: str
    written: bool  # False when a replay found the bullet already there

    @property
    def source(self) -> str:
        return f"{self.relpath}#^{self.block_id}"


def turn_block_id(intake_id: str) -> str:
    """The run-derived bullet id: `t-` + the first 10 hex digits of the intake id."""
    return TURN_ID_PREFIX + intake_id[:TURN_ID_HEX]


def project_turn(
    layout: VaultLayout, record: IntakeRecord, vault_zone: str, hook: CrashHook | None = None
) -> Projection:
    """Project a Lite (daily/) or BuJo (audit/) record. Caller holds the vault lock and indexes after.

    Journal turns are projected by the store instead (`MemoryStore.project_journal_turn`): their
    identity is their content, so the check for an existing copy needs the index.
    """
    folder = AUDIT if record.tier == "bujo" else DAILY
    write = append_bullet_once(
        layout,
        folder,
        projected_text(record.payload.summary),
        turn_block_id(record.id),
        record.completed_at,
        vault_zone,
    )
    hit(hook, "project.note_written")
    return Projection(write.path, write.id, write.written)


#: comment openers of Markdown (HTML) and Obsidian, and how the host's text spells them instead
_OPENERS = (("<!--", "<! --"), ("%%", "% %"))


def projected_text(summary: str) -> str:
    """The host summary as a bullet may carry it: unchanged, unless it would leave a comment open
    at its end; then every comment opener in it is broken up, so none can open one."""
    if region_left_open(summary) is None:
        return summary
    text = summary
    for opener, spelled in _OPENERS:
        while opener in text:  # "%%%" needs two passes
            text = text.replace(opener, spelled)
    return text


def projection_problem(layout: VaultLayout, record: IntakeRecord, vault_zone: str) -> tuple[str, str] | None:
    """Why the note this turn projects to cannot take its bullet now, and what to do about it,
    found without writing anything (health and `admit` explain a failing turn with it); None
    when nothing visible stops it."""
    folder = AUDIT if record.tier == "bujo" else DAILY
    day, _ = local_day_and_time(record.completed_at, zone(vault_zone))
    relpath = layout.note_relpath(folder, day)
    current = layout.root
    for part in relpath.split("/")[:-1]:
        current = current / part
        kind = _kind(current)
        if kind not in (None, "folder"):
            where = current.relative_to(layout.root)
            return (
                f"{where} is a {kind}, where memvault keeps notes in a folder of that name",
                f"rename or move {where} away",
            )
    kind = _kind(layout.root / relpath)
    if kind not in (None, "file"):
        return f"{relpath} is a {kind}, not a note", f"rename or move {relpath} away"
    if kind == "file":
        try:
            note = read_note_if_any(layout.root, relpath)
        except (OSError, ValueError) as exc:
            return f"{relpath} cannot be read ({exc})", f"make {relpath} a readable UTF-8 markdown file"
        if note is not None and note.open_at_end is not None:
            return (
                f"{relpath} ends inside {note.open_at_end}, so a line appended there would be hidden",
                f"close the comment or code fence in {relpath}",
            )
    left_open = region_left_open(projected_text(record.payload.summary))
    if left_open is not None:
        return f"the turn's text would leave {left_open} open in {relpath}", f"memvault resolve {record.id} unwritable"
    return None


def _kind(path) -> str | None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"path that cannot be examined ({exc.strerror})"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "folder"
    return "file" if stat.S_ISREG(mode) else "special file"
