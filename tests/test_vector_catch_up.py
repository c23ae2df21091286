"""A live process whose semantic queue overflows catches its vectors up itself (it does not wait
for a "next open" that, in the vault's owner, never comes), and recall says `degraded` until then."""

import json
import shutil
from datetime import date, timedelta

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.health import check_health
from memvault.vault.locks import VaultLock
from tests.engine_helpers import OwnerProcess, memvault, wait_for
from tests.intake_helpers import make_vault

NOTES = 300  # more memories than the 256-item semantic queue holds


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


@pytest.mark.slow
def test_a_big_checkout_under_a_running_watcher_ends_with_no_missing_and_no_orphaned_vectors(tmp_path):
    root = make_vault(tmp_path, mode="journal")
    assert memvault(root, "rebuild").returncode == 0
    owner = OwnerProcess(root, "watch").wait_serving()
    try:
        staging = tmp_path / "checkout"
        staging.mkdir()
        (staging / "daily").mkdir()
        write_notes(staging, 1000)
        for path in sorted((staging / "daily").iterdir()):  # a `git checkout` landing 1,000 notes
            shutil.move(str(path), root / "daily" / path.name)

        def strict_clean():
            done = memvault(root, "health", "--strict", "--json")
            body = json.loads(done.stdout)
            return done.returncode == 0 and body["details"].get("rows") == 1000

        wait_for(strict_clean, timeout=300, what="vectors to be complete after the checkout")
        for path in sorted((root / "daily").iterdir()):  # and back out
            path.unlink()
        wait_for(lambda: memvault(root, "health", "--strict").returncode == 0 and
                 json.loads(memvault(root, "health", "--json").stdout)["details"].get("rows") == 0,
                 timeout=300, what="orphaned vectors to be removed")
    finally:
        owner.stop()
