"""Vectors for the Journal and BuJo tiers: which generation they belong to, how they follow it.

* A generation being **built** (rebuild) embeds synchronously: its vectors are complete before
  the pointer swap.
* The **serving** generation takes writes through the bounded `SemanticQueue`, so embedding is
  never on a write's critical path; BM25 already answers for the new memory meanwhile.
* On open, vectors left behind by a process that died with work queued (its lag marker is still
  there), or that do not cover every curated row, are caught up from the files.
* A vector index built for another provider/model/dim is never searched: recall says
  "degraded" and answers from BM25 until `memvault rebuild`.

With `memory.extraEmbeddings` a generation holds a second vector list (`vectors-extra/`, another
model's vectors of the same passages) that recall fuses beside the first. Each list is a `_Lane`:
its own folder, identity, provider and serving index, built by the same rebuild, fed by the same
queue and caught up by the same catch-up, so the two never follow different rules. A lane that
fails (its model cannot load) leaves the other one working; recall says which is unavailable.
"""

import queue
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np

from memvault.indexer.maintenance.derived import DerivedIndex
from memvault.indexer.maintenance.progress import PhaseLog
from memvault.indexer.maintenance.semantic import EXTRA_FOLDER, FOLDER, SemanticIndex
from memvault.indexer.maintenance.semantic_catch_up import commit as commit_plans
from memvault.indexer.maintenance.semantic_catch_up import overtaken
from memvault.indexer.maintenance.semantic_catch_up import plan as catch_up_plan
from memvault.indexer.maintenance.semantic_catch_up import prepare as prepare_plans
from memvault.indexer.maintenance.semantic_queue import SemanticQueue, dead_markers
from memvault.indexer.maintenance.sync import IndexDelta
from memvault.indexer.search.embeddings import EmbeddingIdentity, EmbeddingProvider, make_provider
from memvault.vault.config import Config
from memvault.vault.errors import IndexUnavailable, ProviderUnavailable, VaultError
from memvault.vault.layout import VaultLayout
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS
from memvault.vault.locks import VaultLock

#: deltas (one per batch of notes) a rebuild's vector thread may have waiting
BUILD_BACKLOG = 4


class _Building:
    """Component of a generation under construction: embed and insert on a builder thread.

    A rebuild parses notes and fills BM25 on the calling thread while this thread embeds and
    inserts vectors, so the two cores both work. Deltas are applied strictly in arrival order
    by one thread, so two rebuilds of the same files still build identical vector indexes.
    """

    def __init__(
        self,
        semantic: SemanticIndex,
        provider: Callable[[], EmbeddingProvider],
        progress: PhaseLog,
        phase: str = "embedding",
    ):
        self.semantic = semantic
        self._provider = provider
        self._progress = progress
        self._phase = phase
        self.queued = 0  # curated memories handed to the builder: the embedding phase's total
        progress.start_beside(phase)
        # bounded: notes parse faster than vectors are inserted, and a whole vault's deltas would wait here
        self._deltas: queue.Queue[IndexDelta | None] = queue.Queue(maxsize=BUILD_BACKLOG)
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
        self._progress.phase(self._phase, total=self.queued)
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
                self._progress.advance(self._phase, _curated(delta))

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


class _Lane:
    """One vector list of the vault: where it lives in a generation, its model, its serving index."""

    def __init__(self, name: str, folder: str, embeddings, timeout_s: float):
        self.name = name  # "vector" (memory.embeddings) or "extra" (memory.extraEmbeddings)
        self.folder = folder
        self.identity = EmbeddingIdentity(embeddings.provider, embeddings.model, embeddings.dim)
        self._embeddings = embeddings
        self._timeout_s = timeout_s
        self._provider: EmbeddingProvider | None = None
        self.serving: SemanticIndex | None = None
        #: why this list cannot be searched in the serving generation, or None
        self.unavailable: str | None = None

    def provider(self) -> EmbeddingProvider:
        if self._provider is None:
            e = self._embeddings
            self._provider = make_provider(e.provider, e.model, e.dim, e.endpoint, self._timeout_s)
        return self._provider

    @property
    def phase(self) -> str:
        return "embedding" if self.name == "vector" else f"embedding {self.identity.provider}"

    def what(self) -> str:
        return "vector search" if self.name == "vector" else f"{self.identity.provider} vector search"


class SemanticService:
    #: a search may run in another thread beside the BM25 search of the same recall: hnswlib
    #: queries and the providers take their own locks, and both release the GIL while they work
    searches_beside_bm25 = True

    def __init__(self, layout: VaultLayout, config: Config):
        llm = config.memory.llm
        timeout = (llm.timeout_ms / 1000) if llm is not None else 60.0
        self.layout = layout
        self._config = config
        self._lanes = [_Lane("vector", FOLDER, config.memory.embeddings, timeout)]
        extra = config.memory.extra_embeddings
        #: the second model's list (memory.extraEmbeddings), or None
        self._extra = _Lane("extra", EXTRA_FOLDER, extra, timeout) if extra is not None else None
        if self._extra is not None:
            self._lanes.append(self._extra)
        self.identity = self._lanes[0].identity
        self._queue = SemanticQueue(layout.index_dir, self._run_batch, self._catch_up_live, self.save_serving)
        #: set by the store: embeds what the serving vectors miss in the notes named (None: in any
        #: note), taking the vault lock itself (a live process's catch-up after a queue overflow)
        self.catch_up_source: Callable[[set[str] | None], None] | None = None

    def provider(self) -> EmbeddingProvider:
        return self._lanes[0].provider()

    @property
    def _serving(self) -> SemanticIndex | None:
        return self._lanes[0].serving

    @property
    def unavailable(self) -> str | None:
        """Why vector search is unavailable for the serving generation, or None."""
        return self._lanes[0].unavailable

    @property
    def extra_identity(self) -> EmbeddingIdentity | None:
        """The second list's model (memory.extraEmbeddings), or None when there is none."""
        return None if self._extra is None else self._extra.identity

    # --- generations ---------------------------------------------------------------------------

    def attach_building(self, index: DerivedIndex, progress: PhaseLog | None = None) -> None:
        progress = progress or PhaseLog()
        index.components = [
            _Building(
                SemanticIndex.create(index.generation, lane.identity, lane.folder, building=True),
                lane.provider,
                progress,
                lane.phase,
            )
            for lane in self._lanes
        ]

    def finish_building(self, index: DerivedIndex, progress: PhaseLog | None = None) -> None:
        building = [component for component in index.components if isinstance(component, _Building)]
        for component in building:
            component.finish()
        if building:
            (progress or PhaseLog()).phase("vectors")
        for component in building:
            component.semantic.save()

    def abandon_building(self, index: DerivedIndex) -> None:
        for component in index.components:
            if isinstance(component, _Building):
                component.abandon()

    def attach_serving(self, index: DerivedIndex) -> None:
        for lane in self._lanes:
            try:
                lane.serving = SemanticIndex.open(index.generation, lane.identity, lane.folder)
                lane.unavailable = None
            except IndexUnavailable as exc:
                lane.serving = None
                lane.unavailable = f"{lane.what()} unavailable ({exc})"
        served = any(lane.serving is not None for lane in self._lanes)
        index.components = [_Serving(self._queue)] if served else []

    # --- keeping up ----------------------------------------------------------------------------

    def _run_batch(self, deltas: list[IndexDelta]) -> None:
        """Embed the batch for every list (outside the lock: may be slow), commit what embedded.
        A list whose model failed does not hold the other back; its failure is raised after, so
        the queue counts the memories as waiting and the catch-up retries them."""
        delta = merge_deltas(deltas)
        prepared, failure = [], None
        for lane in self._lanes:
            if lane.serving is None:
                continue
            try:
                prepared.append((lane, lane.serving.prepare(delta, lane.provider())))
            except Exception as exc:  # noqa: BLE001  handed to the queue below
                failure = failure or exc
        if prepared:  # saved by the queue soon after (`SAVE_AFTER_SECONDS`), not after every batch
            with VaultLock(self.layout.root):
                for lane, vectors in prepared:
                    current = lane.serving.reload_if_changed()
                    current.commit(vectors)
                    lane.serving = current
                self._unsaved = True
        if failure is not None:
            raise failure

    #: batches committed vectors in memory that are not saved yet
    _unsaved = False

    def save_serving(self) -> None:
        """Write the serving vectors to disk if batches committed some in memory since the last save.

        The files are written beside the current ones first, without the vault lock; under it
        they are only renamed into place. A batch committed meanwhile has the lane saved whole
        under the lock instead (`SemanticIndex.put_staged`), so the files hold what memory does."""
        if not self._unsaved:
            return
        staged = {}
        try:
            try:
                for lane in self._lanes:
                    if lane.serving is not None:
                        staged[id(lane)] = (lane.serving, lane.serving.stage_save())
            except OSError:
                pass  # (a full disk) the whole save under the lock says so, and marks the vectors unsaved
            with VaultLock(self.layout.root):
                for lane in self._lanes:
                    serving, stage = staged.get(id(lane), (None, None))
                    if lane.serving is not None and lane.serving is serving:
                        del staged[id(lane)]
                        lane.serving.put_staged(stage)
                    elif lane.serving is not None:  # not staged, or reloaded since (another process saved)
                        lane.serving.save()
                self._unsaved = False
        finally:
            for _, stage in staged.values():
                stage.discard()

    def _catch_up_live(self, paths: set[str] | None) -> None:
        if self.catch_up_source is not None:
            self.catch_up_source(paths)

    def catch_up(
        self, index: DerivedIndex, vault_zone: str, *, thorough: bool = False, paths: set[str] | None = None
    ) -> int:
        """Embed what the serving vectors miss, and save; returns how many notes were redone.
        Lock held (indexer/maintenance/semantic_catch_up.py).

        Without `thorough`, a vector count equal to the curated row count (and no dead process's
        lag marker) is trusted; after an overflow it is not (the lost deltas may be edits).
        `paths` limits it to those notes (unless a dead process's marker asks for every row).
        Every list is caught up before the markers go; one whose model fails raises after the
        others are done."""
        markers = dead_markers(self.layout.index_dir)
        if all(lane.serving is None for lane in self._lanes):
            return 0  # nothing to catch up into: the markers stay for the open that has vectors
        if markers:
            thorough, paths = True, None
        plans, failure = catch_up_plan(self._lanes, self.layout, index, vault_zone, paths=paths, thorough=thorough)
        embedding_failure = prepare_plans(plans)
        failure = failure or embedding_failure
        for plan in commit_plans(plans):
            plan.semantic.save()
        if failure is not None:
            raise failure
        for marker in markers:
            marker.unlink(missing_ok=True)
        return max((plan.stale_notes for plan in plans), default=0)

    def catch_up_beside_writers(
        self, locked_index: Callable[[], AbstractContextManager[DerivedIndex]], vault_zone: str, paths: set[str] | None
    ) -> None:
        """A live owner's catch-up after its queue overflowed: plan and commit under the vault
        lock (`locked_index()` holds it and gives the serving index), embed between the two, so
        writers never wait for the embedding. `paths`: the notes that overflowed (None: any). The
        vectors are saved on the queue's timer, like a batch's; a plan another commit overtook
        meanwhile is done again under one lock hold."""
        if paths is None:
            with locked_index() as index:
                self.catch_up(index, vault_zone, thorough=True)
            return
        with locked_index() as index:
            plans, failure = catch_up_plan(self._lanes, self.layout, index, vault_zone, paths=paths)
        embedding_failure = prepare_plans(plans)
        failure = failure or embedding_failure
        with locked_index() as index:
            if overtaken(plans):
                self.catch_up(index, vault_zone, paths=paths)
                return
            if commit_plans(plans):
                self._unsaved = True
        if failure is not None:
            raise failure

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
        return self._search(self._lanes[0], query, depth)

    def search_extra(self, query: str, depth: int) -> tuple[list[tuple[str, float]] | None, str | None]:
        """The second model's hits as `search` gives the first's; (None, None) when there is no
        second list configured."""
        if self._extra is None:
            return None, None
        return self._search(self._extra, query, depth)

    def _search(self, lane: _Lane, query: str, depth: int) -> tuple[list[tuple[str, float]] | None, str | None]:
        if lane.serving is None:
            return None, lane.unavailable or f"{lane.what()}: vector index not loaded"
        try:
            lane.serving = lane.serving.reload_if_changed()
            vector = lane.provider().embed_query(query)
        except (ProviderUnavailable, IndexUnavailable) as exc:
            return None, f"{lane.what()} unavailable ({exc})"
        except VaultError as exc:
            return None, f"{lane.what()} unavailable ({exc})"
        lag = self._lag_note()
        if not np.isfinite(vector).all() or not vector.any():
            return [], lag
        return lane.serving.search(vector, depth), lag

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
