"""The vector index's segments: hnswlib graphs whose labels are positions, with their keys beside.

A *sealed* segment is immutable on disk (its graph and key table are written once); what changes
afterwards is only which of its positions are dead. The *live* segment takes every new vector; the
log replays it on open, and a save that finds it full seals it. Every key is alive in at most one
segment: an upsert kills the old position wherever it is and appends the new one to the live
segment. Searching asks every segment for its k best and keeps the best k of all.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence

import hnswlib
import numpy as np

from memvault.indexer.search.vector_files import KeyTable

SPACE = "cosine"  # hnswlib normalises on insert and query; distance = 1 - cosine similarity
M = 16
EF_CONSTRUCTION = 64  # 3x faster builds than 200 at the same measured recall (bench/bench_search.py)
RANDOM_SEED = 100
MIN_CAPACITY = 1024
MIN_EF = 64
#: batches a rebuild's segment worker may have waiting: what it has not inserted yet stays bounded
WORKER_BACKLOG = 4


def new_graph(dim: int, capacity: int) -> hnswlib.Index:
    graph = hnswlib.Index(space=SPACE, dim=dim)
    graph.init_index(max_elements=max(1, capacity), M=M, ef_construction=EF_CONSTRUCTION, random_seed=RANDOM_SEED)
    graph.set_num_threads(1)  # single-threaded inserts: the same inputs build the same graph
    return graph


class Segment:
    """What sealed and live segments share: a graph (None once released), dead positions, search."""

    graph: hnswlib.Index | None
    alive: int

    def key(self, position: int) -> str:
        raise NotImplementedError

    def tag(self, position: int) -> str:
        raise NotImplementedError

    def is_dead(self, position: int) -> bool:
        raise NotImplementedError

    def positions(self) -> int:
        raise NotImplementedError

    def kill(self, position: int) -> None:
        self._set_dead(position)
        self.alive -= 1
        if self.graph is not None:
            self.graph.mark_deleted(position)

    def _set_dead(self, position: int) -> None:
        raise NotImplementedError

    def search(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        want = min(k, self.alive)
        if want <= 0:
            return []
        self.graph.set_ef(max(MIN_EF, 2 * want))
        try:
            labels, distances = self.graph.knn_query(query, k=want, num_threads=1)
        except RuntimeError:
            return self._exact(query, want)  # fewer than k reachable (heavy deletion)
        return [
            (self.key(label), 1.0 - float(d))
            for label, d in zip(labels[0].tolist(), distances[0].tolist(), strict=True)
        ]

    def _exact(self, query: np.ndarray, want: int) -> list[tuple[str, float]]:
        """Brute force over the live positions: the fallback when the graph cannot supply k hits."""
        alive = [p for p in range(self.positions()) if not self.is_dead(p)]
        vectors = np.asarray(self.graph.get_items(alive, return_type="numpy"), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1)
        np.divide(vectors, norms[:, None], out=vectors, where=norms[:, None] > 0)
        scores = vectors @ (query / max(float(np.linalg.norm(query)), 1e-30))
        hits = [(self.key(p), float(s)) for p, s in zip(alive, scores.tolist(), strict=True)]
        return sorted(hits, key=lambda hit: (-hit[1], hit[0]))[:want]

    def alive_vectors(self) -> tuple[list[int], np.ndarray]:
        alive = [p for p in range(self.positions()) if not self.is_dead(p)]
        if not alive:
            return [], np.zeros((0, self.graph.dim), dtype=np.float32)
        return alive, np.asarray(self.graph.get_items(alive, return_type="numpy"), dtype=np.float32)


class Sealed(Segment):
    def __init__(self, number: int, table: KeyTable, graph: hnswlib.Index | None, dead: np.ndarray | None = None):
        self.number = number
        self.table = table
        self.graph = graph
        self.dead = np.zeros(len(table), dtype=bool) if dead is None else dead
        self.alive = int(len(table) - self.dead.sum())
        self.checksum = ""  # of its two files, once written or loaded

    @property
    def name(self) -> str:
        return f"seg-{self.number:06d}"

    def key(self, position: int) -> str:
        return self.table.key(position)

    def tag(self, position: int) -> str:
        return self.table.tag(position)

    def is_dead(self, position: int) -> bool:
        return bool(self.dead[position])

    def positions(self) -> int:
        return len(self.table)

    def _set_dead(self, position: int) -> None:
        self.dead[position] = True

    def dead_positions(self) -> np.ndarray:
        return np.flatnonzero(self.dead)

    def kill_loaded(self, position: int) -> None:
        """`kill` for a dead-list position on open: a graph sealed from the live segment was saved
        with the positions dead by then marked already, and hnswlib refuses to mark one twice."""
        self._set_dead(position)
        self.alive -= 1
        try:
            self.graph.mark_deleted(position)
        except RuntimeError as exc:
            if "already deleted" not in str(exc):
                raise


class Live(Segment):
    """The segment new vectors go to. In a rebuild it inserts on a worker thread of its own, so a
    second core builds one segment while the rebuild fills the next (`start_worker`)."""

    def __init__(self, dim: int, capacity: int = MIN_CAPACITY):
        self.graph = new_graph(dim, capacity)
        self.dim = dim
        self.keys: list[str] = []
        self.tags: list[str] = []
        self.where: dict[str, int] = {}  # key -> its alive position
        self.dead: set[int] = set()
        self.alive = 0
        self._queue: queue.Queue | None = None
        self._worker: threading.Thread | None = None
        self._failure: BaseException | None = None

    def key(self, position: int) -> str:
        return self.keys[position]

    def tag(self, position: int) -> str:
        return self.tags[position]

    def is_dead(self, position: int) -> bool:
        return position in self.dead

    def positions(self) -> int:
        return len(self.keys)

    def _set_dead(self, position: int) -> None:
        self.settle()  # the graph must hold the position before it is marked
        self.dead.add(position)
        del self.where[self.keys[position]]

    def append(self, keys: Sequence[str], tags: Sequence[str], matrix: np.ndarray) -> None:
        start = len(self.keys)
        for offset, key in enumerate(keys):
            self.where[key] = start + offset
        self.keys.extend(keys)
        self.tags.extend(tags)
        self.alive += len(keys)
        labels = np.arange(start, start + len(keys))
        if self._queue is not None:
            self._queue.put((matrix, labels))
        else:
            self._insert(matrix, labels)

    def _insert(self, matrix: np.ndarray, labels: np.ndarray) -> None:
        needed = int(labels[-1]) + 1
        capacity = self.graph.get_max_elements()
        if needed > capacity:
            self.graph.resize_index(max(needed, 2 * capacity))
        self.graph.add_items(matrix, labels, num_threads=1)

    # -- a rebuild's worker ----------------------------------------------------------------------
    def start_worker(self) -> None:
        self._queue = queue.Queue(maxsize=WORKER_BACKLOG)  # a full backlog holds the filling thread back
        self._worker = threading.Thread(target=self._work, name="memvault-vector-segment", daemon=True)
        self._worker.start()

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                if self._failure is None:
                    self._insert(*item)
            except BaseException as exc:  # re-raised by `settle` in the thread that waits
                self._failure = exc
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def settle(self) -> None:
        """Wait until the worker has inserted everything handed to it (no worker: nothing to wait for)."""
        if self._queue is not None:
            self._queue.join()
        if self._failure is not None:
            raise self._failure

    def stop_worker(self) -> None:
        if self._queue is not None:
            self._queue.put(None)
            self._worker.join()
            self._queue = self._worker = None
        if self._failure is not None:
            raise self._failure

    def sealed(self, number: int) -> Sealed:
        """This segment as sealed segment `number` (its graph moves over; its keys become a table)."""
        self.stop_worker()
        dead = np.zeros(len(self.keys), dtype=bool)
        dead[list(self.dead)] = True  # already marked in the graph by `kill`
        return Sealed(number, KeyTable.of(self.keys, self.tags), self.graph, dead)
