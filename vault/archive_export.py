"""`memvault export`: an archive of the vault's canonical state, taken consistently beside live writers.

Export is read-only on the vault and safe while an agent runs: the copy is taken while holding
every writer's lock (`writer_locks`: intake, runtime, documents, then the vault lock, in that
fixed order; no writer nests two of them), so no half-finished write is copied, into a private
staging folder beside the destination; the locks are released before compression. The archive
is written to a temp file, fsynced, and renamed into place with mode 0600 (it holds private
intake state). The format is described in `vault/archive.py`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memvault.vault.archive import (
    CANONICAL_DIRS,
    CANONICAL_FILES,
    DEFAULT_LIMITS,
    MANIFEST_NAME,
    ArchiveLimits,
    ArchiveMember,
    manifest_bytes,
    member_mode,
    writer_locks,
)
from memvault.vault.errors import Conflict, InvalidRecord
from memvault.vault.fsio import fsync_dir, remove_quietly, write_temp
from memvault.vault.paths import is_ignored_name

_CHUNK = 1 << 20


@dataclass(frozen=True)
class ExportReport:
    archive: str
    files: int
    bytes: int
    consistent: bool  # False only for a read-only vault, whose files nobody can be writing
    skipped: tuple[str, ...]  # symlinks and special files, never followed or copied

    def to_json(self) -> dict:
        return {"archive": self.archive, "files": self.files, "bytes": self.bytes, "consistent": self.consistent,
                "skipped": list(self.skipped)}  # fmt: skip


def export_vault(root: Path, destination: Path, *, now: datetime | None = None, overwrite: bool = False,
                 limits: ArchiveLimits = DEFAULT_LIMITS, lock_timeout: float = 30.0) -> ExportReport:  # fmt: skip
    """Write an archive of `root`'s canonical state to `destination` (see the module docstring)."""
    root, destination = Path(root), Path(os.path.abspath(destination))
    _check_destination(root, destination, overwrite)
    now = now or datetime.now(UTC)
    staging = Path(tempfile.mkdtemp(prefix=".memvault-export-", dir=destination.parent))
    try:
        with writer_locks(root, lock_timeout, allow_read_only=True) as consistent:
            members, skipped = _copy_canonical(root, staging, limits)
        manifest = manifest_bytes(members, now, consistent)
        _write_archive(destination, staging, manifest, members, now, overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportReport(str(destination), len(members), sum(m.size for m in members), consistent, tuple(skipped))


def _check_destination(root: Path, destination: Path, overwrite: bool) -> None:
    real_root, real_parent = os.path.realpath(root), os.path.realpath(destination.parent)
    inside = os.path.relpath(real_parent, real_root).split(os.sep)[0]
    if inside in CANONICAL_DIRS or inside == ".index":
        raise InvalidRecord(f"{destination} is inside the vault's {inside}/ folder: write the archive somewhere else")
    if not destination.parent.is_dir():
        raise InvalidRecord(f"{destination.parent} is not a folder: create it or choose another path")
    if os.path.lexists(destination) and not overwrite:
        raise Conflict(f"{destination} already exists: choose another name, or pass --force to replace it")


def _copy_canonical(root: Path, staging: Path, limits: ArchiveLimits) -> tuple[list[ArchiveMember], list[str]]:
    members: list[ArchiveMember] = []
    skipped: list[str] = []
    for relpath, kind in _canonical_entries(root):
        if kind != "file":
            skipped.append(f"{relpath} ({kind}: not copied)")
            continue
        members.append(_copy_member(root, staging, relpath, limits))
        if len(members) > limits.max_members:
            raise InvalidRecord(f"the vault holds more than {limits.max_members} files: too many for one archive")
    if sum(member.size for member in members) > limits.max_total_bytes:
        raise InvalidRecord(
            f"the vault's canonical files exceed {limits.max_total_bytes} bytes: too big for one archive"
        )
    return sorted(members, key=lambda member: member.path), skipped


def _canonical_entries(root: Path) -> Iterator[tuple[str, str]]:
    """(relpath, "file" | "symlink" | "special file" | "not a folder") for every canonical entry, sorted."""
    for name in sorted(CANONICAL_FILES + CANONICAL_DIRS):
        try:
            info = os.lstat(root / name)
        except FileNotFoundError:
            continue
        if name not in CANONICAL_DIRS:
            yield name, _kind(info.st_mode)
        elif stat.S_ISDIR(info.st_mode):
            yield from _walk(root, name)
        else:
            yield name, "not a folder" if stat.S_ISREG(info.st_mode) else _kind(info.st_mode)


def _walk(root: Path, relpath: str) -> Iterator[tuple[str, str]]:
    with os.scandir(root / relpath) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    for entry in entries:
        if is_ignored_name(entry.name):
            continue  # editor temp files and our own atomic-write temps are not state
        child = f"{relpath}/{entry.name}"
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            yield from _walk(root, child)
        else:
            yield child, _kind(mode)


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    return "symlink" if stat.S_ISLNK(mode) else "special file"


def _copy_member(root: Path, staging: Path, relpath: str, limits: ArchiveLimits) -> ArchiveMember:
    fd = os.open(root / relpath, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(fd)
        if info.st_size > limits.max_member_bytes:
            raise InvalidRecord(
                f"{relpath} is {info.st_size} bytes; an archive member may be at most {limits.max_member_bytes}:"
                " shrink or move it before exporting"
            )
        target = staging / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        digest, size = hashlib.sha256(), 0
        with open(target, "wb") as copy:
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
                copy.write(chunk)
                size += len(chunk)
    return ArchiveMember(relpath, size, digest.hexdigest(), member_mode(relpath, info.st_mode))


def _write_archive(destination: Path, staging: Path, manifest: bytes, members: list[ArchiveMember],
                   now: datetime, overwrite: bool) -> None:  # fmt: skip
    def stream(raw) -> None:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as compressed:
            with tarfile.open(fileobj=compressed, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                _add(tar, MANIFEST_NAME, 0o644, len(manifest), io.BytesIO(manifest), now)
                for member in members:
                    with open(staging / member.path, "rb") as data:
                        _add(tar, member.path, member.mode, member.size, data, now)

    tmp = write_temp(destination.parent, destination.name, stream, mode=0o600)
    try:
        if overwrite:
            os.replace(tmp, destination)
        else:  # no-clobber: link fails if the name appeared meanwhile
            os.link(tmp, destination)
            os.unlink(tmp)
    except BaseException:
        remove_quietly(tmp)
        raise
    fsync_dir(destination.parent)


def _add(tar: tarfile.TarFile, name: str, mode: int, size: int, data, now: datetime) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.type = size, mode, int(now.timestamp()), tarfile.REGTYPE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, data)
