"""Backup archives of a vault's canonical state: the format and its verification.

Format v1 is a gzip-compressed POSIX (pax) tar. Its first member is `memvault-archive.json`, the
manifest: format, version, creation time, whether the copy was taken under the vault's locks,
and for every other member its vault-relative path, size, SHA-256 and mode. The other members
are regular files, and only canonical ones (`CANONICAL_FILES`, and files below
`CANONICAL_DIRS`): never `.index/` (derived), `.locks/`, editor temp files or symlinks.

Export (`vault/archive_export.py`) copies these under every writer's lock (`writer_locks`);
import (`vault/archive_import.py`) verifies an archive completely before it writes anything.

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
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from memvault.vault.errors import InvalidRecord
from memvault.vault.locks import VaultLock
from memvault.vault.paths import is_ignored_name
from memvault.vault.strict_json import loads_strict

FORMAT, VERSION = "memvault-archive", 1
MANIFEST_NAME = "memvault-archive.json"
CANONICAL_FILES = (
    "memvault.json", "index.md", "graph.jsonl", ".replay-projection-v1.json", ".capture-intake-schema", ".gitignore",
    ".gitattributes",
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
            "the archive was refused before anything was written:\n  "
            + "\n  ".join(shown)
            + more
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

    def paths(self) -> set[str]:
        return {member.path for member in self.members}


def is_private(path: str) -> bool:
    return path.split("/", 1)[0] in PRIVATE_TOPS


def member_mode(path: str, mode: int) -> int:
    """The mode a member is written with: private state 0600, else 0644 unless it was 0600."""
    return 0o600 if is_private(path) or not mode & 0o044 else 0o644


def manifest_bytes(members: list[ArchiveMember], now: datetime, consistent: bool) -> bytes:
    body = {
        "format": FORMAT,
        "version": VERSION,
        "createdAt": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "consistent": consistent,
        "members": [member.to_json() for member in members],
    }
    return (json.dumps(body, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode("utf-8")


# --- locks ---------------------------------------------------------------------------------------


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
        body = loads_strict(raw)
        return _parse_manifest(body, limits)
    except (ValueError, TypeError, KeyError) as exc:
        problems.append(f"{MANIFEST_NAME} is malformed ({str(exc)[:200]})")
        return None


def _parse_manifest(body: object, limits: ArchiveLimits) -> dict:
    if not isinstance(body, dict) or set(body) != {"format", "version", "createdAt", "consistent", "members"}:
        raise ValueError("unexpected fields")
    if body["format"] != FORMAT or body["version"] != VERSION:
        raise ValueError(
            f"format {body['format']!r} version {body['version']!r}; this memvault reads {FORMAT} v{VERSION}"
        )
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
