"""The manifest's log (issue 43): a commit appends the states it changed instead of rewriting the
base, the base is folded in once the log is long, and a torn or damaged line costs only a re-read."""

from __future__ import annotations

import json

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance import generations
from memvault.indexer.maintenance.generations import MANIFEST, FileState, Manifest
from memvault.vault.errors import IndexUnavailable

pytestmark = pytest.mark.one_engine(
    "the local engine's manifest files (.index/gen-*/manifest*.json*); a server keeps file states in a table"
)


def state(n: int) -> FileState:
    return FileState(sha256=f"{n:064x}", size=n, mtime_ns=n * 1000, rows=n % 7, ctime_ns=n, inode=n)


def saved(tmp_path, count: int = 50) -> tuple[Manifest, object]:
    path = tmp_path / MANIFEST
    manifest = Manifest(schema=1, files={f"daily/{n:04d}.md": state(n) for n in range(count)})
    manifest.save(path)
    return manifest, path


def test_a_save_of_changed_paths_appends_and_a_load_replays_it(tmp_path):
    manifest, path = saved(tmp_path)
    base = path.read_bytes()
    manifest.files["daily/0003.md"] = state(1003)
    del manifest.files["daily/0004.md"]
    manifest.files["daily/new.md"] = state(7)
    manifest.save(path, ["daily/0003.md", "daily/0004.md", "daily/new.md"])
    assert path.read_bytes() == base  # the base is not rewritten
    log = manifest.log_path(path)
    lines = log.read_bytes().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["daily/0004.md"] is None
    assert Manifest.load(path) == manifest
    manifest.save(path, [])  # nothing changed: nothing written
    assert log.read_bytes().count(b"\n") == 1


def test_a_long_log_is_folded_into_a_new_base_and_the_old_log_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(generations, "_MIN_LOG_BYTES", 512)
    manifest, path = saved(tmp_path, 4)
    first_log = manifest.log_path(path)
    for n in range(40):
        manifest.files["daily/0001.md"] = state(2000 + n)
        manifest.save(path, ["daily/0001.md"])
    assert manifest.log > 1 and not first_log.exists()
    assert json.loads(path.read_bytes())["log"] == manifest.log
    assert Manifest.load(path) == manifest
    log = manifest.log_path(path)  # folded again and again, never long (none yet right after a fold)
    assert not log.exists() or log.stat().st_size <= 512 + 400


def test_a_torn_last_line_and_a_damaged_line_cost_only_their_states(tmp_path):
    manifest, path = saved(tmp_path)
    log = manifest.log_path(path)
    manifest.files["daily/0001.md"] = state(501)
    manifest.save(path, ["daily/0001.md"])
    with open(log, "ab") as handle:
        handle.write(b'{"daily/0002.md": {"sha256": 5}}\n')  # a malformed state: skipped
        handle.write(b"not json at all\n")  # garbage a crash left, then appended after: skipped
    manifest.files["daily/0005.md"] = state(505)
    manifest.save(path, ["daily/0005.md"])
    with open(log, "ab") as handle:
        handle.write(b'{"daily/0006.md": {"sha2')  # torn: no newline
    loaded = Manifest.load(path)
    assert loaded.files["daily/0001.md"] == state(501) and loaded.files["daily/0005.md"] == state(505)
    assert loaded.files["daily/0002.md"] == state(2) and loaded.files["daily/0006.md"] == state(6)


def test_a_damaged_base_still_says_rebuild(tmp_path):
    _, path = saved(tmp_path)
    path.write_bytes(b'{"format": 1, "log": -3, "schema": 1, "files": {}}')
    with pytest.raises(IndexUnavailable, match="memvault rebuild"):
        Manifest.load(path)


def test_a_remember_appends_to_the_manifest_log_and_another_process_sees_it(new_vault):
    """Each commit writes the log, not the base; a second store (as another process) reloads the
    manifest when the log grows, so it does not read the notes the first one indexed again."""
    with MemoryStore.open(new_vault) as store:
        store.remember("the heron fishes at dawn")
        generation = store.serving_index().generation
        base = (generation / MANIFEST).read_bytes()
        store.remember("the otter sleeps at noon")
        assert (generation / MANIFEST).read_bytes() == base
        written = store.serving_index().manifest
        assert Manifest.load(generation / MANIFEST).files == written.files
        with MemoryStore.open(new_vault, sync=False) as other:
            store.remember("the kingfisher dives at dusk")
            assert other.recall("kingfisher").hits[0].text == "the kingfisher dives at dusk"
            assert other.writable_index().manifest.files == store.serving_index().manifest.files
