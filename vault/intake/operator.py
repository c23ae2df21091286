"""Operator maintenance: `memvault retry [ID]` and `memvault resolve ID REASON-SLUG`.

Both need a stopped agent. They take the liveness fence for their whole run (refused with
`VaultLocked` while a live process holds it), then the intake lock, recover any interrupted
transition, and act:

- retry: a dead letter gets a fresh budget of 16 attempts and is due now; a delayed pending
  record is made due now. Everything else is a reported no-op: already due, already resolved,
  awaiting capture (the capture pipeline owns it). Without an id, every dead and delayed run.
- resolve: the explicit loss-accepting path. The active record is replaced by a receipt with
  outcome `operator_resolved` and the reason slug; the ledger entry is committed, so the run
  id stays a duplicate for ever. It never claims the turn was projected or captured. An
  already resolved run is a reported no-op. A run with a retained BuJo semantic plan is refused
  (`Conflict`): its capture can still finish without the model.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from memvault.vault.capture.plan import plan_path
from memvault.vault.errors import Conflict, InvalidRecord
from memvault.vault.intake.files import DEAD, PENDING, CrashHook, IntakeDirs, is_intake_id
from memvault.vault.intake.record import OPERATOR_RESOLVED, SLUG_RE
from memvault.vault.intake.state import find_active, intake_lock, make_due, read_receipt, recover, resolve_run
from memvault.vault.locks import LivenessFence


def _check_id(intake_id: str) -> None:
    if not is_intake_id(intake_id):
        raise InvalidRecord(f"{intake_id!r} is not an intake id: use the 64-hex id `memvault inspect` shows")


def retry_runs(root: Path, intake_id: str | None, now: datetime, hook: CrashHook | None = None) -> list[dict]:
    """Make dead/delayed work due for the next start; returns one {id, outcome} per run touched."""
    if intake_id is not None:
        _check_id(intake_id)
    dirs = IntakeDirs(Path(root))
    with LivenessFence(dirs.root), intake_lock(dirs):
        ledger, _ = recover(dirs, now, hook)
        if intake_id is not None:
            if find_active(dirs, intake_id) is None and ledger.lookup(intake_id) is not None:
                return [{"id": intake_id, "outcome": "already_resolved"}]
            return [{"id": intake_id, "outcome": make_due(dirs, intake_id, now, hook)}]
        results = []
        for folder in (DEAD, PENDING):
            for run in dirs.list_folder(folder).ids:
                found = find_active(dirs, run)
                if found is None or found[1].is_due(now) or found[1].state not in ("dead", "pending"):
                    continue
                results.append({"id": run, "outcome": make_due(dirs, run, now, hook)})
        return results


def resolve_run_as_operator(
    root: Path, intake_id: str, reason: str, now: datetime, hook: CrashHook | None = None
) -> dict:
    """Accept the loss of one run: receipt `operator_resolved`, permanent ledger entry, record gone."""
    _check_id(intake_id)
    if not isinstance(reason, str) or not SLUG_RE.fullmatch(reason):
        raise InvalidRecord(
            f"reason {reason!r} is not a slug: use 1-64 of a-z, 0-9 and '-', starting with a letter or digit"
        )
    dirs = IntakeDirs(Path(root))
    with LivenessFence(dirs.root), intake_lock(dirs):
        ledger, _ = recover(dirs, now, hook)
        found = find_active(dirs, intake_id)
        if found is None:
            receipt = read_receipt(dirs, intake_id)
            if receipt is not None:
                return {"id": intake_id, "outcome": "already_resolved", "receiptOutcome": receipt.outcome}
            if ledger.lookup(intake_id) is not None:
                return {"id": intake_id, "outcome": "already_resolved", "receiptOutcome": None}
            raise InvalidRecord(f"no intake record {intake_id}: check the id with `memvault inspect`")
        previous = found[1].state
        _refuse_retained_plan(dirs, intake_id)
        resolve_run(dirs, ledger, intake_id, outcome=OPERATOR_RESOLVED, reason=reason, now=now, hook=hook)
        return {"id": intake_id, "outcome": OPERATOR_RESOLVED, "previousState": previous, "reason": reason}


def _refuse_retained_plan(dirs: IntakeDirs, intake_id: str) -> None:
    """A retained BuJo semantic plan is recoverable without the model: never accept its loss."""
    if os.path.lexists(plan_path(dirs.root, intake_id)):
        raise Conflict(
            f"run {intake_id} has a retained semantic plan (.capture-intake/plans/{intake_id}.json): it is "
            f"recoverable, so it is not resolved as lost. Fix: start the agent with its BuJo configuration so "
            f"capture commits the plan (no model call is needed); nothing was changed."
        )
