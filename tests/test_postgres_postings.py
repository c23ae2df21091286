"""The server's postings in blocks (indexer/backend/postgres/lexical.py, postings.py).

With blocks of a few postings and merges every few writes, a serving generation edited one write
at a time (adds, edits, deletes, merges, block splits) holds exactly the postings of its live rows,
in sealed blocks of disjoint impact ranges no larger than 2 x BLOCK, and ranks exactly as a
generation loaded at once; a merge rewrites only the blocks its delta falls into; a rebuild's
load is sealed once, when it is activated."""

import random
import uuid
from datetime import UTC, date, datetime

import pytest

from memvault.indexer.backend.base import BackendDelta, RowWrite
from memvault.vault.records import MemoryRecord

NOTE = "daily/2026-11-30.md"
VOCABULARY = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
EVERYTHING = {"per_list": 10**9, "per_text": 10**9, "pool": 10**9}
QUERIES = ["alpha", "alpha beta", "gamma delta kappa", "mu lambda iota theta", "zeta"]


def record(i: int, text: str, kind: str = "curated", neighbours: tuple[str, ...] = ()) -> MemoryRecord:
    path = NOTE if kind == "curated" else "audit/2026-11-30.md"
    at = datetime(2026, 11, 30, 9, i % 60, tzinfo=UTC)
    return MemoryRecord(f"m-{i:04d}", path, kind, date(2026, 11, 30), at, text, f"hash-{i}", None, True, neighbours)


def write(r: MemoryRecord) -> RowWrite:
    return RowWrite(f"{r.path}#{r.id}", r, "ctx")


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 9)))


def made(rng: random.Random, i: int) -> MemoryRecord:
    kind = "audit" if i % 7 == 0 else "curated"
    return record(i, sentence(rng), kind, (sentence(rng),) if i % 2 else ())


@pytest.fixture
def small_blocks(monkeypatch):
    from memvault.indexer.backend.postgres import lexical

    monkeypatch.setattr(lexical, "BLOCK", 4)
    monkeypatch.setattr(lexical, "MERGE_AT", 25)


@pytest.fixture
def backend(postgres_dsn):
    from memvault.indexer.backend.postgres.engine import PostgresBackend

    made_ = PostgresBackend(postgres_dsn, "blocks-" + uuid.uuid4().hex[:8])
    yield made_
    made_.close()


def leaf(backend, generation, table: str = "memvault_postings") -> str:
    from memvault.indexer.backend.postgres import schema

    return '"' + schema.leaf_table(backend.vault, generation, table) + '"'


def blocks(backend, generation, tier: int):
    columns = "ctid::text, term, field, kind, top, low, n, entries"
    with backend._session() as conn:
        return conn.execute(f"SELECT {columns} FROM {leaf(backend, generation)} WHERE tier = %s", (tier,)).fetchall()


def ranked(backend, generation, query, monkeypatch, sizes=None, depth=50):
    from memvault.indexer.backend.postgres import engine

    with monkeypatch.context() as patch:
        if sizes is not None:
            patch.setattr(engine, "read_sizes", lambda _depth: dict(sizes))
        return backend.lexical_candidates(generation, query, depth, ("curated", "audit"))


def edited_one_at_a_time(backend, rng) -> tuple[int, dict[str, MemoryRecord]]:
    generation = backend.create_generation(None)
    live = {w.key: w.record for w in map(write, (made(rng, i) for i in range(40)))}
    backend.apply(generation, BackendDelta((), tuple(map(write, live.values())), {}))
    backend.activate_generation(generation)
    for step in range(120):
        i = rng.randrange(60)
        r = made(rng, i)
        key = write(r).key
        if step % 5 == 0 and key in live:  # a delete
            del live[key]
            backend.apply(generation, BackendDelta((key,), (), {}))
        else:  # an add or an edit (the row is replaced)
            live[key] = r
            backend.apply(generation, BackendDelta((), (write(r),), {}))
    return generation, live


def test_a_generation_edited_one_write_at_a_time_holds_its_rows_postings_in_sound_blocks(
    backend, small_blocks, monkeypatch
):
    from memvault.indexer.backend.postgres import lexical

    generation, live = edited_one_at_a_time(backend, random.Random(3))
    sealed = blocks(backend, generation, 1)
    assert sealed, "merges ran on the serving generation"
    lists: dict[tuple, list] = {}
    for _, term, field, kind, top, low, n, entries in sealed:
        assert n == len(entries) <= 2 * lexical.BLOCK
        assert low <= top
        lists.setdefault((term, field, kind), []).append((top, low))
    for ranges in lists.values():  # disjoint (touching at most) impact ranges, best first
        ranges.sort(reverse=True)
        assert all(upper[1] >= lower[0] for upper, lower in zip(ranges, ranges[1:], strict=False))
    held = sorted(e for *_, entries in sealed + blocks(backend, generation, 0) for e in entries)
    with backend._session() as conn:
        rows = conn.execute(f"SELECT doc, lex_tf FROM {leaf(backend, generation, 'memvault_rows')}").fetchall()
    expected = sorted((doc << 32) | tail for doc, tails in rows for tail in tails)
    assert held == expected  # every live row's postings once, nothing of a deleted or replaced row
    assert len(rows) == len(live)


def test_edited_one_write_at_a_time_it_ranks_as_a_generation_loaded_at_once(backend, small_blocks, monkeypatch):
    generation, live = edited_one_at_a_time(backend, random.Random(5))
    loaded = backend.create_generation(None)
    backend.apply(loaded, BackendDelta((), tuple(write(r) for _, r in sorted(live.items())), {}))
    backend.activate_generation(loaded)
    for query in QUERIES:
        assert ranked(backend, generation, query, monkeypatch, EVERYTHING) == ranked(
            backend, loaded, query, monkeypatch, EVERYTHING
        )
        assert ranked(backend, loaded, query, monkeypatch) == ranked(backend, loaded, query, monkeypatch, EVERYTHING)
        # lists cut after a block or two: whatever is returned is scored exactly
        exact = dict(ranked(backend, generation, query, monkeypatch, EVERYTHING, depth=1000))
        cut = ranked(backend, generation, query, monkeypatch, {"per_list": 3, "per_text": 5, "pool": 12}, depth=10)
        assert cut and all(score == exact[key] for key, score in cut)


def test_a_merge_rewrites_only_the_blocks_its_delta_falls_into(backend, small_blocks, monkeypatch):
    from memvault.indexer.backend.postgres import lexical

    generation = backend.create_generation(None)
    rows = [record(i, "alpha " + " ".join(["beta"] * (i % 5))) for i in range(400)]
    backend.apply(generation, BackendDelta((), tuple(map(write, rows)), {}))
    backend.activate_generation(generation)
    before = {ctid for ctid, *_ in blocks(backend, generation, 1)}
    assert len(before) > 150 and not blocks(backend, generation, 0)  # sealed at activation
    monkeypatch.setattr(lexical, "MERGE_AT", 1)
    backend.apply(generation, BackendDelta((), (write(record(1000, "alpha beta")),), {}))
    after = {ctid for ctid, *_ in blocks(backend, generation, 1)}
    assert not blocks(backend, generation, 0)
    # two postings (alpha, beta), each into one block, which may split in two
    assert len(before - after) <= 2 and len(after - before) <= 4


def test_a_rebuilds_load_is_sealed_once_when_it_is_activated(backend, small_blocks):
    generation = backend.create_generation(None)
    rng = random.Random(9)
    for start in range(0, 120, 30):  # four batches, each past MERGE_AT postings
        backend.apply(generation, BackendDelta((), tuple(write(made(rng, i)) for i in range(start, start + 30)), {}))
    assert not blocks(backend, generation, 1) and blocks(backend, generation, 0)
    backend.activate_generation(generation)
    assert blocks(backend, generation, 1) and not blocks(backend, generation, 0)
