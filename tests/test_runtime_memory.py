"""RuntimeMemory on real files: the normal path, capacity, hand edits, stale projections, threads."""

import json
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memvault.vault.config import load_config
from memvault.vault.errors import Conflict, CredentialRefused, InvalidRecord, UnsafePath
from memvault.vault.runtime import CapacityExceeded, Overflow, RuntimeMemory
from memvault.vault.runtime.commit import COMMITTED, TEMPS_WRITTEN, renamed
from memvault.vault.runtime.entries import Keyed
from memvault.vault.runtime.mutations import AmbiguousMatch, NoMatch
from memvault.vault.runtime.projection import render_projection


class Clock:
    def __init__(self):
        self.now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def __call__(self):
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture
def runtime(tmp_path):
    return RuntimeMemory(tmp_path / "v", user_limit=256, memory_limit=512, clock=Clock())


def files(root: Path) -> dict[str, bytes]:
    folder = root / "runtime"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def contents(runtime, target):
    return [e.content for e in runtime.load().state.of(target)]


def test_add_writes_state_and_both_projections(runtime):
    receipt = runtime.add("USER", "Prefers  metric units.", importance=4)
    assert (receipt.status, receipt.revision, receipt.entries, receipt.used_bytes) == ("added", 1, 1, 21)
    on_disk = files(runtime.root)
    assert set(on_disk) == {"memories.json", "USER.md", "MEMORY.md"}
    assert b"- Prefers metric units.\n" in on_disk["USER.md"]
    state = json.loads(on_disk["memories.json"])
    assert state["revision"] == 1 and state["entries"][0]["importance"] == 4
    assert runtime.load().files == {"USER": "current", "MEMORY": "current"}


def test_add_is_idempotent_and_other_target_files_are_not_rewritten(runtime):
    runtime.add("USER", "Prefers metric units.")
    user_before = (runtime.root / "runtime/USER.md").read_bytes()
    assert runtime.add("USER", "Prefers metric units.").status == "duplicate"
    runtime.add("MEMORY", "Deploys on Tuesdays.")
    assert (runtime.root / "runtime/USER.md").read_bytes() == user_before  # no churn for git
    assert runtime.load().revision == 2


def test_replace_and_remove_match_exact_then_unique_substring(runtime):
    runtime.add("MEMORY", "Deploys on Tuesdays.")
    runtime.add("MEMORY", "Deploys on Tuesdays. Freeze on Fridays.")
    assert runtime.replace("MEMORY", "Deploys on Tuesdays.", "Deploys on Wednesdays.").status == "replaced"
    assert contents(runtime, "MEMORY") == ["Deploys on Wednesdays.", "Deploys on Tuesdays. Freeze on Fridays."]
    with pytest.raises(AmbiguousMatch):
        runtime.remove("MEMORY", "Deploys")
    with pytest.raises(NoMatch):
        runtime.remove("USER", "Deploys")  # matching stays within the requested target
    assert runtime.remove("MEMORY", "Freeze").status == "removed"
    assert contents(runtime, "MEMORY") == ["Deploys on Wednesdays."]


def test_failed_validation_writes_nothing(runtime):
    runtime.add("MEMORY", "one")
    before = files(runtime.root)
    for call in (
        lambda: runtime.remove("MEMORY", "missing"),
        lambda: runtime.add("MEMORY", ""),
        lambda: runtime.add("MEMORY", "token = ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
        lambda: runtime.replace("MEMORY", "one", "x" * 600),
    ):
        with pytest.raises((InvalidRecord, CredentialRefused, CapacityExceeded)):
            call()
    assert files(runtime.root) == before


def test_over_budget_write_raises_with_the_snapshot_and_changes_nothing(runtime):
    runtime.add("USER", "a" * 200)
    before = files(runtime.root)
    with pytest.raises(CapacityExceeded) as caught:
        runtime.add("USER", "b" * 60)
    overflow = caught.value.overflow
    assert isinstance(overflow, Overflow)
    assert (overflow.state.revision, overflow.limit, overflow.needed) == (1, 256, 261)
    assert files(runtime.root) == before


def test_shrinking_writes_are_allowed_even_over_a_lowered_limit(tmp_path):
    big = RuntimeMemory(tmp_path / "v", user_limit=4096)
    big.add("USER", "a" * 300)
    big.add("USER", "b" * 100)
    small = RuntimeMemory(tmp_path / "v", user_limit=256)
    assert small.replace("USER", "a" * 300, "a" * 270).status == "replaced"  # smaller, still over
    assert small.remove("USER", "b" * 100).status == "removed"
    with pytest.raises(CapacityExceeded):
        small.replace("USER", "a" * 270, "a" * 271)  # grows while over the limit


def test_limits_come_from_the_vault_config(new_vault):
    (new_vault / "memvault.json").write_text(
        json.dumps({"memory": {"mode": "lite", "runtime": {"userLimit": 300, "memoryLimit": 700}}})
    )
    runtime = RuntimeMemory.for_vault(new_vault, load_config(new_vault, {}))
    assert runtime.limits == {"USER": 300, "MEMORY": 700}


# --- hand edits ------------------------------------------------------------------------------


def test_a_hand_edit_is_adopted_on_the_next_write_keeping_known_metadata(runtime):
    runtime.add("USER", "Prefers metric units.", importance=5)
    runtime.add("USER", "Lives in Utrecht.")
    path = runtime.root / "runtime/USER.md"
    path.write_text("# My profile\n\n- Prefers metric units.\n- Speaks Dutch.\n")
    assert runtime.load().files["USER"] == "edited"
    receipt = runtime.add("MEMORY", "Deploys on Tuesdays.")
    assert receipt.adopted == ("USER",)
    state = runtime.load().state
    assert [(e.content, e.importance) for e in state.of("USER")] == [("Prefers metric units.", 5), ("Speaks Dutch.", 3)]
    assert runtime.load().files == {"USER": "current", "MEMORY": "current"}
    assert b"- Speaks Dutch.\n" in path.read_bytes() and path.read_bytes().startswith(b"<!-- memvault:runtime")


def test_an_unadoptable_hand_edit_is_refused_and_never_overwritten(runtime):
    runtime.add("USER", "Prefers metric units.")
    path = runtime.root / "runtime/USER.md"
    edited = b"- Prefers metric units.\nSome prose that is not an entry.\n"
    path.write_bytes(edited)
    state_before = (runtime.root / "runtime/memories.json").read_bytes()
    with pytest.raises(InvalidRecord, match="edited by hand") as caught:
        runtime.add("MEMORY", "anything")
    assert "line 2" in str(caught.value) and "delete runtime/USER.md" in str(caught.value)
    assert path.read_bytes() == edited
    assert (runtime.root / "runtime/memories.json").read_bytes() == state_before
    path.unlink()  # the documented way out: memvault restores the projection from memories.json
    assert runtime.add("MEMORY", "anything").status == "added"
    assert contents(runtime, "USER") == ["Prefers metric units."]


def test_a_huge_hand_edit_is_refused_without_reading_it_whole(runtime):
    runtime.add("USER", "x")
    (runtime.root / "runtime/USER.md").write_bytes(b"- y\n" * 100_000)
    with pytest.raises(InvalidRecord, match="far larger"):
        runtime.add("USER", "z")


def test_projections_written_for_an_uncommitted_revision_are_restored(runtime):
    runtime.add("USER", "committed")
    committed = (runtime.root / "runtime/USER.md").read_bytes()
    leftover = render_projection("USER", [], 2)  # what a crash before the marker rename leaves
    (runtime.root / "runtime/USER.md").write_bytes(leftover)
    assert runtime.load().files["USER"] == "stale"
    assert runtime.load().state.of("USER")[0].content == "committed"  # memories.json rules
    runtime.reconcile()
    assert (runtime.root / "runtime/USER.md").read_bytes() == committed


def test_a_deleted_projection_is_restored_byte_identically(runtime):
    runtime.add("MEMORY", "keep me")
    original = (runtime.root / "runtime/MEMORY.md").read_bytes()
    (runtime.root / "runtime/MEMORY.md").unlink()
    assert runtime.load().files["MEMORY"] == "missing"
    runtime.reconcile()
    assert (runtime.root / "runtime/MEMORY.md").read_bytes() == original


def test_a_vault_without_memories_json_adopts_hand_written_projections(tmp_path):
    root = tmp_path / "v"
    (root / "runtime").mkdir(parents=True)
    (root / "runtime/USER.md").write_text("- Written by a person.\n")
    runtime = RuntimeMemory(root)
    runtime.reconcile()
    assert contents(runtime, "USER") == ["Written by a person."]


def test_corrupt_memories_json_is_refused_and_left_alone(runtime):
    runtime.add("USER", "x")
    (runtime.root / "runtime/memories.json").write_bytes(b'{"format": "memvault-runtime-v1", "revision": "one"}')
    with pytest.raises(InvalidRecord, match="memories.json is not a valid runtime state"):
        runtime.add("USER", "y")
    with pytest.raises(InvalidRecord):
        runtime.load()


def test_symlinked_runtime_files_are_refused(runtime, tmp_path):
    runtime.add("USER", "x")
    outside = tmp_path / "outside.md"
    outside.write_text("not yours")
    target = runtime.root / "runtime/MEMORY.md"
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(UnsafePath):
        runtime.add("MEMORY", "y")
    assert outside.read_text() == "not yours"


# --- commit protocol -------------------------------------------------------------------------


def test_commit_renames_projections_before_the_marker_and_leaves_no_temp_files(tmp_path):
    seen = []

    def boundary(name):
        state = (
            json.loads((tmp_path / "v/runtime/memories.json").read_text())
            if (tmp_path / "v/runtime/memories.json").exists()
            else None
        )
        seen.append((name, None if state is None else state["revision"]))

    runtime = RuntimeMemory(tmp_path / "v", boundary=boundary)
    runtime.add("USER", "first")
    runtime.add("USER", "second")
    assert seen == [
        (TEMPS_WRITTEN, None), (renamed("USER"), None), (renamed("MEMORY"), None), (COMMITTED, 1),
        # the second write changes USER only: MEMORY.md is not rewritten, the marker still goes last
        (TEMPS_WRITTEN, 1), (renamed("USER"), 1), (COMMITTED, 2),
    ]  # fmt: skip
    assert not [p for p in (tmp_path / "v/runtime").iterdir() if p.name.endswith(".tmp")]


def test_a_failing_commit_removes_its_temp_files_and_keeps_the_old_state(tmp_path):
    def boundary(name):
        if name == renamed("USER"):
            raise OSError("disk full")

    RuntimeMemory(tmp_path / "v").add("MEMORY", "old")
    broken = RuntimeMemory(tmp_path / "v", boundary=boundary)
    with pytest.raises(OSError):
        broken.add("USER", "new")
    assert not [p for p in (tmp_path / "v/runtime").iterdir() if p.name.endswith(".tmp")]
    healthy = RuntimeMemory(tmp_path / "v")
    assert contents(healthy, "USER") == [] and contents(healthy, "MEMORY") == ["old"]
    assert healthy.load().files["USER"] == "stale"  # renamed before the failure; restored on the next write
    healthy.add("MEMORY", "next")
    assert healthy.load().files == {"USER": "current", "MEMORY": "current"}


def test_compact_and_mutate_is_a_compare_and_swap_on_the_revision(runtime):
    runtime.add("MEMORY", "a")
    runtime.add("MEMORY", "b")
    with pytest.raises(CapacityExceeded) as caught:
        runtime.add("MEMORY", "c" * 600)
    runtime.add("MEMORY", "moved on")
    overflow = caught.value.overflow
    hot = [Keyed(0, overflow.state.of("MEMORY")[0])]
    with pytest.raises(Conflict, match="kept unchanged"):
        runtime.compact_and_mutate(overflow.state.revision, overflow.mutation, None, hot, maintenance="x")
    assert contents(runtime, "MEMORY") == ["a", "b", "moved on"]


def test_threads_in_one_process_never_lose_an_entry(runtime):
    runtime.limits["MEMORY"] = 100_000
    errors = []

    def worker(n):
        try:
            for i in range(10):
                runtime.add("MEMORY", f"thread {n} entry {i}")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(contents(runtime, "MEMORY")) == sorted(f"thread {n} entry {i}" for n in range(4) for i in range(10))
    assert runtime.load().revision == 40
    assert runtime.load().files == {"USER": "current", "MEMORY": "current"}
    assert os.listdir(runtime.root / ".locks")  # the lock file stays in place
