"""Behind a real PgBouncer in transaction mode (issue 42, item 1), and calls whose connection is
cut during a statement (item 2): retried once when their work is idempotent, a clear storage
error when it is not.

PgBouncer (tests/pgbouncer_helpers.py) hands each transaction to whichever of its server
connections is free, so session state (a prepared statement, a session SET) set by one call is
missing in, or leaks into, another's. The tests make that happen on purpose: few server
connections, several client processes, and a raw client holding one server connection busy."""

import json
import math
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from memvault import MemoryStore
from memvault.indexer.backend import open_team_server
from memvault.indexer.backend.base import BackendDelta, IndexServerUnavailable, RowWrite
from memvault.indexer.backend.postgres.connection import CallCut, ServerBounds
from memvault.indexer.backend.postgres.engine import PostgresBackend
from memvault.indexer.team.ledger import NetworkAdmission
from memvault.vault.config import IndexConfig, default_config_data, render_config
from memvault.vault.errors import IndexUnavailable
from memvault.vault.init import init_vault
from tests.engine_helpers import REPO, wait_for
from tests.pgbouncer_helpers import PgBouncer, PgBouncerMissing
from tests.postgres_helpers import PostgresServer
from tests.test_postgres_postings import record
from tests.test_postgres_walls import database_of, ledger_runs
from tests.test_team_ledger import record_for

pytestmark = [pytest.mark.slow, pytest.mark.one_engine("a pooler in front of the index server, and cut connections")]
POOLED = {"MEMVAULT_INDEX_POOLER": "transaction"}


@pytest.fixture(scope="module")
def bouncer(postgres_server):
    try:
        bouncer = PgBouncer(postgres_server.socket_dir, postgres_server.port, pool_size=2).start()
    except PgBouncerMissing as exc:
        pytest.skip(str(exc))
    yield bouncer
    bouncer.stop()


def make_vault(tmp_path: Path, name: str = "team-a") -> Path:
    root = tmp_path / name
    init_vault(root, render_config(default_config_data("journal", "UTC", {"backend": "postgres", "name": name})))
    return root


def busy_server_connection(dsn: str):
    """A raw client holding one of PgBouncer's server connections in an open transaction: the
    next client's transaction runs on another server connection."""
    conn = psycopg.connect(dsn)
    conn.execute("SELECT 1").fetchone()  # the transaction stays open: its server connection with it
    return conn


# --- behind PgBouncer ---------------------------------------------------------------------------

_AGENT = """
import json, sys
sys.path.insert(0, {repo!r})
from datetime import date
from memvault import MemoryStore
today = date.today().isoformat()
env = json.loads(sys.argv[1])
worker = int(sys.argv[2])
with MemoryStore.connect("team-a", env=env) as store:
    for j in range(25):
        result = store.persist_completed_turn(f"w{{worker}}-{{j}}", f"Agent {{worker}} turn {{j}} moved shard {{j}}.")
        assert result.status == "admitted", result
        receipt = store.remember(f"Agent {{worker}} keeps bucket {{j}} warm.")
        assert receipt.status == "added", receipt
        store.recall("which bucket stays warm?")
        store.journal(from_date=today, through_date=today, time_zone="UTC")
print("ok")
"""


def test_connected_clients_admit_remember_recall_and_journal_through_pgbouncer_in_transaction_mode(
    tmp_path, postgres_dsn, bouncer
):
    root = make_vault(tmp_path)
    database = database_of(postgres_dsn)
    with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": postgres_dsn}) as store:  # the owner builds it directly
        store.remember("Morgan chose blue as the deployment color.")
    open_team_server(postgres_dsn, "team-a", create=True).close()
    env = {"MEMVAULT_INDEX_DSN": bouncer.dsn(database), **POOLED}
    # four agent processes share PgBouncer's two server connections: each transaction lands on
    # whichever is free, so a prepared statement or a session SET of one call is another's
    agents = [subprocess.Popen([sys.executable, "-c", _AGENT.format(repo=str(REPO.parent)), json.dumps(env), str(n)],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for n in range(4)]  # fmt: skip
    for agent in agents:
        out, err = agent.communicate(timeout=300)
        assert agent.returncode == 0 and out.strip() == "ok", err[-3000:]
    runs = ledger_runs(postgres_dsn, "team-a")
    assert len(runs) == len(set(runs)) == 100
    with psycopg.connect(postgres_dsn) as conn:
        facts = conn.execute("SELECT count(*) FROM memvault_team_facts WHERE vault = 'team-a'").fetchone()[0]
    assert facts == 100
    with MemoryStore.connect("team-a", env=env) as client:
        assert any("blue" in hit.text for hit in client.recall("deployment color").hits)


def test_without_the_pooler_setting_pgbouncer_breaks_prepared_admissions(postgres_dsn, bouncer):
    """The reason for index.pooler: the same client, told nothing, fails once its prepared
    admission runs on a server connection that never saw it prepared."""
    open_team_server(postgres_dsn, "team-a", create=True).close()
    dsn = bouncer.dsn(database_of(postgres_dsn))
    failures = []
    for pooled in (False, True):
        server = open_team_server(dsn, "team-a", index=IndexConfig(pooler="transaction" if pooled else ""))
        admission = NetworkAdmission(server)
        for j in range(4):
            holder = busy_server_connection(dsn) if j % 2 else None  # the next admit lands elsewhere
            outcome = admission.admit(record_for(f"run-{pooled}-{j}", f"Turn {j} of the pooled test {pooled}."))
            if holder is not None:
                holder.close()
            if outcome.status != "admitted":
                failures.append((pooled, outcome.message))
        server.close()
        _forget_pool(dsn)
    assert failures and all(not pooled for pooled, _ in failures), failures
    assert any("prepared statement" in message and "index.pooler" in message for _, message in failures), failures


def _forget_pool(dsn: str) -> None:
    from memvault.indexer.backend.postgres import connection

    connection._POOLS.pop(connection._pool_key(dsn), None)


def test_the_vector_search_depth_holds_on_whichever_server_connection_runs_it(postgres_dsn, bouncer):
    """hnsw.ef_search caps pgvector's list: set on the session (one server connection), a query
    PgBouncer runs on another server connection gets 40 rows instead of the 100 asked."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # 150 rows: the HNSW index, not a scan
        conn.execute(f'ALTER DATABASE "{database_of(postgres_dsn)}" SET enable_seqscan = off')
    direct = PostgresBackend(postgres_dsn, "team-v")
    generation = direct.create_generation({"provider": "test", "model": "unit", "dim": 4})
    writes = tuple(RowWrite(f"{r.path}#{r.id}", r, "ctx", [math.cos(i / 7), math.sin(i / 7), 0.5, 0.1 * (i % 3)])
                   for i, r in enumerate(record(i, f"Row {i} about color.") for i in range(150)))  # fmt: skip
    direct.apply(generation, BackendDelta(writes=writes))
    direct.activate_generation(generation)
    direct.close()
    dsn = bouncer.dsn(database_of(postgres_dsn))
    found = {}
    for pooled in (False, True):
        reader = PostgresBackend(dsn, "team-v", create=False, bounds=ServerBounds(pooled=pooled))
        reader.serving_generation()  # its connection is made (and set up) on one server connection
        bouncer.reconnect()  # ...which PgBouncer closes once idle: the search runs on a new one
        found[pooled] = len(reader.vector_candidates(generation, [1.0, 0.0, 0.5, 0.0], 100))
        reader.close()
        _forget_pool(dsn)
    assert found == {False: 40, True: 100}, found


def test_an_owner_behind_a_transaction_pooler_is_refused_naming_the_session_dsn_and_works_with_it(
    tmp_path, postgres_dsn, bouncer
):
    pooled = {"MEMVAULT_INDEX_DSN": bouncer.dsn(database_of(postgres_dsn)), **POOLED}
    with pytest.raises(IndexUnavailable) as refused:
        MemoryStore.open(make_vault(tmp_path / "refused"), env=pooled).close()
    root = make_vault(tmp_path)
    text = str(refused.value)
    assert "MEMVAULT_INDEX_SESSION_DSN" in text and "transaction mode" in text and "index.pooler" in text
    with MemoryStore.open(root, env={**pooled, "MEMVAULT_INDEX_SESSION_DSN": postgres_dsn}) as store:
        store.remember("Morgan chose blue as the deployment color.")
        assert store.recall("deployment color").hits
    with MemoryStore.connect("team-a", env=pooled) as client:  # an agent reads it through PgBouncer
        assert any("blue" in hit.text for hit in client.recall("deployment color").hits)


# --- a connection cut during a statement ----------------------------------------------------------


def blocked_then_cut(admin_dsn: str, lock_sql: str, call, database: str):
    """Run `call()` in a thread while a raw session holds `lock_sql`'s lock, so the call's statement
    waits inside the server; terminate that backend mid-statement, release the lock, and return
    what the call answered (or raised)."""
    box: dict = {}
    holder = psycopg.connect(admin_dsn, application_name="lock-holder")
    holder.execute(lock_sql)

    def run():
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    with psycopg.connect(admin_dsn, autocommit=True, application_name="killer") as killer:

        def waiting_pid():
            row = killer.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock' "
                                 "AND application_name = 'memvault'", (database,)).fetchone()  # fmt: skip
            return row[0] if row else None

        pid = wait_for(waiting_pid, what="the call's statement to wait on the lock")
        killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
    holder.rollback()
    holder.close()
    thread.join(60)
    assert not thread.is_alive(), "the call hung"
    return box


def test_an_admission_cut_mid_statement_runs_once_more_and_is_admitted_once(postgres_dsn):
    database = database_of(postgres_dsn)
    open_team_server(postgres_dsn, "team-a", create=True).close()
    admission = NetworkAdmission(open_team_server(postgres_dsn, "team-a"))
    assert admission.admit(record_for("run-0", "Warm-up turn.")).status == "admitted"
    box = blocked_then_cut(postgres_dsn, "LOCK TABLE memvault_team_turns IN EXCLUSIVE MODE",
                           lambda: admission.admit(record_for("run-1", "Morgan chose blue.")), database)  # fmt: skip
    assert "error" not in box, box.get("error")
    assert box["value"].status == "admitted", box["value"]
    assert ledger_runs(postgres_dsn, "team-a").count(ledger_runs(postgres_dsn, "team-a")[0]) == 1
    assert len(ledger_runs(postgres_dsn, "team-a")) == 2
    admission.server.close()


def test_a_read_cut_mid_statement_runs_once_more(postgres_dsn):
    database = database_of(postgres_dsn)
    PostgresBackend(postgres_dsn, "team-r").close()
    reader = PostgresBackend(postgres_dsn, "team-r", create=False)
    reader.generations()  # its pooled connection is open, as in a long-lived client
    box = blocked_then_cut(postgres_dsn, "LOCK TABLE memvault_generations IN ACCESS EXCLUSIVE MODE",
                           reader.generations, database)  # fmt: skip
    assert "error" not in box, box.get("error")
    assert box["value"] == []
    reader.close()


def test_a_write_that_is_not_idempotent_cut_mid_statement_fails_naming_what_is_unknown(postgres_dsn):
    database = database_of(postgres_dsn)
    server = open_team_server(postgres_dsn, "team-a", create=True)
    server.register_owner("host-1", 4242, {"writeMode": "direct"})
    box = blocked_then_cut(postgres_dsn, "LOCK TABLE memvault_team_owners IN EXCLUSIVE MODE",
                           lambda: server.set_sleeping(True), database)  # fmt: skip
    error = box.get("error")
    assert isinstance(error, CallCut), box
    text = str(error)
    assert "was cut during a call" in text and "unknown" in text and "nothing acknowledged before is lost" in text
    assert "UPDATE" not in text and "memvault_team_owners" not in text
    server.set_sleeping(False)  # the next call reconnects
    server.close()


@pytest.fixture
def restart_server():
    server = PostgresServer.start_new()
    yield server
    server.destroy()


def test_a_read_cut_by_a_restart_waits_for_the_server_and_answers(restart_server):
    dsn = restart_server.new_database()
    database = database_of(dsn)
    open_team_server(dsn, "team-a", create=True).close()
    admission = NetworkAdmission(open_team_server(dsn, "team-a", index=IndexConfig(timeout_seconds=30)))
    assert admission.admit(record_for("run-0", "Warm-up turn.")).status == "admitted"
    box: dict = {}
    holder = psycopg.connect(dsn, application_name="lock-holder")
    holder.execute("LOCK TABLE memvault_team_turns IN EXCLUSIVE MODE")

    def run():
        try:
            box["value"] = admission.admit(record_for("run-1", "Morgan chose blue."))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    with psycopg.connect(restart_server.dsn, autocommit=True) as watcher:
        wait_for(lambda: watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                                         "wait_event_type = 'Lock'", (database,)).fetchone()[0] == 1,
                 what="the admission to wait on the lock")  # fmt: skip
    restart_server.stop()  # a fast stop: the waiting statement's session is ended under it
    holder.close()
    restart_server.restart()
    thread.join(90)
    assert not thread.is_alive(), "the call hung"
    assert "error" not in box, box.get("error")
    assert box["value"].status == "admitted", box["value"]
    assert len(ledger_runs(dsn, "team-a")) == 2
    admission.server.close()


def test_a_cut_stays_a_storage_error_for_the_caller_that_does_not_retry(postgres_dsn):
    """CallCut is an IndexServerUnavailable: callers that catch the storage error still do."""
    assert issubclass(CallCut, IndexServerUnavailable)
