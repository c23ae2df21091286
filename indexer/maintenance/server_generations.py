"""`ServerGenerations`: the store's generations on an index server, the server engine's side of
`backend.base.IndexGenerations`.

A generation is the backend's (`indexer/backend/base.py`), shaped as `ServerIndex`, instead of a
`.index/gen-*` folder. The files stay the truth: a lost database is one `memvault rebuild`
away. BuJo's replay projection of a generation is kept in that generation's row on the server
(written before the switch, dropped with it); this engine answers for it where callers name a
generation by its path (`supersession.keep_elsewhere`). Vectors are written in the rows' commit:
no background queue, and nothing to compact.
"""

import dataclasses
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from memvault.indexer.backend import open_backend, open_team_server
from memvault.indexer.maintenance.derived import read_note_records
from memvault.indexer.maintenance.generations import embedding_identity
from memvault.indexer.maintenance.health import check_health
from memvault.indexer.maintenance.local_generations import REBUILD_BATCH_FILES
from memvault.indexer.maintenance.progress import PhaseLog
from memvault.indexer.maintenance.replay_index import project_generation
from memvault.indexer.maintenance.server_health import server_findings
from memvault.indexer.maintenance.server_index import ServerIndex, ServerProjection, ServerVectors, generation_number
from memvault.indexer.maintenance.vault_settings import owner_settings
from memvault.indexer.search.supersession import keep_elsewhere, stop_keeping
from memvault.vault.config import Config
from memvault.vault.errors import IndexUnavailable, VaultError
from memvault.vault.layout import VaultLayout


class ServerGenerations:
    files_on_this_machine = False

    def __init__(self, layout: VaultLayout, config: Config, *, lock, index_lock, apply: Callable, backend=None):
        self.layout, self.config, self._apply = layout, config, apply
        self._backend = backend
        self._rebuilding = False
        self.current: ServerIndex | None = None
        self._seen_stamp: object = None
        self.vectors = None if config.memory.embeddings is None else ServerVectors(self._embedder)
        self._provider = None
        # readers that name a generation by its path (capture, health, graph expansion) ask this engine
        keep_elsewhere(layout.index_dir, self)

    @property
    def backend(self):
        """The connected backend (connected on first use, so local-only work needs no server)."""
        if self._backend is None:
            self._backend = open_backend(self.config.index)
        return self._backend

    def _embedder(self):
        if self._provider is None:
            from memvault.indexer.search.embeddings import make_provider  # the model's weights: on first embed

            embeddings = self.config.memory.embeddings
            self._provider = make_provider(embeddings.provider, embeddings.model, embeddings.dim, embeddings.endpoint)
        return self._provider

    def _open(self, number: int) -> ServerIndex:
        return ServerIndex(self.backend, number, self.layout, None if self.vectors is None else self._embedder)

    # --- the serving generation ----------------------------------------------------------------

    def serving(self, create_missing: bool) -> ServerIndex:
        try:
            return self._serving(create_missing)
        except IndexUnavailable:  # a rebuild switched generations while we opened one: look once more
            self.current = None
            return self._serving(create_missing)

    def _serving(self, create_missing: bool) -> ServerIndex:
        number, replay = self.backend.serving_replay()  # the projection's digest comes along
        if number is None:
            if not create_missing:
                raise IndexUnavailable(f"vault {self.config.index.name!r} has no index on the server yet: "
                                       "run `memvault rebuild`")  # fmt: skip
            self.swap_in(self.build(PhaseLog()))
            return self.current
        if self.current is None or self.current.number != number:
            self.current = self._open(number)
            self._seen_stamp = self.backend.stamp()
            if self.vectors is not None:
                self.vectors.attach_serving(self.current)
        self.current.replay.seen(replay)
        return self.current

    def writable(self) -> ServerIndex:
        index = self.serving(create_missing=True)
        stamp = self.backend.stamp()
        if stamp != self._seen_stamp:  # another process committed: read its file states
            index.reload()
            self._seen_stamp = stamp
        return index

    def seen(self, generation: ServerIndex) -> None:
        self._seen_stamp = self.backend.stamp()

    # --- new generations -----------------------------------------------------------------------

    @contextmanager
    def building(self) -> Iterator[None]:
        self._rebuilding = True  # we hold the rebuild lock while building: leftovers are dead
        try:
            yield
        finally:
            self._rebuilding = False

    def build(self, progress: PhaseLog, hook=None) -> ServerIndex:
        if self._rebuilding:
            for number in self.backend.stray_generations():  # left by a killed or failed rebuild
                self.backend.drop_generation(number)
        number = self.backend.create_generation(embedding_identity(self.config))
        generation = self._open(number)
        paths = self.layout.note_relpaths()
        progress.phase("notes", total=len(paths))
        if generation.embedder is not None:  # each batch's vectors are made as it is read, beside the notes
            progress.start_beside("embedding")
        try:
            self._apply_notes(generation, paths, hook, progress)
            if generation.embedder is not None:
                embedded = {state.name: state.done for state in progress.snapshot()}["embedding"]
                progress.phase("embedding", total=embedded)
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
        zone_name = self.config.memory.time_zone
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memvault-rebuild-writer") as writer:
            in_flight = None
            for start in range(0, len(paths), REBUILD_BATCH_FILES):
                batch = paths[start : start + REBUILD_BATCH_FILES]
                prepared = generation.prepare([read_note_records(self.layout, path, zone_name) for path in batch])
                if prepared is not None and generation.embedder is not None:
                    progress.advance("embedding", sum(w.vector is not None for w in prepared.backend_delta.writes))
                if in_flight is not None:
                    _finish_write(generation, *in_flight, hook, progress)
                future = writer.submit(generation.write, prepared) if prepared is not None else None
                in_flight = (future, prepared, len(batch))
            if in_flight is not None:
                _finish_write(generation, *in_flight, hook, progress)

    def swap_in(self, generation: ServerIndex, hook=None, progress: PhaseLog | None = None) -> None:
        """Catch up with writes made while building, then switch the server's pointer. Lock held."""
        progress = progress or PhaseLog()
        self._apply(generation, generation.stale_paths(self.layout), hook)
        progress.phase("swap")
        project_generation(self.layout, self.config, generation.generation)  # BuJo replay sidecar, before the switch
        self.backend.activate_generation(generation.number)
        self._record_settings()
        if hook is not None:
            hook("rebuild.swapped")
        self.current = generation
        self._seen_stamp = self.backend.stamp()
        if self.vectors is not None:
            self.vectors.attach_serving(generation)

    def _record_settings(self) -> None:
        """The settings agents read the vault with, recorded by every build (owner or not): a vault
        whose owner never started still answers remote recall (docs/team.md). The rows are already
        served; a server that refuses this write costs agents only that fallback, so it is not fatal."""
        index = self.config.index
        try:
            server = open_team_server(index.dsn, index.name, create=True, index=index)
            try:
                server.record_build_settings(owner_settings(self.config, self.layout.root))
            finally:
                server.close()
        except VaultError:
            pass

    def compact(self, hook=None) -> bool:
        return False  # the server keeps no deleted rows in its statistics

    # --- BuJo's replay projections (supersession.ProjectionKeeper) -----------------------------

    def kept_projection(self, generation: Path) -> ServerProjection | None:
        """The projection of the server generation `generation` stands for (ServerIndex.generation)."""
        index = self.current
        if index is not None and index.generation == generation:
            return index.replay
        number = generation_number(self.backend, generation.name)
        return None if number is None else ServerProjection(self.backend, number)

    def serving_generation_path(self) -> Path | None:
        """The serving generation as this store last read it (every read reads the pointer)."""
        if self.current is not None:
            return self.current.generation
        try:
            return self.serving(create_missing=False).generation
        except IndexUnavailable:
            return None

    # --- health and closing --------------------------------------------------------------------

    def health_report(self, config: Config, *, strict: bool, extra) -> dict:
        found, index = server_findings(config.index, lambda: self.serving(False), strict=strict)
        problem = None if index is not None else "the index server is not usable"
        report = check_health(
            self.layout, config, strict=strict, extra=[*found, *extra], index=index, index_problem=problem
        )
        if getattr(index, "server_details", None):
            report.details["server"] = index.server_details
        if index is None:  # the server's own finding says why and how to fix it; "rebuild" would not
            report = dataclasses.replace(report, findings=tuple(f for f in report.findings if f.check != "index"))
        return report.to_json()

    def close(self) -> None:
        stop_keeping(self.layout.index_dir, self)
        if self._backend is not None:
            self._backend.close()


def _finish_write(generation: ServerIndex, future, prepared, notes: int, hook, progress: PhaseLog) -> None:
    if future is not None:
        future.result()  # a failed write raises here, and the build stops as it would have
        generation.written(prepared, hook)
    progress.advance("notes", notes)
