"""A resident connection: one vault on the index server, kept connected on a machine without its
files, answering the other `memvault --remote NAME` commands as an owner answers a vault's.

    memvault --remote NAME serve ──lock──▶ remote-<hash>.lock held (one per name and settings)
                                 ──probe─▶ nobody answers remote-<hash>.sock
                                 ──connect, warm: the pool, the vault's settings, the embedder
                                 ──status─▶ remote-<hash>.json (pid, start, socket, protocol)
                                 ──bind──▶ remote-<hash>.sock, 0600 in the 0700 socket folder

A `memvault --remote NAME search` process otherwise pays for psycopg, numpy, the recall pipeline,
the embedder and its connection before its one question (docs/team.md, "A remote CLI call");
through a resident it is a thin client, as a local search is of the vault's owner: the same
socket rules (indexer/engine/address.py), the same wire protocol and its version
(indexer/engine/protocol.py), the same channel (indexer/engine/channel.py). A resident holds no
vault and writes nothing but what the connected store writes (the server's rows, the journal's
cursor files), so a client that finds none, a dead one or a stuck one works in its own process.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from memvault.indexer.backend import server_label
from memvault.indexer.engine import protocol
from memvault.indexer.engine.address import ensure_socket_dir, resident_paths
from memvault.indexer.engine.channel import ChannelServer
from memvault.indexer.engine.connected import ConnectedStore
from memvault.indexer.engine.operations import _instant, package_version
from memvault.indexer.engine.protocol import EngineRunning, EngineStuck
from memvault.indexer.engine.resident_client import RESIDENT_ROLE, find_resident
from memvault.vault.config_schema import INDEX_NAME_RE
from memvault.vault.errors import InvalidConfig, InvalidRecord, VaultError
from memvault.vault.fsio import atomic_write

#: how often the guard looks for a deleted socket, and how long the vault's settings are trusted
GUARD_SECONDS = 5.0
#: a resident re-reads the vault's zone and tier this often (its owner may register new ones)
SETTINGS_SECONDS = 30.0
#: how long a stopping resident lets the requests it is answering finish
STOP_WAIT_SECONDS = 10.0

Log = Callable[[str], None]


class ResidentConnection:
    """`start()`, serve until `stop_requested` is set (a client's `stop`, or the host's signal), `stop()`."""

    def __init__(self, name: str, env: Mapping[str, str], *, log: Log | None = None):
        if not isinstance(name, str) or not INDEX_NAME_RE.fullmatch(name):
            raise InvalidConfig(
                f"--remote {str(name)[:60]!r} is not a vault name on the index server (1-40 of a-z, 0-9, _ "
                "and -, starting with a letter or digit)"
            )
        self.name = name
        self.env = dict(env)
        self.paths = resident_paths(name, self.env)
        self.store: ConnectedStore | None = None
        self.started_at: str | None = None
        self.stop_requested = threading.Event()
        self._log = log or (lambda _message: None)
        self._lock_file = None
        self._channel: ChannelServer | None = None
        self._stopping = threading.Event()
        self._guard: threading.Thread | None = None
        self._journal_lock = threading.Lock()  # the journal service's snapshots: one page at a time
        self._settings_read = 0.0
        self._last_request = time.monotonic()
        self._calls = threading.Condition()  # guards _busy: requests being answered now
        self._busy = 0

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> ResidentConnection:
        """Hold the lock, connect and warm up, then answer; EngineRunning when one runs already."""
        ensure_socket_dir()
        self._hold_lock()
        try:
            running = find_resident(self.name, self.env)
            if running is not None:  # an earlier memvault's, which took no lock
                raise EngineRunning(self._running_message(running.pid))
            self.store = ConnectedStore.connect(self.name, env=self.env)  # names the host when unreachable
            self._warm()
            self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
            self._write_status()
            self._channel = ChannelServer(self.paths.socket, self.handle)
            self._channel.start()
            self._guard = threading.Thread(target=self._watch_socket, name="memvault-resident-guard", daemon=True)
            self._guard.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _hold_lock(self) -> None:
        handle = open(self.paths.lock, "a+b")  # noqa: SIM115 - held for the resident's life
        os.chmod(self.paths.lock, 0o600)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise EngineRunning(self._running_message(self._status_pid())) from None
        self._lock_file = handle

    def _running_message(self, pid) -> str:
        return (
            f"a resident connection to vault {self.name!r} with these settings already runs on this machine "
            f"(pid {pid}, socket {self.paths.socket}): `memvault --remote {self.name}` commands use it; "
            f"stop it with `memvault --remote {self.name} engine stop`"
        )

    def _status_pid(self):
        try:
            return json.loads(self.paths.status.read_bytes()[: 64 * 1024]).get("pid")
        except (OSError, ValueError, AttributeError):
            return "unknown"

    def _warm(self) -> None:
        """Connect the pool, read the vault's settings and load the embedder now, so the first
        command answers as fast as the next; a vault not built yet is said, and served anyway."""
        result = self.store.recall("warm up the resident connection", limit=1)
        self._settings_read = time.monotonic()
        if result.degraded:
            self._log(f"vault {self.name!r}: {result.degraded}")

    def stop(self) -> None:
        """Stop answering, close the connection, remove the status and release the lock. Idempotent."""
        self._stopping.set()
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
        with self._calls:  # the answers being made are sent before the store closes under them
            self._calls.wait_for(lambda: not self._busy, STOP_WAIT_SECONDS)
        if self._lock_file is not None and self._status_pid() == os.getpid():
            self.paths.status.unlink(missing_ok=True)  # ours: never another resident's
        store, self.store = self.store, None
        if store is not None:
            store.close()
        handle, self._lock_file = self._lock_file, None
        if handle is not None:
            handle.close()  # the lock goes with it; the file stays (a lock file is never removed)

    def serve_forever(self, idle_seconds: float = 0, poll_seconds: float = 1.0) -> str:
        """Until a stop is requested, or no request came for `idle_seconds` (0: never); which one."""
        while not self.stop_requested.wait(poll_seconds):
            if idle_seconds and time.monotonic() - self._last_request > idle_seconds:
                return f"no command for {idle_seconds:g} s"
        return "asked to stop"

    def _watch_socket(self) -> None:
        """Bind again a socket someone deleted (`rm -rf /tmp/memvault-*`), as the owner's guard does."""
        while not self._stopping.wait(GUARD_SECONDS):
            channel = self._channel
            if channel is None or channel.intact():
                continue
            try:
                channel.close()
                ensure_socket_dir()
                self._channel = ChannelServer(self.paths.socket, self.handle)
                self._channel.start()
                self._write_status()
                self._log(f"the socket {self.paths.socket} was deleted; bound it again")
            except (VaultError, OSError) as exc:
                self._log(f"could not bind the socket again: {exc}")

    # --- identity -------------------------------------------------------------------------------

    def identity(self) -> dict:
        return {
            "pid": os.getpid(),
            "role": RESIDENT_ROLE,
            "startedAt": self.started_at,
            "vault": self.name,
            "server": server_label(self.env.get("MEMVAULT_INDEX_DSN", "")),
            "protocol": protocol.PROTOCOL_VERSION,
            "version": package_version(),
            "socket": str(self.paths.socket),
        }

    def _write_status(self) -> None:
        atomic_write(self.paths.status, json.dumps(self.identity(), sort_keys=True).encode() + b"\n", mode=0o600)

    # --- requests -------------------------------------------------------------------------------

    def handle(self, message: dict) -> dict:
        self._last_request = time.monotonic()
        op, args = message.get("op"), message.get("args")
        if op not in _OPERATIONS:
            unknown = protocol.ProtocolError(f"the resident connection has no operation {str(op)[:40]!r}")
            return protocol.failure(unknown)
        if not isinstance(args, dict):
            return protocol.failure(protocol.ProtocolError(f"{op}: args must be a JSON object"))
        with self._calls:
            store = None if self._stopping.is_set() else self.store
            self._busy += store is not None
        if store is None:  # EngineStuck: the client answers the call itself
            return protocol.failure(EngineStuck("the resident connection is stopping"))
        try:
            self._fresh_settings(store)
            return protocol.success(_OPERATIONS[op](self, store, args))
        except Exception as exc:  # every failure travels back; the resident keeps serving
            if not isinstance(exc, VaultError):
                self._log("request failed: " + "".join(traceback.format_exception(exc)).strip())
            return protocol.failure(exc)
        finally:
            with self._calls:
                self._busy -= 1
                self._calls.notify_all()

    def _fresh_settings(self, store: ConnectedStore) -> None:
        """A process per call reads the vault's zone and tier each time; a resident every 30 s."""
        if time.monotonic() - self._settings_read > SETTINGS_SECONDS:
            store.forget_settings()
            self._settings_read = time.monotonic()


# --- the operations: the owner's names and answer shapes (indexer/engine/operations.py) ----------


def _hello(resident: ResidentConnection, store, args: dict) -> dict:
    return resident.identity()


def _recall(resident, store, args: dict) -> dict:
    result = store.recall(args.get("query"), limit=args.get("limit", 10), mode=args.get("mode", "tool"))
    return result.to_json(explain=True)


def _remember(resident, store, args: dict) -> dict:
    text = args.get("text")
    if not isinstance(text, str):
        raise InvalidRecord("remember: text must be a string")
    return store.remember(text, at=_instant(args.get("at"), "at")).to_json()


def _journal(resident, store, args: dict) -> dict:
    arguments = args.get("arguments")
    if not isinstance(arguments, dict):
        raise InvalidRecord("journal: arguments must be an object")
    with resident._journal_lock:
        service = store.journal_service(persistent=bool(args.get("persistent")))
        return {"page": service.query(arguments).to_json(), "kept": service.snapshots.persistent}


def _time_zone(resident, store, args: dict) -> dict:
    return {"timeZone": store.time_zone}


def _health(resident, store, args: dict) -> dict:
    return store.health_report(strict=bool(args.get("strict")))


def _stop(resident, store, args: dict) -> dict:
    resident.stop_requested.set()
    return {"stopping": True, "pid": os.getpid()}


_OPERATIONS = {
    "hello": _hello,
    "status": _hello,
    "recall": _recall,
    "remember": _remember,
    "journal": _journal,
    "time_zone": _time_zone,
    "health": _health,
    "stop": _stop,
}
