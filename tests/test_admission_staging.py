"""An admission writes and fsyncs its record before it takes the intake lock (vault/fsio.py
`StagedWrite`): under the lock it only checks and renames; the folder's fsync follows the lock. A staged record is
never swept as a crash's leftover while its writer lives, and a dead writer's is."""

import subprocess
import sys

import pytest

from memvault.vault.fsio import StagedWrite
from memvault.vault.intake.files import PENDING, IntakeDirs
from memvault.vault.intake.state import INTAKE_LOCK, intake_lock, read_record
from tests.engine_helpers import ENV, REPO, TIMEOUT
from tests.intake_helpers import admit, make_vault

TAKE_THE_LOCK = """
import sys
from memvault.vault.errors import VaultLocked
from memvault.vault.locks import VaultLock
try:
    with VaultLock(sys.argv[1], sys.argv[2], timeout=0.2):
        print("free")
except VaultLocked:
    print("held")
"""


def lock_seen_from_another_process(root) -> str:
    done = subprocess.run(
        [sys.executable, "-c", TAKE_THE_LOCK, str(root), INTAKE_LOCK],
        env=ENV,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_records_fsync_happens_before_the_intake_lock_its_rename_under_it_and_the_folders_after(tmp_path):
    """Under the intake lock an admission only checks and renames: the record's fsync comes
    before the lock and the folder's after it (both before the answer), so no admission waits
    for another's fsyncs."""
    root = make_vault(tmp_path)
    assert admit(root, "run-first").status == "admitted"  # the vault's first admission makes the folders
    seen = {}

    def hook(boundary):
        if boundary in ("admit.record_fsynced", "admit.record_renamed", "admit.committed"):
            seen[boundary] = lock_seen_from_another_process(root)

    assert admit(root, "run-second", hook=hook).status == "admitted"
    assert seen == {"admit.record_fsynced": "free", "admit.record_renamed": "held", "admit.committed": "free"}
    assert read_record(IntakeDirs(root), PENDING, admit(root, "run-second").id).id  # duplicate: the record is there
    assert not list((root / ".capture-intake").rglob(".*.tmp"))


def test_the_ledgers_shard_sizes_are_checked_before_the_intake_lock(tmp_path, monkeypatch):
    """Every admission checks that no committed shard is missing or short: 256 lstat calls, once
    held under the intake lock every other admission waits for. Shards only grow past what a
    catalog committed, so the check runs before the lock (a truncated shard is still refused:
    test_intake_ledger.py)."""
    from memvault.vault.intake.ledger import Ledger

    root = make_vault(tmp_path)
    assert admit(root, "run-first").status == "admitted"
    real, seen = Ledger.check_sizes, []

    def check_sizes(ledger):
        seen.append(lock_seen_from_another_process(root))
        return real(ledger)

    monkeypatch.setattr(Ledger, "check_sizes", check_sizes)
    assert admit(root, "run-second").status == "admitted"
    assert seen == ["free"]


def test_a_staged_record_is_left_alone_by_the_stray_sweep_and_a_dead_writers_is_not(tmp_path):
    root = make_vault(tmp_path)
    assert admit(root, "run-first").status == "admitted"
    dirs = IntakeDirs(root)
    pending = dirs.folder(PENDING)
    leftover = pending / ".crashed.abcd.tmp"  # a temp file whose writer died (no flock on it)
    leftover.write_bytes(b"half a record")
    with StagedWrite(pending, "live", b"a whole record\n", mode=0o600) as live:
        with intake_lock(dirs):
            assert dirs.remove_strays() == 1
        assert live.tmp.exists() and not leftover.exists()
        live.rename_into(pending / "live.json")
        live.fsync_folder()
    assert (pending / "live.json").read_bytes() == b"a whole record\n"


def test_a_sweep_between_a_staged_files_creation_and_its_flock_costs_no_record(tmp_path, monkeypatch):
    """The sweep may take the flock of a temp file created a moment before its writer locks it,
    and remove it: the writer then finds its file unlinked and stages a new one."""
    import tempfile

    from memvault.vault.fsio import remove_if_unlocked

    real_mkstemp, swept = tempfile.mkstemp, []

    def mkstemp_then_sweep(*args, **kwargs):
        fd, name = real_mkstemp(*args, **kwargs)
        if not swept:
            swept.append(remove_if_unlocked(name))  # the sweep wins the race for the first file
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp_then_sweep)
    with StagedWrite(tmp_path, "record.json", b"the whole record\n", mode=0o600) as staged:
        staged.rename_into(tmp_path / "record.json")
        staged.fsync_folder()
    assert swept == [True]
    assert (tmp_path / "record.json").read_bytes() == b"the whole record\n"
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_staged_record_left_by_a_killed_writer_is_swept(tmp_path):
    """The flock goes with the process: a SIGKILLed writer's staged temp file is a leftover."""
    root = make_vault(tmp_path)
    assert admit(root, "run-first").status == "admitted"
    dirs = IntakeDirs(root)
    script = (
        "import os, sys\nfrom pathlib import Path\nfrom memvault.vault.fsio import StagedWrite\n"
        "StagedWrite(Path(sys.argv[1]), 'doomed', b'x', mode=0o600)\nprint('staged', flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(dirs.folder(PENDING))],
        env=ENV,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == -9 and done.stdout.strip() == "staged"
    assert len(list(dirs.folder(PENDING).glob(".doomed.*.tmp"))) == 1
    with intake_lock(dirs):
        assert dirs.remove_strays() == 1
    assert not list(dirs.folder(PENDING).glob(".*.tmp"))


ADMIT_MANY = """
import sys
from memvault.vault.clock import utc_now
from memvault.vault.intake.admission import admit_turn
from memvault.vault.intake.files import IntakeDirs
dirs = IntakeDirs(sys.argv[1])
for n in range(int(sys.argv[3])):
    result = admit_turn(dirs, run_id=f"{sys.argv[2]}-{n}", answer=f"Turn {n} of {sys.argv[2]} shipped the fix.",
                        write_mode="append-host-summary", tier="lite", now=utc_now())
    print(result.status, flush=True)
"""

SWEEP_MANY = """
import sys
from memvault.vault.intake.files import IntakeDirs
from memvault.vault.intake.state import intake_lock
dirs = IntakeDirs(sys.argv[1])
for _ in range(int(sys.argv[2])):
    with intake_lock(dirs):
        dirs.remove_strays()
"""


def test_admissions_in_many_processes_beside_a_sweeping_recovery_all_land(tmp_path):
    """Four processes admit while a fifth sweeps strays under the intake lock again and again
    (what a restarting owner's recovery does): every admission is admitted and its record is there."""
    root = make_vault(tmp_path)
    assert admit(root, "run-first").status == "admitted"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", ADMIT_MANY, str(root), f"agent{k}", "40"],
            env=ENV,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(4)
    ]
    sweeper = subprocess.Popen(
        [sys.executable, "-c", SWEEP_MANY, str(root), "300"],
        env=ENV,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    outputs = [writer.communicate(timeout=TIMEOUT) for writer in writers]
    assert sweeper.wait(timeout=TIMEOUT) == 0, sweeper.stderr.read()
    for writer, (out, err) in zip(writers, outputs, strict=True):
        assert writer.returncode == 0, err
        assert out.split() == ["admitted"] * 40
    dirs = IntakeDirs(root)
    assert len(dirs.list_folder(PENDING).ids) == 1 + 4 * 40
    assert not list((root / ".capture-intake").rglob(".*.tmp"))


@pytest.mark.parametrize("resolver_live", [True, False])
def test_beside_a_live_resolver_the_ledger_is_read_once_per_admission(tmp_path, monkeypatch, resolver_live):
    """A live worker writes the ledger without the intake lock, so the catalog read before the
    lock is as current as one read under it: an admission reads it once. Without a live
    resolver one may have held the lock meanwhile, and it is read again under the lock."""
    from memvault.vault.intake import ledger as ledger_module
    from memvault.vault.locks import LivenessFence

    root = make_vault(tmp_path)
    assert admit(root, "run-first").status == "admitted"
    fence = LivenessFence(root)
    if resolver_live:
        fence.hold()
    real, loads = ledger_module.load_catalog, []
    monkeypatch.setattr(ledger_module, "load_catalog", lambda *args, **kwargs: loads.append(1) or real(*args, **kwargs))
    try:
        assert admit(root, "run-second").status == "admitted"
        assert admit(root, "run-second").status == "duplicate"
    finally:
        if resolver_live:
            fence.release()
    assert len(loads) == (2 if resolver_live else 4)


def test_a_duplicate_of_a_record_still_pending_fsyncs_its_folder_before_it_answers(tmp_path, monkeypatch):
    """The admission that renamed a record fsyncs its folder after the intake lock; a retry of
    the same run that finds the record meanwhile must not answer "duplicate" (saved) before
    that rename is durable, so it fsyncs the folder itself."""
    from memvault.vault.intake import admission

    root = make_vault(tmp_path)
    assert admit(root, "run-first").status == "admitted"
    real, synced = admission.fsync_dir, []
    monkeypatch.setattr(admission, "fsync_dir", lambda folder: synced.append(folder) or real(folder))
    assert admit(root, "run-first").status == "duplicate"
    assert synced == [IntakeDirs(root).folder(PENDING)]
