"""A client's role reads and writes only its vaults (the server's row-level security), and no
DSN password reaches output, logs or errors; a killed owner frees the server fence."""

import json
import signal

import psycopg
import pytest

from memvault import MemoryStore
from tests.engine_helpers import OwnerProcess, wait_for
from tests.test_team_store import files_text, make_home

pytestmark = pytest.mark.one_engine("the server's roles and row-level security: the PostgreSQL engine's own")

SECRET = "pw-never-printed-42"


def start_home(tmp_path, dsn, name):
    import json as _json

    root = make_home(tmp_path, name)
    config = _json.loads((root / "memvault.json").read_text())
    config["index"]["name"] = name
    (root / "memvault.json").write_text(_json.dumps(config, indent=2) + "\n")
    store = MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn})
    store.start_intake(poll_seconds=0.05)
    return root, store


def test_a_role_granted_one_vault_reads_and_writes_only_that_vault(tmp_path, postgres_server, postgres_dsn):
    root_a, owner_a = start_home(tmp_path, postgres_dsn, "team-a")
    root_b, owner_b = start_home(tmp_path, postgres_dsn, "team-b")
    try:
        with MemoryStore.connect("team-b", postgres_dsn) as admin_b:
            assert admin_b.remember("Team B keeps its budget in the finance sheet.").status == "added"
        agent_dsn = postgres_server.create_role(postgres_dsn, "agent_a")
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute('GRANT "memvault_write_team-a" TO agent_a')
        agent_dsn += f" password={SECRET}"  # trust auth on the socket ignores it; it must never be printed
        with MemoryStore.connect("team-a", agent_dsn) as mine:
            assert mine.persist_completed_turn("sec-1", "Team A moved its standup to 9:30.").status == "admitted"
            assert mine.remember("Team A deploys with the blue pipeline.").status == "added"
            assert mine.recall("which pipeline does team A deploy with?").hits
        with MemoryStore.connect("team-b", agent_dsn) as theirs:
            refused = theirs.persist_completed_turn("sec-2", "Team B budget doubled.")
            assert refused.status == "failed" and "team-b" in refused.message and SECRET not in refused.message
            result = theirs.recall("where does team B keep its budget?")
            assert result.hits == () and result.degraded and SECRET not in result.degraded
        with psycopg.connect(agent_dsn, autocommit=True) as conn:  # a client that forgets its filter
            vaults = {
                row[0]
                for row in conn.execute(
                    "SELECT vault FROM memvault_team_turns UNION ALL SELECT vault FROM memvault_team_facts"
                ).fetchall()
            }
            assert vaults == {"team-a"}
        wait_for(lambda: "9:30" in files_text(root_a), what="team A's turn in its files")
        assert "9:30" not in files_text(root_b)
    finally:
        owner_a.close()
        owner_b.close()


def test_a_killed_owner_frees_the_server_fence_and_a_live_one_is_named(tmp_path, postgres_dsn):
    root = make_home(tmp_path)
    owner = OwnerProcess(root, "serve", {"MEMVAULT_INDEX_DSN": postgres_dsn}).wait_serving()
    copy = make_home(tmp_path, "copy-elsewhere")
    other = MemoryStore.open(copy, env={"MEMVAULT_INDEX_DSN": postgres_dsn}, sync=False)
    try:
        with pytest.raises(Exception) as refused:
            other.start_intake(poll_seconds=0.05)
        assert f"pid {owner.proc.pid}" in str(refused.value)
        owner.proc.send_signal(signal.SIGKILL)
        owner.proc.wait(30)

        def took_over():
            try:
                other.start_intake(poll_seconds=0.05)
                return True
            except Exception:  # noqa: BLE001 - until the server sees the session gone
                return False

        wait_for(took_over, what="the fence freed by the killed owner")
        with MemoryStore.connect("team-a", postgres_dsn) as agent:
            owner_row = agent.intake_snapshot()["owner"]
            assert owner_row["pid"] != owner.proc.pid and agent.intake_snapshot()["ownerRunning"]
    finally:
        other.close()


def test_no_password_in_output_of_a_refused_connection(tmp_path):
    from memvault.indexer.engine.connected import ConnectedStore

    dsn = f"postgresql://agent:{SECRET}@127.0.0.1:1/nowhere?connect_timeout=2"
    store = ConnectedStore("team-a", dsn)
    result = store.persist_completed_turn("r-1", "The release is on Thursday.")
    assert result.reason == "index_server_unavailable" and SECRET not in json.dumps(result.to_json())
    from memvault.indexer.backend.base import IndexServerUnavailable

    with pytest.raises(IndexServerUnavailable) as unreachable:  # as a local vault indexed on that server
        store.recall("when is the release?")
    assert "127.0.0.1" in str(unreachable.value) and SECRET not in str(unreachable.value)


def test_unreadable_turns_a_writer_planted_are_set_aside_and_hold_up_no_turn(tmp_path, postgres_server, postgres_dsn):
    """A writer may insert what it likes into its vault's ledger with SQL of its own (a record no
    memvault client sends). More of them than a claim takes at once no longer wedge the owner:
    each is set aside on the server with its reason (which speaks of no file), and the turns
    behind them are projected."""
    from memvault.indexer.team.drain import CLAIM_BATCH

    root, owner = start_home(tmp_path, postgres_dsn, "team-a")
    try:
        agent_dsn = postgres_server.create_role(postgres_dsn, "agent_planter")
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute('GRANT "memvault_write_team-a" TO agent_planter')
        planted = CLAIM_BATCH + 44
        with psycopg.connect(agent_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO memvault_team_turns (vault, run_hash, payload_sha256, record) "
                         "SELECT 'team-a', md5(i::text) || md5(i::text), repeat('0', 64), 'not json'::bytea "
                         "FROM generate_series(1, %s) AS i", (planted,))  # fmt: skip
        with MemoryStore.connect("team-a", agent_dsn) as agent:
            assert agent.persist_completed_turn("behind-1", "Team A ships on Tuesdays now.").status == "admitted"
            wait_for(lambda: "Tuesdays" in files_text(root), what="the turn behind the planted ones in the files")
            remote = agent.intake_snapshot()["remote"]
            assert (remote["turnsWaiting"], remote["turnsRefused"], remote["turnsProjected"]) == (0, planted, 1)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            reasons = {
                row[0] for row in conn.execute("SELECT refused FROM memvault_team_turns WHERE refused IS NOT NULL")
            }
        assert len(reasons) == planted and all("not a valid intake JSON document" in reason for reason in reasons)
        assert not any("file" in reason for reason in reasons)
    finally:
        owner.close()
    from memvault.indexer.backend.postgres.team import TeamServer

    server = TeamServer(postgres_dsn, "team-a")  # the next owner's start: they wait again (a newer owner may read them)
    server.register_owner("home", 1, {"writeMode": "direct", "tier": "lite", "timeZone": "UTC"})
    assert (server.counts()["turnsWaiting"], server.counts()["turnsRefused"]) == (planted, 0)
    server.close()
