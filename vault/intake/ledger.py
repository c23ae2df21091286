"""The permanent, content-free ledger: one fixed 129-byte entry per distinct run id, for ever.

An entry is the run id's SHA-256 and the payload's SHA-256 in lowercase hex, then LF:

    <64 hex: intake id><64 hex: payload sha256>\\n          = 129 bytes

Entries go to one of 256 append-only shards by the first byte of the intake id
(`ledger/00.ledger` ... `ledger/ff.ledger`, created lazily, 0600). The ledger outlives the
bounded receipts, so pruning a receipt never makes an old run admissible again: admission
consults the ledger first.

Every read checks the shard against its catalog slot: missing, shorter, or different bytes
below the committed high-water mark fail closed. Bytes *past* the mark are the one crash window
(append fsynced, catalog not yet committed). They are adopted only when every whole entry there
has an exact resolved receipt, after a torn partial entry is cut off and the same inode is
fsynced again; anything else fails closed.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from memvault.vault.errors import Conflict
from memvault.vault.fsio import append_durable, open_private
from memvault.vault.intake.catalog import (
    SHARD_COUNT,
    Catalog,
    LedgerIntegrityError,
    Slot,
    commit_catalog,
    load_catalog,
    shard_name,
)
from memvault.vault.intake.files import CrashHook, IntakeDirs, hit

ENTRY_BYTES = 129
_ENTRY_RE = re.compile(rb"([0-9a-f]{64})([0-9a-f]{64})\n")
_TORN_RE = re.compile(rb"[0-9a-f]{0,128}")
_READ_CHUNK = 1 << 20

#: intake id -> payload sha256 of its resolved receipt, or None when there is no receipt
ReceiptLookup = Callable[[str], "str | None"]


def shard_of(intake_id: str) -> int:
    return int(intake_id[:2], 16)


def render_entry(intake_id: str, payload_sha256: str) -> bytes:
    return f"{intake_id}{payload_sha256}\n".encode("ascii")


@dataclass
class ShardView:
    """One verified shard: its committed entries and whatever lies past the committed mark."""

    shard: int
    committed: dict[str, str] = field(default_factory=dict)
    committed_bytes: bytes = b""
    suffix: list[tuple[str, str]] = field(default_factory=list)
    torn: int = 0  # bytes of a partial entry at the very end


@dataclass(frozen=True)
class LedgerReport:
    entries: int
    shards: int
    uncommitted: int  # whole entries past a catalog mark (recoverable crash window)
    torn_bytes: int


class Ledger:
    """The ledger of one vault with its verified catalog. Writers hold the intake lock."""

    def __init__(self, dirs: IntakeDirs, *, create: bool, hook: CrashHook | None = None):
        self.dirs = dirs
        self.catalog: Catalog = load_catalog(dirs, ENTRY_BYTES, create=create, hook=hook)
        self._folder = dirs.ledger  # checked once (resolve_inside): every admission looks at all 256 shards
        #: shard -> (its slot when read, the view): a writer holding the intake lock reads a shard
        #: once however often it looks (lookup, recovery, append); every write here drops it
        self._views: dict[int, tuple[Slot, ShardView]] = {}

    def reloaded(self, hook: CrashHook | None = None) -> Ledger:
        """This ledger read again by a writer that has just taken the intake lock: the catalog
        loaded afresh (created if missing), the shard views kept where their slot is unchanged."""
        fresh = Ledger(self.dirs, create=True, hook=hook)
        fresh._views = {shard: known for shard, known in self._views.items() if fresh.catalog.slots[shard] == known[0]}
        return fresh

    def shard_path(self, shard: int) -> Path:
        return self._folder / shard_name(shard)

    # --- reading ----------------------------------------------------------------------------

    def read_shard(self, shard: int) -> ShardView:
        """The shard checked against its catalog slot (see the module docstring)."""
        slot = self.catalog.slots[shard]
        known = self._views.get(shard)
        if known is not None and known[0] == slot:
            return known[1]
        view = self._read_shard(shard, slot)
        self._views[shard] = (slot, view)
        return view

    def _read_shard(self, shard: int, slot: Slot) -> ShardView:
        path = self.shard_path(shard)
        try:
            data = _read_checked(path)
        except FileNotFoundError:
            if slot.size:
                raise _broken(path, f"the shard is missing but the catalog committed {slot.size} bytes") from None
            return ShardView(shard)
        if len(data) < slot.size:
            raise _broken(path, f"the shard is truncated: {len(data)} bytes, the catalog committed {slot.size}")
        if hashlib.sha256(data[: slot.size]).hexdigest() != slot.sha256:
            raise _broken(path, "the shard's bytes differ from what the catalog committed (replaced or edited)")
        view = ShardView(shard, committed_bytes=data[: slot.size])
        view.committed = _parse_entries(data[: slot.size], shard, path, {})
        rest = data[slot.size :]
        whole = len(rest) - len(rest) % ENTRY_BYTES
        if not _TORN_RE.fullmatch(rest[whole:]):
            raise _broken(path, "bytes past the committed mark are not a partial ledger entry")
        view.suffix = list(_parse_entries(rest[:whole], shard, path, view.committed).items())
        view.torn = len(rest) - whole
        return view

    def lookup(self, intake_id: str) -> str | None:
        """The committed payload sha256 of a run, or None. Uncommitted suffix entries do not count."""
        return self.read_shard(shard_of(intake_id)).committed.get(intake_id)

    def check_sizes(self) -> None:
        """Cheap whole-ledger check for every admission: no committed shard is missing or short.

        Hashing all 256 shards on every admission would cost O(ledger); the full comparison runs
        for the admitted run's own shard, at worker start, and in `inspect`.
        """
        folder = os.fspath(self._folder)  # plain strings: 256 lstat calls, no path objects built
        for shard, slot in enumerate(self.catalog.slots):
            if not slot.size:
                continue
            try:
                size = os.lstat(f"{folder}/{shard_name(shard)}").st_size
            except FileNotFoundError:
                size = None
            if size is None or size < slot.size:  # the path object is made only to name a broken shard
                found = "missing" if size is None else f"truncated: {size} bytes,"
                raise _broken(
                    self.shard_path(shard), f"the shard is {found} but the catalog committed {slot.size} bytes"
                )

    def report(self, receipts: ReceiptLookup | None = None) -> LedgerReport:
        """Read-only verification of every shard (inspect, health).

        With `receipts`, an uncommitted entry without an exact receipt is reported as the
        fail-closed problem recovery would raise.
        """
        entries = shards = uncommitted = torn = 0
        for shard in range(SHARD_COUNT):
            view = self.read_shard(shard)
            shards += os.path.lexists(self.shard_path(shard))
            entries += len(view.committed)
            uncommitted += len(view.suffix)
            torn += view.torn
            orphans = [i for i, sha in view.suffix if receipts is not None and receipts(i) != sha]
            if orphans:
                raise _broken(
                    self.shard_path(shard),
                    f"{len(orphans)} entries past the committed mark have no exact resolved receipt",
                )
        return LedgerReport(entries, shards, uncommitted, torn)

    # --- writing (intake lock held) ---------------------------------------------------------

    def recover_shard(self, shard: int, receipts: ReceiptLookup) -> int:
        """Adopt the crash-window suffix of a shard, or fail closed. Returns entries adopted."""
        view = self.read_shard(shard)
        if not view.suffix and not view.torn:
            return 0
        path = self.shard_path(shard)
        orphans = [i for i, sha in view.suffix if receipts(i) != sha]
        if orphans:
            raise _broken(
                path,
                f"{len(orphans)} entries past the committed mark have no exact resolved receipt "
                f"(first: {orphans[0][:16]}…), so the catalog cannot be advanced",
            )
        new_size = len(view.committed_bytes) + len(view.suffix) * ENTRY_BYTES
        self._views.pop(shard, None)
        data = _cut_and_fsync(path, new_size)
        if len(data) != new_size or not data.startswith(view.committed_bytes):
            raise _broken(path, "the shard changed while it was being recovered")
        self._commit(shard, Slot(new_size, hashlib.sha256(data).hexdigest()))
        return len(view.suffix)

    def recover_all(self, receipts: ReceiptLookup) -> int:
        return sum(self.recover_shard(shard, receipts) for shard in range(SHARD_COUNT))

    def append(
        self, intake_id: str, payload_sha256: str, receipts: ReceiptLookup, hook: CrashHook | None = None
    ) -> bool:
        """Commit one run for ever: shard append, fsync, then catalog. False if already committed."""
        shard = shard_of(intake_id)
        self.recover_shard(shard, receipts)
        view = self.read_shard(shard)
        known = view.committed.get(intake_id)
        if known is not None:
            if known != payload_sha256:
                raise Conflict(
                    f"run {intake_id[:16]}… is already in the ledger with another payload; nothing was changed."
                )
            return False
        self._commit(shard, self._append_entries(view, render_entry(intake_id, payload_sha256), hook))
        return True

    def append_together(self, entries: list[tuple[str, str]], receipts: ReceiptLookup,
                        hook: CrashHook | None = None) -> None:  # fmt: skip
        """`append` for many runs: each shard's new entries in one append and one fsync, then one
        catalog commit for every shard that grew. Runs already committed with the same payload
        are skipped; the caller checked that none is committed with another (`lookup`)."""
        by_shard: dict[int, dict[str, str]] = {}
        for intake_id, payload_sha256 in entries:
            by_shard.setdefault(shard_of(intake_id), {}).setdefault(intake_id, payload_sha256)
        grown: dict[int, Slot] = {}
        for shard, runs in sorted(by_shard.items()):
            self.recover_shard(shard, receipts)
            view = self.read_shard(shard)
            fresh = b"".join(render_entry(i, sha) for i, sha in runs.items() if i not in view.committed)
            if fresh:
                grown[shard] = self._append_entries(view, fresh, hook)
        if grown:
            catalog = self.catalog
            for shard, slot in grown.items():
                catalog = catalog.with_slot(shard, slot)
            commit_catalog(self.dirs, catalog)
            self.catalog = catalog

    def _append_entries(self, view: ShardView, entries: bytes, hook: CrashHook | None) -> Slot:
        """Append whole entries to a shard and fsync it; the slot that commits them."""
        path, expected = self.shard_path(view.shard), len(view.committed_bytes)
        self._views.pop(view.shard, None)
        if hook is None:
            offset = append_durable(path, entries, mode=0o600)
        else:  # the crash tests stop between two halves to leave a torn entry behind
            offset = append_durable(path, entries[:64], mode=0o600)
            hit(hook, "resolve.shard_torn")
            append_durable(path, entries[64:], mode=0o600)
        if offset != expected:
            raise _broken(
                path, f"the shard grew behind the intake lock (append landed at {offset}, expected {expected})"
            )
        hit(hook, "resolve.shard_appended")
        data = view.committed_bytes + entries
        return Slot(len(data), hashlib.sha256(data).hexdigest())

    def _commit(self, shard: int, slot: Slot) -> None:
        catalog = self.catalog.with_slot(shard, slot)
        commit_catalog(self.dirs, catalog)
        self.catalog = catalog


def _broken(path: Path, problem: str) -> LedgerIntegrityError:
    return LedgerIntegrityError(
        f"{path}: {problem}. Intake is refused until this is repaired (fail closed). "
        f"Fix: restore .capture-intake/ and .capture-intake-schema from a backup (or git), then `memvault inspect`."
    )


def _parse_entries(data: bytes, shard: int, path: Path, already: dict[str, str]) -> dict[str, str]:
    entries: dict[str, str] = {}
    for start in range(0, len(data), ENTRY_BYTES):
        match = _ENTRY_RE.fullmatch(data[start : start + ENTRY_BYTES])
        if match is None:
            raise _broken(path, f"the entry at byte {start} is malformed")
        intake_id, payload = match[1].decode("ascii"), match[2].decode("ascii")
        if shard_of(intake_id) != shard:
            raise _broken(path, f"the entry at byte {start} belongs in shard {intake_id[:2]}")
        if intake_id in entries or intake_id in already:
            raise _broken(path, f"run {intake_id[:16]}… appears twice")
        entries[intake_id] = payload
    return entries


def _open_checked(path: Path, flags: int) -> int:
    """Open an existing shard, the private-file checks made on the open descriptor itself."""
    return open_private(path, flags)


def _read_fd(fd: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(fd, _READ_CHUNK, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _read_checked(path: Path) -> bytes:
    fd = _open_checked(path, os.O_RDONLY)
    try:
        return _read_fd(fd)
    finally:
        os.close(fd)


def _cut_and_fsync(path: Path, size: int) -> bytes:
    """Drop a torn tail past `size`, fsync that exact inode again, and return its bytes."""
    fd = _open_checked(path, os.O_RDWR)
    try:
        if os.fstat(fd).st_size > size:
            os.ftruncate(fd, size)
        os.fsync(fd)
        return _read_fd(fd)
    finally:
        os.close(fd)
