"""Where the intake lives on disk, and the one way its private files are read.

    <vault>/.capture-intake/            0700
        pending/<id>.json               0600  active records (state pending or awaiting_capture)
        dead/<id>.json                  0600  dead letters
        resolved/<id>.json              0600  resolved receipts (at most 4,096)
        ledger/<00..ff>.ledger          0600  permanent run-id + payload-hash commitments
        catalog                         0600  256-slot integrity catalog of the ledger shards
    <vault>/.capture-intake-schema      0600  schema marker: proves the catalog has existed

`<id>` is the SHA-256 (64 lowercase hex digits) of the provider's run id. Every intake file is
vetted before its bytes are trusted: a symlink, another owner, a second hard link, group/other
permission bits or an oversized file is refused with `UnsafePath`/`InvalidRecord`, never read.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from memvault.vault.errors import InvalidRecord, UnsafePath
from memvault.vault.fsio import ensure_private_dir, fsync_dir, open_private, remove_if_unlocked
from memvault.vault.paths import resolve_inside

INTAKE_DIR = ".capture-intake"
MARKER_NAME = ".capture-intake-schema"
CATALOG_NAME = "catalog"
PENDING, DEAD, RESOLVED, LEDGER = "pending", "dead", "resolved", "ledger"
RECORD_SUFFIX = ".json"

#: the spec's bound on one intake record (and on one receipt), in bytes
MAX_RECORD_BYTES = 640 * 1024

ID_RE = re.compile(r"[0-9a-f]{64}")
_RECORD_NAME_RE = re.compile(r"(?P<id>[0-9a-f]{64})\.json")

#: called with a boundary name at each named commit point; only the crash tests act on it
CrashHook = Callable[[str], None]


def hit(hook: CrashHook | None, boundary: str) -> None:
    """Report reaching a named commit boundary to the (test-only) crash hook."""
    if hook is not None:
        hook(boundary)


def is_intake_id(value: object) -> bool:
    return isinstance(value, str) and ID_RE.fullmatch(value) is not None


@dataclass(frozen=True)
class IntakeDirs:
    """The intake paths of one vault. Nothing is created until `ensure()` is called.

    The intake folder is checked for links (`resolve_inside`) once per instance: an admission
    makes one, and the worker one per round, so a link planted meanwhile is met by the next;
    every folder read and every file read checks its own target as well (`list_folder`,
    `read_private`)."""

    root: Path

    @cached_property
    def intake(self) -> Path:
        return resolve_inside(self.root, INTAKE_DIR)

    @cached_property
    def _folders(self) -> dict[str, Path]:
        return {name: self.intake / name for name in (PENDING, DEAD, RESOLVED, LEDGER)}

    def folder(self, name: str) -> Path:
        return self._folders.get(name) or self.intake / name

    @property
    def ledger(self) -> Path:
        return self.folder(LEDGER)

    @property
    def catalog(self) -> Path:
        return self.intake / CATALOG_NAME

    @property
    def marker(self) -> Path:
        return resolve_inside(self.root, MARKER_NAME)

    def record_path(self, folder: str, intake_id: str) -> Path:
        return self.folder(folder) / f"{intake_id}{RECORD_SUFFIX}"

    def exists(self) -> bool:
        return os.path.lexists(self.intake)

    def all_folders(self) -> list[Path]:
        """The intake folder and its subfolders, parents first."""
        return [self.intake, *(self.folder(name) for name in (PENDING, DEAD, RESOLVED, LEDGER))]

    def ensure(self) -> None:
        """Create (or vet) the 0700 intake folders; refuses symlinks and foreign owners."""
        for folder in self.all_folders():
            ensure_private_dir(folder)

    def list_folder(self, folder: str) -> FolderListing:
        """Record ids in one folder, plus our own stray temp files and anything unexpected."""
        directory = self.folder(folder)
        try:
            st = os.lstat(directory)
        except FileNotFoundError:
            return FolderListing((), (), ())
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(
                f"{directory} is not a real folder. Fix: move it aside; the intake folders must be 0700 folders."
            )
        ids, strays, foreign = [], [], []
        with os.scandir(directory) as entries:
            for entry in entries:
                match = _RECORD_NAME_RE.fullmatch(entry.name)
                if match is not None:
                    ids.append(match["id"])
                elif entry.name.startswith(".") and entry.name.endswith(".tmp"):
                    strays.append(entry.name)
                else:
                    foreign.append(entry.name)
        return FolderListing(tuple(sorted(ids)), tuple(sorted(strays)), tuple(sorted(foreign)))

    def remove_strays(self) -> int:
        """Delete temp files left by writes a crash interrupted. Caller holds the intake lock.

        Every intake writer holds that lock while it writes, so a temp file seen under it belongs
        to no live write (its rename never happened, its bytes were never part of the intake),
        except an admission's record staged before the lock (`StagedWrite`), which holds a flock
        on its temp file while it lives: such a file is left alone (`remove_if_unlocked`).
        """
        removed = 0
        for directory in (self.intake, *(self.folder(n) for n in (PENDING, DEAD, RESOLVED, LEDGER))):
            if not directory.is_dir() or directory.is_symlink():
                continue
            names = [n for n in os.listdir(directory) if n.startswith(".") and n.endswith(".tmp")]
            swept = sum(remove_if_unlocked(directory / name) for name in names)
            removed += swept
            if swept:
                fsync_dir(directory)
        return removed


@dataclass(frozen=True)
class FolderListing:
    ids: tuple[str, ...]
    strays: tuple[str, ...]
    foreign: tuple[str, ...]


def read_private(path: Path, limit: int = MAX_RECORD_BYTES) -> bytes:
    """The bytes of a vetted owner-only file of at most `limit` bytes.

    `FileNotFoundError` passes through so callers can tell "absent" from "unsafe". The size is
    checked on the open descriptor before reading, so a huge planted file costs nothing.
    """
    fd = open_private(path)
    with os.fdopen(fd, "rb", buffering=0) as handle:
        st = os.fstat(fd)
        if st.st_size > limit:
            raise InvalidRecord(
                f"{path} is {st.st_size} bytes; intake files are at most {limit} bytes. "
                f"Fix: move it aside (it was not written by memvault), then `memvault inspect`."
            )
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise InvalidRecord(f"{path} grew past {limit} bytes while being read. Fix: move it aside.")
    return data


def remove_durably(path: Path) -> bool:
    """Unlink a file and fsync its folder; False if it was already gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def move_durably(source: Path, target: Path) -> None:
    """Rename between two intake folders (same filesystem, atomic) and fsync both folders."""
    if os.path.lexists(target):
        raise InvalidRecord(
            f"{target} already exists; refusing to overwrite it. Fix: run `memvault inspect` and resolve by hand."
        )
    os.rename(source, target)
    fsync_dir(target.parent)
    fsync_dir(source.parent)
