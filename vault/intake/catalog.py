"""The ledger's integrity catalog and the schema marker at the vault root.

The catalog is one fixed-size, owner-only file with 256 slots, one per ledger shard. Each slot
commits the shard's byte high-water mark and the SHA-256 of the shard's bytes up to that mark:

    memvault-intake-catalog v1\\n                         27-byte header
    00 0000000000000000 e3b0c442...52b855\\n               256 slots of 85 bytes:
    ...                                                 `<shard> <size, 16 hex> <sha256>`
    <sha256 of everything above>\\n                       65-byte seal

It is replaced atomically (temp + fsync + rename), after the shard append it covers has been
fsynced, so it never names bytes that are not durable. A missing, truncated or valid-looking
replacement shard no longer matches its slot and fails closed.

The schema marker (`<vault>/.capture-intake-schema`, 0600) is written right after the first
catalog. It proves the catalog has existed, so deleting both the ledger and the catalog looks
like tampering (refused), never like a vault that predates the ledger. The one crash window,
catalog created but marker not yet written, is recovered by writing the marker.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, replace

from memvault.vault.errors import InvalidRecord
from memvault.vault.fsio import atomic_write
from memvault.vault.intake.files import RESOLVED, CrashHook, IntakeDirs, hit, read_private

HEADER = b"memvault-intake-catalog v1\n"
SHARD_COUNT = 256
SLOT_BYTES = 85
SEAL_BYTES = 65
CATALOG_BYTES = len(HEADER) + SHARD_COUNT * SLOT_BYTES + SEAL_BYTES
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MARKER_BYTES = b"memvault intake ledger schema v1\n"
SHARD_SUFFIX = ".ledger"
_SEAL_RE = re.compile(rb"[0-9a-f]{64}\n")


class LedgerIntegrityError(InvalidRecord):
    """The permanent ledger, its catalog or the schema marker is missing, damaged or inconsistent."""

    code = "ledger_integrity"


@dataclass(frozen=True)
class Slot:
    size: int
    sha256: str


@dataclass(frozen=True)
class Catalog:
    slots: tuple[Slot, ...]
    #: False for the all-empty catalog of a vault that has never admitted anything (not on disk)
    on_disk: bool = True

    @classmethod
    def empty(cls, on_disk: bool) -> Catalog:
        return cls(tuple(Slot(0, EMPTY_SHA256) for _ in range(SHARD_COUNT)), on_disk)

    def with_slot(self, shard: int, slot: Slot) -> Catalog:
        slots = list(self.slots)
        slots[shard] = slot
        return replace(self, slots=tuple(slots), on_disk=True)


def shard_name(shard: int) -> str:
    return f"{shard:02x}{SHARD_SUFFIX}"


def render_catalog(catalog: Catalog) -> bytes:
    body = HEADER + b"".join(
        f"{index:02x} {slot.size:016x} {slot.sha256}\n".encode("ascii") for index, slot in enumerate(catalog.slots)
    )
    return body + hashlib.sha256(body).hexdigest().encode("ascii") + b"\n"


def _integrity(path: object, problem: str, fix: str) -> LedgerIntegrityError:
    return LedgerIntegrityError(
        f"{path}: {problem}. Intake is refused until this is repaired (fail closed). Fix: {fix}"
    )


_RESTORE = "restore .capture-intake/ and .capture-intake-schema from a backup (or git), then `memvault inspect`"


_SLOTS_RE = re.compile(rb"(?:[0-9a-f]{2} [0-9a-f]{16} [0-9a-f]{64}\n){%d}" % SHARD_COUNT)
_last_parsed: tuple[bytes, Catalog] | None = None  # admissions re-read an unchanged catalog, the worker its own


def parse_catalog(data: bytes, where: object, entry_bytes: int) -> Catalog:
    """The catalog in `data`; anything but the exact fixed layout with a matching seal fails."""
    global _last_parsed
    cached = _last_parsed
    if cached is not None and cached[0] == data:
        return cached[1]
    if len(data) != CATALOG_BYTES:
        raise _integrity(where, f"the catalog is {len(data)} bytes, not {CATALOG_BYTES}", _RESTORE)
    if not data.startswith(HEADER):
        raise _integrity(where, "the catalog header is not `memvault-intake-catalog v1`", _RESTORE)
    body, seal = data[:-SEAL_BYTES], data[-SEAL_BYTES:]
    if not _SEAL_RE.fullmatch(seal) or hashlib.sha256(body).hexdigest().encode("ascii") != seal[:64]:
        raise _integrity(where, "the catalog's seal does not match its slots (damaged or edited)", _RESTORE)
    if not _SLOTS_RE.fullmatch(body, len(HEADER)):
        raise _integrity(where, "a slot is malformed", _RESTORE)
    slots = []
    for index, line in enumerate(body[len(HEADER) :].split(b"\n")[:SHARD_COUNT]):
        size, sha = int(line[3:19], 16), line[20:84].decode("ascii")
        if int(line[:2], 16) != index or size % entry_bytes or (size == 0 and sha != EMPTY_SHA256):
            raise _integrity(
                where, f"slot {index:02x} is out of order or names an impossible shard size {size}", _RESTORE
            )
        slots.append(Slot(size, sha))
    catalog = Catalog(tuple(slots))
    _last_parsed = (data, catalog)
    return catalog


def commit_catalog(dirs: IntakeDirs, catalog: Catalog) -> None:
    """Replace the catalog atomically. Caller holds the intake lock and fsynced the shard first."""
    global _last_parsed
    data = render_catalog(catalog)
    atomic_write(dirs.catalog, data, mode=0o600)
    _last_parsed = (data, Catalog(catalog.slots))  # the next load of these very bytes (the worker's) parses nothing


def load_catalog(dirs: IntakeDirs, entry_bytes: int, *, create: bool, hook: CrashHook | None = None) -> Catalog:
    """The verified catalog; with `create`, a fresh vault gets its first catalog and marker.

    Without `create` (read-only callers such as inspect) nothing is written, and a vault that
    never admitted a turn gets an all-empty catalog that is not on disk.
    """
    if os.path.lexists(dirs.catalog):
        catalog = parse_catalog(read_private(dirs.catalog, CATALOG_BYTES), dirs.catalog, entry_bytes)
        _check_marker(dirs, create)
        return catalog
    if os.path.lexists(dirs.marker):
        raise _integrity(
            dirs.catalog,
            "the ledger catalog is missing but the schema marker says it existed (deleted ledger?)",
            _RESTORE,
        )
    _refuse_orphans(dirs)
    if not create:
        return Catalog.empty(on_disk=False)
    catalog = Catalog.empty(on_disk=True)
    commit_catalog(dirs, catalog)
    hit(hook, "catalog.created")
    atomic_write(dirs.marker, MARKER_BYTES, mode=0o600)
    return catalog


def _check_marker(dirs: IntakeDirs, create: bool) -> None:
    try:
        marker = read_private(dirs.marker, len(MARKER_BYTES))
    except FileNotFoundError:
        # The crash window between the first catalog and its marker: finish it.
        if create:
            atomic_write(dirs.marker, MARKER_BYTES, mode=0o600)
        return
    if marker != MARKER_BYTES:
        raise _integrity(dirs.marker, "the schema marker's bytes are not memvault's", _RESTORE)


def _refuse_orphans(dirs: IntakeDirs) -> None:
    """No catalog and no marker: only a vault that never resolved a turn may start a ledger."""
    ledger = dirs.ledger
    shards = sorted(n for n in os.listdir(ledger) if n.endswith(SHARD_SUFFIX)) if ledger.is_dir() else []
    if shards:
        raise _integrity(ledger, f"ledger shards {shards[:3]} exist without a catalog", _RESTORE)
    if dirs.list_folder(RESOLVED).ids:
        raise _integrity(
            dirs.catalog,
            "resolved receipts exist but the ledger catalog and schema marker are both missing",
            _RESTORE,
        )
