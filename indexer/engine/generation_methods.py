"""`MemoryStore`'s index generations: `rebuild` from the files into a new generation beside the
serving one, then the atomic swap, and `compact`; the engine (`backend.base.IndexGenerations`)
does the building. Readers keep the serving generation until the swap (docs/durability.md)."""

import time

from memvault.indexer.maintenance.derived import BoundaryHook
from memvault.indexer.maintenance.generations import REBUILD_GUARDS
from memvault.indexer.maintenance.progress import PhaseLog
from memvault.indexer.maintenance.replay_index import finish_rebuild
from memvault.indexer.results import RebuildReport
from memvault.vault.locks import VaultLock
from memvault.vault.storage_errors import translates_storage_errors


class GenerationMethods:
    """Mixed into `MemoryStore` (indexer/engine/store.py), which provides `layout`, `config`,
    `_lock` and `_engine`."""

    @translates_storage_errors
    def rebuild(self, progress: PhaseLog | None = None, *, hook: BoundaryHook | None = None) -> RebuildReport:
        """Build a new index generation from the files alone, then swap it in atomically.

        The build runs without the vault lock (writers and the watcher keep going on the serving
        generation); the short catch-up and the pointer swap run under it. Refusals
        (`REBUILD_GUARDS`) run before anything is touched; leftovers of killed rebuilds go first.
        `progress` hears each phase (notes, embedding, vectors, swap) with counts as the work is done.
        """
        progress = progress or PhaseLog()
        started = time.monotonic()
        with VaultLock(self.layout.root, name="rebuild", timeout=-1):
            for guard in REBUILD_GUARDS:
                guard(self.layout, self.config)
            with self._engine.building():
                generation = self._engine.build(progress, hook)
                if hook is not None:
                    hook("rebuild.built")
                with self._lock:
                    self._engine.swap_in(generation, hook, progress)
                    finish_rebuild(self.layout, self.config)  # a replay adoption is complete now
        progress.done()
        return _rebuild_report(generation, time.monotonic() - started, progress)

    @translates_storage_errors
    def compact(self, *, hook: BoundaryHook | None = None) -> bool:
        """Rewrite the serving generation from its own rows, without the deleted ones (scores
        then match a fresh build's). False when there was nothing to do or a rebuild holds the vault."""
        return self._engine.compact(hook)


def _rebuild_report(generation, seconds: float, progress: PhaseLog) -> RebuildReport:
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
