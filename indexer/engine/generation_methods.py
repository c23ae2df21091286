"""`MemoryStore`'s index generations: `rebuild` from the files into a new generation beside the
serving one, `compact` the serving one from its own rows, and the atomic swap both end with.
Readers keep the serving generation until the swap (docs/durability.md)."""

import time

from memvault.indexer.maintenance.derived import BoundaryHook, DerivedIndex
from memvault.indexer.maintenance.generations import (
    MANIFEST,
    REBUILD_GUARDS,
    activate,
    discard_generation_on_failure,
    remove_stray_generations,
)
from memvault.indexer.maintenance.progress import PhaseLog
from memvault.indexer.maintenance.replay_index import finish_rebuild, project_generation
from memvault.indexer.results import RebuildReport
from memvault.vault.errors import VaultLocked
from memvault.vault.locks import VaultLock
from memvault.vault.storage_errors import translates_storage_errors

#: notes applied per index commit while a generation is built
REBUILD_BATCH_FILES = 64


class GenerationMethods:
    """Mixed into `MemoryStore` (indexer/engine/store.py), which provides `layout`, `config`,
    `_lock`, `_index_lock`, `_semantic`, `_apply`, `_writable_index`, `_stamp` and
    `_embedding_identity`."""

    @translates_storage_errors
    def rebuild(self, progress: PhaseLog | None = None, *, hook: BoundaryHook | None = None) -> RebuildReport:
        """Build a new index generation from the files alone, then swap it in atomically.

        The build runs without the vault lock (writers and the watcher keep going on the serving
        generation); the short catch-up and the pointer swap run under it. Refusals
        (`REBUILD_GUARDS`) run before anything is touched; leftovers of killed rebuilds go first.
        `progress` hears each phase (`REBUILD_PHASES`) with counts as the work is done.
        """
        progress = progress or PhaseLog()
        started = time.monotonic()
        with VaultLock(self.layout.root, name="rebuild", timeout=-1):
            for guard in REBUILD_GUARDS:
                guard(self.layout, self.config)
            with self._lock:
                remove_stray_generations(self.layout.index_dir)
            with discard_generation_on_failure(self.layout.index_dir, self._lock):
                generation = self._build_generation(progress, hook)
                if hook is not None:
                    hook("rebuild.built")
                with self._lock:
                    self._swap_in(generation, hook, progress)
                    finish_rebuild(self.layout, self.config)  # a replay adoption is complete now
        progress.done()
        return _rebuild_report(generation, time.monotonic() - started, progress)

    @translates_storage_errors
    def compact(self, *, hook: BoundaryHook | None = None) -> bool:
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
                source = self._writable_index()
                if source.deleted_rows() == 0:
                    return False
                indexed, states = source.snapshot(self.layout)
                if self._semantic is not None:  # the vector files are linked, not rewritten: save them first
                    self._semantic.save_serving()
                target = DerivedIndex.create(self.layout, embedding=source.manifest.embedding)
                source.link_components_into(target)
            for start in range(0, len(indexed), REBUILD_BATCH_FILES):
                target.apply(indexed[start : start + REBUILD_BATCH_FILES], hook)
            target.manifest.files = states
            target.manifest.save(target.generation / MANIFEST)
            with self._lock:
                self._swap_in(target, hook)
            return True
        finally:
            rebuild_lock.release()

    def _build_generation(self, progress: PhaseLog, hook: BoundaryHook | None = None) -> DerivedIndex:
        generation = DerivedIndex.create(self.layout, embedding=self._embedding_identity())
        paths = self.layout.note_relpaths()
        progress.phase("notes", total=len(paths))
        if self._semantic is not None:
            self._semantic.attach_building(generation, progress)
        try:
            self._apply_notes(generation, paths, hook, progress)
        except BaseException:
            if self._semantic is not None:  # stop its builder thread; the folder is left for cleanup
                self._semantic.abandon_building(generation)
            raise
        return generation

    def _apply_notes(self, generation, paths: list[str], hook: BoundaryHook | None, progress: PhaseLog) -> None:
        """Every note of `paths` into a generation being built, REBUILD_BATCH_FILES per commit."""
        for start in range(0, len(paths), REBUILD_BATCH_FILES):
            batch = paths[start : start + REBUILD_BATCH_FILES]
            self._apply(generation, batch, hook)
            progress.advance("notes", len(batch))

    def _swap_in(
        self, generation: DerivedIndex, hook: BoundaryHook | None = None, progress: PhaseLog | None = None
    ) -> None:
        """Catch up with writes made while building, then point CURRENT at it. Lock held."""
        with self._index_lock:
            self._swap_in_locked(generation, hook, progress or PhaseLog())

    def _swap_in_locked(self, generation: DerivedIndex, hook: BoundaryHook | None, progress: PhaseLog) -> None:
        self._apply(generation, generation.stale_paths(self.layout), hook)
        if self._semantic is not None:
            self._semantic.finish_building(generation, progress)
            self._semantic.attach_serving(generation)
        progress.phase("swap")
        project_generation(self.layout, self.config, generation.generation)  # BuJo replay sidecar
        activate(self.layout.index_dir, generation.generation, hook)
        self._index = generation
        self._manifest_stamp = self._stamp(generation)


def _rebuild_report(generation: DerivedIndex, seconds: float, progress: PhaseLog) -> RebuildReport:
    problems = tuple(
        f"{path}: {state.problem}" for path, state in sorted(generation.manifest.files.items()) if state.problem
    )
    return RebuildReport(
        generation.generation.name,
        len(generation.manifest.files),
        generation.bm25.count(),
        round(seconds, 3),
        problems,
        tuple(progress.to_json()),
    )
