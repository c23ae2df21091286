"""Journal tier: vectors beside BM25, fused recall, the semantic queue and its catch-up."""

import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.search.hybrid import BM25_WEIGHT, RRF_K, VECTOR_WEIGHT, fuse
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from tests import postgres_helpers
from tests.postgres_helpers import on_the_tests_backend

REPO = Path(__file__).resolve().parent.parent
AMS = ZoneInfo("Europe/Amsterdam")
FACTS = [
    "Morgan chose blue as the deployment color.",
    "Priya lives in Rotterdam.",
    "The offsite is booked in Haarlem for 14 January.",
    "Sam adopted a rescue dog named Biscuit.",
    "The billing service times out on large invoice batches.",
]


@pytest.fixture
def journal_vault(tmp_path, request) -> Path:
    root = tmp_path / "journal"
    init_vault(root, render_config(default_config_data(mode="journal", time_zone="Europe/Amsterdam")))
    on_the_tests_backend(request, root)
    with MemoryStore.open(root) as store:
        for minute, fact in enumerate(FACTS):
            store.remember(fact, at=datetime(2026, 11, 30, 9, minute, tzinfo=AMS))
    return root


def vector_count(store: MemoryStore) -> int:
    return len(store._semantic._serving.vectors)


# --- fusion (pure) ---------------------------------------------------------------------------


def test_fusion_prefers_agreement_and_orders_ties_by_key():
    fused = fuse([("a", 9.0), ("b", 8.0), ("c", 1.0)], [("c", 0.9), ("b", 0.8)])
    assert [f.key for f in fused] == ["b", "a", "c"]
    again = fuse([("y", 1.0), ("x", 1.0)], None)
    assert [f.key for f in again][0] == "y"  # rank decides first; equal rank+score would fall back to key


def test_strength_is_relative_to_every_configured_retriever():
    best = fuse([("a", 5.0)], [("a", 0.9)])[0]
    assert best.strength == pytest.approx(1.0)
    bm25_only = fuse([("a", 5.0)], [])[0]
    assert bm25_only.strength == pytest.approx(BM25_WEIGHT / (BM25_WEIGHT + VECTOR_WEIGHT))
    vector_only = fuse([], [("v", 0.9)])[0]
    assert vector_only.strength == pytest.approx(VECTOR_WEIGHT / (BM25_WEIGHT + VECTOR_WEIGHT))
    lite = fuse([("a", 5.0)], None)[0]
    assert lite.strength == pytest.approx(1.0)
    assert lite.score == pytest.approx(BM25_WEIGHT * 2 / (RRF_K + 1))


def test_weak_scores_count_less_than_strong_ones_at_the_same_rank():
    strong = fuse([("a", 10.0), ("b", 9.9)], None)
    weak = fuse([("a", 10.0), ("b", 1.0)], None)
    assert strong[1].score > weak[1].score


# --- the journal tier end to end -------------------------------------------------------------


@pytest.mark.both_backends
def test_vectors_find_a_paraphrase_bm25_cannot(journal_vault):
    with MemoryStore.open(journal_vault) as store:
        result = store.recall("puppy pet", limit=3)
        assert result.degraded is None
        assert result.hits[0].text == "Sam adopted a rescue dog named Biscuit."
        assert "vector" in result.hits[0].explain and "bm25" not in result.hits[0].explain
        assert postgres_helpers.vector_count(store) == len(FACTS)


@pytest.mark.both_backends  # on the server a row's vector is written in its own commit: nothing to drain
def test_remember_does_not_wait_for_embeddings_but_close_drains_them(journal_vault):
    with MemoryStore.open(journal_vault) as store:
        store.remember("Lena speaks fluent Portuguese.", at=datetime(2026, 11, 30, 10, 0, tzinfo=AMS))
        assert store.recall("Portuguese").hits[0].text == "Lena speaks fluent Portuguese."  # BM25 at once
    with MemoryStore.open(journal_vault) as store:
        assert postgres_helpers.vector_count(store) == len(FACTS) + 1


@pytest.mark.both_backends
def test_hand_edits_reach_the_vectors_on_next_open(journal_vault):
    note = journal_vault / "daily/2026-11-30.md"
    note.write_text(note.read_text().replace("rescue dog named Biscuit", "cat named Pixel"))
    with MemoryStore.open(journal_vault) as store:
        store._semantic.drain(10)
        hit = store.recall("kitten", limit=1).hits[0]
        assert hit.text == "Sam adopted a cat named Pixel."
        assert postgres_helpers.vector_count(store) == len(FACTS)


@pytest.mark.both_backends
def test_a_process_killed_before_its_vectors_landed_is_caught_up(journal_vault):
    """Locally the vectors land from a queue after the rows; on the server in the rows' commit
    (no queue, no lag marker): a SIGKILL right after remember loses no vector on either."""
    local = postgres_helpers.TEST_BACKEND == "local"
    script = (
        "import os, signal; from datetime import datetime; from zoneinfo import ZoneInfo\n"
        "from memvault.indexer.engine.store import MemoryStore\n"
        f"s = MemoryStore.open({str(journal_vault)!r})\n"
        "if hasattr(s._semantic, '_queue'): s._semantic._queue._run_batch = lambda batch: None  # never lands\n"
        "s.remember('Tomas collects vintage typewriters.', at=datetime(2026, 11, 30, 11, 0, tzinfo=ZoneInfo('UTC')))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()[-500:]
    assert bool(list((journal_vault / ".index").glob("lag-*"))) == local, "the dead process left its lag marker"
    with MemoryStore.open(journal_vault) as store:
        assert postgres_helpers.vector_count(store) == len(FACTS) + 1
        assert store.recall("typewriter collector", limit=1).hits[0].text == "Tomas collects vintage typewriters."
    assert not list((journal_vault / ".index").glob("lag-*")), "dead and drained markers are gone"


@pytest.mark.both_backends
def test_wrong_embedding_identity_is_never_searched(journal_vault):
    config = json.loads((journal_vault / "memvault.json").read_text())
    config["memory"]["embeddings"] = {"provider": "ollama", "model": "nomic-embed-text:v1.5", "dim": 768}
    (journal_vault / "memvault.json").write_text(json.dumps(config))
    with MemoryStore.open(journal_vault) as store:
        result = store.recall("deployment color")
        assert "rebuild" in result.degraded and "vector" in result.degraded
        assert result.hits[0].text == "Morgan chose blue as the deployment color."  # BM25 still answers


@pytest.mark.both_backends
def test_provider_outage_degrades_recall_and_keeps_bm25(journal_vault, tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: connection refused
    with MemoryStore.open(journal_vault) as store:
        store.rebuild()
    config = json.loads((journal_vault / "memvault.json").read_text())
    with MemoryStore.open(journal_vault) as store:
        from memvault.indexer.search.embeddings import make_provider

        outage = make_provider("ollama", "m", 256, f"http://127.0.0.1:{port}", 0.5)
        postgres_helpers.replace_embedding_provider(store, outage)
        result = store.recall("deployment color")
    assert result.degraded and "unavailable" in result.degraded and f"127.0.0.1:{port}" in result.degraded
    assert result.hits[0].text == "Morgan chose blue as the deployment color."
    assert config["memory"]["embeddings"]["provider"] == "builtin"


@pytest.mark.both_backends
def test_rebuilds_answer_identically(journal_vault):
    queries = ["pet", "where does Priya live", "deployment", "January offsite", "invoice timeouts"]
    with MemoryStore.open(journal_vault) as store:
        # incremental updates leave deleted rows in Tantivy segments until they merge, and BM25
        # statistics count them, so scores drift (enough to swap near ties) until compaction
        store.compact()
        before = [[h.source for h in store.recall(q).hits] for q in queries]
    shutil.rmtree(journal_vault / ".index")
    with MemoryStore.open(journal_vault, sync=False) as store:
        store.rebuild()
        first = [[(h.source, round(h.score, 6)) for h in store.recall(q).hits] for q in queries]
        store.rebuild()
        second = [[(h.source, round(h.score, 6)) for h in store.recall(q).hits] for q in queries]
    assert first == second
    assert before == [[source for source, _ in hits] for hits in first]


@pytest.mark.both_backends
def test_lite_tier_never_embeds(new_vault):
    with MemoryStore.open(new_vault) as store:
        store.remember("a lite fact", at=datetime(2026, 11, 30, 9, 0, tzinfo=AMS))
        assert store._semantic is None
        assert not list((new_vault / ".index").rglob("vectors*"))
        assert "vector" not in store.recall("lite fact").hits[0].explain


# --- modes and routing through the store -----------------------------------------------------


@pytest.mark.both_backends
def test_auto_mode_injects_only_gated_direct_facts(journal_vault):
    with MemoryStore.open(journal_vault) as store:
        admitted = store.recall("Where does Priya live?", mode="auto")
        assert [h.text for h in admitted.hits] == ["Priya lives in Rotterdam."]
        assert admitted.gate["reason"] == "admitted" and admitted.gate["shape"] == "work_live_location"
        unsupported = store.recall("Tell me something about pets", mode="auto")
        assert unsupported.hits == () and unsupported.gate["reason"] != "admitted"
        # the same question in tool mode still shows the evidence
        assert store.recall("Tell me something about pets", limit=3).hits


def test_active_chat_and_resume_questions_never_touch_the_index(journal_vault):
    shutil.rmtree(journal_vault / ".index")  # any backend access would now say "degraded"
    with MemoryStore.open(journal_vault, sync=False) as store:
        for mode in ("tool", "auto"):
            chat = store.recall("What was your previous reply?", mode=mode)
            assert chat.hits == () and chat.degraded is None and "conversation history" in chat.guidance
            resume = store.recall("continue where you left off", mode=mode)
            assert resume.hits == () and resume.degraded is None and "run history" in resume.guidance
            assert "RunHistory" not in resume.guidance  # no host tool configured: none is named
    assert not (journal_vault / ".index").exists()


@pytest.mark.both_backends
def test_empty_tool_answer_repeats_the_run_history_handoff(new_vault):
    with MemoryStore.open(new_vault) as store:
        store.remember("only fact", at=datetime(2026, 11, 30, 9, 0, tzinfo=AMS))
        empty = store.recall("zeppelin")
    assert empty.hits == () and "run history" in empty.guidance and "RunHistory" not in empty.guidance


@pytest.mark.both_backends
def test_broad_period_questions_point_to_the_journal(journal_vault):
    with MemoryStore.open(journal_vault) as store:
        tool = store.recall("What did we work on last week?")
        auto = store.recall("What did we work on last week?", mode="auto")
    assert "MemoryJournal" in tool.guidance
    assert auto.hits == () and auto.gate["reason"] == "route:broad_period"


@pytest.mark.both_backends
def test_access_telemetry_is_recorded_and_never_changes_ranking(journal_vault):
    queries = ["pet", "Rotterdam", "deployment color"]
    with MemoryStore.open(journal_vault) as store:
        first = [[h.source for h in store.recall(q).hits] for q in queries]
        for _ in range(20):  # hammer one memory with accesses
            store.recall("Biscuit", limit=1)
    with MemoryStore.open(journal_vault) as store:
        log = store.access_log.read()
        biscuit = next(key for key in log if key.endswith(store.recall("Biscuit", limit=1).hits[0].id))
        assert log[biscuit]["count"] >= 21 and log[biscuit]["last"].startswith("20")
        assert [[h.source for h in store.recall(q).hits] for q in queries] == first
    assert oct((journal_vault / ".index" / "access.json").stat().st_mode & 0o777) == "0o600"


@pytest.mark.both_backends
def test_strict_health_checks_every_vector_against_its_row(journal_vault):
    def vector_rows(strict: bool) -> list:
        with MemoryStore.open(journal_vault, sync=False) as store:
            report = store.health_report(strict=strict)
        return [(f["code"], f["subject"], f["fix"]) for f in report["findings"] if f["check"] == "vector_rows"]

    assert vector_rows(strict=True) == []
    with MemoryStore.open(journal_vault) as store:
        victim = postgres_helpers.drop_a_vector(store)
    assert vector_rows(strict=True) == [("missing_vector", victim, "memvault rebuild")]
    assert vector_rows(strict=False) == []


def test_queued_deltas_merge_to_each_keys_latest_state():
    from datetime import date

    from memvault.indexer.maintenance.semantic_service import merge_deltas
    from memvault.indexer.maintenance.sync import IndexDelta
    from memvault.vault.records import MemoryRecord

    def record(memory_id: str, text: str) -> MemoryRecord:
        return MemoryRecord(
            memory_id,
            "daily/2026-11-30.md",
            "curated",
            date(2026, 11, 30),
            datetime(2026, 11, 30, tzinfo=UTC),
            text,
            "h",
            None,
            True,
        )

    merged = merge_deltas(
        [
            IndexDelta(upserts=[record("a", "one"), record("b", "two")]),
            IndexDelta(upserts=[record("a", "one, edited")], removed={"daily/2026-11-30.md#b"}),
            IndexDelta(upserts=[record("b", "two, back again")]),
            IndexDelta(removed={"daily/2026-11-30.md#c"}),
        ]
    )
    assert sorted((r.id, r.text) for r in merged.upserts) == [("a", "one, edited"), ("b", "two, back again")]
    assert merged.removed == {"daily/2026-11-30.md#c"}
