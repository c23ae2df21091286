"""Connecting to the index server: the optional client, its bounds, version checks, one pool of
connections per process and server, and messages that name the fix (never a password, never SQL).

The DSN comes from the entry point (`MEMVAULT_INDEX_DSN`, or `index.dsn` in memvault.json
without a password); an empty DSN or `service=NAME` lets libpq read its own service and
password files (PGSERVICE, ~/.pg_service.conf, ~/.pgpass). Every message built here goes
through `redact`, so neither the DSN's password nor a password libpq echoes reaches a person.

Bounds (`ServerBounds`, from `index.poolSize` and `index.timeoutSeconds`): a process holds at most
`pool_size` pooled connections to one DSN, whatever the number of stores, vaults and threads in
it (an owner adds its fence's and its listener's own two); every statement has the server's
`statement_timeout`, every socket TCP keepalives and `tcp_user_timeout`, and the client itself
stops waiting for an answer a little after the statement's bound (a stalled network path that
keeps the socket open answers nothing, and a server-side timeout never fires for a statement
the server never received). Connections carry `application_name=memvault` unless the DSN names
another, so an admin can count them in pg_stat_activity.

A read route to a standby (replica.py) hooks the primary's pool (`after_write`) to note its WAL
position after each write of the process (`ServerSession(...)(wrote=True)`), so that reads stay
on the primary until the standby has replayed it.
"""

import functools
import logging
import os
import re
import select
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from memvault.indexer.backend.base import IndexServerUnavailable
from memvault.vault.config_schema import DEFAULT_INDEX_POOL_SIZE, DEFAULT_INDEX_TIMEOUT_SECONDS
from memvault.vault.errors import IndexUnavailable, InvalidConfig

MIN_SERVER_MAJOR = 16
MIN_PGVECTOR = (0, 8)
INSTALL_HINT = "pip install 'memvault[postgres]'"
APPLICATION_NAME = "memvault"
POOL_SIZE_KEY = "index.poolSize (MEMVAULT_INDEX_POOL_SIZE)"
TIMEOUT_KEY = "index.timeoutSeconds (MEMVAULT_INDEX_TIMEOUT_SECONDS)"
#: where the primary's DSN is set, for messages (a read replica's names its own: replica.py)
DSN_SETTING = "MEMVAULT_INDEX_DSN"
#: the client waits this much longer than the server's statement_timeout, so a live server's own
#: cancellation (a clearer error, and the connection stays usable) arrives first
_CLIENT_GRACE_SECONDS = 2
#: a pooled connection idle this long is asked once (`SELECT 1`) before a call uses it
PROBE_AFTER_IDLE_SECONDS = 5.0
POOLER_KEY = "index.pooler (MEMVAULT_INDEX_POOLER)"
SESSION_DSN_KEY = "MEMVAULT_INDEX_SESSION_DSN (index.sessionDsn)"
#: libpq's and the server's words for a server that is not there (yet): a call cut by a restart
#: waits for these to pass, within its bound, before it runs again (`retried_once`)
_AWAY_WORDS = ("connection refused", "no such file or directory", "the database system is starting up",
               "the database system is shutting down", "the database system is in recovery mode",
               "not yet accepting connections", "server closed the connection unexpectedly",
               "terminating connection", "connection reset by peer")  # fmt: skip

log = logging.getLogger("memvault.index")
_KEYWORD_PASSWORD_RE = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_URI_PASSWORD_RE = re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)([^@\s]*)(@)", re.IGNORECASE)
_NAMED_RE = re.compile(r'(user|role|database) "([^"]*)"')


@dataclass(frozen=True)
class ServerBounds:
    """How much of the index server one process may hold, and how long anything may take there."""

    pool_size: int = DEFAULT_INDEX_POOL_SIZE
    timeout_seconds: int = DEFAULT_INDEX_TIMEOUT_SECONDS
    #: the DSN reaches a pooler in transaction mode (index.pooler): each transaction may run on
    #: another server session, so its connections keep no session state (module docstring)
    pooled: bool = False

    @classmethod
    def of(cls, index, *, owner: bool = False) -> "ServerBounds":
        """The bounds an `index` config block (vault.config.IndexConfig) sets; `owner`: for the
        connections of what writes the index, which go to its session DSN when one is set."""
        pooled = getattr(index, "pooler", "") == "transaction" and not (owner and getattr(index, "session_dsn", ""))
        return cls(index.pool_size, index.timeout_seconds, pooled)


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


# --- one connection ---------------------------------------------------------------------------


def connect(dsn: str, *, autocommit: bool = False, bounds: ServerBounds | None = None, setting: str = DSN_SETTING):
    """A connection within `bounds` (statement_timeout, keepalives, tcp_user_timeout, a client-side
    wait bound), or IndexServerUnavailable naming the host, the cause and its fix (`setting`: where
    the DSN is set)."""
    psycopg = require_psycopg()
    bounds = bounds or _bounds_for(dsn)
    conn = None
    # behind a transaction-mode pooler a prepared statement lives in one server session and the
    # next execution may run in another: psycopg never prepares there
    options = {"prepare_threshold": None} if bounds.pooled else {}
    try:
        conn = _bounded_class().connect(dsn, autocommit=autocommit, **_socket_options(dsn, bounds), **options)
        conn.answer_within = bounds.timeout_seconds + _CLIENT_GRACE_SECONDS
        conn.memvault_timeout_ms = int(bounds.timeout_seconds * 1000)
        conn.memvault_pooled = bounds.pooled
        if not bounds.pooled:  # a session SET there would land on one server session, others' next
            conn.execute(f"SET statement_timeout = {conn.memvault_timeout_ms}")
        if not autocommit:
            conn.commit()
    except psycopg.Error as exc:
        if conn is not None:
            _close_quietly(conn)
        kind = ServerAway if _away(exc) else IndexServerUnavailable
        raise kind(server_error_message(dsn, exc, bounds, setting)) from None
    return conn


class ServerAway(IndexServerUnavailable):
    """A connection found no server there, or one starting or stopping (a restart): a call that
    a restart cut waits for it to pass (`retried_once`)."""


class CallCut(IndexServerUnavailable):
    """The connection was cut during a call (a restart, a killed backend, a reset path): whether
    the server committed what the call sent is unknown. An idempotent call runs once more
    (`retried_once`); any other fails with this, naming what is and is not known."""


def _away(exc: BaseException) -> bool:
    return any(words in str(exc).lower() for words in _AWAY_WORDS)


def _cut(psycopg, exc: BaseException, conn) -> bool:
    """The call's connection was cut under it, as opposed to a bound it spent (the client's wait,
    the server's statement_timeout) or a refusal: only a cut call may run again at once."""
    if getattr(exc, "memvault_silent", False) or isinstance(exc, psycopg.errors.QueryCanceled):
        return False
    return isinstance(exc, psycopg.OperationalError) or conn.broken or conn.closed


def retried_once(method):
    """A method of an object with a `_session` (a ServerSession) whose work is idempotent (a read,
    an admission keyed by its run id, a fact keyed by its content hash): when a cut connection
    (`CallCut`) ends it, it runs once more on a new connection, waiting within the bound
    (`index.timeoutSeconds`, from the cut) for a restarting server to accept one; so does a call
    that finds the server away (`ServerAway`) in a process that has reached it before (a long-lived
    client riding out a restart; a one-shot CLI call against a stopped server fails at once). Not inside a
    call of the same session (its transaction is gone with the connection: the outer call's
    own retry, if any, runs it all again)."""

    @functools.wraps(method)
    def once_more(self, *args, **kwargs):
        session = getattr(self, "_session", None)
        if session is None or session.holds() or getattr(_RETRYING, "depth", 0):
            return method(self, *args, **kwargs)
        _RETRYING.depth = 1
        try:
            try:
                return method(self, *args, **kwargs)
            except CallCut as cut:
                log.info("memvault: %s; running the call again", cut)
            except ServerAway:
                if not session.pool.reached:
                    raise
            deadline = time.monotonic() + session.pool.bounds.timeout_seconds
            while True:
                try:
                    return method(self, *args, **kwargs)
                except ServerAway:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        finally:
            _RETRYING.depth = 0

    return once_more


_RETRYING = threading.local()


def _socket_options(dsn: str, bounds: ServerBounds) -> dict:
    """libpq's connection options for the bounds, where the DSN does not set them itself (libpq
    ignores the TCP ones on a Unix socket)."""
    psycopg = require_psycopg()
    seconds = max(2, int(bounds.timeout_seconds))
    wanted = {
        "connect_timeout": seconds,
        "keepalives": 1,
        "keepalives_idle": max(1, seconds // 3),
        "keepalives_interval": max(1, seconds // 6),
        "keepalives_count": 4,  # idle + 4 × interval ≈ the bound: a dead peer is noticed within it
        "tcp_user_timeout": seconds * 1000,
        "fallback_application_name": APPLICATION_NAME,
    }
    try:
        given = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        given = {}
    return {key: value for key, value in wanted.items() if key not in given}


_BOUNDED_CLASS = None


def _bounded_class():
    """psycopg's Connection, with a bound on each wait for the server (psycopg is optional: the
    class is made on first use)."""
    global _BOUNDED_CLASS
    if _BOUNDED_CLASS is None:
        psycopg = require_psycopg()
        timed_out = getattr(psycopg.errors, "_WaitTimeout", None)

        class BoundedConnection(psycopg.Connection):
            answer_within: float | None = None

            def wait(self, gen, interval=0.1, timeout=None):
                if timeout is not None or self.answer_within is None or timed_out is None:
                    return super().wait(gen, interval, timeout)
                try:
                    return super().wait(gen, interval, self.answer_within)
                except timed_out:
                    self.pgconn.finish()  # mid-protocol, in an unknown state: never used again
                    error = psycopg.OperationalError(f"no answer within {self.answer_within:g} s")
                    error.memvault_silent = True
                    raise error from None

        _BOUNDED_CLASS = BoundedConnection
    return _BOUNDED_CLASS


@contextmanager
def index_builds(conn):
    """Statements that build a whole generation's indexes (a rebuild's HNSW and postings, its
    VACUUM ANALYZE): they may take minutes on a large vault, so neither the server's
    statement_timeout nor the client's wait bound applies; TCP keepalives and tcp_user_timeout
    still end them if the server goes away. Autocommit connections only (VACUUM needs one)."""
    within = getattr(conn, "answer_within", None)
    conn.execute("SET statement_timeout = 0")
    conn.answer_within = None
    try:
        yield conn
    finally:
        conn.answer_within = within
        try:
            conn.execute(f"SET statement_timeout = {int(getattr(conn, 'memvault_timeout_ms', 0))}")
        except Exception:  # noqa: BLE001 - never handed out again without its bound
            _close_quietly(conn)


# --- what went wrong, in words that name the fix --------------------------------------------------


def unreachable_message(dsn: str, exc: BaseException) -> str:
    """The message for a connection's failure (kept under its old name: callers outside this module)."""
    return server_error_message(dsn, exc)


def server_error_message(
    dsn: str, exc: BaseException, bounds: ServerBounds | None = None, setting: str = DSN_SETTING
) -> str:
    """A connection's (or a dead connection's) failure: refused slots, a wrong password, an unknown
    database or role, a server that went silent, or unreachable; each names its fix (`setting`:
    where the DSN was given, MEMVAULT_INDEX_DSN or the read DSN's)."""
    bounds = bounds or _bounds_for(dsn)
    reason = _reason(exc)
    target = describe_target(dsn)
    lower = reason.lower()
    if "prepared statement" in lower and ("does not exist" in lower or "already exists" in lower):
        text = (f"the index server at {target} lost a prepared statement between two of a connection's calls "
                f"({reason}): a pooler in transaction mode (PgBouncer) is in front of it; set {POOLER_KEY} "
                "to \"transaction\"")  # fmt: skip
    elif getattr(exc, "memvault_silent", False):
        waited = bounds.timeout_seconds + _CLIENT_GRACE_SECONDS
        text = (f"the index server at {target} did not answer within {waited} s "
                f"({TIMEOUT_KEY} is {bounds.timeout_seconds} s): the network path or the server is stalled; "
                "nothing unanswered was acknowledged, so retry once it answers (or raise the bound)")  # fmt: skip
    elif "statement timeout" in lower:
        text = (f"a statement on the index server at {target} ran past {TIMEOUT_KEY} ({bounds.timeout_seconds} s) "
                "and the server cancelled it (nothing of it was kept): check the server's load, or raise the bound "
                "for work that is that long (a large rebuild)")  # fmt: skip
    elif "too many clients" in lower or "remaining connection slots are reserved" in lower:
        text = (f"the index server at {target} has no connection slot left ({reason}): its max_connections is "
                f"reached. This process holds at most {bounds.pool_size} ({POOL_SIZE_KEY}); lower it on the "
                "agents, raise max_connections on the server (ALTER SYSTEM SET max_connections = …, then restart "
                "it), or put a connection pooler (PgBouncer) in front of it")  # fmt: skip
    elif "password authentication failed" in lower:
        text = (f"the index server at {target} refused the password of {_named(reason, 'this role')} (wrong "
                f"password): correct it in ~/.pgpass (or the libpq service, or {setting})")  # fmt: skip
    elif "no password supplied" in lower:
        text = (f"the index server at {target} asks for a password and none was given: put it in ~/.pgpass "
                f"(or the libpq service, or {setting}; never in memvault.json)")  # fmt: skip
    elif "database" in lower and "does not exist" in lower:
        text = (f"database {_named(reason, '(unnamed)')} does not exist on the index server at {target}: create "
                "it (`createdb NAME` as its owner, then `CREATE EXTENSION vector;` in it), or point dbname in "
                f"{setting} (or the libpq service) at the right one")  # fmt: skip
    elif "role" in lower and "does not exist" in lower:
        text = (f"role {_named(reason, '(unnamed)')} does not exist on the index server at {target}: ask its "
                "admin to create it (CREATE ROLE … LOGIN), or connect as another user")  # fmt: skip
    elif "pg_hba.conf" in lower:
        text = (f"the index server at {target} admits no connection from here for this role and database "
                f"({reason}): ask its admin to add a pg_hba.conf entry")  # fmt: skip
    else:
        text = (f"the index server at {target} is unreachable ({reason}): start it, or point {setting} "
                "(or a libpq service in ~/.pg_service.conf) at a running PostgreSQL 16+ with pgvector")  # fmt: skip
    return redact(text, dsn)


def cut_message(dsn: str, exc: BaseException) -> str:
    """A call whose connection was cut under it (and not run again: not idempotent, or cut twice)."""
    return redact(f"the connection to the index server at {describe_target(dsn)} was cut during a call "
                  f"({_reason(exc)}): whether the server committed that call's write is unknown (an admission "
                  "or a remembered fact sent again is answered exactly; nothing acknowledged before is lost); "
                  "retry once the server answers", dsn)  # fmt: skip


def owner_dsn_checked(dsn: str, bounds: ServerBounds, what: str) -> str:
    """`dsn` for `what` (a vault's owner, its fence, a writer of the index), which needs a session
    of its own; IndexUnavailable naming the fix when `dsn` is behind a transaction-mode pooler."""
    if bounds.pooled:
        raise IndexUnavailable(f"{what} needs a session of its own on the index server (the owner's fence, its "
                               f"wake-up channel, a rebuild's index builds), and {POOLER_KEY} says "
                               "MEMVAULT_INDEX_DSN reaches a pooler in transaction mode, which keeps none: set "
                               f"{SESSION_DSN_KEY} to a DSN that reaches PostgreSQL directly (or a pooler in "
                               "session mode); agents keep the pooled one")  # fmt: skip
    return dsn


def statement_error_message(dsn: str, exc: BaseException) -> str:
    """A statement the server refused, by its primary message and SQLSTATE (never the statement)."""
    psycopg = require_psycopg()
    diag = getattr(exc, "diag", None)
    primary = " ".join(((diag.message_primary if diag is not None else None) or type(exc).__name__).split())
    if isinstance(exc, psycopg.errors.UndefinedObject) and "vector" in primary:
        return redact(f"pgvector is not installed in the index server's database ({primary}): run "
                      "`CREATE EXTENSION vector;` in it as its owner", dsn)  # fmt: skip
    if getattr(exc, "sqlstate", None) in ("26000", "42P05") and "prepared statement" in primary:
        return redact(f"the index server lost a prepared statement between two calls of one connection ({primary}): "
                      f"a pooler in transaction mode (PgBouncer) is in front of it; set {POOLER_KEY} to "
                      '"transaction"', dsn)  # fmt: skip
    code = f", SQLSTATE {exc.sqlstate}" if getattr(exc, "sqlstate", None) else ""
    return redact(f"the index server refused a statement ({primary}{code})", dsn)


def _reason(exc: BaseException) -> str:
    """The server's (or libpq's) own words, without the statement a server error may quote."""
    diag = getattr(exc, "diag", None)
    primary = diag.message_primary if diag is not None else None
    text = primary or str(exc).split("\nLINE ", 1)[0]
    return " ".join(text.split()) or type(exc).__name__


def _named(reason: str, default: str) -> str:
    """The role or database the server's message names (`… for user "alice"`)."""
    found = _NAMED_RE.search(reason)
    return found.group(2) if found else default


# --- the server's versions ------------------------------------------------------------------------


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


# --- one pool per process and DSN -------------------------------------------------------------------


class _Pool:
    """At most `bounds.pool_size` connections to one DSN, shared by every ServerSession of the
    process; a call waits for a free one up to `bounds.timeout_seconds`, then fails naming both.
    A thread that holds one already (a call of another session nested in its own: the owner's
    drain writes the index inside its claim's transaction) is given one more at once, beyond the
    bound, rather than wait on itself; that one is closed when given back."""

    def __init__(self, dsn: str, bounds: ServerBounds):
        self.dsn, self.bounds = dsn, bounds
        self.cond = threading.Condition()
        self.idle: list = []
        self.out = 0  # connections threads hold now
        self.epoch = 0  # grows when the last session closes: a connection out then is closed when given back
        self.sessions = 0  # sessions that used the pool and are not closed
        self.refused_until = 0.0  # the server refused a connection for lack of slots: use those held
        self.reached = False  # a connection to the server was made once (a restart is then waited for)
        self.holding = threading.local()  # .count: connections of this pool the thread holds
        self.setting = DSN_SETTING  # where the DSN is set, for messages (a read replica's: replica.py)
        #: called with each connection a `wrote=True` call wrote on, once it committed (a read
        #: route notes the primary's WAL position: replica.py); None: nothing to do
        self.after_write = None

    def take(self, session) -> tuple:
        deadline = time.monotonic() + self.bounds.timeout_seconds
        nested = getattr(self.holding, "count", 0) > 0
        while True:
            with self.cond:
                while not self._can_take(session, nested):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise IndexServerUnavailable(self._busy_message(session))
                    self.cond.wait(min(remaining, max(0.05, self.refused_until - time.monotonic())))
                self.out += 1
                session.out += 1
                conn, epoch = (self.idle.pop() if self.idle else None), self.epoch
            while conn is not None and not _alive(conn):  # e.g. the server restarted while it idled
                _close_quietly(conn)
                with self.cond:
                    conn = self.idle.pop() if self.idle else None
            if conn is not None:
                return conn, epoch
            try:
                made = connect(self.dsn, autocommit=True, bounds=self.bounds, setting=self.setting)
                self.reached = True
                return made, epoch
            except IndexServerUnavailable as exc:
                self.give_back(session, None, epoch)
                if not self._refused_for_slots(exc):
                    raise
            except BaseException:
                self.give_back(session, None, epoch)
                raise

    def _can_take(self, session, nested: bool) -> bool:
        if session.out >= session.size:
            return False
        if self.idle or nested:
            return True
        if self.out >= self.bounds.pool_size:
            return False
        return self.out == 0 or time.monotonic() >= self.refused_until

    def _refused_for_slots(self, exc: IndexServerUnavailable) -> bool:
        """The server has no slot for one more, but this process holds others: wait for one of
        those (within the bound) rather than fail; alone, the refusal is the caller's error."""
        with self.cond:
            if "no connection slot left" not in str(exc) or self.out + len(self.idle) == 0:
                return False
            self.refused_until = time.monotonic() + 1.0
            return True

    def give_back(self, session, conn, epoch: int) -> None:
        with self.cond:
            self.out -= 1
            session.out -= 1
            within = self.out + len(self.idle) < self.bounds.pool_size  # not the one a nested call had beyond it
            keep = conn is not None and epoch == self.epoch and within and _reusable(conn)
            if keep:
                conn.idle_since = time.monotonic()
                self.idle.append(conn)
            self.cond.notify_all()  # waiters wait on their own session's cap, too
        if conn is not None and not keep:
            _close_quietly(conn)

    def join(self) -> None:
        with self.cond:
            self.sessions += 1

    def leave(self) -> None:
        """A session closed; the last one closes the idle connections (one in use is closed when
        its thread gives it back)."""
        with self.cond:
            self.sessions -= 1
            if self.sessions > 0:
                return
            idle, self.idle = self.idle, []
            self.epoch += 1
        for conn in idle:
            _close_quietly(conn)

    def _busy_message(self, session) -> str:
        if session.out >= session.size:
            held = f"this store's {session.size}"
        else:
            held = f"all {self.bounds.pool_size} connections of this process's pool ({POOL_SIZE_KEY})"
        return redact(f"{held} to the index server at {describe_target(self.dsn)} stayed in use for "
                      f"{self.bounds.timeout_seconds} s ({TIMEOUT_KEY}): raise {POOL_SIZE_KEY.split()[0]}, or "
                      "look for what holds them (a long rebuild, a stalled server)", self.dsn)  # fmt: skip


_POOLS: dict[tuple, _Pool] = {}
_POOLS_LOCK = threading.Lock()
#: pools a forked child inherited: kept referenced, never used or closed (closing would end the
#: parent's sessions, whose sockets the child shares)
_INHERITED: list = []


def _pool_key(dsn: str) -> tuple:
    """A DSN and the libpq variables it leaves to the environment (an empty DSN or a service
    reaches whatever PGHOST, PGDATABASE... name now): two targets never share a pool."""
    return (dsn, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("PG"))))


def shared_pool(dsn: str, bounds: ServerBounds | None = None) -> _Pool:
    """This process's pool for `dsn` (and the PG* environment); `bounds` (a config's) become its
    bounds from now on."""
    key = _pool_key(dsn)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = _Pool(dsn, bounds or ServerBounds())
    if bounds is not None and bounds != pool.bounds:
        with pool.cond:
            pool.bounds = bounds
            pool.cond.notify_all()
    return pool


def _bounds_for(dsn: str) -> ServerBounds:
    pool = _POOLS.get(_pool_key(dsn))
    return pool.bounds if pool is not None else ServerBounds()


def _forget_pools() -> None:
    _INHERITED.append(dict(_POOLS))
    _POOLS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def _alive(conn) -> bool:
    """An idle connection still open: the server says nothing unasked on an idle connection that
    does not LISTEN, so anything to read (a restart's FATAL, end of file) means it is going. One
    idle for a while is also asked once (a failover's new host, or a path that lost the
    connection without a word, only answers the next statement, with a reset or not at all)."""
    if conn.closed or conn.broken:
        return False
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        if poller.poll(0):
            return False
        if time.monotonic() - getattr(conn, "idle_since", 0.0) >= PROBE_AFTER_IDLE_SECONDS:
            conn.execute("SELECT 1").fetchone()
        return True
    except Exception:  # noqa: BLE001 - any failure means the connection is gone
        return False


def _reusable(conn) -> bool:
    psycopg = require_psycopg()
    return not conn.closed and not conn.broken and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


class ServerSession:
    """One user's (a backend's, a team server's) share of this process's pool for its DSN
    (`shared_pool`): at most `size` of the pool's connections at once (and the pool's bound over
    all sessions); a connection the server dropped while idle is replaced before it is handed out,
    one that breaks during a call is dropped (that call fails with IndexServerUnavailable, and the
    next reconnects). A thread holds one connection for the whole of a `with`, and a call nested
    inside it (in the same thread and session) gets the same connection, so a transaction spans
    what runs inside it; another session's call takes a connection of its own (the team ledger's
    claim and the index writes it leads to stay two transactions, and VACUUM runs outside both).
    `prepare` runs once on each connection this session uses (it may return False: not done, run
    it again next time); `refusal` turns a statement error into the caller's own VaultError (or
    None for the generic "refused a statement")."""

    def __init__(
        self, dsn: str, *, prepare=None, refusal=None, size: int | None = None, bounds=None, setting=DSN_SETTING
    ):
        self.dsn, self.setting = dsn, setting
        self.pool = shared_pool(dsn, bounds)
        if setting != DSN_SETTING:
            self.pool.setting = setting
        self.size = size or 1 << 30
        self.out = 0  # connections this session's threads hold now (under the pool's lock)
        self._prepare = prepare
        self._refusal = refusal
        self._joined = False
        self._held = threading.local()

    @contextmanager
    def __call__(self, *, wrote: bool = False):
        """A connection for the `with`; `wrote`: the block writes (a read route then keeps this
        process's reads off a standby until it has replayed the write: replica.py)."""
        psycopg = require_psycopg()
        pool = self.pool
        if not self._joined:
            self._joined = True
            pool.join()
        held = getattr(self._held, "conn", None)
        if held is not None:  # nested in this thread's own call: its connection, its transaction
            with self._translated(psycopg, held, nested=True):
                self._prepared(held)
                yield held
            self._held.wrote = getattr(self._held, "wrote", False) or wrote  # noted once the outer call committed
            return
        conn, epoch = pool.take(self)
        self._held.conn, self._held.wrote = conn, wrote
        pool.holding.count = getattr(pool.holding, "count", 0) + 1
        try:
            with self._translated(psycopg, conn):
                self._prepared(conn)
                yield conn
                if self._held.wrote and pool.after_write is not None:
                    pool.after_write(conn)
        finally:
            self._held.conn = None
            pool.holding.count -= 1
            pool.give_back(self, conn, epoch)

    def _prepared(self, conn) -> None:
        if self._prepare is None:
            return
        done = conn.__dict__.setdefault("memvault_prepared", set())
        if self._prepare not in done and self._prepare(conn) is not False:
            done.add(self._prepare)

    @contextmanager
    def _translated(self, psycopg, conn, *, nested: bool = False):
        try:
            yield
        except psycopg.Error as exc:
            if not isinstance(exc, psycopg.OperationalError):
                refused = None if self._refusal is None else self._refusal(exc)
                if refused is not None:
                    raise refused from None
                if not conn.broken:
                    raise IndexUnavailable(statement_error_message(self.dsn, exc)) from None
            _close_quietly(conn)  # never given back: the next call reconnects
            if _cut(psycopg, exc, conn) and not nested:
                raise CallCut(cut_message(self.dsn, exc)) from None
            raise IndexServerUnavailable(server_error_message(self.dsn, exc, self.pool.bounds, self.setting)) from None

    def holds(self) -> bool:
        """This thread is inside one of this session's calls (its connection, its transaction)."""
        return getattr(self._held, "conn", None) is not None

    def close(self) -> None:
        """Leave the pool: the last session to leave closes its idle connections. The session can
        be used again afterwards (it reconnects)."""
        if self._joined:
            self._joined = False
            self.pool.leave()


def _close_quietly(conn) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - it is already broken, or going
        pass
