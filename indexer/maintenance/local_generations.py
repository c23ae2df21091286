"""`LocalGenerations`: the store's generations in the vault's `.index/` folder (Tantivy + hnswlib),
the local engine's side of `backend.base.IndexGenerations`.

A generation is a `DerivedIndex` folder; CURRENT names the serving one (`generations.py`).
Vectors come through the semantic service's background queue, not the rows' commit.
"""

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from memvault.indexer.maintenance.derived import BoundaryHook, DerivedIndex
from memvault.indexer.maintenance.generations import (
    MANIFEST,
    Manifest,
    activate,
    current_generation,
    discard_generation_on_failure,
    embedding_identity,
    remove_stray_generations,
)
from memvault.indexer.maintenance.health import check_health
from memvault.indexer.maintenance.heap import return_freed_memory
from memvault.indexer.maintenance.progress import PhaseLog
from memvault.indexer.maintenance.replay_index import project_generation
from memvault.vault.config import Config
from memvault.vault.errors import IndexUnavailable, VaultError, VaultLocked
from memvault.vault.layout import VaultLayout
from memvault.vault.locks import VaultLock

#: notes applied per index commit while a generation is built
REBUILD_BATCH_FILES = 64


class LocalGenerations:
    files_on_this_machine = True
    #: no server: the index is the vault's own `.index/` files
    backend = None

    def __init__(self, layout: VaultLayout, config: Config, *, lock, index_lock, apply: Callable):
        self.layout, self.config = layout, config
        self._lock, self._index_lock, self._apply = lock, index_lock, apply
        self.current: DerivedIndex | None = None
        self._seen_stamp: tuple[str, int] | None = None
        #: vectors for Journal/BuJo; Lite never embeds
        self.vectors = _semantic_service(layout, config)
        if self.vectors is not None:  # an overflow in a live process catches up here, not "next open"
            self.vectors.catch_up_source = self._catch_up_vectors

    @staticmethod
    def open_current(layout: VaultLayout) -> DerivedIndex | None:
        """The serving generation opened afresh, by another reader of the same files."""
        return DerivedIndex.open_current(layout)

    # --- the serving generation ----------------------------------------------------------------

    def serving(self, create_missing: bool) -> DerivedIndex:
        try:
            return self._serving(create_missing)
        except IndexUnavailable:
            # a rebuild may have swapped CURRENT and dropped the generation we were opening
            # between our reading the pointer and opening the folder: look once more
            if self.current is not None and current_generation(self.layout.index_dir) == self.current.generation:
                raise
            self.current = None
            return self._serving(create_missing)

    def _serving(self, create_missing: bool) -> DerivedIndex:
        generation = current_generation(self.layout.index_dir)
        if generation is None:
            if not create_missing:
                raise IndexUnavailable("the vault has no index yet: run `memvault rebuild`")
            # first write to a vault: build inline under the vault lock (taking the rebuild
            # lock here, after the vault lock, could deadlock against a running rebuild)
            self.swap_in(self.build(PhaseLog()))
            return self.current
        if self.current is None or self.current.generation != generation:
            self.current = DerivedIndex.open_generation(generation)
            self._seen_stamp = _stamp(self.current)
            if self.vectors is not None:
                self.vectors.attach_serving(self.current)
        else:
            self.current.bm25.refresh()
        return self.current

    def writable(self) -> DerivedIndex:
        index = self.serving(create_missing=True)
        # another process committed: reload its manifest (never beside this process's own commit
        # in flight: the manifest it is writing is the newer one)
        if _stamp(index) != self._seen_stamp and self._index_lock.acquire(blocking=False):
            try:
                if _stamp(index) != self._seen_stamp:
                    index.manifest = Manifest.load(index.generation / MANIFEST)
                    index.bm25.refresh()
                    self._seen_stamp = _stamp(index)
            finally:
                self._index_lock.release()
        return index

    def seen(self, generation: DerivedIndex) -> None:
        self._seen_stamp = _stamp(generation)

    def _catch_up_vectors(self, paths: set[str] | None) -> None:
        """Embed every vector the serving generation misses or holds stale in these notes (None:
        in any note); the semantic queue's thread calls this after an overflow. The embedding
        runs outside the vault lock."""
        self.vectors.catch_up_beside_writers(self._locked_writable, self.config.memory.time_zone, paths)

    @contextmanager
    def _locked_writable(self) -> Iterator[DerivedIndex]:
        with VaultLock(self.layout.root, timeout=60.0):  # VaultLocked: the queue retries shortly
            yield self.writable()

    # --- new generations -----------------------------------------------------------------------

    @contextmanager
    def building(self) -> Iterator[None]:
        with self._lock:
            remove_stray_generations(self.layout.index_dir)
        with discard_generation_on_failure(self.layout.index_dir, self._lock):
            yield

    def build(self, progress: PhaseLog, hook: BoundaryHook | None = None) -> DerivedIndex:
        generation = DerivedIndex.create(self.layout, embedding=embedding_identity(self.config))
        paths = self.layout.note_relpaths()
        progress.phase("notes", total=len(paths))
        if self.vectors is not None:
            self.vectors.attach_building(generation, progress)
        try:
            for start in range(0, len(paths), REBUILD_BATCH_FILES):
                batch = paths[start : start + REBUILD_BATCH_FILES]
                self._apply(generation, batch, hook)
                progress.advance("notes", len(batch))
        except BaseException:
            if self.vectors is not None:  # stop its builder thread; the folder is left for cleanup
                self.vectors.abandon_building(generation)
            raise
        return generation

    def swap_in(self, generation: DerivedIndex, hook: BoundaryHook | None = None, progress=None) -> None:
        """Catch up with writes made while building, then point CURRENT at it. Lock held."""
        progress = progress or PhaseLog()
        with self._index_lock:
            self._apply(generation, generation.stale_paths(self.layout), hook)
            if self.vectors is not None:
                self.vectors.finish_building(generation, progress)
                generation.components = []  # the builders' memory goes before the serving vectors load
                return_freed_memory()
                self.vectors.attach_serving(generation)
            progress.phase("swap")
            project_generation(self.layout, self.config, generation.generation)  # BuJo replay sidecar
            activate(self.layout.index_dir, generation.generation, hook)
            self.current = generation
            self._seen_stamp = _stamp(generation)

    def compact(self, hook: BoundaryHook | None = None) -> bool:
        """Rewrite the serving generation from its own rows, without the deleted ones.

        Tantivy keeps deleted rows in its statistics until segments merge, so after many edits
        scores drift slightly from a fresh build's; a compacted generation answers exactly as a
        rebuild would, without reading a file or re-embedding anything (other components are
        hard-linked). Returns False when there was nothing to do or a rebuild holds the vault.
        """
        try:
            rebuild_lock = VaultLock(self.layout.root, name="rebuild", timeout=0)
            rebuild_lock.acquire()
        except VaultLocked:
            return False
        try:
            with self._lock, self._index_lock:
                source = self.writable()
                if source.deleted_rows() == 0:
                    return False
                indexed, states = source.snapshot(self.layout)
                if self.vectors is not None:  # the vector files are linked, not rewritten: save them first
                    self.vectors.save_serving()
                target = DerivedIndex.create(self.layout, embedding=source.manifest.embedding)
                source.link_components_into(target)
            for start in range(0, len(indexed), REBUILD_BATCH_FILES):
                target.apply(indexed[start : start + REBUILD_BATCH_FILES], hook)
            target.manifest.files = states
            target.manifest.save(target.generation / MANIFEST)
            with self._lock:
                self.swap_in(target, hook)
            return True
        finally:
            rebuild_lock.release()

    # --- health and closing --------------------------------------------------------------------

    def health_report(self, config: Config, *, strict: bool, extra) -> dict:
        if strict and self.vectors is not None:  # queued vectors are work in flight, not a fault: settle them
            self.vectors.drain()
        elif self.vectors is not None:  # health reads the vectors from disk: save what memory holds
            try:
                self.vectors.save_serving()
            except (VaultError, OSError):
                pass  # a full disk: health reports the vectors the disk holds, and why they lag
        with self._index_lock:  # not beside a commit that changes what it compares
            return check_health(self.layout, config, strict=strict, extra=extra).to_json()

    def close(self) -> None:
        self.current = None


def _stamp(index: DerivedIndex) -> tuple:
    """Changes when any process commits: the manifest's base is replaced, or its log grows."""
    try:
        info = os.stat(index.generation / MANIFEST)
    except OSError as exc:
        raise IndexUnavailable(f"index generation {index.generation} vanished ({exc.strerror}): retry") from exc
    try:
        logged = os.stat(index.manifest.log_path(index.generation / MANIFEST)).st_size
    except OSError:
        logged = 0
    return (str(info.st_ino), info.st_mtime_ns, logged)


def _semantic_service(layout: VaultLayout, config: Config):
    if config.memory.mode == "lite" or config.memory.embeddings is None:
        return None
    from memvault.indexer.maintenance.semantic_service import SemanticService  # numpy/hnswlib only for tiers that embed

    return SemanticService(layout, config)
