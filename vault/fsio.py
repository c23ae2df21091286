"""Durable file primitives: every byte memvault writes to a vault goes through here.

The protocol is the one in docs/durability.md: a temp file in the same folder, write, fsync,
``os.replace``, fsync the folder. A crash at any point leaves either the old bytes or the new
bytes, never a mix, and a failed write leaves no temp file behind. Paths inside the vault are
never followed through symlinks: a link where a vault file should be is refused, because it
would let a write escape the vault or alias another file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from memvault.vault.errors import UnsafePath

__all__ = [
    "append_durable",
    "atomic_write",
    "check_private_file",
    "ensure_private_dir",
    "fsync_dir",
    "fsync_file",
    "open_private",
    "read_bytes_nofollow",
    "read_small",
    "remove_if_unlocked",
    "remove_quietly",
    "StagedWrite",
    "write_temp",
]

_PRIVATE_DIR_MODE = 0o700
_GROUP_OTHER_BITS = 0o077
_READ_CHUNK = 1 << 20


def _symlink_refused(path: Path) -> UnsafePath:
    return UnsafePath(
        f"{path} is a symlink; memvault never follows links inside a vault. "
        f"Fix: replace the link with the real file or folder (or remove it)."
    )


def _is_symlink(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    """``os.open`` with O_NOFOLLOW, turning "the final component is a symlink" into UnsafePath.

    Linux reports that as ELOOP, or as ENOTDIR when O_DIRECTORY is also set.
    """
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(Path(path)):
            raise _symlink_refused(Path(path)) from exc
        raise


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte: os.write may write fewer than asked (signals, full disks, pipes)."""
    view = memoryview(data)
    written = 0
    while written < len(view):
        written += os.write(fd, view[written:])


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries, so a rename or create inside it survives a crash."""
    fd = _open_nofollow(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


Writer = Callable[[BinaryIO], None]


def write_temp(folder: Path, name: str, data: bytes | Writer, *, mode: int,
               boundary: Callable[[str], None] | None = None) -> Path:  # fmt: skip
    """A fsynced temp file in ``folder`` holding ``data`` with exactly ``mode``; its path.

    The unique ``mkstemp`` name (``.NAME.XXXX.tmp``, never a fixed ``.tmp``) keeps two writers
    from clobbering each other's temp file, and every reader of the vault skips such names.
    ``data`` is bytes, or a callable that writes into the open file (for streamed archives).
    ``fchmod`` sets ``mode`` whatever the umask. On any failure the temp file is removed.
    """
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        try:
            if callable(data):
                with os.fdopen(fd, "wb", closefd=False) as handle:
                    data(handle)
            else:
                _write_all(fd, data)
            if boundary is not None:
                boundary("written")
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        remove_quietly(tmp_name)
        raise
    return Path(tmp_name)


class StagedWrite:
    """The slow half of an `atomic_write` done before the caller's lock: the bytes in a fsynced
    temp file (`write_temp`'s name and mode), kept open under an exclusive `flock` so a sweep of
    stray temp files (`remove_if_unlocked`) leaves it alone while it lives. `rename_into` puts it in
    place (the half that must run under the lock) and `fsync_folder` makes that durable; `discard`
    (or leaving the `with` block) removes it if it was not renamed. A crash drops the flock with
    the process."""

    def __init__(self, folder: Path, name: str, data: bytes, *, mode: int,
                 boundary: Callable[[str], None] | None = None):  # fmt: skip

        self._stage = boundary or (lambda _name: None)
        while True:
            self._fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            if os.fstat(self._fd).st_nlink:
                break
            os.close(self._fd)  # swept between its creation and our flock (`remove_if_unlocked`): anew
        self.tmp: Path | None = Path(tmp_name)
        self._published: Path | None = None
        try:
            _write_all(self._fd, data)
            self._stage("written")
            os.fchmod(self._fd, mode)
            os.fsync(self._fd)
        except BaseException:
            self.discard()
            raise
        self._stage("fsynced")

    def rename_into(self, path: Path) -> None:
        """Rename into `path` (never through a symlink); `fsync_folder` makes the rename durable."""
        if _is_symlink(path):
            raise _symlink_refused(path)
        os.replace(self.tmp, path)
        self.tmp = None
        self._published = path
        self._stage("renamed")

    def fsync_folder(self) -> None:
        """fsync the folder renamed into (it may follow the caller's lock: the rename is visible
        to the lock's other holders at once, and durable once this returns)."""
        fsync_dir(self._published.parent)
        self._stage("committed")

    def discard(self) -> None:
        if self.tmp is not None:
            remove_quietly(self.tmp)
            self.tmp = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> StagedWrite:
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


def remove_if_unlocked(path: Path) -> bool:
    """Remove a temp file no live `StagedWrite` holds (a crash's leftover); False if one does or
    it is gone. It is removed while its flock is held here, and a `StagedWrite` that locks it
    after that sees it unlinked and starts a new one: never a record lost to the sweep."""
    try:
        fd = _open_nofollow(path, os.O_RDONLY)
    except FileNotFoundError:
        return False  # gone already: published or discarded
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.unlink(path)
    except (BlockingIOError, FileNotFoundError):
        return False
    finally:
        os.close(fd)
    return True


def atomic_write(path: Path, data: bytes | Writer, *, mode: int = 0o644,
                 boundary: Callable[[str], None] | None = None) -> None:  # fmt: skip
    """Replace ``path`` with ``data`` so that readers and crashes see old or new bytes only.

    Temp file in the same folder (`write_temp`), ``os.replace``, fsync the folder. If anything
    up to and including ``os.replace`` fails, the temp file is removed and the old bytes stay.
    If the final folder fsync fails, the new bytes are already visible but the rename may not
    yet be durable; the error is raised so the caller does not claim durability. ``boundary``
    is called with each stage ("written", "fsynced", "renamed", "committed") as it is passed
    (crash tests kill there).
    """
    path = Path(path)
    if _is_symlink(path):
        raise _symlink_refused(path)
    stage = boundary or (lambda _name: None)
    tmp = write_temp(path.parent, path.name, data, mode=mode, boundary=stage)
    stage("fsynced")
    try:
        # rename(2) replaces a symlink that appeared since the check, never its target.
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    stage("renamed")
    fsync_dir(path.parent)
    stage("committed")


def fsync_file(path: Path) -> None:
    """fsync a file some other library wrote by name (hnswlib's ``save_index``)."""
    fd = _open_nofollow(Path(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_quietly(name: str | Path) -> None:
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass


def _open_for_append(path: Path, mode: int) -> tuple[int, bool]:
    """Open for appending without following a final symlink; report whether we created it.

    The existing file first (the usual case: one open), else an exclusive create, so "newly
    created" is known exactly rather than guessed from a racy stat; a file that appears or
    disappears between the two opens sends us round again. O_NONBLOCK makes a FIFO planted at
    the path fail (ENXIO) instead of hanging; regular files ignore it.
    """
    base = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK
    for _ in range(8):
        try:
            return _open_nofollow(path, base), False
        except FileNotFoundError:
            pass
        try:
            return _open_nofollow(path, base | os.O_CREAT | os.O_EXCL, mode), True
        except FileExistsError:
            continue
    raise OSError(errno.EAGAIN, "file kept appearing and disappearing while opening", str(path))


def append_durable(path: Path, data: bytes, *, mode: int = 0o644) -> int:
    """Append ``data`` and fsync it; return the file offset where ``data`` starts.

    ``mode`` applies only when the file is created (set exactly, umask-proof); an existing
    file keeps its mode. A new file's folder entry is fsynced too, or a crash could lose the
    whole file. Appends are not atomic across a crash: a torn tail is possible, so callers hold
    a lock and frame their records so a partial last record is detectable.
    """
    path = Path(path)
    not_regular = UnsafePath(
        f"{path} is not a regular file. Fix: move it aside; memvault appends only to regular files."
    )
    try:
        fd, created = _open_for_append(path, mode)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise not_regular from exc
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise not_regular
        if created:
            os.fchmod(fd, mode)
        start = _append_and_locate(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)
    return start


def _append_and_locate(fd: int, data: bytes) -> int:
    if not data:
        return os.lseek(fd, 0, os.SEEK_END)
    _write_all(fd, data)
    # O_APPEND leaves the offset at the end of our last write; with the caller's lock held
    # nobody appended in between, so our bytes began len(data) earlier.
    return os.lseek(fd, 0, os.SEEK_CUR) - len(data)


def read_small(path: Path) -> bytes:
    """A small machine file's bytes (index pointers, Tantivy's meta.json) in the fewest system
    calls Python allows: open, read to the end, close. `Path.read_bytes` adds a stat, a terminal
    check and two seeks, and in a busy owner each system call may wait for the interpreter lock
    on its way back: the group commit reads two such files per batch, under the vault lock."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):  # not 1 MiB: a buffer that big is mapped and unmapped
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_bytes_nofollow(path: Path) -> bytes:
    """Read a whole regular file without following a final symlink.

    O_NONBLOCK keeps a FIFO planted at the path from hanging the reader; it has no effect on
    regular files. A missing file raises ``FileNotFoundError`` unchanged, so callers can tell
    "absent" from "unsafe".
    """
    path = Path(path)
    fd = _open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):  # as opening it as a file says: callers name the folder
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePath(f"{path} is not a regular file. Fix: move it aside; memvault reads only regular files.")
        # ask for a byte more than the file holds: a short read is a regular file's end, so a
        # note costs open, fstat, read and close; a file that grew meanwhile is read on
        first = os.read(fd, info.st_size + 1)
        if len(first) <= info.st_size:
            return first
        chunks = [first]
        while chunk := os.read(fd, _READ_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


#: folders people read and edit (the vault root, daily/, documents/, runtime/), and machine state
PUBLIC_DIR_MODE, MACHINE_DIR_MODE, MACHINE_FILE_MODE = 0o755, 0o700, 0o600


def make_dir(path: Path, mode: int, *, parents: bool = False) -> bool:
    """Create folder ``path`` with exactly ``mode`` whatever the umask (missing parents too, with
    the same mode, when ``parents``); an existing folder is left as it is. True if created."""
    path = Path(path)
    if parents and not path.parent.is_dir():
        make_dir(path.parent, mode, parents=True)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not path.is_dir():
            raise
        return False
    _chmod_dir_nofollow(path, mode)  # mkdir's mode is filtered by the umask
    return True


@contextmanager
def undone_if_failed(folders: Sequence[Path]) -> Iterator[None]:
    """Run a block that may create `folders` (parents first). If it raises, the ones it created
    that are still empty are removed, deepest first: a first write that fails (a full disk costs
    a folder no data block, so mkdir succeeds where the file after it cannot) leaves the vault as
    it found it. Callers hold the lock that guards these folders."""
    new = [Path(folder) for folder in folders if not os.path.lexists(folder)]
    try:
        yield
    except BaseException:
        for folder in reversed(new):
            try:
                os.rmdir(folder)
            except OSError:
                pass  # not empty (someone wrote into it), or already gone
        raise


def restrict_files(folder: Path, mode: int = MACHINE_FILE_MODE) -> None:
    """Give every regular file directly in ``folder`` exactly ``mode``: for files a library wrote
    with the umask's modes (Tantivy creates its segments 0666 under umask 000)."""
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False) and stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) != mode:
            os.chmod(entry.path, mode)


def ensure_private_dir(path: Path) -> Path:
    """Create (or vet) a 0700 folder we own; return ``path``.

    Private state (intake records, locks, sidecars) must not be readable by other users, and a
    folder owned by someone else could be swapped under us, so we refuse rather than adopt it.
    Missing parents are created 0700 too (whatever the umask).
    """
    path = Path(path)
    try:
        _vet_existing_dir(path)
        return path
    except FileNotFoundError:
        pass
    make_dir(path.parent, _PRIVATE_DIR_MODE, parents=True)
    try:
        os.mkdir(path, _PRIVATE_DIR_MODE)
    except FileExistsError:
        # Another process made it first: vet theirs instead of trusting it.
        _vet_existing_dir(path)
        return path
    _chmod_dir_nofollow(path, _PRIVATE_DIR_MODE)  # mkdir's mode is filtered by the umask
    fsync_dir(path.parent)
    return path


def _vet_existing_dir(path: Path) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _symlink_refused(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path} exists but is not a folder. Fix: move it aside so memvault can create the folder.")
    _refuse_foreign_owner(path, st)
    if st.st_mode & _GROUP_OTHER_BITS:
        _chmod_dir_nofollow(path, _PRIVATE_DIR_MODE)


def _chmod_dir_nofollow(path: Path, mode: int) -> None:
    fd = _open_nofollow(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _refuse_foreign_owner(path: Path, st: os.stat_result) -> None:
    me = os.geteuid()
    if st.st_uid != me:
        raise UnsafePath(
            f"{path} is owned by uid {st.st_uid}, not by the current user (uid {me}). "
            f"Fix: run memvault as uid {st.st_uid}, or `chown {me} {path}` if it is yours."
        )


def check_private_file(path: Path) -> None:
    """Refuse a private file (record, sidecar, catalog) that someone else could read or alias.

    Rules: not a symlink, a regular file, owned by us, exactly one hard link (a second link is
    another name that would see or survive our writes), no group/other permission bits.
    """
    path = Path(path)
    _refuse_unsafe_private(path, os.lstat(path))


def open_private(path: Path, flags: int = os.O_RDONLY) -> int:
    """An open descriptor of a private file that passed `check_private_file`'s rules, checked on
    the descriptor itself (no window between the check and the open, and half the system calls:
    in a busy owner every call gives up the interpreter lock, and each costs a wait to get back).
    A final symlink is refused (O_NOFOLLOW), a FIFO does not block (O_NONBLOCK).

    A file with no link left was replaced (`atomic_write`) between our open and our look at it:
    the name is opened again, so the caller gets the file the name holds now, never a stale one
    refused for having "0 hard links"."""
    path = Path(path)
    for _ in range(_REOPENS_OF_A_REPLACED_FILE):
        fd = _open_nofollow(path, flags | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            replaced = st.st_nlink == 0 and stat.S_ISREG(st.st_mode)
            if not replaced:
                _refuse_unsafe_private(path, st)
        except BaseException:
            os.close(fd)
            raise
        if not replaced:
            return fd
        os.close(fd)
    raise UnsafePath(
        f"{path} was replaced {_REOPENS_OF_A_REPLACED_FILE} times while memvault opened it. "
        f"Fix: stop whatever rewrites it in a loop, then run the command again."
    )


_REOPENS_OF_A_REPLACED_FILE = 64


def _refuse_unsafe_private(path: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise _symlink_refused(path)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{path} is not a regular file. Fix: move it aside; private state must be a regular file.")
    _refuse_foreign_owner(path, st)
    if st.st_nlink != 1:
        raise UnsafePath(
            f"{path} has {st.st_nlink} hard links; private files must have exactly one. "
            f"Fix: remove the other links, or copy it to a fresh file: `cp {path} {path}.new && mv {path}.new {path}`."
        )
    if st.st_mode & _GROUP_OTHER_BITS:
        raise UnsafePath(
            f"{path} is accessible to group/other (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"private files must be owner-only. Fix: `chmod 600 {path}`."
        )
