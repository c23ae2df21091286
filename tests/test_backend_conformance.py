"""One conformance suite for every index backend (indexer/backend/base.py): Tantivy + hnswlib
in `.index/`, and PostgreSQL + pgvector on a real server. The guarantees the seam's docstring
promises are checked here, the same way on each engine."""

import hashlib
import uuid
from datetime import UTC, date, datetime

import numpy as np
import pytest

from memvault.indexer.backend.base import BackendDelta, IndexBackend, RowWrite
from memvault.indexer.maintenance.progress import PhaseLog
from memvault.vault.errors import IndexUnavailable
from memvault.vault.layout import VaultLayout
from memvault.vault.records import MemoryRecord

DIM = 8
EMBEDDING = {"provider": "test", "model": "unit-vectors", "dim": DIM}
NOTE = "daily/2026-11-30.md"


@pytest.fixture(params=["local", "postgres"])
def backend(request, tmp_path):
    if request.param == "local":
        from tests.local_row_backend import LocalBackend

        engine = LocalBackend(VaultLayout(tmp_path / "vault"))
    else:
        from memvault.indexer.backend.postgres.engine import PostgresBackend

        dsn = request.getfixturevalue("postgres_dsn")
        engine = PostgresBackend(dsn, "conf-" + uuid.uuid4().hex[:8])
    yield engine
    engine.close()


def record(i: int, text: str, path: str = NOTE, kind: str = "curated", chash: str | None = None) -> MemoryRecord:
    return MemoryRecord(f"m-{i:04d}", path, kind, date(2026, 11, 30), datetime(2026, 11, 30, 9, i % 60, tzinfo=UTC),
                        text, chash or f"hash-{i}", None, True, ())  # fmt: skip


def unit(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


def writes(records, vectors=True) -> tuple[RowWrite, ...]:
    return tuple(RowWrite(f"{r.path}#{r.id}", r, "ctx", unit(i) if vectors and r.kind == "curated" else None)
                 for i, r in enumerate(records))  # fmt: skip


def state(rows: int) -> dict:
    return {"sha256": "0" * 64, "size": 10, "mtime_ns": 1, "rows": rows}


FACTS = ["Morgan chose blue as the deployment color.", "The blue team deploys on Fridays.",
         "Standup moved to 10:00.", "Priya prefers green tea.", "Coffee machine on floor three is broken."]  # fmt: skip


def filled(backend: IndexBackend) -> int:
    generation = backend.create_generation(EMBEDDING)
    records = [record(i, text) for i, text in enumerate(FACTS)]
    backend.apply(generation, BackendDelta((), writes(records), {NOTE: state(len(records))}))
    backend.activate_generation(generation)
    return generation


def test_it_is_a_backend(backend):
    assert isinstance(backend, IndexBackend)
    assert isinstance(backend.engine, str)


def test_a_generation_is_served_only_once_activated(backend):
    assert backend.serving_generation() is None
    first = filled(backend)
    assert backend.serving_generation() == first
    second = backend.create_generation(EMBEDDING)
    backend.apply(second, BackendDelta((), writes([record(9, "Only in the new build.")]), {}))
    assert backend.serving_generation() == first  # a build in progress is never served
    assert [k for k, _ in backend.lexical_candidates(first, "new build", 10)] == []
    backend.activate_generation(second)
    assert backend.serving_generation() == second
    assert backend.generation_embedding(second) == EMBEDDING
    with pytest.raises(IndexUnavailable):
        backend.drop_generation(second)
    backend.drop_generation(first)
    backend.drop_generation(first)  # idempotent


def test_apply_is_whole_and_idempotent(backend):
    generation = filled(backend)
    rows = backend.rows_of(generation, NOTE)
    assert sorted(r.text for r in rows) == sorted(FACTS)
    assert backend.file_states(generation)[NOTE]["rows"] == len(FACTS)
    again = [record(i, text) for i, text in enumerate(FACTS)]
    backend.apply(generation, BackendDelta((), writes(again), {NOTE: state(len(FACTS))}))
    assert backend.all_rows(generation) == sorted(rows, key=lambda r: r.key)  # no row doubled
    assert backend.counts(generation).rows == len(FACTS)


def test_deletes_and_forgotten_files(backend):
    generation = filled(backend)
    doomed = f"{NOTE}#m-0000"
    backend.apply(generation, BackendDelta((doomed,), (), {NOTE: None}))
    assert doomed not in backend.rows_by_keys(generation, [doomed, f"{NOTE}#m-0001"])
    assert f"{NOTE}#m-0001" in backend.rows_by_keys(generation, [doomed, f"{NOTE}#m-0001"])
    assert NOTE not in backend.file_states(generation)
    assert backend.counts(generation).rows == len(FACTS) - 1


def test_lookup_by_content_hash_and_kind(backend):
    generation = backend.create_generation(EMBEDDING)
    other = "daily/2026-12-01.md"
    records = [record(1, "Same text.", chash="h-same"), record(2, "Same text.", path=other, chash="h-same"),
               record(3, "Raw observation.", path="audit/2026-11-30.md", kind="audit", chash="h-audit")]  # fmt: skip
    backend.apply(generation, BackendDelta((), writes(records), {}))
    found = backend.rows_by_content_hash(generation, ["h-same"])
    assert sorted(r.path for r in found) == [NOTE, other]
    assert backend.rows_by_content_hash(generation, ["h-audit"]) == []
    assert [r.kind for r in backend.rows_by_content_hash(generation, ["h-audit"], "audit")] == ["audit"]


def test_lexical_candidates_are_ranked_and_curated_only(backend):
    generation = filled(backend)
    audit = record(50, "Blue blue blue deployment color audit.", path="audit/2026-11-30.md", kind="audit")
    backend.apply(generation, BackendDelta((), writes([audit]), {}))
    hits = backend.lexical_candidates(generation, "which blue deployment color?", 10)
    assert hits[0][0] == f"{NOTE}#m-0000"
    assert {k for k, _ in hits} == {f"{NOTE}#m-0000", f"{NOTE}#m-0001"}
    assert hits == sorted(hits, key=lambda h: (-h[1], h[0]))
    assert backend.lexical_candidates(generation, "blue", 10, ("audit",))[0][0] == "audit/2026-11-30.md#m-0050"
    assert backend.lexical_candidates(generation, "", 10) == []


def test_vector_candidates_fill_the_list(backend):
    generation = backend.create_generation(EMBEDDING)
    records = [record(i, f"Memory number {i}.") for i in range(60)]
    backend.apply(generation, BackendDelta((), writes(records), {}))
    backend.activate_generation(generation)
    hits = backend.vector_candidates(generation, unit(7), 50)
    assert len(hits) == 50  # more than pgvector's default candidate list (40): never cut short
    assert hits[0][0] == f"{NOTE}#m-0007" and hits[0][1] == pytest.approx(1.0, abs=1e-4)
    assert hits == sorted(hits, key=lambda h: (-h[1], h[0]))


def test_journal_rows_and_counts(backend):
    generation = filled(backend)
    other = "daily/2026-12-01.md"
    backend.apply(generation, BackendDelta((), writes([record(70, "Next day.", path=other)], vectors=False), {}))
    rows = backend.journal_rows(generation, [NOTE, other])
    assert [r.path for r in rows] == [NOTE] * len(FACTS) + [other]
    assert [r.key for r in rows[: len(FACTS)]] == sorted(r.key for r in rows[: len(FACTS)])  # rows hold no line
    counts = backend.counts(generation)
    assert counts.by_path == {NOTE: len(FACTS), other: 1}
    assert counts.by_kind == {"curated": len(FACTS) + 1}
    assert counts.without_vector == 1


def test_content_hash_keys_name_each_curated_text_once(backend):
    generation = backend.create_generation(EMBEDDING)
    other = "daily/2026-12-01.md"
    records = [
        record(1, "Same text.", chash="h-same"),
        record(2, "Same text.", path=other, chash="h-same"),
        record(3, "Other.", chash="h-other"),
        record(4, "Raw.", path="audit/2026-11-30.md", kind="audit"),
    ]
    backend.apply(generation, BackendDelta((), writes(records), {}))
    assert backend.content_hash_keys(generation) == {"h-same": f"{NOTE}#m-0001", "h-other": f"{NOTE}#m-0003"}


def test_term_frequencies_are_bm25s_own_statistics(backend):
    generation = filled(backend)
    total, found = backend.term_frequencies(generation, ["blue", "tea", "zeppelin"])
    assert total == len(FACTS)
    assert found == {"blue": 2, "tea": 1, "zeppelin": 0}


CJK_FACTS = [
    "私は東京に住んでいます。",
    "東京都の天気は晴れです。",
    "京都に行きました。",
    "The billing service times out in 東京.",
]


@pytest.mark.one_engine(
    "it runs both engines itself, side by side in one run (the local row backend's and the server's BM25 "
    "scores for the same CJK rows, compared), so it has no run per engine"
)
def test_cjk_bigrams_rank_the_same_on_each_backend_and_deletes_keep_their_statistics(tmp_path, postgres_dsn):
    """A word inside a CJK run is found by its bigrams with the same BM25 scores on both engines,
    and a row deleted on the server takes its bigrams' statistics along (equal to a fresh build)."""
    from memvault.indexer.backend.postgres.engine import PostgresBackend
    from tests.local_row_backend import LocalBackend

    local, server = LocalBackend(VaultLayout(tmp_path / "vault")), PostgresBackend(postgres_dsn, "conf-cjk")
    fresh = PostgresBackend(postgres_dsn, "conf-cjk-fresh")
    try:
        records = [record(i, text) for i, text in enumerate(CJK_FACTS)]
        for engine in (local, server):
            generation = engine.create_generation(EMBEDDING)
            engine.apply(generation, BackendDelta((), writes(records), {NOTE: state(len(records))}))
            engine.activate_generation(generation)
        for query in ("東京", "京都", "東京の天気", "billing 東京"):
            mine = server.lexical_candidates(server.serving_generation(), query, 10)
            theirs = local.lexical_candidates(local.serving_generation(), query, 10)
            assert [key for key, _ in mine] == [key for key, _ in theirs], query
            assert [score for _, score in mine] == pytest.approx([score for _, score in theirs], rel=1e-4), query
        server.apply(server.serving_generation(), BackendDelta((f"{NOTE}#m-0000",), (), {}))
        generation = fresh.create_generation(EMBEDDING)
        fresh.apply(generation, BackendDelta((), writes(records)[1:], {}))
        fresh.activate_generation(generation)
        for query in ("東京", "京都に"):
            after = server.lexical_candidates(server.serving_generation(), query, 10)
            assert after and f"{NOTE}#m-0000" not in {key for key, _ in after}
            rebuilt = fresh.lexical_candidates(generation, query, 10)
            assert [key for key, _ in after] == [key for key, _ in rebuilt], query
            assert [score for _, score in after] == pytest.approx([score for _, score in rebuilt], rel=1e-6), query
        assert server.term_frequencies(server.serving_generation(), ["東京"], field="cjk") == (3, {"東京": 2})
    finally:
        for engine in (local, server, fresh):
            engine.close()


def _as_an_earlier_schema(dsn: str, vault: str, generation: int, version: int) -> None:
    """Turn a server made by this memvault back into what schema `version` left: 6 and before
    kept a row's tsvectors instead of its forward index (and postings one row each, which the
    migration drops whatever their shape), 3 had no replay projection (BuJo was refused on the
    server), 2 had no CJK token counts either, 1 had no postings or terms at all."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE memvault_rows DROP COLUMN doc, DROP COLUMN lex, DROP COLUMN lex_tf, "
                     "ADD COLUMN text_tsv tsvector, ADD COLUMN ctx_tsv tsvector")  # fmt: skip
        if version <= 3:
            conn.execute("ALTER TABLE memvault_generations DROP COLUMN replay, DROP COLUMN replay_sha256")
        if version <= 2:
            conn.execute("ALTER TABLE memvault_generations DROP COLUMN cjk_tokens")
        if version == 1:
            conn.execute("DROP TABLE memvault_postings, memvault_terms CASCADE")
        conn.execute("UPDATE memvault_schema SET version = %s", (version,))


@pytest.mark.parametrize("version", [1, 2, 3, 6])
def test_a_server_of_an_earlier_schema_is_migrated_when_an_owner_opens_it(postgres_dsn, version):
    """Schema 1 (no postings), 2 (no CJK bigrams), 3 (no replay projection) and 6 (postings one
    row each, no forward index) → 7: the old generation keeps serving what it can (rows, vectors),
    says `run memvault rebuild` for its lexical list (its postings are not in blocks), holds no
    replay projection (right for the Lite and Journal vaults schema 3 served), and a new
    generation serves everything."""
    import psycopg

    from memvault.indexer.backend.postgres import schema
    from memvault.indexer.backend.postgres.engine import PostgresBackend

    records = [record(i, text) for i, text in enumerate([*FACTS, *CJK_FACTS])]
    old = PostgresBackend(postgres_dsn, "migrated")
    generation = old.create_generation(EMBEDDING)
    old.apply(generation, BackendDelta((), writes(records), {NOTE: state(len(records))}))
    old.activate_generation(generation)
    english = old.lexical_candidates(generation, "blue deployment color", 10)
    cjk = old.lexical_candidates(generation, "東京", 10)
    old.close()
    _as_an_earlier_schema(postgres_dsn, "migrated", generation, version)

    backend = PostgresBackend(postgres_dsn, "migrated")  # the owner's open migrates
    try:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            assert conn.execute("SELECT version FROM memvault_schema").fetchall() == [(schema.SCHEMA_VERSION,)]
        assert backend.serving_generation() == generation
        assert backend.serving_replay() == (generation, None)
        assert backend.replay_projection(generation) is None
        assert len(backend.all_rows(generation)) == len(records)
        assert backend.vector_candidates(generation, unit(3), 1)[0][0] == f"{NOTE}#m-0003"
        with pytest.raises(IndexUnavailable, match="run `memvault rebuild`"):
            backend.lexical_candidates(generation, "blue deployment color", 10)
        rebuilt = backend.create_generation(EMBEDDING)
        backend.apply(rebuilt, BackendDelta((), writes(records), {NOTE: state(len(records))}))
        projection = b'{"entries":[],"v":1}\n'
        backend.set_replay_projection(rebuilt, projection)
        backend.activate_generation(rebuilt)
        assert backend.serving_replay() == (rebuilt, hashlib.sha256(projection).hexdigest())
        assert backend.replay_projection(rebuilt) == projection
        assert [key for key, _ in backend.lexical_candidates(rebuilt, "blue deployment color", 10)] == \
            [key for key, _ in english]  # fmt: skip
        assert backend.lexical_candidates(rebuilt, "東京", 10) == cjk
        found = {key for key, _ in cjk}
        assert found == {f"{NOTE}#m-{i:04d}" for i in (5, 6, 8)}
    finally:
        backend.close()


# --- the store's side of the seam: backend.base.IndexGenerations, on both engines ----------------
# The checks above hold a server engine's rows to the local engine's. These hold what MemoryStore
# drives (maintenance/index_engines.open_generations) to the promises IndexGenerations makes, the
# same way on each engine, with the vault's own notes.


def _generations(root):
    import threading

    from memvault.indexer.maintenance.derived import read_note_records
    from memvault.indexer.maintenance.index_engines import open_generations
    from memvault.vault.config import load_config
    from memvault.vault.locks import VaultLock

    layout, config = VaultLayout(root), load_config(root, {})

    def apply(index, relpaths, hook=None):
        return index.apply([read_note_records(layout, path, config.memory.time_zone) for path in relpaths], hook)

    lock = VaultLock(root)
    return layout, lock, open_generations(layout, config, lock=lock, index_lock=threading.RLock(), apply=apply)


def _write_note(root, day: str, *facts: str) -> None:
    from memvault.vault.note import format_bullet, new_note_text

    bullets = [format_bullet(fact, f"m-{day.replace('-', '')}{i:02d}", "09:00") for i, fact in enumerate(facts)]
    (root / "daily" / f"{day}.md").write_text(new_note_text(day) + "".join(bullets))


def _found(generation, query: str) -> set[str]:
    return {key for key, _ in generation.bm25.search_keys(query, 10)}


@pytest.mark.both_backends
def test_a_built_generation_serves_only_once_swapped_in_and_catches_up_on_writes_made_meanwhile(new_vault):
    _write_note(new_vault, "2026-11-30", "Morgan chose blue as the deployment color.")
    layout, lock, engine = _generations(new_vault)
    try:
        with pytest.raises(IndexUnavailable, match="memvault rebuild"):
            engine.serving(create_missing=False)
        with lock:
            first = engine.serving(create_missing=True)  # a vault's first write builds one inline
        assert _found(first, "deployment color")
        with engine.building():
            built = engine.build(PhaseLog())
            _write_note(new_vault, "2026-12-01", "Priya prefers green tea.")  # written while it was built
            assert engine.serving(create_missing=False) is not built  # never served half made
            with lock:
                engine.swap_in(built)
        serving = engine.serving(create_missing=False)
        assert _found(serving, "green tea") and _found(serving, "deployment color")
    finally:
        engine.close()


@pytest.mark.both_backends
def test_a_failed_build_leaves_the_serving_generation_as_it_was(new_vault):
    _write_note(new_vault, "2026-11-30", "Morgan chose blue as the deployment color.")
    layout, lock, engine = _generations(new_vault)
    try:
        with lock:
            before = engine.serving(create_missing=True)
        with pytest.raises(RuntimeError, match="killed mid-build"), engine.building():
            engine.build(PhaseLog())
            raise RuntimeError("killed mid-build")
        engine.close()
        layout, lock, engine = _generations(new_vault)  # as the next process finds it
        after = engine.serving(create_missing=False)
        assert _found(after, "deployment color")
        assert after.row_counts() == before.row_counts()
    finally:
        engine.close()


@pytest.mark.both_backends
def test_the_engines_differ_only_in_what_the_seam_names(new_vault, index_backend):
    """Where the engines differ, IndexGenerations says so in a capability: the local engine's
    files can be read by another process of the vault, a server's only through its owner."""
    _write_note(new_vault, "2026-11-30", "Morgan chose blue as the deployment color.")
    layout, lock, engine = _generations(new_vault)
    try:
        assert engine.files_on_this_machine is (index_backend == "local")
        with lock:
            engine.writable()
        assert engine.compact() in (True, False)
        report = engine.health_report(load_config_of(new_vault), strict=True, extra=[])
        assert report["healthy"] is True, report["findings"]
    finally:
        engine.close()


def load_config_of(root):
    from memvault.vault.config import load_config

    return load_config(root, {})


@pytest.mark.both_backends
def test_the_store_names_its_server_backend_or_none(new_vault, index_backend):
    from memvault import MemoryStore

    with MemoryStore.open(new_vault, engine=False) as store:
        assert (store.backend is None) is (index_backend == "local")
