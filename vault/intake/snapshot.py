"""Content-free views of the intake: the runtime snapshot and `memvault inspect`.

Read-only: nothing here creates, repairs or locks anything, so inspect works beside a live
agent. Output carries ids, states, timestamps, attempts/revisions, due flags, bounded failure
categories, bullet references and counts: never a summary, capture text or run id.
"""

from __future__ import annotations

import os
from datetime import datetime

from memvault.vault.errors import InvalidRecord, VaultError
from memvault.vault.intake.backoff import MAX_INVALID_OUTPUT_ATTEMPTS
from memvault.vault.intake.files import DEAD, PENDING, RESOLVED, IntakeDirs, is_intake_id
from memvault.vault.intake.ledger import Ledger
from memvault.vault.intake.record import AWAITING_CAPTURE, PENDING_STATE, IntakeRecord, Receipt, format_ts
from memvault.vault.intake.state import MAX_ACTIVE, MAX_RECEIPTS, read_receipt, read_record, receipt_lookup

COUNT_KEYS = ("pending", "awaitingCapture", "dead", "resolved", "due", "invalid")


def _ts(instant: datetime | None) -> str | None:
    return None if instant is None else format_ts(instant)


def describe_record(record: IntakeRecord, folder: str, now: datetime) -> dict:
    return {
        "id": record.id,
        "state": record.state,
        "folder": folder,
        "tier": record.tier,
        "writeMode": record.payload.write_mode,
        "trigger": record.payload.trigger,
        "completedAt": _ts(record.completed_at),
        "admittedAt": _ts(record.admitted_at),
        "attempts": record.attempts,
        # unusable model answers spend their own, smaller budget (vault/intake/backoff.py)
        "invalidOutputAttempts": record.invalid_attempts,
        "invalidOutputBudget": MAX_INVALID_OUTPUT_ATTEMPTS,
        "revision": record.revision,
        "due": record.is_due(now),
        "nextAttemptAt": _ts(record.due_at()) if record.state == PENDING_STATE else None,
        "lastAttemptAt": _ts(record.last_attempt_at),
        "failure": record.failure,
        "projection": record.projection,
    }


def describe_receipt(receipt: Receipt) -> dict:
    return {
        "id": receipt.id,
        "state": "resolved",
        "outcome": receipt.outcome,
        "admittedAt": _ts(receipt.admitted_at),
        "resolvedAt": _ts(receipt.resolved_at),
        "attempts": receipt.attempts,
        "projection": receipt.projection,
        "reason": receipt.reason,
    }


def _invalid(intake_id: str, folder: str, exc: Exception) -> dict:
    return {
        "id": intake_id,
        "state": "invalid",
        "folder": folder,
        "failure": getattr(exc, "code", "io_error"),
        "problem": str(exc),
    }


def _read_entry(dirs: IntakeDirs, folder: str, intake_id: str, now: datetime) -> dict:
    try:
        if folder == RESOLVED:
            receipt = read_receipt(dirs, intake_id)
            if receipt is None:
                raise FileNotFoundError(intake_id)
            return describe_receipt(receipt)
        return describe_record(read_record(dirs, folder, intake_id), folder, now)
    except (VaultError, OSError) as exc:
        return _invalid(intake_id, folder, exc)


def list_entries(dirs: IntakeDirs, now: datetime) -> list[dict]:
    """Every active record and receipt, pending first, each as a content-free dict."""
    entries = []
    for folder in (PENDING, DEAD, RESOLVED):
        for intake_id in dirs.list_folder(folder).ids:
            entries.append(_read_entry(dirs, folder, intake_id, now))
    return entries


def count_entries(entries: list[dict]) -> dict[str, int]:
    counts = dict.fromkeys(COUNT_KEYS, 0)
    for entry in entries:
        state = entry["state"]
        key = "awaitingCapture" if state == AWAITING_CAPTURE else state
        counts[key] += 1
        counts["due"] += bool(entry.get("due"))
    return counts


def ledger_status(dirs: IntakeDirs) -> dict:
    """The ledger verified read-only: ok, or the fail-closed problem an admission would hit."""
    marker = os.path.lexists(dirs.marker)
    try:
        report = Ledger(dirs, create=False).report(receipt_lookup(dirs))
    except (VaultError, OSError) as exc:
        return {"ok": False, "problem": str(exc), "marker": marker}
    return {
        "ok": True,
        "problem": None,
        "marker": marker,
        "entries": report.entries,
        "shards": report.shards,
        "uncommitted": report.uncommitted,
        "tornBytes": report.torn_bytes,
    }


def runtime_snapshot(dirs: IntakeDirs, now: datetime) -> dict:
    """Content-free counts (pending/dead/resolved/due/...) plus ledger health and the bounds."""
    if not dirs.exists():
        counts = dict.fromkeys(COUNT_KEYS, 0)
    else:
        counts = count_entries(list_entries(dirs, now))
    strays = sum(len(dirs.list_folder(f).strays) + len(dirs.list_folder(f).foreign) for f in (PENDING, DEAD, RESOLVED))
    return {
        "counts": counts,
        "limits": {"active": MAX_ACTIVE, "resolved": MAX_RECEIPTS},
        "unexpectedFiles": strays,
        "ledger": ledger_status(dirs),
    }


def inspect_intake(dirs: IntakeDirs, now: datetime) -> dict:
    """`memvault inspect`: the snapshot plus one content-free row per record and receipt."""
    entries = list_entries(dirs, now) if dirs.exists() else []
    snapshot = runtime_snapshot(dirs, now)
    return {**snapshot, "records": entries}


def inspect_run(dirs: IntakeDirs, intake_id: str, now: datetime) -> dict:
    """`memvault inspect ID`: where one run stands, including a receipt pruned to the ledger."""
    if not is_intake_id(intake_id):
        raise InvalidRecord(f"{intake_id!r} is not an intake id: use the 64-hex id `memvault inspect` shows")
    rows = [
        _read_entry(dirs, folder, intake_id, now)
        for folder in (PENDING, DEAD, RESOLVED)
        if os.path.lexists(dirs.record_path(folder, intake_id))
    ]
    ledger = ledger_status(dirs)
    committed = None
    if ledger["ok"]:
        committed = Ledger(dirs, create=False).lookup(intake_id) is not None
    if not rows:
        state = "resolved" if committed else "unknown"
        rows = [{"id": intake_id, "state": state, "receipt": "pruned" if committed else None}]
    return {"id": intake_id, "entries": rows, "ledgerCommitted": committed, "ledger": ledger}
