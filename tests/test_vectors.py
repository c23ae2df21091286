"""The hnswlib vector index: real hnswlib, real files in tmp_path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memvault.indexer.search import vectors as vectors_module
from memvault.indexer.search.embeddings import EmbeddingIdentity, make_provider
from memvault.indexer.search.vectors import INDEX_FILE, META_FILE, VectorIndex, read_identity
from memvault.vault.errors import IndexUnavailable

DIM = 16
IDENTITY = EmbeddingIdentity("builtin", "test-model", DIM)


def random_vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    matrix = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def ids(n: int, prefix: str = "m") -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(n)]


def brute_force(store: dict[str, np.ndarray], query: np.ndarray) -> list[tuple[str, float]]:
    unit_query = query / np.linalg.norm(query)
    scored = [(id_, float(vector @ unit_query / np.linalg.norm(vector))) for id_, vector in store.items()]
    return sorted(scored, key=lambda hit: (-hit[1], hit[0]))


def saved_index(folder: Path, n: int = 50) -> VectorIndex:
    index = VectorIndex.create(folder, IDENTITY, capacity=16)
    index.add(ids(n), random_vectors(n))
    index.save()
    return index


def test_add_search_upsert_delete(tmp_path: Path) -> None:
    index = VectorIndex.create(tmp_path, IDENTITY)
    matrix = random_vectors(20)
    index.add(ids(20), matrix)
    assert len(index) == 20 and index.ids() == ids(20) and "m-00003" in index

    hits = index.search(matrix[3], 5)
    assert hits[0][0] == "m-00003" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [score for _id, score in hits] == sorted((score for _id, score in hits), reverse=True)

    index.add(["m-00003"], -matrix[3:4])  # upsert: the id now points the other way
    assert len(index) == 20
    assert index.search(matrix[3], 1)[0][0] != "m-00003"
    assert index.search(-matrix[3], 1) == [("m-00003", pytest.approx(1.0, abs=1e-5))]

    assert index.delete(["m-00003", "m-00004", "never-added"]) == 2
    assert len(index) == 18 and "m-00003" not in index
    everything = index.search(matrix[0], 1000)  # k above the count works
    assert len(everything) == 18
    assert {"m-00003", "m-00004"}.isdisjoint(id_ for id_, _score in everything)


def test_filter_and_small_k(tmp_path: Path) -> None:
    index = VectorIndex.create(tmp_path, IDENTITY)
    matrix = random_vectors(200)
    index.add(ids(200), matrix)
    even = index.search(matrix[7], 10, filter=lambda id_: int(id_[-1]) % 2 == 0)
    assert len(even) == 10 and all(int(id_[-1]) % 2 == 0 for id_, _score in even)
    rare = index.search(matrix[7], 10, filter=lambda id_: id_ in {"m-00001", "m-00150"})
    assert sorted(id_ for id_, _score in rare) == ["m-00001", "m-00150"]
    assert index.search(matrix[7], 10, filter=lambda id_: False) == []
    assert index.search(matrix[7], 0) == []
    assert VectorIndex.create(tmp_path / "empty", IDENTITY).search(matrix[0], 5) == []


def test_bad_inputs_are_refused(tmp_path: Path) -> None:
    index = VectorIndex.create(tmp_path, IDENTITY)
    with pytest.raises(ValueError):
        index.add(["a", "b"], random_vectors(1))
    with pytest.raises(ValueError):
        index.add(["a"], random_vectors(1, dim=DIM + 1))
    with pytest.raises(ValueError):
        index.add(["a", "a"], random_vectors(2))
    with pytest.raises(ValueError):
        index.add(["a"], np.full((1, DIM), np.nan, dtype=np.float32))
    with pytest.raises(ValueError):
        index.search(np.ones(DIM + 1, dtype=np.float32), 3)
    assert len(index) == 0


def test_grows_past_initial_capacity(tmp_path: Path) -> None:
    index = VectorIndex.create(tmp_path, IDENTITY, capacity=8)
    matrix = random_vectors(3000)
    for start in range(0, 3000, 7):
        index.add(ids(3000)[start : start + 7], matrix[start : start + 7])
    assert len(index) == 3000 and index.capacity >= 3000
    for probe in (0, 1234, 2999):
        assert index.search(matrix[probe], 1)[0][0] == ids(3000)[probe]


def test_upserts_reuse_deleted_slots_instead_of_growing(tmp_path: Path) -> None:
    index = VectorIndex.create(tmp_path, IDENTITY, capacity=100)
    index.add(ids(100), random_vectors(100))
    for round_ in range(5):
        index.add(ids(100), random_vectors(100, seed=round_ + 1))
    assert index.capacity == 100 and len(index) == 100
    latest = random_vectors(100, seed=5)
    assert index.search(latest[42], 1)[0][0] == "m-00042"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "delete"]), st.lists(st.integers(0, 30), min_size=1, max_size=8, unique=True)
        ),
        min_size=1,
        max_size=25,
    ),
    st.integers(0, 2**16),
)
def test_matches_a_brute_force_model(tmp_path: Path, operations: list, seed: int) -> None:
    """Whatever the sequence of upserts and deletes, search equals brute force over live ids."""
    index = VectorIndex.create(tmp_path, IDENTITY, capacity=4)
    model: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(seed)
    for action, keys in operations:
        names = [f"id-{key}" for key in keys]
        if action == "add":
            matrix = rng.standard_normal((len(names), DIM)).astype(np.float32)
            index.add(names, matrix)
            model.update(zip(names, matrix, strict=True))
        else:
            index.delete(names)
            for name in names:
                model.pop(name, None)
    assert index.ids() == sorted(model)
    query = rng.standard_normal(DIM).astype(np.float32)
    hits = index.search(query, 100)
    expected = brute_force(model, query)
    assert sorted(id_ for id_, _score in hits) == sorted(model)
    assert np.allclose([s for _i, s in hits], [s for _i, s in expected], atol=1e-5)


def test_save_open_round_trip(tmp_path: Path) -> None:
    index = saved_index(tmp_path)
    index.delete(["m-00010"])
    index.add(["m-00011", "extra"], random_vectors(2, seed=9))
    index.save()
    # no temp files left behind
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([INDEX_FILE, META_FILE])
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert reopened.ids() == index.ids()
    for query in random_vectors(10, seed=3):
        assert reopened.search(query, 7) == index.search(query, 7)
    meta = json.loads((tmp_path / META_FILE).read_text())
    assert (meta["format"], meta["provider"], meta["model"], meta["dim"]) == (1, "builtin", "test-model", DIM)
    assert meta["count"] >= len(meta["labels"]) == 50 and len(meta["checksum"]) == 64
    assert read_identity(tmp_path) == IDENTITY
    assert read_identity(tmp_path / "nowhere") is None

    reopened.add(["after-open"], random_vectors(1, seed=11))  # a reopened index keeps working
    reopened.save()
    assert "after-open" in VectorIndex.open(tmp_path, IDENTITY)


def test_empty_index_round_trip(tmp_path: Path) -> None:
    VectorIndex.create(tmp_path, IDENTITY).save()
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert len(reopened) == 0 and reopened.search(random_vectors(1)[0], 3) == []
    reopened.add(ids(3), random_vectors(3))  # a zero-capacity load must grow on demand
    assert len(reopened) == 3


def test_open_with_wrong_identity(tmp_path: Path) -> None:
    saved_index(tmp_path)
    wanted = EmbeddingIdentity("ollama", "nomic-embed-text:v1.5", DIM)
    with pytest.raises(IndexUnavailable) as caught:
        VectorIndex.open(tmp_path, wanted)
    assert (
        f"was built with builtin/test-model/{DIM} but config says ollama/nomic-embed-text:v1.5/{DIM}: "
        "run `memvault rebuild`" in str(caught.value)
    )
    with pytest.raises(IndexUnavailable, match="rebuild"):
        VectorIndex.open(tmp_path, EmbeddingIdentity("builtin", "test-model", DIM * 2))


def rewrite_meta(folder: Path, **changes: object) -> None:
    meta = json.loads((folder / META_FILE).read_text())
    meta.update(changes)
    (folder / META_FILE).write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "damage",
    [
        "meta missing",
        "meta not json",
        "meta not an object",
        "meta format",
        "meta labels",
        "meta count",
        "index missing",
        "index truncated",
        "index tiny",
        "index bit flip",
        "checksum",
        "meta dim forged",
    ],
)
def test_open_refuses_damaged_files(tmp_path: Path, damage: str) -> None:
    saved_index(tmp_path)
    meta_path, index_path = tmp_path / META_FILE, tmp_path / INDEX_FILE
    if damage == "meta missing":
        meta_path.unlink()
    elif damage == "meta not json":
        meta_path.write_bytes(meta_path.read_bytes()[:40])
    elif damage == "meta not an object":
        meta_path.write_text("[1, 2]")
    elif damage == "meta format":
        rewrite_meta(tmp_path, format=2)
    elif damage == "meta labels":
        rewrite_meta(tmp_path, labels={"a": "zero"})
    elif damage == "meta count":
        meta = json.loads(meta_path.read_text())
        rewrite_meta(tmp_path, count=meta["count"] + 1)
    elif damage == "index missing":
        index_path.unlink()
    elif damage == "index truncated":
        index_path.write_bytes(index_path.read_bytes()[:-100])
    elif damage == "index tiny":
        index_path.write_bytes(b"\x00" * 10)
    elif damage == "index bit flip":
        data = bytearray(index_path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        index_path.write_bytes(bytes(data))
    elif damage == "checksum":
        rewrite_meta(tmp_path, checksum="0" * 64)
    elif damage == "meta dim forged":  # a consistent-looking meta for another dim must not load silently
        other = EmbeddingIdentity("builtin", "test-model", DIM // 2)
        rewrite_meta(tmp_path, dim=DIM // 2)
        with pytest.raises(IndexUnavailable, match=f"{DIM // 2}-dim"):
            VectorIndex.open(tmp_path, other)
        return
    with pytest.raises(IndexUnavailable) as caught:
        VectorIndex.open(tmp_path, IDENTITY)
    assert "run `memvault rebuild`" in str(caught.value)
    assert str(tmp_path) in str(caught.value)


@pytest.mark.parametrize("failing_call", [1, 2])
def test_failed_rename_leaves_previous_save_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_call: int
) -> None:
    index = saved_index(tmp_path)
    before = VectorIndex.open(tmp_path, IDENTITY)
    probe = random_vectors(1, seed=99)[0]
    expected = before.search(probe, 10)

    index.add(ids(500, prefix="new"), random_vectors(500, seed=5))
    real_replace = os.replace
    calls = {"n": 0}

    def flaky_replace(src: object, dst: object) -> None:
        calls["n"] += 1
        if calls["n"] == failing_call:
            raise OSError("injected: disk full")
        real_replace(src, dst)

    monkeypatch.setattr(vectors_module.os, "replace", flaky_replace)
    with pytest.raises(OSError, match="injected"):
        index.save()
    monkeypatch.setattr(vectors_module.os, "replace", real_replace)

    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([INDEX_FILE, META_FILE])
    after = VectorIndex.open(tmp_path, IDENTITY)
    assert len(after) == 50 and after.search(probe, 10) == expected

    index.save()  # the next save succeeds and carries everything
    assert len(VectorIndex.open(tmp_path, IDENTITY)) == 550


def test_torn_save_is_detected(tmp_path: Path) -> None:
    """A crash between the two renames leaves a new index beside the old meta: refuse it."""
    saved_index(tmp_path)
    old_meta = (tmp_path / META_FILE).read_bytes()
    bigger = saved_index(tmp_path / "next", n=60)
    assert bigger is not None
    os.replace(tmp_path / "next" / INDEX_FILE, tmp_path / INDEX_FILE)
    assert (tmp_path / META_FILE).read_bytes() == old_meta
    with pytest.raises(IndexUnavailable, match="checksum"):
        VectorIndex.open(tmp_path, IDENTITY)


def test_readers_never_see_a_save_in_progress(tmp_path: Path) -> None:
    """Opening while another writer saves retries past the moment between its two renames."""
    import threading

    writer = saved_index(tmp_path, n=200)
    done = threading.Event()
    failures: list[str] = []

    def keep_saving() -> None:
        try:
            for round_ in range(25):
                writer.add(ids(20, prefix=f"r{round_}"), random_vectors(20, seed=round_))
                writer.save()
        finally:
            done.set()

    thread = threading.Thread(target=keep_saving)
    thread.start()
    opened = 0
    while not done.is_set():
        try:
            opened += len(VectorIndex.open(tmp_path, IDENTITY)) > 0
        except IndexUnavailable as exc:
            failures.append(str(exc))
    thread.join()
    assert failures == [] and opened > 0
    assert len(VectorIndex.open(tmp_path, IDENTITY)) == 200 + 25 * 20


def test_two_builds_from_the_same_inputs_are_identical(tmp_path: Path) -> None:
    def build(folder: Path) -> VectorIndex:
        index = VectorIndex.create(folder, IDENTITY, capacity=64)
        matrix = random_vectors(2000, seed=1)
        for start in range(0, 2000, 32):
            index.add(ids(2000)[start : start + 32], matrix[start : start + 32])
        index.delete(ids(2000)[::9])
        index.add(ids(2000)[:40], random_vectors(40, seed=2))
        index.save()
        return index

    first, second = build(tmp_path / "a"), build(tmp_path / "b")
    assert (tmp_path / "a" / INDEX_FILE).read_bytes() == (tmp_path / "b" / INDEX_FILE).read_bytes()
    assert (tmp_path / "a" / META_FILE).read_bytes() == (tmp_path / "b" / META_FILE).read_bytes()
    for query in random_vectors(25, seed=4):
        assert first.search(query, 10) == second.search(query, 10)


def test_with_real_builtin_embeddings(tmp_path: Path) -> None:
    provider = make_provider("builtin", "", 256, None)
    texts = {
        "m-blue": "Morgan chose blue as the deployment color.",
        "m-standup": "Standup moved to 10:00 on Mondays.",
        "m-coffee": "The office coffee machine is broken again.",
    }
    index = VectorIndex.create(tmp_path, provider.identity)
    index.add(list(texts), provider.embed(list(texts.values())))
    index.save()
    reopened = VectorIndex.open(tmp_path, provider.identity)
    assert reopened.search(provider.embed_query("which deployment color did Morgan pick?"), 1)[0][0] == "m-blue"


def test_a_search_and_a_write_go_on_while_a_save_writes_its_files(tmp_path: Path, monkeypatch) -> None:
    """Issue 26: an owner saves its vectors every few seconds; a search must not wait for the
    save's fsyncs, checksum and renames (only for the graph's snapshot), nor must a new vector.
    The save, paused at its first fsync, still puts a consistent pair of files in place."""
    import threading

    index = saved_index(tmp_path, n=40)
    paused, resume = threading.Event(), threading.Event()
    real_fsync = vectors_module.fsync_file

    def pausing_fsync(path):
        paused.set()
        resume.wait(60)
        real_fsync(path)

    monkeypatch.setattr(vectors_module, "fsync_file", pausing_fsync)
    saver = threading.Thread(target=index.save)
    saver.start()
    try:
        assert paused.wait(60), "the save never reached its fsync"
        done = threading.Event()
        found: list = []

        def search_and_add():
            found.extend(index.search(random_vectors(40)[7], 1))
            index.add(["late-1"], random_vectors(1, seed=9))
            done.set()

        threading.Thread(target=search_and_add, daemon=True).start()
        assert done.wait(30), "a search or a write waited for the save's files"
        assert found[0][0] == "m-00007"
    finally:
        resume.set()
        saver.join(60)
    reopened = VectorIndex.open(tmp_path, IDENTITY)
    assert len(reopened) == 40 and "late-1" not in reopened  # the snapshot before the write
    index.save()
    assert "late-1" in VectorIndex.open(tmp_path, IDENTITY)


def test_a_staged_save_another_save_overtook_is_not_put_over_it(tmp_path):
    """`stage_save` writes the files beside the index's own; `put_staged` renames them in, unless
    a save came between (its files hold more): then the staged ones are dropped."""
    index = VectorIndex.create(tmp_path, IDENTITY)
    index.add(ids(3), random_vectors(3))
    staged = index.stage_save()
    index.add(["later"], random_vectors(1))
    index.save()
    assert index.put_staged(staged) is False
    assert sorted(VectorIndex.open(tmp_path, IDENTITY).ids()) == sorted([*ids(3), "later"])
    again = index.stage_save()
    assert index.put_staged(again) is True
    assert not [path.name for path in tmp_path.iterdir() if path.name.endswith(".tmp")]
