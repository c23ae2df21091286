"""Fixes an operator can trust (issue 24, section 2), each through real memvault processes: a stuck
owner is stopped by the fix every "engine stuck" error names, a second owner can never start beside
a live one (not even after its socket and `.locks/` are deleted together), and liveness checks
answer rightly for live, dead and unknown processes."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from memvault.indexer.engine.address import socket_path, status_path
from memvault.indexer.engine.client import find_owner
from memvault.vault.locks import LivenessFence, fence_holder_pid, pid_alive, process_stopped
from tests.engine_helpers import OwnerProcess, memvault, memvault_json, wait_for
from tests.intake_helpers import make_vault
from tests.readonly_helpers import memvault_here, memvault_here_result

pytestmark = pytest.mark.slow


def test_pid_alive_answers_for_live_dead_zombie_and_unknown_processes():
    assert pid_alive(os.getpid()) is True
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: process_state(child.pid) == "Z", what="the child to exit (a zombie until reaped)")
    assert pid_alive(child.pid) is False  # exited: a zombie is not a live owner
    child.wait()
    assert pid_alive(child.pid) is False
    for unknown in (None, "123", 0, -1, True and "x"):
        assert pid_alive(unknown) is False


def process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return handle.read().rpartition(b") ")[2][:1].decode()


def test_a_live_owners_lag_marker_is_not_taken_for_a_dead_ones(tmp_path):
    from memvault.indexer.maintenance.semantic_queue import dead_markers, marker_path

    index_dir = tmp_path / "index"
    index_dir.mkdir()
    live = marker_path(index_dir, os.getpid())
    live.touch()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = marker_path(index_dir, gone.pid)
    dead.touch()
    assert dead_markers(index_dir) == [dead]


@pytest.mark.both_backends
def test_engine_stop_force_kills_a_stopped_owner_and_cleans_its_status(tmp_path):
    root = make_vault(tmp_path)
    owner = OwnerProcess(root, "serve").wait_serving()
    try:
        os.kill(owner.proc.pid, signal.SIGSTOP)
        wait_for(lambda: process_stopped(owner.proc.pid), what="the owner to be stopped")
        stopped = memvault(root, "engine", "stop", "--force", "--json")
        assert stopped.returncode == 0, stopped.stderr
        body = json.loads(stopped.stdout)
        assert body == {"stopped": True, "pid": owner.proc.pid, "forced": True, "signal": "SIGKILL"}
        assert owner.proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        owner.kill()
    assert not status_path(root).exists() and not (root / ".locks" / "live.json").exists()
    status = memvault(root, "engine", "status", "--json")
    assert status.returncode == 1 and json.loads(status.stdout)["staleStatus"] is None
    after = memvault(root, "remember", "The kite flew again.")  # in-process: nobody owns the vault
    assert after.returncode == 0 and after.stdout.startswith("added:"), after.stderr


@pytest.mark.both_backends
def test_engine_stop_force_finds_a_stuck_owner_whose_status_was_deleted(tmp_path):
    root = make_vault(tmp_path)
    owner = OwnerProcess(root, "serve").wait_serving()
    try:
        os.kill(owner.proc.pid, signal.SIGSTOP)
        shutil.rmtree(root / ".locks")  # engine.json with it: the kernel still knows who holds the vault
        assert fence_holder_pid(root) == owner.proc.pid
        stopped = memvault(root, "engine", "stop", "--force")
        assert stopped.returncode == 0 and f"engine pid {owner.proc.pid} killed" in stopped.stdout, stopped.stderr
        assert owner.proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        owner.kill()
    assert fence_holder_pid(root) is None


@pytest.mark.both_backends
def test_no_second_owner_after_the_socket_and_the_locks_folder_are_deleted_together(tmp_path):
    root = make_vault(tmp_path)
    first = OwnerProcess(root, "watch").wait_serving()
    try:
        os.kill(first.proc.pid, signal.SIGSTOP)  # its guard must not repair anything before the checks
        os.unlink(socket_path(root))  # a /tmp cleaner and `git clean -fdx` at once
        shutil.rmtree(root / ".locks")
        assert find_owner(root) is None
        status = memvault(root, "engine", "status", "--json")
        assert status.returncode == 1 and json.loads(status.stdout)["unreachableOwner"] == first.proc.pid
        for command in ("watch", "serve"):
            second = memvault(root, command)
            assert second.returncode == 1, (command, second.stderr)
            assert "Another live memvault process owns this vault" in second.stderr, second.stderr
            assert f"pid {first.proc.pid}" in second.stderr, second.stderr
        retried = memvault(root, "retry")  # an operator step that needs a stopped owner: refused too
        assert retried.returncode == 1 and "Another live memvault process" in retried.stderr, retried.stderr
        os.kill(first.proc.pid, signal.SIGCONT)
        wait_for(
            lambda: find_owner(root) is not None and status_path(root).exists(),
            what="the first owner to bind its socket and write its status again",
        )
        assert memvault_json(root, "engine", "status")["pid"] == first.proc.pid
        assert LivenessFence(root).is_held_elsewhere()
        remembered = memvault(root, "remember", "The heron stands still.")
        assert remembered.returncode == 0, remembered.stderr
        assert memvault(root, "health", "--strict").returncode == 0
    finally:
        os.kill(first.proc.pid, signal.SIGCONT)
        err = first.stop()
    assert "two processes now claim the vault" not in err
    assert first.proc.returncode == 0, err


# --- a file system that goes read-only under a running owner -------------------------------------


@contextlib.contextmanager
def ext4_that_can_go_read_only(tmp_path):
    """A small ext4 image mounted with errors=remount-ro; yields (mountpoint, go_read_only). The
    kernel's own error path makes it read-only while files stay open (a remount would be refused
    as busy), as a failing disk does to a running owner."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        pytest.skip("needs root and mkfs.ext4 to mount an ext4 image")
    image, mountpoint = tmp_path / "ext4.img", tmp_path / "disk"
    mountpoint.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(64 * 1024 * 1024)
    made = subprocess.run(["mkfs.ext4", "-q", str(image)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {made.stderr.strip()}")
    mounted = subprocess.run(
        ["mount", "-o", "loop,errors=remount-ro", str(image), str(mountpoint)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a loop device here: {mounted.stderr.strip()}")
    try:
        device = os.path.basename(os.path.realpath(_loop_device(mountpoint)))
        trigger = f"/sys/fs/ext4/{device}/trigger_fs_error"
        if not os.path.exists(trigger):
            pytest.skip(f"this kernel has no {trigger}")

        def go_read_only() -> None:
            with open(trigger, "w") as handle:
                handle.write("memvault test: the disk fails\n")

        yield mountpoint, go_read_only
    finally:
        for _ in range(3):
            if subprocess.run(["umount", str(mountpoint)], capture_output=True).returncode == 0:
                break
            subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)


def _loop_device(mountpoint) -> str:
    for line in open("/proc/mounts"):
        source, target = line.split()[:2]
        if target == str(mountpoint):
            return source
    raise AssertionError(f"{mountpoint} is not mounted")


def test_a_file_system_gone_read_only_under_an_owner_answers_as_without_one(tmp_path):
    with ext4_that_can_go_read_only(tmp_path) as (disk, go_read_only):
        root = disk / "v"
        # the set-up runs in this process (memvault_here); the commands under test each run as a process
        assert memvault_here(tmp_path, "init", str(root), "--mode", "lite", "--time-zone", "UTC") == 0
        assert memvault_here(root, "remember", "Priya lives in Rotterdam.") == 0
        owner = OwnerProcess(root, "serve").wait_serving()
        try:
            wait_for(
                lambda: (memvault_json(root, "engine", "status")["intake"].get("worker") or {}).get("running"),
                what="the owner to finish starting (its intake worker runs)",
            )
            go_read_only()
            found = memvault(root, "search", "--json", "Where does Priya live?")
            assert found.returncode == 0 and "Traceback" not in found.stderr, found.stdout + found.stderr
            assert json.loads(found.stdout)["hits"][0]["text"] == "Priya lives in Rotterdam."
            for args in (("remember", "Sam works at Acme."), ("remember", "--json", "Sam works at Acme.")):
                refused = memvault(root, *args)
                said = refused.stdout + refused.stderr
                assert refused.returncode == 1 and "internal_error" not in said and "unexpectedly" not in said, said
                assert "the vault is read-only" in said and str(root) in said, said
                if "--json" in args:
                    assert json.loads(refused.stdout)["error"]["code"] == "read_only"
            health = memvault(root, "health")
            assert "Traceback" not in health.stderr and "unexpectedly" not in health.stdout + health.stderr
            assert owner.proc.poll() is None, owner.stop()  # it kept serving
        finally:
            err = owner.stop()
        assert "Traceback" not in err and "request failed" not in err, err
        alone = memvault(root, "search", "Priya")  # and with no owner: the same answers
        assert alone.returncode == 0 and "Priya lives in Rotterdam." in alone.stdout, alone.stderr
        refused = memvault(root, "remember", "Sam works at Acme.")
        assert refused.returncode == 1 and "the vault is read-only" in refused.stderr, refused.stderr


# --- vectors after a full disk ---------------------------------------------------------------------


def fill_leaving(folder, leave: int) -> None:
    """One ballast file taking all free space but `leave` bytes."""
    stats = os.statvfs(folder)
    with open(folder / "ballast", "wb") as ballast:
        ballast.truncate(0)
        remaining = stats.f_bavail * stats.f_frsize - leave
        while remaining > 0:
            ballast.write(b"\0" * min(remaining, 1 << 20))
            remaining -= 1 << 20


#: a batch whose note and BM25 rows (about 45 KB and 320 KB) fit in the room left, and whose
#: vectors (a vector save appends about 1.1 KB a memory to the vector log: 1.1 MB) do not
BATCH, ROOM_LEFT = 1000, 600_000


def test_vectors_refused_by_a_full_disk_are_embedded_once_space_is_freed(tmp_path):
    from tests.readonly_helpers import small_tmpfs

    with small_tmpfs(tmp_path / "disk", "40m") as disk:
        root = disk / "v"
        # the set-up runs in this process (memvault_here); the commands under test each run as a process
        assert memvault_here(tmp_path, "init", str(root), "--mode", "journal", "--time-zone", "UTC") == 0
        assert memvault_here(root, "remember", "Background fact: crane 7 lifts crates.") == 0
        owner = OwnerProcess(root, "serve").wait_serving()
        try:
            fill_leaving(disk, ROOM_LEFT)
            lines = "".join(json.dumps({"text": f"Sam welds seam {n}."}) + "\n" for n in range(BATCH))
            remembered = memvault(root, "remember", "--from", "-", input=lines)
            assert remembered.returncode == 0, remembered.stderr  # the note and BM25 took them; the vectors could not

            def degraded() -> str | None:  # asked of the owner from this process: a poll starts no process
                return json.loads(memvault_here_result(root, "search", "--json", "welds seam").stdout)["degraded"]

            def refused() -> str | None:  # "catching up" first, until the owner's save meets the full disk
                said = degraded()
                return said if said and "No space left" in said else None

            said = wait_for(refused, what="search to say the full disk refused the vectors")
            assert "vector" in said, said
            os.unlink(disk / "ballast")
            wait_for(
                lambda: memvault_here(root, "health", "--strict") == 0,
                what="the owner to embed what the full disk refused",
            )
            assert degraded() is None
        finally:
            owner.stop()
        assert memvault(root, "health", "--strict").returncode == 0  # strict: every memory has its vector on disk
        found = json.loads(memvault(root, "search", "--json", "welds seam").stdout)
        assert found["degraded"] is None and found["hits"], found


# --- temp files of interrupted writes --------------------------------------------------------------


@pytest.mark.both_backends
def test_a_killed_doc_create_leaves_a_temp_file_that_health_names_with_the_fix(tmp_path):
    root = make_vault(tmp_path)
    assert memvault_here(root, "rebuild") == 0  # an index, so the leftover is the only finding (in this process)
    killed = memvault(
        root, "doc", "create", "Plan", "--body", "The plan.", env={"MEMVAULT_TEST_CRASH_AT": "document.fsynced"}
    )  # after the temp file, before the rename
    assert killed.returncode == -signal.SIGKILL
    [leftover] = [p for p in (root / "documents").iterdir() if p.name.endswith(".tmp")]
    assert memvault(root, "health", "--strict").returncode == 0  # a fresh one may be a write in progress
    hour_ago = os.stat(leftover).st_mtime - 3600
    os.utime(leftover, (hour_ago, hour_ago))  # as it is once the write it belonged to is long gone
    report = json.loads(memvault(root, "health", "--json").stdout)
    [finding] = [f for f in report["findings"] if f["code"] == "stray_temp_file"]
    relpath = f"documents/{leftover.name}"
    assert (finding["severity"], finding["subject"], finding["fix"]) == ("warning", relpath, f"remove {relpath}")
    assert "documents/plan.md" in finding["message"]
    assert memvault(root, "health", "--strict").returncode == 1
    leftover.unlink()
    created = memvault(root, "doc", "create", "Plan", "--body", "The plan.")
    assert created.returncode == 0, created.stderr
    assert memvault(root, "health", "--strict").returncode == 0


@pytest.mark.both_backends
def test_normal_operation_leaves_no_temp_file(tmp_path):
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from memvault.indexer.maintenance.leftovers import TEMP_NAME

    TODAY = datetime.now(ZoneInfo("Europe/Amsterdam")).date().isoformat()

    root = make_vault(tmp_path, mode="journal")
    lines = "".join(json.dumps({"text": f"Imported fact {n} about the quay."}) + "\n" for n in range(40))
    steps = [
        ("remember", "Priya lives in Rotterdam."),
        ("remember", "--from", "-"),
        ("doc", "create", "Plan", "--body", "The plan."),
        ("doc", "update", "plan", "--body", "The plan, revised."),
        ("runtime", "add", "user", "Prefers short answers."),
        ("rebuild",),
        ("consolidate",),
        ("export", str(tmp_path / "backup.tar.gz")),
        ("journal", TODAY, TODAY, "--tz", "Europe/Amsterdam"),
    ]
    for step in steps:
        done = memvault(root, *step, input=lines if "--from" in step else None)
        assert done.returncode == 0, (step, done.stderr)
    admitted = memvault(root, "admit", input=json.dumps({"runId": "r-1", "answer": "Deployed 2.4."}))
    assert json.loads(admitted.stdout)["state"] == "resolved"
    owner = OwnerProcess(root, "serve").wait_serving()
    try:
        assert memvault(root, "remember", "Sam works at Acme.").returncode == 0
        assert memvault(root, "search", "Sam").returncode == 0
    finally:
        owner.stop()
    temps = [
        os.path.relpath(os.path.join(folder, name), root)
        for folder, _dirs, files in os.walk(root)
        for name in files
        if TEMP_NAME.fullmatch(name) or name.endswith(".tmp")
    ]
    assert temps == []


def test_an_import_the_full_disk_refused_is_not_written_later_by_the_repair(tmp_path):
    """`remember --from` on a full disk says "nothing was written": the lines it had noted for the
    recent-writes repair must not reach the note once space is freed (they all did)."""
    from tests.readonly_helpers import small_tmpfs

    with small_tmpfs(tmp_path / "disk", "24m") as disk:
        root = disk / "v"
        # the set-up runs in this process (memvault_here); the commands under test each run as a process
        assert memvault_here(tmp_path, "init", str(root), "--mode", "lite", "--time-zone", "UTC") == 0
        assert memvault_here(root, "remember", "Priya lives in Rotterdam.") == 0
        note = next((root / "daily").glob("*.md"))
        fill_leaving(disk, 60_000)  # room for the repair ledger's entries, none for the note's lines
        lines = "".join(json.dumps({"text": f"Imported fact {n} about the quay."}) + "\n" for n in range(300))
        refused = memvault(root, "remember", "--from", "-", input=lines)
        assert refused.returncode == 1 and "nothing was written" in refused.stderr, refused.stdout + refused.stderr
        os.unlink(disk / "ballast")
        assert memvault(root, "search", "quay").returncode == 0  # an open syncs, and runs the repair
        assert "about the quay" not in note.read_text()
        again = memvault(root, "remember", "--from", "-", input=lines)  # the retry the message asks for
        assert again.returncode == 0 and again.stdout.startswith("300 added"), again.stdout + again.stderr
        assert note.read_text().count("about the quay") == 300
