"""`MemoryStore`: the one engine the CLI, the MCP server and Python callers share.

    with MemoryStore.open("path/to/vault") as store:
        store.remember("Morgan chose blue as the deployment color.")
        result = store.recall("which color did we pick?")

Writes happen under the vault lock: canonical file first, then the index, in one critical
section. Reads use the serving index generation and follow commits made by other processes.
"""

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path

from memvault.indexer.engine.bulk import IMPORT_BATCH_ITEMS, BulkOutcome, RememberItem, as_item, chunks, remember_batch
from memvault.indexer.engine.client import find_owner
from memvault.indexer.engine.conflict_marks import conflicted_notes, mark_conflicts
from memvault.indexer.engine.deferred import DeferredIndexing
from memvault.indexer.engine.generation_methods import GenerationMethods
from memvault.indexer.engine.index_commits import IndexCommits
from memvault.indexer.engine.intake_methods import DurableIntake
from memvault.indexer.engine.journal_methods import JournalMethods
from memvault.indexer.engine.locate import locate_vault
from memvault.indexer.engine.overlay import pending_record
from memvault.indexer.engine.remote import RemoteStore
from memvault.indexer.maintenance.consolidate import consolidate
from memvault.indexer.maintenance.derived import BoundaryHook, read_note_records
from memvault.indexer.maintenance.index_engines import open_generations
from memvault.indexer.maintenance.replay_index import SupersessionSource
from memvault.indexer.maintenance.sync import SyncOutcome
from memvault.indexer.results import RecallResult, RememberReceipt, SyncReport
from memvault.indexer.search.recall_request import check_recall_request
from memvault.indexer.search.rerank import reranker_from_config
from memvault.indexer.search.telemetry import AccessLog
from memvault.vault.clock import utc_now, zone
from memvault.vault.config import Config, load_config
from memvault.vault.curated import prepare_fact, write_fact
from memvault.vault.errors import IndexUnavailable, StorageError, VaultError, VaultLocked
from memvault.vault.ids import content_hash
from memvault.vault.intake.projection import Projection
from memvault.vault.layout import VaultLayout
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS
from memvault.vault.locks import VaultLock
from memvault.vault.recent_writes import repair_lost_lines
from memvault.vault.storage_errors import translates_storage_errors


class MemoryStore(IndexCommits, DurableIntake, JournalMethods, GenerationMethods):
    def __init__(self, layout: VaultLayout, config: Config, *, clock: Callable[[], datetime] = utc_now):
        self.layout = layout
        self.config = config
        self._clock = clock
        self._lock = VaultLock(layout.root)
        #: serializes this process's index writes (and what reads the manifest whole). Taken after
        #: the vault lock, never before; the owner's commit holds it alone, so remembers keep
        #: writing notes while a commit runs
        self._index_lock = threading.RLock()
        #: notes the owner's group commit acknowledged before committing them to the index
        self._deferred = DeferredIndexing()
        #: the engine keeping the index's generations (`backend.base.IndexGenerations`), as configured
        self._engine = open_generations(layout, config, lock=self._lock, index_lock=self._index_lock, apply=self._apply)
        #: the engine's vectors (Journal/BuJo; Lite never embeds)
        self._semantic = self._engine.vectors
        #: when each memory was last recalled, and how often: telemetry, never used for ranking
        self.access_log = AccessLog(layout.root, layout.index_dir)
        if config.memory.mode == "bujo":  # MemoryJournal reads capture's supersession lifecycle
            self.supersession_state = SupersessionSource(layout).supersession_state

    # --- lifecycle ---------------------------------------------------------------------------

    #: why `open` could not sync the index with the files (a full disk), or None; recall says so
    unsynced: str | None = None

    @classmethod
    def connect(cls, name: str, dsn: str | None = None, *, env: Mapping[str, str] | None = None):
        """A vault on the index server, by its name, from a machine without its files (docs/team.md):
        a ConnectedStore with the everyday API. `dsn` defaults to `env["MEMVAULT_INDEX_DSN"]`."""
        from memvault.indexer.engine.connected import ConnectedStore

        return ConnectedStore.connect(name, dsn, env=env)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike | None = None,
        *,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, object] | None = None,
        sync: bool = True,
        engine: bool = True,
    ) -> "MemoryStore":
        """Open a vault. With `sync`, files changed since the index last saw them are indexed now.

        While another process owns the vault (docs/engine.md) this returns a `RemoteStore` with the
        same API that hands every call to that owner; `engine=False` always opens in-process
        (read-only inspection, tests of the engine itself)."""
        env = {} if env is None else env
        root = locate_vault(path, env, Path.cwd())
        if engine:
            owner = find_owner(root)
            if owner is not None and not owner.is_this_process:
                return RemoteStore(root, owner, env)
        config = load_config(root, env, overrides)
        store = cls(VaultLayout(root), config)
        store.env = dict(env)  # the chat model's API key variable is read from here, never os.environ
        if sync:
            try:
                store.sync()
            except StorageError as exc:  # a full disk: reads are served from the index as it was
                store.unsynced = f"index not brought up to date with the files: {exc}"
        return store

    def close(self) -> None:
        try:
            self.flush_deferred()
        except (VaultError, OSError):
            pass  # the notes are durable: the next open's sync indexes them
        if self._intake is not None or self._owner is not None:  # durable intake: drain (bounded) before closing
            self.stop()
        if self._capture_queue is not None:  # legacy scheduled captures: drain (bounded)
            self._capture_queue.stop(timeout=SHUTDOWN_DRAIN_SECONDS)
        if self._semantic is not None:  # queued vectors: drain (bounded); the rest catches up later
            self._semantic.stop(timeout=SHUTDOWN_DRAIN_SECONDS)
        if os.access(self.layout.root, os.W_OK):
            self.access_log.flush()
        self._engine.close()

    @property
    def backend(self):
        """The server backend (`base.ServerIndexBackend`) of a vault indexed on a server; None
        on the local engine."""
        return self._engine.backend

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def time_zone(self) -> str:
        return self.config.memory.time_zone

    # --- writes ------------------------------------------------------------------------------

    @translates_storage_errors
    def remember(self, text: str, at: datetime | None = None) -> RememberReceipt:
        """Store one explicit fact in `daily/` and index it; idempotent by content."""
        fact = prepare_fact(text)
        when = at if at is not None else self._clock()
        with self._lock:
            index = self.writable_index()
            pending = self._deferred.receipt(content_hash(fact))
            if pending is not None:  # written and acknowledged, its index commit still to come
                return RememberReceipt(pending.id, pending.source, "duplicate", pending.text)
            existing = self._indexed_copy(index, content_hash(fact))
            if existing is not None:
                return RememberReceipt(existing.id, existing.source, "duplicate", existing.text)
            written = write_fact(self.layout, fact, when, self.time_zone)
            status = "added" if written.written else "completed"
            receipt = RememberReceipt(written.id, f"{written.path}#^{written.id}", status, fact)
            record = pending_record(written.path, written.id, fact, written.wall_time, self.time_zone)
            self._index_written(index, [written.path], {content_hash(fact): receipt}, [record] if record else [])
        return receipt

    @translates_storage_errors
    def remember_many(
        self, items: Iterable[object], *, progress: Callable[[int, int], None] | None = None, total: int | None = None
    ) -> list:
        """Remember many facts (text, or {"text", "at"}, or RememberItem): one write per daily note
        and one index commit per batch of 4,096. Idempotent per item, like `remember`; an item that
        is refused (empty, oversized, a credential, a naive time) is reported and nothing is
        written for it. Returns one BulkOutcome per item, in order."""
        outcomes: list[BulkOutcome] = []
        for batch in chunks(items, IMPORT_BATCH_ITEMS):
            parsed, refused = [], {}
            for offset, value in enumerate(batch):
                try:
                    parsed.append(as_item(value))
                except VaultError as exc:
                    refused[offset] = exc
                    parsed.append(None)
            wanted = [item for item in parsed if item is not None]
            results = iter(remember_batch(self, wanted, self._clock)) if wanted else iter(())
            for offset, item in enumerate(parsed):
                result = refused[offset] if item is None else next(results)
                position = len(outcomes)
                if isinstance(result, VaultError):
                    outcomes.append(BulkOutcome(position, None, result))
                else:
                    outcomes.append(BulkOutcome(position, result))
            if progress is not None:
                progress(len(outcomes), total if total is not None else len(outcomes))
        return outcomes

    @translates_storage_errors
    def sync(
        self, paths: Iterable[str] | None = None, *, hook: BoundaryHook | None = None, defer: bool = False
    ) -> SyncReport:
        """Index every note whose bytes changed since the index saw it (hand edits, crashes).

        `paths` (vault-relative) limits the check to those files: the watcher names what changed.
        With `defer` (the owner's watcher), named notes that changed are repaired (lines a save
        dropped are appended again), read, and handed to the deferred set (`_defer_edits`): their
        index commit runs on the owner's commit timer with everything else, so a person saving at
        15 Hz costs one read per save, not a commit that every client waits behind.
        Returns a `SyncOutcome`: a SyncReport whose `files` are the files whose rows changed, with
        row counts beside it.
        """
        if not os.access(self.layout.root, os.W_OK):
            return SyncOutcome.skipped_because("vault is read-only")
        started = time.monotonic()
        if defer and paths is not None and self.defers_index_commits:
            paths = list(paths)
            self._read_ahead(paths)
        try:
            with VaultLock(self.layout.root, timeout=5.0):
                repair_lost_lines(self.layout, None if paths is None else list(paths))  # a save dropped ours
                if defer and paths is not None and self.defers_index_commits:
                    delta, stale = self._defer_edits(list(paths), skip_own_appends=True)
                    return SyncOutcome.of_delta(len(stale), delta, time.monotonic() - started)
                with self._index_lock:
                    index = self.writable_index()
                    stale = index.stale_paths(self.layout, None if paths is None else list(paths))
                    delta = self._apply(index, stale, hook)
                    if self._semantic is not None and paths is None:
                        self._semantic.catch_up(index, self.time_zone)
        except VaultLocked:
            return SyncOutcome.skipped_because("another memvault process holds the vault lock")
        return SyncOutcome.of_delta(len(stale), delta, time.monotonic() - started)

    # --- reads -------------------------------------------------------------------------------

    #: `recall(..., lookups=TurnLookups())` shares one backend lookup per question (a host's turn)
    shares_turn_lookups = True

    def recall(self, query: str, limit: int = 10, mode: str = "tool", *, lookups=None) -> RecallResult:
        check_recall_request(query, limit, mode)
        # recall's ranking pulls numpy (coverage, the floor): imported by the first recall, so a CLI
        # command that never recalls (journal, admit, health, inspect) starts without it
        from memvault.indexer.search.recall import answer_recall, routed_away

        run_history = self.config.tools.host_tools.run_history  # guidance names only the host's own tools
        routed = routed_away(query, mode, run_history)
        if routed is not None:
            return routed
        try:  # an owner never commits for a read; alone, a commit a full disk refused is retried here
            index = self.serving_index(flush=not self.defers_index_commits)
        except IndexUnavailable as exc:
            return RecallResult(query, mode, (), degraded=str(exc))
        bm25 = self._deferred.view(index.bm25)  # acknowledged writes not yet committed, beside the index
        semantic = self._semantic
        if lookups is not None:  # a host's turn: an identical question reads the turn's one lookup
            bm25, semantic = lookups.around(query, bm25, semantic)
        today = self._clock().astimezone(zone(self.time_zone)).date()  # "last week" is the vault's week
        result = answer_recall(
            bm25,
            semantic,
            query,
            limit,
            mode,
            tier=self.config.memory.mode,
            root=self.layout.root,
            run_history=run_history,
            today=today,
            reranker=self._reranker(),
        )
        self.access_log.record((hit.source.replace("#^", "#", 1) for hit in result.hits), self._clock())
        result = mark_conflicts(result, self.layout, conflicted_notes(index.manifest.files, result))
        behind = self.unsynced or self._deferred.problem
        if behind and not result.degraded:
            result = dataclasses.replace(result, degraded=behind)
        return result.in_zone(zone(self.time_zone))  # shown in the zone the notes are written in

    def _indexed_copy(self, index, digest: str):
        """The committed row holding this text, or None. "Duplicate" promises the memory is
        findable now and stays so: the row counts only while its note still holds that memory
        with that text. The note is read (its appended versions are parsed from the last one,
        `vault/note.py`); the note is committed at once only when it disagrees with the row (a
        person removed or changed the line), never for the common case, a text said again."""
        existing = index.bm25.find_by_content_hash(digest)
        if existing is None or _note_holds(read_note_records(self.layout, existing.path, self.time_zone), existing):
            return existing
        self._apply(index, [existing.path])
        return index.bm25.find_by_content_hash(digest)

    _rerank = None

    def _reranker(self):
        """The configured second stage (`memory.rerank`), built on first use; None without one."""
        if self._rerank is None and self.config.memory.rerank is not None:
            self._rerank = reranker_from_config(self.config.memory.rerank, getattr(self, "env", {}))
        return self._rerank

    def search(self, query: str, limit: int = 10, mode: str = "tool") -> RecallResult:
        """Alias of `recall`, named after the CLI command."""
        return self.recall(query, limit=limit, mode=mode)

    def health_report(self, *, strict: bool = False, owner=None) -> dict:
        """`memvault health` as JSON: every check (indexer/maintenance/health.py), plus, asked
        through an owner (`owner`), whether its intake worker is running."""
        from memvault.indexer.maintenance.health import owner_findings

        extra = [] if owner is None else owner_findings(owner.identity()["pid"], owner.worker_snapshot())
        self._commit_acknowledged()  # health compares the files with the index: commit what is put off
        return self._engine.health_report(self.config, strict=strict, extra=extra)

    # --- BuJo capture (logic in vault/capture/ and indexer/services/capture.py) -------------------

    env: Mapping[str, str] = {}  # set by `open`; where the chat model's API key variable is read
    _capture_queue = None  # the legacy best-effort queue, created by the first schedule_capture

    def capture(self, text: str, at: datetime | None = None):
        """Legacy direct capture: curate `text` now, without durable intake (best effort; see
        docs/capture.md). Hosts should admit turns with `persist_completed_turn` instead."""
        from memvault.indexer.services.capture import CaptureService

        return CaptureService(self).capture_text(text, at=at if at is not None else self._clock(), now=self._clock())

    def schedule_capture(self, text: str, at: datetime | None = None) -> bool:
        """Legacy best-effort background capture; False when its bounded queue is full."""
        from memvault.indexer.services.capture import CaptureQueue, CaptureService

        if self._capture_queue is None:
            self._capture_queue = CaptureQueue(CaptureService(self), self._clock)
        return self._capture_queue.offer(text, at if at is not None else self._clock())

    @translates_storage_errors
    def consolidate(self, *, scheduled: bool = False):
        """Regenerate index.md (recent days, counts, top entities, duplicate groups); no model call,
        canonical memory untouched. Returns a ConsolidationReport (indexer/maintenance/consolidate.py).
        `scheduled` (the watcher): only in a vault whose index.md already holds memvault's block."""
        index = self.serving_index(create_missing=True)
        return consolidate(self.layout, self.config, index, create=not scheduled)

    def project_journal_turn(self, summary: str, completed_at: datetime):
        """Journal projection of an admitted turn: Remember's content identity, so repeated content
        converges on one bullet and one index row (BM25 now, vectors through the queue)."""
        return _projection(self.remember(summary, at=completed_at))

    #: set by the owner while it runs: its group commit (indexer/engine/group_commit.py)
    group_commit = None

    def project_journal_turns(
        self, turns: list[tuple[str, datetime]], *, checkpoint: Callable[[], None] | None = None
    ) -> list:
        """`project_journal_turn` for many turns in one write per daily note: one Projection, or
        the error that refused it, per turn, in order. In an owner the turns join its group
        commit, one append per note with the remembers that arrive meanwhile; elsewhere they are
        written here under the vault lock. `checkpoint` (the worker's abort check) runs last
        before anything is written, and may raise to write nothing."""
        group = self.group_commit
        if group is not None and not self._lock.held_by_me:
            if checkpoint is not None:
                checkpoint()
            results = group.remember_together(turns)
        else:
            with self._lock:
                if checkpoint is not None:
                    checkpoint()
                results = self.remember_together(turns)
        return [result if isinstance(result, Exception) else _projection(result) for result in results]

    @translates_storage_errors
    def remember_together(self, facts: list[tuple[str, datetime | None]]) -> list:
        """Remember (text, at) pairs in one write per daily note (`bulk.remember_batch`), for the
        owner's batch writers (projected turns, agents' facts from the server): one RememberReceipt,
        or the VaultError that refused it, per pair, in order; in an owner, committed on its timer."""
        items = [RememberItem(text, at) for text, at in facts]
        return remember_batch(self, items, self._clock, defer_index=self.defers_index_commits)


def _note_holds(indexed, row) -> bool:
    """True when the note, as read (`read_note_records`), holds the row's memory: the same id and text."""
    return any(
        record.id == row.id and record.content_hash == row.content_hash and record.kind == row.kind
        for record in indexed.records
    )


def _projection(receipt: RememberReceipt):
    relpath, _, block_id = receipt.source.partition("#^")
    return Projection(relpath, block_id, written=receipt.status == "added")
