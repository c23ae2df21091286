"""Projecting an admitted turn into the vault's markdown, exactly once across crashes.

Lite writes the host observation to `daily/YYYY-MM-DD.md`, BuJo to `audit/YYYY-MM-DD.md`
(raw observations, outside curated recall), on the local date of `completedAt` in the vault's
zone. The bullet's block id derives from the run (`^t-` + the first 10 hex digits of the
intake id), so a replay after a crash finds the bullet already there and does not write it
again. The write is a compare-and-swap of the whole note, like Remember's, so a person saving
the same note at that moment is never overwritten.

Journal is a seam: its content identity (SHA-256 of the NFKC/whitespace-normalised text) and
vector queue come with the vector work. Until then `project_journal_turn` projects like Lite;
that function is the one to replace.

    - 14:03 Deployed the fix and closed the incident. ^t-9f2c01ab3e
"""

from __future__ import annotations

from dataclasses import dataclass

from vault.clock import local_day_and_time, zone
from vault.errors import InvalidRecord
from vault.fsio import fsync_dir, read_bytes_nofollow
from vault.layout import AUDIT, DAILY, VaultLayout
from vault.locks import replace_if_unchanged
from vault.note import append_line, format_bullet, new_note_text, parse
from vault.paths import resolve_inside

from vault.intake.files import CrashHook, hit
from vault.intake.record import IntakeRecord

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


def project_turn(layout: VaultLayout, record: IntakeRecord, vault_zone: str, hook: CrashHook | None = None) -> Projection:
    """Project one record by its tier. Caller holds the vault lock (and indexes the note after)."""
    if record.tier == "bujo":
        projection = _append_turn(layout, AUDIT, record, vault_zone)
    elif record.tier == "journal":
        projection = project_journal_turn(layout, record, vault_zone)
    else:
        projection = _append_turn(layout, DAILY, record, vault_zone)
    hit(hook, "project.note_written")
    return projection


def project_journal_turn(layout: VaultLayout, record: IntakeRecord, vault_zone: str) -> Projection:
    """Journal seam: for now a Lite projection into `daily/` (see the module docstring)."""
    return _append_turn(layout, DAILY, record, vault_zone)


def _append_turn(layout: VaultLayout, folder: str, record: IntakeRecord, vault_zone: str) -> Projection:
    day, wall_time = local_day_and_time(record.completed_at, zone(vault_zone))
    block_id = turn_block_id(record.id)
    relpath = layout.note_relpath(folder, day)
    path = resolve_inside(layout.root, relpath)
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        fsync_dir(layout.root)
    try:
        old = read_bytes_nofollow(path)
    except FileNotFoundError:
        old = None
    note = parse(_decode_note(old, relpath) if old is not None else new_note_text(day.isoformat()))
    if any(bullet.block_id == block_id for bullet in note.bullets):
        return Projection(relpath, block_id, written=False)
    updated = append_line(note, format_bullet(record.payload.summary, block_id, wall_time))
    replace_if_unchanged(path, old, "".join(updated.lines).encode("utf-8"), mode=0o644)
    return Projection(relpath, block_id, written=True)


def _decode_note(data: bytes, relpath: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(
            f"{relpath} is not valid UTF-8 (byte {exc.start}); memvault will not rewrite it: "
            "fix or re-save the file as UTF-8; the turn stays pending and is retried"
        ) from exc
