"""Real processes writing one vault at once, and failures injected mid-write."""

import os
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance import generations
from memvault.vault.note import parse

REPO = Path(__file__).resolve().parent.parent
WRITER = textwrap.dedent(
    """
    import sys
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo
    from memvault.indexer.engine.store import MemoryStore
    vault, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    start = datetime(2026, 11, 1, 8, 0, tzinfo=ZoneInfo("Europe/Amsterdam"))
    with MemoryStore.open(vault) as store:
        for i in range(count):
            # both writers also store the same shared facts: exactly one copy must survive
            store.remember(f"{name} wrote fact number {i}.", at=start + timedelta(minutes=13 * i))
            if i % 10 == 0:
                store.remember(f"shared fact {i}", at=start + timedelta(minutes=13 * i))
    """
)


@pytest.mark.both_backends
@pytest.mark.slow
def test_two_processes_remembering_lose_nothing_and_duplicate_nothing(new_vault):
    count = (
        80  # 176 remembers racing for one vault over two days' notes: enough to interleave, without minutes of commits
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(new_vault), name, str(count)], env=env, stderr=subprocess.PIPE
        )
        for name in ("alpha", "beta")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-2000:]
    texts = []
    for note in sorted((new_vault / "daily").glob("*.md")):
        texts += [b.text for b in parse(note.read_text()).bullets]
    expected = {f"{n} wrote fact number {i}." for n in ("alpha", "beta") for i in range(count)}
    expected |= {f"shared fact {i}" for i in range(0, count, 10)}
    assert len(texts) == len(set(texts)), "no fact is written twice"
    assert set(texts) == expected, "no fact is lost"
    with MemoryStore.open(new_vault) as store:
        assert store.serving_index().bm25.count() == len(expected), "every fact is indexed exactly once"
        assert store.recall("beta wrote fact number 79").hits[0].text == "beta wrote fact number 79."


@pytest.mark.both_backends
def test_a_failing_note_fsync_leaves_old_bytes_no_temp_and_no_index_row(new_vault, monkeypatch):
    ams = ZoneInfo("Europe/Amsterdam")
    with MemoryStore.open(new_vault) as store:
        store.remember("first fact stays", at=datetime(2026, 11, 30, 9, 0, tzinfo=ams))
        note = new_vault / "daily/2026-11-30.md"
        before = note.read_bytes()
        real = os.fsync

        def broken(*args, **kwargs):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fsync", broken)
        with pytest.raises(OSError, match="No space left"):
            store.remember("second fact is lost cleanly", at=datetime(2026, 11, 30, 9, 5, tzinfo=ams))
        monkeypatch.setattr(os, "fsync", real)
        assert note.read_bytes() == before  # the appended line was taken back: it never became durable
        assert sorted(p.name for p in note.parent.iterdir()) == ["2026-11-30.md"]
        assert store.recall("cleanly").hits == ()
        # and the store keeps working afterwards
        assert (
            store.remember("second fact is lost cleanly", at=datetime(2026, 11, 30, 9, 5, tzinfo=ams)).status == "added"
        )


@pytest.mark.one_engine(
    "the local engine's own index save fails here (its manifest, written with os.replace after the note is "
    "durable); the server's index commits in a transaction and writes no file, so a failing os.replace "
    "does not reach it (run there, the remember indexes at once and no lag is reported)"
)
def test_a_failing_index_save_after_the_note_is_durable_keeps_the_memory_and_says_so(new_vault, monkeypatch):
    """The note is the commit point: once it holds the line durably, the remember stands even if
    the index's manifest cannot be saved (os.replace, which only derived files use, fails): the
    store knows the index may lag, the next read commits what it can, and the memory is found,
    once, then and after a reopen."""
    ams = ZoneInfo("Europe/Amsterdam")
    with MemoryStore.open(new_vault) as store:
        real, real_append = os.replace, generations.append_durable

        def broken(*args, **kwargs):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "replace", broken)
        monkeypatch.setattr(generations, "append_durable", broken)  # the manifest's log (issue 43)
        receipt = store.remember("the pelican nests on pier nine", at=datetime(2026, 11, 30, 9, 5, tzinfo=ams))
        assert receipt.status == "added"
        assert (new_vault / "daily/2026-11-30.md").read_text().count("the pelican nests on pier nine") == 1
        assert "not indexed yet (No space left on device)" in store._deferred.problem
        found = store.recall("pelican pier")
        assert found.hits and found.hits[0].id == receipt.id and not found.degraded
        monkeypatch.setattr(os, "replace", real)
        monkeypatch.setattr(generations, "append_durable", real_append)
        again = store.remember("the pelican nests on pier nine", at=datetime(2026, 11, 30, 9, 5, tzinfo=ams))
        assert (again.status, again.id) == ("duplicate", receipt.id)
    with MemoryStore.open(new_vault) as store:  # the manifest on disk was stale: the open re-reads the note
        assert [h.id for h in store.recall("pelican pier").hits] == [receipt.id]
        assert store.health_report(strict=True)["healthy"]
