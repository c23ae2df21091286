"""Saving the serving vectors beside writers (SemanticService.save_serving): the files are written
without the vault lock and only renamed under it; a commit or another save that comes between
has the lane saved whole, so the files always end up holding what memory holds."""

import threading

import pytest

from memvault import MemoryStore
from memvault.indexer.maintenance.semantic import SemanticIndex
from memvault.indexer.search import vectors as vectors_module
from memvault.vault.errors import VaultLocked
from memvault.vault.locks import VaultLock
from tests.engine_helpers import wait_for
from tests.intake_helpers import make_vault

pytestmark = pytest.mark.one_engine("the local engine's vector lane files (hnswlib) saved beside writers")


@pytest.fixture
def store(tmp_path):
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


def leftovers(store) -> list[str]:
    return sorted(path.name for path in serving(store).folder.iterdir() if path.name.endswith(".tmp"))


def test_the_files_are_written_without_the_vault_lock_and_renamed_under_it(store, monkeypatch):
    """A save writes tens of megabytes (100-300 ms for a day's vectors): every writer waited
    for it under the vault lock. Now only the renames are under it."""
    committed_unsaved(store, "The heron chose the north pond.")
    root = store.layout.root
    seen = {}
    checksum, put = vectors_module._sha256_of, vectors_module.StagedSave.put
    monkeypatch.setattr(
        vectors_module,
        "_sha256_of",
        lambda path: seen.setdefault("writing", vault_lock_free(root, 10.0)) and checksum(path),
    )
    monkeypatch.setattr(
        vectors_module.StagedSave,
        "put",  # held: any wait ends in a timeout
        lambda staged: seen.setdefault("renaming", vault_lock_free(root, 0.2)) or put(staged),
    )
    store._semantic.save_serving()
    assert seen == {"writing": True, "renaming": False}
    assert not store._semantic._unsaved and leftovers(store) == []
    assert on_disk(store).passages == serving(store).passages != {}


def test_a_commit_between_the_writing_and_the_renames_has_the_lane_saved_whole(store, monkeypatch):
    committed_unsaved(store, "The heron chose the north pond.")
    stage = serving(store).stage_save
    landed = []

    def stage_then_commit():
        staged = stage()
        if not landed:  # another batch's vector lands after the files were written
            landed.append(serving(store).version)
            committed_unsaved(store, "The otter slept under the old mill wheel.")
        return staged

    monkeypatch.setattr(serving(store), "stage_save", stage_then_commit)
    store._semantic.save_serving()
    assert serving(store).version > landed[0]
    assert on_disk(store).passages == serving(store).passages and len(serving(store).passages) == 2
    assert leftovers(store) == []


def test_a_save_between_the_writing_and_the_renames_is_not_undone(store):
    committed_unsaved(store, "The heron chose the north pond.")
    index = serving(store)
    staged = index.stage_save()
    committed_unsaved(store, "The otter slept under the old mill wheel.")
    with VaultLock(store.layout.root):
        index.save()  # another save (a catch-up) came first, with both vectors
        index.put_staged(staged)  # the older files are not put over it
    assert on_disk(store).passages == index.passages and len(index.passages) == 2
    assert leftovers(store) == []


def test_a_save_staged_and_never_put_leaves_the_vectors_on_disk_as_they_were(store):
    """A process killed between the writing and the renames: the old pair is intact."""
    committed_unsaved(store, "The heron chose the north pond.")
    store._semantic.save_serving()
    before = on_disk(store).passages
    committed_unsaved(store, "The otter slept under the old mill wheel.")
    staged = serving(store).stage_save()
    assert on_disk(store).passages == before and len(before) == 1
    staged.discard()
    assert leftovers(store) == []
