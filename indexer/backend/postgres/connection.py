"""Connecting to the index server: the optional client, version checks, and no password in any message.

The DSN comes from the entry point (`MEMVAULT_INDEX_DSN`, or `index.dsn` in memvault.json
without a password); an empty DSN or `service=NAME` lets libpq read its own service and
password files (PGSERVICE, ~/.pg_service.conf, ~/.pgpass). Every message built here goes
through `redact`, so neither the DSN's password nor a password libpq echoes reaches a person.
"""

import re
import threading
from contextlib import contextmanager
from urllib.parse import urlsplit

from memvault.indexer.backend.base import IndexServerUnavailable
from memvault.vault.errors import IndexUnavailable, InvalidConfig

MIN_SERVER_MAJOR = 16
MIN_PGVECTOR = (0, 8)
INSTALL_HINT = "pip install 'memvault[postgres]'"
_KEYWORD_PASSWORD_RE = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_URI_PASSWORD_RE = re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)([^@\s]*)(@)", re.IGNORECASE)
_CONNECT_TIMEOUT_S = 10


def require_psycopg():
    """The psycopg module, or a clear error naming the extra that installs it."""
    try:
        import psycopg
    except ImportError as exc:
        raise InvalidConfig(f"the postgres index backend needs psycopg 3 and pgvector: {INSTALL_HINT}") from exc
    return psycopg


def redact(text: str, dsn: str = "") -> str:
    """`text` with every password removed: `password=…` pairs, `user:…@` in URIs, and the DSN's
    own password wherever it appears verbatim."""
    secret = dsn_password(dsn)
    if secret:
        text = text.replace(secret, "***")
    text = _KEYWORD_PASSWORD_RE.sub(r"\1***", text)
    return _URI_PASSWORD_RE.sub(r"\1***\3", text)


def dsn_password(dsn: str) -> str | None:
    """The password a DSN carries (keyword or URI form), or None."""
    if not dsn:
        return None
    if "://" in dsn:
        try:
            return urlsplit(dsn.strip()).password or None
        except ValueError:
            return None
    match = _KEYWORD_PASSWORD_RE.search(dsn)
    return match.group(2).strip("'") if match else None


def describe_target(dsn: str) -> str:
    """Where a DSN points, for messages: host (or socket folder), port and database, no secrets."""
    psycopg = require_psycopg()
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "an unparsable DSN"
    if parts.get("service"):
        return f"service {parts['service']!r}"
    host = parts.get("host") or "localhost (libpq's default)"
    where = f"host {host}"
    if parts.get("port"):
        where += f" port {parts['port']}"
    if parts.get("dbname"):
        where += f" database {parts['dbname']}"
    return where


def connect(dsn: str, *, autocommit: bool = False):
    """A connection with pgvector's types registered, or IndexServerUnavailable naming the host and the fix."""
    psycopg = require_psycopg()
    try:
        conn = psycopg.connect(dsn, autocommit=autocommit, connect_timeout=_CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise IndexServerUnavailable(unreachable_message(dsn, exc)) from None
    return conn


def unreachable_message(dsn: str, exc: BaseException) -> str:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return redact(
        f"the index server at {describe_target(dsn)} is unreachable ({reason}): start it, or point "
        "MEMVAULT_INDEX_DSN (or a libpq service in ~/.pg_service.conf) at a running PostgreSQL 16+ with pgvector",
        dsn,
    )


def server_versions(conn) -> tuple[int, str, str | None]:
    """(server major version, server version text, pgvector version or None when not installed)."""
    number = conn.info.server_version  # e.g. 180003
    text = conn.execute("SHOW server_version").fetchone()[0]
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    available = None
    if row is None:
        found = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        available = None if found is None else f"available {found[0]}, not installed"
    return number // 10000, text, row[0] if row is not None else available


def version_problems(major: int, server_text: str, vector: str | None) -> list[str]:
    """What is wrong with a server for this backend, each with its fix; [] when it will do."""
    problems = []
    if major < MIN_SERVER_MAJOR:
        problems.append(f"PostgreSQL {server_text} is older than {MIN_SERVER_MAJOR}: upgrade the server "
                        f"(or use a managed PostgreSQL {MIN_SERVER_MAJOR}+)")  # fmt: skip
    if vector is None:
        problems.append("pgvector is not available on the server: install it (apt install postgresql-NN-pgvector, "
                        "or enable the `vector` extension of your managed service)")  # fmt: skip
    elif vector.startswith("available"):
        problems.append(f"pgvector is {vector}: run `CREATE EXTENSION vector;` in the database as its owner")
    elif _version_tuple(vector) < MIN_PGVECTOR:
        problems.append(f"pgvector {vector} is older than {'.'.join(map(str, MIN_PGVECTOR))}: "
                        "`ALTER EXTENSION vector UPDATE;` after installing a newer pgvector")  # fmt: skip
    return problems


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


class ServerSession:
    """Up to `size` connections, opened on first use and kept for the next call; a broken one is
    dropped so the next call reconnects (the call that met it fails with IndexServerUnavailable).
    A thread holds one connection for the whole of a `with`, and a call nested inside it (in the
    same thread) gets the same connection, so a transaction spans what runs inside it; other
    threads take another connection, or wait for one when `size` are in use. `prepare` runs on
    each new connection; `refusal` turns a statement error into the caller's own VaultError (or
    None for the generic "refused a statement")."""

    def __init__(self, dsn: str, *, prepare=None, refusal=None, size: int = 1):
        self.dsn = dsn
        self.size = size
        self._prepare = prepare
        self._refusal = refusal
        self._lock = threading.Condition()
        self._idle: list = []
        self._out = 0  # connections a thread holds now
        self._epoch = 0  # grows at each close: a connection taken before it is closed when given back
        self._held = threading.local()

    @contextmanager
    def __call__(self):
        psycopg = require_psycopg()
        held = getattr(self._held, "conn", None)
        if held is not None:  # nested in this thread's own call: its connection, its transaction
            with self._translated(psycopg, held):
                yield held
            return
        conn, epoch = self._take()
        self._held.conn = conn
        try:
            with self._translated(psycopg, conn):
                yield conn
        finally:
            self._held.conn = None
            self._give_back(conn, epoch)

    def _take(self):
        with self._lock:
            while not self._idle and self._out >= self.size:
                self._lock.wait()
            self._out += 1
            conn, epoch = (self._idle.pop() if self._idle else None), self._epoch
        if conn is not None and not conn.closed:
            return conn, epoch
        try:
            conn = connect(self.dsn, autocommit=True)
            if self._prepare is not None:
                self._prepare(conn)
        except BaseException:
            self._give_back(None, epoch)
            raise
        return conn, epoch

    def _give_back(self, conn, epoch: int) -> None:
        with self._lock:
            self._out -= 1
            keep = conn is not None and not conn.closed and not conn.broken and epoch == self._epoch
            if keep:
                self._idle.append(conn)
            self._lock.notify()
        if conn is not None and not keep:
            _close_quietly(conn)

    @contextmanager
    def _translated(self, psycopg, conn):
        try:
            yield
        except psycopg.OperationalError as exc:
            _close_quietly(conn)  # never given back: the next call reconnects
            raise IndexServerUnavailable(unreachable_message(self.dsn, exc)) from None
        except psycopg.Error as exc:
            refused = None if self._refusal is None else self._refusal(exc)
            if refused is not None:
                raise refused from None
            if conn.broken:
                _close_quietly(conn)
                raise IndexServerUnavailable(unreachable_message(self.dsn, exc)) from None
            raise IndexUnavailable(redact(f"the index server refused a statement ({exc})", self.dsn)) from None

    def close(self) -> None:
        """Close the idle connections; one in use is closed when its thread gives it back. The
        session can be used again afterwards (it reconnects)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._epoch += 1
        for conn in idle:
            _close_quietly(conn)


def _close_quietly(conn) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - it is already broken, or going
        pass
