"""Cross-process locks, compare-and-swap, and the liveness fence.

Lock files live in ``<vault>/.locks/`` (0700), never on the data files themselves: locking a
note would fight editors that save by rename, and the lock would vanish with the old inode.
Lock files are left in place after release, so a waiter never locks an unlinked inode.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Callable
from types import TracebackType

from filelock import FileLock, Timeout

from memvault.vault.errors import Conflict, UnsafePath, VaultLocked
from memvault.vault.fsio import atomic_write, ensure_private_dir, read_bytes_nofollow

__all__ = ["LivenessFence", "VaultLock", "fence_holder_pid", "pid_alive", "process_stopped", "replace_if_unchanged"]

LOCKS_DIR = ".locks"
_LIVE_NAME = "live"
_LOCK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_LOCK_FILE_MODE = 0o600

_registry: dict[Path, FileLock] = {}
#: lock file -> this process's gate in front of it (see VaultLock.acquire)
_gates: dict[Path, threading.RLock] = {}
#: fence path -> inode of the fence file this process locked (see LivenessFence.intact)
_held_inodes: dict[Path, int] = {}
#: fence path -> descriptors locking fence files re-created after a deletion
_reasserted: dict[Path, list[int]] = {}
#: fence path -> descriptor of the vault folder this process flocks while it holds the fence
_root_locks: dict[Path, int] = {}
_registry_guard = threading.Lock()
#: serialises taking and giving up fences in this process (the root flock is one per process)
_fence_guard = threading.RLock()
#: how long a would-be holder retries the vault folder's lock while another process only probes it
_ROOT_PROBE_RETRY_SECONDS = 0.5


def _lock_path(vault_root: Path, name: str) -> Path:
    if not _LOCK_NAME.fullmatch(name):
        raise UnsafePath(f"lock name {name!r} is not a plain name. Fix: use letters, digits, '-' or '_'.")
    locks_dir = ensure_private_dir(Path(vault_root).resolve() / LOCKS_DIR)
    return locks_dir / f"{name}.lock"


def _shared_lock(path: Path, *, thread_local: bool) -> FileLock:
    """One FileLock object per lock file per process.

    filelock counts re-entrant holds per object, so two objects for one file in one process
    would deadlock each other instead of nesting. preserve_lock_file keeps the path on release
    (and refuses filelock's soft fallback, which releases by unlinking).
    """
    with _registry_guard:
        lock = _registry.get(path)
        if lock is None:
            lock = FileLock(path, mode=_LOCK_FILE_MODE, thread_local=thread_local, preserve_lock_file=True)
            _registry[path] = lock
        return lock


def _process_gate(path: Path) -> threading.RLock:
    with _registry_guard:
        return _gates.setdefault(path, threading.RLock())


class VaultLock:
    """The vault's write lock (or a named sub-lock), shared by every memvault process.

    Re-entrant within a thread: nested ``with VaultLock(root)`` blocks in one thread just
    count. Other threads and other processes wait up to ``timeout`` seconds (negative: forever)
    and then get ``VaultLocked``.
    """

    def __init__(self, vault_root: Path, name: str = "vault", timeout: float = 30.0) -> None:
        if name == _LIVE_NAME:
            raise UnsafePath(f"lock name {name!r} is reserved for LivenessFence. Fix: choose another name.")
        self.path = _lock_path(vault_root, name)
        self.name = name
        self.timeout = timeout
        self._lock = _shared_lock(self.path, thread_local=True)
        self._gate = _process_gate(self.path)

    @property
    def held_by_me(self) -> bool:
        """True while the calling thread holds this lock (at any nesting depth)."""
        return self._lock.is_locked

    def acquire(self) -> None:
        """Take the lock: first this process's gate, then the file lock.

        Threads of one process (an owner's writer, committer, intake worker and vector queue)
        queue on the gate, a thread lock that hands over the moment its holder lets go; only
        its holder contends for the file lock, with other processes. Without the gate every
        waiting thread polled the file lock, and under load each acquisition cost tens of
        milliseconds of polling.

        Between processes filelock polls; a process that releases and re-takes the lock in a
        loop (many `remember` calls) would then starve a poller for as long as it runs. So a
        waiter also blocks in `flock` on a second descriptor: the kernel wakes it the moment the
        holder lets go, it hands its place over to the shared lock at once, and the loop cannot
        win every gap.
        """
        deadline = None if self.timeout < 0 else time.monotonic() + self.timeout
        if not self._gate.acquire(timeout=-1 if deadline is None else self.timeout):
            self._raise_timeout()
        try:
            self._acquire_file_lock(deadline)
        except BaseException:
            self._gate.release()
            raise

    def _acquire_file_lock(self, deadline: float | None) -> None:
        if self._lock.is_locked:  # re-entrant: this thread already holds it
            self._lock.acquire()
            return
        while True:
            try:
                self._lock.acquire(timeout=0.05, poll_interval=0.001)
                return
            except Timeout:
                pass
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            _wait_for_release(self.path, remaining)
        self._raise_timeout()

    def _raise_timeout(self) -> None:
        raise VaultLocked(
            f"Timed out after {self.timeout:g}s waiting for the {self.name!r} lock ({self.path}): "
            f"another memvault process (or thread) holds it. "
            f"Fix: wait for it to finish and retry, or stop the other process (watch, MCP server, agent host)."
        )

    def release(self) -> None:
        self._lock.release()
        self._gate.release()

    def __enter__(self) -> VaultLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _wait_for_release(path: Path, timeout: float | None) -> None:
    """Block (up to `timeout`) until the lock file is free, queued in the kernel's flock wait.

    The wait runs on a helper thread holding its own descriptor; when it gets the lock it lets
    go at once (the caller then takes the shared lock). A wait that outlives `timeout` is
    abandoned and cleans up after itself whenever the kernel finally wakes it.
    """
    woke = threading.Event()

    def wait() -> None:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
            woke.set()

    threading.Thread(target=wait, name="memvault-lock-wait", daemon=True).start()
    woke.wait(timeout)


def replace_if_unchanged(path: Path, expected: bytes | None, new: bytes, *, mode: int = 0o644,
                         boundary: Callable[[str], None] | None = None) -> None:  # fmt: skip
    """Compare-and-swap: write ``new`` only if ``path`` still holds ``expected`` (None: absent).

    The caller must hold the ``VaultLock`` that guards ``path`` across this call: without it
    another memvault writer could slip in between the re-read and the replace. The comparison
    then catches writers that never take our lock, such as a person saving in an editor, or
    a read done before the lock was taken. Raises ``Conflict`` and writes nothing on mismatch.
    """
    try:
        current: bytes | None = read_bytes_nofollow(path)
    except FileNotFoundError:
        current = None
    if current != expected:
        raise Conflict(f"{path} changed since it was read; re-read and retry.")
    atomic_write(path, new, mode=mode, boundary=boundary)


class LivenessFence:
    """Declares "a live memvault process owns this vault" for as long as it runs.

    Long-running processes (watch, MCP server, agent host) hold it; maintenance commands that
    need a stopped agent check ``is_held_elsewhere()`` and refuse. The OS drops the lock when
    the holder dies, even by SIGKILL, so the lock is the truth; ``live.json`` is a note for
    operators and may be stale after a crash.

    Two kernel locks make it up. ``.locks/live.lock`` is the one people see; but ``rm -rf
    .locks`` (or ``git clean -fdx``) unlinks it, and a second process would then lock a new file
    beside the first holder's orphaned inode. So the holder also flocks the vault folder itself
    (an open descriptor of the directory): deleting files cannot take that lock away, and every
    process that opens the vault by any path meets the same inode. The fence is held elsewhere
    while either lock is.
    """

    def __init__(self, vault_root: Path) -> None:
        self.path = _lock_path(vault_root, _LIVE_NAME)
        self.info_path = self.path.with_name(_LIVE_NAME + ".json")
        # Process-wide (not per thread): the fence marks a process, whichever thread holds it.
        self._lock = _shared_lock(self.path, thread_local=False)
        self._vault_root = Path(vault_root).resolve()

    def hold(self) -> LivenessFence:
        """Take the fence without waiting; ``VaultLocked`` if another process has it."""
        with _fence_guard:
            first = not self._lock.is_locked
            if first:
                self._lock_root()
            try:
                self._lock.acquire(blocking=False)
            except Timeout:
                if first:
                    self._unlock_root()
                raise self._held_error(str(self.path)) from None
            if self._lock.lock_counter == 1:
                _held_inodes[self.path] = os.stat(self.path).st_ino  # the file we just locked
                self._write_note()
        return self

    def _held_error(self, what: str) -> VaultLocked:
        return VaultLocked(
            f"Another live memvault process owns this vault ({what}{self._describe_holder()}). "
            f"Fix: stop that process (watch, MCP server, agent host) before running this command."
        )

    def _lock_root(self) -> None:
        """Flock the vault folder (see the class docstring). A file system without flock on
        folders (some network mounts) leaves the fence file alone to say who owns the vault."""
        try:
            fd = os.open(self._vault_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return
        deadline = time.monotonic() + _ROOT_PROBE_RETRY_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                _root_locks[self.path] = fd
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:  # not a passing probe: a holder
                    os.close(fd)
                    raise self._held_error(f"it holds a lock on the vault folder {self._vault_root}") from None
                time.sleep(0.02)
            except OSError:
                os.close(fd)
                return

    def _unlock_root(self) -> None:
        fd = _root_locks.pop(self.path, None)
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the flock

    def _root_held_elsewhere(self) -> bool:
        """Probe the vault folder's lock with a shared flock: probes never block each other."""
        try:
            fd = os.open(self._vault_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
        return False

    def _write_note(self) -> None:
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        info = {"pid": os.getpid(), "started_at": started}
        atomic_write(self.info_path, json.dumps(info, sort_keys=True).encode() + b"\n", mode=0o600)

    def release(self) -> None:
        """Give the fence up. The note goes first, so it never names the next holder's lock as ours;
        the vault folder's lock goes last."""
        with _fence_guard:
            last = self._lock.lock_counter == 1
            if last:
                if self.intact():
                    try:
                        self.info_path.unlink(missing_ok=True)
                    except OSError:
                        pass  # a file system gone read-only: the lock below is the truth, not the note
                _held_inodes.pop(self.path, None)
                for fd in _reasserted.pop(self.path, []):
                    os.close(fd)
            self._lock.release()
            if last:
                self._unlock_root()

    def intact(self) -> bool:
        """While held: True if the fence file on disk is still the one this process locked.

        `git clean -fdx` or `rm -rf .locks` removes it from under a live holder; the lock then
        guards an unlinked inode that no other process can see, and a second owner could start.
        """
        held = _held_inodes.get(self.path)
        if held is None:
            return False
        try:
            return os.stat(self.path).st_ino == held
        except OSError:
            return False

    def reassert(self) -> None:
        """Re-create a deleted fence file and lock it again (held: `intact()` was False).

        Raises ``VaultLocked`` when another process took the re-created fence first: then two
        processes believe they own the vault, and the caller must say so and step down.
        """
        path = _lock_path(self._vault_root, _LIVE_NAME)  # re-creates .locks/ (0700) too
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, _LOCK_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise VaultLocked(
                f"The liveness fence {path} was deleted and another process locked a new one before "
                f"this owner (pid {os.getpid()}) could: two processes now claim the vault. "
                f"Fix: stop one of them (memvault engine status)."
            ) from None
        _reasserted.setdefault(self.path, []).append(fd)
        _held_inodes[self.path] = os.fstat(fd).st_ino
        self._write_note()

    def is_held_elsewhere(self) -> bool:
        """True if another process holds the fence (probe: a non-blocking acquire, then release)."""
        if self._lock.is_locked:
            return False
        if self._root_held_elsewhere():
            return True
        try:
            self._lock.acquire(blocking=False)
        except Timeout:
            return True
        self._lock.release()
        return False

    def holder_info(self) -> dict[str, object] | None:
        """The operator note (pid, started_at) if present and readable; advisory only."""
        try:
            info = json.loads(read_bytes_nofollow(self.info_path))
        except (OSError, ValueError, UnsafePath):
            return None
        return info if isinstance(info, dict) else None

    def _describe_holder(self) -> str:
        info = self.holder_info()
        if info:
            return f"; live.json says pid {info.get('pid')} since {info.get('started_at')}"
        pid = fence_holder_pid(self._vault_root)  # the note was deleted with .locks/
        return f"; the kernel says pid {pid} holds it" if pid else ""

    def __enter__(self) -> LivenessFence:
        return self.hold()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def pid_alive(pid: object) -> bool:
    """Whether process `pid` exists and has not exited (one we may not signal counts as alive;
    a zombie, dead but not yet reaped by its parent, does not)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _process_state(pid) not in ("Z", "X")


def process_stopped(pid: int) -> bool:
    """True while `pid` is stopped (SIGSTOP, job control, a tracer): it cannot act on a signal."""
    return _process_state(pid) in ("T", "t")


def _process_state(pid: int) -> str | None:
    """The one-letter state of /proc/<pid>/stat (Linux), or None where there is no such file."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat_line = handle.read(4096)
    except OSError:
        return None
    # the name in parentheses may itself hold ") ": the state follows the last one
    after = stat_line.rpartition(b") ")[2]
    return after[:1].decode("ascii", "replace") or None


def fence_holder_pid(vault_root: Path) -> int | None:
    """The pid that holds the vault's ownership lock, as the kernel records it (/proc/locks), or None.

    Found from the vault folder itself, so it answers when `.locks/` and every status note are gone.
    """
    try:
        inode = os.stat(vault_root).st_ino
        device = os.stat(vault_root).st_dev
        with open("/proc/locks", "rb") as handle:
            table = handle.read(1 << 20).decode("ascii", "replace")
    except OSError:
        return None
    wanted = f"{os.major(device):02x}:{os.minor(device):02x}:{inode}"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted and fields[4].isdigit():
            return int(fields[4])
    return None
