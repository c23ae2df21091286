"""Recall's reads on the PostgreSQL backend.

The lexical list's early termination on lists longer than what it reads
(indexer/backend/postgres/lexical.py): with the read sizes shrunk to a few postings, every list
of these queries is cut, so the probes for exact scores, the lists that held a pool row already
and the lists past the per-row bits all run. Every score returned must equal the score of the
same row with every posting read, and the order must be the engine's (score, then key).
Rows are read from the generation's leaf by name, and a generation dropped meanwhile holds none."""

import uuid
from datetime import UTC, date, datetime

import pytest

from memvault.indexer.backend.base import BackendDelta, RowWrite
from memvault.vault.records import MemoryRecord

NOTE = "daily/2026-11-30.md"
FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor"
EVERYTHING = {"per_list": 10**9, "per_text": 10**9, "pool": 10**9}


def record(i: int, text: str, kind: str = "curated", neighbours: tuple[str, ...] = ()) -> MemoryRecord:
    path = NOTE if kind == "curated" else "audit/2026-11-30.md"
    at = datetime(2026, 11, 30, 9, i % 60, tzinfo=UTC)
    return MemoryRecord(f"m-{i:04d}", path, kind, date(2026, 11, 30), at, text, f"hash-{i}", None, True, neighbours)


def corpus() -> list[MemoryRecord]:
    rows = []
    for i in range(60):  # alpha's list: short rows first by impact, long ones in its tail
        words = ["alpha", "gamma" if i % 3 == 0 else "delta", *(FILLER.split()[: i % 12])]
        rows.append(record(i, " ".join(words), neighbours=(f"beta note {i}", "gamma again") if i % 2 else ()))
    # only reachable through beta (rare: its list is read whole), its alpha in alpha's tail
    rows.append(record(100, f"beta {FILLER} {FILLER} alpha"))
    rows.append(record(101, "beta gamma"))
    rows += [record(200 + i, f"alpha audit line {i}", kind="audit") for i in range(12)]
    # zeta's list is one posting longer than the 5 read of it: its last, the longest row, holds eta
    rows += [record(300 + i, f"zeta {i}") for i in range(5)] + [record(305, f"eta {FILLER} zeta")]
    return rows


@pytest.fixture
def served(postgres_dsn):
    from memvault.indexer.backend.postgres.engine import PostgresBackend

    backend = PostgresBackend(postgres_dsn, "prune-" + uuid.uuid4().hex[:8])
    generation = backend.create_generation(None)
    writes = tuple(RowWrite(f"{r.path}#{r.id}", r, "ctx") for r in corpus())
    backend.apply(generation, BackendDelta((), writes, {}))
    backend.activate_generation(generation)
    yield backend, generation
    backend.close()


def lists(backend, generation, query, depth, kinds, sizes, monkeypatch):
    from memvault.indexer.backend.postgres import engine

    with monkeypatch.context() as patch:
        patch.setattr(engine, "read_sizes", lambda _depth: dict(sizes))
        return backend.lexical_candidates(generation, query, depth, kinds)


# 40 distinct words: lists past the 62 that carry a bit, most of them absent from the corpus
LONG_QUESTION = "alpha gamma beta " + " ".join(f"word{i}" for i in range(37))


@pytest.mark.parametrize("query", ["alpha beta", "alpha gamma delta", "gamma beta note", LONG_QUESTION])
@pytest.mark.parametrize("kinds", [("curated",), ("curated", "audit")])
def test_cut_lists_return_exact_scores(served, monkeypatch, query, kinds):
    backend, generation = served
    exhaustive = dict(lists(backend, generation, query, 1000, kinds, EVERYTHING, monkeypatch))
    pruned = lists(backend, generation, query, 10, kinds, {"per_list": 3, "per_text": 5, "pool": 12}, monkeypatch)
    assert len(pruned) == 10
    for key, score in pruned:
        assert score == exhaustive[key], (query, key)  # summed in the same order: equal, not close
    assert pruned == sorted(pruned, key=lambda hit: (-hit[1], hit[0]))


def test_a_row_reached_through_a_rare_term_gets_its_tail_postings(served, monkeypatch):
    backend, generation = served
    sizes = {"per_list": 3, "per_text": 5, "pool": 12}
    both = dict(lists(backend, generation, "alpha beta", 10, ("curated",), sizes, monkeypatch))
    beta_alone = dict(lists(backend, generation, "beta", 10, ("curated",), sizes, monkeypatch))
    key = f"{NOTE}#m-0100"
    assert key in both and key in beta_alone
    assert both[key] > beta_alone[key]  # its alpha posting, in the tail of a cut list, was probed
    exhaustive = dict(lists(backend, generation, "alpha beta", 1000, ("curated",), EVERYTHING, monkeypatch))
    assert both[key] == exhaustive[key]


def test_a_list_one_posting_longer_than_its_limit_is_probed(served, monkeypatch):
    backend, generation = served
    sizes = {"per_list": 3, "per_text": 5, "pool": 12}
    key = f"{NOTE}#m-0305"
    both = dict(lists(backend, generation, "zeta eta", 10, ("curated",), sizes, monkeypatch))
    exhaustive = dict(lists(backend, generation, "zeta eta", 1000, ("curated",), EVERYTHING, monkeypatch))
    eta_alone = dict(lists(backend, generation, "eta", 10, ("curated",), sizes, monkeypatch))
    assert both[key] == exhaustive[key] and both[key] > eta_alone[key]


def test_lists_read_whole_rank_as_every_posting_read(served, monkeypatch):
    backend, generation = served
    for query in ("alpha beta", "gamma delta", LONG_QUESTION):
        everything = lists(backend, generation, query, 20, ("curated", "audit"), EVERYTHING, monkeypatch)
        usual = backend.lexical_candidates(generation, query, 20, ("curated", "audit"))  # 73 rows: no list cut
        assert usual == everything


def test_rows_are_read_from_the_leaf_and_a_dropped_generation_holds_none(served):
    backend, generation = served
    key = f"{NOTE}#m-0305"
    assert backend.rows_by_keys(generation, [key])[key].text.startswith("eta ")
    assert [row.key for row in backend.rows_by_content_hash(generation, ["hash-305"])] == [key]
    assert backend.rows_by_content_hash(generation, ["hash-305"], "audit") == []
    newer = backend.create_generation(None)
    backend.apply(newer, BackendDelta((), (RowWrite(key, record(305, "eta again"), "ctx"),), {}))
    assert backend.rows_by_keys(newer, [key])[key].text == "eta again"  # each generation its own rows
    backend.drop_generation(newer)
    assert backend.rows_by_keys(newer, [key]) == {}
    assert backend.rows_by_content_hash(newer, ["hash-305"]) == []


def test_the_lexical_list_with_its_rows_is_the_list_and_the_rows(served):
    backend, generation = served
    asked = [("alpha beta", ("curated",)), ("alpha audit", ("curated", "audit")), ("nothing here", ("curated",))]
    for query, kinds in asked:
        hits, rows = backend.lexical_rows(generation, query, 30, kinds)
        assert hits == backend.lexical_candidates(generation, query, 30, kinds)
        assert rows == backend.rows_by_keys(generation, [key for key, _ in hits])
    assert backend.lexical_rows(generation, "", 30) == ([], {})
