"""`MemoryStore`'s durable intake: admit a completed turn, become the vault's owner, stop.

The logic lives in vault/intake/ (admission, records) and indexer/services/intake_worker.py
(projection); these are the engine's entry points to it, kept beside the store's other parts.
"""

from datetime import datetime

from memvault.indexer.engine.owner import Owner
from memvault.indexer.services.intake_worker import IntakeWorker
from memvault.vault.intake.admission import admit_turn
from memvault.vault.intake.files import IntakeDirs
from memvault.vault.intake.snapshot import runtime_snapshot
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS


class DurableIntake:
    """Mixed into `MemoryStore` (indexer/engine/store.py), which provides `layout`, `config`
    and `_clock`."""

    _intake = None  # the running IntakeWorker, if `start_intake` was called
    _owner = None  # the Owner serving this vault, if `start_intake` made this process its owner
    _intake_hook = None  # test-only crash hook armed by `start_intake(crash_hook=...)`

    def persist_completed_turn(
        self,
        run_id: str,
        answer: str,
        *,
        capture_text: str | None = None,
        trigger: str = "user",
        completed_at: datetime | None = None,
    ):
        """Durably admit one completed turn; returns an AdmissionResult and never raises for
        expected failures (admitted / duplicate / skipped(reason) / failed(category, message)).

        Projection to markdown happens in the intake worker (`start_intake`), or in the next
        process that starts it; the admitted record is the restart boundary.
        """
        result = admit_turn(
            IntakeDirs(self.layout.root),
            run_id=run_id,
            answer=answer,
            capture_text=capture_text,
            trigger=trigger,
            completed_at=completed_at,
            write_mode=self.config.memory.write_mode,
            tier=self.config.memory.mode,
            now=self._clock(),
            hook=self._intake_hook,
        )
        if result.status == "admitted" and self._intake is not None:
            self._intake.admitted(result.id)
        return result

    def start_intake(self, *, crash_hook=None, poll_seconds: float = 2.0, on_transition=None, serve: bool = True):
        """Become the vault's owner: take the liveness fence, recover the intake, project admitted
        turns in the background and (`serve`) answer other memvault processes on the owner channel
        (docs/engine.md). Raises VaultLocked / EngineRunning when another process owns the vault."""
        if self._intake is not None:
            return self._intake
        if not serve:
            return self.start_worker(crash_hook=crash_hook, poll_seconds=poll_seconds, on_transition=on_transition)

        owner = Owner(
            self, role="python", crash_hook=crash_hook, poll_seconds=poll_seconds, on_transition=on_transition
        )
        owner.start()
        self._owner = owner
        return self._intake

    def start_worker(self, *, crash_hook=None, poll_seconds: float = 2.0, on_transition=None):
        """The intake worker alone (the owner calls this): fence, recovery, background projection."""
        if self._intake is not None:
            return self._intake
        self._intake_hook = crash_hook
        worker = IntakeWorker(
            self, clock=self._clock, crash_hook=crash_hook, poll_seconds=poll_seconds, on_transition=on_transition
        )
        worker.start()
        self._intake = worker
        return worker

    def stop(self, timeout: float = SHUTDOWN_DRAIN_SECONDS):
        """Drain accepted intake work for up to `timeout` seconds, then abort and return (a
        ShutdownReport; None if no worker ran). Unfinished records stay pending for the next start.
        An owner started by `start_intake` stops serving and releases the vault."""
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.stop(timeout)
            return owner.shutdown_report
        return self.stop_worker(timeout)

    def stop_worker(self, timeout: float = SHUTDOWN_DRAIN_SECONDS):
        worker, self._intake = self._intake, None
        return None if worker is None else worker.stop(timeout)

    def intake_snapshot(self) -> dict:
        """Content-free intake counts, ledger health and worker state (for inspect and health)."""
        snapshot = runtime_snapshot(IntakeDirs(self.layout.root), self._clock())
        snapshot["worker"] = None if self._intake is None else self._intake.snapshot()
        return snapshot
