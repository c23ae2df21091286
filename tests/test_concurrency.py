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
            store.remember(f"{name} wrote fact number {i}.", at=start + timedelta(minutes=7 * i))
            if i % 10 == 0:
                store.remember(f"shared fact {i}", at=start + timedelta(minutes=7 * i))
    """
)


@pytest.mark.slow
def test_two_processes_remembering_lose_nothing_and_duplicate_nothing(new_vault):
    count = 150  # 330 remembers racing for one vault: enough to interleave, without minutes of commits
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(new_vault), name, str(count)], env=env, stderr=subprocess.PIPE)
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
        assert store._readable_index().bm25.count() == len(expected), "every fact is indexed exactly once"
        assert store.recall("beta wrote fact number 149").hits[0].text == "beta wrote fact number 149."


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_failed_note_write_leaves_old_bytes_no_temp_and_no_index_row(new_vault, monkeypatch, failing):
    ams = ZoneInfo("Europe/Amsterdam")
    with MemoryStore.open(new_vault) as store:
        store.remember("first fact stays", at=datetime(2026, 11, 30, 9, 0, tzinfo=ams))
        note = new_vault / "daily/2026-11-30.md"
        before = note.read_bytes()
        real = getattr(os, failing)

        def broken(*args, **kwargs):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, failing, broken)
        with pytest.raises(OSError, match="No space left"):
            store.remember("second fact is lost cleanly", at=datetime(2026, 11, 30, 9, 5, tzinfo=ams))
        monkeypatch.setattr(os, failing, real)
        assert note.read_bytes() == before
        assert sorted(p.name for p in note.parent.iterdir()) == ["2026-11-30.md"]
        assert store.recall("cleanly").hits == ()
        # and the store keeps working afterwards
        assert store.remember("second fact is lost cleanly", at=datetime(2026, 11, 30, 9, 5, tzinfo=ams)).status == "added"
