"""`ServerIndexing`, mixed into MemoryStore as `store.ServerIndexedStore`: a MemoryStore whose
derived index lives on an index server.

Everything a MemoryStore does (remember, sync, watch, the owner's commits, recall, journal,
health) runs unchanged; only where generations come from differs: the backend's generations
(`indexer/backend/base.py`) shaped as `ServerIndex`, instead of `.index/gen-*` folders. The files
stay the truth: a lost database is one `memvault rebuild` away. BuJo's replay projection of a
generation is kept in that generation's row on the server (written before the switch, dropped
with it); this store answers for it where callers name a generation by its path.

This subclass is the narrow first step of the seam: it overrides the store's generation
plumbing only. Folding the local engine behind the same calls shrinks store.py later.
"""

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from memvault.indexer.backend import open_backend
from memvault.indexer.engine.generation_methods import REBUILD_BATCH_FILES
from memvault.indexer.maintenance.derived import read_note_records
from memvault.indexer.maintenance.progress import PhaseLog
from memvault.indexer.maintenance.replay_index import project_generation
from memvault.indexer.maintenance.server_index import ServerIndex, ServerProjection, ServerVectors, generation_number
from memvault.indexer.search.supersession import keep_elsewhere, stop_keeping
from memvault.vault.config import Config
from memvault.vault.errors import IndexUnavailable, VaultError
from memvault.vault.layout import VaultLayout


class ServerIndexing:
    """The generation plumbing of a store indexed on a server (store.py makes the class; importing
    MemoryStore here made an import circle)."""

    def __init__(self, layout: VaultLayout, config: Config, *, backend=None, **kwargs):
        super().__init__(layout, config, **kwargs)
        self._backend = backend
        self._rebuilding = False
        # vectors are written in the rows' commit: no background queue
        self._semantic = None if config.memory.embeddings is None else ServerVectors(self._embedder)
        self._provider = None
        # BuJo's replay projection of each generation is on the server, beside its rows: readers
        # that name a generation by its path (capture, health, graph expansion) ask this store
        keep_elsewhere(layout.index_dir, self)

    @property
    def backend(self):
        """The connected backend (connected on first use, so local-only work needs no server)."""
        if self._backend is None:
            self._backend = open_backend(self.config.index)
        return self._backend

    def _embedder(self):
        if self._provider is None:
            from memvault.indexer.search.embeddings import make_provider

            embeddings = self.config.memory.embeddings
            self._provider = make_provider(embeddings.provider, embeddings.model, embeddings.dim, embeddings.endpoint)
        return self._provider

    def close(self) -> None:
        stop_keeping(self.layout.index_dir, self)
        super().close()
        if self._backend is not None:
            self._backend.close()

    # --- generations -----------------------------------------------------------------------------

    def _open(self, number: int) -> ServerIndex:
        return ServerIndex(self.backend, number, self.layout, None if self._semantic is None else self._embedder)

    def _serving_index(self, create_missing: bool) -> ServerIndex:
        number, replay = self.backend.serving_replay()  # the projection's digest comes along
        if number is None:
            if not create_missing:
                raise IndexUnavailable(f"vault {self.config.index.name!r} has no index on the server yet: "
                                       "run `memvault rebuild`")  # fmt: skip
            self._swap_in(self._build_generation(PhaseLog()))
            return self._index
        if self._index is None or self._index.number != number:
            self._index = self._open(number)
            self._manifest_stamp = self._stamp(self._index)
            if self._semantic is not None:
                self._semantic.attach_serving(self._index)
        self._index.replay.seen(replay)
        return self._index

    def _writable_index(self) -> ServerIndex:
        index = self._readable_index(create_missing=True, flush=False)
        stamp = self._stamp(index)
        if stamp != self._manifest_stamp:  # another process committed: read its file states
            index.reload()
            self._manifest_stamp = stamp
        return index

    def _stamp(self, index) -> object:
        return self.backend.stamp()

    def rebuild(self, *args, **kwargs):
        self._rebuilding = True  # we hold the rebuild lock while building: leftovers are dead
        try:
            return super().rebuild(*args, **kwargs)
        finally:
            self._rebuilding = False

    def _build_generation(self, progress: PhaseLog, hook=None) -> ServerIndex:
        if self._rebuilding:
            for number in self.backend.stray_generations():  # left by a killed or failed rebuild
                self.backend.drop_generation(number)
        number = self.backend.create_generation(self._embedding_identity())
        generation = self._open(number)
        paths = self.layout.note_relpaths()
        progress.phase("notes", total=len(paths))
        try:
            self._apply_notes(generation, paths, hook, progress)
        except BaseException:
            try:  # the serving generation never saw it; a failure here leaves a stray for the next rebuild
                self.backend.drop_generation(number)
            except VaultError:
                pass
            raise
        return generation

    def _apply_notes(self, generation: ServerIndex, paths: list[str], hook, progress: PhaseLog) -> None:
        """Every note of `paths` into the generation being built, REBUILD_BATCH_FILES per commit,
        with one commit in flight: the server inserts a batch (its own process, its own core)
        while this thread reads and embeds the next. Batches hold different notes, so the next
        one's diff never waits for the one being written."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memvault-rebuild-writer") as writer:
            in_flight = None
            for start in range(0, len(paths), REBUILD_BATCH_FILES):
                batch = paths[start : start + REBUILD_BATCH_FILES]
                prepared = generation.prepare([read_note_records(self.layout, path, self.time_zone) for path in batch])
                if in_flight is not None:
                    self._finish_write(generation, *in_flight, hook, progress)
                in_flight = (
                    writer.submit(generation.write, prepared) if prepared is not None else None,
                    prepared,
                    len(batch),
                )
            if in_flight is not None:
                self._finish_write(generation, *in_flight, hook, progress)

    @staticmethod
    def _finish_write(generation: ServerIndex, future, prepared, notes: int, hook, progress: PhaseLog) -> None:
        if future is not None:
            future.result()  # a failed write raises here, and the build stops as it would have
            generation.written(prepared, hook)
        progress.advance("notes", notes)

    def _swap_in(self, generation: ServerIndex, hook=None, progress: PhaseLog | None = None) -> None:
        """Catch up with writes made while building, then switch the server's pointer. Lock held."""
        progress = progress or PhaseLog()
        self._apply(generation, generation.stale_paths(self.layout), hook)
        progress.phase("swap")
        project_generation(self.layout, self.config, generation.generation)  # BuJo replay sidecar, before the switch
        self.backend.activate_generation(generation.number)
        if hook is not None:
            hook("rebuild.swapped")
        self._index = generation
        self._manifest_stamp = self._stamp(generation)
        if self._semantic is not None:
            self._semantic.attach_serving(generation)

    # --- BuJo's replay projections (supersession.ProjectionKeeper) ------------------------------

    def kept_projection(self, generation: Path) -> ServerProjection | None:
        """The projection of the server generation `generation` stands for (ServerIndex.generation)."""
        index = self._index
        if index is not None and index.generation == generation:
            return index.replay
        number = generation_number(self.backend, generation.name)
        return None if number is None else ServerProjection(self.backend, number)

    def serving_generation_path(self) -> Path | None:
        """The serving generation as this store last read it (every read reads the pointer)."""
        if self._index is not None:
            return self._index.generation
        try:
            return self._readable_index().generation
        except IndexUnavailable:
            return None

    # --- health ----------------------------------------------------------------------------------

    def health_report(self, *, strict: bool = False, owner=None) -> dict:
        from memvault.indexer.maintenance.health import check_health, owner_findings
        from memvault.indexer.maintenance.server_health import server_findings

        extra = [] if owner is None else owner_findings(owner.identity()["pid"], owner.worker_snapshot())
        self._commit_acknowledged()  # health compares the files with the index: commit what is put off
        found, index = server_findings(self.config.index, lambda: self._readable_index(), strict=strict)
        report = check_health(
            self.layout,
            self.config,
            strict=strict,
            extra=[*found, *extra],
            index=index,
            index_problem=None if index is not None else "the index server is not usable",
        )
        if getattr(index, "server_details", None):
            report.details["server"] = index.server_details
        if index is None:  # the server's own finding says why and how to fix it; "rebuild" would not
            report = dataclasses.replace(report, findings=tuple(f for f in report.findings if f.check != "index"))
        return report.to_json()
