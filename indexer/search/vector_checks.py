"""Checks a vector folder must pass before it is loaded: its meta, the identity it was built for,
the file list it names, and each graph file's header (hnswlib loads another dimension silently)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from memvault.indexer.search.embeddings import EmbeddingIdentity
from memvault.indexer.search.vector_segments import SPACE
from memvault.vault.errors import IndexUnavailable

META_FILE = "vectors-meta.json"
FORMAT = 2
# hnswlib's header starts with six size_t fields; label_offset - offset_data is the vector size
_HEADER = struct.Struct("<6Q")
_REBUILD = "run `memvault rebuild`"


class Inconsistent(IndexUnavailable):
    """The files disagree with the meta: torn by a crash, damaged, or caught mid-checkpoint."""


def read_identity(folder: Path) -> EmbeddingIdentity | None:
    """The identity a saved index was built with, or None when there is no readable meta."""
    try:
        meta = read_meta(Path(folder))
        provider, model, dim = meta["provider"], meta["model"], meta["dim"]
    except (IndexUnavailable, KeyError):
        return None
    if not isinstance(provider, str) or not isinstance(model, str) or type(dim) is not int:
        return None
    return EmbeddingIdentity(provider, model, dim)


def read_meta(folder: Path) -> dict[str, Any]:
    meta_path = folder / META_FILE
    try:
        raw = meta_path.read_bytes()
    except FileNotFoundError:
        raise IndexUnavailable(f"vector index meta {meta_path} is missing: {_REBUILD}") from None
    except OSError as exc:
        raise IndexUnavailable(f"cannot read {meta_path} ({exc}): {_REBUILD}") from None
    try:
        meta = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise IndexUnavailable(f"{meta_path} is not valid JSON ({exc}): {_REBUILD}") from None
    if not isinstance(meta, dict):
        raise IndexUnavailable(f"{meta_path} is not a JSON object: {_REBUILD}")
    if meta.get("format") == 1:
        raise IndexUnavailable(f"{meta_path} was written by an older memvault (one graph, no log): {_REBUILD}")
    if meta.get("format") != FORMAT:
        raise IndexUnavailable(
            f"{meta_path} has format {meta.get('format')!r}, this memvault reads {FORMAT}: {_REBUILD}"
        )
    return meta


def check_identity(folder: Path, meta: dict[str, Any], wanted: EmbeddingIdentity) -> None:
    built = (meta.get("provider"), meta.get("model"), meta.get("dim"))
    if built != (wanted.provider, wanted.model, wanted.dim) or type(meta.get("dim")) is not int:
        shown = "/".join(str(part) for part in built)
        raise IndexUnavailable(
            f"vector index in {folder} was built with {shown} but config says {wanted.describe()}: {_REBUILD}"
        )
    if meta.get("space") != SPACE:
        raise IndexUnavailable(f"{folder / META_FILE} has space {meta.get('space')!r}, expected {SPACE!r}: {_REBUILD}")


def meta_files(folder: Path, meta: dict[str, Any]) -> tuple[list[tuple[int, int, str]], int | None, int, int]:
    """(segments as (number, count, checksum), dead list number, log number, next number), checked."""
    bad = IndexUnavailable(f"{folder / META_FILE} has a malformed file list: {_REBUILD}")
    segments, dead, log, next_number = meta.get("segments"), meta.get("dead"), meta.get("log"), meta.get("next")
    if not isinstance(segments, list) or type(log) is not int or type(next_number) is not int:
        raise bad
    if dead is not None and type(dead) is not int:
        raise bad
    listed = []
    for entry in segments:
        if not isinstance(entry, dict):
            raise bad
        number, count, checksum = entry.get("number"), entry.get("count"), entry.get("checksum")
        if type(number) is not int or type(count) is not int or count < 0 or not isinstance(checksum, str):
            raise bad
        listed.append((number, count, checksum))
    numbers = [n for n, _, _ in listed] + [log] + ([dead] if dead is not None else [])
    if len(set(numbers)) != len(numbers) or not all(0 < n < next_number for n in numbers):
        raise bad
    return listed, dead, log, next_number


def check_graph_file(path: Path, dim: int, count: int) -> tuple[int, int, int]:
    """hnswlib loads a file of another dimension without a word: check its header first."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            header = handle.read(_HEADER.size)
    except FileNotFoundError:
        raise Inconsistent(f"vector segment {path} is missing: {_REBUILD}") from None
    except OSError as exc:
        raise IndexUnavailable(f"cannot read {path} ({exc}): {_REBUILD}") from None
    if len(header) < _HEADER.size:
        raise IndexUnavailable(f"vector segment {path} is truncated: {_REBUILD}")
    _offset0, _max_elements, stored, _per_element, label_offset, offset_data = _HEADER.unpack(header)
    if label_offset - offset_data != 4 * dim or stored != count:
        raise Inconsistent(f"vector segment {path} holds {(label_offset - offset_data) // 4}-dim vectors x {stored}, "
                            f"but {META_FILE} says {dim}-dim x {count}: {_REBUILD}")  # fmt: skip
    return (info.st_ino, info.st_size, info.st_mtime_ns)
