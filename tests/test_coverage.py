"""Question coverage: soft word matching with the builtin model's static vectors, and its place in recall."""

import json
import threading
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

import memvault.indexer.search.coverage as coverage_module
from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.generations import MANIFEST, current_generation
from memvault.indexer.search.coverage import MAX_MEMORY_WORDS, NEIGHBOUR_DISCOUNT, coverage
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from tests.postgres_helpers import on_test_backend

# both_backends tests name no vault fixture that asks for index_backend: without this, their postgres run
# never sets it up and runs locally again (TEST_BACKEND stays "local", no server is checked)
pytestmark = pytest.mark.usefixtures("index_backend")

AMS = ZoneInfo("Europe/Amsterdam")


def scores(question: str, candidates: list[tuple[str, str, str]]) -> dict[str, float]:
    return dict(coverage(question, candidates))


# --- the measure (pure) ----------------------------------------------------------------------


def test_a_memory_holding_every_question_word_covers_it_fully():
    got = scores("rescue dog", [("a", "Sam adopted a rescue dog named Biscuit.", "")])
    assert got["a"] == pytest.approx(1.0, abs=1e-5)


def test_related_words_cover_more_than_unrelated_ones():
    got = scores(
        "Who has a new puppy?",
        [
            ("dog", "Sam adopted a rescue dog last week.", ""),
            ("billing", "The billing service times out on large invoice batches.", ""),
        ],
    )
    assert got["dog"] > got["billing"]


def test_a_word_found_only_among_the_neighbours_is_discounted():
    got = scores(
        "Biscuit",
        [
            ("own", "Biscuit", ""),
            ("neighbour", "Sam adopted a rescue dog.", "Its name is Biscuit."),
            ("neither", "The offsite is in Haarlem.", "The standup is at ten."),
        ],
    )
    assert got["own"] == pytest.approx(1.0, abs=1e-5)
    assert got["neighbour"] == pytest.approx(NEIGHBOUR_DISCOUNT, abs=1e-5)
    assert got["neither"] < got["neighbour"]


def test_best_first_and_ties_by_key():
    ranked = coverage("blue", [("b", "blue", ""), ("a", "blue", ""), ("c", "green", "")])
    assert [key for key, _ in ranked] == ["a", "b", "c"]


@pytest.mark.parametrize("question", ["", "   ", "?!…", "\u200b"])
def test_a_question_without_words_covers_nothing(question):
    assert coverage(question, [("a", "Sam adopted a rescue dog.", "")]) == []


def test_no_candidates_no_scores():
    assert coverage("rescue dog", []) == []


def test_a_memory_without_words_scores_lowest():
    got = coverage("rescue dog", [("empty", "", ""), ("dog", "a dog", ""), ("dots", "…", "")])
    assert got[0][0] == "dog"
    assert dict(got)["empty"] == dict(got)["dots"] == -1.0


def test_oversized_text_is_read_only_up_to_its_word_limit():
    filler = " ".join(f"w{n}" for n in range(MAX_MEMORY_WORDS))
    late = scores("zebra", [("late", f"{filler} zebra", "")])["late"]
    early = scores("zebra", [("early", f"zebra {filler}", "")])["early"]
    assert early == pytest.approx(1.0, abs=1e-5)
    assert late < 0.9  # "zebra" lies past the limit: only the filler was compared


def test_hostile_text_is_safe():
    hostile = [
        ("surrogate", "caf\udce9 \ud800 au lait", ""),
        ("control", "tab\tnul\x00bell\x07", "\x1b[31mred\x1b[0m"),
        ("cjk", "部署の色は青です", "東京"),
        ("huge", "spam " * 200_000, "eggs " * 200_000),
    ]
    got = scores("café au lait, red, 東京?", hostile)
    assert set(got) == {"surrogate", "control", "cjk", "huge"}
    assert all(-1.0 <= value <= 1.0 + 1e-6 for value in got.values())


def test_the_same_texts_score_the_same_whatever_the_memo_holds(monkeypatch):
    candidates = [("a", "Priya lives in Rotterdam.", "Morgan chose blue."), ("b", "The offsite is in Haarlem.", "")]
    first = coverage("Where does Priya live?", candidates)
    monkeypatch.setattr(coverage_module, "MEMO_LIMIT", 1)  # every call now starts the memo over
    coverage("an unrelated question about invoices", [("z", "billing batches time out", "")])
    assert coverage("Where does Priya live?", candidates) == first


def test_concurrent_callers_get_what_they_would_get_alone():
    jobs = [
        (
            f"question {n} about topic{n} and dog",
            [(f"k{n}", f"memory {n} mentions topic{n} and a puppy", f"context{n}")],
        )
        for n in range(24)
    ]
    alone = [coverage(question, candidates) for question, candidates in jobs]
    results: list = [None] * len(jobs)

    def run(n: int) -> None:
        for _ in range(20):
            results[n] = coverage(*jobs[n])

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == alone


# --- in recall -------------------------------------------------------------------------------


def make_vault(root: Path, mode: str, facts: list[str]) -> Path:
    init_vault(root, render_config(default_config_data(mode=mode, time_zone="Europe/Amsterdam")))
    on_test_backend(root)
    with MemoryStore.open(root) as store:
        for minute, fact in enumerate(facts):
            store.remember(fact, at=datetime(2026, 11, 30, 9, minute, tzinfo=AMS))
    return root


FACTS = [
    "Sam adopted a rescue dog last week.",
    "Its name is Biscuit and it loves the beach.",
    "The billing service times out on large invoice batches.",
    "Priya lives in Rotterdam.",
]


@pytest.mark.both_backends
def test_journal_recall_fuses_coverage_and_explains_it(tmp_path):
    root = make_vault(tmp_path / "journal", "journal", FACTS)
    with MemoryStore.open(root) as store:
        hits = store.recall("Which puppy did Sam adopt?", limit=4).hits
    assert hits[0].text == "Sam adopted a rescue dog last week."
    assert "coverage" in hits[0].explain and "vector" in hits[0].explain
    assert all(0.0 <= hit.explain["fused"]["strength"] <= 1.0 for hit in hits)


@pytest.mark.both_backends
def test_lite_recall_has_no_coverage(tmp_path):
    root = make_vault(tmp_path / "lite", "lite", FACTS)
    with MemoryStore.open(root) as store:
        hits = store.recall("rescue dog", limit=4).hits
    assert hits and all("coverage" not in hit.explain and "vector" not in hit.explain for hit in hits)


@pytest.mark.both_backends
def test_the_index_stores_each_memorys_note_context(tmp_path):
    from memvault.indexer.search.bm25 import passage_of, row_of

    root = make_vault(tmp_path / "journal", "journal", FACTS)
    with MemoryStore.open(root) as store:
        bm25 = store.serving_index().bm25
        keys, docs = bm25.search_docs("Biscuit beach", 10)
        rows = bm25.get_by_keys([key for key, _ in keys])
        by_key = bm25.docs_by_keys([key for key, _ in keys])
    assert keys and set(docs) == set(by_key) == set(rows)
    assert {key: row_of(doc) for key, doc in docs.items()} == rows
    assert {key: passage_of(doc) for key, doc in by_key.items()} == {
        key: (r.text, r.context) for key, r in rows.items()
    }
    biscuit = next(row for row in rows.values() if row.text.startswith("Its name is Biscuit"))
    assert "rescue dog" in biscuit.context and "Rotterdam" in biscuit.context


@pytest.mark.one_engine(
    "the older schema is written into a `.index/` generation's manifest (the local engine's own files)"
)
def test_an_index_of_an_older_schema_asks_for_a_rebuild(tmp_path):
    root = make_vault(tmp_path / "journal", "journal", FACTS)
    manifest = current_generation(root / ".index") / MANIFEST
    body = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**body, "schema": 2}))
    with MemoryStore.open(root, sync=False) as store:
        result = store.recall("rescue dog")
        assert not result.hits and "index schema 2" in result.degraded and "memvault rebuild" in result.degraded
        store.rebuild()
        assert store.recall("rescue dog").hits[0].text == "Sam adopted a rescue dog last week."


def test_a_giant_word_is_read_in_pieces():
    giant = "a" * 1_000_000
    got = scores("aaaa", [("giant", giant, giant), ("small", "aaaa", "")])
    assert got["small"] == pytest.approx(1.0, abs=1e-5) and -1.0 <= got["giant"] <= 1.0


@pytest.mark.both_backends
def test_without_the_builtin_table_recall_still_answers_and_says_why(tmp_path, monkeypatch):
    from memvault.vault.errors import ProviderUnavailable

    root = make_vault(tmp_path / "journal", "journal", FACTS)

    def missing(words):
        raise ProviderUnavailable("builtin embeddings need the wordllama package: reinstall memvault")

    monkeypatch.setattr(coverage_module, "_WORDS", coverage_module._WordMemo())  # nothing memoised
    monkeypatch.setattr(coverage_module, "builtin_word_vectors", missing)
    with MemoryStore.open(root, sync=False) as store:
        result = store.recall("rescue dog", limit=4)
    assert result.hits[0].text == "Sam adopted a rescue dog last week."
    assert all("coverage" not in hit.explain for hit in result.hits)
    assert "question coverage unavailable" in result.degraded and "reinstall memvault" in result.degraded


def test_numbers_are_left_to_bm25():
    assert coverage("48213", [("a", "note 48213", "")]) == []
    got = scores("release 48213", [("same", "release 1", ""), ("other", "invoice 48213", "")])
    assert got["same"] > got["other"]
