"""A vault on a real full disk (a small tmpfs filled to the last byte): reads answer from the index
as it was, every write fails with one clear "no space left" error naming the path, no traceback,
no stray generation or temp file, and not one byte of the vault changes."""

import errno
import json

import pytest

from memvault.vault.errors import ReadOnlyVault, StorageFull, StoragePermission
from memvault.vault.storage_errors import storage_error, storage_errors
from tests.readonly_helpers import fill_disk, memvault, memvault_here, small_tmpfs, tree_state

DAY = "2026-11-30"

WRITES = [
    ("remember", "Sam works at Acme."),
    ("remember", "--json", "Sam works at Acme."),
    ("runtime", "add", "memory", "The build is green."),
    ("doc", "create", "Other", "--body", "text"),
    ("rebuild",),
    ("consolidate",),
]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["journal", "lite"])
def test_full_disk_reads_work_writes_fail_cleanly(tmp_path, mode):
    with small_tmpfs(tmp_path / "disk", "24m") as disk:
        vault = disk / "vault"
        # the set-up runs in this process (memvault_here); the commands under test each run as a process
        assert memvault_here(tmp_path, "init", str(vault), "--mode", mode, "--time-zone", "UTC") == 0
        note = vault / "daily" / f"{DAY}.md"
        note.write_text(f"# {DAY}\n\n- 09:00 Priya lives in Rotterdam. ^m-priya\n")
        for args in (
            ("rebuild",),
            ("runtime", "add", "user", "Prefers short answers."),
            ("doc", "create", "Plan", "--body", "The plan."),
        ):
            assert memvault_here(vault, *args) == 0, args
        with open(note, "a") as edit:  # a hand edit the index has not seen: opening must sync, and cannot
            edit.write("- 10:00 Morgan chose blue as the deployment color. ^m-blue\n")
        fill_disk(disk)
        before = tree_state(vault)

        found = memvault(vault, "search", "--json", "Where does Priya live?")
        assert "Traceback" not in found.stderr and found.returncode == 0, found.stderr
        body = json.loads(found.stdout)
        assert body["hits"][0]["id"] == "m-priya"
        assert "no space left" in body["degraded"].lower()  # the answer says it may lag the files
        journal = memvault(vault, "journal", DAY, DAY, "--tz", "UTC", "--json")
        assert "Traceback" not in journal.stderr and journal.returncode == 0, journal.stderr
        coverage = json.loads(journal.stdout)["coverage"]
        assert coverage["complete"] is False and coverage["incompleteNotes"] == [DAY]  # the unseen edit
        for args in (("health",), ("inspect",), ("runtime", "show"), ("doc", "list")):
            done = memvault(vault, *args)
            assert "Traceback" not in done.stderr and done.returncode in (0, 1), (args, done.stderr)

        for args in WRITES:
            done = memvault(vault, *args)
            assert "Traceback" not in done.stderr, (args, done.stderr)
            assert done.returncode == 1, (args, done.stdout, done.stderr)
            said = done.stdout + done.stderr
            assert "no space left" in said.lower() and str(vault) in said, (args, said)
            if "--json" in args:
                assert json.loads(done.stdout)["error"]["code"] == "disk_full"
        admitted = memvault(vault, "admit", stdin=json.dumps({"runId": "run-full-1", "answer": "The deploy finished."}))
        assert "Traceback" not in admitted.stderr and admitted.returncode == 1
        assert json.loads(admitted.stdout)["status"] == "failed"

        after = tree_state(vault)
        # lock files are empty and left in place by design; no other file or folder is created (a
        # folder costs no data block, so admission's and the journal's would be made: they are
        # removed again when the write after them fails), and none is changed
        empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        created = {path: state for path, state in after.items() if path not in before}
        assert all(path.startswith(".locks/") and state == ("file", 0o600, empty) for path, state in created.items()), (
            "; ".join(f"{p} {s}" for p, s in sorted(created.items()))
        )
        assert {path: state for path, state in after.items() if path in before} == before
        assert not [path for path in after if path.endswith(".tmp") or "/.tmp" in path]
        generations = sorted(p for p in after if p.startswith(".index/gen-") and p.count("/") == 1)
        assert len(generations) <= 2, generations  # the serving one and the one kept for readers: no stray


@pytest.mark.parametrize(
    ("code", "kind", "words"),
    [
        (errno.ENOSPC, StorageFull, "no space left"),
        (errno.EDQUOT, StorageFull, "no space left"),
        (errno.EROFS, ReadOnlyVault, "read-only"),
        (errno.EACCES, StoragePermission, "permission denied"),
        (errno.EPERM, StoragePermission, "permission denied"),
    ],
)
def test_each_refusal_is_typed_and_names_the_path_and_the_fix(code, kind, words):
    typed = storage_error(OSError(code, "refused", "/v/daily/2026-11-30.md"), "/v")
    assert isinstance(typed, kind) and isinstance(typed, OSError) and words in str(typed).lower()
    assert "/v/daily/2026-11-30.md" in str(typed)
    assert any(fix in str(typed) for fix in ("Free some space", "remount", "chown"))
    with pytest.raises(kind):
        with storage_errors("/v"):
            raise OSError(code, "refused", "/v/x")


def test_other_os_errors_keep_their_type():
    assert storage_error(OSError(errno.EIO, "I/O error", "/v/x")) is None
    with pytest.raises(OSError) as caught:
        with storage_errors("/v"):
            raise OSError(errno.EIO, "I/O error", "/v/x")
    assert caught.value.errno == errno.EIO
