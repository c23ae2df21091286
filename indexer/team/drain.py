"""The vault's owner drains what agents on other machines sent: completed turns and facts.

    claim waiting turns (FOR UPDATE SKIP LOCKED) ─▶ admit each into the local durable intake
    (same run id: a duplicate when already held) ─▶ mark them projected ─▶ commit   (one transaction)

A SIGKILL anywhere leaves the claim uncommitted: the turns wait on the server again, and the
next owner's local admission answers each one it already holds as a duplicate, so every turn is
in the files exactly once (the intake worker projects it, as any local turn). Facts remembered
remotely are written into their daily note by the same `remember` a local call makes (idempotent
by content), then marked projected; the server forgets them only once the vault's rows hold
them, so a sync or a rebuild never loses one meanwhile.

Crash boundaries (tests/team_crash_driver.py): team.turn.claimed, team.turn.admitted (local
intake durable, server not yet marked), team.turns.marked, team.fact.written, team.facts.marked.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from memvault.indexer.backend import open_team_server
from memvault.indexer.backend.base import IndexServerUnavailable
from memvault.indexer.team.fence import ServerFence
from memvault.vault.errors import VaultError
from memvault.vault.intake.admission import admit_record
from memvault.vault.intake.files import IntakeDirs, hit
from memvault.vault.intake.record import parse_record
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS

#: turns claimed per transaction (one fsync each locally; the claim holds their row locks)
CLAIM_BATCH = 64
#: how often an idle owner asks the server for new work
POLL_SECONDS = 0.1
#: how often the drainer checks that it still holds the server fence
FENCE_CHECK_SECONDS = 1.0


def owner_settings(config) -> dict:
    """What clients admit and remember with: the owner's write mode, tier and time zone."""
    memory = config.memory
    return {"writeMode": memory.write_mode, "tier": memory.mode, "timeZone": memory.time_zone}


class TeamDrainer:
    def __init__(self, store, server_of, *, hook=None, log: Callable[[str], None] | None = None,
                 poll_seconds: float = POLL_SECONDS, fence=None):
        self.store = store
        self._fence = fence  # the TeamSide: nothing is claimed without the server fence
        self._server_of = server_of if callable(server_of) else (lambda: server_of)
        self._hook = hook
        self._log = log or (lambda _message: None)
        self._poll = poll_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.problem: str | None = None  # why the last round failed (health), None once one worked

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memvault-team-drain", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        last_fence_check = 0.0
        while not self._stop.is_set():
            try:
                due = time.monotonic() - last_fence_check >= FENCE_CHECK_SECONDS
                if self._fence is not None and (due or self.server is None):
                    last_fence_check = time.monotonic()
                    if not self._fence.reassert():
                        self._stop.wait(FENCE_CHECK_SECONDS)
                        continue
                busy = self.drain_once()
                self.problem = None
            except (VaultError, OSError) as exc:  # the server away: turns wait there; try again
                if str(exc) != self.problem:
                    self._log(f"team drain: {exc}")
                self.problem = str(exc)
                busy = 0
            if not busy:
                self._stop.wait(self._poll)

    @property
    def server(self):
        return self._server_of()

    def drain_once(self) -> int:
        """One round: claimed turns and written facts, how many."""
        turns = self.server.claim_turns(CLAIM_BATCH, self._admit_locally)
        if turns:
            hit(self._hook, "team.turns.marked")
        return turns + self._drain_facts()

    def _admit_locally(self, run_hash: str, data: bytes) -> bool:
        hit(self._hook, "team.turn.claimed")
        try:
            record = parse_record(data, run_hash, f"team turn {run_hash}")
        except VaultError as exc:  # never projected: health shows it waiting, with the reason logged
            self._log(f"team drain: {exc}")
            return False
        record = dataclasses.replace(record, admitted_at=self.store._clock())  # due now, on this machine's clock
        result = admit_record(IntakeDirs(self.store.layout.root), record, hook=self._hook)
        if not result.ok:
            self._log(f"team drain: turn {run_hash} not admitted locally: {result.reason}: {result.message}")
            return False
        hit(self._hook, "team.turn.admitted")
        worker = getattr(self.store, "_intake", None)
        if worker is not None and result.status == "admitted":
            worker.admitted(result.id)
        return True

    def _drain_facts(self) -> int:
        waiting = self.server.waiting_facts()
        if not waiting:
            return 0
        written, held = [], []
        for digest, _id, fact, at, _relpath, projected in waiting:
            if not projected:
                self.store.remember(fact, at=at)
                hit(self._hook, "team.fact.written")
                written.append(digest)
            elif self._in_rows(digest):
                held.append(digest)
        if written or held:
            self.server.mark_facts(written, forget=held)
            hit(self._hook, "team.facts.marked")
        return len(written)

    def _in_rows(self, digest: str) -> bool:
        self.store._commit_acknowledged()  # the owner commits on a timer: the rows hold it once committed
        return self.store._readable_index().bm25.find_by_content_hash(digest) is not None


class TeamSide:
    """What an owner of a server-indexed vault adds: the server fence, its registration, the drainer."""

    def __init__(self, store, *, log=None, hook=None):
        index = store.config.index
        self.fence = ServerFence(index.dsn, index.name)
        self.server = None
        self.drainer: TeamDrainer | None = None
        self._store, self._log, self._hook = store, log, hook

    def hold(self) -> None:
        """Take the server fence and register: VaultLocked naming the first owner when another
        holds it. A server that cannot be reached does not stop the owner (its files are the
        truth): the fence is taken, and draining starts, once the server answers."""
        try:
            self._take()
        except IndexServerUnavailable as exc:
            self._note(f"the index server is away, so this owner drains agents' turns once it returns: {exc}")

    def _take(self) -> None:
        if not self.fence.held():
            self.fence.hold()
        if self.server is None:
            index = self._store.config.index
            try:
                server = open_team_server(index.dsn, index.name, create=True)
                server.register_owner(self.fence.host, self.fence.pid, owner_settings(self._store.config))
            except BaseException:
                self.fence.release()
                raise
            self.server = server

    def start_draining(self) -> None:
        self.drainer = TeamDrainer(self._store, lambda: self.server, hook=self._hook, log=self._log, fence=self)
        self.drainer.start()

    def reassert(self) -> bool:
        """Hold the server fence (again, when a server restart ended its session, or for the first
        time, when the server was away at start); False while it cannot (the server away, or
        another owner took the vault meanwhile)."""
        if self.server is not None and self.fence.held():
            return True
        try:
            self._take()
        except VaultError as exc:
            self._note(f"team drain paused: {exc}")
            return False
        return True

    def _note(self, message: str) -> None:
        if self._log is not None:
            self._log(message)

    def stop(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> None:
        if self.drainer is not None:
            self.drainer.stop(timeout)
        if self.server is not None:
            self.server.close()
        self.fence.release()


def team_side_for(store, *, log=None, hook=None) -> TeamSide | None:
    """A TeamSide when the vault's index lives on a server that holds many vaults, else None."""
    index = getattr(store.config, "index", None)
    if index is None or index.backend == "local":
        return None
    return TeamSide(store, log=log, hook=hook)
