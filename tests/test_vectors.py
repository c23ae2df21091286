"""The vector index (format 2: sealed segments, a dead list, an append-only log, checkpoints and
tiered merges): real hnswlib, real files in tmp_path. SEAL_AT, FANIN and MAX_SEGMENT are set
small where a test needs seals, merges or a rebuild's hand-offs to happen on a few vectors."""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memvault.indexer.search import vectors as vectors_module
from memvault.indexer.search.embeddings import EmbeddingIdentity, make_provider
from memvault.indexer.search.vector_files import TAG_BYTES, read_dead
from memvault.indexer.search.vectors import META_FILE, NO_TAG, VectorIndex, read_identity
from memvault.vault import fsio
from memvault.vault.errors import IndexUnavailable

DIM = 16
IDENTITY = EmbeddingIdentity("builtin", "test-model", DIM)
REBUILD = "run `memvault rebuild`"
RECORD_HEAD = 4 + 1 + 2 + TAG_BYTES  # crc, op, key length, tag
LOG_HEAD = 8 + 4  # magic, dim
FILE_NAME = re.compile(r"^(vectors-meta\.json|seg-\d{6}\.(hnsw|keys)|(dead|log)-\d{6}\.bin)$")


def random_vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    matrix = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def ids(n: int, prefix: str = "m", start: int = 0) -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(start, start + n)]


def tag(n: int) -> str:
    return f"{n:016x}"


def tags(n: int, start: int = 0) -> list[str]:
    return [tag(i) for i in range(start, start + n)]


def add_bytes(key: str) -> int:
    return RECORD_HEAD + len(key.encode()) + 4 * DIM


def brute_force(model: dict[str, tuple[np.ndarray, str]], query: np.ndarray) -> list[tuple[str, float]]:
    unit = query / np.linalg.norm(query)
    scored = [(id_, float(vector @ unit / np.linalg.norm(vector))) for id_, (vector, _tag) in model.items()]
    return sorted(scored, key=lambda hit: (-hit[1], hit[0]))


def small(monkeypatch: pytest.MonkeyPatch, seal_at: int = 10, fanin: int = 3, max_segment: int = 1 << 18) -> None:
    monkeypatch.setattr(vectors_module, "SEAL_AT", seal_at)
    monkeypatch.setattr(vectors_module, "FANIN", fanin)
    monkeypatch.setattr(vectors_module, "MAX_SEGMENT", max_segment)


def names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def meta_of(folder: Path) -> dict:
    return json.loads((folder / META_FILE).read_text())


def named_by_meta(folder: Path) -> list[str]:
    """Every file the meta names, and the meta itself."""
    meta = meta_of(folder)
    named = [META_FILE, f"log-{meta['log']:06d}.bin"]
    named += [f"seg-{s['number']:06d}.{ext}" for s in meta["segments"] for ext in ("hnsw", "keys")]
    if meta["dead"] is not None:
        named.append(f"dead-{meta['dead']:06d}.bin")
    return sorted(named)


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns, path.read_bytes()) for path in folder.iterdir()}


def saved_index(folder: Path, n: int = 50) -> VectorIndex:
    index = VectorIndex.create(folder, IDENTITY)
    index.add(ids(n), random_vectors(n), tags(n))
    index.save()
    return index


def sealed_index(folder: Path, monkeypatch: pytest.MonkeyPatch, segments: int = 3, per: int = 10) -> VectorIndex:
    """`segments` sealed segments of `per` vectors each (SEAL_AT = per), an empty log."""
    small(monkeypatch, seal_at=per, fanin=max(segments, 2) + 1)
    index = VectorIndex.create(folder, IDENTITY)
    index.save()  # the first save only starts the log
    for n in range(segments):
        index.add(ids(per, start=n * per), random_vectors(per, seed=n), tags(per, start=n * per))
        index.save()  # the live segment is full: sealed
    assert len(meta_of(folder)["segments"]) == segments and index.segments == segments
    return index


def assert_similar_answers(first: VectorIndex, second: VectorIndex, queries: int = 8, k: int = 7) -> None:
    """The same ids and answers, scores equal to float rounding (a merge re-inserts the vectors)."""
    assert first.ids() == second.ids() and first.tags(first.ids()) == second.tags(second.ids())
    for query in random_vectors(queries, seed=1234):
        one, other = first.search(query, k), second.search(query, k)
        assert [id_ for id_, _ in one] == [id_ for id_, _ in other]
        assert np.allclose([s for _, s in one], [s for _, s in other], atol=1e-6)


def assert_same_answers(first: VectorIndex, second: VectorIndex, queries: int = 8, k: int = 7) -> None:
    assert first.ids() == second.ids() and len(first) == len(second)
    assert first.tags(first.ids()) == second.tags(second.ids())
    for query in random_vectors(queries, seed=1234):
        assert first.search(query, k) == second.search(query, k)


# -- adding, searching, deleting ----------------------------------------------------------------


def test_add_search_upsert_delete(tmp_path: Path) -> None:
    index = VectorIndex.create(tmp_path, IDENTITY)
    matrix = random_vectors(20)
    index.add(ids(20), matrix, tags(20))
    assert len(index) == 20 and index.ids() == ids(20) and "m-00003" in index

    hits = index.search(matrix[3], 5)
    assert hits[0][0] == "m-00003" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [score for _id, score in hits] == sorted((score for _id, score in hits), reverse=True)

    index.add(["m-00003"], -matrix[3:4], [tag(99)])  # upsert: the id now points the other way
    assert len(index) == 20 and index.tags(["m-00003"]) == [tag(99)]
    assert index.search(matrix[3], 1)[0][0] != "m-00003"
    assert index.search(-matrix[3], 1) == [("m-00003", pytest.approx(1.0, abs=1e-5))]

    assert index.delete(["m-00003", "m-00004", "never-added"]) == 2
    assert index.delete(["m-00003"]) == 0  # already gone
    assert len(index) == 18 and "m-00003" not in index and index.tags(["m-00003", "m-00004"]) == [None, None]
    everything = index.search(matrix[0], 1000)  # k above the count works
    assert len(everything) == 18
    assert {"m-00003", "m-00004"}.isdisjoint(id_ for id_, _score in everything)


def test_small_k_and_empty_indexes(tmp_path: Path) -> None:
    index = VectorIndex.create(tmp_path, IDENTITY)
    query = random_vectors(1)[0]
    assert index.search(query, 5) == [] and len(index) == 0 and index.ids() == [] and index.segments == 0
    matrix = random_vectors(200)
    index.add(ids(200), matrix)
    assert index.search(matrix[7], 0) == [] and index.search(matrix[7], -3) == []
    assert [id_ for id_, _ in index.search(matrix[7], 1)] == ["m-00007"]
    assert len(index.search(query[None, :], 10)) == 10  # a (1, dim) query is one vector
    index.delete(ids(200))
    assert index.search(query, 5) == [] and len(index) == 0


def test_bad_inputs_are_refused(tmp_path: Path) -> None:
    index = VectorIndex.create(tmp_path, IDENTITY)
    bad_adds = [
        (["a", "b"], random_vectors(1), None),  # rows and ids differ
        (["a"], random_vectors(1, dim=DIM + 1), None),  # another dimension
        (["a"], random_vectors(1)[0], None),  # not a matrix
        (["a", "a"], random_vectors(2), None),  # the same id twice
        (["a"], np.full((1, DIM), np.nan, dtype=np.float32), None),
        (["a"], np.full((1, DIM), np.inf, dtype=np.float32), None),
        ([""], random_vectors(1), None),  # an empty id
        ([7], random_vectors(1), None),  # not a string
        (["a"], random_vectors(1), ["short"]),  # a tag of the wrong length
        (["a"], random_vectors(1), [None]),
        (["a", "b"], random_vectors(2), [tag(1)]),  # one tag for two ids
        (["k" * 70_000], random_vectors(1), None),  # longer than a log record can hold
    ]
    for bad_ids, matrix, bad_tags in bad_adds:
        with pytest.raises(ValueError):
            index.add(bad_ids, matrix, bad_tags)
    for query in (np.ones(DIM + 1, dtype=np.float32), np.full(DIM, np.nan, dtype=np.float32), np.ones((2, DIM))):
        with pytest.raises(ValueError):
            index.search(query, 3)
    assert len(index) == 0
    index.add([], np.zeros((0, DIM), dtype=np.float32))  # nothing to add is fine
    index.add(["fine"], random_vectors(1))
    index.save()  # nothing refused got in the way of the save
    assert VectorIndex.open(tmp_path, IDENTITY).ids() == ["fine"]


def test_tags_and_membership(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = sealed_index(tmp_path, monkeypatch, segments=2)
    assert index.tags(["m-00003", "m-00015", "nowhere"]) == [tag(3), tag(15), None]
    index.add(["untagged"], random_vectors(1))
    assert index.tags(["untagged"]) == [NO_TAG] and "untagged" in index
    index.add(["m-00003"], random_vectors(1, seed=5), [tag(333)])  # from a sealed segment to the live one
    assert index.tags(["m-00003"]) == [tag(333)] and len(index) == 21
    index.delete(["m-00015"])
    assert "m-00015" not in index and 12 not in index and None not in index
    index.save()
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert reopened.tags(["m-00003", "m-00015", "untagged", "m-00019"]) == [tag(333), None, NO_TAG, tag(19)]


def test_an_index_sealed_with_dead_positions_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live segment's upserts and deletes are marked in its graph, which is saved so when it is
    sealed; the dead list names them again. Opening it raised hnswlib's RuntimeError ("already
    deleted") instead of loading."""
    small(monkeypatch, seal_at=5)
    index = VectorIndex.create(tmp_path, IDENTITY)
    index.save()
    index.add(ids(5), random_vectors(5), tags(5))
    index.add(["m-00001"], random_vectors(1, seed=1), [tag(11)])  # an upsert inside the live segment
    index.delete(["m-00002"])
    index.save()  # sealed, with two dead positions in its graph and in the dead list
    assert meta_of(tmp_path)["dead"] is not None
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert reopened.ids() == ["m-00000", "m-00001", "m-00003", "m-00004"] and reopened.tags(["m-00001"]) == [tag(11)]
    assert_same_answers(index, reopened)


# -- a property test against a brute-force model ------------------------------------------------

STEP = st.one_of(
    st.tuples(st.just("add"), st.lists(st.integers(0, 30), min_size=1, max_size=8, unique=True)),
    st.tuples(st.just("delete"), st.lists(st.integers(0, 30), min_size=1, max_size=5, unique=True)),
    st.tuples(st.just("save"), st.just([])),
    st.tuples(st.just("merge"), st.just([])),
    st.tuples(st.just("merge around"), st.lists(st.integers(0, 30), min_size=1, max_size=6, unique=True)),
    st.tuples(st.just("reopen"), st.just([])),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(STEP, min_size=1, max_size=30),
    st.sampled_from([2, 3, 5]),
    st.sampled_from([2, 3]),
    st.sampled_from([6, 12, 1000]),
    st.integers(0, 2**16),
)
def test_matches_a_brute_force_model(steps: list, seal_at: int, fanin: int, max_segment: int, seed: int) -> None:
    """Whatever the upserts, deletes, saves, merges (also with changes between stage_save and
    put_staged) and reopens, the ids, tags and answers are those of brute force over a dict."""
    rng = np.random.default_rng(seed)
    model: dict[str, tuple[np.ndarray, str]] = {}
    version = [0]

    def upsert(index: VectorIndex, keys: list[int]) -> None:
        names_ = [f"id-{key}" for key in keys]
        matrix = rng.standard_normal((len(names_), DIM)).astype(np.float32)
        new_tags = [tag(version[0] + n) for n in range(len(names_))]
        version[0] += len(names_)
        index.add(names_, matrix, new_tags)
        model.update({name: (row, t) for name, row, t in zip(names_, matrix, new_tags, strict=True)})

    def delete(index: VectorIndex, keys: list[int]) -> None:
        names_ = [f"id-{key}" for key in keys]
        assert index.delete(names_) == sum(name in model for name in names_)
        for name in names_:
            model.pop(name, None)

    def check(index: VectorIndex) -> None:
        assert index.ids() == sorted(model) and len(index) == len(model)
        assert index.tags(sorted(model)) == [model[key][1] for key in sorted(model)]
        query = rng.standard_normal(DIM).astype(np.float32)
        expected = brute_force(model, query)
        for k in (3, len(model) + 2):
            hits = index.search(query, k)
            assert len(hits) == min(k, len(model))
            assert np.allclose([s for _, s in hits], [s for _, s in expected[:k]], atol=1e-5)
        assert sorted(id_ for id_, _ in index.search(query, len(model) + 2)) == sorted(model)

    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        small(patch, seal_at=seal_at, fanin=fanin, max_segment=max_segment)
        index = VectorIndex.create(Path(folder), IDENTITY)
        for action, keys in steps:
            if action == "add":
                upsert(index, keys)
            elif action == "delete":
                delete(index, keys)
            elif action == "save":
                index.save()
            elif action == "merge":
                assert index.put_staged(index.stage_save()) is True
            elif action == "merge around":  # changes land between the two halves of a merge
                staged = index.stage_save()
                upsert(index, keys[::2])
                delete(index, keys[1::2])
                assert index.put_staged(staged) is True
            else:
                index.save()
                index = VectorIndex.open(Path(folder), IDENTITY)
            check(index)
        index.save()
        reopened = VectorIndex.open(Path(folder), IDENTITY)
        check(reopened)
        assert_same_answers(index, reopened)
        assert names(Path(folder)) == named_by_meta(Path(folder))  # nothing left behind


# -- saving: appends, checkpoints, the files ----------------------------------------------------


def test_a_save_appends_to_the_log_and_leaves_the_sealed_segments_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43: a write never rewrites the index. After a checkpoint, a save of a small batch
    leaves every sealed file as it was (inode, mtime, bytes) and grows the log by the batch."""
    small(monkeypatch, seal_at=200)
    index = VectorIndex.create(tmp_path, IDENTITY)
    index.add(ids(250), random_vectors(250), tags(250))
    index.save()
    index.save()  # the live segment holds SEAL_AT or more: sealed, with a new empty log
    meta = meta_of(tmp_path)
    assert [s["count"] for s in meta["segments"]] == [250]
    log = tmp_path / f"log-{meta['log']:06d}.bin"
    assert log.stat().st_size == LOG_HEAD
    before = snapshot(tmp_path)

    batch = ids(5, prefix="new")
    index.add(batch, random_vectors(5, seed=3), tags(5))
    index.delete(["m-00007", "m-00100"])  # deaths in the sealed segment go to the log too
    index.save()

    after = snapshot(tmp_path)
    assert sorted(after) == sorted(before)
    for name, state in before.items():
        if name not in (log.name, META_FILE):
            assert after[name] == state, f"{name} was rewritten by a small save"
    meta_after = meta_of(tmp_path)  # the meta is renamed over with the new count, naming the same files
    assert {**meta_after, "count": None} == {**meta, "count": None} and meta_after["count"] == 253
    grown = log.stat().st_size - LOG_HEAD
    assert grown == sum(add_bytes(key) for key in batch) + 2 * (RECORD_HEAD + len("m-00007"))
    assert after[log.name][0] == before[log.name][0]  # appended in place, not replaced
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert len(reopened) == 253 and "m-00007" not in reopened and reopened.tags(batch) == tags(5)
    assert_same_answers(index, reopened)
    index.save()  # nothing new: nothing written
    assert log.stat().st_size - LOG_HEAD == grown


def test_save_open_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = sealed_index(tmp_path, monkeypatch, segments=2)
    index.delete(["m-00010"])
    index.add(["m-00011", "extra"], random_vectors(2, seed=9), [tag(111), tag(112)])
    index.add(ids(10, prefix="more"), random_vectors(10, seed=8))
    index.save()  # 12 in the live segment: sealed; m-00010 and the old m-00011 are dead
    index.add(["late"], random_vectors(1, seed=7))
    index.save()

    listed = names(tmp_path)
    assert listed == named_by_meta(tmp_path) and all(FILE_NAME.match(name) for name in listed)  # no temp files
    meta = meta_of(tmp_path)
    assert (meta["format"], meta["provider"], meta["model"], meta["dim"], meta["space"]) == (
        2, "builtin", "test-model", DIM, "cosine"
    )  # fmt: skip
    assert [s["count"] for s in meta["segments"]] == [10, 10, 12]
    assert all(re.fullmatch(r"[0-9a-f]{64}", s["checksum"]) for s in meta["segments"])
    assert meta["count"] == 31 and re.fullmatch(r"[0-9a-f]{64}", meta["dead_checksum"])  # "late", logged, too
    numbers = [s["number"] for s in meta["segments"]] + [meta["dead"], meta["log"]]
    assert len(set(numbers)) == len(numbers) and max(numbers) < meta["next"]
    dead = read_dead(tmp_path / f"dead-{meta['dead']:06d}.bin")
    assert {number: positions.tolist() for number, positions in dead.items()} == {meta["segments"][1]["number"]: [0, 1]}
    assert read_identity(tmp_path) == IDENTITY
    assert read_identity(tmp_path / "nowhere") is None

    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert len(reopened) == 31 and reopened.segments == 4  # three sealed and the log's
    assert_same_answers(index, reopened)
    reopened.add(["after-open"], random_vectors(1, seed=11))  # a reopened index keeps working
    reopened.delete(["m-00000"])
    reopened.save()
    again = VectorIndex.open(tmp_path, IDENTITY)
    assert "after-open" in again and "m-00000" not in again and len(again) == 31


def test_read_identity_of_a_meta_without_one(tmp_path: Path) -> None:
    saved_index(tmp_path, n=3)
    meta = meta_of(tmp_path)
    (tmp_path / META_FILE).write_text(json.dumps({**meta, "dim": "16"}))
    assert read_identity(tmp_path) is None
    (tmp_path / META_FILE).write_text(json.dumps({k: v for k, v in meta.items() if k != "model"}))
    assert read_identity(tmp_path) is None


def test_empty_index_round_trip(tmp_path: Path) -> None:
    VectorIndex.create(tmp_path, IDENTITY).save()
    assert names(tmp_path) == named_by_meta(tmp_path) and meta_of(tmp_path)["segments"] == []
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert len(reopened) == 0 and reopened.search(random_vectors(1)[0], 3) == []
    reopened.add(ids(3), random_vectors(3))
    reopened.save()
    assert VectorIndex.open(tmp_path, IDENTITY).ids() == ids(3)


def test_open_with_wrong_identity(tmp_path: Path) -> None:
    saved_index(tmp_path)
    wanted = EmbeddingIdentity("ollama", "nomic-embed-text:v1.5", DIM)
    with pytest.raises(IndexUnavailable) as caught:
        VectorIndex.open(tmp_path, wanted)
    assert (
        f"was built with builtin/test-model/{DIM} but config says ollama/nomic-embed-text:v1.5/{DIM}: {REBUILD}"
        in str(caught.value)
    )
    with pytest.raises(IndexUnavailable, match="rebuild"):
        VectorIndex.open(tmp_path, EmbeddingIdentity("builtin", "test-model", DIM * 2))
    with pytest.raises(IndexUnavailable, match="rebuild"):
        VectorIndex.open(tmp_path, EmbeddingIdentity("builtin", "other-model", DIM))
    with pytest.raises(ValueError):
        VectorIndex.create(tmp_path / "zero", EmbeddingIdentity("builtin", "test-model", 0))


# -- damaged files --------------------------------------------------------------------------------


def damaged_fixture(folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Two sealed segments, a dead list, a log of five records: the files by role."""
    small(monkeypatch, seal_at=20, fanin=10)
    index = VectorIndex.create(folder, IDENTITY)
    index.add(ids(30), random_vectors(30), tags(30))
    index.save()
    index.save()  # sealed: segment A
    index.delete(["m-00001", "m-00002"])
    index.add(ids(25, prefix="b"), random_vectors(25, seed=1))
    index.save()  # sealed: segment B; A's two deaths in the dead list
    index.delete(["b-00003"])
    index.add(ids(4, prefix="c"), random_vectors(4, seed=2), tags(4))
    index.save()  # five records in the log
    meta = meta_of(folder)
    first, second = meta["segments"]
    return {
        "meta": folder / META_FILE,
        "graph": folder / f"seg-{first['number']:06d}.hnsw",
        "keys": folder / f"seg-{first['number']:06d}.keys",
        "graph2": folder / f"seg-{second['number']:06d}.hnsw",
        "dead": folder / f"dead-{meta['dead']:06d}.bin",
        "log": folder / f"log-{meta['log']:06d}.bin",
    }


def rewrite_meta(path: Path, **changes: object) -> None:
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def second_record(log: Path) -> int:
    """The offset of the log's second record (the first is the DELETE of b-00003)."""
    return LOG_HEAD + RECORD_HEAD + len("b-00003")


DAMAGES = {
    # name: (what to do with the files, what the message says, the file it names)
    "meta missing": (lambda f: f["meta"].unlink(), "is missing", "meta"),
    "meta not json": (lambda f: f["meta"].write_bytes(f["meta"].read_bytes()[:40]), "not valid JSON", "meta"),
    "meta not an object": (lambda f: f["meta"].write_text("[1, 2]"), "not a JSON object", "meta"),
    "meta format 1": (lambda f: rewrite_meta(f["meta"], format=1), "older memvault", "meta"),
    "meta format 3": (lambda f: rewrite_meta(f["meta"], format=3), "has format 3", "meta"),
    "meta space": (lambda f: rewrite_meta(f["meta"], space="l2"), "space 'l2'", "meta"),
    "meta segments not a list": (lambda f: rewrite_meta(f["meta"], segments={}), "malformed file list", "meta"),
    "meta segment not an object": (lambda f: rewrite_meta(f["meta"], segments=[3]), "malformed file list", "meta"),
    "meta segment count": (
        lambda f: rewrite_meta(f["meta"], segments=[{**s, "count": -1} for s in meta_of(f["meta"].parent)["segments"]]),
        "malformed file list",
        "meta",
    ),
    "meta log not a number": (lambda f: rewrite_meta(f["meta"], log="7"), "malformed file list", "meta"),
    "meta dead not a number": (lambda f: rewrite_meta(f["meta"], dead=[1]), "malformed file list", "meta"),
    "meta numbers repeat": (
        lambda f: rewrite_meta(f["meta"], log=meta_of(f["meta"].parent)["dead"]),
        "malformed file list",
        "meta",
    ),
    "meta next too small": (lambda f: rewrite_meta(f["meta"], next=1), "malformed file list", "meta"),
    "meta count of a segment": (
        lambda f: rewrite_meta(
            f["meta"],
            segments=[{**s, "count": s["count"] + 1} for s in meta_of(f["meta"].parent)["segments"]],
        ),
        "holds",
        "graph",
    ),
    "graph missing": (lambda f: f["graph"].unlink(), "is missing", "graph"),
    "graph tiny": (lambda f: f["graph"].write_bytes(b"\0" * 10), "truncated", "graph"),
    "graph truncated": (lambda f: f["graph"].write_bytes(f["graph"].read_bytes()[:-100]), "checksum", "graph"),
    "graph bit flip": (lambda f: flip(f["graph"], f["graph"].stat().st_size // 2), "checksum", "graph"),
    "second graph bit flip": (lambda f: flip(f["graph2"], f["graph2"].stat().st_size - 3), "checksum", "graph2"),
    "keys missing": (lambda f: f["keys"].unlink(), "is missing", "keys"),
    "keys bit flip": (lambda f: flip(f["keys"], f["keys"].stat().st_size - 2), "checksum", "graph"),
    "dead missing": (lambda f: f["dead"].unlink(), "is missing", "dead"),
    "dead checksum": (lambda f: flip(f["dead"], f["dead"].stat().st_size - 1), "checksum", "dead"),
    "log missing": (lambda f: f["log"].unlink(), "is missing", "log"),
    "log header": (lambda f: flip(f["log"], 2), "not a vector log", "log"),
    "log of another dim": (lambda f: flip(f["log"], 8), "not a vector log for 16-dim", "log"),
    "log record inside": (lambda f: flip(f["log"], second_record(f["log"]) + RECORD_HEAD + 3), "is damaged", "log"),
    "log first record crc": (lambda f: flip(f["log"], LOG_HEAD), "is damaged", "log"),
    "log record op": (lambda f: flip(f["log"], second_record(f["log"]) + 4), "is damaged", "log"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_open_refuses_damaged_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    files = damaged_fixture(tmp_path, monkeypatch)
    harm, says, names_file = DAMAGES[damage]
    harm(files)
    with pytest.raises(IndexUnavailable) as caught:
        VectorIndex.open(tmp_path, IDENTITY)
    message = str(caught.value)
    assert says in message and REBUILD in message
    assert str(files[names_file]) in message, message


def forge_checksum(folder: Path, number: int) -> None:
    """Give segment `number` the checksum its (damaged) files have now: only its own checks are left."""
    meta = meta_of(folder)
    checksum = vectors_module._sha256_of(folder / f"seg-{number:06d}.hnsw", folder / f"seg-{number:06d}.keys")
    meta["segments"] = [{**s, "checksum": checksum} if s["number"] == number else s for s in meta["segments"]]
    (folder / META_FILE).write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("magic", "not a memvault key table"),
        ("truncated", "truncated"),
        ("offsets", "inconsistent key offsets"),
        ("dim forged", "4-dim"),
    ],
)
def test_a_checksum_that_matches_damage_is_still_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, says: str
) -> None:
    files = damaged_fixture(tmp_path, monkeypatch)
    number = meta_of(tmp_path)["segments"][0]["number"]
    identity = IDENTITY
    if damage == "magic":
        flip(files["keys"], 0)
    elif damage == "truncated":
        files["keys"].write_bytes(files["keys"].read_bytes()[:20])
    elif damage == "offsets":
        flip(files["keys"], 8 + 8 + 8 * 3 + 1)  # the third key's offset
    else:  # a consistent-looking meta for another dimension must not load silently
        identity = EmbeddingIdentity("builtin", "test-model", 4)
        rewrite_meta(files["meta"], dim=4)
    forge_checksum(tmp_path, number)
    with pytest.raises(IndexUnavailable) as caught:
        VectorIndex.open(tmp_path, identity)
    assert says in str(caught.value) and REBUILD in str(caught.value)


@pytest.mark.parametrize("tear", ["cut mid-record", "zeros appended", "cut mid-record, then zeros", "cut in a header"])
def test_a_torn_log_tail_is_dropped_and_the_records_before_it_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tear: str
) -> None:
    """A crash mid-append leaves a short record or zeros (a file grown before its data landed):
    that save never vouched for its vectors, so they go, silently; everything before stays."""
    files = damaged_fixture(tmp_path, monkeypatch)
    log = files["log"]
    whole = log.read_bytes()
    last = len(whole) - add_bytes("c-00003")
    kept = {"cut mid-record": whole[: last + 30], "zeros appended": whole + b"\0" * 500,
            "cut mid-record, then zeros": whole[: last + 30] + b"\0" * 500,
            "cut in a header": whole[: last + 5]}[tear]  # fmt: skip
    log.write_bytes(kept)
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    survivors = ["c-00000", "c-00001", "c-00002"] + (["c-00003"] if tear == "zeros appended" else [])
    assert [key for key in ids(4, prefix="c") if key in reopened] == survivors
    assert "b-00003" not in reopened and "m-00001" not in reopened and len(reopened) == 52 + len(survivors)
    reopened.add(["after"], random_vectors(1, seed=5))
    reopened.save()  # the next append replaces the torn tail
    again = VectorIndex.open(tmp_path, IDENTITY)
    assert "after" in again and len(again) == len(reopened)
    assert_same_answers(reopened, again)


# -- failures, concurrency ----------------------------------------------------------------------


def failing(real, fail_on: int = 1):
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == fail_on:
            raise OSError("injected: disk full")
        return real(*args, **kwargs)

    return wrapper


@pytest.mark.parametrize(
    "where", ["meta rename", "meta temp file", "an fsync", "segment fsync", "folder fsync before the meta", "dead list"]
)
def test_a_failed_checkpoint_leaves_the_previous_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    index = sealed_index(tmp_path, monkeypatch, segments=2)
    index.delete(["m-00004"])
    index.add(ids(6, prefix="log"), random_vectors(6, seed=4))
    index.save()  # appended: the state a failed checkpoint must leave
    before_names, before = names(tmp_path), VectorIndex.open(tmp_path, IDENTITY)
    index.delete(["m-00005"])
    index.add(ids(6, prefix="new"), random_vectors(6, seed=5))  # 12 live: the next save seals
    patches = {
        "meta rename": (os, "replace"),
        "meta temp file": (fsio, "write_temp"),
        "an fsync": (os, "fsync"),
        "segment fsync": (vectors_module, "fsync_file"),
        "folder fsync before the meta": (vectors_module, "fsync_dir"),
        "dead list": (vectors_module, "write_dead"),
    }
    owner, name = patches[where]
    real = getattr(owner, name)
    with monkeypatch.context() as patch:
        patch.setattr(owner, name, failing(real))
        with pytest.raises(OSError, match="injected"):
            index.save()
    assert names(tmp_path) == before_names  # nothing new left behind
    assert_same_answers(before, VectorIndex.open(tmp_path, IDENTITY))
    assert len(index) == 30 and "m-00005" not in index  # memory still holds everything

    index.save()  # the next save carries everything
    after = VectorIndex.open(tmp_path, IDENTITY)
    assert_same_answers(index, after)
    assert "m-00005" not in after and "new-00005" in after and names(tmp_path) == named_by_meta(tmp_path)


@pytest.mark.parametrize("where", ["log fsync", "meta rename"])
def test_a_failed_first_save_can_be_saved_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """The first save makes the log and the meta: one that fails leaves no files, and the next
    save makes them again (it used to append to the removed log: FileNotFoundError forever)."""
    index = VectorIndex.create(tmp_path, IDENTITY)
    index.add(ids(5), random_vectors(5))
    owner, name = (vectors_module, "fsync_file") if where == "log fsync" else (os, "replace")
    with monkeypatch.context() as patch:
        patch.setattr(owner, name, failing(getattr(owner, name)))
        with pytest.raises(OSError, match="injected"):
            index.save()
    assert names(tmp_path) == []
    index.add(["sixth"], random_vectors(1, seed=1))
    index.save()
    assert VectorIndex.open(tmp_path, IDENTITY).ids() == sorted([*ids(5), "sixth"])


def test_a_failed_folder_fsync_after_the_meta_rename_keeps_the_files_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """atomic_write raises when the folder's fsync after its rename fails: the new meta is in
    place by then, so the checkpoint must not remove the files it names (the index was left
    unloadable), nor the old ones (the rename may not survive a crash)."""
    index = sealed_index(tmp_path, monkeypatch, segments=2)
    before = names(tmp_path)
    index.add(ids(10, prefix="new"), random_vectors(10, seed=5))  # the next save seals
    with monkeypatch.context() as patch:
        patch.setattr(fsio, "fsync_dir", failing(fsio.fsync_dir))  # atomic_write's own, after its rename
        with pytest.raises(OSError, match="injected"):
            index.save()
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert_same_answers(index, reopened)
    assert len(meta_of(tmp_path)["segments"]) == 3 and set(before) <= set(names(tmp_path))
    index.add(["later"], random_vectors(1, seed=6))
    index.save()
    assert_same_answers(index, VectorIndex.open(tmp_path, IDENTITY))


def test_a_failed_append_is_written_again_by_the_next_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = saved_index(tmp_path, n=5)
    index.add(["sixth"], random_vectors(1, seed=1))
    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", failing(os.fsync))
        with pytest.raises(OSError, match="injected"):
            index.save()
    index.add(["seventh"], random_vectors(1, seed=2))
    index.save()
    log = tmp_path / f"log-{meta_of(tmp_path)['log']:06d}.bin"
    assert log.stat().st_size == LOG_HEAD + sum(add_bytes(key) for key in [*ids(5), "sixth", "seventh"])
    assert VectorIndex.open(tmp_path, IDENTITY).ids() == sorted([*ids(5), "sixth", "seventh"])


def test_readers_never_see_a_checkpoint_in_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening while another thread appends, seals and merges retries past a checkpoint's
    renames and removals: a reader sees one whole state or the next, never a failure."""
    small(monkeypatch, seal_at=15, fanin=3)
    writer = saved_index(tmp_path, n=40)
    done = threading.Event()
    errors: list[BaseException] = []

    def keep_saving() -> None:
        try:
            for round_ in range(60):
                writer.add(ids(7, prefix=f"r{round_}"), random_vectors(7, seed=round_))
                writer.put_staged(writer.stage_save())  # appends, seals and merges
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=keep_saving)
    thread.start()
    failures, counts = [], set()
    try:
        while not done.is_set():
            try:
                counts.add(len(VectorIndex.open(tmp_path, IDENTITY)))
            except IndexUnavailable as exc:
                failures.append(str(exc))
    finally:
        thread.join()
    assert errors == [] and failures == []
    assert counts and all((count - 40) % 7 == 0 for count in counts)  # whole saves only
    final = VectorIndex.open(tmp_path, IDENTITY)
    assert len(final) == 40 + 60 * 7 and final.segments < 10
    assert_same_answers(writer, final)


# -- a rebuild's builds -------------------------------------------------------------------------


def build(folder: Path, model: dict[str, str] | None = None) -> VectorIndex:
    """A rebuild's index: batches, then upserts and deletes that reach segments handed off."""
    index = VectorIndex.create(folder, IDENTITY, building=True)
    matrix = random_vectors(460, seed=1)
    keys = ids(460)
    for start in range(0, 460, 16):
        batch = keys[start : start + 16]
        index.add(batch, matrix[start : start + 16], tags(len(batch), start=start))
        with pytest.raises(IndexUnavailable, match="saved, not served"):
            index.search(matrix[0], 3)  # a build is not served
    index.delete(keys[::9])  # in every segment, handed off or not
    index.add(keys[1:40:3], random_vectors(13, seed=2), tags(13, start=1000))  # upserts, some from sealed ones
    index.delete(["never-added"])
    if model is not None:
        model.update({key: tag(n) for n, key in enumerate(keys) if n % 9})
        model.update(dict(zip(keys[1:40:3], tags(13, start=1000), strict=True)))
        for key in keys[::9]:
            model.pop(key, None)
    return index


def test_two_builds_from_the_same_inputs_are_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuild splits at MAX_SEGMENT and hands each full segment to the seal thread; the same
    inputs give byte-identical files and, once opened, identical answers."""
    small(monkeypatch, max_segment=100)
    model: dict[str, str] = {}
    first = build(tmp_path / "a", model)
    assert len(first) == len(model) and first.ids() == sorted(model)  # also while segments are being written
    assert first.tags(sorted(model)) == [model[key] for key in sorted(model)]
    first.save()
    second = build(tmp_path / "b")
    second.save()
    for built in (first, second):
        with pytest.raises(IndexUnavailable, match="saved, not served: open them"):
            built.search(random_vectors(1)[0], 3)  # its graphs were released: it refuses until reopened

    listed = names(tmp_path / "a")
    assert listed == names(tmp_path / "b") == named_by_meta(tmp_path / "a")
    counts = [s["count"] for s in meta_of(tmp_path / "a")["segments"]]
    # one segment fills alone to half, then two take batches in turn: four handed off full, two at the end
    assert len(counts) == 6 and max(counts) <= 100 and sum(counts) == 460 + 13
    for name in listed:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name

    opened_a, opened_b = VectorIndex.open(tmp_path / "a", IDENTITY), VectorIndex.open(tmp_path / "b", IDENTITY)
    assert opened_a.ids() == sorted(model) and opened_a.tags(sorted(model)) == [model[k] for k in sorted(model)]
    assert_same_answers(opened_a, opened_b, queries=25, k=10)
    matrix = random_vectors(460, seed=1)
    assert opened_a.search(matrix[200], 1)[0][0] == "m-00200"
    assert opened_a.search(matrix[0], 3)[0][0] != "m-00000"  # deleted
    opened_a.add(["after"], random_vectors(1, seed=3))  # an opened build is an index like any other
    opened_a.save()
    assert "after" in VectorIndex.open(tmp_path / "a", IDENTITY)


def test_a_build_makes_its_folder_before_its_first_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`create` writes nothing until `save`, but a build's seal thread writes each full segment as
    soon as it is handed off: the folder must be there by then (it failed: FileNotFoundError)."""
    small(monkeypatch, max_segment=10)
    folder = tmp_path / "gen-000002" / "vectors"
    index = VectorIndex.create(folder, IDENTITY, building=True)
    for start in range(0, 35, 5):
        index.add(ids(5, start=start), random_vectors(5, seed=start))
    index.save()
    assert VectorIndex.open(folder, IDENTITY).ids() == ids(35)


# -- merges ---------------------------------------------------------------------------------------


def test_fanin_sealed_segments_merge_into_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = sealed_index(tmp_path, monkeypatch, segments=2)
    assert index.stage_save() is None  # FANIN (3) not reached: nothing due
    assert index.put_staged(None) is True
    index.add(ids(10, start=20), random_vectors(10, seed=2), tags(10, start=20))
    index.save()
    sources = [s["number"] for s in meta_of(tmp_path)["segments"]]
    assert len(sources) == 3
    before = VectorIndex.open(tmp_path, IDENTITY)

    staged = index.stage_save()
    assert staged is not None and sorted(s.number for s in staged.sources) == sorted(sources)
    assert index.put_staged(staged) is True
    meta = meta_of(tmp_path)
    assert [s["count"] for s in meta["segments"]] == [30] and meta["segments"][0]["number"] not in sources
    assert names(tmp_path) == named_by_meta(tmp_path)  # the sources' files were removed
    assert index.segments == 1
    assert_similar_answers(before, index)
    assert_same_answers(index, VectorIndex.open(tmp_path, IDENTITY))
    assert index.stage_save() is None  # one segment of the next tier: nothing more to merge


def test_a_merge_stays_within_max_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = sealed_index(tmp_path, monkeypatch, segments=3)
    monkeypatch.setattr(vectors_module, "FANIN", 3)
    monkeypatch.setattr(vectors_module, "MAX_SEGMENT", 29)
    assert index.stage_save() is None
    monkeypatch.setattr(vectors_module, "MAX_SEGMENT", 30)
    assert index.put_staged(index.stage_save()) is True and index.segments == 1


def test_a_mostly_dead_segment_is_purged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = sealed_index(tmp_path, monkeypatch, segments=1)
    index.delete(ids(5))
    index.save()
    assert index.stage_save() is None  # half dead is not mostly dead
    index.delete(["m-00005"])
    index.save()
    index.save()
    assert meta_of(tmp_path)["dead"] is None  # still only in the log: no checkpoint since
    assert index.put_staged(index.stage_save()) is True
    meta = meta_of(tmp_path)
    assert [s["count"] for s in meta["segments"]] == [4] and meta["dead"] is None
    assert index.ids() == ids(4, start=6) and index.tags(index.ids()) == tags(4, start=6)
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert_same_answers(index, reopened)
    assert names(tmp_path) == named_by_meta(tmp_path)


def test_a_position_that_dies_between_stage_and_put_is_dead_in_the_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = sealed_index(tmp_path, monkeypatch, segments=3)
    monkeypatch.setattr(vectors_module, "FANIN", 3)
    staged = index.stage_save()
    assert staged is not None
    index.delete(["m-00004"])
    index.add(["m-00017"], -random_vectors(1, seed=9), [tag(1700)])  # an upsert kills its old position
    assert index.put_staged(staged) is True
    meta = meta_of(tmp_path)
    merged = meta["segments"][0]["number"]
    dead = read_dead(tmp_path / f"dead-{meta['dead']:06d}.bin")
    assert list(dead) == [merged] and len(dead[merged]) == 2
    for opened in (index, VectorIndex.open(tmp_path, IDENTITY)):
        assert "m-00004" not in opened and opened.tags(["m-00017"]) == [tag(1700)] and len(opened) == 29
        assert opened.search(-random_vectors(1, seed=9)[0], 1)[0][0] == "m-00017"
        assert "m-00004" not in [id_ for id_, _ in opened.search(random_vectors(10)[4], 30)]
    assert_same_answers(index, VectorIndex.open(tmp_path, IDENTITY))


def test_a_staged_merge_whose_sources_were_replaced_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = sealed_index(tmp_path, monkeypatch, segments=3)
    monkeypatch.setattr(vectors_module, "FANIN", 3)
    first, second, third = index.stage_save(), index.stage_save(), index.stage_save()  # the same sources
    assert first is not None and second is not None and first.merged.number != second.merged.number
    assert VectorIndex.open(tmp_path, IDENTITY).put_staged(third) is False  # a reload's segments differ
    assert f"{third.merged.name}.hnsw" not in names(tmp_path)
    assert f"{second.merged.name}.hnsw" in names(tmp_path)
    index.add(["late"], random_vectors(1, seed=3))
    assert index.put_staged(first) is True
    assert index.put_staged(second) is False  # its sources are gone
    assert names(tmp_path) == named_by_meta(tmp_path)  # and so are its files
    assert f"{second.merged.name}.hnsw" not in names(tmp_path)
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert "late" in reopened and len(reopened) == 31  # the rest was saved all the same


def test_searches_and_adds_go_on_while_a_merge_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """stage_save builds and writes the merged segment without the index's lock: a search and an
    add made while it is paused in the middle complete (they would wait forever otherwise)."""
    index = sealed_index(tmp_path, monkeypatch, segments=3)
    monkeypatch.setattr(vectors_module, "FANIN", 3)
    paused, resume = threading.Event(), threading.Event()
    real_write = vectors_module._write_segment

    def pausing_write(folder, segment):
        paused.set()
        assert resume.wait(60)
        return real_write(folder, segment)

    monkeypatch.setattr(vectors_module, "_write_segment", pausing_write)
    staged: list = []
    stager = threading.Thread(target=lambda: staged.append(index.stage_save()))
    stager.start()
    try:
        assert paused.wait(60), "the merge never reached its writing"
        done, found = threading.Event(), []

        def search_and_add() -> None:
            found.extend(index.search(random_vectors(10, seed=1)[7], 1))
            index.add(["during"], random_vectors(1, seed=9))
            index.delete(["m-00012"])
            found.append(("during" in index, len(index)))
            done.set()

        threading.Thread(target=search_and_add, daemon=True).start()
        assert done.wait(60), "a search or a write waited for the merge"
        assert found == [("m-00017", pytest.approx(1.0, abs=1e-5)), (True, 30)]
    finally:
        resume.set()
        stager.join(60)
    monkeypatch.setattr(vectors_module, "_write_segment", real_write)
    assert staged[0] is not None and index.put_staged(staged[0]) is True
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert "during" in reopened and "m-00012" not in reopened and index.segments == 2
    assert_same_answers(index, reopened)


def test_a_checkpoint_that_fails_after_the_merge_rename_keeps_the_merged_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = sealed_index(tmp_path, monkeypatch, segments=3)
    monkeypatch.setattr(vectors_module, "FANIN", 3)
    staged = index.stage_save()
    with monkeypatch.context() as patch:
        patch.setattr(fsio, "fsync_dir", failing(fsio.fsync_dir))
        with pytest.raises(OSError, match="injected"):
            index.put_staged(staged)
    assert_same_answers(index, VectorIndex.open(tmp_path, IDENTITY))
    assert index.segments == 1


# -- sharing with another generation, real embeddings -------------------------------------------


def test_a_log_linked_into_another_folder_is_unshared_before_an_append(tmp_path: Path) -> None:
    """A compaction hard-links a generation's files into the next (DerivedIndex.link_components_into):
    an append to the log must not show up in the other folder's copy."""
    folder, other = tmp_path / "a", tmp_path / "b"
    index = saved_index(folder, n=10)
    other.mkdir()
    for path in folder.iterdir():
        os.link(path, other / path.name)
    log = f"log-{meta_of(folder)['log']:06d}.bin"
    shared = (other / log).read_bytes()
    assert (folder / log).stat().st_nlink == 2

    index.add(["only-in-a"], random_vectors(1, seed=3))
    index.delete(["m-00001"])
    index.save()
    assert (other / log).read_bytes() == shared and (folder / log).stat().st_nlink == 1
    assert (other / log).stat().st_nlink == 1
    assert VectorIndex.open(other, IDENTITY).ids() == ids(10)
    assert "only-in-a" in VectorIndex.open(folder, IDENTITY) and "m-00001" not in VectorIndex.open(folder, IDENTITY)
    assert names(folder) == named_by_meta(folder)

    linked = VectorIndex.open(other, IDENTITY)  # the other side appends to its own copy too
    linked.add(["only-in-b"], random_vectors(1, seed=4))
    linked.save()
    assert "only-in-b" not in VectorIndex.open(folder, IDENTITY) and "only-in-b" in VectorIndex.open(other, IDENTITY)


def test_with_real_builtin_embeddings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small(monkeypatch, seal_at=2, fanin=2)
    provider = make_provider("builtin", "", 256, None)
    texts = {
        "m-blue": "Morgan chose blue as the deployment color.",
        "m-standup": "Standup moved to 10:00 on Mondays.",
        "m-coffee": "The office coffee machine is broken again.",
        "m-train": "The train to Utrecht leaves from platform 5.",
        "m-dentist": "The dentist appointment is on Thursday at 9.",
    }
    keys = list(texts)
    index = VectorIndex.create(tmp_path, provider.identity)
    index.save()
    for start in range(0, 5, 2):  # sealed, sealed, then one in the log
        index.add(keys[start : start + 2], provider.embed([texts[k] for k in keys[start : start + 2]]))
        index.put_staged(index.stage_save())
    reopened = VectorIndex.open(tmp_path, provider.identity)
    assert reopened.search(provider.embed_query("which deployment color did Morgan pick?"), 1)[0][0] == "m-blue"
    assert reopened.search(provider.embed_query("when is the dentist?"), 1)[0][0] == "m-dentist"
    assert reopened.ids() == sorted(keys) and read_identity(tmp_path) == provider.identity


def test_a_record_crc_covers_the_key_and_the_vector(tmp_path: Path) -> None:
    """The log's own check: its records are what this test decodes them to be."""
    saved_index(tmp_path, n=2)
    data = (tmp_path / f"log-{meta_of(tmp_path)['log']:06d}.bin").read_bytes()
    first = data[LOG_HEAD : LOG_HEAD + add_bytes("m-00000")]
    assert int.from_bytes(first[:4], "little") == zlib.crc32(first[4:])
    assert first[4] == 1 and first[7 : 7 + TAG_BYTES].decode() == tag(0)
    assert first[7 + TAG_BYTES : 7 + TAG_BYTES + 7] == b"m-00000"


def test_a_build_of_under_half_a_segment_is_one_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small vaults (the retrieval benchmark's) build one graph, as before segments: the second
    open segment of a rebuild starts only once the first is half full."""
    small(monkeypatch, max_segment=100)
    index = VectorIndex.create(tmp_path, IDENTITY, building=True)
    matrix = random_vectors(49, seed=1)
    for start in range(0, 49, 7):
        index.add(ids(49)[start : start + 7], matrix[start : start + 7])
    index.save()
    assert [s["count"] for s in meta_of(tmp_path)["segments"]] == [49]
