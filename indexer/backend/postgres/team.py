"""The team tables on the index server: completed turns from any machine, facts remembered from
any machine, and each vault's owner (docs/team.md).

    memvault_team_turns   the permanent run ledger: (vault, SHA-256 of the run id) → the payload's
                          SHA-256 and the intake record the client prepared; `projected_at` is
                          set once the vault's owner holds the turn in its own durable intake
    memvault_team_facts   remembered facts acknowledged by the server and not yet (or just)
                          projected into a daily note: recall reads them beside the rows, and a
                          sync or rebuild from the files never drops one
    memvault_team_owners  who owns each vault (host, pid, since) and the settings clients admit
                          with (write mode, tier, time zone)
    memvault_team_settings the same settings as the last build of the vault's index recorded
                          them (`memvault rebuild` on any machine, owner or not): a client reads
                          them when no owner has registered yet, so a vault its owner never
                          started (built from a checkout, by an admin) still answers recall

One statement answers an admission: `INSERT … ON CONFLICT (vault, run_hash) DO UPDATE SET
run_hash = EXCLUDED.run_hash RETURNING (xmax = 0), payload_sha256`. The no-op update makes the
conflicting row come back (locked, so racing clients serialise on it): a fresh insert has no
xmax, and the stored payload digest says duplicate or conflict. `ON CONFLICT DO NOTHING` plus a
lookup returns no row at all for a racing caller whose competitor has not committed yet.

The owner, once idle, raises `sleeping` on its row and LISTENs on the vault's channel; the
admission (and remember) statement reads that flag in the same statement, and only a client
that met a sleeping owner sends the NOTIFY, after its commit, from a thread and connection of its
own (`Ringer`: the write answers after one round trip either way). A busy owner
is never rung, so admissions never take NOTIFY's commit-serialising lock under load.

Privileges: each role does only its job. Reading a vault's team rows needs its reader role
(memvault_read_<name>); its writer role (memvault_write_<name>, granted the reader role) may
insert turns and facts, only into the columns a client sends, and update nothing but `touch`, a
column that can hold only true: the no-op update an admission's ON CONFLICT makes to get the row
back. Projection state (projected_at, refused, the admission times) is the owner's alone, and no
client role deletes; row-level security keeps each role to its vaults' rows. The owner connects
as the tables' owner. The owner fence (`OwnerLock`) is a lock on a view only that role may lock.
"""

import json
import threading
from datetime import datetime

from memvault.indexer.backend.base import IndexServerUnavailable
from memvault.indexer.backend.postgres import schema
from memvault.indexer.backend.postgres.connection import (
    ServerSession,
    _bounds_for,
    connect,
    owner_dsn_checked,
    require_psycopg,
    retried_once,
    unreachable_message,
)
from memvault.indexer.backend.postgres.replica import ReadRoute, read_retried
from memvault.vault.errors import IndexUnavailable, VaultError, VaultLocked

WRITER_ROLE_PREFIX = "memvault_write_"
_TEAM_TABLES = ("memvault_team_turns", "memvault_team_facts", "memvault_team_owners", "memvault_team_settings")
_DDL = [
    """CREATE TABLE IF NOT EXISTS memvault_team_turns (
        vault text NOT NULL,
        run_hash text NOT NULL,
        payload_sha256 text NOT NULL,
        record bytea NOT NULL,
        admitted_at timestamptz NOT NULL DEFAULT now(),
        projected_at timestamptz,
        PRIMARY KEY (vault, run_hash))""",
    # the one column a writer may update (see the module docstring), on servers made before it too
    "ALTER TABLE memvault_team_turns ADD COLUMN IF NOT EXISTS touch boolean NOT NULL DEFAULT true CHECK (touch)",
    # why the owner set a turn aside unprojected (a record it cannot read), with projected_at set
    "ALTER TABLE memvault_team_turns ADD COLUMN IF NOT EXISTS refused text",
    # the owner's start finds them without reading the vault's whole ledger
    "CREATE INDEX IF NOT EXISTS memvault_team_turns_refused ON memvault_team_turns (vault) WHERE refused IS NOT NULL",
    """CREATE INDEX IF NOT EXISTS memvault_team_turns_waiting ON memvault_team_turns (vault, admitted_at)
        WHERE projected_at IS NULL""",
    """CREATE TABLE IF NOT EXISTS memvault_team_facts (
        vault text NOT NULL,
        content_hash text NOT NULL,
        id text NOT NULL,
        fact text NOT NULL,
        at timestamptz NOT NULL,
        relpath text NOT NULL,
        acknowledged_at timestamptz NOT NULL DEFAULT now(),
        projected_at timestamptz,
        PRIMARY KEY (vault, content_hash))""",
    "ALTER TABLE memvault_team_facts ADD COLUMN IF NOT EXISTS touch boolean NOT NULL DEFAULT true CHECK (touch)",
    """CREATE TABLE IF NOT EXISTS memvault_team_owners (
        vault text PRIMARY KEY,
        host text NOT NULL,
        pid integer NOT NULL,
        started_at timestamptz NOT NULL DEFAULT now(),
        settings jsonb NOT NULL)""",
    "ALTER TABLE memvault_team_owners ADD COLUMN IF NOT EXISTS sleeping boolean NOT NULL DEFAULT false",
    """CREATE TABLE IF NOT EXISTS memvault_team_settings (
        vault text PRIMARY KEY,
        settings jsonb NOT NULL,
        built_at timestamptz NOT NULL DEFAULT now())""",
    *(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY" for table in _TEAM_TABLES),
]
_READS = (f"pg_has_role(current_user, '{schema.READER_ROLE_PREFIX}' || vault, 'MEMBER') OR "
          f"pg_has_role(current_user, '{WRITER_ROLE_PREFIX}' || vault, 'MEMBER')")  # fmt: skip
_WRITES = f"pg_has_role(current_user, '{WRITER_ROLE_PREFIX}' || vault, 'MEMBER')"
_POLICIES = {
    **{(table, f"{table}_read"): f"CREATE POLICY {table}_read ON {table} FOR SELECT USING ({_READS})"
       for table in _TEAM_TABLES},
    **{(table, f"{table}_insert"): f"CREATE POLICY {table}_insert ON {table} FOR INSERT WITH CHECK ({_WRITES})"
       for table in ("memvault_team_turns", "memvault_team_facts")},
    **{(table, f"{table}_update"): f"CREATE POLICY {table}_update ON {table} FOR UPDATE USING ({_WRITES}) "
       f"WITH CHECK ({_WRITES})" for table in ("memvault_team_turns", "memvault_team_facts")},
}  # fmt: skip
#: the columns a client's statement fills: a writer may insert these and no others
_CLIENT_COLUMNS = {
    "memvault_team_turns": ("vault", "run_hash", "payload_sha256", "record"),
    "memvault_team_facts": ("vault", "content_hash", "id", "fact", "at", "relpath"),
}
#: columns added after the tables were first made (their presence says the DDL has run)
_ADDED_COLUMNS = (("memvault_team_turns", "touch"), ("memvault_team_turns", "refused"),
                  ("memvault_team_facts", "touch"), ("memvault_team_owners", "sleeping"))  # fmt: skip
#: the owner fence of a vault: a view of no table (VACUUM and ANALYZE pass it by), granted to no role
FENCE_PREFIX = "memvault_fence_"
#: how long a starting owner waits for the fence (not NOWAIT: a statement of a role without rights,
#: COMMENT ON for one, holds the lock for the moment before its privilege check; a queued request
#: is served after that moment, where NOWAIT would take a swarm of them for a running owner)
FENCE_WAIT_MS = 2000

#: text and binary placeholders (no type sniffing per call), prepared once per connection; the
#: CTE's answer carries whether the vault's owner sleeps waiting for a ring (the module docstring)
ADMIT_SQL = (
    "WITH t AS (INSERT INTO memvault_team_turns AS t (vault, run_hash, payload_sha256, record) VALUES (%t, %t, %t, %b) "
    "ON CONFLICT (vault, run_hash) DO UPDATE SET touch = true "
    "RETURNING (t.xmax = 0) AS inserted, t.payload_sha256, "
    "t.projected_at IS NOT NULL AND t.refused IS NULL AS projected) "
    "SELECT t.inserted, t.payload_sha256, t.projected, "
    "coalesce((SELECT o.sleeping FROM memvault_team_owners o WHERE o.vault = %t), false) FROM t"
)
_REMEMBER_SQL = (
    "WITH f AS (INSERT INTO memvault_team_facts AS f (vault, content_hash, id, fact, at, relpath) "
    "VALUES (%t, %t, %t, %t, %s, %t) "
    "ON CONFLICT (vault, content_hash) DO UPDATE SET touch = true "
    "RETURNING (f.xmax = 0) AS inserted, f.id, f.relpath, f.fact) "
    "SELECT f.inserted, f.id, f.relpath, f.fact, "
    "coalesce((SELECT o.sleeping FROM memvault_team_owners o WHERE o.vault = %t), false) FROM f"
)


def writer_role(vault: str) -> str:
    return WRITER_ROLE_PREFIX + vault


def fence_view(vault: str) -> str:
    return FENCE_PREFIX + vault


def ensure_team_schema(conn) -> None:
    """The team tables and their policies, idempotently (under the schema lock). A server that
    holds them all is left alone: the DDL takes table locks, which a role with no rights at all
    can hold up (a prepared SELECT in an open transaction locks its table before the privilege
    check), so running it at every owner start let any such role stall the start."""
    if _team_schema_present(conn):
        return
    with conn.transaction():
        schema.lock_schema(conn)
        for statement in _DDL:
            conn.execute(statement)
        for (table, policy), statement in _POLICIES.items():
            found = conn.execute("SELECT 1 FROM pg_policies WHERE tablename = %s AND policyname = %s",
                                 (table, policy)).fetchone()  # fmt: skip
            if found is None:
                conn.execute(statement)


def _team_schema_present(conn) -> bool:
    """Every team table, column, policy and row-level security switch is there (catalogs only)."""
    tables, columns = zip(*_ADDED_COLUMNS, strict=True)
    policy_tables, policies = zip(*_POLICIES, strict=True)
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pg_class WHERE oid = ANY(SELECT to_regclass(t) FROM unnest(%s::text[]) AS t) "
        "AND relrowsecurity), "
        "(SELECT count(*) FROM pg_attribute a JOIN unnest(%s::text[], %s::text[]) AS c (t, col) "
        "ON a.attrelid = to_regclass(c.t) AND a.attname = c.col AND NOT a.attisdropped), "
        "(SELECT count(*) FROM pg_policies p JOIN unnest(%s::text[], %s::text[]) AS w (t, pol) "
        "ON p.tablename = w.t AND p.policyname = w.pol), "
        "to_regclass('memvault_team_turns_refused') IS NOT NULL",
        (list(_TEAM_TABLES), list(tables), list(columns), list(policy_tables), list(policies)),
    ).fetchone()
    return tuple(row) == (len(_TEAM_TABLES), len(_ADDED_COLUMNS), len(_POLICIES), True)


def ensure_team_vault(conn, vault: str) -> None:
    """The vault's writer role (granted its reader role) and its rights on the team tables, made
    exact at every owner start (GRANT and REVOKE take no table lock): a server made by an earlier
    memvault had granted writers UPDATE on every column."""
    from psycopg import sql

    schema.check_vault_name(vault)
    writer, reader = sql.Identifier(writer_role(vault)), sql.Identifier(schema.reader_role(vault))
    with conn.transaction():
        schema.lock_schema(conn)
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (writer_role(vault),)).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(writer))
            conn.execute(sql.SQL("GRANT {} TO {}").format(reader, writer))
        for table in _TEAM_TABLES:
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(table), reader))
        for table, columns in _CLIENT_COLUMNS.items():
            target = sql.Identifier(table)
            # a table-wide privilege covers every column: revoking it takes the column grants too
            conn.execute(sql.SQL("REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {} FROM {}").format(target, writer))
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(target, writer))
            conn.execute(sql.SQL("GRANT INSERT ({}) ON {} TO {}").format(
                sql.SQL(", ").join(map(sql.Identifier, columns)), target, writer))  # fmt: skip
            conn.execute(sql.SQL("GRANT UPDATE (touch) ON {} TO {}").format(target, writer))


class TeamServer:
    """One vault's team rows, over one connection used under a lock; a dropped connection is
    replaced on the next call (the call that met it fails with IndexServerUnavailable)."""

    def __init__(self, dsn: str, vault: str, *, create: bool = False, read_dsn: str = ""):
        """`read_dsn`: a standby the facts waiting for the owner are read from (replica.py), as the
        rows they are recalled beside (a fact the owner forgot because the rows hold it is then
        never missing from both)."""
        require_psycopg()
        self.dsn = dsn
        self.vault = schema.check_vault_name(vault)
        self._session = ServerSession(dsn, refusal=self._refusal)
        self._reads = ReadRoute(self._session, read_dsn, refusal=self._refusal) if read_dsn else self._session
        self._client_cursor = None  # (connection, its cursor): admission's and remember's statements
        self._ringer = None  # the Ringer, from the first write that met a sleeping owner
        #: prepared once per connection, except behind a transaction-mode pooler (index.pooler)
        self._prepare = None if self._session.pool.bounds.pooled else True
        if create:
            owner_dsn_checked(dsn, self._session.pool.bounds, f"vault {self.vault!r}'s owner")
            with self._session(wrote=True) as conn:
                schema.ensure_schema(conn)
                schema.ensure_vault(conn, self.vault)
                ensure_team_schema(conn)
                ensure_team_vault(conn, self.vault)

    def _refusal(self, exc) -> IndexUnavailable | None:
        """The team tables' own refusals, in words that name the fix."""
        psycopg = require_psycopg()
        if isinstance(exc, (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn)):
            return IndexUnavailable(f"the index server holds no team tables (of this version) yet: start vault "
                                    f"{self.vault!r}'s owner once on its home machine (`memvault serve`)")  # fmt: skip
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return IndexUnavailable(f"this role may not use vault {self.vault!r} on the index server: ask its admin "
                                    f"to GRANT {writer_role(self.vault)} TO your role")  # fmt: skip
        return None

    def close(self) -> None:
        if self._ringer is not None:
            self._ringer.close()  # a ring still to send goes first (a CLI admit exits right after)
        self._session.close()
        if self._reads is not self._session:
            self._reads.close()

    # --- clients ---------------------------------------------------------------------------------

    @retried_once
    def ping(self) -> None:
        with self._session() as conn:
            conn.execute("SELECT 1").fetchone()

    @retried_once  # keyed by the run id: a turn sent again is answered from the ledger, never stored twice
    def admit(self, run_hash: str, payload_sha256: str, record: bytes) -> tuple[bool, str, bool]:
        """(inserted, the payload digest the ledger holds, projected by the owner): one statement,
        and a NOTIFY after it only when a new turn met a sleeping owner."""
        with self._session(wrote=True) as conn:
            row = self._cursor(conn).execute(ADMIT_SQL, (self.vault, run_hash, payload_sha256, record, self.vault),
                                             prepare=self._prepare).fetchone()  # fmt: skip
        if row[0] and row[3]:
            self._ring()
        return bool(row[0]), row[1], bool(row[2])

    @retried_once  # keyed by the fact's content hash, as admit by the run id
    def remember(
        self, content_hash: str, block_id: str, fact: str, at: datetime, relpath: str
    ) -> tuple[bool, str, str, str]:
        """(inserted, id, note path, fact) of the fact this content hash holds: one statement
        (and a ring when it met a sleeping owner)."""
        with self._session(wrote=True) as conn:
            row = self._cursor(conn).execute(_REMEMBER_SQL, (self.vault, content_hash, block_id, fact, at, relpath,
                                                             self.vault), prepare=self._prepare).fetchone()  # fmt: skip
        if row[0] and row[4]:
            self._ring()
        return bool(row[0]), row[1], row[2], row[3]

    def _cursor(self, conn):
        """One cursor per connection for the clients' statements (psycopg keeps them prepared)."""
        cached = self._client_cursor
        if cached is None or cached[0] is not conn:
            cached = self._client_cursor = (conn, conn.cursor())
        return cached[1]

    def _ring(self) -> None:
        """Wake the vault's sleeping owner, off the caller's path: the write before it is committed
        and answered either way, and a ring that fails is a delay (the owner looks again within
        a second), not a loss."""
        if self._ringer is None:
            self._ringer = Ringer(self.dsn, self.vault)
        self._ringer.ring()

    @retried_once
    def projected(self, run_hash: str) -> bool | None:
        """Whether the owner has the turn in its files (None: the ledger holds no such run)."""
        with self._session() as conn:
            row = conn.execute("SELECT projected_at IS NOT NULL AND refused IS NULL FROM memvault_team_turns "
                               "WHERE vault = %s AND run_hash = %s", (self.vault, run_hash)).fetchone()  # fmt: skip
        return None if row is None else bool(row[0])

    @read_retried
    def waiting_facts(self) -> list[tuple[str, str, str, datetime, str, bool]]:
        """(content hash, id, fact, at, note path, projected) of every fact not yet seen in the rows."""
        with self._reads() as conn:
            return conn.execute("SELECT content_hash, id, fact, at, relpath, projected_at IS NOT NULL "
                                "FROM memvault_team_facts WHERE vault = %s "
                                "ORDER BY acknowledged_at, content_hash", (self.vault,)).fetchall()  # fmt: skip

    def counts(self) -> dict:
        """Content-free counts of the team rows (inspect and health, from any machine)."""
        with self._session() as conn:
            turns = conn.execute(
                "SELECT count(*) FILTER (WHERE projected_at IS NULL), "
                "count(*) FILTER (WHERE projected_at IS NOT NULL AND refused IS NULL), "
                "extract(epoch FROM now() - min(admitted_at) FILTER (WHERE projected_at IS NULL)), "
                "count(*) FILTER (WHERE refused IS NOT NULL) "
                "FROM memvault_team_turns WHERE vault = %s", (self.vault,)).fetchone()  # fmt: skip
            facts = conn.execute("SELECT count(*) FILTER (WHERE projected_at IS NULL), count(*) "
                                 "FROM memvault_team_facts WHERE vault = %s", (self.vault,)).fetchone()  # fmt: skip
        return {"turnsWaiting": turns[0], "turnsProjected": turns[1],
                "oldestWaitingSeconds": None if turns[2] is None else round(float(turns[2]), 1),
                "turnsRefused": turns[3], "factsWaiting": facts[0], "factsHeld": facts[1]}  # fmt: skip

    def owner(self) -> dict | None:
        """{"host", "pid", "startedAt", "settings"} of the vault's last registered owner, or None."""
        with self._session() as conn:
            row = conn.execute("SELECT host, pid, started_at, settings FROM memvault_team_owners WHERE vault = %s",
                               (self.vault,)).fetchone()  # fmt: skip
        if row is None:
            return None
        return {"host": row[0], "pid": row[1], "startedAt": row[2].isoformat(), "settings": _json(row[3])}

    def vault_settings(self) -> dict | None:
        """The settings a client reads the vault with (write mode, tier, time zone, nested years):
        its registered owner's, else those its index's last build recorded (a vault whose owner
        never started: built by `memvault rebuild` on another machine or by another role), else
        None. One round trip."""
        psycopg = require_psycopg()
        with self._session() as conn:
            try:
                row = conn.execute("SELECT coalesce((SELECT settings FROM memvault_team_owners WHERE vault = %(v)s), "
                                   "(SELECT settings FROM memvault_team_settings WHERE vault = %(v)s))",
                                   {"v": self.vault}).fetchone()  # fmt: skip
            except psycopg.errors.UndefinedTable:  # a server whose owner ran an earlier memvault
                row = conn.execute("SELECT settings FROM memvault_team_owners WHERE vault = %s",
                                   (self.vault,)).fetchone()  # fmt: skip
        return None if row is None or row[0] is None else _json(row[0])

    def record_build_settings(self, settings: dict) -> None:
        """What a build of the vault's index read its files with (the tables' owner only: a
        rebuild, on any machine): clients read them until an owner registers its own."""
        with self._session(wrote=True) as conn:
            conn.execute("INSERT INTO memvault_team_settings (vault, settings) VALUES (%s, %s) ON CONFLICT (vault) "
                         "DO UPDATE SET settings = EXCLUDED.settings, built_at = now()",
                         (self.vault, json.dumps(settings)))  # fmt: skip

    def owner_alive(self) -> bool:
        """Whether some session holds the vault's owner fence now (pg_locks: any role reads it)."""
        with self._session() as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND relation = to_regclass(quote_ident(%s)) "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND mode = 'ShareUpdateExclusiveLock' AND granted",
                (fence_view(self.vault),),
            ).fetchone()
        return bool(row[0])

    # --- the owner ------------------------------------------------------------------------------

    def claim_turns(self, limit: int, project) -> int:
        """Claim up to `limit` waiting turns (FOR UPDATE SKIP LOCKED), hand them to `project`
        ([(run hash, record bytes)] → the run hashes now in the owner's files, or (those, {run
        hash: why} of records it cannot read)), and mark those projected in one statement, all in
        one transaction: a crash anywhere leaves them waiting, and projecting a turn again finds it
        in its note (run-derived or content id) and writes nothing. A record the owner cannot read
        (SQL written by hand, or a newer memvault's format) is set aside with its reason until the
        owner's next start (`register_owner`), so that a batch of them never holds up the turns
        behind it. The number marked."""
        with self._session(wrote=True) as conn, conn.transaction():
            rows = conn.execute("SELECT run_hash, record FROM memvault_team_turns "
                                "WHERE vault = %s AND projected_at IS NULL "
                                "ORDER BY admitted_at, run_hash LIMIT %s FOR UPDATE SKIP LOCKED",
                                (self.vault, limit)).fetchall()  # fmt: skip
            if not rows:
                return 0
            done = project([(run_hash, bytes(record)) for run_hash, record in rows])
            done, unreadable = done if isinstance(done, tuple) else (done, {})
            if done:
                conn.execute("UPDATE memvault_team_turns SET projected_at = now() "
                             "WHERE vault = %s AND run_hash = ANY(%s)", (self.vault, list(done)))  # fmt: skip
            if unreadable:
                hashes, reasons = zip(*sorted(unreadable.items()), strict=True)
                conn.execute("UPDATE memvault_team_turns t SET projected_at = now(), refused = r.reason "
                             "FROM unnest(%s::text[], %s::text[]) AS r (run_hash, reason) "
                             "WHERE t.vault = %s AND t.run_hash = r.run_hash",
                             (list(hashes), list(reasons), self.vault))  # fmt: skip
        return len(done)

    def set_sleeping(self, sleeping: bool) -> None:
        """The owner's doorbell flag: raised while it waits on the vault's channel, lowered once busy."""
        with self._session(wrote=True) as conn:
            conn.execute("UPDATE memvault_team_owners SET sleeping = %s WHERE vault = %s AND sleeping <> %s",
                         (sleeping, self.vault, sleeping))  # fmt: skip

    def mark_facts(self, content_hashes: list[str], *, forget: list[str]) -> None:
        """Facts written into their note (`content_hashes`), and facts the rows now hold (`forget`)."""
        with self._session(wrote=True) as conn, conn.transaction():
            if content_hashes:
                conn.execute("UPDATE memvault_team_facts SET projected_at = now() "
                             "WHERE vault = %s AND content_hash = ANY(%s) AND projected_at IS NULL",
                             (self.vault, content_hashes))  # fmt: skip
            if forget:
                conn.execute("DELETE FROM memvault_team_facts WHERE vault = %s AND content_hash = ANY(%s) "
                             "AND projected_at IS NOT NULL", (self.vault, forget))  # fmt: skip

    def register_owner(self, host: str, pid: int, settings: dict) -> None:
        """The owner's registration at its start; turns an earlier owner set aside wait again, so
        that a record only a newer memvault reads is projected once this owner runs that version."""
        with self._session(wrote=True) as conn:
            conn.execute("UPDATE memvault_team_turns SET projected_at = NULL, refused = NULL "
                         "WHERE vault = %s AND refused IS NOT NULL", (self.vault,))  # fmt: skip
            conn.execute("INSERT INTO memvault_team_owners (vault, host, pid, settings) VALUES (%s, %s, %s, %s) "
                         "ON CONFLICT (vault) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, "
                         "started_at = now(), settings = EXCLUDED.settings, sleeping = false",
                         (self.vault, host, pid, json.dumps(settings)))  # fmt: skip

    def update_settings(self, settings: dict) -> None:
        with self._session(wrote=True) as conn:
            conn.execute(
                "UPDATE memvault_team_owners SET settings = %s WHERE vault = %s", (json.dumps(settings), self.vault)
            )


def _json(value):
    return value if isinstance(value, dict) else json.loads(value)


def notify_channel(vault: str) -> str:
    """The vault's LISTEN/NOTIFY channel (an identifier of at most 63 bytes)."""
    return f"memvault_team_{vault}"


class Ringer:
    """Sends a client's NOTIFY on a thread and connection of its own, so an admission answers
    after one round trip even when it must wake the owner; rings that pile up go as one."""

    def __init__(self, dsn: str, vault: str):
        self._session = ServerSession(dsn)
        self._channel = notify_channel(vault)
        self._cond = threading.Condition()
        self._pending = self._closing = False
        self._thread = threading.Thread(target=self._run, name="memvault-team-ring", daemon=True)
        self._thread.start()

    def ring(self) -> None:
        with self._cond:
            self._pending = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return  # closing, nothing left to send
                self._pending = False
            try:
                with self._session() as conn:
                    conn.execute("SELECT pg_notify(%t, '')", (self._channel,))
            except VaultError:  # the server away: the owner's own look finds the write
                pass

    def close(self, timeout: float = 2.0) -> None:
        """Send a ring still due (bounded by `timeout`), then stop."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)
        self._session.close()


class TeamListener:
    """The owner's LISTEN connection on its vault's channel (a connection of its own: the server
    delivers a notification only to the session that listens)."""

    def __init__(self, dsn: str, vault: str):
        self.dsn, self.vault = dsn, vault
        self._conn = None

    def listen(self) -> None:
        """Connect and LISTEN (once; again after a dropped connection)."""
        psycopg = require_psycopg()
        from psycopg import sql

        if self._conn is not None and not self._conn.closed:
            return
        conn = connect(self.dsn, autocommit=True)
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(notify_channel(self.vault))))
        except psycopg.Error as exc:
            conn.close()
            raise IndexServerUnavailable(unreachable_message(self.dsn, exc)) from None
        self._conn = conn

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds` for a ring; True when one came (older rings are taken too)."""
        psycopg = require_psycopg()
        self.listen()
        try:
            rang = False
            for _ in self._conn.notifies(timeout=seconds, stop_after=1):
                rang = True
            for _ in self._conn.notifies(timeout=0):  # rings that arrived together: one round serves them
                pass
            return rang
        except psycopg.Error as exc:
            self.close()
            raise IndexServerUnavailable(unreachable_message(self.dsn, exc)) from None

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a dead server closed it already
                pass


class OwnerLock:
    """The server-side owner fence: a lock on the vault's fence view (`memvault_fence_<name>`, a
    view of no table, owned by the role that owns memvault's tables and granted to no other),
    taken in SHARE UPDATE EXCLUSIVE mode in a transaction that the fence's own connection keeps
    open for as long as the owner runs. The server frees it when that session ends, so a killed
    owner (or its machine) lets the next owner start once the server sees the connection gone.

    Why not a session advisory lock (what it was): any role that may connect can take any
    advisory key and keep it, and an owner could not start. LOCK in this mode needs UPDATE,
    DELETE or TRUNCATE on the view, which no client role has; a statement that reaches the view
    without rights (a prepared SELECT or INSERT in an open transaction, which lock before the
    privilege check) takes a weaker mode that this one does not wait for. The transaction that
    holds it takes no transaction id and keeps no snapshot between statements (READ COMMITTED),
    so it holds back no VACUUM; a view is passed by a database-wide VACUUM or ANALYZE, which
    would wait behind a table's lock. The idle-in-transaction and transaction time limits are
    turned off for this one session."""

    def __init__(self, dsn: str, vault: str):
        self.dsn = dsn
        self.vault = schema.check_vault_name(vault)
        self._conn = None

    def acquire(self, host: str, pid: int) -> None:
        """Take the fence, or VaultLocked naming the owner that holds it (host, pid)."""
        psycopg = require_psycopg()
        owner_dsn_checked(self.dsn, _bounds_for(self.dsn), f"vault {self.vault!r}'s owner fence")
        conn = connect(self.dsn, autocommit=True)
        try:
            conn.execute(
                "SELECT set_config('application_name', %s, false)", (f"memvault owner {self.vault} pid {pid}"[:63],)
            )
            conn.execute("SELECT set_config(name, '0', false) FROM pg_settings "
                         "WHERE name IN ('idle_in_transaction_session_timeout', 'transaction_timeout')")  # fmt: skip
            _ensure_fence_view(conn, self.vault)
            conn.execute("BEGIN")
            conn.execute(f"SET LOCAL lock_timeout = {FENCE_WAIT_MS}")
            conn.execute(_lock_fence_sql(self.vault))
        except psycopg.errors.LockNotAvailable:
            holder = _owner_row(conn, self.vault)
            conn.close()
            who = (
                "another machine"
                if holder is None
                else f"pid {holder[1]} on host {holder[0]} (since {holder[2]:%Y-%m-%d %H:%M:%S %Z})"
            )
            raise VaultLocked(f"vault {self.vault!r} already has an owner on the index server: {who}. "
                              "One owner per vault: stop that one (`memvault engine stop` on its machine), "
                              f"or use this machine as a client: `memvault --remote {self.vault} …`"
                              ) from None  # fmt: skip
        except psycopg.errors.InsufficientPrivilege:
            conn.close()
            raise IndexUnavailable(f"this role may not own vault {self.vault!r} on the index server (it may not "
                                   f"lock {fence_view(self.vault)}): run the owner as the role that owns memvault's "
                                   "tables, or connect this machine as a client: "
                                   f"`memvault --remote {self.vault} …`") from None  # fmt: skip
        except psycopg.Error as exc:
            conn.close()
            raise IndexServerUnavailable(unreachable_message(self.dsn, exc)) from None
        self._conn = conn

    def held(self) -> bool:
        """Whether the fence's session is still alive (one round trip): a server restarted hard
        ends every session, and with it the lock."""
        conn = self._conn
        if conn is None or conn.closed:
            return False
        try:
            conn.execute("SELECT 1").fetchone()
            return True
        except Exception:  # noqa: BLE001 - any failure means the session (and the lock) is gone
            self.release()
            return False

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()  # the session's end frees the lock
            except Exception:  # noqa: BLE001 - a dead server freed it already
                pass


def _lock_fence_sql(vault: str):
    from psycopg import sql

    return sql.SQL("LOCK TABLE {} IN SHARE UPDATE EXCLUSIVE MODE").format(sql.Identifier(fence_view(vault)))


def _ensure_fence_view(conn, vault: str) -> None:
    """The vault's fence view, made once by the first owner (CREATE OR REPLACE would wait for the
    lock a running owner holds); no role is granted anything on it."""
    psycopg = require_psycopg()
    from psycopg import sql

    view = fence_view(vault)
    if conn.execute("SELECT to_regclass(quote_ident(%s))", (view,)).fetchone()[0] is not None:
        return
    try:
        with conn.transaction():
            conn.execute(sql.SQL("CREATE VIEW {} AS SELECT 1 AS fence").format(sql.Identifier(view)))
            conn.execute(sql.SQL("REVOKE ALL ON {} FROM PUBLIC").format(sql.Identifier(view)))
    except (psycopg.errors.DuplicateTable, psycopg.errors.UniqueViolation):
        pass  # another owner made it at the same moment


def _owner_row(conn, vault: str):
    """(host, pid, since) of the vault's registered owner, or None (not registered yet)."""
    try:
        conn.execute("ROLLBACK")
        return conn.execute("SELECT host, pid, started_at FROM memvault_team_owners WHERE vault = %s",
                            (vault,)).fetchone()  # fmt: skip
    except Exception:  # noqa: BLE001 - no team tables yet (the first owner is starting): say "another machine"
        return None
