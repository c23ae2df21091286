"""Locks, compare-and-swap and the liveness fence, across real threads and real processes."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memvault.vault.errors import Conflict, UnsafePath, VaultLocked
from memvault.vault.fsio import read_bytes_nofollow
from memvault.vault.locks import LivenessFence, VaultLock, replace_if_unchanged

REPO = Path(__file__).resolve().parents[1]
PRELUDE = f"import sys; sys.path.insert(0, {str(REPO)!r})\n"

# Safety net so a broken lock fails the run instead of hanging it; not a speed assertion.
HANG_GUARD = 300

COUNTER_WORKER = """
from pathlib import Path
from memvault.vault.fsio import read_bytes_nofollow
from memvault.vault.locks import VaultLock, replace_if_unchanged
root = Path(sys.argv[1])
counter = root / "counter"
print("ready", flush=True)
sys.stdin.readline()
for _ in range(200):
    with VaultLock(root, timeout=-1):
        try:
            current = read_bytes_nofollow(counter)
        except FileNotFoundError:
            current = None
        value = int(current) if current is not None else 0
        replace_if_unchanged(counter, current, str(value + 1).encode())
"""

LOCK_HOLDER = """
from pathlib import Path
from memvault.vault.locks import VaultLock
with VaultLock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""

LOOPER = """
import select
from pathlib import Path
from memvault.vault.locks import VaultLock
lock = VaultLock(Path(sys.argv[1]), timeout=-1)
print("looping", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:
    with lock:
        pass
"""

FENCE_HOLDER = """
import time
from pathlib import Path
from memvault.vault.locks import LivenessFence
LivenessFence(Path(sys.argv[1])).hold()
print("held", flush=True)
time.sleep(3600)
"""

FENCE_PROBE = """
from pathlib import Path
from memvault.vault.locks import LivenessFence
print(LivenessFence(Path(sys.argv[1])).is_held_elsewhere())
"""


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE + code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _expect_line(proc: subprocess.Popen[str], expected: str) -> None:
    line = proc.stdout.readline().strip()
    if line != expected:
        proc.kill()
        raise AssertionError(f"child said {line!r}, stderr: {proc.stderr.read()}")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    vault = tmp_path / "vault"
    vault.mkdir()
    return vault


# --- VaultLock --------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_increment_counter_to_400(root: Path) -> None:
    workers = [_spawn(COUNTER_WORKER, str(root)) for _ in range(2)]
    for worker in workers:
        _expect_line(worker, "ready")
    for worker in workers:  # both start only when both are up, so they really contend
        worker.stdin.write("go\n")
        worker.stdin.flush()
    for worker in workers:
        _, err = worker.communicate(timeout=HANG_GUARD)
        assert worker.returncode == 0, err
    assert (root / "counter").read_bytes() == b"400"


def test_two_threads_increment_counter_to_400(root: Path) -> None:
    counter = root / "counter"
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(200):
                with VaultLock(root, timeout=-1):
                    current = read_bytes_nofollow(counter) if counter.exists() else None
                    replace_if_unchanged(counter, current, str(int(current or b"0") + 1).encode())
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert counter.read_bytes() == b"400"


def test_vault_lock_is_reentrant_within_a_thread(root: Path) -> None:
    outer = VaultLock(root)
    with outer:
        assert outer.held_by_me
        with VaultLock(root, timeout=0):  # a second object for the same lock nests, not deadlocks
            assert outer.held_by_me
        assert outer.held_by_me
    assert not outer.held_by_me


def test_vault_lock_held_by_me_is_per_thread(root: Path) -> None:
    lock = VaultLock(root)
    seen: list[bool] = []
    with lock:
        thread = threading.Thread(target=lambda: seen.append(VaultLock(root).held_by_me))
        thread.start()
        thread.join()
    assert seen == [False]


def test_vault_lock_times_out_across_threads(root: Path) -> None:
    failures: list[VaultLocked] = []

    def try_lock() -> None:
        try:
            with VaultLock(root, timeout=0):
                pass
        except VaultLocked as exc:
            failures.append(exc)

    with VaultLock(root):
        thread = threading.Thread(target=try_lock)
        thread.start()
        thread.join()
    assert len(failures) == 1


@pytest.mark.slow
def test_vault_lock_timeout_names_lock_holder_and_fix_and_file_stays(root: Path) -> None:
    holder = _spawn(LOCK_HOLDER, str(root))
    try:
        _expect_line(holder, "held")
        with pytest.raises(VaultLocked) as info:
            with VaultLock(root, timeout=0.1):
                pass
        message = str(info.value)
        assert str(root.resolve() / ".locks" / "vault.lock") in message
        assert "another memvault process" in message
        assert "wait" in message and "stop the other process" in message
    finally:
        holder.stdin.close()
        holder.wait(timeout=HANG_GUARD)
    assert holder.returncode == 0
    lock_file = root / ".locks" / "vault.lock"
    assert lock_file.is_file()  # left in place after the holder released and exited
    with VaultLock(root, timeout=0):
        pass
    assert lock_file.is_file()


LOCK_PROBE = """
from pathlib import Path
from memvault.vault.locks import VaultLock
with VaultLock(Path(sys.argv[1]), timeout=float(sys.argv[2])):
    print("taken", flush=True)
"""


def test_a_forked_child_neither_holds_nor_pins_its_parents_lock(root: Path) -> None:
    """A host that forks while holding the lock (a pre-fork server): the child does not hold it,
    and its copy of the lock's descriptor does not keep it held once the parent lets go."""
    lock = VaultLock(root)
    go = root / "child-may-lock"
    with lock:
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 3
            try:
                code = 1 if lock.held_by_me else 2
                while not go.exists():
                    threading.Event().wait(0.01)
                with VaultLock(root, timeout=HANG_GUARD):
                    code = 0
            finally:
                os._exit(code)
    try:
        probe = subprocess.run(
            [sys.executable, "-c", PRELUDE + LOCK_PROBE, str(root), "60"],
            capture_output=True,
            text=True,
            timeout=HANG_GUARD,
        )
        assert probe.stdout.strip() == "taken", probe.stderr  # the child, still alive, did not pin it
    finally:
        go.touch()
        status = _reap(pid)
    assert os.waitstatus_to_exitcode(status) == 0  # and it took the lock itself afterwards


def _reap(pid: int) -> int:
    """The forked child's wait status; killed after HANG_GUARD seconds (a hung child fails the
    test instead of hanging the run)."""
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


@pytest.mark.slow
def test_a_waiter_that_timed_out_leaves_the_lock_free_once_its_holder_lets_go(root: Path) -> None:
    """A wait given up on stays queued in the kernel and lets the lock go the moment it gets it:
    after the holder exits, the lock is free at once, to this process and to others."""
    holder = _spawn(LOCK_HOLDER, str(root))
    try:
        _expect_line(holder, "held")
        for _ in range(3):  # three abandoned waits queued behind the holder
            with pytest.raises(VaultLocked):
                with VaultLock(root, timeout=0.2):
                    pass
    finally:
        holder.stdin.close()
        holder.wait(timeout=HANG_GUARD)
    with VaultLock(root, timeout=0):
        pass
    probe = subprocess.run(
        [sys.executable, "-c", PRELUDE + LOCK_PROBE, str(root), "60"],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )
    assert probe.stdout.strip() == "taken", probe.stderr


def test_a_process_taking_the_lock_in_a_loop_does_not_starve_a_waiter(root: Path) -> None:
    """Another process releases and re-takes the lock as fast as it can; a waiter queued in the
    kernel is handed the lock on one of those releases, well within its timeout."""
    looper = _spawn(LOOPER, str(root))
    try:
        _expect_line(looper, "looping")
        for _ in range(5):
            with VaultLock(root, timeout=60):
                pass
    finally:
        looper.stdin.close()
        looper.wait(timeout=HANG_GUARD)
    assert looper.returncode == 0, looper.stderr.read()


def test_named_locks_are_independent(root: Path) -> None:
    with VaultLock(root, "index"):
        failures: list[BaseException] = []

        def other() -> None:
            try:
                with VaultLock(root, "vault", timeout=0):
                    pass
            except BaseException as exc:
                failures.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert failures == []
    assert sorted(os.listdir(root / ".locks")) == ["index.lock", "vault.lock"]


def test_lock_dir_is_private_and_lock_file_owner_only(root: Path) -> None:
    old = os.umask(0)
    try:
        with VaultLock(root):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(root / ".locks").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(root / ".locks" / "vault.lock").st_mode) == 0o600


def test_vault_lock_refuses_symlinked_locks_dir(root: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / ".locks").symlink_to(elsewhere)
    with pytest.raises(UnsafePath, match="symlink"):
        VaultLock(root)
    with pytest.raises(UnsafePath, match="symlink"):
        LivenessFence(root)
    assert os.listdir(elsewhere) == []


@pytest.mark.parametrize("name", ["", "../vault", "a/b", ".hidden", "live", "x\x00"])
def test_vault_lock_refuses_unsafe_or_reserved_names(root: Path, name: str) -> None:
    with pytest.raises(UnsafePath):
        VaultLock(root, name)


# --- replace_if_unchanged ---------------------------------------------------------------------


def test_replace_if_unchanged_writes_when_bytes_match(root: Path) -> None:
    path = root / "graph.jsonl"
    replace_if_unchanged(path, None, b"one\n", mode=0o600)
    replace_if_unchanged(path, b"one\n", b"two\n", mode=0o600)
    assert path.read_bytes() == b"two\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.parametrize(
    ("on_disk", "expected"),
    [(b"moved\n", b"one\n"), (b"exists\n", None), (None, b"one\n")],
)
def test_replace_if_unchanged_conflicts_when_bytes_moved(root: Path, on_disk, expected) -> None:
    path = root / "graph.jsonl"
    if on_disk is not None:
        path.write_bytes(on_disk)
    with pytest.raises(Conflict) as info:
        replace_if_unchanged(path, expected, b"new\n")
    assert str(path) in str(info.value) and "re-read and retry" in str(info.value)
    assert (path.read_bytes() if path.exists() else None) == on_disk
    assert [n for n in os.listdir(root) if n.endswith(".tmp")] == []


def test_replace_if_unchanged_refuses_symlink(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"t")
    (root / "graph.jsonl").symlink_to(target)
    with pytest.raises(UnsafePath):
        replace_if_unchanged(root / "graph.jsonl", b"t", b"new")
    assert target.read_bytes() == b"t"


# --- LivenessFence ----------------------------------------------------------------------------


@pytest.mark.slow
def test_fence_held_in_subprocess_is_seen_and_freed_by_sigkill(root: Path) -> None:
    holder = _spawn(FENCE_HOLDER, str(root))
    try:
        _expect_line(holder, "held")
        fence = LivenessFence(root)
        assert fence.is_held_elsewhere()
        assert fence.holder_info()["pid"] == holder.pid
        with pytest.raises(VaultLocked) as info:
            fence.hold()
        assert f"pid {holder.pid}" in str(info.value) and "stop that process" in str(info.value)
    finally:
        holder.kill()  # SIGKILL: no cleanup runs in the child
        holder.wait(timeout=HANG_GUARD)
    assert holder.returncode == -9
    assert not fence.is_held_elsewhere()
    with LivenessFence(root) as mine:
        assert mine.holder_info()["pid"] == os.getpid()
    assert not (root / ".locks" / "live.json").exists()
    assert (root / ".locks" / "live.lock").exists()


@pytest.mark.slow
def test_fence_held_here_is_seen_by_another_process_not_by_us(root: Path) -> None:
    with LivenessFence(root) as fence:
        assert not fence.is_held_elsewhere()
        probe = subprocess.run(
            [sys.executable, "-c", PRELUDE + FENCE_PROBE, str(root)],
            capture_output=True,
            text=True,
            timeout=HANG_GUARD,
        )
        assert probe.stdout.strip() == "True", probe.stderr
        assert fence.is_held_elsewhere() is False
    probe = subprocess.run(
        [sys.executable, "-c", PRELUDE + FENCE_PROBE, str(root)], capture_output=True, text=True, timeout=HANG_GUARD
    )
    assert probe.stdout.strip() == "False", probe.stderr


def test_fence_live_json_is_private_and_names_us(root: Path) -> None:
    with LivenessFence(root) as fence:
        info_path = root / ".locks" / "live.json"
        assert stat.S_IMODE(os.stat(info_path).st_mode) == 0o600
        info = fence.holder_info()
        assert info["pid"] == os.getpid()
        assert "T" in info["started_at"]
