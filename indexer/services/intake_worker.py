"""The intake worker: projects admitted turns, indexes them, and resolves or retries them.

One worker per vault, in the process that holds the liveness fence (the agent host, `watch`,
the MCP server, or `memvault admit` for one short drain). On start it recovers whatever a crash
interrupted, then processes every due pending record in order: project to markdown and index
(under the vault lock), then resolve (under the intake lock). A failed attempt backs off
(1 min doubling to 6 h, 16 attempts) and then becomes a dead letter with a bounded category.

Capture mode (BuJo): a record whose raw audit is projected waits as `awaiting_capture`; when
it is due the worker runs the capture step (`indexer/services/capture.py`: model calls, retained
plan, commit), then resolves it with outcome `captured` and retires the plan. A capture failure
backs off like any other (it never counts as success); while replay adoption is pending,
capture is skipped without spending an attempt.

`stop()` drains accepted due work until the spec's 10 s deadline (vault/limits.py), then sets the abort flag that
the active attempt checks between its steps, and returns. An aborted attempt leaves its record
pending (a projection already written is found again by its run-derived id on the next start).
A thread stuck past the deadline keeps the fence until it finishes, so no operator command can
race it while this process lives.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from memvault.indexer.maintenance.replay_index import capture_blocked_reason
from memvault.vault.capture.fields import EmptyExtraction, ModelOutputInvalid
from memvault.vault.capture.plan import retained_plan_ids, retire_plan
from memvault.vault.errors import (
    Conflict,
    IndexUnavailable,
    InvalidRecord,
    ProviderUnavailable,
    UnsafePath,
    VaultError,
    VaultLocked,
)
from memvault.vault.intake.catalog import LedgerIntegrityError
from memvault.vault.intake.files import DEAD, PENDING, CrashHook, IntakeDirs, hit
from memvault.vault.intake.ledger import Ledger
from memvault.vault.intake.projection import project_turn, projected_text
from memvault.vault.intake.record import AWAITING_CAPTURE, CAPTURED, PROJECTED, IntakeRecord
from memvault.vault.intake.resolve_together import discard, prepare_receipts, resolve_projected_together
from memvault.vault.intake.state import (
    intake_lock,
    mark_awaiting_capture,
    read_record,
    record_failure,
    recover,
    resolve_run,
)
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS
from memvault.vault.locks import LivenessFence, VaultLock

POLL_SECONDS = 2.0
_MAX_ROUNDS = 64
#: Journal turns projected in one write per daily note (`_journal_batches`)
_PROJECTION_BATCH = 64
#: projected turns resolved under one hold of the intake lock (a bound: every admission waits for it)
_FINISH_TOGETHER = 8

#: called after every durable transition with (transition, intake id); failures are ignored
TransitionListener = Callable[[str, str], None]


@dataclass(frozen=True)
class ShutdownReport:
    drained: bool  # every due record was handled before the deadline
    aborted: bool  # the deadline passed: the active attempt was told to abort


class _Aborted(Exception):
    pass


def failure_category(exc: BaseException) -> str:
    """The bounded category stored for a failed attempt (never the exception's text)."""
    ordered = (
        (LedgerIntegrityError, "ledger_integrity"),
        (Conflict, "note_conflict"),
        (UnsafePath, "unsafe_path"),
        (VaultLocked, "vault_locked"),
        (IndexUnavailable, "index_unavailable"),
        (ProviderUnavailable, "provider_unavailable"),
        (EmptyExtraction, "empty_extraction"),
        (ModelOutputInvalid, "invalid_model_output"),
        (InvalidRecord, "invalid_note"),
        (OSError, "io_error"),
    )
    for kind, category in ordered:
        if isinstance(exc, kind):
            return category
    return "unexpected"


class IntakeWorker:
    def __init__(
        self,
        store,
        *,
        clock: Callable[[], datetime],
        crash_hook: CrashHook | None = None,
        poll_seconds: float = POLL_SECONDS,
        on_transition: TransitionListener | None = None,
    ):
        self.store = store
        self.dirs = IntakeDirs(store.layout.root)
        self._clock = clock
        self._hook = crash_hook
        self._poll = poll_seconds
        self._listener = on_transition
        self._fence = LivenessFence(store.layout.root)
        self._wake, self._stopping, self._abort = threading.Event(), threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._cache: dict[str, tuple[tuple[int, int, int], IntakeRecord | None]] = {}
        self.transitions: Counter[str] = Counter()
        self.last_error: str | None = None
        self._capture = None  # the CaptureService, created on the first capture-mode record

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Take the liveness fence, recover from any crash, and start the background thread."""
        self._fence.hold()
        try:
            with intake_lock(self.dirs):
                recover(self.dirs, self._clock(), self._hook)
                self._retire_orphan_plans()
        except BaseException:
            self._fence.release()
            raise
        self._thread = threading.Thread(target=self._run, name="memvault-intake", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def notify(self) -> None:
        """Wake the worker now."""
        self._wake.set()

    def admitted(self, intake_id: str) -> None:
        """A turn was just admitted in this process: publish the transition and wake up."""
        self._transition("admitted", intake_id)
        self._wake.set()

    def stop(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> ShutdownReport:
        """Drain due work for up to `timeout` seconds, then abort the active attempt and return."""
        if self._thread is None:
            return ShutdownReport(drained=True, aborted=False)
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._abort.set()
            return ShutdownReport(drained=False, aborted=True)
        return ShutdownReport(drained=True, aborted=False)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for an aborted thread to finish; True once it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def _run(self) -> None:
        try:
            while True:
                self._wake.clear()
                self.process_due()
                if self._stopping.is_set() or self._abort.is_set():
                    return
                self._wake.wait(self._poll)
        finally:
            self._fence.release()

    # --- processing ---------------------------------------------------------------------------

    def process_due(self) -> int:
        """Process every due pending record (oldest due first); returns how many were attempted."""
        attempted = 0
        self.dirs = IntakeDirs(self.store.layout.root)  # its folders checked afresh each round
        for _ in range(_MAX_ROUNDS):
            due = self._due_ids()
            if not due:
                break
            for batch in self._journal_batches(due):
                if self._abort.is_set():
                    return attempted
                first = batch[0][1]
                if first is not None and self._projects_as_journal(first):  # one turn or many
                    self._project_journal_batch(batch)
                else:
                    self._process(batch[0][0])
                attempted += len(batch)
        return attempted

    def _journal_batches(self, due: list[str]):
        """The due ids in order, each with its record: consecutive Journal projections grouped (up
        to `_PROJECTION_BATCH`), so many agents' turns cost one write per daily note, not one each."""
        batch: list[tuple[str, IntakeRecord]] = []
        for intake_id in due:
            record = self._cached(intake_id)
            journal = record is not None and self._projects_as_journal(record)
            if batch and (not journal or len(batch) >= _PROJECTION_BATCH):
                yield batch
                batch = []
            if journal:
                batch.append((intake_id, record))
            else:
                yield [(intake_id, record)]
        if batch:
            yield batch

    def _projects_as_journal(self, record: IntakeRecord) -> bool:
        return record.tier == "journal" and record.state != AWAITING_CAPTURE and record.is_due(self._clock())

    def _project_journal_batch(self, batch: list[tuple[str, IntakeRecord]]) -> None:
        """Project Journal turns together (`MemoryStore.project_journal_turns`), then finish or fail
        each on its own, as `_process` does for one. A crash in between is safe as for one: the
        turns stay pending, and projecting them again finds their bullets (content identity)."""
        records = [record for _, record in batch]
        try:
            self._check_abort()
            projections = self.store.project_journal_turns(
                [(projected_text(record.payload.summary), record.completed_at) for record in records],
                checkpoint=self._check_abort)  # fmt: skip
        except _Aborted:
            self.transitions["aborted"] += len(records)
            return
        except Exception as exc:  # the whole batch failed (the lock, the index): each attempt is recorded
            projections = [exc] * len(records)
        projected = []
        for record, projection in zip(records, projections, strict=True):
            if self._abort.is_set():
                self.transitions["aborted"] += 1
            elif isinstance(projection, Exception):
                self._fail(record, projection)
            else:
                try:
                    hit(self._hook, "project.note_written")
                    hit(self._hook, "project.indexed")
                except Exception as exc:  # as in `_process`: recorded, never fatal to the worker
                    self._fail(record, exc)
                    continue
                projected.append((record, projection.source))
        for start in range(0, len(projected), _FINISH_TOGETHER):
            self._finish_together(projected[start : start + _FINISH_TOGETHER])

    def _finish_together(self, projected: list[tuple[IntakeRecord, str]]) -> None:
        """`_finish` for the turns of one batch, their durable steps shared and the intake lock
        held for the ledger alone (vault/intake/resolve_together.py); a turn that fails fails alone."""
        if self._abort.is_set():
            self.transitions["aborted"] += len(projected)
            return
        plain = [(record, source) for record, source in projected if record.payload.write_mode != "capture"]
        for record, source in projected:
            if record.payload.write_mode == "capture":  # on to capture, not resolved here
                try:
                    self._finish(record, source)
                except Exception as exc:  # as in `_process`: recorded, never fatal to the worker
                    self._fail(record, exc)
        now, prepared = self._clock(), {}
        try:
            prepared = prepare_receipts(self.dirs, plain, now)  # files made and fsynced before the lock
            hit(self._hook, "resolve.receipts_prepared")
            outcomes = resolve_projected_together(self.dirs, [(r.id, source) for r, source in plain],
                                                  now=now, hook=self._hook, prepared=prepared)  # fmt: skip
        except Exception as exc:  # the lock, the ledger, a full disk: each turn's attempt is recorded
            outcomes = [exc] * len(plain)
        finally:
            discard(prepared)
        for (record, _), outcome in zip(plain, outcomes, strict=True):
            if isinstance(outcome, Exception):
                self._fail(record, outcome)
            else:
                self._transition("resolved", record.id)

    def _due_ids(self) -> list[str]:
        now = self._clock()
        due = []
        capture_blocked = self._capture_blocked()
        for intake_id in self.dirs.list_folder(PENDING).ids:
            record = self._cached(intake_id)
            if record is not None and record.state == AWAITING_CAPTURE and capture_blocked:
                self.last_error = f"capture paused: {capture_blocked}"  # an operator step; no attempt spent
                continue
            if record is not None and record.is_due(now):
                due.append((record.due_at(), record.admitted_at, intake_id))
        return [intake_id for *_, intake_id in sorted(due)]

    def _cached(self, intake_id: str) -> IntakeRecord | None:
        """A pending record, re-read only when its file changed; None if it fails closed."""
        path = self.dirs.record_path(PENDING, intake_id)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            self._cache.pop(intake_id, None)
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._cache.get(intake_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            record: IntakeRecord | None = read_record(self.dirs, PENDING, intake_id)
        except (VaultError, OSError) as exc:
            record = None
            self.transitions["invalid"] += 1
            self.last_error = f"{intake_id[:16]}…: {exc}"
        self._cache[intake_id] = (key, record)
        return record

    def _check_abort(self) -> None:
        if self._abort.is_set():
            raise _Aborted()

    def _process(self, intake_id: str) -> None:
        record = self._cached(intake_id)
        if record is None or not record.is_due(self._clock()):
            return
        if record.state == AWAITING_CAPTURE:
            self._capture_step(record)
            return
        try:
            self._check_abort()
            with VaultLock(self.dirs.root):  # the store's write lock: note + index in one section
                self._check_abort()
                if record.tier == "journal":  # content identity: the store checks the index
                    projection = self.store.project_journal_turn(
                        projected_text(record.payload.summary), record.completed_at
                    )
                    hit(self._hook, "project.note_written")
                else:
                    projection = project_turn(self.store.layout, record, self.store.time_zone, self._hook)
                    self.store.index_notes([projection.relpath])
            hit(self._hook, "project.indexed")
            self._check_abort()
            self._finish(record, projection.source)
        except _Aborted:
            self.transitions["aborted"] += 1
        except Exception as exc:  # any failure of one attempt is recorded, never fatal to the worker
            if self._abort.is_set():
                self.transitions["aborted"] += 1
                return
            self._fail(record, exc)

    def _finish(self, record: IntakeRecord, source: str) -> None:
        with intake_lock(self.dirs):
            resolved = self._finish_locked(record, source)
        if resolved:
            self._transition("resolved", record.id)

    def _finish_locked(self, record: IntakeRecord, source: str) -> bool:
        """Resolve a projected turn (True), or hand a capture-mode one on to capture (False).
        Caller holds the intake lock."""
        now = self._clock()
        if record.payload.write_mode == "capture":
            if mark_awaiting_capture(self.dirs, record.id, record.revision, source, now) is not None:
                self._transition("awaiting_capture", record.id)
            return False
        ledger = Ledger(self.dirs, create=True, hook=self._hook)
        resolve_run(self.dirs, ledger, record.id, outcome=PROJECTED, projection=source, now=now, hook=self._hook)
        return True

    def _fail(self, record: IntakeRecord, exc: BaseException) -> None:
        category = failure_category(exc)
        self.last_error = f"{record.id[:16]}…: {category}: {exc}"
        try:
            with intake_lock(self.dirs):
                updated = record_failure(self.dirs, record.id, record.revision, category, self._clock(), self._hook)
        except (VaultError, OSError) as nested:
            self.last_error += f" (and recording the failure failed: {nested})"
            return
        if updated is not None:
            self._transition("dead" if updated.state == "dead" else "retry_scheduled", record.id)

    # --- capture (BuJo, capture mode) -------------------------------------------------------------

    def capture_service(self):
        if self._capture is None:
            from memvault.indexer.services.capture import CaptureService

            self._capture = CaptureService(self.store)
        return self._capture

    def _capture_blocked(self) -> str | None:
        return capture_blocked_reason(self.store.layout)

    def _capture_step(self, record: IntakeRecord) -> None:
        """Capture one run (model calls or its retained plan, then commit), resolve it, retire the plan."""
        from memvault.indexer.services.capture import CaptureDeferred

        try:
            self._check_abort()
            self.capture_service().capture_record(
                record, now=self._clock(), hook=self._hook, checkpoint=self._check_abort
            )
            self._resolve_captured(record)
        except _Aborted:
            self.transitions["aborted"] += 1
        except CaptureDeferred as exc:  # an operator step is pending: no attempt is spent
            self.transitions["capture_deferred"] += 1
            self.last_error = f"{record.id[:16]}…: {exc}"
        except Exception as exc:  # never counts as captured: back off and retry, warn the host
            if self._abort.is_set():
                self.transitions["aborted"] += 1
                return
            self.capture_service().warn(record.id, failure_category(exc))
            self._fail(record, exc)

    def _resolve_captured(self, record: IntakeRecord) -> None:
        with intake_lock(self.dirs):
            ledger = Ledger(self.dirs, create=True, hook=self._hook)
            resolve_run(self.dirs, ledger, record.id, outcome=CAPTURED, projection=record.projection,
                        now=self._clock(), hook=self._hook)  # fmt: skip
            retire_plan(self.dirs.root, record.id)
        hit(self._hook, "capture.plan_retired")
        self._transition("captured", record.id)

    def _retire_orphan_plans(self) -> None:
        """Plans of runs that are no longer active (resolved just before a crash). Intake lock held."""
        active = set(self.dirs.list_folder(PENDING).ids) | set(self.dirs.list_folder(DEAD).ids)
        for intake_id in retained_plan_ids(self.dirs.root):
            if intake_id not in active:
                retire_plan(self.dirs.root, intake_id)

    def _transition(self, name: str, intake_id: str) -> None:
        self.transitions[name] += 1
        if self._listener is not None:
            try:
                self._listener(name, intake_id)
            except Exception:  # a notification failure never rolls back a durable transition
                self.transitions["notify_failed"] += 1

    def snapshot(self) -> dict:
        return {
            "running": self.running,
            "stopping": self._stopping.is_set(),
            "aborted": self._abort.is_set(),
            "transitions": dict(sorted(self.transitions.items())),
            "lastError": self.last_error,
            "captureWarnings": [] if self._capture is None else list(self._capture.warnings),
        }
