"""The thin client of a resident connection (indexer/engine/resident.py): what a `memvault --remote
NAME` command uses when `memvault --remote NAME serve` runs on this machine. Standard library only
(plus the owner's thin client, its protocol and vault/), so such a command never imports psycopg,
numpy or the embedder.

`find_resident(name, env)` tells the cases apart, as `find_owner` does for a vault's owner:

* no socket, or nobody listening on it (a killed resident's leftover, which the next `serve`
  replaces): None. The caller works in its own process, as without a resident.
* a resident of this vault answers `hello`: an `EngineClient` for it.
* anything else (it does not answer, it speaks another protocol, the socket folder is not this
  user's own): `ResidentUnusable`, saying why and the fix. A resident writes nothing a process
  of its own would not, so the caller says so and works in its own process: nothing waits on it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from memvault.indexer.engine import protocol
from memvault.indexer.engine.address import ensure_socket_dir, private_socket_dir, resident_paths, socket_dir
from memvault.indexer.engine.client import EngineClient
from memvault.indexer.engine.client import _exchange as exchange_once
from memvault.indexer.engine.protocol import EngineStuck, ProtocolError
from memvault.indexer.engine.remote import JournalPageView, recall_result_from_json
from memvault.indexer.results import RecallResult, RememberReceipt
from memvault.vault.clock import aware_instant
from memvault.vault.errors import UnsafePath, VaultError

#: the `role` a resident connection's hello names
RESIDENT_ROLE = "remote"
#: a resident answers hello from a thread of its own at once; one that does not is not waited for
PROBE_TIMEOUT_SECONDS = 5.0
#: the longest one request may take (a strict health, a journal page over a large range)
REQUEST_TIMEOUT_SECONDS = 120.0
#: what `_ask` answers once the call is this process's own
_HERE = object()
#: a resident started on demand stops after this long without a command
ON_DEMAND_IDLE_SECONDS = 900
#: a start on demand is not tried again within this long (one that fails is not retried at every call)
ON_DEMAND_RETRY_SECONDS = 30.0
#: its log is started afresh past this size
_LOG_BYTES = 1 << 20

Warn = Callable[[str], None]


class ResidentUnusable(VaultError):
    """Something listens where this vault's resident connection would, and cannot be used."""

    code = "resident_unusable"


def find_resident(name: str, env: Mapping[str, str], *, timeout: float = PROBE_TIMEOUT_SECONDS) -> EngineClient | None:
    """The resident connection for vault `name` reached with `env`'s settings, or None (see the module docstring)."""
    try:
        path = resident_paths(name, env).socket
    except UnsafePath:  # a socket folder too deep for a socket: no resident can listen there either
        return None
    try:
        info = os.lstat(path)
    except OSError:
        return None
    stop = f"`memvault --remote {name} engine stop --force`"
    if not private_socket_dir() or info.st_uid != os.getuid():
        raise ResidentUnusable(f"{path} is not in a folder only this user owns and can reach: not used. Fix: "
                               f"remove {socket_dir()} (memvault makes its own, 0700)")  # fmt: skip
    try:
        hello = exchange_once(path, protocol.request("hello"), timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        return None
    except (TimeoutError, BrokenPipeError, ConnectionResetError):
        raise ResidentUnusable(f"the resident connection on {path} does not answer: it is stuck. Fix: {stop}") from None
    except ProtocolError as exc:
        raise ResidentUnusable(f"the resident connection on {path} cannot be used ({exc}). Fix: {stop}, then "
                               f"`memvault --remote {name} serve` with this memvault") from None  # fmt: skip
    if not hello.get("ok") and (hello.get("error") or {}).get("code") == EngineStuck.code:
        return None  # it is stopping
    result = hello.get("result") if hello.get("ok") else None
    if not isinstance(result, dict) or result.get("role") != RESIDENT_ROLE or result.get("vault") != name:
        raise ResidentUnusable(f"what answers on {path} is not vault {name!r}'s resident connection. Fix: {stop}")
    return EngineClient(path, result)


def start_in_background(name: str, env: Mapping[str, str], *, idle_seconds: int = ON_DEMAND_IDLE_SECONDS) -> bool:
    """Start `memvault --remote NAME serve --idle-exit SECONDS` in a session of its own, with `env`,
    its output appended to `remote-<hash>.log` (0600), unless a start began there within
    `ON_DEMAND_RETRY_SECONDS`; whether one was started. It does not wait for it: the caller answers
    its own call, the next ones find the resident (or, if it could not start, its log says why)."""
    try:
        paths = resident_paths(name, env)
        ensure_socket_dir()
        if time.time() - os.stat(paths.log).st_mtime < ON_DEMAND_RETRY_SECONDS:
            return False
    except FileNotFoundError:
        pass
    except (OSError, VaultError):
        return False
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
    try:
        log = os.open(paths.log, flags | (os.O_TRUNC if _large(paths.log) else 0), 0o600)
    except OSError:
        return False
    try:
        when = datetime.now(UTC).isoformat(timespec="seconds")
        os.write(log, f"{when} started on demand by pid {os.getpid()}\n".encode())
        command = [sys.executable, "-m", "memvault", "--remote", name, "serve", "--idle-exit", str(idle_seconds)]
        streams = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0), (os.POSIX_SPAWN_DUP2, log, 1),
                   (os.POSIX_SPAWN_DUP2, log, 2)]  # fmt: skip
        os.posix_spawn(sys.executable, command, dict(env), file_actions=streams, setsid=True)  # its own session
    except OSError:
        return False
    finally:
        os.close(log)
    return True


def _large(path) -> bool:
    try:
        return os.stat(path).st_size > _LOG_BYTES
    except OSError:
        return False


class ResidentStore:
    """What a `--remote NAME` command calls on a ConnectedStore (recall/search, remember, journal,
    time_zone, health_report), answered by the resident connection, with the same results and
    the same error classes. A call the resident cannot finish (it died or stopped answering
    mid-call) runs again in this process, on `fallback()` (a ConnectedStore), and `warn` says so:
    each of these calls is a read, or idempotent (a remember answers `duplicate` if it had landed)."""

    def __init__(self, name: str, client: EngineClient, fallback: Callable[[], object], warn: Warn | None = None):
        self.name = name
        self.client = client
        self._fallback = fallback
        self._warn = warn or (lambda _message: None)
        self._here = None  # the ConnectedStore, once this process answers itself

    def close(self) -> None:
        self.client.close()
        if self._here is not None:
            self._here.close()

    def __enter__(self) -> ResidentStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _ask(self, op: str, args: dict | None = None):
        """The resident's answer, or `_HERE` once the call must run in this process."""
        if self._here is None:
            try:
                return self.client.call(op, args, timeout=REQUEST_TIMEOUT_SECONDS)
            except EngineStuck as exc:
                self._warn(f"the resident connection failed ({exc}); answering in this process")
                self.client.close()
                self._here = self._fallback()
        return _HERE

    # --- reads ----------------------------------------------------------------------------------

    def recall(self, query: str, limit: int = 10, mode: str = "tool") -> RecallResult:
        body = self._ask("recall", {"query": query, "limit": limit, "mode": mode})
        return self._here.recall(query, limit=limit, mode=mode) if body is _HERE else recall_result_from_json(body)

    def search(self, query: str, limit: int = 10, mode: str = "tool") -> RecallResult:
        return self.recall(query, limit=limit, mode=mode)

    @property
    def time_zone(self) -> str:
        body = self._ask("time_zone")
        return self._here.time_zone if body is _HERE else body["timeZone"]

    def journal(self, *, from_date=None, through_date=None, time_zone=None, limit=None, cursor=None):
        return self.journal_service().query({"fromDate": from_date, "throughDate": through_date,
                                             "timeZone": time_zone, "limit": limit, "cursor": cursor})  # fmt: skip

    def journal_service(self, *, persistent: bool = False) -> ResidentJournal:
        return ResidentJournal(self, persistent)

    def health_report(self, *, strict: bool = False) -> dict:
        body = self._ask("health", {"strict": strict})
        return self._here.health_report(strict=strict) if body is _HERE else body

    # --- writes ---------------------------------------------------------------------------------

    def remember(self, text: str, at=None) -> RememberReceipt:
        body = self._ask("remember", {"text": text, "at": None if at is None else aware_instant(at).isoformat()})
        return self._here.remember(text, at=at) if body is _HERE else RememberReceipt(**body)

    def remember_many(self, items, *, progress=None, total: int | None = None) -> list:
        """One remember each, as a ConnectedStore does (one statement each there)."""
        from memvault.indexer.engine.bulk import BulkOutcome, as_item  # bulk remember only

        outcomes = []
        for position, value in enumerate(items):
            try:
                item = as_item(value)
                outcomes.append(BulkOutcome(position, self.remember(item.text, at=item.at)))
            except VaultError as exc:
                outcomes.append(BulkOutcome(position, None, exc))
            if progress is not None:
                progress(len(outcomes), total if total is not None else len(outcomes))
        return outcomes


class ResidentJournal:
    """The journal service's `query` through the resident (its snapshots live in this user's cursor
    folder, as a process of its own keeps them: a cursor works in either)."""

    def __init__(self, store: ResidentStore, persistent: bool):
        self._store = store
        self._persistent = persistent
        self.snapshots = _Kept(persistent)

    def query(self, arguments: Mapping[str, object]):
        store = self._store
        body = store._ask("journal", {"arguments": dict(arguments), "persistent": self._persistent})
        if body is _HERE:
            service = store._here.journal_service(persistent=self._persistent)
            page = service.query(arguments)
            self.snapshots = service.snapshots
            return page
        self.snapshots = _Kept(bool(body.get("kept")))
        return JournalPageView(body["page"])


class _Kept:
    def __init__(self, persistent: bool):
        self.persistent = persistent
