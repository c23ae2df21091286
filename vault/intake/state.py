"""Durable intake transitions: pending → (awaiting_capture) → resolved, pending ⇄ dead.

Every transition runs under the intake lock (`.locks/intake.lock`) and is one atomic file
operation, or an ordered series whose every prefix is a state recovery can finish:

resolve:  receipt written → ledger shard appended + fsynced → catalog committed → active
          record removed. A crash after the receipt leaves both files; `recover` finishes the
          ledger and removes the record. The receipt exists before the ledger entry, which is
          what lets the catalog adopt an uncommitted shard suffix (see `ledger.py`).
dead:     the record is rewritten in place with state "dead", then renamed into `dead/`;
retry:    the reverse. A record whose folder disagrees with its state is moved by `recover`.

Resolved receipts are bounded: before the 4,097th is written, the oldest receipts whose runs
are committed in the ledger are pruned down to 3,840, so the bound holds and pruning is
amortised. Duplicate protection survives pruning: admission checks the ledger first.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from datetime import datetime

from memvault.vault.errors import Conflict, InvalidRecord, VaultError
from memvault.vault.fsio import atomic_write, fsync_dir
from memvault.vault.intake.backoff import MAX_ATTEMPTS, delay_after, is_exhausted, is_invalid_output
from memvault.vault.intake.files import (
    DEAD,
    PENDING,
    RESOLVED,
    CrashHook,
    IntakeDirs,
    hit,
    move_durably,
    read_private,
    remove_durably,
)
from memvault.vault.intake.ledger import Ledger, ReceiptLookup, shard_of
from memvault.vault.intake.record import (
    AWAITING_CAPTURE,
    CAPTURED,
    DEAD_STATE,
    PENDING_STATE,
    PROJECTED,
    IntakeRecord,
    Receipt,
    parse_receipt,
    parse_record,
    render_receipt,
    render_record,
)
from memvault.vault.locks import VaultLock

INTAKE_LOCK = "intake"
LOCK_TIMEOUT = 10.0
MAX_ACTIVE = 4096
MAX_RECEIPTS = 4096
#: a prune lists and checks every receipt: leaving room for 1,024 more makes it rare (a busy
#: owner resolves hundreds of runs a minute)
PRUNE_TO = MAX_RECEIPTS - 1024


def intake_lock(dirs: IntakeDirs, timeout: float = LOCK_TIMEOUT) -> VaultLock:
    return VaultLock(dirs.root, INTAKE_LOCK, timeout=timeout)


def folder_for(state: str) -> str:
    return DEAD if state == DEAD_STATE else PENDING


# --- reading --------------------------------------------------------------------------------


def read_record(dirs: IntakeDirs, folder: str, intake_id: str) -> IntakeRecord:
    path = dirs.record_path(folder, intake_id)
    return parse_record(read_private(path), intake_id, str(path))


def read_receipt(dirs: IntakeDirs, intake_id: str) -> Receipt | None:
    path = dirs.record_path(RESOLVED, intake_id)
    try:
        data = read_private(path)
    except FileNotFoundError:
        return None
    return parse_receipt(data, intake_id, str(path))


def find_active(dirs: IntakeDirs, intake_id: str) -> tuple[str, IntakeRecord] | None:
    """The active record of a run and its folder; refuses a run present in both folders."""
    found = []
    for folder in (PENDING, DEAD):
        try:
            found.append((folder, read_record(dirs, folder, intake_id)))
        except FileNotFoundError:
            continue
    if len(found) > 1:
        raise InvalidRecord(
            f"run {intake_id} has a record in both pending/ and dead/; memvault will not pick one. "
            f"Fix: move the stale copy out of .capture-intake/ after checking both, then `memvault inspect`."
        )
    return found[0] if found else None


def receipt_lookup(dirs: IntakeDirs) -> ReceiptLookup:
    """Payload hash of a run's receipt; a malformed receipt counts as none (so recovery fails closed)."""

    def lookup(intake_id: str) -> str | None:
        try:
            receipt = read_receipt(dirs, intake_id)
        except VaultError:
            return None
        return None if receipt is None else receipt.payload_sha256

    return lookup


# --- writing --------------------------------------------------------------------------------


def write_record(dirs: IntakeDirs, folder: str, record: IntakeRecord) -> None:
    atomic_write(dirs.record_path(folder, record.id), render_record(record), mode=0o600)


def _current(dirs: IntakeDirs, intake_id: str, revision: int) -> tuple[str, IntakeRecord] | None:
    """The active record if it is still the revision the caller worked from."""
    found = find_active(dirs, intake_id)
    if found is None or found[1].revision != revision:
        return None
    return found


def record_failure(
    dirs: IntakeDirs, intake_id: str, revision: int, category: str, now: datetime, hook: CrashHook | None = None
) -> IntakeRecord | None:
    """Count a failed attempt: back off, or after the 16th failure move to `dead/`."""
    found = _current(dirs, intake_id, revision)
    if found is None:
        return None
    folder, record = found
    attempts = record.attempts + 1
    invalid = record.invalid_attempts + (1 if is_invalid_output(category) else 0)
    if not is_exhausted(attempts, invalid, category):
        updated = record.evolve(attempts=attempts, invalid_attempts=invalid, failure=category, last_attempt_at=now,
                                next_attempt_at=now + delay_after(attempts))  # fmt: skip
        write_record(dirs, folder, updated)
        return updated
    dead = record.evolve(state=DEAD_STATE, attempts=attempts, invalid_attempts=invalid, failure=category,
                         last_attempt_at=now, next_attempt_at=None)  # fmt: skip
    write_record(dirs, folder, dead)
    hit(hook, "dead.rewritten")
    move_durably(dirs.record_path(folder, intake_id), dirs.record_path(DEAD, intake_id))
    return dead


def mark_awaiting_capture(
    dirs: IntakeDirs, intake_id: str, revision: int, projection: str, now: datetime
) -> IntakeRecord | None:
    """Capture mode: the raw audit is projected; the record waits for the capture pipeline."""
    found = _current(dirs, intake_id, revision)
    if found is None:
        return None
    folder, record = found
    updated = record.evolve(
        state=AWAITING_CAPTURE, attempts=record.attempts + 1, failure=None, last_attempt_at=now, projection=projection
    )
    write_record(dirs, folder, updated)
    return updated


def make_due(dirs: IntakeDirs, intake_id: str, now: datetime, hook: CrashHook | None = None) -> str:
    """Operator retry of one run; returns what happened (one of the outcome strings below)."""
    found = find_active(dirs, intake_id)
    if found is None:
        if read_receipt(dirs, intake_id) is not None:
            return "already_resolved"
        raise InvalidRecord(f"no intake record {intake_id}: check the id with `memvault inspect`")
    folder, record = found
    if record.state == AWAITING_CAPTURE:
        return "awaiting_capture"
    if record.state == DEAD_STATE:
        revived = record.evolve(state=PENDING_STATE, attempts=0, invalid_attempts=0, next_attempt_at=now)
        write_record(dirs, folder, revived)
        hit(hook, "retry.rewritten")
        move_durably(dirs.record_path(folder, intake_id), dirs.record_path(PENDING, intake_id))
        return "revived"
    if record.is_due(now):
        return "already_due"
    write_record(dirs, folder, record.evolve(next_attempt_at=now))
    return "made_due"


def resolve_run(
    dirs: IntakeDirs,
    ledger: Ledger,
    intake_id: str,
    *,
    outcome: str,
    now: datetime,
    projection: str | None = None,
    reason: str | None = None,
    hook: CrashHook | None = None,
) -> Receipt:
    """Finish a run for good: receipt, permanent ledger entry, then drop the active record."""
    found = find_active(dirs, intake_id)
    receipt = read_receipt(dirs, intake_id)
    lookup = receipt_lookup(dirs)
    if found is None:
        if receipt is None:
            raise InvalidRecord(f"no intake record {intake_id}: check the id with `memvault inspect`")
        ledger.append(intake_id, receipt.payload_sha256, lookup, hook)
        return receipt
    folder, record = found
    if receipt is None:
        prune_receipts(dirs, ledger, room=1)
        attempts = min(record.attempts + (outcome in (PROJECTED, CAPTURED)), MAX_ATTEMPTS)  # the attempt that succeeded
        receipt = Receipt(
            intake_id, record.payload_sha256, outcome, record.admitted_at, now, attempts, projection, reason
        )
        atomic_write(dirs.record_path(RESOLVED, intake_id), render_receipt(receipt), mode=0o600)
    elif receipt.payload_sha256 != record.payload_sha256:
        raise Conflict(
            f"run {intake_id} has a receipt for another payload than its active record; nothing was changed. "
            f"Fix: inspect both files in .capture-intake/ and remove the wrong one."
        )
    hit(hook, "resolve.receipt_written")
    ledger.append(intake_id, record.payload_sha256, lookup, hook)
    hit(hook, "resolve.catalog_committed")
    remove_durably(dirs.record_path(folder, intake_id))
    hit(hook, "resolve.active_removed")
    return receipt


def prune_receipts(dirs: IntakeDirs, ledger: Ledger, room: int = 0) -> int:
    """Keep at most MAX_RECEIPTS - room receipts, dropping the oldest committed ones."""
    folder = dirs.folder(RESOLVED)
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return 0
    # every name counted, receipts or not: while even that fits, nothing is parsed (a link or a
    # file in the folder's place goes on to list_folder, which refuses it)
    if stat.S_ISDIR(info.st_mode) and len(os.listdir(folder)) + room <= MAX_RECEIPTS:
        return 0
    ids = dirs.list_folder(RESOLVED).ids
    if len(ids) + room <= MAX_RECEIPTS:
        return 0
    active = set(dirs.list_folder(PENDING).ids) | set(dirs.list_folder(DEAD).ids)
    committed: dict[int, dict[str, str]] = {}
    candidates = []
    for intake_id in ids:
        if intake_id in active:
            continue
        try:
            facts = _receipt_facts(dirs, intake_id)
        except VaultError:
            continue  # a damaged receipt is left for the operator, never silently dropped
        if facts is None:
            continue
        resolved_at, payload_sha256 = facts
        shard = shard_of(intake_id)
        if shard not in committed:
            committed[shard] = ledger.read_shard(shard).committed
        if committed[shard].get(intake_id) == payload_sha256:
            candidates.append((resolved_at, intake_id))
    excess = len(ids) + room - min(PRUNE_TO, MAX_RECEIPTS - room)
    for _, intake_id in sorted(candidates)[:excess]:
        path = dirs.record_path(RESOLVED, intake_id)
        path.unlink()
        _read_receipts.pop(str(path), None)
    fsync_dir(dirs.folder(RESOLVED))
    return min(excess, len(candidates))


#: receipt path -> (its lstat: inode, size, mtime, ctime; when it was resolved; its payload's
#: hash), for `prune_receipts`: a receipt is written once, so a prune reads only the receipts it
#: has not read before (it read all 4,096, a third of a busy intake worker's time); a receipt
#: edited or replaced since moves ctime and is read, and checked, again
_read_receipts: dict[str, tuple[tuple[int, int, int, int], tuple[datetime, str]]] = {}


def _receipt_facts(dirs: IntakeDirs, intake_id: str) -> tuple[datetime, str] | None:
    """(resolved at, payload hash) of a resolved receipt, None if it is gone; VaultError if damaged."""
    path = dirs.record_path(RESOLVED, intake_id)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    signature = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    known = _read_receipts.get(str(path))
    if known is not None and known[0] == signature:
        return known[1]
    receipt = read_receipt(dirs, intake_id)
    if receipt is None:
        return None
    if len(_read_receipts) >= 2 * MAX_RECEIPTS:
        _read_receipts.clear()  # receipts removed by hand (or another vault's) are not kept forever
    _read_receipts[str(path)] = (signature, (receipt.resolved_at, receipt.payload_sha256))
    return receipt.resolved_at, receipt.payload_sha256


# --- recovery -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecoveryReport:
    strays_removed: int
    ledger_entries_adopted: int
    resolutions_finished: int
    records_moved: int
    invalid: tuple[str, ...]  # ids whose records fail closed (see `memvault inspect ID`)


def recover(dirs: IntakeDirs, now: datetime, hook: CrashHook | None = None) -> tuple[Ledger, RecoveryReport]:
    """Bring the intake to a consistent state after a crash. Caller holds the intake lock.

    Raises `LedgerIntegrityError` when the ledger cannot be trusted: then nothing may resolve.
    """
    dirs.ensure()
    strays = dirs.remove_strays()
    ledger = Ledger(dirs, create=True, hook=hook)
    adopted = ledger.recover_all(receipt_lookup(dirs))
    finished = moved = 0
    invalid: list[str] = []
    for folder in (PENDING, DEAD):
        for intake_id in dirs.list_folder(folder).ids:
            try:
                outcome = _recover_one(dirs, ledger, folder, intake_id, now, hook)
            except VaultError:
                invalid.append(intake_id)
                continue
            finished += outcome == "finished"
            moved += outcome == "moved"
    prune_receipts(dirs, ledger)
    return ledger, RecoveryReport(strays, adopted, finished, moved, tuple(sorted(set(invalid))))


def _recover_one(
    dirs: IntakeDirs, ledger: Ledger, folder: str, intake_id: str, now: datetime, hook: CrashHook | None
) -> str:
    found = find_active(dirs, intake_id)
    if found is None:
        return "gone"
    folder, record = found
    receipt = read_receipt(dirs, intake_id)
    if receipt is not None:
        resolve_run(dirs, ledger, intake_id, outcome=receipt.outcome, now=now, hook=hook)
        return "finished"
    if folder_for(record.state) != folder:
        move_durably(dirs.record_path(folder, intake_id), dirs.record_path(folder_for(record.state), intake_id))
        return "moved"
    return "ok"
