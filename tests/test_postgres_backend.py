"""The PostgreSQL + pgvector index backend against a real server (tests/postgres_helpers.py):
configuration, a vault kept on the server end to end, isolation by the server, BM25 parity."""

import json
import re
import uuid
from datetime import UTC

import psycopg
import pytest

from memvault import MemoryStore
from memvault.indexer.backend.postgres import lexical
from memvault.indexer.backend.postgres.connection import redact
from memvault.indexer.search import bm25
from memvault.vault.config import default_config_data, load_config, render_config
from memvault.vault.errors import InvalidConfig
from memvault.vault.init import init_vault

pytestmark = pytest.mark.one_engine(
    "the PostgreSQL engine's own configuration, SQL, isolation and BM25 parity with the exact ranking"
)


def make_vault(tmp_path, name="team-a", mode="journal"):
    root = tmp_path / name
    init_vault(root, render_config(default_config_data(mode, "UTC", {"backend": "postgres", "name": name})))
    return root


@pytest.mark.parametrize(
    "text",
    [
        "What did Caroline paint at the lake in May?",
        "what is the of",  # stop words only: they are kept rather than searching nothing
        "Melanie's pottery_class, 2023-05-07 — Ünïcode café",
        "東京で会議 and 서울 trip",
        " ".join(f"word{i}" for i in range(100)),  # capped
        "AND OR NOT +pottery -class",
    ],
)
def test_a_query_searches_the_same_words_on_either_engine(text):
    # BM25 on the server counts the same tokens as Tantivy's: a drift here changes rankings
    assert lexical.query_words(text) == [w.lower() for w in bm25.query_words(text)]
    assert lexical.query_bigrams(text) == bm25.query_bigrams(text)


def test_index_block_is_written_and_read(tmp_path):
    root = make_vault(tmp_path, "notes")
    data = json.loads((root / "memvault.json").read_text())
    assert data["index"] == {"backend": "postgres", "name": "notes"}
    config = load_config(root, {"MEMVAULT_INDEX_DSN": "host=db password=hunter2"})
    assert (config.index.backend, config.index.name, config.index.dsn) == (
        "postgres",
        "notes",
        "host=db password=hunter2",
    )
    assert "hunter2" not in repr(config)


def test_name_defaults_to_the_folder(tmp_path):
    root = tmp_path / "Shared-Notes"
    init_vault(root, render_config(default_config_data("lite", "UTC", {"backend": "postgres"})))
    assert load_config(root, {}).index.name == "shared-notes"


@pytest.mark.parametrize("dsn", ["host=db password=hunter2", "postgresql://bob:hunter2@db/memvault"])
def test_a_password_in_the_file_is_refused_without_repeating_it(tmp_path, dsn):
    root = make_vault(tmp_path)
    data = json.loads((root / "memvault.json").read_text())
    data["index"]["dsn"] = dsn
    (root / "memvault.json").write_text(json.dumps(data))
    with pytest.raises(InvalidConfig) as caught:
        load_config(root, {})
    assert "index.dsn carries a password" in str(caught.value) and "MEMVAULT_INDEX_DSN" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_a_second_vector_list_on_the_server_is_refused_not_ignored(tmp_path):
    root = make_vault(tmp_path)
    data = json.loads((root / "memvault.json").read_text())
    data["memory"] |= {"mode": "journal", "extraEmbeddings": {"provider": "e5-small"}}
    (root / "memvault.json").write_text(json.dumps(data))
    with pytest.raises(InvalidConfig) as caught:
        load_config(root, {})
    assert "memory.extraEmbeddings is not served by an index server" in str(caught.value)
    assert 'index.backend "local"' in str(caught.value)


def test_redact_removes_passwords_in_both_forms():
    text = "failed for host=db password=hunter2 and postgresql://bob:s3cret@db/x"
    shown = redact(text, "host=db password=hunter2")
    assert "hunter2" not in shown and "s3cret" not in shown and "host=db" in shown


def test_a_vault_kept_on_the_server(tmp_path, postgres_dsn):
    root = make_vault(tmp_path)
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    with MemoryStore.open(root, env=env) as store:
        assert store.remember("Morgan chose blue as the deployment color.").status == "added"
        store.remember("Standup moved to 10:00.")
        assert store.remember("Morgan chose blue as the deployment color.").status == "duplicate"
        hits = store.recall("which color did Morgan choose?").hits
        assert hits[0].text == "Morgan chose blue as the deployment color."
        assert not (root / ".index").exists() or not any((root / ".index").glob("gen-*"))
        report = store.rebuild()
        assert report.memories == 2
        assert store.recall("standup").hits[0].text == "Standup moved to 10:00."
        health = store.health_report(strict=True)
        assert health["healthy"], health["findings"]
        server = health["details"]["server"]
        assert int(server["postgresql"].split(".")[0]) >= 16 and server["pgvector"] >= "0.8"
        assert (server["vault"], server["generation"]) == ("team-a", store.backend.serving_generation())
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute(
            "SELECT text FROM memvault_rows WHERE vault = 'team-a' AND embedding IS NOT NULL "
            "AND generation = (SELECT serving FROM memvault_vaults WHERE name = 'team-a')"
        ).fetchall()
    assert sorted(r[0] for r in rows) == ["Morgan chose blue as the deployment color.", "Standup moved to 10:00."]


def test_health_strict_names_a_hand_edit_the_server_has_not_seen(tmp_path, postgres_dsn):
    root = make_vault(tmp_path)
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    with MemoryStore.open(root, env=env) as store:
        receipt = store.remember("The release train leaves on Thursdays.")
    note = root / receipt.source.split("#")[0]
    note.write_text(note.read_text().replace("Thursdays", "Fridays"))
    with MemoryStore.open(root, env=env, sync=False) as store:
        findings = store.health_report(strict=True)["findings"]
        assert any(f["code"] == "stale_file" for f in findings), findings
        store.sync()
        assert store.health_report(strict=True)["healthy"]
        assert store.recall("release train").hits[0].text == "The release train leaves on Fridays."


def test_a_role_bound_to_one_vault_sees_only_that_vault(tmp_path, postgres_server, postgres_dsn):
    for name, fact in (("vault-a", "Alpha keeps the deploy keys."), ("vault-b", "Bravo keeps the budget.")):
        with MemoryStore.open(make_vault(tmp_path, name), env={"MEMVAULT_INDEX_DSN": postgres_dsn}) as store:
            store.remember(fact)
    reader = postgres_server.create_role(postgres_dsn, "reader_a")
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute('GRANT "memvault_read_vault-a" TO reader_a')
    with psycopg.connect(reader) as conn:
        # no WHERE clause at all: the server's policy alone keeps vault-b out
        texts = [row[0] for row in conn.execute("SELECT text FROM memvault_rows").fetchall()]
        vaults = [row[0] for row in conn.execute("SELECT name FROM memvault_vaults").fetchall()]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM memvault_rows")
    assert texts == ["Alpha keeps the deploy keys."]
    assert vaults == ["vault-a"]


def test_bm25_on_the_server_ranks_as_tantivy_does(tmp_path, postgres_dsn):
    facts = [
        "Morgan chose blue as the deployment color.", "The blue team deploys on Fridays after lunch.",
        "Standup moved to 10:00 because of the time zones.", "Priya prefers green tea over coffee.",
        "The deployment pipeline runs on the build server.", "Morgan and Priya pair on the deployment scripts.",
        "Coffee machine on floor three is broken again.", "Budget review for the blue project is on Monday.",
    ]  # fmt: skip
    local = tmp_path / "local"
    init_vault(local, render_config(default_config_data("lite", "UTC")))
    server = make_vault(tmp_path, "parity", mode="lite")
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    with MemoryStore.open(local) as a, MemoryStore.open(server, env=env) as b:
        for fact in facts:
            a.remember(fact)
            b.remember(fact)
        a.rebuild()
        queries = ("blue deployment", "Morgan", "coffee on floor three", "who deploys on Fridays?", "lunch")
        # depth 2: the server skips rows that match only through neighbours once they cannot reach the list
        for query, depth in [(query, depth) for query in queries for depth in (10, 2)]:
            left = a.serving_index().bm25.search_keys(query, depth)
            right = b.serving_index().bm25.search_keys(query, depth)
            assert [re.sub(r"#.*", "", k) for k, _ in left] == [re.sub(r"#.*", "", k) for k, _ in right]
            assert [a.serving_index().bm25.get_by_keys([k])[k].text for k, _ in left] == [
                b.serving_index().bm25.get_by_keys([k])[k].text for k, _ in right
            ], query
            for (_, x), (_, y) in zip(left, right, strict=True):
                assert y == pytest.approx(x, rel=0.05), query


def test_search_across_vaults_fuses_and_obeys_the_role(tmp_path, postgres_server, postgres_dsn):
    from memvault import search_across
    from memvault.vault.errors import IndexUnavailable

    facts = {"vault-a": ["Alpha keeps the deploy keys.", "Alpha waters the office plants."],
             "vault-b": ["Bravo keeps the deploy calendar.", "Bravo orders the pizza."]}  # fmt: skip
    for name, texts in facts.items():
        with MemoryStore.open(make_vault(tmp_path, name), env={"MEMVAULT_INDEX_DSN": postgres_dsn}) as store:
            for text in texts:
                store.remember(text)
    both = search_across(["vault-a", "vault-b"], "who keeps the deploy keys?", dsn=postgres_dsn)
    assert [(hit.vault, hit.hit.text) for hit in both.hits[:2]] == [
        ("vault-a", "Alpha keeps the deploy keys."),
        ("vault-b", "Bravo keeps the deploy calendar."),
    ]
    assert both.to_json()["hits"][0]["vault"] == "vault-a"
    reader = postgres_server.create_role(postgres_dsn, "reader_across")
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute('GRANT "memvault_read_vault-a" TO reader_across')
    mine = search_across(["vault-a"], "deploy", dsn=reader)
    assert {hit.vault for hit in mine.hits} == {"vault-a"} and mine.hits
    with pytest.raises(IndexUnavailable) as refused:
        search_across(["vault-a", "vault-b"], "deploy", dsn=reader)
    assert "vault-b" in str(refused.value) and "vault-a" not in str(refused.value).split("GRANT")[0]


def test_search_across_from_the_command_line(tmp_path, postgres_dsn, monkeypatch):
    from click.testing import CliRunner

    from memvault.cli.main import cli

    with MemoryStore.open(make_vault(tmp_path, "ops"), env={"MEMVAULT_INDEX_DSN": postgres_dsn}) as store:
        store.remember("The pager rotates on Mondays.")
    monkeypatch.setenv("MEMVAULT_INDEX_DSN", postgres_dsn)
    done = CliRunner().invoke(cli, ["search", "--across", "ops", "--json", "pager rotation"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    body = json.loads(done.output)
    assert body["vaults"] == ["ops"] and body["hits"][0]["vault"] == "ops"
    assert body["hits"][0]["text"] == "The pager rotates on Mondays."
    refused = CliRunner().invoke(cli, ["search", "--across", ",", "x"])
    assert refused.exit_code == 1 and "--across needs at least one vault name" in refused.output


def test_version_checks_name_the_fix():
    from memvault.indexer.backend.postgres.connection import version_problems

    assert version_problems(18, "18.3", "0.8.2") == []
    old = version_problems(15, "15.4", "0.7.4")
    assert len(old) == 2 and "older than 16" in old[0] and "ALTER EXTENSION vector UPDATE" in old[1]
    assert "CREATE EXTENSION vector" in version_problems(17, "17.1", "available 0.8.2, not installed")[0]
    assert "install it" in version_problems(17, "17.1", None)[0]


def test_validate_reaches_the_server_and_names_a_missing_extension(tmp_path, postgres_server):
    from click.testing import CliRunner

    from memvault.cli.main import cli

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # no pgvector in it
    dsn = postgres_server.dsn.replace("dbname=postgres", f"dbname={name}")
    root = make_vault(tmp_path)
    done = CliRunner().invoke(cli, ["--vault", str(root), "validate"], env={"MEMVAULT_INDEX_DSN": dsn})
    assert done.exit_code == 1 and "CREATE EXTENSION vector" in done.output, done.output
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    done = CliRunner().invoke(cli, ["--vault", str(root), "validate"], env={"MEMVAULT_INDEX_DSN": dsn})
    assert done.exit_code == 0 and "index on postgres" in done.output, done.output


def test_without_the_client_the_error_names_the_extra(tmp_path):
    import subprocess
    import sys

    root = make_vault(tmp_path)
    script = ("import sys; sys.modules['psycopg'] = None; from memvault.cli.main import cli; "
              f"cli(['--vault', {str(root)!r}, 'search', 'blue'])")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "pip install 'memvault[postgres]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_libpq_service_file_names_the_server(tmp_path, postgres_dsn, monkeypatch):
    # index.dsn "service=team" in the (committed) file; where and who live in libpq's own file
    parts = dict(part.split("=", 1) for part in postgres_dsn.split())
    service_file = tmp_path / "pg_service.conf"
    service_file.write_text("[team]\n" + "".join(f"{key}={value}\n" for key, value in parts.items()))
    monkeypatch.setenv("PGSERVICEFILE", str(service_file))
    root = make_vault(tmp_path)
    data = json.loads((root / "memvault.json").read_text())
    data["index"]["dsn"] = "service=team"
    (root / "memvault.json").write_text(json.dumps(data))
    with MemoryStore.open(root) as store:  # no MEMVAULT_INDEX_DSN at all
        store.remember("The service file points at the team server.")
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM memvault_rows WHERE vault = 'team-a'").fetchone()[0] == 1


def test_consolidation_counts_from_the_server(tmp_path, postgres_dsn):
    from datetime import datetime

    root = make_vault(tmp_path, mode="lite")
    with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": postgres_dsn}) as store:
        store.remember("The pager rotates on Mondays.", at=datetime(2026, 11, 2, 9, tzinfo=UTC))
        store.remember("The pager rotates on Mondays.", at=datetime(2026, 11, 3, 9, tzinfo=UTC))
        store.remember("Lunch is at noon.", at=datetime(2026, 11, 3, 10, tzinfo=UTC))
        (root / "daily" / "2026-11-04.md").write_text("- 09:00 The pager rotates on Mondays.\n")
        store.sync()
        report = store.consolidate()
    assert (report.curated, report.duplicate_fact_groups) == (3, 1)
    assert "2026-11-03" in (root / "index.md").read_text()


def test_a_bulk_import_finds_duplicates_like_single_remembers(tmp_path, postgres_dsn):
    root = make_vault(tmp_path, mode="lite")
    facts = [f"Imported fact number {i}." for i in range(40)]
    with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": postgres_dsn}) as store:
        first = store.remember_many(facts)
        again = store.remember_many(facts + ["One more fact."])
        assert store.remember("Imported fact number 3.").status == "duplicate"
    assert [o.receipt.status for o in first] == ["added"] * 40
    assert [o.receipt.status for o in again] == ["duplicate"] * 40 + ["added"]


def test_a_lost_database_is_one_rebuild_away(tmp_path, postgres_dsn):
    env = {"MEMVAULT_INDEX_DSN": postgres_dsn}
    root = make_vault(tmp_path)
    with MemoryStore.open(root, env=env) as store:
        store.remember("The backup tapes live in the basement.")
        store.remember("The basement key hangs by the door.")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE memvault_rows, memvault_files, memvault_generations, memvault_vaults CASCADE")
    with MemoryStore.open(root, env=env, sync=False) as store:
        assert store.rebuild().memories == 2
        assert store.recall("where are the backup tapes?").hits[0].text == "The backup tapes live in the basement."
        assert store.health_report(strict=True)["healthy"]


def _leaf_indexes(dsn: str, vault: str, generation: int) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {name for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename IN (%s, %s)",
            (f"memvault_rows_{vault}_g{generation}", f"memvault_post_{vault}_g{generation}")).fetchall()}  # fmt: skip


def test_a_bulk_import_into_a_new_vault_rebuilds_its_vector_index_after_the_load(tmp_path, postgres_dsn):
    # 300 rows into an empty generation: the HNSW index and the postings' index are dropped
    # and built again after the rows are in, in the same transaction, so the serving leaf never
    # lacks them; a smaller batch into the vault then inserts into them as they are
    root = make_vault(tmp_path, "bulk")
    facts = [f"Shipment {i} left the harbour of town {i % 17} on a barge." for i in range(300)]
    with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": postgres_dsn}) as store:
        assert [o.receipt.status for o in store.remember_many(facts)] == ["added"] * 300
        generation = store.backend.serving_generation()
        wanted = {f"memvault_rows_bulk_g{generation}_hnsw", f"mvpl_bulk_g{generation}", f"mvrd_bulk_g{generation}"}
        assert wanted <= _leaf_indexes(postgres_dsn, "bulk", generation)
        vector = store._engine._embedder().embed_query("barge from the harbour")
        assert len(store.backend.vector_candidates(generation, vector, 50)) == 50
        assert store.recall("shipment 123 harbour barge").hits[0].text == facts[123]
        more = [f"Crate {i} reached the depot on a lorry." for i in range(40)]
        assert [o.receipt.status for o in store.remember_many(more)] == ["added"] * 40
        assert wanted <= _leaf_indexes(postgres_dsn, "bulk", generation)
        assert store.recall("crate 7 depot lorry").hits[0].text == more[7]
        assert store.health_report(strict=True)["healthy"]
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("SET enable_seqscan = off")  # 300 rows: the planner would rather sort them
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                f'EXPLAIN SELECT key FROM "memvault_rows_bulk_g{generation}" ORDER BY embedding::vector(256) <=> '
                "(SELECT embedding FROM memvault_rows LIMIT 1)::vector(256) LIMIT 5"
            ).fetchall()
        )
    assert f"memvault_rows_bulk_g{generation}_hnsw" in plan, plan
