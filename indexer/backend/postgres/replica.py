"""Reads from a standby: `index.readDsn` (MEMVAULT_INDEX_READ_DSN) names a hot standby (or a libpq
multi-host DSN with `target_session_attrs=prefer-standby`) that a connected client's recall and
journal and `search --across` read from, while every write goes to the primary.

Read-your-writes: the process notes the primary's WAL position (`pg_current_wal_lsn()`) after each
of its writes, and after each read that went to the primary. A read goes to the standby only once
the standby has replayed that position (`pg_last_wal_replay_lsn()`, asked only while a position is
newer than the last one the standby confirmed); until then it goes to the primary, at once, rather
than wait. So a process reads what it wrote, and never goes back behind what it read. A read DSN
that reaches a primary (not in recovery) is read as up to date.

A standby further behind than `index.timeoutSeconds` is not read either: a process reading for
longer than half that samples the primary's WAL position every half bound, and a standby that
has not replayed the position of a bound ago is treated as failed (below).

A standby that cannot be reached, or refuses the connection, or fails during a read (it went
away, or cancelled the statement in a conflict with its replay), is left alone for
`RETRY_STANDBY_AFTER_SECONDS`, twice that after a second failure in a row and so on up to
`RETRY_STANDBY_AT_MOST_SECONDS`, and its reads go to the primary (a read it failed runs again there:
`read_retried`); the first says so in the log and in `degraded`, naming the read DSN and the fix.
Nothing the primary can answer fails for the standby.
"""

import functools
import logging
import threading
import time
import weakref
from contextlib import ExitStack, contextmanager

from memvault.indexer.backend.base import IndexServerUnavailable
from memvault.indexer.backend.postgres.connection import TIMEOUT_KEY, ServerSession, require_psycopg, retried_once
from memvault.vault.errors import IndexUnavailable

READ_DSN_SETTING = "MEMVAULT_INDEX_READ_DSN (index.readDsn)"
#: a standby that failed is not tried again for this long, doubled after each failure in a row
#: up to the most (a host that drops packets costs the connect timeout each try)
RETRY_STANDBY_AFTER_SECONDS, RETRY_STANDBY_AT_MOST_SECONDS = 10.0, 300.0
_STANDBY_STATE = "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text"

log = logging.getLogger("memvault.index")


class StandbyFailed(IndexServerUnavailable):
    """The standby failed during a read (it went away, or cancelled the statement in a conflict
    with its replay): the standby is now left alone, and the same read again goes to the primary
    (`read_retried`)."""


def read_retried(method):
    """A read method of a backend with a ReadRoute: once more (on the primary) when the standby
    failed during it, and once more when the primary's connection was cut during it
    (connection.retried_once: a restart). Reads only: running one twice changes nothing."""

    @functools.wraps(method)
    def once_more(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except StandbyFailed:
            return method(*args, **kwargs)

    return retried_once(once_more)


def lsn_value(text: str | None) -> int:
    """A WAL position (`16/B374D848`) as a number (None: 0)."""
    if not text:
        return 0
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


class PrimaryState:
    """What this process has seen of one primary (one pool's DSN): the WAL position a standby
    must have replayed before this process reads there (its last write's, or what it last read
    on the primary), and the primary's position sampled every half bound (`_lag_bound`)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.required_lsn, self.lsn_unknown = 0, False
        self.samples: list[tuple[float, int]] = []  # (time, WAL position)
        self.routed_since: float | None = None

    def note(self, conn) -> None:
        """After a write (the pool's `after_write`) or a read on the primary: its WAL position
        now, at or past every commit this process has seen there (one round trip)."""
        try:
            position = lsn_value(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        except require_psycopg().Error:  # the write stands: reads stay on the primary until one notes it
            with self.lock:
                self.lsn_unknown = True
            return
        with self.lock:
            self.required_lsn, self.lsn_unknown = max(self.required_lsn, position), False


class StandbyState:
    """One standby (one pool's DSN) as this process found it: until when it is not tried, why,
    and the furthest replay position it showed."""

    def __init__(self):
        self.down_until, self.down_reason, self.confirmed_lsn = 0.0, None, 0
        self.failures = 0  # in a row: each doubles the wait before the next try


_PRIMARIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_STANDBYS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()


def _state_of(table, pool, kind):
    with _STATES_LOCK:
        found = table.get(pool)
        if found is None:
            found = table[pool] = kind()
        return found


class ReadRoute:
    """A session's reads: on the standby of `read_dsn` when it holds what this process wrote and
    read, else on `primary` (a ServerSession). Used as `with route() as conn:`, like a session;
    a call nested in one of the primary's own (a transaction) stays on the primary."""

    def __init__(self, primary: ServerSession, read_dsn: str, *, prepare=None, refusal=None, size=None):
        self.primary = primary
        self.standby = ServerSession(read_dsn, prepare=prepare, refusal=refusal, size=size,
                                     bounds=primary.pool.bounds, setting=READ_DSN_SETTING)  # fmt: skip
        self.seen = _state_of(_PRIMARIES, primary.pool, PrimaryState)
        self.found = _state_of(_STANDBYS, self.standby.pool, StandbyState)
        primary.pool.after_write = self.seen.note
        #: where the last read went: "standby" or "primary"; and how many went to each
        self.last = "primary"
        self.counts = {"standby": 0, "primary": 0}
        self._fallback = False  # the last read went to the primary because the standby failed

    @property
    def degraded(self) -> str | None:
        """Why the last read went to the primary instead of the standby (None: it did not)."""
        return self.found.down_reason if self._fallback else None

    @contextmanager
    def __call__(self):
        on_standby = False
        try:
            with ExitStack() as stack:  # the standby session's exit translates what the read raised
                conn = self._on_standby(stack)
                on_standby = conn is not None
                self.last = "standby" if on_standby else "primary"
                self.counts[self.last] += 1
                if on_standby:
                    yield conn
                    return
                nested = self.primary.holds()  # inside the primary's own call: its caller notes what it wrote
                conn = stack.enter_context(self.primary())
                yield conn
                if not nested:
                    self.seen.note(conn)  # what this read saw: a standby read must not go back behind it
        except StandbyFailed:
            raise
        except (IndexServerUnavailable, IndexUnavailable) as exc:
            if not on_standby:
                raise
            self._fell_back(str(exc))  # the next reads go to the primary
            raise StandbyFailed(self.degraded) from None

    def close(self) -> None:
        self.standby.close()

    def _on_standby(self, stack: ExitStack):
        """A standby connection that holds what this process wrote and read, entered on `stack`;
        None to read the primary."""
        if self.primary.holds():
            return None  # inside the primary's own call: its transaction, its snapshot
        self._fallback = time.monotonic() < self.found.down_until
        if self._fallback:
            return None
        inner = ExitStack()
        try:
            conn = inner.enter_context(self.standby())
        except IndexServerUnavailable as exc:
            self._fell_back(str(exc))
            return None
        try:
            behind = self._lag_bound()
            fresh = self._replayed(conn, behind)
        except require_psycopg().Error as exc:
            inner.close()  # a broken connection is closed when given back
            self._fell_back(f"the read replica stopped answering ({type(exc).__name__})")
            return None
        if not fresh:
            inner.close()
            return None
        self.found.failures = 0
        stack.enter_context(inner)
        return conn

    def _replayed(self, conn, behind: int) -> bool:
        """The standby has replayed every commit this process wrote or read on the primary (else
        False: the primary answers), and is not further behind than the bound (else it is left
        alone, as failed)."""
        seen, standby = self.seen, self.found
        with seen.lock:
            required, unknown = seen.required_lsn, seen.lsn_unknown
        if unknown:
            return False
        if max(required, behind) <= standby.confirmed_lsn:
            return True
        recovering, replayed = conn.execute(_STANDBY_STATE).fetchone()
        if not recovering:  # the read DSN reaches a primary (a failover, or on purpose): up to date
            standby.confirmed_lsn = 1 << 64
            return True
        position = lsn_value(replayed)
        standby.confirmed_lsn = max(standby.confirmed_lsn, position)
        if position < behind:
            bound = self.primary.pool.bounds.timeout_seconds
            self._fell_back(f"its replay is more than {bound} s behind the primary ({TIMEOUT_KEY}): check its "
                            "replication (pg_stat_replication on the primary; a paused replay: "
                            "SELECT pg_wal_replay_resume())")  # fmt: skip
            return False
        return position >= required

    def _lag_bound(self) -> int:
        """The primary's WAL position of `index.timeoutSeconds` ago, which the standby must have
        replayed (0: none known yet). A process that reads for longer than half the bound asks
        the primary for its position every half bound (one round trip); a shorter-lived one (a
        CLI call) never does, and reads a standby that lags, as any process between samples."""
        seen = self.seen
        bound, now = self.primary.pool.bounds.timeout_seconds, time.monotonic()
        with seen.lock:
            if seen.routed_since is None:
                seen.routed_since = now
            samples = seen.samples
            due = now - seen.routed_since >= bound / 2 and (not samples or now - samples[-1][0] >= bound / 2)
        if due:
            try:
                with self.primary() as conn:
                    position = lsn_value(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
            except (IndexServerUnavailable, IndexUnavailable):
                position = None  # the primary is away: the standby still answers
            if position is not None:
                with seen.lock:
                    seen.samples.append((now, position))
        with seen.lock:
            old = [sample for sample in seen.samples if now - sample[0] >= bound]
            if old:  # the newest sample past the bound is the one that counts
                seen.samples = seen.samples[len(old) - 1 :]
            return old[-1][1] if old else 0

    def _fell_back(self, reason: str) -> None:
        standby = self.found
        standby.failures += 1
        wait = min(RETRY_STANDBY_AT_MOST_SECONDS, RETRY_STANDBY_AFTER_SECONDS * 2 ** (standby.failures - 1))
        said = (f"reads went to the primary: the read replica failed ({reason}); fix or unset "
                f"{READ_DSN_SETTING}, the standby is tried again in {wait:g} s")  # fmt: skip
        if said != standby.down_reason:
            log.warning("memvault: %s", said)
        standby.down_until, standby.down_reason = time.monotonic() + wait, said
        self._fallback = True
