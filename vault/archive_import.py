"""Bringing an archive into a stopped vault: `import apply` (merge) and `import restore` (replace).

Both refuse while another live process owns the vault (the LivenessFence: an agent host, the
MCP server, `watch`), then take the fence themselves and every writer's lock for the rest. Both
read the whole archive once (`verify_archive`) before writing anything at all; a hostile or
damaged archive is refused at that point with every problem listed. Only then is it read a
second time into a private staging folder inside the vault (`.import-staging-*`, re-verified on
the way, so an archive swapped between the two reads is refused too) and placed:

* apply adds files the vault does not have. A file that exists with other bytes is a conflict,
  and any conflict refuses the whole import with the list (nothing is added). The vault keeps
  its own `memvault.json`, `.gitignore`, `.gitattributes` and `index.md` (configuration and a regenerated view,
  not memories). New files are hard-linked into place, which never overwrites.
* restore replaces the canonical state: each canonical top-level entry is renamed into a backup
  folder and the archive's is renamed into place; then the backup is deleted. Restore may also
  create a vault in an empty or missing folder.

Renames are atomic one entry at a time, not across entries. If a restore is interrupted, run
the same restore again: it converges on the archive's state. `.import-backup-*` then still holds
the files from before the interrupted restore, for you to inspect and delete.

The caller rebuilds the derived index afterwards (the CLI does).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from memvault.vault.archive import (
    CANONICAL_DIRS,
    CANONICAL_FILES,
    DEFAULT_LIMITS,
    ArchiveLimits,
    ArchiveRejected,
    VerifiedArchive,
    is_private,
    scan_archive,
    verify_archive,
    writer_locks,
)
from memvault.vault.errors import Conflict, NotAVault, UnsafePath
from memvault.vault.fsio import MACHINE_DIR_MODE, PUBLIC_DIR_MODE, fsync_dir, make_dir, read_bytes_nofollow
from memvault.vault.layout import CONFIG_FILE, DAILY
from memvault.vault.locks import LivenessFence
from memvault.vault.paths import resolve_inside

#: apply keeps the vault's own copy of these (configuration and a regenerated view)
APPLY_KEEPS = ("memvault.json", ".gitignore", ".gitattributes", "index.md")
STAGING_PREFIX, BACKUP_PREFIX = ".import-staging-", ".import-backup-"
_MAX_LISTED = 50


@dataclass(frozen=True)
class ImportReport:
    mode: str  # "apply" | "restore"
    added: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # apply: the vault's own copy was kept (APPLY_KEEPS)
    restored: int = 0
    leftovers: tuple[str, ...] = ()  # earlier interrupted restores' backups, for the operator

    def to_json(self) -> dict:
        return {"mode": self.mode, "added": list(self.added), "unchanged": len(self.unchanged),
                "kept": list(self.kept), "restored": self.restored, "leftovers": list(self.leftovers)}  # fmt: skip


# --- apply ----------------------------------------------------------------------------------------


def apply_archive(root: Path, source: Path, *, limits: ArchiveLimits = DEFAULT_LIMITS,
                  lock_timeout: float = 30.0) -> ImportReport:  # fmt: skip
    """Add the archive's files that the vault lacks; refuse everything on any conflict."""
    root = Path(root)
    if not (root / CONFIG_FILE).is_file():
        raise NotAVault(f"{root} is not a vault (no {CONFIG_FILE}): `import apply` merges into an existing vault")
    with _stopped_vault(root, lock_timeout):
        verified = verify_archive(source, limits)
        added, unchanged, kept, conflicts = _plan_apply(root, verified)
        if conflicts:
            raise _conflict_error(conflicts)
        if added:
            with _staging(root) as staging:
                _extract(source, limits, staging, set(added), verified)
                modes = {member.path: member.mode for member in verified.members}
                _place_new(root, staging, added, modes)
    return ImportReport("apply", tuple(added), tuple(unchanged), tuple(kept))


def _plan_apply(root: Path, verified: VerifiedArchive):
    added, unchanged, kept, conflicts = [], [], [], []
    for member in verified.members:
        state = _existing_state(root, member.path, member.sha256)
        if state == "missing":
            added.append(member.path)
        elif state == "same":
            unchanged.append(member.path)
        elif member.path in APPLY_KEEPS:
            kept.append(member.path)
        else:
            conflicts.append(f"{member.path}: {state}")
    return added, unchanged, kept, conflicts


def _existing_state(root: Path, relpath: str, sha256: str) -> str:
    """ "missing", "same", or why the vault's file conflicts with the archive's."""
    try:
        target = resolve_inside(root, relpath)
        info = os.lstat(target)
    except UnsafePath:
        return "the path goes through a symlink in the vault"
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "a parent folder is a file in the vault"
    if not stat.S_ISREG(info.st_mode):
        return "exists in the vault and is not a regular file"
    if hashlib.sha256(read_bytes_nofollow(target)).hexdigest() == sha256:
        return "same"
    return "exists in the vault with other content"


def _conflict_error(conflicts: list[str]) -> Conflict:
    shown = conflicts[:_MAX_LISTED]
    more = f"\n  … and {len(conflicts) - len(shown)} more" if len(conflicts) > len(shown) else ""
    return Conflict(
        f"the archive conflicts with {len(conflicts)} file(s) in the vault; nothing was imported:\n  "
        + "\n  ".join(shown)
        + more
        + "\nFix: merge or move those files by hand and import again, or use `memvault import restore`"
        " to replace the vault's state with the archive's."
    )


def _place_new(root: Path, staging: Path, added: list[str], modes: dict[str, int]) -> None:
    touched: set[Path] = set()
    for relpath in sorted(added):
        target = resolve_inside(root, relpath)
        _make_parents(root, relpath, touched)
        os.chmod(staging / relpath, modes[relpath])
        try:
            os.link(staging / relpath, target)  # never overwrites: fails if the name appeared meanwhile
        except FileExistsError:
            raise Conflict(
                f"{relpath} appeared in the vault during the import (an editor?); the files before it in"
                " path order were added. Fix: run the same import again once nothing else writes the vault."
            ) from None
        touched.add(target.parent)
    for folder in sorted(touched, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(folder)


def _make_parents(root: Path, relpath: str, touched: set[Path]) -> None:
    parts = relpath.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        folder = resolve_inside(root, "/".join(parts[:depth]))
        if not folder.exists():
            mode = 0o700 if is_private(relpath) else 0o755
            os.mkdir(folder, mode)
            os.chmod(folder, mode)  # mkdir's mode is filtered by the umask
            touched.add(folder.parent)


# --- restore --------------------------------------------------------------------------------------


def restore_archive(root: Path, source: Path, *, limits: ArchiveLimits = DEFAULT_LIMITS,
                    lock_timeout: float = 30.0) -> ImportReport:  # fmt: skip
    """Replace the vault's canonical state with the archive's (or create the vault from it)."""
    root = Path(root)
    _check_restore_target(root)
    existed = root.exists()
    if not existed:
        verified = _verify_for_restore(source, limits)  # verified before the folder is created
        make_dir(root, PUBLIC_DIR_MODE, parents=True)
        fsync_dir(root.parent)
    with _stopped_vault(root, lock_timeout):
        if existed:
            verified = _verify_for_restore(source, limits)
        _remove_stale_staging(root)
        with _staging(root) as staging:
            verified = _extract(source, limits, staging, None, verified)
            _swap_in(root, staging, verified)
    leftovers = tuple(sorted(p.name for p in root.iterdir() if p.name.startswith(BACKUP_PREFIX)))
    return ImportReport("restore", restored=len(verified.members), leftovers=leftovers)


def _check_restore_target(root: Path) -> None:
    if not root.exists() or (root / CONFIG_FILE).is_file():
        return
    if not root.is_dir():
        raise NotAVault(f"{root} exists and is not a folder: restore into a vault or an empty folder")
    if any(True for _ in root.iterdir()):
        raise NotAVault(
            f"{root} is neither a vault nor empty: restore into an existing vault, an empty folder or a new path"
        )


def _verify_for_restore(source: Path, limits: ArchiveLimits) -> VerifiedArchive:
    verified = verify_archive(source, limits)
    if CONFIG_FILE not in verified.paths():
        raise ArchiveRejected([f"the archive has no {CONFIG_FILE}: a restore needs the vault's configuration"])
    return verified


def _swap_in(root: Path, staging: Path, verified: VerifiedArchive) -> None:
    _fix_modes(staging, verified)
    if not (staging / DAILY).exists():
        os.mkdir(staging / DAILY, 0o755)
        os.chmod(staging / DAILY, 0o755)
    backup = Path(tempfile.mkdtemp(prefix=BACKUP_PREFIX, dir=root))
    for top in sorted(CANONICAL_FILES + CANONICAL_DIRS):
        if os.path.lexists(root / top):
            os.rename(root / top, backup / top)
        if os.path.lexists(staging / top):
            os.rename(staging / top, root / top)
    fsync_dir(root)
    fsync_dir(backup)
    shutil.rmtree(backup, ignore_errors=True)


def _fix_modes(staging: Path, verified: VerifiedArchive) -> None:
    """Members get their archive mode (private state 0600); folders 0755, private ones 0700.
    Every staged folder is fsynced, so the files inside survive a crash once renamed into place."""
    for member in verified.members:
        os.chmod(staging / member.path, member.mode)
    for folder, _dirs, _files in os.walk(staging, topdown=False):
        path = Path(folder)
        if path != staging:
            relpath = path.relative_to(staging).as_posix()
            os.chmod(path, 0o700 if is_private(relpath) else 0o755)
        fsync_dir(path)


def _remove_stale_staging(root: Path) -> None:
    for entry in root.iterdir():
        if entry.name.startswith(STAGING_PREFIX) and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


# --- shared ---------------------------------------------------------------------------------------


@contextmanager
def _stopped_vault(root: Path, lock_timeout: float) -> Iterator[None]:
    """Own the vault (refused while a live process does) and hold every writer's lock."""
    with ExitStack() as stack:
        stack.enter_context(LivenessFence(root))
        stack.enter_context(writer_locks(root, lock_timeout))
        yield


@contextmanager
def _staging(root: Path) -> Iterator[Path]:
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=root))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _extract(source: Path, limits: ArchiveLimits, staging: Path, wanted: set[str] | None,
             verified: VerifiedArchive) -> VerifiedArchive:  # fmt: skip
    """Second read: verify again while writing the wanted members into staging."""

    def open_member(relpath: str):
        if wanted is not None and relpath not in wanted:
            return None
        target = staging / relpath
        make_dir(target.parent, MACHINE_DIR_MODE, parents=True)  # staging: private until it moves
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        return _SyncedFile(fd)

    second = scan_archive(source, limits, sink=open_member)
    if second.members != verified.members:
        raise ArchiveRejected(["the archive changed between verification and import: import it again"])
    return second


class _SyncedFile:
    """A staged member: written whole, then fsynced before it is closed."""

    def __init__(self, fd: int):
        self._fd = fd

    def write(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
