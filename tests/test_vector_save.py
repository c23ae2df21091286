"""Saving the serving vectors beside writers (SemanticService.save_serving): a save's slow half,
a merge of sealed segments (tens of megabytes at scale), is built and written without the vault
lock (`stage_save`); under it the merge is only put in place with the rest of the save
(`put_staged`). A commit, another save or a reload that comes between never leaves the files
holding less than memory does, nor a staged merge's files behind.

SEAL_AT = 1 and FANIN = 2 here: every save seals what it saves, and from the third save on a merge
is due (a journal's memories are each other's neighbours, so each new one also re-embeds the others
and leaves dead positions behind)."""

import json
import threading

import pytest

from memvault import MemoryStore
from memvault.indexer.maintenance import semantic_queue
from memvault.indexer.maintenance.semantic import SemanticIndex
from memvault.indexer.search import vectors as vectors_module
from memvault.indexer.search.vectors import META_FILE, VectorIndex
from memvault.vault.errors import VaultLocked
from memvault.vault.locks import VaultLock
from tests.engine_helpers import wait_for
from tests.intake_helpers import make_vault

pytestmark = pytest.mark.one_engine("the local engine's vector files (hnswlib segments) saved beside writers")

TEXTS = [
    "The heron chose the north pond.",
    "The otter slept under the old mill wheel.",
    "The kingfisher nested in the clay bank.",
    "The beaver dammed the east stream in March.",
]


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(vectors_module, "SEAL_AT", 1)
    monkeypatch.setattr(vectors_module, "FANIN", 2)
    monkeypatch.setattr(semantic_queue, "SAVE_AFTER_SECONDS", 3600.0)  # saves here are the tests' own
    root = make_vault(tmp_path, mode="journal")
    with MemoryStore.open(root, engine=False) as opened:
        yield opened


def committed_unsaved(store, text: str) -> None:
    """Remember `text` and wait for the vector queue to commit its vector in memory, unsaved."""
    held = len(serving(store).passages)
    store.remember(text)
    wait_for(
        lambda: len(serving(store).passages) > held and store._semantic._unsaved,
        what="the vector queue to commit the memory's vector",
    )


def serving(store) -> SemanticIndex:
    return store._semantic._lanes[0].serving


def on_disk(store) -> SemanticIndex:
    index = serving(store)
    return SemanticIndex.open(index.folder.parent, index.identity, index.folder.name)


def segments_on_disk(store) -> list[int]:
    return [s["count"] for s in json.loads((serving(store).folder / META_FILE).read_text())["segments"]]


def leftovers(store) -> list[str]:
    """Files in the vectors' folder the meta does not name (temp files, a staged merge's)."""
    folder = serving(store).folder
    meta = json.loads((folder / META_FILE).read_text())
    named = {META_FILE, f"log-{meta['log']:06d}.bin"}
    named |= {f"seg-{s['number']:06d}.{ext}" for s in meta["segments"] for ext in ("hnsw", "keys")}
    if meta["dead"] is not None:
        named.add(f"dead-{meta['dead']:06d}.bin")
    return sorted(path.name for path in folder.iterdir() if path.name not in named)


def two_sealed(store) -> None:
    """Two memories saved one at a time: sealed segments, a merge due at the next save."""
    for text in TEXTS[:2]:
        committed_unsaved(store, text)
        store._semantic.save_serving()
    assert len(segments_on_disk(store)) == 2


def vault_lock_free(root, wait: float) -> bool:
    """Whether another thread can take the vault lock within `wait` seconds (it is let go at once)."""
    taken = []

    def take():
        try:
            with VaultLock(root, timeout=wait):
                taken.append(True)
        except VaultLocked:
            taken.append(False)

    thread = threading.Thread(target=take)
    thread.start()
    thread.join(30)
    return taken == [True]


def test_a_merge_is_written_without_the_vault_lock_and_put_in_place_under_it(store, monkeypatch):
    """A merge writes tens of megabytes at scale: every writer would wait for it under the vault
    lock. Only putting it in place (and appending, or sealing, the rest) is under it."""
    two_sealed(store)
    committed_unsaved(store, TEXTS[2])
    root = store.layout.root
    seen: dict = {}
    stage, put, write = VectorIndex.stage_save, VectorIndex.put_staged, vectors_module._write_segment

    def staging(index):
        seen["staging"] = True
        try:
            return stage(index)
        finally:
            seen["staging"] = False

    def writing(folder, segment):
        if seen.get("staging"):
            seen.setdefault("writing", vault_lock_free(root, 10.0))
        return write(folder, segment)

    def putting(index, staged):
        seen.setdefault("putting", vault_lock_free(root, 0.2))  # held: any wait ends in a timeout
        seen.setdefault("merged", staged is not None and len(staged.sources))
        return put(index, staged)

    monkeypatch.setattr(VectorIndex, "stage_save", staging)
    monkeypatch.setattr(vectors_module, "_write_segment", writing)
    monkeypatch.setattr(VectorIndex, "put_staged", putting)
    store._semantic.save_serving()
    assert (seen["writing"], seen["putting"]) == (True, False) and seen["merged"] >= 1
    assert not store._semantic._unsaved and leftovers(store) == []
    assert on_disk(store).passages == serving(store).passages and len(serving(store).passages) == 3


def test_a_save_leaves_the_vectors_on_disk_equal_to_memory(store):
    for n, text in enumerate(TEXTS):
        committed_unsaved(store, text)
        store._semantic.save_serving()
        assert on_disk(store).passages == serving(store).passages and len(serving(store).passages) == n + 1
        assert leftovers(store) == []
    store.remember("The heron came back to the north pond in spring.")  # stays in memory until saved
    wait_for(lambda: store._semantic._unsaved, what="the vector queue to commit the memory's vector")
    assert len(on_disk(store).passages) == len(TEXTS) < len(serving(store).passages)
    store._semantic.save_serving()
    assert on_disk(store).passages == serving(store).passages


def test_a_commit_between_the_staging_and_the_putting_is_saved_too(store, monkeypatch):
    two_sealed(store)
    committed_unsaved(store, TEXTS[2])
    stage = serving(store).stage_save
    landed = []

    def stage_then_commit():
        staged = stage()
        if not landed:  # another batch's vector lands after the merge was written
            landed.append(serving(store).version)
            committed_unsaved(store, TEXTS[3])
        return staged

    monkeypatch.setattr(serving(store), "stage_save", stage_then_commit)
    store._semantic.save_serving()
    assert serving(store).version > landed[0]
    assert on_disk(store).passages == serving(store).passages and len(serving(store).passages) == 4
    assert leftovers(store) == []


def test_a_save_between_the_staging_and_the_putting_is_not_undone(store):
    two_sealed(store)
    committed_unsaved(store, TEXTS[2])
    index = serving(store)
    staged = index.stage_save()
    assert staged.merge is not None
    committed_unsaved(store, TEXTS[3])
    with VaultLock(store.layout.root):
        index.save()  # another save (a catch-up) came first, with both vectors
        index.put_staged(staged)  # the merge goes in; nothing the save wrote is lost
    assert on_disk(store).passages == index.passages and len(index.passages) == 4
    assert leftovers(store) == []


def test_a_merge_staged_and_never_put_leaves_the_vectors_on_disk_as_they_were(store):
    """A process killed between the staging and the putting: the meta names the old files only."""
    two_sealed(store)
    before = on_disk(store).passages
    committed_unsaved(store, TEXTS[2])
    staged = serving(store).stage_save()
    assert staged.merge is not None and leftovers(store) == [
        f"{staged.merge.merged.name}.{e}" for e in ("hnsw", "keys")
    ]
    assert on_disk(store).passages == before and len(before) == 2
    staged.discard()
    assert leftovers(store) == []


def test_a_lane_reloaded_between_the_staging_and_the_putting_drops_the_staged_merge(store, monkeypatch):
    """Another process saved meanwhile and the lane was reloaded: the lane is saved whole, and the
    merge staged on the old copy is discarded (that discard raised TypeError: it wanted a folder)."""
    two_sealed(store)
    committed_unsaved(store, TEXTS[2])
    lane = store._semantic._lanes[0]
    stage = lane.serving.stage_save
    staged_files = []

    def stage_then_reload():
        staged = stage()
        staged_files.append(staged.merge.merged.name)
        lane.serving = on_disk(store)  # what reload_if_changed hands back after another process's save
        return staged

    monkeypatch.setattr(lane.serving, "stage_save", stage_then_reload)
    store._semantic.save_serving()
    assert staged_files and leftovers(store) == []
    assert on_disk(store).passages == serving(store).passages
