"""The vault's owner drains what agents on other machines sent: completed turns and facts.

    claim a batch of waiting turns (FOR UPDATE SKIP LOCKED) ─▶ project them into the files, one
    write per note (`project.py`) ─▶ mark the batch projected in one statement ─▶ commit

A SIGKILL anywhere leaves the claim uncommitted: the turns wait on the server again, and the
next round finds each one already in its note (run-derived or content id) and writes nothing,
so every turn is in the files exactly once. A turn the batch cannot take goes into the owner's
durable intake instead (same run id), whose worker projects or dead-letters it. Facts
remembered remotely are written into their daily notes by the same batch writer (idempotent by
content), then marked projected; the server forgets them only once the vault's rows hold them,
so a sync or a rebuild never loses one meanwhile.

An idle owner does not poll: it raises its doorbell flag on the server, looks once more, and
waits on the vault's LISTEN channel; a client whose write met the raised flag rings it
(backend/postgres/team.py). A ring lost in the race between the flag and the client's statement
costs at most IDLE_LOOK_SECONDS.

Crash boundaries (tests/team_crash_driver.py): team.turn.claimed, team.turns.written (notes
durable, server not yet marked), team.turn.admitted (a turn handed to the local intake),
team.turns.marked, team.fact.written, team.facts.marked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from memvault.indexer.backend import open_team_server, team_listener
from memvault.indexer.backend.base import IndexServerUnavailable
from memvault.indexer.maintenance.vault_settings import owner_settings
from memvault.indexer.team.fence import ServerFence
from memvault.indexer.team.project import project_batch
from memvault.vault.errors import VaultError
from memvault.vault.intake.files import hit
from memvault.vault.intake.record import parse_record
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS

#: turns claimed per transaction (the claim holds their row locks while the notes are written)
CLAIM_BATCH = 256
#: an idle owner looks at the server this often even without a ring
IDLE_LOOK_SECONDS = 1.0
#: how long one wait on the channel lasts before the drainer checks whether it should stop
_WAIT_SLICE_SECONDS = 0.25
#: how often the drainer checks that it still holds the server fence
FENCE_CHECK_SECONDS = 1.0


class TeamDrainer:
    def __init__(
        self,
        store,
        server_of,
        *,
        hook=None,
        log: Callable[[str], None] | None = None,
        idle_seconds: float = IDLE_LOOK_SECONDS,
        fence=None,
        listener=None,
    ):
        self.store = store
        self._fence = fence  # the TeamSide: nothing is claimed without the server fence
        self._server_of = server_of if callable(server_of) else (lambda: server_of)
        self._listener = listener  # a TeamListener (None: look every idle_seconds)
        self._hook = hook
        self._log = log or (lambda _message: None)
        self._idle = idle_seconds
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
                if not self.drain_once():
                    self._sleep()
                self.problem = None
            except (VaultError, OSError) as exc:  # the server away: turns wait there; try again
                if str(exc) != self.problem:
                    self._log(f"team drain: {exc}")
                self.problem = str(exc)
                self._stop.wait(self._idle)

    def _sleep(self) -> None:
        """Commit what the batches wrote to the index (not waiting for the owner's commit timer:
        agents elsewhere search the server's rows), raise the doorbell flag, look once more (a
        write may have met the lowered flag), then wait for a ring, at most `idle_seconds`;
        lower the flag once woken."""
        self.store._commit_acknowledged()  # idle now: what the batches wrote reaches the rows other machines read
        if self._fence is not None:
            self._fence.refresh_settings()
        if self._listener is None:
            self._stop.wait(self._idle)
            return
        self._listener.listen()  # listening before the flag is up: no ring after it is missed
        self.server.set_sleeping(True)
        try:
            if self.drain_once():
                return
            deadline = time.monotonic() + self._idle
            while not self._stop.is_set() and time.monotonic() < deadline:
                if self._listener.wait(min(_WAIT_SLICE_SECONDS, max(0.0, deadline - time.monotonic()))):
                    return
        finally:
            self.server.set_sleeping(False)

    @property
    def server(self):
        return self._server_of()

    def drain_once(self) -> int:
        """One round: a batch of turns and the waiting facts; how many were projected."""
        turns = self.server.claim_turns(CLAIM_BATCH, self._project)
        if turns:
            hit(self._hook, "team.turns.marked")
        return turns + self._drain_facts()

    def _project(self, rows: list[tuple[str, bytes]]) -> tuple[list[str], dict[str, str]]:
        """(the run hashes now in the files, {run hash: why} of records this owner cannot read)."""
        records, unreadable = [], {}
        for run_hash, data in rows:
            hit(self._hook, "team.turn.claimed")
            try:
                records.append(parse_record(data, run_hash, f"team turn {run_hash[:12]}…"))
            except VaultError as exc:  # set aside on the server, so that it holds up no batch
                # the record parser's fix speaks of a file; this record is a row on the server
                unreadable[run_hash] = reason = str(exc).split(". Fix:", 1)[0]
                self._log(f"team drain: {reason}. This owner cannot read it (SQL written by hand, or a newer "
                          "memvault's record): set aside on the index server until the owner's next start, "
                          "unprojected (`memvault --remote NAME inspect` counts it as refused)")  # fmt: skip
        done = project_batch(self.store, records, hook=self._hook, log=self._log) if records else []
        return done, unreadable

    def _drain_facts(self) -> int:
        waiting = self.server.waiting_facts()
        if not waiting:
            return 0
        fresh = [(digest, fact, at) for digest, _id, fact, at, _relpath, projected in waiting if not projected]
        written, held = [], []
        if fresh:
            results = self.store.remember_together([(fact, at) for _, fact, at in fresh])
            for (digest, _, _), result in zip(fresh, results, strict=True):
                if isinstance(result, VaultError):  # a note that refuses it: tried again next round
                    self._log(f"team drain: fact {digest[:12]}… not written yet: {result}")
                else:
                    written.append(digest)
            if written:
                hit(self._hook, "team.fact.written")
        for digest, _id, _fact, _at, _relpath, projected in waiting:
            if projected and self._in_rows(digest):
                held.append(digest)
        if written or held:
            self.server.mark_facts(written, forget=held)
            hit(self._hook, "team.facts.marked")
        return len(written)

    def _in_rows(self, digest: str) -> bool:
        """Whether the vault's committed rows hold this fact (the owner commits on its timer)."""
        if self.store._deferred.receipt(digest) is not None:
            return False
        return self.store.serving_index().bm25.find_by_content_hash(digest) is not None


class TeamSide:
    """What an owner of a server-indexed vault adds: the server fence, its registration, the drainer."""

    def __init__(self, store, *, log=None, hook=None):
        index = store.config.index
        self.fence = ServerFence(index.owner_dsn, index.name)  # a session of its own: past any pooler
        self.server = None
        self.drainer: TeamDrainer | None = None
        self.listener = None
        self.settings: dict | None = None  # as registered on the server
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
                server = open_team_server(index.dsn, index.name, create=True, index=index)
                settings = owner_settings(self._store.config, self._store.layout.root)
                server.register_owner(self.fence.host, self.fence.pid, settings)
                self.settings = settings
            except BaseException:
                self.fence.release()
                raise
            self.server = server

    def start_draining(self) -> None:
        index = self._store.config.index
        self.listener = team_listener(index.owner_dsn, index.name)  # LISTEN: a session of its own
        self.drainer = TeamDrainer(self._store, lambda: self.server, hook=self._hook, log=self._log, fence=self,
                                   listener=self.listener)  # fmt: skip
        self.drainer.start()

    def refresh_settings(self) -> None:
        """Register the settings again when they changed (a person made `daily/2027/`)."""
        settings = owner_settings(self._store.config, self._store.layout.root)
        if self.server is not None and settings != self.settings:
            self.server.update_settings(settings)
            self.settings = settings

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
        if self.listener is not None:
            self.listener.close()
        if self.server is not None:
            self.server.close()
        self.fence.release()


def team_side_for(store, *, log=None, hook=None) -> TeamSide | None:
    """A TeamSide when the vault's index lives on a server that holds many vaults, else None."""
    index = getattr(store.config, "index", None)
    if index is None or not index.on_server:
        return None
    return TeamSide(store, log=log, hook=hook)
