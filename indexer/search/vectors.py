"""The vector index: hnswlib graphs over unit vectors, in segments, each memory's key and tag beside.

Files in the index folder (format 2):
  vectors-meta.json   {"format": 2, "provider", "model", "dim", "space", "segments": [{"number",
                       "count", "checksum"}], "dead", "dead_checksum", "log", "next"}: the commit point
  seg-NNNNNN.hnsw     a sealed segment's graph, hnswlib's own format (labels are positions)
  seg-NNNNNN.keys     its keys and tags (the passage hashes), vector_files.py
  dead-NNNNNN.bin     the sealed segments' dead positions as of the last checkpoint
  log-NNNNNN.bin      every add and delete since then, appended (one CRC per record)

A write never rewrites the index (issue 43: at 100k memories each save rewrote 120 MB). A save
appends the changes since the last one to the log and fsyncs it. When the live segment (what the
log holds) reaches SEAL_AT vectors, the save *checkpoints*: the live graph becomes a sealed
segment, the dead list and an empty log are written under new names, and the meta is renamed over
the old one, the single commit point; the old log and dead list are removed after. A crash before
that rename leaves the old meta naming old files, all whole. A torn log tail fails its CRC and is
dropped: those vectors were never vouched for by the passage hashes, so their notes are embedded
again. Sealed segments of a size tier merge FANIN at a time (`stage_save`, off the vault lock),
never past MAX_SEGMENT, so a vault written one memory at a time for years keeps a few segments.

A rebuild (`create(building=True)`) fills one segment until it is half full, then two, taking
batches in turn, each inserted by a worker thread of its own, so two cores insert; each full one is
written by a thread and its graph released: the rebuild holds at most three segments, whatever
the vault's size, and a vault under MAX_SEGMENT / 2 is one graph. Builds are deterministic: a
fixed seed, single-threaded inserts per segment and the batches' order deciding where each goes,
so the same inputs give byte-identical files and identical answers. A VectorIndex is safe to share
between threads; writers in different processes must be serialized by the caller's index lock.
"""

from __future__ import annotations

__all__ = ["FORMAT", "META_FILE", "NO_TAG", "StagedMerge", "VectorIndex", "read_identity"]

import hashlib
import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hnswlib
import numpy as np

from memvault.indexer.search.embeddings import EmbeddingIdentity
from memvault.indexer.search.vector_checks import (
    FORMAT,
    META_FILE,
    Inconsistent,
    check_graph_file,
    check_identity,
    meta_files,
    read_identity,
    read_meta,
)
from memvault.indexer.search.vector_files import (
    ADD,
    DELETE,
    MAX_KEY_BYTES,
    TAG_BYTES,
    KeyTable,
    Op,
    encode_ops,
    key_hashes,
    new_log,
    read_dead,
    read_log,
    write_dead,
)
from memvault.indexer.search.vector_segments import SPACE, Live, Sealed, Segment, new_graph
from memvault.vault.errors import IndexUnavailable
from memvault.vault.fsio import (
    MACHINE_DIR_MODE,
    MACHINE_FILE_MODE,
    atomic_write,
    fsync_dir,
    fsync_file,
    make_dir,
    remove_quietly,
    write_temp,
)

#: vectors in the live segment before a save seals it (its graph is then written once, ~10 MB)
SEAL_AT = 8192
#: sealed segments of one size tier merged into one
FANIN = 8
#: no merge makes a segment larger, and a rebuild splits the vault into segments of this size
MAX_SEGMENT = 1 << 17
NO_TAG = "0" * TAG_BYTES

# a reader that meets a checkpoint's renames looks again after these pauses (seconds)
_RETRY_PAUSES = (0.005, 0.02, 0.1)
_REBUILD = "run `memvault rebuild`"


class VectorIndex:
    """Upsert, delete and cosine search over string ids, each with a tag. `create` or `open`, then `save`."""

    def __init__(self, folder: Path, identity: EmbeddingIdentity, *, building: bool = False):
        self.folder = Path(folder)
        self.identity = identity
        self._sealed: list[Sealed] = []
        self._live = Live(identity.dim)
        self._other: Live | None = None  # a large rebuild's second open segment (see `_apply_add`)
        self._building = building
        self._closing: list[_Closing] = []  # a rebuild's full segments, being written
        self._next = 1  # the number of the next file
        self._log = 0  # the log file's number (0: nothing saved yet)
        self._log_end = 0
        self._dead_file: int | None = None
        self._dead_checksum: str | None = None
        self._pending: list[Op] = []  # applied in memory, not yet in the log
        self._released = False
        self._lock = threading.RLock()
        self._save_lock = threading.Lock()  # one save's files at a time
        if building:
            self._live.start_worker()

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def create(cls, folder: Path, identity: EmbeddingIdentity, *, building: bool = False) -> VectorIndex:
        """A new empty index for `folder`; nothing is written until `save()`. `building`: a rebuild's,
        which fills segments on worker threads and can only be saved, then reopened."""
        if identity.dim <= 0:
            raise ValueError(f"vector dimension must be positive, not {identity.dim}")
        return cls(Path(folder), identity, building=building)

    @classmethod
    def open(cls, folder: Path, identity: EmbeddingIdentity) -> VectorIndex:
        """Load a saved index, refusing anything stale, torn, corrupt or built for another model."""
        folder = Path(folder)
        for pause in _RETRY_PAUSES:
            try:
                return cls._open_once(folder, identity)
            except Inconsistent:
                time.sleep(pause)  # a writer in another thread or process may be mid-checkpoint
        try:
            return cls._open_once(folder, identity)
        except Inconsistent as exc:
            raise IndexUnavailable(str(exc)) from None

    @classmethod
    def _open_once(cls, folder: Path, identity: EmbeddingIdentity) -> VectorIndex:
        signature = _signature(folder / META_FILE)
        try:
            return cls._load(folder, identity)
        except Inconsistent:
            raise
        except IndexUnavailable as exc:  # a file this meta named was removed by a checkpoint since
            if _signature(folder / META_FILE) != signature:
                raise Inconsistent(str(exc)) from None
            raise

    @classmethod
    def _load(cls, folder: Path, identity: EmbeddingIdentity) -> VectorIndex:
        meta = read_meta(folder)
        check_identity(folder, meta, identity)
        index = cls(folder, identity)
        segments, dead, log, next_number = meta_files(folder, meta)
        for number, count, checksum in segments:
            index._sealed.append(_load_segment(folder, number, count, checksum, identity.dim))
        if dead is not None:
            gone = _read_dead_checked(folder, dead, meta.get("dead_checksum"))
            by_number = {segment.number: segment for segment in index._sealed}
            for number, positions in gone.items():
                if number not in by_number or (len(positions) and positions.max() >= by_number[number].positions()):
                    raise Inconsistent(f"{folder / _name('dead', dead)} names positions no segment has: {_REBUILD}")
                for position in positions.tolist():
                    by_number[number].kill_loaded(position)
        ops, index._log_end = read_log(folder / _name("log", log), identity.dim)
        index._log, index._next, index._dead_file = log, next_number, dead
        index._dead_checksum = meta.get("dead_checksum")
        index._replay(ops)
        return index

    def _replay(self, ops: list[Op]) -> None:
        for op in ops:
            if op.op == ADD:
                self._apply_add([op.key], [op.tag], np.asarray(op.vector, dtype=np.float32)[None, :])
            else:
                self._apply_delete([op.key])

    # -- reading --------------------------------------------------------------------------------
    def __len__(self) -> int:
        with self._lock:
            return sum(segment.alive for segment in self._segments())

    def __contains__(self, id_: object) -> bool:
        return isinstance(id_, str) and self.tags([id_])[0] is not None

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(
                segment.key(p) for segment in self._segments() for p in range(segment.positions())
                if not segment.is_dead(p)
            )  # fmt: skip

    def tags(self, ids: Sequence[str]) -> list[str | None]:
        """Each id's tag (its passage hash), or None where the id has no vector."""
        with self._lock:
            return [None if found is None else found[0].tag(found[1]) for found in self._locate(list(ids))]

    @property
    def segments(self) -> int:
        with self._lock:
            return len(self._sealed) + (1 if self._live.positions() else 0)

    def search(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """Up to k (id, cosine similarity) pairs, most similar first; deleted ids never appear."""
        query = self._query_vector(vector)
        if k <= 0:
            return []
        with self._lock:
            if self._released or self._building:
                raise IndexUnavailable(f"the vectors built in {self.folder} are saved, not served: open them")
            hits = [hit for segment in self._segments() for hit in segment.search(query, k)]
        return sorted(hits, key=lambda hit: (-hit[1], hit[0]))[:k]

    def _segments(self) -> list[Segment]:
        return [*self._sealed, *(closing.live for closing in self._closing), *self._lives()]

    def _lives(self) -> list[Live]:
        return [self._live] if self._other is None else [self._live, self._other]

    def _query_vector(self, vector: np.ndarray) -> np.ndarray:
        query = np.asarray(vector, dtype=np.float32)
        if query.ndim == 2 and query.shape[0] == 1:
            query = query[0]
        if query.shape != (self.identity.dim,):
            raise ValueError(f"query vector has shape {query.shape}, expected ({self.identity.dim},)")
        if not np.isfinite(query).all():
            raise ValueError("query vector holds non-finite numbers")
        return query

    def _locate(self, ids: list[str]) -> list[tuple[Segment, int] | None]:
        """Where each id is alive: (segment, position), or None."""
        found: list[tuple[Segment, int] | None] = [None] * len(ids)
        rest = []
        lives = [*self._lives(), *(closing.live for closing in self._closing)]
        for n, id_ in enumerate(ids):
            for live in lives:
                position = live.where.get(id_)
                if position is not None:
                    found[n] = (live, position)
                    break
            else:
                rest.append(n)
        if rest and self._sealed:
            keys = [ids[n] for n in rest]
            hashes = key_hashes(keys)
            for segment in self._sealed:
                positions = segment.table.find(keys, hashes)
                for j in np.flatnonzero(positions >= 0).tolist():
                    if not segment.dead[positions[j]]:
                        found[rest[j]] = (segment, int(positions[j]))
        return found

    # -- writing --------------------------------------------------------------------------------
    def add(self, ids: Sequence[str], vectors: np.ndarray, tags: Sequence[str] | None = None) -> None:
        """Insert or replace: an id already present gets the new vector (and tag)."""
        ids = list(ids)
        matrix = self._checked_vectors(ids, vectors)
        tags = [NO_TAG] * len(ids) if tags is None else list(tags)
        if len(tags) != len(ids) or not all(isinstance(t, str) and len(t.encode()) == TAG_BYTES for t in tags):
            raise ValueError(f"each id needs a tag of {TAG_BYTES} ASCII characters")
        if not ids:
            return
        with self._lock:
            self._apply_add(ids, tags, matrix)
            if not self._building:
                self._pending.extend(Op(ADD, id_, tag, row) for id_, tag, row in zip(ids, tags, matrix, strict=True))

    def delete(self, ids: Sequence[str]) -> int:
        """Remove ids (unknown ones are ignored); returns how many were removed."""
        with self._lock:
            removed = self._apply_delete(list(ids))
            if not self._building:
                self._pending.extend(Op(DELETE, id_) for id_ in removed)
            return len(removed)

    def _apply_add(self, ids: list[str], tags: list[str], matrix: np.ndarray) -> None:
        self._kill(self._locate(ids))
        if self._building:
            self._build_add(ids, tags, matrix)
        else:
            self._live.append(ids, tags, matrix)

    def _build_add(self, ids: list[str], tags: list[str], matrix: np.ndarray) -> None:
        """A rebuild fills one segment until it is half full; from then on two, taking batches in
        turn, so two workers insert at once (the order of batches fixes which segment each goes to:
        the same files still build the same segments, and a vault of under MAX_SEGMENT / 2
        memories still builds one graph)."""
        if self._other is None and self._live.positions() >= MAX_SEGMENT // 2:
            self._other = Live(self.identity.dim)
            self._other.start_worker()
        if self._live.positions() + len(ids) > MAX_SEGMENT and self._live.positions():
            self._hand_off()
        self._live.append(ids, tags, matrix)
        if self._other is not None:
            self._live, self._other = self._other, self._live

    def _apply_delete(self, ids: list[str]) -> list[str]:
        found = self._locate(ids)
        self._kill(found)
        return [id_ for id_, where in zip(ids, found, strict=True) if where is not None]

    def _kill(self, found: list[tuple[Segment, int] | None]) -> None:
        for where in found:
            if where is None:
                continue
            segment, position = where
            closing = next((c for c in self._closing if c.live is segment), None)
            if closing is not None:  # a rebuild's full segment: once written, its key dies in the sealed copy
                closing.thread.join()
                closing.live.kill(position)  # its graph is released: only len and ids see it
                segment = closing.sealed
            segment.kill(position)

    def _checked_vectors(self, ids: list[str], vectors: np.ndarray) -> np.ndarray:
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape != (len(ids), self.identity.dim):
            raise ValueError(f"vectors have shape {matrix.shape}, expected ({len(ids)}, {self.identity.dim})")
        if not all(isinstance(id_, str) and id_ and len(id_.encode()) <= MAX_KEY_BYTES for id_ in ids):
            raise ValueError(f"vector ids must be non-empty strings of at most {MAX_KEY_BYTES} bytes")
        if len(set(ids)) != len(ids):
            raise ValueError("the same id appears twice in one add")
        if not np.isfinite(matrix).all():
            raise ValueError("vectors hold non-finite numbers")
        return np.ascontiguousarray(matrix)

    # -- a rebuild's segments -------------------------------------------------------------------
    def _hand_off(self) -> None:
        """The full live segment goes to a thread that inserts what is queued, writes it and frees
        its graph, while the next one fills. At most one such thread runs (two cores), and the
        segments it wrote before are sealed ones from here on (what a rebuild holds is bounded)."""
        for closing in self._closing:
            closing.thread.join()
        self._finish_building()  # the written ones are sealed segments now: their live keys go
        make_dir(self.folder, MACHINE_DIR_MODE, parents=True)  # its thread writes the segment now
        closing = _Closing(self._live, self._take_number(), self.folder)
        self._closing.append(closing)
        closing.thread.start()
        self._live = Live(self.identity.dim)
        self._live.start_worker()

    def _close_other(self) -> None:
        """The end of a rebuild: its second open segment is handed off too (the first is sealed by
        the final checkpoint)."""
        other, self._other = self._other, None
        if other is None:
            return
        if not other.positions():
            other.stop_worker()
            return
        self._live, other = other, self._live
        self._hand_off()
        self._live.stop_worker()
        self._live = other

    def _finish_building(self) -> None:
        for closing in self._closing:
            closing.thread.join()
            if closing.sealed is None:
                raise closing.failure or IndexUnavailable(f"a vector segment of {self.folder} was not written")
        self._sealed.extend(closing.sealed for closing in self._closing)
        self._closing = []

    # -- saving ---------------------------------------------------------------------------------
    def save(self) -> None:
        """Append what changed to the log (or checkpoint, when the live segment is full or nothing
        was saved yet). See the module docstring for the crash story."""
        with self._save_lock, self._lock:
            self._save_locked()

    def _save_locked(self) -> None:
        make_dir(self.folder, MACHINE_DIR_MODE, parents=True)
        if self._building:
            self._close_other()
            self._finish_building()
            self._checkpoint(seal=self._live.positions() > 0)
            for segment in self._sealed:
                segment.graph = None  # saved whole; the generation is served by opening it
            self._building, self._released = False, True
        elif not self._log:
            self._checkpoint(seal=False)
        elif self._live.positions() >= SEAL_AT:
            self._checkpoint(seal=True)
        elif self._pending:
            self._append(self._pending)
            self._pending = []
            # the same files, the new count (what the web's Status page shows): one small rename
            meta = self._meta(self._sealed, self._live.alive, self._dead_file, self._dead_checksum, self._log)
            atomic_write(self.folder / META_FILE, _meta_bytes(meta), mode=MACHINE_FILE_MODE)

    def _append(self, ops: list[Op]) -> None:
        path = self.folder / _name("log", self._log)
        data = encode_ops(ops, self.identity.dim)
        if os.stat(path).st_nlink > 1:  # shared with another generation (a compaction links files)
            _unshare(path, self._log_end)
        with open(path, "r+b") as handle:
            handle.seek(self._log_end)
            handle.truncate()  # a failed append's partial record goes
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        self._log_end += len(data)

    def _checkpoint(self, *, seal: bool, merged: Sealed | None = None, sources: Sequence[Sealed] = ()) -> None:
        """Write the files of a new state under new names, then the meta over the old one (the commit
        point), then remove what the old state alone named. `seal`: the live segment becomes sealed
        and the log starts empty; else the pending changes go to the current log first."""
        made: list[Path] = []
        sealed = list(self._sealed)
        first, renamed, unsynced = not self._log, [], None
        try:
            if merged is not None:
                at = sealed.index(sources[0])
                sealed = [s for s in sealed if s not in sources]
                sealed.insert(at, merged)
            new_live = None
            if seal:
                new_live = self._live.sealed(self._take_number())
                made += [self.folder / f"{new_live.name}.{ext}" for ext in ("hnsw", "keys")]  # also if half written
                _write_segment(self.folder, new_live)
                sealed.append(new_live)
                log = self._take_number()
                new_log(self.folder / _name("log", log), self.identity.dim)
                made.append(self.folder / _name("log", log))
                fsync_file(made[-1])
                log_end = (self.folder / _name("log", log)).stat().st_size
            else:
                if not self._log:
                    self._log = self._take_number()
                    new_log(self.folder / _name("log", self._log), self.identity.dim)
                    made.append(self.folder / _name("log", self._log))
                    self._log_end = made[-1].stat().st_size
                if self._pending:
                    self._append(self._pending)
                fsync_file(self.folder / _name("log", self._log))
                log, log_end = self._log, self._log_end
            dead_entries = [(s.number, s.dead_positions()) for s in sealed if s.alive < s.positions()]
            dead, dead_checksum = None, None
            if dead_entries:
                dead = self._take_number()
                made.append(self.folder / _name("dead", dead))
                write_dead(made[-1], dead_entries)
                fsync_file(made[-1])
                dead_checksum = _sha256_of(made[-1])
            meta = self._meta(sealed, 0 if seal else self._live.alive, dead, dead_checksum, log)
            fsync_dir(self.folder)
            atomic_write(self.folder / META_FILE, _meta_bytes(meta), mode=MACHINE_FILE_MODE,
                         boundary=lambda stage: renamed.append(stage == "renamed"))  # fmt: skip
        except BaseException as exc:
            if not any(renamed):  # the old meta still names the old files: the new ones go
                for path in made:
                    remove_quietly(path)
                if first:
                    self._log, self._log_end = 0, 0
                raise
            unsynced = exc  # the new meta is in place, its rename maybe not durable: keep every file
        old = [_name("dead", self._dead_file)] if self._dead_file is not None else []
        if seal and self._log:
            old.append(_name("log", self._log))
        for source in sources:
            old += [f"{source.name}.hnsw", f"{source.name}.keys"]
        if seal:
            self._live = Live(self.identity.dim)
        self._sealed, self._dead_file, self._log, self._log_end, self._pending = sealed, dead, log, log_end, []
        self._dead_checksum = dead_checksum
        if unsynced is not None:
            raise unsynced
        for name in old:
            remove_quietly(self.folder / name)

    def _meta(
        self, sealed: list[Sealed], live: int, dead: int | None, dead_checksum: str | None, log: int
    ) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "provider": self.identity.provider,
            "model": self.identity.model,
            "dim": self.identity.dim,
            "space": SPACE,
            "count": sum(s.alive for s in sealed) + live,
            "segments": [{"number": s.number, "count": s.positions(), "checksum": s.checksum} for s in sealed],
            "dead": dead,
            "dead_checksum": dead_checksum,
            "log": log,
            "next": self._next,
        }

    def _take_number(self) -> int:
        number, self._next = self._next, self._next + 1
        return number

    # -- merging --------------------------------------------------------------------------------
    def stage_save(self) -> StagedMerge | None:
        """The slow half of a save, without the caller's lock: a merge of sealed segments when one
        is due, built and written beside the index (None when none is due). `put_staged` puts it in
        place and saves the rest."""
        with self._save_lock:
            with self._lock:
                sources = _merge_plan(self._sealed)
                if not sources:
                    return None
                parts = [(source, *source.alive_vectors()) for source in sources]
                number = self._take_number()
            origin = [(source, position) for source, positions, _ in parts for position in positions]
            vectors = np.vstack([matrix for _, _, matrix in parts])
            graph = new_graph(self.identity.dim, len(origin))
            if len(origin):
                graph.add_items(vectors, np.arange(len(origin)), num_threads=1)
            table = KeyTable.of([s.key(p) for s, p in origin], [s.tag(p) for s, p in origin])
            merged = Sealed(number, table, graph)
            try:
                _write_segment(self.folder, merged)
            except BaseException:
                _remove_segment(self.folder, merged)
                raise
            return StagedMerge(merged, tuple(sources), origin)

    def put_staged(self, staged: StagedMerge | None) -> bool:
        """Put a staged merge in place (positions that died since are marked dead in it) and save the
        rest; a merge whose segments another merge or a reload replaced is dropped (False)."""
        with self._save_lock, self._lock:
            if staged is None:
                self._save_locked()
                return True
            if not all(any(source is s for s in self._sealed) for source in staged.sources):
                staged.discard(self.folder)
                self._save_locked()
                return False
            for position, (source, at) in enumerate(staged.origin):
                if source.dead[at]:
                    staged.merged.kill(position)
            try:
                self._checkpoint(seal=self._live.positions() >= SEAL_AT, merged=staged.merged, sources=staged.sources)
            except BaseException:
                if not any(staged.merged is s for s in self._sealed):  # not in place (the meta names it else)
                    staged.discard(self.folder)
                raise
            return True

    def stamp(self) -> tuple:
        """Changes whenever a save lands (the meta's identity and the log's length): `reload_if_changed`."""
        return (_signature(self.folder / META_FILE), _signature(self.folder / _name("log", self._log)))


class _Closing:
    """A rebuild's full segment on its way to disk: its worker inserts what is queued, then this
    thread writes the sealed segment and frees the graph."""

    def __init__(self, live: Live, number: int, folder: Path):
        self.live, self.number, self.folder = live, number, folder
        self.sealed: Sealed | None = None
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._seal, name="memvault-vector-seal", daemon=True)

    def _seal(self) -> None:
        try:
            sealed = self.live.sealed(self.number)
            _write_segment(self.folder, sealed)
        except BaseException as exc:  # raised by `_finish_building`
            self.failure = exc
            return
        sealed.graph = self.live.graph = None  # written: a rebuild holds only what it is filling
        self.sealed = sealed


@dataclass(frozen=True)
class StagedMerge:
    merged: Sealed
    sources: tuple[Sealed, ...]
    origin: list[tuple[Sealed, int]]

    def discard(self, folder: Path) -> None:
        _remove_segment(folder, self.merged)


def _merge_plan(sealed: list[Sealed]) -> list[Sealed]:
    """FANIN sealed segments of the smallest size tier that has them (their merge within
    MAX_SEGMENT), or one segment mostly dead; [] when no merge is due."""
    loaded = [s for s in sealed if s.graph is not None]
    for segment in loaded:
        if segment.positions() >= SEAL_AT and segment.alive * 2 < segment.positions():
            return [segment]
    tiers: dict[int, list[Sealed]] = {}
    for segment in loaded:
        tier = 0
        while segment.alive >= SEAL_AT * FANIN ** (tier + 1):
            tier += 1
        tiers.setdefault(tier, []).append(segment)
    for tier in sorted(tiers):
        group = tiers[tier][:FANIN]
        if len(group) == FANIN and sum(s.alive for s in group) <= MAX_SEGMENT:
            return group
    return []


# -- files ---------------------------------------------------------------------------------------


def _name(kind: str, number: int) -> str:
    return f"{kind}-{number:06d}.bin"


def _write_segment(folder: Path, segment: Sealed) -> list[Path]:
    graph_path, keys_path = folder / f"{segment.name}.hnsw", folder / f"{segment.name}.keys"
    segment.graph.save_index(str(graph_path))
    segment.table.write(keys_path)
    for path in (graph_path, keys_path):
        os.chmod(path, MACHINE_FILE_MODE)
        fsync_file(path)
    segment.checksum = _sha256_of(graph_path, keys_path)
    return [graph_path, keys_path]


def _unshare(path: Path, length: int) -> None:
    """Give `path` a copy of its first `length` bytes of its own, renamed over the shared link:
    files are replaced by rename, never changed in place where another name sees them."""
    copy = write_temp(path.parent, path.name, path.read_bytes()[:length], mode=MACHINE_FILE_MODE)
    os.replace(copy, path)
    fsync_dir(path.parent)


def _remove_segment(folder: Path, segment: Sealed) -> None:
    remove_quietly(folder / f"{segment.name}.hnsw")
    remove_quietly(folder / f"{segment.name}.keys")


def _load_segment(folder: Path, number: int, count: int, checksum: str, dim: int) -> Sealed:
    name = f"seg-{number:06d}"
    graph_path, keys_path = folder / f"{name}.hnsw", folder / f"{name}.keys"
    signature = check_graph_file(graph_path, dim, count)
    if _sha256_of(graph_path, keys_path) != checksum:
        raise Inconsistent(f"vector segment {graph_path} does not match its checksum (a damaged file): {_REBUILD}")
    graph = hnswlib.Index(space=SPACE, dim=dim)
    try:
        graph.load_index(str(graph_path))
    except (RuntimeError, ValueError, MemoryError) as exc:
        raise IndexUnavailable(f"cannot load {graph_path} ({exc}): {_REBUILD}") from None
    if _signature(graph_path) != signature:
        raise Inconsistent(f"{graph_path} was replaced while it was loaded: {_REBUILD}")
    graph.set_num_threads(1)
    table = KeyTable.read(keys_path)
    if len(table) != count or graph.get_current_count() != count:
        raise Inconsistent(f"{name} holds {graph.get_current_count()} vectors and {len(table)} keys, "
                            f"its meta says {count}: {_REBUILD}")  # fmt: skip
    sealed = Sealed(number, table, graph)
    sealed.checksum = checksum
    return sealed


def _read_dead_checked(folder: Path, number: int, checksum: Any) -> dict[int, np.ndarray]:
    path = folder / _name("dead", number)
    if not path.is_file():
        raise Inconsistent(f"{path} is missing: {_REBUILD}")
    if _sha256_of(path) != checksum:
        raise Inconsistent(f"{path} does not match its checksum: {_REBUILD}")
    return read_dead(path)


def _sha256_of(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        try:
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
        except FileNotFoundError:
            raise Inconsistent(f"{path} is missing: {_REBUILD}") from None
    return digest.hexdigest()


def _meta_bytes(meta: dict[str, Any]) -> bytes:
    return (json.dumps(meta, sort_keys=True, separators=(",", ":")) + "\n").encode("ascii")


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)
