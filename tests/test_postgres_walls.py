"""The index server's walls (issue 42, items 1-2), against real PostgreSQL servers: one bounded
pool per process and DSN, a bound on every statement and socket, a restart survived without a
failed call, and a message of its own, naming the fix, for each way a server refuses.

A test that restarts a server, changes its pg_hba.conf or fills its connection slots does it on
a private server (`walls_server`), never on the session's shared one. The stalled network path
is a loopback TCP proxy (`StallingProxy`) in front of the shared server's Unix socket."""

import json
import select
import socket
import subprocess
import threading
import time
from pathlib import Path

import psycopg
import pytest

from memvault import MemoryStore
from memvault.indexer.backend import check_server, open_team_server
from memvault.indexer.backend.base import IndexServerUnavailable
from memvault.indexer.backend.postgres.connection import PROBE_AFTER_IDLE_SECONDS, ServerBounds
from memvault.indexer.backend.postgres.engine import PostgresBackend
from memvault.indexer.team.ledger import NetworkAdmission
from memvault.vault.config import IndexConfig, default_config_data, load_config, render_config, server_bounds
from memvault.vault.errors import IndexUnavailable, InvalidConfig
from memvault.vault.init import init_vault
from tests.engine_helpers import ENV, MEMVAULT, REPO, memvault, wait_for
from tests.postgres_helpers import PostgresServer
from tests.test_team_ledger import record_for

pytestmark = [pytest.mark.slow, pytest.mark.one_engine("the index server's own connections, bounds and refusals")]
SECRET = "hunter2-do-not-print"
#: connections the private server admits (ALTER SYSTEM; three more are kept for superusers)
MAX_CONNECTIONS = 12


# --- helpers ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def walls_server():
    """A server of this module's own: a role with a password (scram over the socket), and few slots."""
    server = PostgresServer.start_new()
    hba = server.pgdata / "pg_hba.conf"
    hba.write_text("local all alice scram-sha-256\n" + hba.read_text())
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE ROLE alice LOGIN PASSWORD 'right-password'")
        conn.execute(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS}")
    server.stop()
    server.restart()
    yield server
    server.destroy()


def make_vault(tmp_path: Path, name: str = "team-a") -> Path:
    root = tmp_path / name
    init_vault(root, render_config(default_config_data("journal", "UTC", {"backend": "postgres", "name": name})))
    return root


def ledger_runs(dsn: str, vault: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT run_hash FROM memvault_team_turns WHERE vault = %s", (vault,)).fetchall()
    return sorted(row[0] for row in rows)


def a_connection(dsn: str):
    """A raw connection outside memvault, or None while the server has no slot for it."""
    try:
        return psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError:
        return None


def remote_search(dsn: str) -> subprocess.CompletedProcess:
    """`memvault --remote team-a search blue`, a client with no vault folder, in a process of its own."""
    return subprocess.run([*MEMVAULT, "--remote", "team-a", "search", "blue"], capture_output=True, text=True,
                          env={**ENV, "MEMVAULT_INDEX_DSN": dsn}, cwd=REPO, timeout=120)  # fmt: skip


def in_a_thread(call, seconds: float = 60.0):
    """`call()`'s value, from a thread joined with a generous timeout: a hang fails the test
    instead of stalling the run."""
    box: dict = {}

    def run():
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the call hung for {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def memvault_connections(admin_dsn: str, database: str) -> int:
    with psycopg.connect(admin_dsn, autocommit=True, application_name="walls-admin") as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'memvault' AND datname = %s",
            (database,),
        ).fetchone()[0]


def database_of(dsn: str) -> str:
    return dsn.rsplit("dbname=", 1)[1].split()[0]


class StallingProxy:
    """Loopback TCP in front of a server's Unix socket; `stall()` stops forwarding in both
    directions while every socket stays open (a hung middlebox, a partition the kernel never
    reports), `resume()` forwards again; `lose_open_paths()` stalls only the connections open now,
    for good (a failover: the old path answers nothing, a new connection reaches the server)."""

    def __init__(self, unix_path: str):
        self.unix_path = unix_path
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.forwarding = threading.Event()
        self.forwarding.set()
        self.closing = False
        self.open: list[socket.socket] = []
        self.paths: list[threading.Event] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def stall(self) -> None:
        self.forwarding.clear()

    def resume(self) -> None:
        self.forwarding.set()

    def lose_open_paths(self) -> None:
        for path in self.paths:
            path.clear()

    def close(self) -> None:
        self.closing = True
        self.listener.close()
        for sock in self.open:
            sock.close()

    def _accept(self) -> None:
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.unix_path)
            self.open += [client, upstream]
            path = threading.Event()
            path.set()
            self.paths.append(path)
            threading.Thread(target=self._pump, args=(client, upstream, path), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket, path: threading.Event) -> None:
        other = {client: upstream, upstream: client}
        while not self.closing:
            if not (self.forwarding.is_set() and path.is_set()):
                time.sleep(0.02)  # stalled: nothing is read, so nothing is forwarded or closed
                continue
            try:
                readable, _, _ = select.select([client, upstream], [], [], 0.05)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        client.close(), upstream.close()
                        return
                    other[sock].sendall(data)
            except OSError:
                return


@pytest.fixture
def proxy(postgres_server):
    proxy = StallingProxy(f"{postgres_server.socket_dir}/.s.PGSQL.{postgres_server.port}")
    yield proxy
    proxy.close()


# --- the pool ----------------------------------------------------------------------------------------


def test_pool_size_and_timeout_are_validated_naming_the_key_and_the_fix(tmp_path):
    root = tmp_path / "v"
    root.mkdir()

    def write_index(**bounds) -> None:
        data = default_config_data("journal", "UTC", {"backend": "postgres", "name": "v"})
        data["index"].update(bounds)
        (root / "memvault.json").write_text(json.dumps(data))  # render_config refuses a bad one

    write_index(poolSize=0, timeoutSeconds=0)
    with pytest.raises(InvalidConfig) as refused:
        load_config(root, env={})
    text = str(refused.value)
    assert "index.poolSize must be between 1 and 64 (got 0)" in text and "max_connections" in text
    assert "index.timeoutSeconds must be between 1 and 3600 (got 0)" in text and "the default is 30" in text
    write_index(poolSize=8, timeoutSeconds=5)
    index = load_config(root, env={}).index
    assert (index.pool_size, index.timeout_seconds) == (8, 5)
    assert load_config(root, env={"MEMVAULT_INDEX_POOL_SIZE": "2"}).index.pool_size == 2
    defaults = load_config(tmp_path, env={}).index  # no index block: the defaults
    assert (defaults.pool_size, defaults.timeout_seconds) == (4, 30)
    # a connected client (no vault config) reads the same bounds from its environment
    assert server_bounds({"MEMVAULT_INDEX_TIMEOUT_SECONDS": "7"}).timeout_seconds == 7
    with pytest.raises(InvalidConfig, match=r"MEMVAULT_INDEX_POOL_SIZE: index.poolSize must be between 1 and 64"):
        server_bounds({"MEMVAULT_INDEX_POOL_SIZE": "100"})
    with pytest.raises(InvalidConfig, match="MEMVAULT_INDEX_POOL_SIZE must be a whole number"):
        server_bounds({"MEMVAULT_INDEX_POOL_SIZE": "four"})


def test_connections_in_use_never_exceed_the_pool_size_over_stores_vaults_and_threads(postgres_server, postgres_dsn):
    bounds = IndexConfig(pool_size=3)
    backends = [PostgresBackend(postgres_dsn, f"v{i}", bounds=ServerBounds.of(bounds)) for i in range(3)]
    teams = [open_team_server(postgres_dsn, f"v{i}", create=True, index=bounds) for i in range(3)]
    admissions = [NetworkAdmission(team) for team in teams]
    stop, errors, seen = threading.Event(), [], []
    database = database_of(postgres_dsn)

    def work(n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                backends[(n + i) % 3].serving_generation()
                teams[n % 3].counts()
                outcome = admissions[n % 3].admit(record_for(f"run-{n}-{i}", f"Turn {i} of agent {n}."))
                assert outcome.status == "admitted", outcome
            except Exception as exc:  # noqa: BLE001 - collected, asserted empty below
                errors.append(exc)
                return

    def watch() -> None:
        while not stop.is_set():
            seen.append(memvault_connections(postgres_server.dsn, database))
            time.sleep(0.02)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(10)] + [threading.Thread(target=watch)]
    for thread in threads:
        thread.start()
    time.sleep(3)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[:3]
    assert seen and max(seen) <= 3, max(seen)  # ten threads, six stores, one process: three at most
    assert max(seen) >= 2  # and they did run at once
    for store in backends + teams:
        store.close()
    # the last to close closes the pool; the server drops a closed session's backend a moment later
    wait_for(lambda: memvault_connections(postgres_server.dsn, database) == 0, what="the pool's sessions to end")


# --- timeouts --------------------------------------------------------------------------------------


def test_a_stalled_connection_fails_within_its_bound_and_loses_nothing_acknowledged(proxy, postgres_dsn):
    open_team_server(postgres_dsn, "team-a", create=True).close()
    dsn = f"host=127.0.0.1 port={proxy.port} user=postgres dbname={database_of(postgres_dsn)} password={SECRET}"
    server = open_team_server(dsn, "team-a", index=IndexConfig(timeout_seconds=2))
    admission = NetworkAdmission(server)
    assert admission.admit(record_for("run-1", "Morgan chose blue for the deploy.")).status == "admitted"
    proxy.stall()  # the socket stays open: only a bound on the client's own wait can end the call
    stalled = in_a_thread(lambda: admission.admit(record_for("run-2", "Alice owns the release notes.")))
    assert (stalled.status, stalled.reason) == ("failed", "index_server_unavailable"), stalled
    assert "did not answer within 4 s" in stalled.message and "index.timeoutSeconds" in stalled.message
    assert "NOT saved" in stalled.message and SECRET not in stalled.message
    with pytest.raises(IndexServerUnavailable) as reconnecting:  # a new connection meets the stall too
        in_a_thread(server.ping)
    assert "127.0.0.1" in str(reconnecting.value) and SECRET not in str(reconnecting.value)
    proxy.resume()
    # the stalled statement's bytes may still reach the server once the path moves again (they
    # sat in the proxy's buffers): the caller's retry is then a duplicate of the same payload
    retried = admission.admit(record_for("run-2", "Alice owns the release notes."))
    assert retried.status in ("admitted", "duplicate"), retried
    runs = ledger_runs(postgres_dsn, "team-a")
    assert len(runs) == len(set(runs)) == 2  # the acknowledged turn once, the retried one once
    server.close()


def test_a_pooled_connection_lost_without_a_word_is_probed_and_replaced_before_use(proxy, postgres_dsn):
    open_team_server(postgres_dsn, "team-a", create=True).close()
    dsn = f"host=127.0.0.1 port={proxy.port} user=postgres dbname={database_of(postgres_dsn)}"
    admission = NetworkAdmission(open_team_server(dsn, "team-a", index=IndexConfig(timeout_seconds=2)))
    assert admission.admit(record_for("run-1", "Morgan chose blue for the deploy.")).status == "admitted"
    proxy.lose_open_paths()  # the pooled connection's path is gone, and nothing says so
    time.sleep(PROBE_AFTER_IDLE_SECONDS + 0.5)
    later = in_a_thread(lambda: admission.admit(record_for("run-2", "Alice owns the release notes.")))
    assert later.status == "admitted", later  # the probe met silence: a new connection served the call
    assert len(ledger_runs(postgres_dsn, "team-a")) == 2
    admission.server.close()


def test_a_statement_past_the_bound_is_cancelled_by_the_server_with_a_clear_error(postgres_dsn):
    backend = PostgresBackend(postgres_dsn, "team-a", bounds=ServerBounds(timeout_seconds=1))
    with pytest.raises(IndexServerUnavailable) as slow:
        with backend._session() as conn:
            conn.execute("SELECT pg_sleep(5)")
    text = str(slow.value)
    assert "ran past index.timeoutSeconds" in text and "(1 s)" in text and "pg_sleep" not in text
    with backend._session() as conn:  # the backend keeps working after it
        assert conn.execute("SELECT 1").fetchone() == (1,)
    backend.close()


# --- a restart -----------------------------------------------------------------------------------


def test_a_server_restart_in_the_middle_of_a_session_fails_no_call_once_it_is_back(tmp_path, walls_server):
    dsn = walls_server.new_database()
    root = make_vault(tmp_path)
    open_team_server(dsn, "team-a", create=True).close()
    admission = NetworkAdmission(open_team_server(dsn, "team-a"))
    with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn}) as store:
        store.remember("Morgan chose blue as the deployment color.")
        assert store.recall("deployment color").hits
        assert admission.admit(record_for("run-1", "First turn.")).status == "admitted"
        walls_server.stop()  # a fast stop: every session ends, the pooled connections die idle
        walls_server.restart()
        result = store.recall("deployment color")  # the first call after the restart
        assert result.hits and result.degraded is None, result.degraded
        assert admission.admit(record_for("run-2", "Second turn.")).status == "admitted"
        store.remember("Standup moved to 10:00.")
        assert store.recall("standup").hits
    assert len(ledger_runs(dsn, "team-a")) == 2
    admission.server.close()


# --- refusals, each named with its fix ------------------------------------------------------------


def test_a_wrong_password_is_named_as_such_without_the_password(walls_server):
    dsn = walls_server.dsn.replace("user=postgres", "user=alice") + f" password={SECRET}"
    with pytest.raises(IndexServerUnavailable) as wrong:
        open_team_server(dsn, "team-a").ping()
    text = str(wrong.value)
    assert "refused the password of alice (wrong password)" in text and "~/.pgpass" in text
    assert "unreachable" not in text and SECRET not in text
    right = dsn.replace(SECRET, "right-password")
    assert check_server(IndexConfig.server("team-a", right)) == []  # the right one is let in
    done = remote_search(dsn)
    assert done.returncode == 1 and "wrong password" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and SECRET not in done.stdout + done.stderr


def test_an_unknown_database_and_a_missing_pgvector_are_named_with_their_fix(walls_server):
    missing = walls_server.dsn.replace("dbname=postgres", "dbname=no_such_db")
    problems = check_server(IndexConfig.server("team-a", missing))
    assert len(problems) == 1 and "database no_such_db does not exist" in problems[0], problems
    assert "createdb" in problems[0] and "unreachable" not in problems[0]
    with psycopg.connect(walls_server.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE plain")  # from template1: no pgvector installed in it
    problems = check_server(IndexConfig.server("team-a", walls_server.dsn.replace("dbname=postgres", "dbname=plain")))
    assert problems and "CREATE EXTENSION vector" in problems[0], problems


def test_a_dropped_table_makes_search_name_the_vault_and_the_rebuild_without_sql(tmp_path, postgres_dsn):
    root = make_vault(tmp_path)
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    with MemoryStore.open(root, env=env) as store:
        store.remember("Morgan chose blue as the deployment color.")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE memvault_rows CASCADE")
    done = memvault(root, "search", "blue", env=env)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "the index tables of vault 'team-a' are missing" in output and "memvault rebuild" in output, output
    assert "Traceback" not in output and "SELECT" not in output and "memvault_rows" not in output, output


def test_too_many_connections_names_max_connections_and_the_pool_and_a_held_pool_waits(walls_server):
    dsn = walls_server.new_database()
    bounds = IndexConfig(pool_size=2, timeout_seconds=10)
    holders = []
    try:
        server = open_team_server(dsn, "team-a", create=True, index=bounds)
        with server._session():  # this process holds one connection of its pool already
            while True:  # every other slot, held by connections outside memvault
                try:
                    holders.append(psycopg.connect(walls_server.dsn, autocommit=True))
                except psycopg.OperationalError as exc:
                    assert "too many clients" in str(exc) or "reserved" in str(exc)
                    break
            # a second thread of the same process: no slot for a second connection, so it
            # waits for the pool's first one instead of failing
            other = threading.Thread(target=server.ping)
            other.start()
            time.sleep(0.5)
        other.join(30)
        assert not other.is_alive()
        server.ping()
        server.close()  # the last session: its connection goes, and one slot is free again
        holders.append(wait_for(lambda: a_connection(walls_server.dsn), what="the pool's slot (its backend exits)"))
        with pytest.raises(IndexServerUnavailable) as refused:  # a process holding none is refused
            open_team_server(dsn, "team-a", index=bounds).ping()
        text = str(refused.value)
        assert "no connection slot left" in text and "max_connections" in text
        assert "index.poolSize" in text and "at most 2" in text and "unreachable" not in text
    finally:
        for conn in holders:
            conn.close()
    assert len(holders) >= MAX_CONNECTIONS - 2


def test_a_refused_call_through_the_cli_is_named_without_a_traceback(walls_server):
    missing = walls_server.dsn.replace("dbname=postgres", "dbname=no_such_db")
    done = remote_search(missing)
    assert done.returncode == 1 and "database no_such_db does not exist" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_bounds_reach_a_connection_as_libpq_options_and_settings(postgres_dsn):
    server = open_team_server(postgres_dsn, "team-a", create=True, index=IndexConfig(timeout_seconds=7))
    with server._session() as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "7s"
        assert conn.execute("SHOW application_name").fetchone()[0] == "memvault"
    server.close()
    with pytest.raises(IndexUnavailable):  # a statement refused is IndexUnavailable, not "unreachable"
        with PostgresBackend(postgres_dsn, "team-a")._session() as conn:
            conn.execute("SELECT * FROM no_such_table")


def test_a_generation_s_index_builds_run_without_the_statement_bound_and_get_it_back(postgres_dsn):
    from memvault.indexer.backend.postgres.connection import index_builds

    backend = PostgresBackend(postgres_dsn, "team-a", bounds=ServerBounds(timeout_seconds=1))
    with backend._session() as conn:
        with index_builds(conn):  # a rebuild's HNSW on a large vault takes minutes
            conn.execute("SELECT pg_sleep(1.5)")
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "1s"
    backend.close()
