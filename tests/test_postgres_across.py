"""`search --across` in a fixed number of statements on one pooled connection (issue 42, item
5), against a real server: the same fused ranking as each vault searched alone
(`across_per_vault`, the reference), statements and round trips counted on the wire (libpq's
own trace of what the connection sent and received), row-level security still deciding which
vaults a role reads, and bad input refused with errors that name the fix."""

import json
import re
import tempfile
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from bench.generate import make_vault
from memvault import MemoryStore
from memvault.cli.main import cli
from memvault.indexer.backend.postgres import connection
from memvault.indexer.engine.across import MAX_ACROSS_VAULTS, search_across
from memvault.indexer.engine.across_per_vault import search_across_per_vault
from memvault.vault.errors import IndexUnavailable, InvalidRecord

pytestmark = pytest.mark.one_engine("a search across vaults reads an index server's partitions: the server's own")

VAULTS = [f"acr-{i}" for i in range(10)]
QUESTIONS = [
    "who keeps the deploy keys?",
    "what did Priya say about the login page?",
    "pager rotation on Mondays",
    "budget review",
    "東京 meeting",
    "the of and",  # stop words only
    "zzzz nothing matches this",
]


def on_server(root: Path, name: str) -> Path:
    config = json.loads((root / "memvault.json").read_text())
    config["index"] = {"backend": "postgres", "name": name}
    (root / "memvault.json").write_text(json.dumps(config, indent=2) + "\n")
    return root


@pytest.fixture(scope="module")
def vaults(postgres_server):
    """Ten vaults of generated memories (journal and lite tiers, other sizes and seeds, so each
    vault's BM25 statistics differ), and a few facts of their own."""
    dsn = postgres_server.new_database()
    folder = Path(tempfile.mkdtemp(prefix="memvault-across-"))
    for i, name in enumerate(VAULTS):
        mode = "lite" if i % 4 == 3 else "journal"
        root = on_server(make_vault(folder / name, 60 + 25 * i, per_day=30, mode=mode, seed=i + 1), name)
        with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn}) as store:
            store.rebuild()
            store.remember(f"Vault {i}: Morgan keeps the deploy keys in the red binder.")
            store.remember("The pager rotates on Mondays.")  # the same text in every vault
    return dsn


def answers(result) -> list:
    return [(hit.vault, hit.hit.id, hit.hit.source, hit.hit.score, hit.hit.sources) for hit in result.hits]


@pytest.mark.parametrize("question", QUESTIONS)
def test_the_batched_search_ranks_as_each_vault_searched_alone(vaults, question):
    for names, limit in ((VAULTS, 10), (VAULTS[:3], 25), (VAULTS[4:5], 5)):
        batched = search_across(names, question, dsn=vaults, limit=limit)
        reference = search_across_per_vault(names, question, dsn=vaults, limit=limit)
        assert answers(batched) == answers(reference), (question, names)
        assert batched.to_json(explain=True) == reference.to_json(explain=True)
        assert batched.degraded == reference.degraded


class WireTrace:
    """libpq's trace of every message a pooled connection sends and receives: statements are the
    Execute (extended protocol) and Query (simple) messages sent, round trips the ReadyForQuery
    messages received (the server sends one when it has answered everything sent before)."""

    def __init__(self, conn, path: Path):
        self.conn, self.path = conn, path
        self.file = path.open("w")
        conn.pgconn.trace(self.file.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)

    def counts(self) -> tuple[int, int]:
        self.conn.pgconn.untrace()
        self.file.close()
        lines = self.path.read_text().splitlines()
        sent = [line.split("\t")[2] for line in lines if line.startswith("F\t")]
        received = [line.split("\t")[2] for line in lines if line.startswith("B\t")]
        return sum(kind in ("Execute", "Query") for kind in sent), received.count("ReadyForQuery")


def traced(dsn: str, tmp_path: Path, call) -> tuple[int, int, set[int]]:
    """(statements, round trips, backend pids) of `call()` on this process's pool for `dsn`."""
    pool = connection.shared_pool(dsn)
    assert pool.idle, "the pool keeps a connection from the warm-up call"
    traces = [WireTrace(conn, tmp_path / f"trace-{id(conn)}") for conn in pool.idle]
    pids = {conn.info.backend_pid for conn in pool.idle}
    call()
    counted = [trace.counts() for trace in traces]
    after = {conn.info.backend_pid for conn in pool.idle}
    return sum(c[0] for c in counted), sum(c[1] for c in counted), pids | after


def test_statements_and_round_trips_do_not_grow_with_the_vaults(vaults, tmp_path, monkeypatch):
    monkeypatch.setattr(connection, "PROBE_AFTER_IDLE_SECONDS", 3600.0)  # no liveness probe inside a count
    keeper = connection.ServerSession(vaults)  # a session of the process that stays open (as an owner's
    with keeper():  # would): the pool keeps its idle connections between the calls
        pass
    search_across(VAULTS, "warm up the pool", dsn=vaults)  # the connection's types and settings
    counts = {}
    for size in (1, 3, 10):
        names = VAULTS[:size]
        statements, trips, pids = traced(vaults, tmp_path, lambda names=names: search_across(names, "deploy keys",
                                                                                               dsn=vaults))  # fmt: skip
        counts[size] = (statements, trips)
        assert len(pids) == 1, f"{size} vaults used {len(pids)} server backends"
    assert counts[1] == counts[3] == counts[10] == (2, 2), counts
    # what it replaced: about twenty statements a vault, one after the other
    statements, trips, _ = traced(vaults, tmp_path, lambda: search_across_per_vault(VAULTS, "deploy keys", dsn=vaults))
    assert statements > 10 * counts[10][0] and trips > 10 * counts[10][1], (statements, trips)
    keeper.close()


def test_a_role_sees_only_the_vaults_it_is_granted(vaults, postgres_server):
    reader = postgres_server.create_role(vaults, "across_reader")
    with psycopg.connect(vaults, autocommit=True) as admin:
        for name in VAULTS[:2]:
            admin.execute(f'GRANT "memvault_read_{name}" TO across_reader')
    mine = search_across(VAULTS[:2], "deploy keys", dsn=reader)
    assert {hit.vault for hit in mine.hits} == set(VAULTS[:2])
    assert answers(mine) == answers(search_across(VAULTS[:2], "deploy keys", dsn=vaults))
    with pytest.raises(IndexUnavailable) as refused:
        search_across(VAULTS[:3], "deploy keys", dsn=reader)
    message = str(refused.value)
    assert VAULTS[2] in message and "GRANT memvault_read_<name>" in message
    assert VAULTS[0] not in message.split("GRANT")[0] and "SELECT" not in message


def test_a_vault_whose_policy_is_gone_is_still_refused_by_its_leaves(vaults, postgres_server):
    """With the policy on memvault_vaults opened to everyone, the first statement shows the
    role a vault it has no grant for; reading that vault's leaves is still refused, in words."""
    reader = postgres_server.create_role(vaults, "across_leaves")
    with psycopg.connect(vaults, autocommit=True) as admin:
        admin.execute(f'GRANT "memvault_read_{VAULTS[0]}" TO across_leaves')
        admin.execute("ALTER POLICY memvault_vaults_reader ON memvault_vaults USING (true)")
        admin.execute("ALTER POLICY memvault_generations_reader ON memvault_generations USING (true)")
    try:
        with pytest.raises(IndexUnavailable) as refused:
            search_across(VAULTS[:2], "deploy keys", dsn=reader)
        assert "may not read" in str(refused.value) and "GRANT memvault_read_<name>" in str(refused.value)
    finally:
        with psycopg.connect(vaults, autocommit=True) as admin:
            for table, policy in (("memvault_vaults", "reader_role"), ("memvault_generations", None)):
                using = f"pg_has_role(current_user, {policy}, 'MEMBER')" if policy else (
                    "pg_has_role(current_user, 'memvault_read_' || vault, 'MEMBER')")  # fmt: skip
                admin.execute(f"ALTER POLICY {table}_reader ON {table} USING ({using})")


@pytest.mark.parametrize(
    "names, said",
    [
        (["acr-0", "no-such-vault"], "no-such-vault are not on the index server"),
        ([], "needs at least one vault name"),
        ([f"v{i}" for i in range(MAX_ACROSS_VAULTS + 1)], f"the limit is {MAX_ACROSS_VAULTS}"),
        (["acr-0", 'x"; DROP TABLE memvault_rows; --'], "is not a vault name"),
        (["Acr-0"], "is not a vault name"),
        (["a" * 41], "is not a vault name"),
        (["acr-0%(vault)s"], "is not a vault name"),
        (["\x00evil"], "is not a vault name"),
    ],
)
def test_bad_names_are_refused_naming_them(vaults, names, said):
    with pytest.raises((IndexUnavailable, InvalidRecord)) as refused:
        search_across(names, "deploy keys", dsn=vaults)
    assert said in str(refused.value)
    assert "\x00" not in str(refused.value) and "SELECT" not in str(refused.value)
    with psycopg.connect(vaults) as conn:  # nothing was run
        assert conn.execute("SELECT to_regclass('memvault_rows')").fetchone()[0] is not None


def test_the_command_line_says_what_is_wrong_without_a_traceback(vaults, monkeypatch):
    monkeypatch.setenv("MEMVAULT_INDEX_DSN", vaults)
    runner = CliRunner()
    done = runner.invoke(cli, ["search", "--across", ",".join(VAULTS), "--json", "deploy keys"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["vaults"] == VAULTS
    for across, said in (("acr-0,missing-one", "missing-one are not on the index server"),
                         ("acr-0,Bad;Name", "is not a vault name"),
                         (",".join(f"v{i}" for i in range(40)), "the limit is 32")):  # fmt: skip
        refused = runner.invoke(cli, ["search", "--across", across, "deploy keys"])
        assert refused.exit_code == 1 and said in refused.output, refused.output
        assert "Traceback" not in refused.output and not re.search(r"\bSELECT\b", refused.output)


def test_a_vault_whose_model_is_unavailable_is_degraded_as_when_searched_alone(tmp_path, postgres_dsn):
    """One vault's vectors say another model built them (here one whose server is not running):
    its answer is BM25's with the reason, exactly as its own recall says, and the other vault's
    answer is whole."""
    for i, name in enumerate(("acr-ok", "acr-other-model")):
        root = on_server(make_vault(tmp_path / name, 80, per_day=20, mode="journal", seed=50 + i), name)
        with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": postgres_dsn}) as store:
            store.rebuild()
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute("UPDATE memvault_generations SET embedding = %s WHERE vault = 'acr-other-model'",
                      (json.dumps({"provider": "ollama", "model": "nomic-embed-text:v1.5", "dim": 768}),))  # fmt: skip
    names = ["acr-ok", "acr-other-model"]
    batched = search_across(names, "deploy keys budget", dsn=postgres_dsn)
    reference = search_across_per_vault(names, "deploy keys budget", dsn=postgres_dsn)
    assert answers(batched) == answers(reference) and batched.hits
    assert batched.degraded == reference.degraded
    assert batched.degraded.startswith("acr-other-model: vector search unavailable")
