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
"""

from __future__ import annotations

from dataclasses import dataclass

from memvault.vault.curated import append_bullet_once
from memvault.vault.intake.files import CrashHook, hit
from memvault.vault.intake.record import IntakeRecord
from memvault.vault.layout import AUDIT, DAILY, VaultLayout

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
    """Project a Lite (daily/) or BuJo (audit/) record. Caller holds the vault lock and indexes after.

    Journal turns are projected by the store instead (`MemoryStore.project_journal_turn`): their
    identity is their content, so the check for an existing copy needs the index.
    """
    folder = AUDIT if record.tier == "bujo" else DAILY
    write = append_bullet_once(
        layout, folder, record.payload.summary, turn_block_id(record.id), record.completed_at, vault_zone
    )
    hit(hook, "project.note_written")
    return Projection(write.path, write.id, write.written)
