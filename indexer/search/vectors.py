"""The vector index: hnswlib over unit vectors, with a string id ↔ integer label map.

Files in the index folder:
  vectors.hnsw         hnswlib's own format
  vectors-meta.json    {"format": 1, "provider", "model", "dim", "space", "count", "labels",
                        "next_label", "checksum"}: the id map, the embedding identity, and the
                        SHA-256 of vectors.hnsw

hnswlib's `save_index` is not atomic and it loads a file of another dimension without a word,
so both files are written to temp names, fsynced, and renamed (index first, then meta), and
`open` trusts nothing the meta does not vouch for. A crash between the two renames leaves a new
index beside the old meta; the checksum catches that and the index reports "run `memvault
rebuild`" instead of answering from mismatched files. A reader that meets another writer's
save between those renames looks again a few times (for ~0.1 s) before it gives that answer.

Builds are deterministic: a fixed random seed and single-threaded inserts, so two rebuilds from
the same inputs in the same order produce byte-identical files and identical answers. Labels are
never reused (an upsert marks the old label deleted and adds a fresh one, which hnswlib stores in
a deleted slot), which sidesteps hnswlib's duplicate-label pitfalls with `replace_deleted`.
A VectorIndex is safe to share between threads; writers in different processes must be
serialized by the caller's index lock. A save can be split (`stage_save`, then `put_staged`), so
the caller holds its lock for the renames alone; a staged save another save overtook is dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import hnswlib
import numpy as np

from memvault.indexer.search.embeddings import EmbeddingIdentity
from memvault.vault.errors import IndexUnavailable
from memvault.vault.fsio import (
    MACHINE_DIR_MODE,
    MACHINE_FILE_MODE,
    fsync_dir,
    fsync_file,
    make_dir,
    remove_quietly,
    write_temp,
)

INDEX_FILE = "vectors.hnsw"
META_FILE = "vectors-meta.json"
FORMAT = 1
SPACE = "cosine"  # hnswlib normalises on insert and query; distance = 1 - cosine similarity
M = 16
EF_CONSTRUCTION = 64  # 3x faster builds than 200 at the same measured recall (bench/bench_search.py)
RANDOM_SEED = 100
MIN_CAPACITY = 1024
MIN_EF = 64

# a reader that sees the index and meta disagree looks again after these pauses (seconds)
_RETRY_PAUSES = (0.005, 0.02, 0.1)

# hnswlib's header starts with six size_t fields; label_offset - offset_data is the vector size
_HEADER = struct.Struct("<6Q")
_REBUILD = "run `memvault rebuild`"


class _Inconsistent(IndexUnavailable):
    """The index file and the meta disagree: torn by a crash, damaged, or caught mid-save."""


class VectorIndex:
    """Upsert, delete and cosine search over string ids. Use `create` or `open`, then `save`."""

    def __init__(
        self,
        folder: Path,
        identity: EmbeddingIdentity,
        index: hnswlib.Index,
        labels: dict[str, int],
        next_label: int,
    ) -> None:
        self.folder = Path(folder)
        self.identity = identity
        self._index = index
        self._labels = labels
        self._ids_by_label = {label: id_ for id_, label in labels.items()}
        self._next_label = next_label
        self._lock = threading.RLock()
        self._save_lock = threading.Lock()  # one save's files at a time (the renames pair them)
        self._saves = 0  # saves put in place: a staged save that another overtook is not put

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def create(cls, folder: Path, identity: EmbeddingIdentity, capacity: int = MIN_CAPACITY) -> VectorIndex:
        """A new empty index for `folder`; nothing is written until `save()`."""
        if identity.dim <= 0:
            raise ValueError(f"vector dimension must be positive, not {identity.dim}")
        index = hnswlib.Index(space=SPACE, dim=identity.dim)
        index.init_index(
            max_elements=max(1, capacity),
            M=M,
            ef_construction=EF_CONSTRUCTION,
            random_seed=RANDOM_SEED,
            allow_replace_deleted=True,
        )
        index.set_num_threads(1)
        return cls(Path(folder), identity, index, {}, 0)

    @classmethod
    def open(cls, folder: Path, identity: EmbeddingIdentity) -> VectorIndex:
        """Load a saved index, refusing anything stale, torn, corrupt or built for another model."""
        folder = Path(folder)
        for pause in _RETRY_PAUSES:
            try:
                return cls._open_once(folder, identity)
            except _Inconsistent:
                # a writer in another thread or process may be between its two renames
                time.sleep(pause)
        try:
            return cls._open_once(folder, identity)
        except _Inconsistent as exc:
            raise IndexUnavailable(str(exc)) from None

    @classmethod
    def _open_once(cls, folder: Path, identity: EmbeddingIdentity) -> VectorIndex:
        meta = _read_meta(folder)
        _check_identity(folder, meta, identity)
        labels, next_label, count = _meta_labels(folder, meta)
        index_path = folder / INDEX_FILE
        checked = _check_index_file(index_path, meta, identity.dim, count)
        index = hnswlib.Index(space=SPACE, dim=identity.dim)
        try:
            index.load_index(str(index_path), allow_replace_deleted=True)
        except (RuntimeError, ValueError, MemoryError) as exc:
            raise IndexUnavailable(f"cannot load {index_path} ({exc}): {_REBUILD}") from None
        if _file_signature(index_path) != checked:
            raise _Inconsistent(f"{index_path} was replaced while it was loaded: {_REBUILD}")
        index.set_num_threads(1)
        stored = index.get_ids_list()
        if index.get_current_count() != count or len(stored) != count or not set(labels.values()) <= set(stored):
            raise _Inconsistent(
                f"{index_path} holds {index.get_current_count()} vectors but {folder / META_FILE} "
                f"describes {count}: {_REBUILD}"
            )
        return cls(folder, identity, index, labels, next_label)

    # -- reading --------------------------------------------------------------------------------
    def __len__(self) -> int:
        with self._lock:
            return len(self._labels)

    def __contains__(self, id_: object) -> bool:
        with self._lock:
            return id_ in self._labels

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._labels)

    @property
    def capacity(self) -> int:
        with self._lock:
            return self._index.get_max_elements()

    def search(
        self, vector: np.ndarray, k: int, filter: Callable[[str], bool] | None = None
    ) -> list[tuple[str, float]]:
        """Up to k (id, cosine similarity) pairs, most similar first; deleted ids never appear."""
        query = self._query_vector(vector)
        with self._lock:
            want = min(k, len(self._labels))
            if want <= 0:
                return []
            hits = self._approximate(query, want, filter)
            if hits is None:
                hits = self._exact(query, want, filter)
            return hits

    def _approximate(
        self, query: np.ndarray, want: int, filter: Callable[[str], bool] | None
    ) -> list[tuple[str, float]] | None:
        ids_by_label = self._ids_by_label
        label_filter = None
        if filter is not None:
            label_filter = lambda label: label in ids_by_label and filter(ids_by_label[label])  # noqa: E731
        self._index.set_ef(max(MIN_EF, 2 * want))
        try:
            labels, distances = self._index.knn_query(query, k=want, num_threads=1, filter=label_filter)
        except RuntimeError:
            return None  # hnswlib found fewer than k (heavy deletion, or a selective filter)
        hits = [
            (ids_by_label[label], 1.0 - float(distance))
            for label, distance in zip(labels[0].tolist(), distances[0].tolist(), strict=True)
            if label in ids_by_label
        ]
        return hits if len(hits) == want else None

    def _exact(self, query: np.ndarray, want: int, filter: Callable[[str], bool] | None) -> list[tuple[str, float]]:
        """Brute force over live vectors: the fallback when the graph cannot supply k hits."""
        candidates = sorted(id_ for id_ in self._labels if filter is None or filter(id_))
        if not candidates:
            return []
        vectors = np.asarray(
            self._index.get_items([self._labels[id_] for id_ in candidates], return_type="numpy"),
            dtype=np.float32,
        )
        norms = np.linalg.norm(vectors, axis=1)
        np.divide(vectors, norms[:, None], out=vectors, where=norms[:, None] > 0)
        unit_query = query / max(float(np.linalg.norm(query)), 1e-30)
        scores = vectors @ unit_query
        order = sorted(range(len(candidates)), key=lambda i: (-float(scores[i]), candidates[i]))
        return [(candidates[i], float(scores[i])) for i in order[:want]]

    def _query_vector(self, vector: np.ndarray) -> np.ndarray:
        query = np.asarray(vector, dtype=np.float32)
        if query.ndim == 2 and query.shape[0] == 1:
            query = query[0]
        if query.shape != (self.identity.dim,):
            raise ValueError(f"query vector has shape {query.shape}, expected ({self.identity.dim},)")
        if not np.isfinite(query).all():
            raise ValueError("query vector holds non-finite numbers")
        return query

    # -- writing --------------------------------------------------------------------------------
    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Insert or replace: an id already present gets the new vector."""
        ids = list(ids)
        matrix = self._checked_vectors(ids, vectors)
        if not ids:
            return
        with self._lock:
            for id_ in ids:
                old = self._labels.pop(id_, None)
                if old is not None:
                    self._index.mark_deleted(old)
                    del self._ids_by_label[old]
            self._reserve(len(ids))
            new_labels = list(range(self._next_label, self._next_label + len(ids)))
            self._index.add_items(matrix, new_labels, num_threads=1, replace_deleted=True)
            self._next_label += len(ids)
            for id_, label in zip(ids, new_labels, strict=True):
                self._labels[id_] = label
                self._ids_by_label[label] = id_

    def delete(self, ids: Sequence[str]) -> int:
        """Remove ids (unknown ones are ignored); returns how many were removed."""
        removed = 0
        with self._lock:
            for id_ in ids:
                label = self._labels.pop(id_, None)
                if label is not None:
                    self._index.mark_deleted(label)
                    del self._ids_by_label[label]
                    removed += 1
        return removed

    def _checked_vectors(self, ids: list[str], vectors: np.ndarray) -> np.ndarray:
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape != (len(ids), self.identity.dim):
            raise ValueError(f"vectors have shape {matrix.shape}, expected ({len(ids)}, {self.identity.dim})")
        if not all(isinstance(id_, str) and id_ for id_ in ids):
            raise ValueError("vector ids must be non-empty strings")
        if len(set(ids)) != len(ids):
            raise ValueError("the same id appears twice in one add")
        if not np.isfinite(matrix).all():
            raise ValueError("vectors hold non-finite numbers")
        return np.ascontiguousarray(matrix)

    def _reserve(self, incoming: int) -> None:
        """Grow (doubling) so `incoming` new vectors fit; deleted slots are reused first."""
        used = self._index.get_current_count()
        reusable = used - len(self._labels)
        needed = used + max(0, incoming - reusable)
        capacity = self._index.get_max_elements()
        if needed > capacity:
            self._index.resize_index(max(needed, 2 * capacity, MIN_CAPACITY))

    def save(self) -> None:
        """Write both files atomically (see the module docstring for the crash story).

        The graph and its labels are taken as one snapshot under the index's lock, which a search
        waits for; the slow rest (fsync, checksum, meta, renames) runs beside searches and writes,
        one save at a time."""
        with self._save_lock:
            self._stage().put()
            self._saves += 1

    def stage_save(self) -> StagedSave:
        """The slow half of `save`: both files written to fsynced temp files beside the index's
        own, for `put_staged` to put in place (under the caller's lock, while the slow half ran
        without it)."""
        with self._save_lock:
            return self._stage()

    def put_staged(self, staged: StagedSave) -> bool:
        """Put a staged save in place, unless another save came between (then the staged files
        are removed and False returned: the caller saves again)."""
        with self._save_lock:
            if staged.saves_before != self._saves:
                staged.discard()
                return False
            staged.put()
            self._saves += 1
            return True

    def _stage(self) -> StagedSave:
        make_dir(self.folder, MACHINE_DIR_MODE, parents=True)
        index_tmp = _temp_path(self.folder, INDEX_FILE)
        try:
            with self._lock:
                self._index.save_index(str(index_tmp))
                meta = self._meta_without_checksum()
            fsync_file(index_tmp)
            meta["checksum"] = _sha256_of(index_tmp)
            meta_tmp = write_temp(self.folder, META_FILE, _meta_bytes(meta), mode=MACHINE_FILE_MODE)
        except BaseException:
            remove_quietly(index_tmp)  # a failed save leaves no temp file behind
            raise
        return StagedSave(self.folder, index_tmp, meta_tmp, self._saves)

    def _meta_without_checksum(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "provider": self.identity.provider,
            "model": self.identity.model,
            "dim": self.identity.dim,
            "space": SPACE,
            "count": self._index.get_current_count(),
            "labels": dict(sorted(self._labels.items())),
            "next_label": self._next_label,
        }


def read_identity(folder: Path) -> EmbeddingIdentity | None:
    """The identity a saved index was built with, or None when there is no readable meta."""
    try:
        meta = _read_meta(Path(folder))
        provider, model, dim = meta["provider"], meta["model"], meta["dim"]
    except (IndexUnavailable, KeyError):
        return None
    if not isinstance(provider, str) or not isinstance(model, str) or type(dim) is not int:
        return None
    return EmbeddingIdentity(provider, model, dim)


# -- files ---------------------------------------------------------------------------------------


class StagedSave:
    """A save's two files in fsynced temp files beside the index's own (`VectorIndex.stage_save`)."""

    def __init__(self, folder: Path, index_tmp: Path, meta_tmp: Path, saves_before: int):
        self.folder, self.index_tmp, self.meta_tmp, self.saves_before = folder, index_tmp, meta_tmp, saves_before

    def put(self) -> None:
        """Rename the graph, then its meta, into place; on failure the old pair stays (or the
        checksum catches the new graph beside the old meta) and no temp file is left."""
        index_path, meta_path = self.folder / INDEX_FILE, self.folder / META_FILE
        backup: Path | None = None
        try:
            backup = _link_backup(index_path, self.folder)
            os.replace(self.index_tmp, index_path)
            try:
                os.replace(self.meta_tmp, meta_path)
            except BaseException:
                if backup is not None:  # put the old index back beside the old meta
                    os.replace(backup, index_path)
                    backup = None
                raise
            fsync_dir(self.folder)
        finally:
            for leftover in (self.index_tmp, self.meta_tmp, backup):
                if leftover is not None:
                    remove_quietly(leftover)

    def discard(self) -> None:
        remove_quietly(self.index_tmp)
        remove_quietly(self.meta_tmp)


def _temp_path(folder: Path, name: str) -> Path:
    fd, path = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    return Path(path)


def _link_backup(index_path: Path, folder: Path) -> Path | None:
    """A hard link to the current index, so a failed meta rename can restore it."""
    if not index_path.exists():
        return None
    backup = _temp_path(folder, INDEX_FILE)
    backup.unlink()
    try:
        os.link(index_path, backup)
    except OSError:
        return None  # no hard links here: a failure between renames is then caught by the checksum
    return backup


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _meta_bytes(meta: dict[str, Any]) -> bytes:
    return (json.dumps(meta, sort_keys=True, separators=(",", ":")) + "\n").encode("ascii")


# -- checks on open ------------------------------------------------------------------------------


def _read_meta(folder: Path) -> dict[str, Any]:
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
    if meta.get("format") != FORMAT:
        raise IndexUnavailable(
            f"{meta_path} has format {meta.get('format')!r}, this memvault reads {FORMAT}: {_REBUILD}"
        )
    return meta


def _check_identity(folder: Path, meta: dict[str, Any], wanted: EmbeddingIdentity) -> None:
    built = (meta.get("provider"), meta.get("model"), meta.get("dim"))
    if built != (wanted.provider, wanted.model, wanted.dim) or type(meta.get("dim")) is not int:
        shown = "/".join(str(part) for part in built)
        raise IndexUnavailable(
            f"vector index in {folder} was built with {shown} but config says {wanted.describe()}: {_REBUILD}"
        )
    if meta.get("space") != SPACE:
        raise IndexUnavailable(f"{folder / META_FILE} has space {meta.get('space')!r}, expected {SPACE!r}: {_REBUILD}")


def _meta_labels(folder: Path, meta: dict[str, Any]) -> tuple[dict[str, int], int, int]:
    labels, next_label, count = meta.get("labels"), meta.get("next_label"), meta.get("count")
    bad = IndexUnavailable(f"{folder / META_FILE} has a malformed id map: {_REBUILD}")
    if not isinstance(labels, dict) or type(next_label) is not int or type(count) is not int:
        raise bad
    for id_, label in labels.items():
        if not id_ or type(label) is not int or not 0 <= label < next_label:
            raise bad
    if len(set(labels.values())) != len(labels) or count < len(labels):
        raise bad
    return dict(labels), next_label, count


def _file_signature(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _check_index_file(index_path: Path, meta: dict[str, Any], dim: int, count: int) -> tuple[int, int, int]:
    """Check the file against the meta; returns the signature of the file that was hashed."""
    try:
        with open(index_path, "rb") as handle:
            info = os.fstat(handle.fileno())
            header = handle.read(_HEADER.size)
            digest = hashlib.sha256(header)
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except FileNotFoundError:
        raise IndexUnavailable(f"vector index {index_path} is missing: {_REBUILD}") from None
    except OSError as exc:
        raise IndexUnavailable(f"cannot read {index_path} ({exc}): {_REBUILD}") from None
    if len(header) < _HEADER.size:
        raise IndexUnavailable(f"vector index {index_path} is truncated: {_REBUILD}")
    if digest.hexdigest() != meta.get("checksum"):
        raise _Inconsistent(
            f"vector index {index_path} does not match the checksum in {META_FILE} "
            f"(a torn save or a damaged file): {_REBUILD}"
        )
    _offset0, _max_elements, stored_count, _per_element, label_offset, offset_data = _HEADER.unpack(header)
    if label_offset - offset_data != 4 * dim or stored_count != count:
        raise _Inconsistent(
            f"vector index {index_path} holds {(label_offset - offset_data) // 4}-dim vectors x "
            f"{stored_count}, but {META_FILE} says {dim}-dim x {count}: {_REBUILD}"
        )
    return (info.st_ino, info.st_size, info.st_mtime_ns)
