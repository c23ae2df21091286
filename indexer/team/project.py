"""The owner projects a claimed batch of remote turns into its files: one write per note.

Each turn lands where the local intake worker would put it, with the same bullet id, so a
batch projected twice (a SIGKILL after the notes were written, before the server marked the
turns) writes nothing the second time:

* journal tier: Remember's content identity (`MemoryStore.project_journal_turn`), through the
  store's batch writer (`MemoryStore.remember_together`: one compare-and-swap append per
  daily note, the index commit on the owner's timer, searchable through the owner at once);
* lite and BuJo: the run-derived id `^t-…` in `daily/` or `audit/` (`vault/intake/projection.py`),
  the bullets of one note appended in one write.

A turn the batch cannot take (capture mode, which needs its model step; a note that refuses the
line: a conflict hunk, bad bytes) goes into the owner's own durable intake instead (same run id:
idempotent), whose worker retries it with backoff and dead-letters it as for a local turn.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from memvault.vault.curated import append_bullets_once, plan_bullet
from memvault.vault.errors import VaultError
from memvault.vault.intake.admission import admit_record
from memvault.vault.intake.files import IntakeDirs, hit
from memvault.vault.intake.projection import projected_text, turn_block_id
from memvault.vault.intake.record import IntakeRecord
from memvault.vault.layout import AUDIT, DAILY


def project_batch(store, records: list[IntakeRecord], *, hook=None, log=lambda _message: None) -> list[str]:
    """The ids of `records` now in the files, or durably in the owner's intake (which projects them)."""
    direct = [record for record in records if record.payload.write_mode != "capture"]
    journal = [record for record in direct if record.tier == "journal"]
    noted = [record for record in direct if record.tier != "journal"]
    done: list[str] = []
    refused = [record for record in records if record.payload.write_mode == "capture"]
    if journal:
        ok, failed = _journal_turns(store, journal, log)
        done += ok
        refused += failed
    if noted:
        ok, failed = _noted_turns(store, noted, log)
        done += ok
        refused += failed
    if done:
        hit(hook, "team.turns.written")
    for record in refused:
        if _into_local_intake(store, record, hook, log):
            done.append(record.id)
    return done


def _journal_turns(store, records: list[IntakeRecord], log) -> tuple[list[str], list[IntakeRecord]]:
    results = store.remember_together([(projected_text(record.payload.summary), record.completed_at)
                                       for record in records])  # fmt: skip
    done, refused = [], []
    for record, result in zip(records, results, strict=True):
        if isinstance(result, VaultError):
            log(f"team drain: turn {record.id} goes to the local intake: {result}")
            refused.append(record)
        else:
            done.append(record.id)
    return done, refused


def _noted_turns(store, records: list[IntakeRecord], log) -> tuple[list[str], list[IntakeRecord]]:
    done, refused = [], []
    with store._lock:
        notes: dict = {}
        places: dict = {}
        per_note: dict[str, list] = defaultdict(list)
        titles: dict[str, str] = {}
        for record in records:
            folder = AUDIT if record.tier == "bujo" else DAILY
            try:
                relpath, title, bullet = plan_bullet(store.layout, folder, projected_text(record.payload.summary),
                                                     turn_block_id(record.id), record.completed_at, store.time_zone,
                                                     notes=notes, places=places)  # fmt: skip
            except VaultError as exc:
                log(f"team drain: turn {record.id} goes to the local intake: {exc}")
                refused.append(record)
                continue
            per_note[relpath].append((record, bullet))
            titles[relpath] = title
        touched = []
        for relpath, entries in sorted(per_note.items()):
            try:
                append_bullets_once(store.layout, relpath, titles[relpath], [bullet for _, bullet in entries])
            except VaultError as exc:
                log(f"team drain: {len(entries)} turn(s) for {relpath} go to the local intake: {exc}")
                refused += [record for record, _ in entries]
                continue
            touched.append(relpath)
            done += [record.id for record, _ in entries]
        if touched:
            store.index_notes(touched)
    return done, refused


def _into_local_intake(store, record: IntakeRecord, hook, log) -> bool:
    """Admit into the owner's durable intake (same run id: a duplicate when already held)."""
    record = dataclasses.replace(record, admitted_at=store._clock())  # due now, on this machine's clock
    result = admit_record(IntakeDirs(store.layout.root), record, hook=hook)
    if not result.ok:
        log(f"team drain: turn {record.id} not admitted locally: {result.reason}: {result.message}")
        return False
    hit(hook, "team.turn.admitted")
    worker = getattr(store, "_intake", None)
    if worker is not None and result.status == "admitted":
        worker.admitted(result.id)
    return True
