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
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
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


class _ProcessFlock:
    """The kernel lock on one lock file, held by whichever thread of this process holds its gate
    (so one holder at a time, and nesting is a count). Taking it is an open and a flock, letting
    it go a close: the lock file is opened afresh each time, so a deleted one is made again, and
    nothing else touches the disk. filelock did the same with a dozen system calls more, each a
    moment a busy owner's thread waits to get the interpreter back, on every write's path."""

    def __init__(self, path: Path):
        self.path = path
        #: this process's gate in front of the kernel lock (see VaultLock.acquire)
        self.gate = threading.RLock()
        self._fd: int | None = None
        self._depth = 0
        #: kernel waits given up on (`_KernelWait`) that have not let go yet: each takes the lock
        #: for a moment once the kernel hands it over
        self._abandoned = 0
        self._abandoned_guard = threading.Lock()

    @property
    def held(self) -> bool:
        return self._depth > 0

    def try_acquire(self) -> bool:
        """Take it without waiting (or nest); False while another process holds it. Gate held."""
        if self._depth:
            self._depth += 1
            return True
        fd = self.open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._depth = fd, 1
        return True

    def try_after_abandoned_waits(self, grace: float = 0.05) -> bool:
        """`try_acquire`, waiting (at most `grace` seconds) for this process's own abandoned
        waits to let go first: a timeout must not be caused by our own helper's moment."""
        deadline = time.monotonic() + grace
        while self._abandoned and time.monotonic() < deadline:
            if self.try_acquire():
                return True
            time.sleep(0.001)
        return self.try_acquire()

    def count_abandoned(self, change: int) -> None:
        with self._abandoned_guard:
            self._abandoned += change

    def adopt(self, fd: int) -> None:
        """Hold the lock through `fd`, which has just taken it (`_KernelWait`)."""
        self._fd, self._depth = fd, 1

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor of this open file lets the flock go

    def open(self) -> int:
        """A new descriptor of the lock file (made, 0600, if it is missing)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(self.path, flags, _LOCK_FILE_MODE)
        except FileNotFoundError:  # `.locks/` was removed (git clean): made again, private
            ensure_private_dir(self.path.parent)
            return os.open(self.path, flags, _LOCK_FILE_MODE)

    def forget_in_child(self) -> None:
        """After a fork, in the child: the parent's holds are not the child's. Its copy of a held
        descriptor is closed (while it stayed open, the parent's release would not free the
        kernel lock), and the gate, which a parent's thread may hold, is made anew."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self.gate, self._fd, self._depth, self._abandoned = threading.RLock(), None, 0, 0
        self._abandoned_guard = threading.Lock()


#: lock file -> this process's kernel lock on it (see VaultLock.acquire)
_flocks: dict[Path, _ProcessFlock] = {}


def _process_flock(path: Path) -> _ProcessFlock:
    with _registry_guard:
        flock = _flocks.get(path)
        if flock is None:
            flock = _flocks[path] = _ProcessFlock(path)
        return flock


def _forget_flocks_in_child() -> None:
    global _registry_guard
    _registry_guard = threading.Lock()  # a parent's thread may have held it at the fork
    for flock in _flocks.values():
        flock.forget_in_child()


os.register_at_fork(after_in_child=_forget_flocks_in_child)


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
        self._flock = _process_flock(self.path)

    @property
    def held_by_me(self) -> bool:
        """True while the calling thread holds this lock (at any nesting depth)."""
        if not self._flock.gate.acquire(blocking=False):
            return False  # another thread of this process holds it
        try:
            return self._flock.held
        finally:
            self._flock.gate.release()

    def acquire(self) -> None:
        """Take the lock: first this process's gate, then the file lock.

        Threads of one process (an owner's writer, committer, intake worker and vector queue)
        queue on the gate, a thread lock that hands over the moment its holder lets go; only
        its holder contends for the file lock, with other processes. Without the gate every
        waiting thread polled the file lock, and under load each acquisition cost tens of
        milliseconds of polling.

        Between processes, a waiter does not poll: a process that releases and re-takes the lock
        in a loop (many `remember` calls) would starve a poller for as long as it runs. It queues
        in the kernel's `flock` wait instead, on a descriptor that becomes the holder's the moment
        the kernel hands the lock over, so the loop cannot win the gap (`_KernelWait`).
        """
        deadline = None if self.timeout < 0 else time.monotonic() + self.timeout
        if not self._flock.gate.acquire(timeout=-1 if deadline is None else self.timeout):
            self._raise_timeout()
        try:
            self._acquire_file_lock(deadline)
        except BaseException:
            self._flock.gate.release()
            raise

    def _acquire_file_lock(self, deadline: float | None) -> None:
        while not self._flock.try_acquire():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                if self._flock.try_after_abandoned_waits():
                    return
                self._raise_timeout()
            if _KernelWait(self._flock).taken(remaining):
                return

    def _raise_timeout(self) -> None:
        raise VaultLocked(
            f"Timed out after {self.timeout:g}s waiting for the {self.name!r} lock ({self.path}): "
            f"another memvault process (or thread) holds it. "
            f"Fix: wait for it to finish and retry, or stop the other process (watch, MCP server, agent host)."
        )

    def release(self) -> None:
        self._flock.release()
        self._flock.gate.release()

    def __enter__(self) -> VaultLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class _KernelWait:
    """A helper thread queued in the kernel's flock wait on a fresh descriptor of the lock file.
    Once the kernel hands the lock over, that descriptor becomes the holder's: no gap for a
    process that lets go and takes it again in a loop to win. A wait its caller gives up on
    (`taken` timed out) lets the lock go the moment the kernel finally hands it over."""

    def __init__(self, flock: _ProcessFlock):
        self._flock = flock
        self._fd = flock.open()
        self._guard = threading.Lock()
        self._settled = threading.Event()
        self._state = "waiting"  # then "taken", "failed" or "abandoned"
        threading.Thread(target=self._wait, name="memvault-lock-wait", daemon=True).start()

    def _wait(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            outcome = "taken"
        except OSError:
            outcome = "failed"
        with self._guard:
            if self._state == "abandoned":
                os.close(self._fd)  # the waiter gave up: let go at once
                self._flock.count_abandoned(-1)
                return
            if outcome == "failed":
                os.close(self._fd)
            self._state = outcome
        self._settled.set()

    def taken(self, timeout: float | None) -> bool:
        """True once the lock is held through this wait's descriptor (adopted by the flock)."""
        self._settled.wait(timeout)
        with self._guard:
            if self._state == "taken":
                self._flock.adopt(self._fd)
                return True
            if self._state == "waiting":
                self._state = "abandoned"
                self._flock.count_abandoned(+1)
            return False


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
        started = datetime.now(UTC).isoformat(timespec="seconds")
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

    def is_held(self) -> bool:
        """True while any process holds the fence, this one included."""
        return self._lock.is_locked or self.is_held_elsewhere()

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
