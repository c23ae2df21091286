"""Vectors for the Journal and BuJo tiers: which generation they belong to, how they follow it.

* A generation being **built** (rebuild) embeds synchronously: its vectors are complete before
  the pointer swap.
* The **serving** generation takes writes through the bounded `SemanticQueue`, so embedding is
  never on a write's critical path; BM25 already answers for the new memory meanwhile.
* On open, vectors left behind by a process that died with work queued (its lag marker is still
  there), or that do not cover every curated row, are caught up from the files.
* A vector index built for another provider/model/dim is never searched: recall says
  "degraded" and answers from BM25 until `memvault rebuild`.
"""

import queue
import threading
from collections.abc import Callable

import numpy as np

from memvault.indexer.maintenance.derived import DerivedIndex, read_note_records
from memvault.indexer.maintenance.progress import PhaseLog
from memvault.indexer.maintenance.semantic import SemanticIndex, record_passage_hash
from memvault.indexer.maintenance.semantic_queue import SemanticQueue, dead_markers
from memvault.indexer.maintenance.sync import IndexDelta
from memvault.indexer.search.embeddings import EmbeddingIdentity, EmbeddingProvider, make_provider
from memvault.vault.config import Config
from memvault.vault.errors import IndexUnavailable, ProviderUnavailable, VaultError
from memvault.vault.layout import VaultLayout
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS
from memvault.vault.locks import VaultLock


class _Building:
    """Component of a generation under construction: embed and insert on a builder thread.

    A rebuild parses notes and fills BM25 on the calling thread while this thread embeds and
    inserts vectors, so the two cores both work. Deltas are applied strictly in arrival order
    by one thread, so two rebuilds of the same files still build identical vector indexes.
    """

    def __init__(self, semantic: SemanticIndex, provider: Callable[[], EmbeddingProvider], progress: PhaseLog):
        self.semantic = semantic
        self._provider = provider
        self._progress = progress
        self.queued = 0  # curated memories handed to the builder: the embedding phase's total
        progress.start_beside("embedding")
        self._deltas: "queue.Queue[IndexDelta | None]" = queue.Queue()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="memvault-rebuild-vectors", daemon=True)
        self._thread.start()

    def apply(self, delta: IndexDelta) -> None:
        self._raise_failure()
        self.queued += _curated(delta)
        self._deltas.put(delta)

    def committed(self, delta: IndexDelta) -> None:
        pass  # handed to the builder in `apply`: a failed commit fails the whole rebuild

    def finish(self) -> None:
        """Wait until every delta is in the index; re-raise what the builder thread hit."""
        self._progress.phase("embedding", total=self.queued)
        self._deltas.put(None)
        self._thread.join()
        self._raise_failure()

    def abandon(self) -> None:
        """Stop the builder thread without finishing (the rebuild failed)."""
        self._failure = self._failure or RuntimeError("rebuild abandoned")
        self._deltas.put(None)

    def _run(self) -> None:
        while (delta := self._deltas.get()) is not None:
            if self._failure is None:
                try:
                    self.semantic.commit(self.semantic.prepare(delta, self._provider()))
                except BaseException as exc:  # handed to the rebuilding thread by `finish`
                    self._failure = exc
                self._progress.advance("embedding", _curated(delta))

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure


def _curated(delta: IndexDelta) -> int:
    return sum(1 for record in delta.upserts if record.kind == "curated")


class _Serving:
    """Component of the serving generation: queue the delta for the background worker."""

    def __init__(self, queue: SemanticQueue):
        self._queue = queue

    def apply(self, delta: IndexDelta) -> None:
        self._queue.mark_lagging(delta)  # on disk before BM25 changes: a crash after it is caught up

    def committed(self, delta: IndexDelta) -> None:
        self._queue.offer(delta)  # only rows BM25 holds are embedded


class SemanticService:
    def __init__(self, layout: VaultLayout, config: Config, provider: EmbeddingProvider | None = None):
        embeddings = config.memory.embeddings
        self.layout = layout
        self.identity = EmbeddingIdentity(embeddings.provider, embeddings.model, embeddings.dim)
        self._config = config
        self._provider = provider
        self._queue = SemanticQueue(layout.index_dir, self._run_batch, self._catch_up_live)
        #: set by the store: embeds what the serving vectors miss, under the vault lock (a live
        #: process's catch-up after a queue overflow)
        self.catch_up_source: Callable[[], None] | None = None
        self._serving: SemanticIndex | None = None
        #: why vector search is unavailable for the serving generation, or None
        self.unavailable: str | None = None

    def provider(self) -> EmbeddingProvider:
        if self._provider is None:
            embeddings = self._config.memory.embeddings
            llm = self._config.memory.llm
            timeout = (llm.timeout_ms / 1000) if llm is not None else 60.0
            self._provider = make_provider(
                embeddings.provider, embeddings.model, embeddings.dim, embeddings.endpoint, timeout
            )
        return self._provider

    # --- generations ---------------------------------------------------------------------------

    def attach_building(self, index: DerivedIndex, progress: PhaseLog | None = None) -> None:
        building = _Building(SemanticIndex.create(index.generation, self.identity), self.provider,
                             progress or PhaseLog())  # fmt: skip
        index.components = [building]

    def finish_building(self, index: DerivedIndex, progress: PhaseLog | None = None) -> None:
        for component in index.components:
            if isinstance(component, _Building):
                component.finish()
                (progress or PhaseLog()).phase("vectors")
                component.semantic.save()

    def abandon_building(self, index: DerivedIndex) -> None:
        for component in index.components:
            if isinstance(component, _Building):
                component.abandon()

    def attach_serving(self, index: DerivedIndex) -> None:
        try:
            self._serving = SemanticIndex.open(index.generation, self.identity)
            self.unavailable = None
            index.components = [_Serving(self._queue)]
        except IndexUnavailable as exc:
            self._serving = None
            self.unavailable = f"vector search unavailable ({exc})"
            index.components = []

    # --- keeping up ----------------------------------------------------------------------------

    def _run_batch(self, deltas: list[IndexDelta]) -> None:
        semantic = self._serving
        if semantic is None:
            return
        prepared = semantic.prepare(merge_deltas(deltas), self.provider())  # outside the lock: may be slow
        with VaultLock(self.layout.root):
            current = semantic.reload_if_changed()
            current.commit(prepared)
            current.save()
            self._serving = current

    def _catch_up_live(self) -> None:
        if self.catch_up_source is not None:
            self.catch_up_source()

    def catch_up(self, index: DerivedIndex, vault_zone: str, *, thorough: bool = False) -> int:
        """Embed what the serving vectors miss; returns how many notes were redone. Lock held.

        Without `thorough`, a vector count equal to the curated row count (and no dead process's
        lag marker) is trusted; after an overflow it is not (the lost deltas may be edits)."""
        semantic = self._serving
        markers = dead_markers(self.layout.index_dir)
        if semantic is None:
            return 0
        if not thorough and not markers and len(semantic.vectors) == _curated_rows(index):
            return 0
        semantic = semantic.reload_if_changed()
        stale_paths, extra = semantic.lagging_paths(index.all_rows())
        delta = IndexDelta(removed=set(extra))
        for path in sorted(stale_paths):
            records = read_note_records(self.layout, path, vault_zone).records
            delta.upserts += [r for r in records if semantic.passages.get(f"{r.path}#{r.id}") != record_passage_hash(r)]
        if not delta.is_empty or extra:
            semantic.commit(semantic.prepare(delta, self.provider()))
            semantic.save()
        self._serving = semantic
        for marker in markers:
            marker.unlink(missing_ok=True)
        return len(stale_paths)

    def stop(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> bool:
        return self._queue.stop(timeout)

    def drain(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> bool:
        return self._queue.drain(timeout)

    @property
    def lag_reason(self) -> str | None:
        return self._queue.lag_reason

    @property
    def waiting(self) -> int:
        """Memories whose vectors overflowed the queue and wait for this process's catch-up."""
        return self._queue.overflowed

    # --- reading -------------------------------------------------------------------------------

    def search(self, query: str, depth: int) -> tuple[list[tuple[str, float]] | None, str | None]:
        """(vector hits, None) or (None, why vector search could not run)."""
        if self._serving is None:
            return None, self.unavailable or "vector index not loaded"
        try:
            self._serving = self._serving.reload_if_changed()
            vector = self.provider().embed_query(query)
        except (ProviderUnavailable, IndexUnavailable) as exc:
            return None, f"vector search unavailable ({exc})"
        except VaultError as exc:
            return None, f"vector search unavailable ({exc})"
        lag = self._lag_note()
        if not np.isfinite(vector).all() or not vector.any():
            return [], lag
        return self._serving.search(vector, depth), lag

    def _lag_note(self) -> str | None:
        waiting, reason = self._queue.overflowed, self._queue.lag_reason
        if waiting:
            note = f"vectors are catching up: {waiting} memories have no current vector yet (BM25 finds them meanwhile)"
            return note if reason is None or reason.startswith("semantic queue full") else f"{note}; {reason}"
        if reason is not None:  # a failure this process cannot retry: the next open catches up
            return f"vectors may lag the notes ({reason}); BM25 finds every memory meanwhile"
        return None


def merge_deltas(deltas: list[IndexDelta]) -> IndexDelta:
    """One delta equal to applying `deltas` in order: each key's latest record, or its removal."""
    latest: dict[str, object] = {}
    removed: set[str] = set()
    for delta in deltas:
        for key in delta.removed:
            latest.pop(key, None)
            removed.add(key)
        for record in delta.upserts:
            key = f"{record.path}#{record.id}"
            latest[key] = record
            removed.discard(key)
    return IndexDelta(upserts=list(latest.values()), removed=removed)


def _curated_rows(index: DerivedIndex) -> int:
    return index.bm25.count_kind("curated")
