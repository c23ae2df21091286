"""MemoryJournal continuation: frozen snapshots and the authenticated cursors that page through them.

A first request freezes its entries in a snapshot; later pages come only from that snapshot,
so edits made meanwhile never shift a page. A cursor names (snapshot, exact offset, one-time
nonce) and carries an HMAC-SHA256 over them under a key only the snapshot holder knows, so a
cursor cannot be forged, edited to another offset or moved to another snapshot. Each cursor is
single-use: serving a page retires its nonce and issues the next cursor, so a replayed cursor is
refused. At most `MAX_SNAPSHOTS` are held (the oldest is evicted) and each expires after
`SNAPSHOT_TTL_SECONDS`.

Two holders:
* `MemorySnapshots`: a random key per process, snapshots in memory. The MCP server and the
  Python API use it; cursors die with the process, as request-private cursors should.
* `FileSnapshots`: for the CLI, where each call is a new process. The key (32 random bytes) and
  the snapshots live owner-only (0700 / 0600) in `.index/journal/`, derived state that may be
  deleted at any time (which only invalidates outstanding cursors).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from memvault.vault.errors import InvalidRecord, UnsafePath
from memvault.vault.fsio import (
    atomic_write,
    check_private_file,
    ensure_private_dir,
    read_bytes_nofollow,
    undone_if_failed,
)
from memvault.vault.locks import VaultLock

MAX_SNAPSHOTS = 4
SNAPSHOT_TTL_SECONDS = 15 * 60
CURSOR_PREFIX = "mj1"
KEY_BYTES = 32
MAX_CURSOR_CHARS = 256
_CURSOR_RE = re.compile(
    rf"{CURSOR_PREFIX}\.(?P<sid>[0-9a-f]{{32}})\.(?P<offset>0|[1-9][0-9]{{0,5}})\.(?P<nonce>[0-9a-f]{{16}})"
    r"\.(?P<mac>[A-Za-z0-9_-]{43})"
)
_SNAPSHOT_NAME_RE = re.compile(r"(?P<sid>[0-9a-f]{32})\.json")
#: a persisted snapshot is at most 2 MiB of entries plus bookkeeping
_MAX_SNAPSHOT_FILE_BYTES = 4 * 1024 * 1024
_KEY_FILE = "cursor.key"
_LOCK_NAME = "journal"


class JournalCursorError(InvalidRecord):
    """A continuation cursor was forged, edited, replayed, or names a snapshot that is gone."""

    code = "invalid_journal_cursor"


@dataclass
class Snapshot:
    id: str
    created: float  # wall-clock seconds
    range: dict  # JournalRange.to_json()
    limit: int
    entries: list[dict]
    coverage: dict
    next_offset: int = 0
    nonce: str = ""  # the outstanding cursor's nonce ("" once the last page was served)


@dataclass(frozen=True)
class CursorClaim:
    snapshot_id: str
    offset: int
    nonce: str


def new_snapshot_id() -> str:
    return secrets.token_hex(16)


def new_nonce() -> str:
    return secrets.token_hex(8)


class CursorCodec:
    """Issues and checks `mj1.<snapshot>.<offset>.<nonce>.<hmac>` tokens."""

    def __init__(self, key: bytes):
        if len(key) != KEY_BYTES:
            raise ValueError(f"a cursor key is {KEY_BYTES} bytes")
        self._key = key

    def _mac(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode("ascii"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")

    def issue(self, snapshot_id: str, offset: int, nonce: str) -> str:
        body = f"{CURSOR_PREFIX}.{snapshot_id}.{offset}.{nonce}"
        return f"{body}.{self._mac(body)}"

    def open(self, token: object) -> CursorClaim:
        if not isinstance(token, str) or len(token) > MAX_CURSOR_CHARS:
            raise JournalCursorError(_cursor_help("cursor must be the string a previous MemoryJournal page returned"))
        match = _CURSOR_RE.fullmatch(token)
        if match is None:
            raise JournalCursorError(_cursor_help("this is not a MemoryJournal cursor"))
        body = token[: match.start("mac") - 1]
        if not hmac.compare_digest(self._mac(body), match["mac"]):
            raise JournalCursorError(_cursor_help("the cursor failed authentication (edited, or from another session)"))
        return CursorClaim(match["sid"], int(match["offset"]), match["nonce"])


def _cursor_help(reason: str) -> str:
    return (
        f"{reason}: continue with the exact cursor of the latest page, "
        "or start again with fromDate, throughDate and timeZone"
    )


class MemorySnapshots:
    """Snapshots in this process, under a random per-process key (MCP server, Python API)."""

    persistent = False

    def __init__(
        self, *, limit: int = MAX_SNAPSHOTS, ttl: float = SNAPSHOT_TTL_SECONDS, clock: Callable[[], float] = time.time
    ):
        self.codec = CursorCodec(secrets.token_bytes(KEY_BYTES))
        self._limit, self._ttl, self._clock = limit, ttl, clock
        self._held: OrderedDict[str, Snapshot] = OrderedDict()
        self._guard = threading.RLock()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._guard:
            yield

    def now(self) -> float:
        return self._clock()

    def get(self, snapshot_id: str) -> Snapshot | None:
        snapshot = self._held.get(snapshot_id)
        if snapshot is not None and self._clock() - snapshot.created > self._ttl:
            del self._held[snapshot_id]
            return None
        return snapshot

    def put(self, snapshot: Snapshot) -> None:
        self._held[snapshot.id] = snapshot
        while len(self._held) > self._limit:
            self._held.popitem(last=False)  # the oldest goes first

    def save(self, snapshot: Snapshot) -> None:
        """Record a served page (the object is already updated in place)."""

    def held(self) -> list[str]:
        return list(self._held)


class FileSnapshots:
    """Snapshots and key owner-only under `.index/journal/`, shared by the CLI's processes."""

    persistent = True

    def __init__(
        self,
        vault_root: Path,
        *,
        limit: int = MAX_SNAPSHOTS,
        ttl: float = SNAPSHOT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ):
        self._root = Path(vault_root)
        self.folder = self._root / ".index" / "journal"
        self._limit, self._ttl, self._clock = limit, ttl, clock
        self._lock = VaultLock(self._root, _LOCK_NAME, timeout=10.0)
        with self._lock, undone_if_failed([self.folder]):  # a key that cannot be saved leaves no folder
            ensure_private_dir(self.folder)
            self.codec = CursorCodec(self._load_or_create_key())

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            yield

    def now(self) -> float:
        return self._clock()

    def _load_or_create_key(self) -> bytes:
        path = self.folder / _KEY_FILE
        try:
            check_private_file(path)
            key = read_bytes_nofollow(path)
            if len(key) == KEY_BYTES:
                return key
        except FileNotFoundError:
            pass
        except UnsafePath:
            path.unlink(missing_ok=True)  # derived state: a key someone else could read is replaced
        key = secrets.token_bytes(KEY_BYTES)
        atomic_write(path, key, mode=0o600)
        return key

    def _path(self, snapshot_id: str) -> Path:
        return self.folder / f"{snapshot_id}.json"

    def get(self, snapshot_id: str) -> Snapshot | None:
        path = self._path(snapshot_id)
        try:
            check_private_file(path)
            raw = read_bytes_nofollow(path)
        except (FileNotFoundError, UnsafePath):
            return None
        snapshot = _decode_snapshot(raw) if len(raw) <= _MAX_SNAPSHOT_FILE_BYTES else None
        if snapshot is None or snapshot.id != snapshot_id or self._clock() - snapshot.created > self._ttl:
            path.unlink(missing_ok=True)
            return None
        return snapshot

    def put(self, snapshot: Snapshot) -> None:
        self.save(snapshot)
        # reading each held snapshot drops the expired ones; then the oldest go until `limit` remain
        others = sorted((item for item in self._held_snapshots() if item[0] != snapshot.id), key=lambda i: (i[1], i[0]))
        for snapshot_id, _ in others[: max(0, len(others) + 1 - self._limit)]:
            self._path(snapshot_id).unlink(missing_ok=True)

    def save(self, snapshot: Snapshot) -> None:
        data = json.dumps(asdict(snapshot), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        atomic_write(self._path(snapshot.id), data, mode=0o600)

    def _held_snapshots(self) -> list[tuple[str, float]]:
        found = []
        for entry in self.folder.iterdir():
            match = _SNAPSHOT_NAME_RE.fullmatch(entry.name)
            if match is None:
                continue
            snapshot = self.get(match["sid"])
            if snapshot is not None:
                found.append((snapshot.id, snapshot.created))
        return found

    def held(self) -> list[str]:
        with self._lock:
            return [snapshot_id for snapshot_id, _ in sorted(self._held_snapshots(), key=lambda item: item[1])]


def _decode_snapshot(raw: bytes) -> Snapshot | None:
    try:
        body = json.loads(raw)
        snapshot = Snapshot(**body)
    except (ValueError, TypeError):
        return None
    ok = (
        isinstance(snapshot.id, str)
        and isinstance(snapshot.created, (int, float))
        and isinstance(snapshot.entries, list)
        and isinstance(snapshot.range, dict)
        and isinstance(snapshot.limit, int)
        and isinstance(snapshot.next_offset, int)
        and isinstance(snapshot.nonce, str)
        and isinstance(snapshot.coverage, dict)
    )
    return snapshot if ok else None


def snapshot_store_for(vault_root: Path, persistent: bool):
    """The CLI's file-backed holder, or the in-process one when the vault cannot hold it (read-only)."""
    if persistent:
        try:
            return FileSnapshots(vault_root)
        except (OSError, UnsafePath):
            pass
    return MemorySnapshots()


def discard_persisted_snapshots(vault_root: Path) -> None:
    """Drop the CLI's kept snapshots (after an import replaced what they were frozen from)."""
    shutil.rmtree(Path(vault_root) / ".index" / "journal", ignore_errors=True)
