"""The vault's owner: the one process that does the owner's work and serves everyone else.

    would-be owner ──probe socket──▶ answered?  yes: EngineRunning (be a client instead)
                                     no: hold the liveness fence, bind the socket, write
                                         .locks/engine.json, start the intake worker and the guard

Whichever command hosts it (`memvault serve`, `watch`, `mcp` when nobody owns the vault, a Python
host calling `MemoryStore.start_intake`), the owner drains the intake, keeps vectors complete
(the semantic service catches up after a queue overflow), and answers requests on the channel
(`indexer/engine/operations.py`). The guard wakes every few seconds and repairs what people's
tools delete: a removed fence file is re-created and locked again, a removed socket is bound
again, and each repair is reported through `log`.

Extra faces (the web pages) run in the owner process through `add_face`: a callable that gets
the owner and a stop event, run on its own thread, and joined on stop.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime

from memvault.indexer.engine import protocol
from memvault.indexer.engine.address import socket_path, status_path
from memvault.indexer.engine.channel import ChannelServer
from memvault.indexer.engine.client import find_owner
from memvault.indexer.engine.operations import ADMIT_WAIT_SECONDS, CONCURRENT, OPERATIONS, UNLOCKED, package_version
from memvault.indexer.engine.protocol import EngineRunning
from memvault.indexer.team.drain import team_side_for
from memvault.vault.errors import StorageError, VaultError
from memvault.vault.fsio import atomic_write
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS
from memvault.vault.locks import LivenessFence
from memvault.vault.storage_errors import storage_error

#: how often the guard looks for a deleted fence or socket (no busier: idle owners stay idle)
GUARD_SECONDS = 5.0
_SETTLED = frozenset({"resolved", "awaiting_capture", "captured", "dead", "retry_scheduled"})

Log = Callable[[str], None]
Face = Callable[["Owner", threading.Event], None]


class Owner:
    def __init__(
        self,
        store,
        *,
        role: str = "serve",
        log: Log | None = None,
        intake: bool = True,
        guard_seconds: float = GUARD_SECONDS,
        crash_hook=None,
        poll_seconds: float = 2.0,
        on_transition: Callable[[str, str], None] | None = None,
        calls_lock=None,
    ):
        self.store = store
        self.role = role  # which command hosts it: serve, watch, mcp, python
        self.root = store.layout.root
        self._log = log or (lambda _message: None)
        self._run_intake = intake
        self._guard_seconds = guard_seconds
        self._crash_hook = crash_hook
        self._poll_seconds = poll_seconds
        self._listener = on_transition
        self.shutdown_report = None  # the intake worker's ShutdownReport, once stopped
        self._fence = LivenessFence(self.root)
        self._channel: ChannelServer | None = None
        # writes and maintenance one at a time (shared with a host that also calls the store); reads
        # (`operations.CONCURRENT`) do not take it: the vault lock guards files, not searches
        self._calls = calls_lock if calls_lock is not None else threading.RLock()
        self._settled = threading.Condition()
        self._last_transition: dict[str, str] = {}
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._faces: list[Face] = []
        self.started_at: str | None = None
        self.stop_requested = threading.Event()  # set by a client's `engine stop`; the host exits on it
        self._ready = threading.Event()  # set once the index is in step with the files
        self.team = None  # indexer/team/drain.py: server fence + drainer, for a vault indexed on a server
        self.repairs: list[str] = []

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> Owner:
        """Become the owner, or raise EngineRunning (someone answers) / VaultLocked (fence held)."""
        running = find_owner(self.root)
        if running is not None and not running.is_this_process:
            raise EngineRunning(
                f"Another live memvault process owns this vault: the engine (pid {running.pid}, "
                f"{running.hello.get('role')}) answers on {running.path}. Fix: use it (memvault commands "
                f"talk to it), or stop it with `memvault engine stop`."
            )
        self._fence.hold()
        try:
            self._hold_team_fence()  # one owner per vault across machines, refused before any work
            self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
            self._write_status()  # before the socket answers: whoever reaches the owner can read it
            self._channel = ChannelServer(socket_path(self.root), self.handle)
            self._channel.start()
            self._bring_index_up_to_date()  # requests that arrive meanwhile wait for it (`handle`)
            self.store.defers_index_commits = True  # commits on the committer's timer, never for a read
            self.group_commit()
            self._ready.set()
            if self._run_intake:
                self.store.start_worker(
                    crash_hook=self._crash_hook, poll_seconds=self._poll_seconds, on_transition=self._transition
                )
            if self.team is not None:
                self.team.start_draining()  # turns and facts agents sent from other machines
            self._spawn(self._guard, "memvault-engine-guard")
        except BaseException:
            self._teardown()
            raise
        return self

    def _bring_index_up_to_date(self) -> None:
        """Index what changed while no owner ran (and build the index of a vault that has none),
        before any request is answered: a host that opened the store without syncing (`serve`,
        `watch`) would otherwise answer "no index yet" while its watcher builds it."""
        try:
            self.store.sync()
        except StorageError as exc:  # a full disk: reads are served from the index as it was
            self.store.unsynced = f"index not brought up to date with the files: {exc}"

    def _hold_team_fence(self) -> None:
        team = team_side_for(self.store, log=self._note, hook=self._crash_hook)
        if team is not None:
            team.hold()
            self.team = team

    def add_face(self, face: Face, name: str = "memvault-face") -> None:
        """Run `face(owner, stop_event)` on its own thread until the owner stops (e.g. web pages)."""
        self._faces.append(face)
        self._spawn(lambda: face(self, self._stopping), name)

    def stop(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> None:
        """Stop serving, drain the intake (bounded), release the fence. Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._teardown(timeout)

    def _teardown(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> None:
        self._stopping.set()
        self._ready.set()  # a request still waiting for the start-up sync goes on (and fails cleanly)
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        for thread in self._threads:
            thread.join(timeout)
        if self._group is not None:
            self._group.close()  # commits what waits
        self.store.defers_index_commits = False
        team, self.team = self.team, None
        if team is not None:
            team.stop(timeout)  # before the worker: nothing is claimed that it would not project
        self.shutdown_report = self.store.stop_worker(timeout)
        if self._fence.intact():
            try:
                status_path(self.root).unlink(missing_ok=True)
            except OSError:
                pass  # a file system gone read-only: the next owner replaces the stale status
        try:
            self._fence.release()
        except (RuntimeError, ValueError, OSError):
            pass  # never held (start failed before the fence)

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    # --- identity and status --------------------------------------------------------------------

    def identity(self) -> dict:
        return {
            "pid": os.getpid(),
            "role": self.role,
            "startedAt": self.started_at,
            "vault": str(self.root),
            "protocol": protocol.PROTOCOL_VERSION,
            "version": package_version(),
            "socket": str(socket_path(self.root)),
            "unanswered": True,
        }

    def _write_status(self) -> None:
        body = self.identity() | {"fenceInode": os.stat(self._fence.path).st_ino}
        atomic_write(status_path(self.root), json.dumps(body, sort_keys=True).encode() + b"\n", mode=0o600)

    # --- the guard -------------------------------------------------------------------------------

    def _guard(self) -> None:
        while not self._stopping.wait(self._guard_seconds):
            self.check_ownership()

    def check_ownership(self) -> None:
        """Re-create a deleted fence (and status file) and re-bind a deleted socket; say so."""
        try:
            if not self._fence.intact():
                self._fence.reassert()
                self._write_status()
                self._note(f"the liveness fence {self._fence.path} was deleted under this owner; re-created it")
            if self._channel is not None and not self._channel.intact():
                path = self._channel.path
                self._channel.close()
                self._channel = ChannelServer(path, self.handle)
                self._channel.start()
                self._write_status()
                self._note(f"the engine socket {path} was deleted; bound it again")
        except (VaultError, OSError) as exc:
            self._note(f"could not repair ownership: {exc}")

    def _note(self, message: str) -> None:
        self.repairs.append(message)
        try:
            self._log(message)
        except Exception:
            pass  # a broken log must not stop the guard

    # --- requests --------------------------------------------------------------------------------

    def handle(self, message: dict) -> dict:
        op = message.get("op")
        args = message.get("args")
        if op not in OPERATIONS:
            return protocol.failure(protocol.ProtocolError(f"the engine has no operation {str(op)[:40]!r}"))
        if not isinstance(args, dict):
            return protocol.failure(protocol.ProtocolError(f"{op}: args must be a JSON object"))
        try:
            if op in UNLOCKED:
                return protocol.success(OPERATIONS[op](self, args))
            self._ready.wait()  # the first requests wait for the start-up sync, not for a missing index
            if op in CONCURRENT:  # reads run beside each other and beside a write in progress
                return protocol.success(OPERATIONS[op](self, args))
            with self._calls:
                return protocol.success(OPERATIONS[op](self, args))
        except Exception as exc:  # every failure travels back; the owner keeps serving
            if isinstance(exc, OSError):  # read-only, full, no permission: typed as in-process
                exc = storage_error(exc, self.root) or exc
            if not isinstance(exc, VaultError):
                self._note("request failed: " + "".join(traceback.format_exception(exc)).strip())
            return protocol.failure(exc)

    # --- intake transitions (so `admit` can answer once its turn is projected) ------------------------

    def _transition(self, name: str, intake_id: str) -> None:
        if self._listener is not None:
            self._listener(name, intake_id)  # the worker counts a failing listener; nothing is lost
        with self._settled:
            self._last_transition[intake_id] = name
            if len(self._last_transition) > 4096:  # bounded: keep only recent ids
                for key in list(self._last_transition)[:2048]:
                    del self._last_transition[key]
            self._settled.notify_all()

    def wait_settled(self, intake_id: str, timeout: float = ADMIT_WAIT_SECONDS) -> str | None:
        """The transition that ended this turn's first attempt, or None if none came in time."""
        deadline = time.monotonic() + timeout
        with self._settled:
            while self._last_transition.get(intake_id) not in _SETTLED:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._settled.wait(remaining)
            return self._last_transition[intake_id]

    _group = None

    def group_commit(self):
        """The owner's group commit for Remember (created on first use)."""
        with self._settled:
            if self._group is None:
                from memvault.indexer.engine.group_commit import GroupCommit

                self._group = GroupCommit(self.store, self._calls, self.store._clock, log=self._note)
            return self._group

    def worker_snapshot(self) -> dict | None:
        worker = getattr(self.store, "_intake", None)
        return None if worker is None else worker.snapshot()
