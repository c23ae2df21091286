"""Reads from a hot standby (issue 42, item 4), against a real streaming standby the module starts:
a second PostgreSQL made by `pg_basebackup -R` from a primary of its own, on its own socket
(bench/bench_replica.py's `Standby`, which the bench's standby figures use too).
Connected clients' recall and journal and `search --across` read the standby (`index.readDsn` /
MEMVAULT_INDEX_READ_DSN); a process reads its own writes at once, even while the standby's replay
is paused, when a process that wrote nothing still reads the standby's older state; a standby
that is down or refuses us leaves the reads to the primary, saying so in `degraded`."""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from bench.bench_replica import Standby
from memvault import MemoryStore
from memvault.indexer.backend.postgres import replica
from memvault.indexer.engine.across import search_across
from memvault.vault.config import default_config_data, render_config, server_bounds
from memvault.vault.init import init_vault
from tests.engine_helpers import ENV
from tests.postgres_helpers import PostgresServer

pytestmark = pytest.mark.one_engine("reads from a standby are a server's: the team path on PostgreSQL")

NAME = "replica-v"
NOTE = (
    "- 09:00 Priya rotates the on-call pager every Tuesday. ^m-bbbb0001\n"
    "- 09:05 The deploy keys live in the ops password vault. ^m-bbbb0002\n"
)
#: what a process that wrote nothing prints: its recall, journal and --across, read from the standby
READER = """
import datetime, json, os, sys, zoneinfo
from bench.bench_replica import Standby
from memvault import MemoryStore
from memvault.indexer.backend.postgres import replica
from memvault.indexer.engine.across import search_across
from memvault.vault.config import server_bounds
env = dict(os.environ)
with MemoryStore.connect(sys.argv[1], env=env) as agent:
    recall = agent.recall(sys.argv[2]).to_json()
    # today where the journal is read (after 23:00 UTC Amsterdam is a day ahead), the fixture's note on
    today = datetime.datetime.now(zoneinfo.ZoneInfo("Europe/Amsterdam")).date().isoformat()
    journal = agent.journal(from_date=min("2026-12-01", today), through_date=max("2026-12-01", today),
                            time_zone="Europe/Amsterdam")
across = search_across([sys.argv[1]], sys.argv[2], dsn=env["MEMVAULT_INDEX_DSN"], like=server_bounds(env))
print(json.dumps({"recall": [h["text"] for h in recall["hits"]], "degraded": recall["degraded"],
                  "journal": json.dumps(journal, default=str), "across": [h.hit.text for h in across.hits]}))
"""


@pytest.fixture(scope="module")
def servers():
    """(primary DSN, standby DSN, the standby) of a primary of this module's own and its standby,
    and vault NAME built on the primary (by a rebuild: no owner runs, so remembered facts wait)."""
    primary = PostgresServer.start_new()
    standby = None
    try:
        dsn = primary.new_database()
        standby = Standby(primary.socket_dir, primary.port)
        root = Path(tempfile.mkdtemp(prefix="memvault-replica-")) / "home"
        index = {"backend": "postgres", "name": NAME}
        init_vault(root, render_config(default_config_data("journal", "Europe/Amsterdam", index)))
        (root / "daily" / "2026-12-01.md").write_text(NOTE)
        with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn}) as owner:
            owner.rebuild()
        yield dsn, standby.dsn(dsn), standby, root
    finally:
        if standby is not None:
            standby.destroy()
        primary.destroy()


def replayed(primary_dsn: str, standby_dsn: str) -> None:
    """Wait until the standby has replayed everything the primary holds now."""
    with psycopg.connect(primary_dsn, autocommit=True) as conn:
        lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    with psycopg.connect(standby_dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 20
        while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s", (lsn,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the standby did not replay within 20 s"
            time.sleep(0.02)


def pause_replay(standby_dsn: str) -> None:
    with psycopg.connect(standby_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
        while conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()[0] != "paused":
            time.sleep(0.01)


def resume_replay(standby_dsn: str) -> None:
    with psycopg.connect(standby_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_resume()")


def memvault_connections(standby_dsn: str) -> int:
    with psycopg.connect(standby_dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'memvault'").fetchone()[0]


def env_of(primary_dsn: str, read_dsn: str) -> dict:
    return {"MEMVAULT_INDEX_DSN": primary_dsn, "MEMVAULT_INDEX_READ_DSN": read_dsn}


def reader_process(primary_dsn: str, read_dsn: str, query: str) -> dict:
    """What a process that wrote nothing reads (recall, journal, --across)."""
    done = subprocess.run([sys.executable, "-c", READER, NAME, query], env={**ENV, **env_of(primary_dsn, read_dsn)},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_recall_journal_and_across_read_the_standby_once_it_replayed(servers):
    primary, standby, _, _ = servers
    replayed(primary, standby)
    with MemoryStore.connect(NAME, env=env_of(primary, standby)) as agent:
        result = agent.recall("who rotates the on-call pager?")
        assert "Priya rotates the on-call pager every Tuesday." in [hit.text for hit in result.hits]
        assert result.degraded is None
        assert agent.backend._reads.counts["primary"] == 0 and agent.backend._reads.counts["standby"] >= 3
        assert memvault_connections(standby) >= 1  # the client's own, on the standby
        page = agent.journal(from_date="2026-12-01", through_date="2026-12-01", time_zone="Europe/Amsterdam")
        journal = json.dumps(page, default=str)
        assert "deploy keys" in journal and agent.backend._reads.last == "standby"
    env = env_of(primary, standby)
    across = search_across([NAME], "where are the deploy keys?", dsn=primary, like=server_bounds(env))
    assert "The deploy keys live in the ops password vault." in [found.hit.text for found in across.hits]
    assert across.degraded is None


def test_a_writer_reads_its_write_at_once_while_others_read_the_paused_standby(servers):
    primary, standby, _, root = servers
    replayed(primary, standby)
    pause_replay(standby)
    try:
        with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": primary}) as owner:  # rows, on the primary
            owner.remember("Maren moved the backup window to Sunday nights.")
        with MemoryStore.connect(NAME, env=env_of(primary, standby)) as agent:
            agent.remember("Ilse renewed the wildcard certificate on Friday.")
            # this process wrote (the owner's rows, the agent's fact): it reads the primary until
            # the standby has replayed that, so the paused standby never hides either
            texts = [hit.text for hit in agent.recall("who renewed the wildcard certificate?").hits]
            assert "Ilse renewed the wildcard certificate on Friday." in texts
            assert agent.backend._reads.last == "primary"
            texts = [hit.text for hit in agent.recall("when is the backup window?").hits]
            assert "Maren moved the backup window to Sunday nights." in texts
        # a process that wrote nothing reads the standby: without the writes replay would give it
        other = reader_process(primary, standby, "when is the backup window?")
        assert "Maren moved the backup window to Sunday nights." not in other["recall"]
        assert "Maren" not in other["journal"] and other["across"] == []
        assert other["degraded"] is None
        assert "Ilse" not in json.dumps(reader_process(primary, standby, "wildcard certificate")["recall"])
    finally:
        resume_replay(standby)
    replayed(primary, standby)
    other = reader_process(primary, standby, "when is the backup window?")
    assert "Maren moved the backup window to Sunday nights." in other["recall"]
    assert "Maren" in other["journal"] and "Maren moved the backup window to Sunday nights." in other["across"]
    with MemoryStore.connect(NAME, env=env_of(primary, standby)) as agent:  # caught up: the standby again
        agent.recall("who renewed the wildcard certificate?")
        assert agent.backend._reads.last == "standby"


def test_a_read_dsn_that_reaches_the_primary_is_read_as_up_to_date(servers):
    primary, _, _, _ = servers
    with MemoryStore.connect(NAME, env=env_of(primary, primary)) as agent:
        agent.remember("Odile keeps the spare badge in the top drawer.")
        texts = [hit.text for hit in agent.recall("where is the spare badge?").hits]
        assert "Odile keeps the spare badge in the top drawer." in texts
        assert agent.backend._reads.last == "standby" and agent.backend.read_degraded is None


def test_a_standby_that_refuses_us_leaves_the_reads_to_the_primary_naming_the_fix(servers):
    primary, standby, _, _ = servers
    wrong = standby.replace("user=postgres", "user=nobody_here")
    with MemoryStore.connect(NAME, env=env_of(primary, wrong)) as agent:
        result = agent.recall("who rotates the on-call pager?")
        assert "Priya rotates the on-call pager every Tuesday." in [hit.text for hit in result.hits]
        assert 'role "nobody_here" does not exist' not in (result.degraded or "")  # the server's words, reworded
        assert "nobody_here does not exist" in result.degraded
        assert "MEMVAULT_INDEX_READ_DSN" in result.degraded and "Traceback" not in result.degraded


def test_a_standby_that_is_down_leaves_the_reads_to_the_primary(servers):
    primary, standby_dsn, standby, _ = servers
    with MemoryStore.connect(NAME, env=env_of(primary, standby_dsn)) as agent:
        assert agent.recall("who rotates the on-call pager?").hits
        assert agent.backend._reads.last == "standby"
        standby.stop()
        try:
            result = agent.recall("who rotates the on-call pager?")
            assert "Priya rotates the on-call pager every Tuesday." in [hit.text for hit in result.hits]
            assert agent.backend._reads.last == "primary"
            assert "read replica" in result.degraded and "MEMVAULT_INDEX_READ_DSN" in result.degraded
            other = reader_process(primary, standby_dsn, "where are the deploy keys?")
            assert "The deploy keys live in the ops password vault." in other["recall"]
            assert "The deploy keys live in the ops password vault." in other["across"]
            assert "unreachable" in other["degraded"]
        finally:
            standby.start()
            connection_pools_forgotten()  # the next tests' stores try the standby again at once


def test_a_read_the_standby_fails_runs_again_on_the_primary(servers):
    """A read DSN whose server answers the connection but fails the read (here: a database without
    the vault's tables) costs no error: the read runs again on the primary, and says so."""
    primary, _, _, _ = servers
    elsewhere = primary.rsplit("dbname=", 1)[0] + "dbname=postgres"
    with MemoryStore.connect(NAME, env=env_of(primary, elsewhere)) as agent:
        result = agent.recall("who rotates the on-call pager?")
        assert "Priya rotates the on-call pager every Tuesday." in [hit.text for hit in result.hits]
        assert "MEMVAULT_INDEX_READ_DSN" in result.degraded and agent.backend._reads.last == "primary"
    env = env_of(primary, elsewhere)
    connection_pools_forgotten()
    across = search_across([NAME], "where are the deploy keys?", dsn=primary, like=server_bounds(env))
    assert "The deploy keys live in the ops password vault." in [found.hit.text for found in across.hits]
    assert "MEMVAULT_INDEX_READ_DSN" in across.degraded


def connection_pools_forgotten() -> None:
    """A fresh start for what this process found of its standbys (kept per pool, beyond a store)."""
    replica._STANDBYS.clear()


def test_an_agent_role_reads_the_standby_and_its_own_writes(servers):
    """A writer role (no superuser, row-level security on) may ask both servers' WAL positions."""
    primary, standby, _, _ = servers
    with psycopg.connect(primary, autocommit=True) as admin:
        admin.execute('CREATE ROLE "replica_agent" LOGIN NOSUPERUSER NOBYPASSRLS')
        admin.execute(f'GRANT CONNECT ON DATABASE "{primary.rsplit("dbname=", 1)[1]}" TO "replica_agent"')
        admin.execute(f'GRANT "memvault_write_{NAME}" TO "replica_agent"')
    agent_primary, agent_standby = (dsn.replace("user=postgres", "user=replica_agent") for dsn in (primary, standby))
    replayed(primary, standby)
    pause_replay(standby)
    try:
        with MemoryStore.connect(NAME, env=env_of(agent_primary, agent_standby)) as agent:
            assert agent.recall("who rotates the on-call pager?").hits
            assert agent.backend._reads.last == "standby" and agent.backend.read_degraded is None
            agent.remember("Wiebke signs off the quarterly access review.")
            texts = [hit.text for hit in agent.recall("who signs off the access review?").hits]
            assert "Wiebke signs off the quarterly access review." in texts
            assert agent.backend.read_degraded is None
    finally:
        resume_replay(standby)


def test_health_and_validate_name_a_read_replica_that_refuses_us(servers):
    primary, standby, _, root = servers
    wrong = standby.replace("user=postgres", "user=nobody_here")
    with MemoryStore.connect(NAME, env=env_of(primary, wrong)) as agent:
        report = agent.health_report()
    found = [f for f in report["findings"] if "read replica" in f["message"]]
    assert found and found[0]["severity"] == "warning" and report["errors"] == 0
    assert "MEMVAULT_INDEX_READ_DSN" in found[0]["message"] and "nobody_here" in found[0]["message"]
    command = [str(Path(sys.executable).parent / "memvault"), "--vault", str(root), "validate"]
    done = subprocess.run(command, env={**ENV, **env_of(primary, wrong)}, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "MEMVAULT_INDEX_READ_DSN" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


#: a long-lived reader that wrote nothing (an MCP server's): three recalls, the last two after
#: half the lag bound and after the whole of it
LONG_READER = """
import json, os, sys, time
from memvault import MemoryStore
with MemoryStore.connect(sys.argv[1], env=dict(os.environ)) as agent:
    seen = []
    for pause in (0.0, 0.6, 1.2):
        time.sleep(pause)
        result = agent.recall(sys.argv[2])
        seen.append({"hits": [h.text for h in result.hits], "degraded": result.degraded,
                     "went": agent.backend._reads.last})
print(json.dumps(seen))
"""


def test_a_standby_further_behind_than_the_timeout_is_not_read(servers):
    """Replication stopped (here: replay paused) behind the bound, index.timeoutSeconds (1 s
    here): a process that reads for longer than that goes to the primary, and says why."""
    primary, standby, _, root = servers
    replayed(primary, standby)
    pause_replay(standby)
    try:
        with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": primary}) as owner:
            owner.remember("Greta moved the standup to half past nine.")
        env = {**ENV, **env_of(primary, standby), "MEMVAULT_INDEX_TIMEOUT_SECONDS": "1"}
        done = subprocess.run([sys.executable, "-c", LONG_READER, NAME, "when is the standup?"], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        first, second, third = json.loads(done.stdout)
    finally:
        resume_replay(standby)
    fact = "Greta moved the standup to half past nine."
    assert fact not in first["hits"] and fact not in second["hits"]  # within the bound: the standby
    assert first["went"] == second["went"] == "standby" and second["degraded"] is None
    assert fact in third["hits"] and third["went"] == "primary"
    assert "more than 1 s behind the primary" in third["degraded"] and "pg_wal_replay_resume" in third["degraded"]
