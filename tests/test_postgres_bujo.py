"""BuJo on the PostgreSQL backend: each generation's replay projection lives in its row on the
server (memvault_generations.replay), written before the generation is switched in and read by
recall's supersession filter, MemoryJournal and health, on the owner and on connected clients."""

import hashlib
import json

import psycopg
import pytest

from memvault import MemoryStore
from memvault.indexer.engine.connected import NO_GRAPH_EXPANSION
from memvault.indexer.services.intake_worker import IntakeWorker
from memvault.vault.replay import read_sidecar
from tests.capture_helpers import (
    EMBED_PATH,
    OLLAMA_PATH,
    ChatScript,
    extraction,
    hash_embeddings,
    make_capture_vault,
    memory,
)
from tests.intake_helpers import Clock, store_for
from tests.loopback import LoopbackServer
from tests.postgres_helpers import on_server_database

pytestmark = pytest.mark.one_engine(
    "these tests read and change the server engine's own rows (memvault_generations.replay) on a database of "
    "their own; no local run of them could check anything"
)

NAME = "bujo-notes"
OLD, NEW = "The Atlas deadline is February 1.", "The Atlas deadline is March 15."
FORGET_PROJECTION = "UPDATE memvault_generations SET replay = NULL, replay_sha256 = NULL WHERE vault = %s"


def supersede_first(memories):
    return json.dumps({"decisions": [{"index": m["index"], "action": "SUPERSEDE", "target": m["candidates"][0]["id"],
                                      "text": m["text"]} for m in memories]})  # fmt: skip


@pytest.fixture
def captured(tmp_path, postgres_dsn):
    """A BuJo vault on the server where run-2's fact superseded run-1's."""
    turns = iter([extraction(memory(OLD)), extraction(memory(NEW))])
    with LoopbackServer() as server:
        server.route(EMBED_PATH, hash_embeddings)
        server.route(OLLAMA_PATH, ChatScript(lambda _t: next(turns), supersede_first))
        root = make_capture_vault(tmp_path, server.url, embed_endpoint=server.url)
        on_server_database(root, postgres_dsn, NAME)
        clock = Clock()
        store = store_for(root, clock)
        for run in ("run-1", "run-2"):
            store.persist_completed_turn(run, run, capture_text=run)
            IntakeWorker(store, clock=clock).process_due()
        yield root, store, postgres_dsn
        store.close()


def held(dsn: str) -> list[tuple[int, bytes | None, str | None, bool]]:
    """(generation, projection, its digest, serving) of every generation the server keeps."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT g.generation, g.replay, g.replay_sha256, g.generation = v.serving "
                            "FROM memvault_generations g JOIN memvault_vaults v ON v.name = g.vault "
                            "WHERE g.vault = %s ORDER BY g.generation", (NAME,)).fetchall()  # fmt: skip
    return [(number, None if data is None else bytes(data), digest, serving) for number, data, digest, serving in rows]


def texts(store, query="Atlas deadline") -> list[str]:
    return [hit.text for hit in store.recall(query).hits]


def test_the_projection_is_kept_with_its_generation_on_the_server_and_switched_with_it(captured):
    root, store, dsn = captured
    _, sidecar = read_sidecar(root)
    [(first, data, digest, serving)] = held(dsn)
    assert serving and data == sidecar and digest == hashlib.sha256(sidecar).hexdigest()
    assert not list((root / ".index").glob("*/replay")), "no projection file beside a server-indexed vault"
    [lifecycle] = read_sidecar(root)[0].superseded().values()
    assert texts(store)[0] == NEW and OLD not in texts(store)
    assert store.supersession_state(lifecycle["id"]) == "superseded"
    assert store.supersession_state(lifecycle["by"]) == "valid"
    page = store.journal(from_date="2026-11-20", through_date="2026-12-10", time_zone="Europe/Amsterdam")
    states = {entry["text"]: entry["state"] for entry in page.entries}
    assert states[OLD] == "superseded" and states[NEW] == "valid"

    store.rebuild()  # a new generation gets the projection before it serves
    generations = held(dsn)
    [(rebuilt, data, digest, serving)] = [g for g in generations if g[3]]
    assert rebuilt > first and data == sidecar and digest == hashlib.sha256(sidecar).hexdigest()
    assert texts(store)[0] == NEW and OLD not in texts(store)
    assert store.health_report(strict=True)["healthy"]


def test_recall_reads_the_servers_projection_and_health_compares_it_with_the_sidecar(captured):
    """The filter is the server's row, not a file: emptied there, the superseded fact shows
    again and health names the mismatch; a rebuild projects the sidecar again."""
    root, store, dsn = captured
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(FORGET_PROJECTION, (NAME,))
    assert OLD in texts(store)
    codes = [f["code"] for f in store.health_report(strict=True)["findings"]]
    assert "canonical_mismatch" in codes
    store.rebuild()
    assert OLD not in texts(store)
    assert store.health_report(strict=True)["healthy"]


def test_a_connected_client_excludes_superseded_memories_and_says_it_does_not_expand(captured):
    root, store, dsn = captured
    store.start_intake(poll_seconds=0.05)  # the owner registers the vault's settings for its clients
    with MemoryStore.connect(NAME, env={"MEMVAULT_INDEX_DSN": dsn}) as agent:
        result = agent.recall("Atlas deadline")
        found = [hit.text for hit in result.hits]
        assert found[0] == NEW and OLD not in found
        assert NO_GRAPH_EXPANSION in result.degraded  # explicit recall from here: direct hits only, said so
        auto = agent.recall("Atlas deadline", mode="auto")
        assert NO_GRAPH_EXPANSION not in (auto.degraded or "")  # auto recall never expands
        page = agent.journal(from_date="2026-11-20", through_date="2026-12-10", time_zone="Europe/Amsterdam")
        states = {entry["text"]: entry["state"] for entry in page.entries}
        assert states[OLD] == "superseded" and states[NEW] == "valid"
        with psycopg.connect(dsn, autocommit=True) as conn:  # the client reads the server's row too
            conn.execute(FORGET_PROJECTION, (NAME,))
        assert OLD in [hit.text for hit in agent.recall("Atlas deadline").hits]


def test_search_across_vaults_excludes_a_bujo_vaults_superseded_memories(captured, postgres_server):
    """A reader role granted the vault reads its projection's digest and bytes too (row-level
    security on memvault_generations), so a search across vaults drops what was superseded."""
    from memvault import search_across

    root, store, dsn = captured
    reader = postgres_server.create_role(dsn, "bujo_reader")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'GRANT "memvault_read_{NAME}" TO bujo_reader')
    found = [hit.hit.text for hit in search_across([NAME], "Atlas deadline", dsn=reader).hits]
    assert found[0] == NEW and OLD not in found
    with psycopg.connect(dsn, autocommit=True) as conn:  # the filter is the server's row
        conn.execute(FORGET_PROJECTION, (NAME,))
    assert OLD in [hit.hit.text for hit in search_across([NAME], "Atlas deadline", dsn=reader).hits]


def test_captures_read_back_proves_the_bytes_the_server_holds(captured):
    """verify_projection compares the digest the server computes of the bytes it holds (not the
    digest column written beside them) with the sidecar's: a changed byte is caught."""
    from memvault.indexer.maintenance.replay_index import verify_projection
    from memvault.vault.errors import IndexUnavailable

    root, store, dsn = captured
    _, sidecar = read_sidecar(root)
    generation = store.serving_index().generation
    verify_projection(generation, sidecar)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE memvault_generations SET replay = replay || '\\x20'::bytea WHERE vault = %s", (NAME,))
    with pytest.raises(IndexUnavailable, match="does not match the replay sidecar"):
        verify_projection(generation, sidecar)
