"""The vector index's own files, beside hnswlib's graphs: key tables, the dead list and the log.

    seg-NNNNNN.keys   a sealed segment's keys and tags, by position (the graph's labels)
    dead-NNNNNN.bin   the dead positions of every sealed segment, as of the last checkpoint
    log-NNNNNN.bin    every add and delete since the last checkpoint, appended, one CRC per record

Each is little-endian binary behind a magic line, so a file of another kind or version is refused,
never misread. Key tables are what serving keeps resident per memory: one blob of UTF-8 keys, their
offsets, a 16-byte tag (the passage hash) and a sorted 64-bit key hash for lookups, about 60 bytes
a memory instead of three Python dicts (~500).
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memvault.vault.errors import IndexUnavailable
from memvault.vault.fsio import MACHINE_FILE_MODE

KEYS_MAGIC = b"MVKEYS2\n"
DEAD_MAGIC = b"MVDEAD2\n"
LOG_MAGIC = b"MVVLOG2\n"
TAG_BYTES = 16
MAX_KEY_BYTES = 0xFFFF
ADD, DELETE = 1, 2
_REBUILD = "run `memvault rebuild`"
_COUNT = struct.Struct("<Q")
_DEAD_ENTRY = struct.Struct("<II")  # segment number, positions that follow
_RECORD = struct.Struct("<IBH16s")  # crc32 of what follows it, op, key length, tag


def key_hashes(keys: Sequence[str]) -> np.ndarray:
    """A 64-bit hash per key (BLAKE2b), as uint64: what key tables are sorted and looked up by."""
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") for key in keys),
        dtype=np.uint64,
        count=len(keys),
    )


class KeyTable:
    """A sealed segment's keys and tags by position, with lookup by key (hash, then the key itself)."""

    def __init__(self, offsets: np.ndarray, blob: bytes, tags: np.ndarray):
        self._offsets = offsets  # int64, count + 1
        self._blob = blob
        self.tags = tags  # S16, by position
        hashes = key_hashes([self.key(p) for p in range(len(tags))]) if len(tags) else np.zeros(0, np.uint64)
        self._order = np.argsort(hashes, kind="stable").astype(np.int64)
        self._sorted = hashes[self._order]

    @classmethod
    def of(cls, keys: Sequence[str], tags: Sequence[str]) -> KeyTable:
        encoded = [key.encode() for key in keys]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        return cls(offsets, b"".join(encoded), np.array([t.encode() for t in tags], dtype=f"S{TAG_BYTES}"))

    def __len__(self) -> int:
        return len(self.tags)

    def key(self, position: int) -> str:
        return self._blob[self._offsets[position] : self._offsets[position + 1]].decode()

    def tag(self, position: int) -> str:
        return self.tags[position].decode()

    def find(self, keys: Sequence[str], hashes: np.ndarray) -> np.ndarray:
        """The position of each key in this table (int64), or -1 where it has none."""
        found = np.full(len(keys), -1, dtype=np.int64)
        if not len(self.tags) or not len(keys):
            return found
        start = np.searchsorted(self._sorted, hashes, side="left")
        for n in np.flatnonzero(start < len(self._sorted)):
            at = int(start[n])
            while at < len(self._sorted) and self._sorted[at] == hashes[n]:
                position = int(self._order[at])
                if self.key(position) == keys[n]:
                    found[n] = position  # the newest: positions of one key only grow in a table
                at += 1
        return found

    def write(self, path: Path) -> None:
        with create(path) as handle:
            handle.write(KEYS_MAGIC + _COUNT.pack(len(self.tags)))
            handle.write(self._offsets.astype("<i8").tobytes())
            handle.write(self.tags.tobytes())
            handle.write(self._blob)

    @classmethod
    def read(cls, path: Path) -> KeyTable:
        data = _read(path)
        head = len(KEYS_MAGIC) + _COUNT.size
        if data[: len(KEYS_MAGIC)] != KEYS_MAGIC or len(data) < head:
            raise IndexUnavailable(f"{path} is not a memvault key table: {_REBUILD}")
        (count,) = _COUNT.unpack_from(data, len(KEYS_MAGIC))
        tags_at = head + 8 * (count + 1)
        blob_at = tags_at + TAG_BYTES * count
        if blob_at > len(data):
            raise IndexUnavailable(f"{path} is truncated: {_REBUILD}")
        offsets = np.frombuffer(data, dtype="<i8", count=count + 1, offset=head).astype(np.int64)
        blob = data[blob_at:]
        if offsets[0] != 0 or offsets[-1] != len(blob) or (np.diff(offsets) < 0).any():
            raise IndexUnavailable(f"{path} has inconsistent key offsets: {_REBUILD}")
        tags = np.frombuffer(data, dtype=f"S{TAG_BYTES}", count=count, offset=tags_at).copy()
        return cls(offsets, blob, tags)


def write_dead(path: Path, dead: Iterable[tuple[int, np.ndarray]]) -> None:
    """Each sealed segment's dead positions: (segment number, positions as uint32)."""
    with create(path) as handle:
        handle.write(DEAD_MAGIC)
        for number, positions in dead:
            handle.write(_DEAD_ENTRY.pack(number, len(positions)))
            handle.write(np.asarray(positions, dtype="<u4").tobytes())


def read_dead(path: Path) -> dict[int, np.ndarray]:
    data = _read(path)
    if data[: len(DEAD_MAGIC)] != DEAD_MAGIC:
        raise IndexUnavailable(f"{path} is not a memvault dead list: {_REBUILD}")
    dead, at = {}, len(DEAD_MAGIC)
    while at < len(data):
        if at + _DEAD_ENTRY.size > len(data):
            raise IndexUnavailable(f"{path} is truncated: {_REBUILD}")
        number, count = _DEAD_ENTRY.unpack_from(data, at)
        at += _DEAD_ENTRY.size
        if at + 4 * count > len(data):
            raise IndexUnavailable(f"{path} is truncated: {_REBUILD}")
        dead[number] = np.frombuffer(data, dtype="<u4", count=count, offset=at).astype(np.int64)
        at += 4 * count
    return dead


@dataclass(frozen=True)
class Op:
    """One logged change: ADD a key's vector and tag, or DELETE the key."""

    op: int
    key: str
    tag: str = ""
    vector: np.ndarray | None = None


def encode_ops(ops: Iterable[Op], dim: int) -> bytes:
    parts = []
    for op in ops:
        key = op.key.encode()
        if len(key) > MAX_KEY_BYTES:
            raise ValueError(f"vector key is {len(key)} bytes, over {MAX_KEY_BYTES}")
        body = bytes([op.op]) + len(key).to_bytes(2, "little") + op.tag.encode().ljust(TAG_BYTES, b"\0") + key
        if op.op == ADD:
            body += np.asarray(op.vector, dtype="<f4").reshape(dim).tobytes()
        parts.append(zlib.crc32(body).to_bytes(4, "little") + body)
    return b"".join(parts)


def new_log(path: Path, dim: int) -> None:
    with create(path) as handle:
        handle.write(LOG_MAGIC + dim.to_bytes(4, "little"))


def read_log(path: Path, dim: int, start: int = 0) -> tuple[list[Op], int]:
    """The whole records from byte `start` (0: the file's beginning), and the offset after the last
    one. A record cut short or failing its CRC ends the log there: a save a crash tore, whose vectors
    the passage hashes never vouched for (their notes are embedded again)."""
    data = _read(path)
    head = len(LOG_MAGIC) + 4
    if data[: len(LOG_MAGIC)] != LOG_MAGIC or len(data) < head or int.from_bytes(data[8:head], "little") != dim:
        raise IndexUnavailable(f"{path} is not a vector log for {dim}-dim vectors: {_REBUILD}")
    return _records(path, data, dim, max(start, head))


def _records(path: Path, data: bytes, dim: int, at: int) -> tuple[list[Op], int]:
    ops, width = [], 4 * dim
    while at + _RECORD.size <= len(data):
        crc, op, length, tag = _RECORD.unpack_from(data, at)
        end = at + _RECORD.size + length + (width if op == ADD else 0)
        if op not in (ADD, DELETE) or end > len(data) or zlib.crc32(data[at + 4 : end]) != crc:
            # whole records after it (not only zeros): damage, not a torn tail; so is a bad op byte
            if data[end:].strip(b"\0") if op in (ADD, DELETE) else op != 0:
                raise IndexUnavailable(f"a record inside {path} is damaged (its checksum fails): {_REBUILD}")
            break  # the torn tail of an append a crash cut short (or the zeros it left)
        key_at = at + _RECORD.size
        vector = np.frombuffer(data, dtype="<f4", count=dim, offset=key_at + length) if op == ADD else None
        ops.append(Op(op, data[key_at : key_at + length].decode(), tag.rstrip(b"\0").decode(), vector))
        at = end
    return ops, at


def create(path: Path):
    """A new file, owner-only whatever the umask (machine state, as every file under .index/)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, MACHINE_FILE_MODE)
    os.fchmod(fd, MACHINE_FILE_MODE)
    return os.fdopen(fd, "wb")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise IndexUnavailable(f"{path} is missing: {_REBUILD}") from None
    except OSError as exc:
        raise IndexUnavailable(f"cannot read {path} ({exc}): {_REBUILD}") from None
