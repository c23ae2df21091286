"""A live process whose semantic queue overflows catches its vectors up itself (it does not wait
for a "next open" that, in the vault's owner, never comes), and recall says `degraded` until then."""

import json
import shutil
import threading
from datetime import date, timedelta

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.derived import DerivedIndex
from memvault.indexer.maintenance.health import check_health
from memvault.indexer.maintenance.semantic_queue import MAX_LAGGING_NOTES, MAX_QUEUE_ITEMS
from memvault.vault.locks import VaultLock
from tests.engine_helpers import OwnerProcess, memvault, wait_for
from tests.intake_helpers import make_vault

NOTES = 300  # more memories than the 256-item semantic queue holds
#: a big checkout: more notes than the semantic queue holds (it overflows), fewer than
#: MAX_LAGGING_NOTES (1,024: the catch-up reads only the notes that overflowed), as 1,000 did
CHECKOUT_NOTES = 400


def write_notes(root, count: int, start=date(2020, 1, 1), word="lantern") -> list[str]:
    names = []
    for n in range(count):
        day = start + timedelta(days=n)
        path = root / "daily" / f"{day.isoformat()}.md"
        path.write_text(f"- 09:00 Note {n} mentions the {word} number {n}.\n")
        names.append(f"daily/{day.isoformat()}.md")
    return names


def vector_findings(store) -> list:
    report = check_health(store.layout, store.config, strict=True)
    return [f.code for f in report.findings if f.check == "vector_rows"]


@pytest.mark.one_engine(
    "the semantic queue and its catch-up are the local engine's vector lane (on the server a row's vector"
    " is written in the row's own commit: nothing lags, nothing catches up)"
)
def test_overflow_in_a_live_store_is_caught_up_and_recall_says_degraded_until_then(tmp_path):
    root = make_vault(tmp_path, mode="journal")
    (root / "daily").mkdir(exist_ok=True)
    store = MemoryStore.open(root, engine=False)
    try:
        names = write_notes(root, NOTES)
        lock = VaultLock(root)
        with lock:  # the catch-up needs the vault lock: hold it so the lag is observable
            store.index_notes(names)
            assert store._semantic.waiting >= NOTES - 256
            result = store.recall("lantern number 7")
            assert result.degraded and "vectors are catching up" in result.degraded and "memories" in result.degraded
            assert result.hits  # BM25 still answers
        assert store._semantic.drain(120)  # the queue's thread catches up once the lock is free
        assert store._semantic.waiting == 0
        assert store.recall("lantern number 7").degraded is None
        assert vector_findings(store) == []
        for name in names:  # removing them overflows again: the catch-up drops the orphans
            (root / name).unlink()
        with lock:
            store.index_notes(names)
        assert store._semantic.drain(120)
        assert vector_findings(store) == []
    finally:
        store.close()


@pytest.mark.both_backends
@pytest.mark.slow
def test_a_big_checkout_under_a_running_watcher_ends_with_no_missing_and_no_orphaned_vectors(tmp_path):
    assert MAX_QUEUE_ITEMS < CHECKOUT_NOTES <= MAX_LAGGING_NOTES
    root = make_vault(tmp_path, mode="journal")
    assert memvault(root, "rebuild").returncode == 0
    owner = OwnerProcess(root, "watch").wait_serving()
    try:
        staging = tmp_path / "checkout"
        staging.mkdir()
        (staging / "daily").mkdir()
        write_notes(staging, CHECKOUT_NOTES)
        for path in sorted((staging / "daily").iterdir()):  # a `git checkout` landing 400 notes
            shutil.move(str(path), root / "daily" / path.name)

        def strict_clean():
            done = memvault(root, "health", "--strict", "--json")
            body = json.loads(done.stdout)
            return done.returncode == 0 and body["details"].get("rows") == CHECKOUT_NOTES

        wait_for(strict_clean, timeout=300, what="vectors to be complete after the checkout")
        for path in sorted((root / "daily").iterdir()):  # and back out
            path.unlink()
        wait_for(
            lambda: (
                memvault(root, "health", "--strict").returncode == 0
                and json.loads(memvault(root, "health", "--json").stdout)["details"].get("rows") == 0
            ),
            timeout=300,
            what="orphaned vectors to be removed",
        )
    finally:
        owner.stop()


def spy_embedding(monkeypatch, store, root) -> list[bool]:
    """Record, for every embedding the store's vector list makes, whether the vault lock was held."""
    provider = store._semantic._lanes[0].provider()
    real = provider.embed_sums
    held = []

    def embed_sums(texts):
        held.append(VaultLock(root).held_by_me)
        return real(texts)

    monkeypatch.setattr(provider, "embed_sums", embed_sums)
    return held


@pytest.mark.one_engine(
    "the semantic queue and its catch-up are the local engine's vector lane (on the server a row's vector"
    " is written in the row's own commit: nothing lags, nothing catches up)"
)
def test_a_live_catch_up_embeds_outside_the_vault_lock_and_reads_only_the_notes_that_overflowed(tmp_path, monkeypatch):
    """An owner's catch-up after an overflow used to embed, compare every row and save the whole
    vector index while it held the vault lock: every writer waited for it (0.1-0.8 s, several
    times a minute under eight agents)."""
    root = make_vault(tmp_path, mode="journal")
    (root / "daily").mkdir(exist_ok=True)
    store = MemoryStore.open(root, engine=False)
    try:
        store.index_notes(write_notes(root, 3, start=date(2019, 1, 1), word="harbour"))
        assert store._semantic.drain(120)
        held = spy_embedding(monkeypatch, store, root)
        monkeypatch.setattr(DerivedIndex, "all_rows", lambda self: pytest.fail("the catch-up read every row"))
        names = write_notes(root, NOTES)
        with VaultLock(root):
            store.index_notes(names)  # one delta of 300 memories: more than the queue holds
            assert store._semantic.waiting == NOTES
        assert store._semantic.drain(120)
        assert held and not any(held)
        assert store._semantic.waiting == 0
        monkeypatch.undo()
        assert vector_findings(store) == []
        assert store.recall("lantern number 7").degraded is None
    finally:
        store.close()


@pytest.mark.one_engine(
    "the semantic queue and its catch-up are the local engine's vector lane (on the server a row's vector"
    " is written in the row's own commit: nothing lags, nothing catches up)"
)
def test_a_catch_up_overtaken_while_it_embeds_is_done_again_under_the_lock(tmp_path, monkeypatch):
    """A rescan's catch-up (the watcher's thread) may commit vectors while the queue's catch-up
    embeds beside the writers, here after a person edited a note: the older plan is not
    committed over it but done again under the lock, and the vectors end complete."""
    from memvault.indexer.maintenance import semantic_service

    root = make_vault(tmp_path, mode="journal")
    (root / "daily").mkdir(exist_ok=True)
    store = MemoryStore.open(root, engine=False)
    try:
        names = write_notes(root, NOTES)
        provider = store._semantic._lanes[0].provider()
        real, rescans, verdicts = provider.embed_sums, [], []

        def embed_sums(texts):
            if not VaultLock(root).held_by_me and not rescans:  # the live catch-up, outside the lock
                (root / names[0]).write_text("- 09:00 Note 0 now mentions a beacon instead.\n")
                rescan = threading.Thread(target=lambda: rescans.append(store.sync()))
                rescan.start()
                rescan.join(120)
            return real(texts)

        def overtaken(plans):
            verdicts.append(real_overtaken(plans))
            return verdicts[-1]

        real_overtaken = semantic_service.overtaken
        monkeypatch.setattr(provider, "embed_sums", embed_sums)
        monkeypatch.setattr(semantic_service, "overtaken", overtaken)
        with VaultLock(root):
            store.index_notes(names)
        assert store._semantic.drain(120)
        assert rescans and names[0] in rescans[0].files
        assert verdicts[0] is True
        monkeypatch.undo()
        assert vector_findings(store) == []
        assert [hit.source.partition("#")[0] for hit in store.recall("beacon").hits][:1] == [names[0]]
    finally:
        store.close()


@pytest.mark.one_engine("it plans and commits the local engine's vector lane (hnswlib) itself")
def test_a_plan_is_overtaken_by_a_commit_a_swap_or_another_process_s_save(tmp_path):
    from memvault.indexer.maintenance import semantic_catch_up

    root = make_vault(tmp_path, mode="journal")
    (root / "daily").mkdir(exist_ok=True)
    store = MemoryStore.open(root, engine=False)
    try:
        names = write_notes(root, 3)
        store.index_notes(names)
        assert store._semantic.drain(120)
        lane = store._semantic._lanes[0]
        with VaultLock(root):
            index = store.writable_index()
            plans, failure = semantic_catch_up.plan([lane], store.layout, index, store.time_zone, paths=set(names))
            assert failure is None and len(plans) == 1 and not plans[0].changes  # nothing lags
            assert not semantic_catch_up.overtaken(plans)
            lane.serving.commit(semantic_catch_up.PreparedVectors(removed={"daily/none.md#m-0"}))
            assert semantic_catch_up.overtaken(plans)  # another commit since the plan
            plans, _ = semantic_catch_up.plan([lane], store.layout, index, store.time_zone, paths=set(names))
            serving, lane.serving = lane.serving, lane.serving.reload_if_changed()
            assert not semantic_catch_up.overtaken(plans)
            other = type(serving).open(serving.folder.parent, serving.identity, serving.folder.name)
            other.vectors.delete(other.vectors.ids()[:1])
            other.save()  # as another process saving a change to the same vectors would
            assert semantic_catch_up.overtaken(plans)
            lane.serving = other
            assert semantic_catch_up.overtaken(plans)  # a swapped generation is another object
    finally:
        store.close()
