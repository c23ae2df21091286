"""Each role on the index server does only its job (docs/team.md, "Roles"), attacked with real
connections as each role a team grants: a vault's reader, its writer, and a role that may only
connect. Another vault's rows in every table, the columns a writer must not update, the owner
fence and the schema lock. The attacks are shown to be honest: with row-level security off, a
policy made permissive or a grant widened on a private database, the same attack succeeds.

Every attack runs in a transaction that is rolled back, so a breach leaves nothing behind."""

import hashlib
import json
import threading
import uuid
from datetime import UTC, datetime

import psycopg
import pytest

from memvault.indexer.backend.base import BackendDelta
from memvault.indexer.backend.postgres import schema, team
from memvault.indexer.backend.postgres.engine import PostgresBackend
from memvault.indexer.backend.postgres.team import OwnerLock, TeamServer
from memvault.vault.errors import IndexUnavailable, VaultLocked
from tests.test_backend_conformance import EMBEDDING, NOTE, record, state, writes

pytestmark = pytest.mark.one_engine("the server's roles, grants and row-level security: the PostgreSQL engine's own")

REFUSED = "refused"
#: the tables every attack is tried on, and the column naming their vault (memvault_schema has none)
TABLES = {
    "memvault_vaults": "name",
    "memvault_generations": "vault",
    "memvault_files": "vault",
    "memvault_rows": "vault",
    "memvault_postings": "vault",
    "memvault_terms": "vault",
    "memvault_team_turns": "vault",
    "memvault_team_facts": "vault",
    "memvault_team_owners": "vault",
    "memvault_team_settings": "vault",
    "memvault_schema": None,
}
#: the column an update attack sets to itself: one the writer may update where there is one
SET_COLUMN = {"memvault_team_turns": "touch", "memvault_team_facts": "touch", "memvault_schema": "version"}


class Server:
    """A private database holding two vaults, `mine` and `theirs`, each with rows in every table,
    and a login role per job: `reader` and `writer` of `mine`, and `stranger` (CONNECT only)."""

    def __init__(self, postgres_server):
        self.dsn = postgres_server.new_database()  # the owner: the tables' owner (here a superuser)
        tag = uuid.uuid4().hex[:8]  # roles are the whole server's: names no other test uses
        self.mine, self.theirs = f"pv{tag}-mine", f"pv{tag}-theirs"
        for vault in (self.mine, self.theirs):
            self._fill(vault)
        self.roles, self.names = {}, {}
        for job, grant in (("reader", schema.reader_role(self.mine)), ("writer", team.writer_role(self.mine)),
                           ("stranger", None)):  # fmt: skip
            name = f"pv{tag}_{job}"
            self.roles[job], self.names[job] = postgres_server.create_role(self.dsn, name), name
            if grant is not None:
                self.owner(f'GRANT "{grant}" TO "{name}"')
        self.leaves = self._leaves(self.theirs)
        # the rows of each table a role may see or touch without a filter: its own vault's, if any
        self.own = {job: {table: self._count(table, self.mine) if job != "stranger" and vault_column(table) else 0
                          for table in self.targets()} for job in self.roles}  # fmt: skip
        for table in self.targets():  # "0 rows seen" means something only where there are rows to see
            assert self._count(table, self.theirs) > 0, table

    def _fill(self, vault: str) -> None:
        backend = PostgresBackend(self.dsn, vault)
        generation = backend.create_generation(EMBEDDING)
        records = [record(0, f"The {vault} team deploys on Fridays."), record(1, f"{vault} keeps its budget here.")]
        backend.apply(generation, BackendDelta((), writes(records), {NOTE: state(len(records))}))
        backend.activate_generation(generation)
        backend.close()
        server = TeamServer(self.dsn, vault, create=True)
        server.admit(hashlib.sha256(vault.encode()).hexdigest(), "0" * 64, b"{}")
        server.remember(hashlib.sha256(b"fact" + vault.encode()).hexdigest(), "m-fact", f"{vault} fact.",
                        datetime(2026, 12, 1, tzinfo=UTC), "daily/2026-12-01.md")  # fmt: skip
        server.register_owner("home", 4242, {"writeMode": "direct", "tier": "lite", "timeZone": "UTC"})
        server.record_build_settings({"writeMode": "direct", "tier": "lite", "timeZone": "UTC"})
        server.close()

    def owner(self, statement: str, params=()):
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else None

    def _leaves(self, vault: str) -> list[str]:
        """The vault's partitions and generation leaves, which a query may name directly."""
        generation = self.owner("SELECT serving FROM memvault_vaults WHERE name = %s", (vault,))[0][0]
        names = [(schema.vault_table(vault, table), schema.leaf_table(vault, generation, table))
                 for table in schema.PARTITIONED]  # fmt: skip
        return [name for pair in names for name in pair]

    def targets(self) -> list[str]:
        return [*TABLES, *self.leaves]

    def _count(self, table: str, vault: str) -> int:
        column = vault_column(table)
        if column is None:
            return self.owner(f'SELECT count(*) FROM "{table}"')[0][0]
        return self.owner(f'SELECT count(*) FROM "{table}" WHERE "{column}" = %s', (vault,))[0][0]

    def connect(self, job: str):
        return psycopg.connect(self.roles[job], autocommit=True)


def vault_column(table: str) -> str | None:
    return TABLES.get(table, "vault")


def attempt(conn, statement: str, params=()) -> int | str:
    """The rows a statement saw or touched, or REFUSED (a permission or policy error), in a
    transaction that is rolled back either way."""
    try:
        with conn.transaction(force_rollback=True):
            cur = conn.execute(statement, params)
            return cur.fetchone()[0] if statement.lstrip().startswith("SELECT") else cur.rowcount
    except psycopg.errors.InsufficientPrivilege:
        return REFUSED


def breaches(server: Server, job: str, table: str, op: str) -> list[str]:
    """What one attack on the other vault's rows of `table` got past the server (empty: nothing).
    Each op is tried with a filter on the other vault and without any (a query that forgets its
    WHERE): the second may touch no more rows than the role's own vault holds."""
    column, own = vault_column(table), server.own[job][table]
    other = server.theirs
    found = []
    with server.connect(job) as conn:
        if op == "read":
            tries = [(f'SELECT count(*) FROM "{table}"', (), own)]
            if column is not None:
                tries.append((f'SELECT count(*) FROM "{table}" WHERE "{column}" = %s', (other,), 0))
        elif op == "insert":
            values = insert_values(table, other)  # only the columns a client fills: the rest take defaults
            columns = ", ".join(f'"{name}"' for name in values)
            tries = [(f'INSERT INTO "{table}" ({columns}) SELECT {columns} '
                      f'FROM jsonb_populate_record(NULL::"{table}", %s::jsonb)', (json.dumps(values),), 0)
                     if values else (f'INSERT INTO "{table}" DEFAULT VALUES', (), 0)]  # fmt: skip
        elif op == "update":
            target = SET_COLUMN.get(table, column)
            tries = [(f'UPDATE "{table}" SET "{target}" = "{target}"', (), own)]
            if table in SET_COLUMN and column is not None:  # the one column a writer may set, without reading a row
                tries[0] = (f'UPDATE "{table}" SET "{target}" = true', (), own)
            if column is not None:
                tries.append((f'UPDATE "{table}" SET "{target}" = "{target}" WHERE "{column}" = %s', (other,), 0))
        else:  # delete: no client role deletes, not even its own vault's rows
            tries = [(f'DELETE FROM "{table}"', (), 0)]
            if column is not None:
                tries.append((f'DELETE FROM "{table}" WHERE "{column}" = %s', (other,), 0))
        for statement, params, allowed in tries:
            got = attempt(conn, statement, params)
            if got != REFUSED and got > allowed:
                found.append(f"{job}: {statement % tuple(repr(p) for p in params)} -> {got} rows (at most {allowed})")
    return found


def insert_values(table: str, vault: str) -> dict:
    """A complete row of `table` for `vault` where a role may insert (a refused insert is refused
    before its values are looked at)."""
    if table == "memvault_team_turns":
        return {"vault": vault, "run_hash": "f" * 64, "payload_sha256": "0" * 64, "record": "\\x7b7d"}
    if table == "memvault_team_facts":
        return {"vault": vault, "content_hash": "f" * 64, "id": "m-x", "fact": "planted", "at": "2026-12-01T00:00:00Z",
                "relpath": "daily/2026-12-01.md"}  # fmt: skip
    column = vault_column(table)
    return {} if column is None else {column: vault}


@pytest.fixture(scope="module")
def server(postgres_server):
    return Server(postgres_server)


# --- another vault's rows ------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["read", "insert", "update", "delete"])
@pytest.mark.parametrize("job", ["reader", "writer", "stranger"])
def test_no_role_reaches_another_vaults_rows_in_any_table(server, job, op):
    found = [breach for table in server.targets() for breach in breaches(server, job, table, op)]
    assert found == []


def test_each_role_still_does_its_own_job(server):
    """The attacks above are not refused because nothing works: the reader reads its vault, the
    writer admits and remembers into it (the no-op update of an exact retry included)."""
    with server.connect("reader") as conn:
        seen = conn.execute('SELECT count(*) FROM "memvault_rows"').fetchone()[0]
        assert seen == server.own["reader"]["memvault_rows"] > 0
    writer = TeamServer(server.roles["writer"], server.mine)
    try:
        run_hash = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
        assert writer.admit(run_hash, "1" * 64, b"{}") == (True, "1" * 64, False)
        assert writer.admit(run_hash, "1" * 64, b"{}") == (False, "1" * 64, False)  # the retry's answer
        fact = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
        assert writer.remember(fact, "m-own", "Our own fact.", datetime(2026, 12, 1, tzinfo=UTC),
                               "daily/2026-12-01.md")[0]  # fmt: skip
        theirs = TeamServer(server.roles["writer"], server.theirs)
        with pytest.raises(IndexUnavailable, match="may not use vault"):
            theirs.admit(run_hash, "1" * 64, b"{}")
        theirs.close()
    finally:
        own = (server.mine,)
        server.owner(
            "DELETE FROM memvault_team_turns WHERE vault = %s AND payload_sha256 = '1' || repeat('1', 63)", own
        )
        server.owner("DELETE FROM memvault_team_facts WHERE vault = %s AND id = 'm-own'", own)
        writer.close()


# --- the columns a writer must not set ------------------------------------------------------------

#: (statement, params) a writer of its own vault must be refused: projection state is the owner's
OWNER_ONLY = [
    ("UPDATE memvault_team_turns SET projected_at = now() WHERE vault = %s", ()),  # another agent's turns "projected"
    ("UPDATE memvault_team_turns SET record = '\\x00' WHERE vault = %s", ()),  # a record the owner cannot read
    ("UPDATE memvault_team_turns SET run_hash = run_hash || 'x' WHERE vault = %s", ()),  # a run forgotten
    ("UPDATE memvault_team_turns SET payload_sha256 = '0' WHERE vault = %s", ()),
    ("UPDATE memvault_team_turns SET refused = 'no' WHERE vault = %s", ()),
    ("UPDATE memvault_team_turns SET admitted_at = now() - interval '1 year' WHERE vault = %s", ()),
    ("UPDATE memvault_team_turns SET vault = vault WHERE vault = %s", ()),
    ("UPDATE memvault_team_facts SET projected_at = now() WHERE vault = %s", ()),
    ("UPDATE memvault_team_facts SET fact = 'rewritten' WHERE vault = %s", ()),
    ("UPDATE memvault_team_facts SET relpath = 'daily/1999-01-01.md' WHERE vault = %s", ()),
    ("UPDATE memvault_team_owners SET sleeping = true WHERE vault = %s", ()),
    ("UPDATE memvault_team_owners SET pid = 1 WHERE vault = %s", ()),
    ("DELETE FROM memvault_team_turns WHERE vault = %s", ()),
    ("DELETE FROM memvault_team_facts WHERE vault = %s", ()),
    ("INSERT INTO memvault_team_turns (vault, run_hash, payload_sha256, record, projected_at) "
     "VALUES (%s, 'planted', '0', '\\x7b7d', now())", ()),
    ("INSERT INTO memvault_team_turns (vault, run_hash, payload_sha256, record, admitted_at) "
     "VALUES (%s, 'planted', '0', '\\x7b7d', now() - interval '1 year')", ()),
    ("INSERT INTO memvault_team_facts (vault, content_hash, id, fact, at, relpath, projected_at) "
     "VALUES (%s, 'planted', 'm-x', 'x', now(), 'daily/2026-12-01.md', now())", ()),
    ("INSERT INTO memvault_team_owners (vault, host, pid, settings) VALUES (%s, 'h', 1, '{}')", ()),
    ("UPDATE memvault_team_settings SET settings = '{}' WHERE vault = %s", ()),  # the zone agents read with
    ("INSERT INTO memvault_team_settings (vault, settings) VALUES (%s, '{}')", ()),
]  # fmt: skip


def owner_only_breaches(server: Server) -> list[str]:
    with server.connect("writer") as conn:
        return [statement for statement, _ in OWNER_ONLY if attempt(conn, statement, (server.mine,)) != REFUSED]


def test_a_writer_updates_no_projection_state_even_in_its_own_vault(server):
    assert owner_only_breaches(server) == []
    with server.connect("writer") as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE memvault_team_turns SET touch = false WHERE vault = %s", (server.mine,))


def test_a_server_an_earlier_memvault_made_gets_the_new_grants_at_its_owners_start(server):
    """Before this schema a writer was granted UPDATE on every column, and the ledger had no
    `touch` column: the attacks above then succeed, and the owner's next start closes them."""
    writer = team.writer_role(server.mine)
    try:
        for table in ("memvault_team_turns", "memvault_team_facts"):
            server.owner(f"ALTER TABLE {table} DROP COLUMN touch")
            server.owner(f'GRANT SELECT, INSERT, UPDATE ON {table} TO "{writer}"')
        # every update and insert of the two tables (deletes and the owners' table were never granted)
        assert len(owner_only_breaches(server)) == 13
    finally:
        TeamServer(server.dsn, server.mine, create=True).close()  # the owner's start
    assert owner_only_breaches(server) == []
    TeamServer(server.dsn, server.mine, create=True).close()  # again: idempotent
    assert owner_only_breaches(server) == []
    test_each_role_still_does_its_own_job(server)


# --- the attacks are honest: they succeed once a guard is removed -------------------------------

RLS_TABLES = [*schema.READ_TABLES, "memvault_files", *team._TEAM_TABLES]
#: each policy, permissive, and the attack it lets through
PERMISSIVE = {"SELECT": ("USING (true)", "read"), "INSERT": ("WITH CHECK (true)", "insert"),
              "UPDATE": ("USING (true) WITH CHECK (true)", "update")}  # fmt: skip
POLICIES = {**schema._POLICIES, **team._POLICIES}


def attacks_on(server: Server, table: str, op: str) -> list[str]:
    return [breach for job in ("reader", "writer") for breach in breaches(server, job, table, op)]


@pytest.mark.parametrize("table", RLS_TABLES)
def test_the_read_attack_succeeds_once_row_level_security_is_off(server, table):
    if table == "memvault_files":  # granted to no role: row-level security is its second guard
        server.owner(f'GRANT SELECT ON memvault_files TO "{schema.reader_role(server.mine)}"')
    try:
        assert attacks_on(server, table, "read") == []
        server.owner(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
        assert attacks_on(server, table, "read") != []
    finally:
        server.owner(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        server.owner(f'REVOKE SELECT ON memvault_files FROM "{schema.reader_role(server.mine)}"')
    assert attacks_on(server, table, "read") == []


@pytest.mark.parametrize(("table", "policy"), sorted(POLICIES))
def test_each_policy_made_permissive_lets_its_attack_through(server, table, policy):
    command = POLICIES[(table, policy)].split(" FOR ", 1)[1].split()[0]
    clause, op = PERMISSIVE[command]
    assert attacks_on(server, table, op) == []
    try:
        server.owner(f"DROP POLICY {policy} ON {table}")
        server.owner(f"CREATE POLICY {policy} ON {table} FOR {command} {clause}")
        assert attacks_on(server, table, op) != []
    finally:
        server.owner(f"DROP POLICY IF EXISTS {policy} ON {table}")
        server.owner(POLICIES[(table, policy)])
    assert attacks_on(server, table, op) == []


def test_the_leaf_attack_succeeds_once_a_leaf_is_granted(server):
    """The other vault's leaves, read by name, are guarded by their grants (the policy is the parents')."""
    leaf = server.leaves[-1]
    assert breaches(server, "reader", leaf, "read") == []
    try:
        server.owner(f'GRANT SELECT ON "{leaf}" TO "{schema.reader_role(server.mine)}"')
        assert breaches(server, "reader", leaf, "read") != []
    finally:
        server.owner(f'REVOKE SELECT ON "{leaf}" FROM "{schema.reader_role(server.mine)}"')


# --- the owner fence and the schema lock ----------------------------------------------------------

LOCK_MODES = ["ACCESS SHARE", "ROW SHARE", "ROW EXCLUSIVE", "SHARE UPDATE EXCLUSIVE", "SHARE", "EXCLUSIVE",
              "ACCESS EXCLUSIVE"]  # fmt: skip


def take_fence(conn, vault: str, mode: str = "SHARE UPDATE EXCLUSIVE") -> str:
    """'taken', REFUSED, or 'busy' (someone holds it), leaving a taken lock held in `conn`'s transaction."""
    conn.execute("BEGIN")
    try:
        conn.execute(f'LOCK TABLE "{team.fence_view(vault)}" IN {mode} MODE NOWAIT')
        return "taken"
    except psycopg.errors.InsufficientPrivilege:
        conn.execute("ROLLBACK")
        return REFUSED
    except psycopg.errors.LockNotAvailable:
        conn.execute("ROLLBACK")
        return "busy"


def hold_what_no_rights_reach(conn, server: Server) -> None:
    """What a role with CONNECT alone can hold: every advisory key memvault used before, and the
    weak locks a prepared statement takes on the fence view and the tables before its privilege
    check, all kept in an open transaction."""
    conn.execute("SELECT pg_advisory_lock(%s, %s)", (0x6D76_6F77, 0))
    conn.execute("SELECT pg_advisory_lock(%s)", (0x6D656D76,))  # the schema lock's old key
    conn.execute("BEGIN")
    conn.execute(f'PREPARE held_fence AS SELECT * FROM "{team.fence_view(server.mine)}"')
    for i, table in enumerate(["memvault_schema", *team._TEAM_TABLES]):
        conn.execute(f'PREPARE held_{i} AS SELECT * FROM "{table}"')
        conn.execute(f'PREPARE held_ins_{i} AS INSERT INTO "{table}" SELECT * FROM "{table}"')


def start_owner(server: Server, vault: str, timeout: float = 15.0):
    """An owner's start on the server (the fence, then the team tables, roles and grants), from
    a thread: (the lock or the error, whether it finished within `timeout`)."""
    outcome = {}

    def run():
        lock = OwnerLock(server.dsn, vault)
        try:
            lock.acquire("home", 4242)
            TeamServer(server.dsn, vault, create=True).close()
            outcome["lock"] = lock
        except Exception as exc:  # noqa: BLE001 - the test reads it
            outcome["error"] = exc
            lock.release()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome, not thread.is_alive()


def make_fence(server: Server) -> None:
    """The fence view exists once an owner started."""
    lock = OwnerLock(server.dsn, server.mine)
    lock.acquire("home", 1)
    lock.release()


@pytest.mark.parametrize("job", ["reader", "writer", "stranger"])
def test_no_client_role_takes_the_owner_fence_in_any_mode(server, job):
    make_fence(server)
    with server.connect(job) as conn:
        assert [take_fence(conn, server.mine, mode) for mode in LOCK_MODES] == [REFUSED] * len(LOCK_MODES)


def test_a_role_with_connect_alone_cannot_stall_the_owners_start(server):
    make_fence(server)  # a vault whose owner ran before: the squatter's statements reach its fence view
    with server.connect("stranger") as squatter:
        hold_what_no_rights_reach(squatter, server)
        outcome, finished = start_owner(server, server.mine)
        assert finished, "the owner's start waited on a lock a role without rights held"
        assert "lock" in outcome, outcome.get("error")
        try:
            with server.connect("reader") as conn:  # clients see the owner running
                assert TeamServer(server.roles["reader"], server.mine).owner_alive()
                assert take_fence(conn, server.mine) == REFUSED
            second, _ = start_owner(server, server.mine)
            assert isinstance(second.get("error"), VaultLocked) and "pid 4242 on host home" in str(second["error"])
        finally:
            outcome["lock"].release()
    assert not TeamServer(server.roles["reader"], server.mine).owner_alive()


def test_the_fence_attack_succeeds_once_the_fence_is_granted(server):
    """The check above can fail: a role granted UPDATE on the fence view takes it, and the owner is refused."""
    make_fence(server)
    stranger = server.names["stranger"]
    server.owner(f'GRANT UPDATE ON "{team.fence_view(server.mine)}" TO "{stranger}"')
    try:
        with server.connect("stranger") as conn:
            assert take_fence(conn, server.mine) == "taken"
            outcome, finished = start_owner(server, server.mine)
            assert finished and isinstance(outcome.get("error"), VaultLocked)
    finally:
        server.owner(f'REVOKE UPDATE ON "{team.fence_view(server.mine)}" FROM "{stranger}"')


def test_the_fence_holds_no_transaction_id_nor_snapshot(server):
    """The fence's open transaction holds back no VACUUM, and a database-wide VACUUM passes it by."""
    lock = OwnerLock(server.dsn, server.mine)
    lock.acquire("home", 1)
    try:
        assert lock.held()
        pid = lock._conn.info.backend_pid
        assert server.owner("SELECT state, backend_xid, backend_xmin FROM pg_stat_activity WHERE pid = %s",
                            (pid,)) == [("idle in transaction", None, None)]  # fmt: skip
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '5s'")
            conn.execute("VACUUM (ANALYZE) memvault_team_turns")
            conn.execute("ANALYZE")
    finally:
        lock.release()


def test_a_server_of_schema_5_gets_row_level_security_on_memvault_files_at_its_owners_open(server):
    server.owner("ALTER TABLE memvault_files DISABLE ROW LEVEL SECURITY")
    server.owner("UPDATE memvault_schema SET version = 5")
    PostgresBackend(server.dsn, server.mine).close()  # the owner's open migrates
    assert server.owner("SELECT relrowsecurity FROM pg_class WHERE oid = 'memvault_files'::regclass") == [(True,)]
    assert server.owner("SELECT version FROM memvault_schema") == [(schema.SCHEMA_VERSION,)]


def test_a_swarm_of_refused_statements_on_the_fence_keeps_no_owner_out(server):
    """COMMENT ON locks the view for the moment before its ownership check: a starting owner
    waits that moment out in the lock's queue instead of taking it for a running owner."""
    make_fence(server)
    stop = threading.Event()

    def swarm():
        with server.connect("stranger") as conn:
            while not stop.is_set():
                try:
                    conn.execute(f"COMMENT ON VIEW \"{team.fence_view(server.mine)}\" IS 'mine'")
                except psycopg.errors.InsufficientPrivilege:
                    pass

    threads = [threading.Thread(target=swarm, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        refused = 0
        for _ in range(40):
            lock = OwnerLock(server.dsn, server.mine)
            try:
                lock.acquire("home", 1)
            except VaultLocked:
                refused += 1
            lock.release()
        assert refused == 0
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
