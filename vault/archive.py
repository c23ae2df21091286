"""Backup archives of a vault's canonical state: the format, its verification, and export.

Format v1 is a gzip-compressed POSIX (pax) tar. Its first member is `memvault-archive.json`, the
manifest: format, version, creation time, whether the copy was taken under the vault's locks,
and for every other member its vault-relative path, size, SHA-256 and mode. The other members
are regular files, and only canonical ones (`CANONICAL_FILES`, and files below
`CANONICAL_DIRS`): never `.index/` (derived), `.locks/`, editor temp files or symlinks.

Export is read-only on the vault and safe while an agent runs: the copy is taken while holding
every writer's lock (intake, runtime, documents, then the vault lock, in that fixed order; no
writer nests two of them), so no half-finished write is copied, into a private staging folder
beside the destination; the locks are released before compression. The archive is written to a
temp file, fsynced, and renamed into place with mode 0600 (it holds private intake state).

Verification (`verify_archive`) reads the whole archive before anything is written anywhere and
refuses, listing every problem it found: a member that is not a regular file (symlink, hard
link, device, FIFO, folder), a path that is absolute, climbs with `..`, is not normalised, is
not canonical state, or repeats; a member or total size over `ArchiveLimits`; more members than
allowed; a missing or malformed manifest; any member whose size or hash disagrees with it.
Decompression is bounded too, so a small archive cannot expand without limit.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from vault.errors import Conflict, InvalidRecord
from vault.fsio import fsync_dir
from vault.locks import VaultLock
from vault.paths import is_ignored_name

FORMAT, VERSION = "memvault-archive", 1
MANIFEST_NAME = "memvault-archive.json"
CANONICAL_FILES = (
    "memvault.json", "index.md", "graph.jsonl", ".replay-projection-v1.json", ".capture-intake-schema", ".gitignore",
)  # fmt: skip
CANONICAL_DIRS = ("daily", "audit", "runtime", "documents", ".capture-intake")
#: owner-only state: restored 0700 (folders) / 0600 (files) whatever the archive says
PRIVATE_TOPS = (".capture-intake", ".capture-intake-schema", ".replay-projection-v1.json")
#: every writer's lock, in the one order export takes them
EXPORT_LOCKS = ("intake", "runtime", "documents", "vault")
_CHUNK = 1 << 20
_MAX_PROBLEMS = 50
_HEADER_ALLOWANCE = 4096  # decompressed bytes per member for tar and pax headers


@dataclass(frozen=True)
class ArchiveLimits:
    max_members: int = 100_000
    max_member_bytes: int = 64 * 1024 * 1024  # graph.jsonl may reach 64 MiB
    max_total_bytes: int = 2 * 1024 * 1024 * 1024
    max_manifest_bytes: int = 32 * 1024 * 1024
    max_archive_bytes: int = 2 * 1024 * 1024 * 1024
    max_path_chars: int = 512


DEFAULT_LIMITS = ArchiveLimits()


class ArchiveRejected(InvalidRecord):
    """The archive is not a safe, intact memvault archive; nothing was written."""

    code = "archive_rejected"

    def __init__(self, problems: list[str]):
        self.problems = problems
        shown = problems[:_MAX_PROBLEMS]
        more = f"\n  … and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        super().__init__(
            "the archive was refused before anything was written:\n  " + "\n  ".join(shown) + more
            + "\nFix: use an archive written by `memvault export`, unmodified."
        )


@dataclass(frozen=True)
class ArchiveMember:
    path: str
    size: int
    sha256: str
    mode: int  # 0o600 or 0o644

    def to_json(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "mode": f"{self.mode:04o}"}


@dataclass(frozen=True)
class VerifiedArchive:
    members: tuple[ArchiveMember, ...]
    created_at: str
    consistent: bool

    @property
    def total_bytes(self) -> int:
        return sum(member.size for member in self.members)

    def paths(self) -> set[str]:
        return {member.path for member in self.members}


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


def is_private(path: str) -> bool:
    return path.split("/", 1)[0] in PRIVATE_TOPS


def member_mode(path: str, mode: int) -> int:
    """The mode a member is written with: private state 0600, else 0644 unless it was 0600."""
    return 0o600 if is_private(path) or not mode & 0o044 else 0o644


# --- export --------------------------------------------------------------------------------------


def export_vault(root: Path, destination: Path, *, now: datetime | None = None, overwrite: bool = False,
                 limits: ArchiveLimits = DEFAULT_LIMITS, lock_timeout: float = 30.0) -> ExportReport:  # fmt: skip
    """Write an archive of `root`'s canonical state to `destination` (see the module docstring)."""
    root, destination = Path(root), Path(os.path.abspath(destination))
    _check_destination(root, destination, overwrite)
    now = now or datetime.now(timezone.utc)
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


@contextmanager
def writer_locks(root: Path, timeout: float, *, allow_read_only: bool = False) -> Iterator[bool]:
    """Hold every writer's lock, in the fixed order (yields True). With `allow_read_only`, a vault
    this process cannot write has no lock files to take and nobody writing it: yields False."""
    stack = ExitStack()
    try:
        for name in EXPORT_LOCKS:
            stack.enter_context(VaultLock(root, name, timeout=timeout))
        consistent = True
    except OSError:
        stack.close()
        if not allow_read_only or os.access(root, os.W_OK):
            raise
        consistent = False
    with stack:
        yield consistent


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
        raise InvalidRecord(f"the vault's canonical files exceed {limits.max_total_bytes} bytes: too big for one archive")
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
            yield name, "not a folder"


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


def manifest_bytes(members: list[ArchiveMember], now: datetime, consistent: bool) -> bytes:
    body = {
        "format": FORMAT,
        "version": VERSION,
        "createdAt": now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "consistent": consistent,
        "members": [member.to_json() for member in members],
    }
    return (json.dumps(body, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode("utf-8")


def _write_archive(destination: Path, staging: Path, manifest: bytes, members: list[ArchiveMember],
                   now: datetime, overwrite: bool) -> None:  # fmt: skip
    fd, tmp_name = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            os.fchmod(raw.fileno(), 0o600)
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as compressed:
                with tarfile.open(fileobj=compressed, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    _add(tar, MANIFEST_NAME, 0o644, len(manifest), io.BytesIO(manifest), now)
                    for member in members:
                        with open(staging / member.path, "rb") as data:
                            _add(tar, member.path, member.mode, member.size, data, now)
            raw.flush()
            os.fsync(raw.fileno())
        if overwrite:
            os.replace(tmp_name, destination)
        else:  # no-clobber: link fails if the name appeared meanwhile
            os.link(tmp_name, destination)
            os.unlink(tmp_name)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(destination.parent)


def _add(tar: tarfile.TarFile, name: str, mode: int, size: int, data, now: datetime) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.type = size, mode, int(now.timestamp()), tarfile.REGTYPE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, data)


# --- verification --------------------------------------------------------------------------------

#: receives members' bytes during a scan: sink(path) → a writable (write(chunk)…, close()) or None to skip
Sink = Callable[[str], "io.RawIOBase | None"]


def verify_archive(source: Path, limits: ArchiveLimits = DEFAULT_LIMITS) -> VerifiedArchive:
    """Read and check the whole archive without writing anything; ArchiveRejected lists every problem."""
    return scan_archive(source, limits, sink=None)


def scan_archive(source: Path, limits: ArchiveLimits, sink: Sink | None) -> VerifiedArchive:
    """Verify the archive; with `sink`, also hand each member's bytes to it (import's second pass)."""
    problems: list[str] = []
    try:
        with _open_archive(Path(source), limits) as tar:
            manifest, found = _scan_members(tar, limits, sink, problems)
    except ArchiveRejected:
        raise
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeError, ValueError) as exc:
        raise ArchiveRejected([f"not a readable gzip-compressed tar archive ({type(exc).__name__})"]) from None
    if manifest is None:
        problems.append(f"the first member must be {MANIFEST_NAME}: this is not a memvault archive")
    else:
        problems += _compare_with_manifest(manifest["members"], found)
    problems += _collisions(found)
    if problems:
        raise ArchiveRejected(problems)
    members = tuple(sorted(manifest["members"].values(), key=lambda member: member.path))
    return VerifiedArchive(members, manifest["createdAt"], manifest["consistent"])


@contextmanager
def _open_archive(source: Path, limits: ArchiveLimits) -> Iterator[tarfile.TarFile]:
    try:
        handle = open(source, "rb")
    except OSError as exc:
        raise InvalidRecord(f"cannot read the archive {source} ({exc.strerror}): check the path") from None
    with handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ArchiveRejected([f"{source} is not a regular file"])
        if info.st_size > limits.max_archive_bytes:
            raise ArchiveRejected([f"the archive is {info.st_size} bytes; the limit is {limits.max_archive_bytes}"])
        budget = limits.max_total_bytes + limits.max_manifest_bytes + (limits.max_members + 1) * _HEADER_ALLOWANCE
        stream = _Bounded(gzip.GzipFile(fileobj=handle, mode="rb"), budget)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            yield tar


class _Bounded(io.RawIOBase):
    """A read-only stream that refuses to yield more than `budget` bytes (decompression bombs)."""

    def __init__(self, inner, budget: int):
        self._inner, self._left = inner, budget

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size if size is not None and size >= 0 else _CHUNK)
        self._left -= len(data)
        if self._left < 0:
            raise ArchiveRejected(["the archive expands beyond the allowed total size (a decompression bomb?)"])
        return data


def _scan_members(tar, limits: ArchiveLimits, sink: Sink | None, problems: list[str]):
    manifest, found, total = None, {}, 0
    for index, member in enumerate(tar):
        if index > limits.max_members:
            raise ArchiveRejected([f"the archive holds more than {limits.max_members} members"])
        if index == 0 and member.name == MANIFEST_NAME and member.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
            manifest = _read_manifest(tar, member, limits, problems)
            continue
        problem = member_problem(member, limits)
        if problem is None and member.name in found:
            problem = f"{_show(member.name)}: duplicate member"
        if problem is not None:
            problems.append(problem)
            continue
        if member.size > limits.max_member_bytes:
            raise ArchiveRejected([f"{_show(member.name)} is {member.size} bytes; a member may be at most"
                                   f" {limits.max_member_bytes}"])  # fmt: skip
        total += member.size
        if total > limits.max_total_bytes:
            raise ArchiveRejected([f"the members add up to more than {limits.max_total_bytes} bytes"])
        found[member.name] = _read_member(tar, member, sink)
    return manifest, found


def member_problem(member: tarfile.TarInfo, limits: ArchiveLimits) -> str | None:
    """Why this tar member may not enter a vault, or None."""
    name = member.name
    if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
        kinds = {tarfile.SYMTYPE: "a symlink", tarfile.LNKTYPE: "a hard link", tarfile.DIRTYPE: "a folder entry",
                 tarfile.CHRTYPE: "a device", tarfile.BLKTYPE: "a device", tarfile.FIFOTYPE: "a FIFO"}  # fmt: skip
        return f"{_show(name)}: {kinds.get(member.type, 'not a regular file')}; archives carry regular files only"
    if "\x00" in name or "\\" in name or len(name) > limits.max_path_chars:
        return f"{_show(name)}: not a plain vault path"
    pure = PurePosixPath(name)
    if pure.is_absolute() or name.startswith("/"):
        return f"{_show(name)}: absolute path"
    parts = name.split("/")
    if ".." in parts:
        return f"{_show(name)}: climbs out with '..'"
    if any(part in ("", ".") for part in parts) or any(len(part.encode("utf-8")) > 255 for part in parts):
        return f"{_show(name)}: not a normalised path"
    top = parts[0]
    if not ((top in CANONICAL_FILES and len(parts) == 1) or (top in CANONICAL_DIRS and len(parts) > 1)):
        return f"{_show(name)}: not part of a vault's canonical state"
    if any(is_ignored_name(part) for part in parts[1:]):
        return f"{_show(name)}: a hidden or editor-temp name, which export never writes"
    return None


def _read_member(tar, member: tarfile.TarInfo, sink: Sink | None) -> tuple[int, str]:
    data = tar.extractfile(member)
    digest, size = hashlib.sha256(), 0
    out = sink(member.name) if sink is not None else None  # a sink may decline a member (None)
    try:
        while chunk := data.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if out is not None:
                out.write(chunk)
    finally:
        if out is not None:
            out.close()
    return size, digest.hexdigest()


def _read_manifest(tar, member: tarfile.TarInfo, limits: ArchiveLimits, problems: list[str]) -> dict | None:
    if member.size > limits.max_manifest_bytes:
        raise ArchiveRejected([f"the manifest is {member.size} bytes; the limit is {limits.max_manifest_bytes}"])
    raw = tar.extractfile(member).read()
    try:
        body = json.loads(raw, object_pairs_hook=_no_duplicate_keys)
        return _parse_manifest(body, limits)
    except (ValueError, TypeError, KeyError) as exc:
        problems.append(f"{MANIFEST_NAME} is malformed ({str(exc)[:200]})")
        return None


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def _parse_manifest(body: object, limits: ArchiveLimits) -> dict:
    if not isinstance(body, dict) or set(body) != {"format", "version", "createdAt", "consistent", "members"}:
        raise ValueError("unexpected fields")
    if body["format"] != FORMAT or body["version"] != VERSION:
        raise ValueError(f"format {body['format']!r} version {body['version']!r}; this memvault reads {FORMAT} v{VERSION}")
    if not isinstance(body["createdAt"], str) or not isinstance(body["consistent"], bool):
        raise ValueError("createdAt / consistent")
    entries = body["members"]
    if not isinstance(entries, list) or len(entries) > limits.max_members:
        raise ValueError("members must be a list within the member limit")
    members: dict[str, ArchiveMember] = {}
    for entry in entries:
        member = _parse_manifest_member(entry)
        if member.path in members:
            raise ValueError(f"{_show(member.path)} listed twice")
        members[member.path] = member
    return {"createdAt": body["createdAt"], "consistent": body["consistent"], "members": members}


def _parse_manifest_member(entry: object) -> ArchiveMember:
    if not isinstance(entry, dict) or set(entry) != {"path", "size", "sha256", "mode"}:
        raise ValueError("a member entry has unexpected fields")
    path, size, digest, mode = entry["path"], entry["size"], entry["sha256"], entry["mode"]
    if not isinstance(path, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError("a member entry has a bad path or size")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"{_show(path)} has a bad sha256")
    if mode not in ("0600", "0644"):
        raise ValueError(f"{_show(path)} has mode {str(mode)[:8]!r}; expected 0600 or 0644")
    return ArchiveMember(path, size, digest, member_mode(path, int(mode, 8)))


def _compare_with_manifest(listed: dict[str, ArchiveMember], found: dict[str, tuple[int, str]]) -> list[str]:
    problems = []
    for path in sorted(set(listed) - set(found)):
        problems.append(f"{_show(path)}: listed in the manifest but missing from the archive")
    for path in sorted(set(found) - set(listed)):
        problems.append(f"{_show(path)}: in the archive but not in the manifest")
    for path in sorted(set(listed) & set(found)):
        size, digest = found[path]
        if (size, digest) != (listed[path].size, listed[path].sha256):
            problems.append(f"{_show(path)}: size or SHA-256 differs from the manifest (corrupt or altered)")
    return problems


def _collisions(found: dict[str, tuple[int, str]]) -> list[str]:
    """A member that is also another member's folder cannot be placed."""
    folders = {"/".join(path.split("/")[:depth]) for path in found for depth in range(1, path.count("/") + 1)}
    return [f"{_show(path)}: is both a file and a folder in the archive" for path in sorted(folders & set(found))]


def _show(name: str) -> str:
    return json.dumps(name[:200], ensure_ascii=True)
