"""Resolve many projected runs at once: `resolve_run` for a batch, with its fsyncs shared.

The owner's worker projects the Journal turns that are due together, then resolves them. One by
one, each run cost six fsyncs (receipt and its folder, ledger shard, catalog and its folder,
the active record's folder) while holding the intake lock, and under load each fsync waits for
the disk's journal: every admission of every agent queued behind that lock. Together, the same
durable steps run in the same order for the whole batch:

    receipts written (each file fsynced, their folder once)      -> resolve.receipt_written
    ledger entries appended (each shard once), catalog committed -> resolve.catalog_committed
    active records removed (their folder fsynced once)           -> resolve.active_removed

so a crash between two steps leaves every run of the batch where `resolve_run` would leave one
(a receipt without a committed entry, or an entry without its active record removed), and
recovery finishes each exactly as it does for one.

No step takes the intake lock (only runs resolved already but for their ledger entry, a crash's
leftovers, are finished under it by `resolve_run`). The caller holds the liveness fence, so it
is the vault's one resolver: no other process moves a run out of the active folders, writes a
receipt or appends to the ledger meanwhile (operator commands refuse to run beside a live fence,
and an admission leaves the ledger to a live resolver: it recovers its shard only while nobody
holds the fence), and admissions only add new runs. A run being resolved stays active until its
ledger entry is committed (an admission of it answers `duplicate` from its active record, then
from the ledger), its receipt lands before that entry as before, and an admission reading the
ledger counts committed entries only: bytes past a shard's committed mark (an append in flight)
are read as the uncommitted suffix they are. Every admission used to wait on that lock while the
worker appended and fsynced each shard and committed the catalog: with eight agents, holds of
17 ms (p50) to 41 ms (p95) in a loaded owner, most of an admission's wait.

The slowest part, making and fsyncing a file per receipt, runs first (`prepare_receipts`):
temp files in `resolved/`, renamed into place when the run is still as it was. Only the worker
writes there while it owns the vault, and a temp file a crash leaves behind is removed by the
next worker's recovery, as any write's.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path

from memvault.vault.errors import Conflict
from memvault.vault.fsio import fsync_dir, remove_quietly, write_temp
from memvault.vault.intake.backoff import MAX_ATTEMPTS
from memvault.vault.intake.files import RESOLVED, CrashHook, IntakeDirs, hit
from memvault.vault.intake.ledger import Ledger
from memvault.vault.intake.record import PROJECTED, IntakeRecord, Receipt, render_receipt
from memvault.vault.intake.state import (
    find_active,
    intake_lock,
    prune_receipts,
    read_receipt,
    receipt_lookup,
    resolve_run,
)


def projected_receipt(record: IntakeRecord, projection: str, now: datetime) -> Receipt:
    attempts = min(record.attempts + 1, MAX_ATTEMPTS)  # the attempt that succeeded
    return Receipt(record.id, record.payload_sha256, PROJECTED, record.admitted_at, now, attempts, projection, None)


Prepared = dict[str, tuple[Receipt, Path]]  # intake id -> (its receipt, a fsynced temp file holding it)


def prepare_receipts(dirs: IntakeDirs, runs: list[tuple[IntakeRecord, str]], now: datetime) -> Prepared:
    """Before the intake lock: each run's receipt in a fsynced temp file in `resolved/`, by id.
    Pass them to `resolve_projected_together` (with the same `now`), then `discard` what is left."""
    folder, prepared = dirs.folder(RESOLVED), {}
    try:
        for record, projection in runs:
            receipt = projected_receipt(record, projection, now)
            name = dirs.record_path(RESOLVED, record.id).name
            prepared[record.id] = (receipt, write_temp(folder, name, render_receipt(receipt), mode=0o600))
    except BaseException:
        discard(prepared)
        raise
    return prepared


def discard(prepared: Prepared) -> None:
    """Remove prepared temp files that were not renamed into place."""
    for _, temp in prepared.values():
        remove_quietly(temp)
    prepared.clear()


def resolve_projected_together(dirs: IntakeDirs, runs: list[tuple[str, str]], *, now: datetime,
                               hook: CrashHook | None = None, prepared: Prepared | None = None,
                               ) -> list[Receipt | Exception]:  # fmt: skip
    """(intake id, projection) of projected runs -> each one's receipt, or the error that left it
    unresolved (the others go on). As `resolve_run(outcome=PROJECTED)` for each. `prepared`
    (from `prepare_receipts`): temp files used where they hold the receipt due, popped as used.
    Caller holds the liveness fence and not the intake lock."""
    outcomes: list[Receipt | Exception | None] = [None] * len(runs)
    batch: list[tuple[int, str, IntakeRecord, Receipt, bool]] = []  # position, folder, record, receipt, new
    settled: list[int] = []  # runs without an active record: resolved already, but for their ledger entry
    ledger = Ledger(dirs, create=False, hook=hook)  # read without the lock: only this resolver writes it
    for position, (intake_id, _) in enumerate(runs):
        try:
            found = _active_and_settled(dirs, ledger, intake_id)
            if found is None:  # resolved already (a crash after its receipt): the single path finishes it
                settled.append(position)
                continue
            folder, record, receipt = found
            new = receipt is None
            if new:
                receipt = projected_receipt(record, runs[position][1], now)
            batch.append((position, folder, record, receipt, new))
        except Exception as exc:  # this run stays pending; the worker records the failed attempt
            outcomes[position] = exc
    if not batch and not settled:
        return outcomes  # type: ignore[return-value]
    if batch:
        _write_receipts(dirs, [receipt for _, _, _, receipt, new in batch if new], ledger, hook, prepared or {})
    with intake_lock(dirs) if settled else nullcontext():  # `resolve_run` (settled runs) moves records: locked
        ledger = ledger.reloaded(hook)
        for position in settled:
            intake_id, projection = runs[position]
            try:
                outcomes[position] = resolve_run(dirs, ledger, intake_id, outcome=PROJECTED, projection=projection,
                                                 now=now, hook=hook)  # fmt: skip
            except Exception as exc:
                outcomes[position] = exc
        if batch:
            ledger.append_together([(r.id, r.payload_sha256) for _, _, r, _, _ in batch], receipt_lookup(dirs), hook)
    if batch:
        for _ in batch:
            hit(hook, "resolve.catalog_committed")
        _remove_active(dirs, [(folder, record.id) for _, folder, record, _, _ in batch])
        for position, _, _, receipt, _ in batch:
            hit(hook, "resolve.active_removed")
            outcomes[position] = receipt
    return outcomes  # type: ignore[return-value]


def _active_and_settled(dirs: IntakeDirs, ledger: Ledger, intake_id: str):
    """(folder, active record, its receipt or None), None when the run has no active record;
    raises Conflict where `resolve_run` would (a receipt or a ledger entry for another payload)."""
    found = find_active(dirs, intake_id)
    if found is None:
        return None
    folder, record = found
    receipt = read_receipt(dirs, intake_id)
    committed = ledger.lookup(intake_id)
    if (receipt is not None and receipt.payload_sha256 != record.payload_sha256) or (
            committed is not None and committed != record.payload_sha256):  # fmt: skip
        raise Conflict(
            f"run {intake_id} has a receipt or ledger entry for another payload than its active record; "
            "nothing was changed. Fix: inspect both files in .capture-intake/ and remove the wrong one."
        )
    return folder, record, receipt


def _write_receipts(dirs: IntakeDirs, receipts: list[Receipt], ledger: Ledger, hook: CrashHook | None,
                    prepared: Prepared) -> None:  # fmt: skip
    """Every receipt durable before any ledger entry: each file fsynced, the folder once."""
    if not receipts:
        return
    prune_receipts(dirs, ledger, room=len(receipts))
    folder = dirs.folder(RESOLVED)
    for receipt in receipts:
        path = dirs.record_path(RESOLVED, receipt.id)
        ready = prepared.pop(receipt.id, None)
        if ready is not None and ready[0] != receipt:  # the run changed since: write what is due now
            remove_quietly(ready[1])
            ready = None
        temp = ready[1] if ready is not None else write_temp(folder, path.name, render_receipt(receipt), mode=0o600)
        try:
            os.replace(temp, path)
        except BaseException:
            remove_quietly(temp)
            raise
    fsync_dir(folder)
    for _ in receipts:
        hit(hook, "resolve.receipt_written")


def _remove_active(dirs: IntakeDirs, records: list[tuple[str, str]]) -> None:
    folders = set()
    for folder, intake_id in records:
        try:
            os.unlink(dirs.record_path(folder, intake_id))
        except FileNotFoundError:
            continue
        folders.add(folder)
    for folder in sorted(folders):
        fsync_dir(dirs.folder(folder))
