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
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from memvault.indexer.engine.conflict_marks import conflicted_notes, mark_conflicts
from memvault.indexer.engine.deferred import DeferredIndexing
from memvault.indexer.engine.generation_methods import GenerationMethods
from memvault.indexer.engine.intake_methods import DurableIntake
from memvault.indexer.engine.journal_methods import JournalMethods
from memvault.indexer.engine.locate import locate_vault
from memvault.indexer.engine.overlay import pending_record
from memvault.indexer.engine.server_store import ServerIndexing
from memvault.indexer.maintenance.derived import BoundaryHook, DerivedIndex, read_note_records
from memvault.indexer.maintenance.generations import MANIFEST, Manifest, current_generation
from memvault.indexer.maintenance.progress import PhaseLog
from memvault.indexer.maintenance.sync import IndexDelta, SyncOutcome
from memvault.indexer.results import RecallResult, RememberReceipt, SyncReport
from memvault.indexer.search.recall_request import check_recall_request
from memvault.indexer.search.telemetry import AccessLog
from memvault.vault.clock import utc_now, zone
from memvault.vault.config import Config, load_config
from memvault.vault.curated import prepare_fact, write_fact
from memvault.vault.errors import IndexUnavailable, StorageError, VaultError, VaultLocked
from memvault.vault.ids import content_hash
from memvault.vault.layout import VaultLayout, parse_note_relpath
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS
from memvault.vault.locks import VaultLock
from memvault.vault.note_append import written_last_by_us
from memvault.vault.paths import resolve_inside
from memvault.vault.recent_writes import lines_lost_from, repair_lost_lines
from memvault.vault.storage_errors import translates_storage_errors

#: how often a commit repairs and reads its notes again while saves keep dropping memvault's lines
_REPAIRED_READ_ATTEMPTS = 4
#: why an index commit failed, said in recall's `degraded` (by StorageError code)
_LAG_REASONS = {"disk_full": "no space left on the device", "read_only": "the vault is read-only",
                "permission_denied": "permission denied"}  # fmt: skip


class MemoryStore(DurableIntake, JournalMethods, GenerationMethods):
    def __init__(self, layout: VaultLayout, config: Config, *, clock: Callable[[], datetime] = utc_now):
        self.layout = layout
        self.config = config
        self._clock = clock
        self._lock = VaultLock(layout.root)
        #: serializes this process's index writes (and what reads the manifest whole). Taken after
        #: the vault lock, never before; the owner's commit holds it alone, so remembers keep
        #: writing notes while a commit runs
        self._index_lock = threading.RLock()
        self._index: DerivedIndex | None = None
        #: notes the owner's group commit acknowledged before committing them to the index
        self._deferred = DeferredIndexing()
        self._manifest_stamp: tuple[str, int] | None = None
        #: vectors for Journal/BuJo; Lite never embeds
        self._semantic = _semantic_service(layout, config)
        if self._semantic is not None:  # an overflow in a live process catches up here, not "next open"
            self._semantic.catch_up_source = self._catch_up_vectors
        #: when each memory was last recalled, and how often: telemetry, never used for ranking
        self.access_log = AccessLog(layout.root, layout.index_dir)
        if config.memory.mode == "bujo":  # MemoryJournal reads capture's supersession lifecycle
            from memvault.indexer.maintenance.replay_index import SupersessionSource

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
            from memvault.indexer.engine.client import find_owner
            from memvault.indexer.engine.remote import RemoteStore

            owner = find_owner(root)
            if owner is not None and not owner.is_this_process:
                return RemoteStore(root, owner, env)
        config = load_config(root, env, overrides)
        store = _store_class(cls, config)(VaultLayout(root), config)
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
        self._index = None

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
            index = self._writable_index()
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
        from memvault.indexer.engine.bulk import IMPORT_BATCH_ITEMS, BulkOutcome, as_item, chunks, remember_batch

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
                    index = self._writable_index()
                    stale = index.stale_paths(self.layout, None if paths is None else list(paths))
                    delta = self._apply(index, stale, hook)
                    if self._semantic is not None and paths is None:
                        self._semantic.catch_up(index, self.time_zone)
        except VaultLocked:
            return SyncOutcome.skipped_because("another memvault process holds the vault lock")
        return SyncOutcome.of_delta(len(stale), delta, time.monotonic() - started)

    def _read_ahead(self, paths: list[str]) -> None:
        """Read and parse the notes a save changed before the vault lock is taken. A person who
        adds a line above a day's 20,000 memories makes every memory below it parse again (0.9 s):
        under the lock, the repair and the read then find this parse and these records kept
        (vault/note.py, vault/records.py), and every writer waits only for what changed since,
        seldom anything.
        A note exactly as this process's last append left it (the watcher's event for that
        append) is not read."""
        for path in paths:
            if parse_note_relpath(path) is None:
                continue
            try:
                if written_last_by_us(resolve_inside(self.layout.root, path)):
                    continue
            except VaultError:
                continue  # a symlinked folder: the sync under the lock says so
            read_note_records(self.layout, path, self.time_zone)

    def _defer_edits(self, paths: list[str], *, skip_own_appends: bool = False) -> tuple[IndexDelta, list[str]]:
        """The owner's watcher: what a save changed in these notes, searchable at once beside the
        index (new and edited rows; a removed row stays until the commit; rows hold no line, so
        a line added above a day's memories changes none of them) and committed on the
        committer's timer. Vault lock held; the index lock is not taken, so a save never waits
        for a commit in flight (reading rows beside it is safe). With `skip_own_appends` (the
        watcher), a note exactly as this process's own last append left it is skipped: its new
        rows joined the deferred set with the append, and the commit reads the note anyway."""
        index = self._writable_index()
        stale = index.stale_paths(self.layout, paths)
        if skip_own_appends:
            stale = [path for path in stale if not written_last_by_us(resolve_inside(self.layout.root, path))]
        delta = IndexDelta()
        for item in (read_note_records(self.layout, path, self.time_zone) for path in stale):
            delta.extend(index.diff_note(item.path, item.records)[0])
        with self._deferred.lock:
            self._deferred.add(stale, {}, delta.upserts)
        return delta, stale

    def _embedding_identity(self) -> dict | None:
        """The identity a new generation is built for; sync and the watcher never change it."""
        embeddings = self.config.memory.embeddings
        if embeddings is None:
            return None
        return {"provider": embeddings.provider, "model": embeddings.model, "dim": embeddings.dim}

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
            index = self._readable_index(flush=not self.defers_index_commits)
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

    def _indexed_copy(self, index: DerivedIndex, digest: str):
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
            from memvault.indexer.search.rerank import reranker_from_config

            self._rerank = reranker_from_config(self.config.memory.rerank, getattr(self, "env", {}))
        return self._rerank

    def search(self, query: str, limit: int = 10, mode: str = "tool") -> RecallResult:
        """Alias of `recall`, named after the CLI command."""
        return self.recall(query, limit=limit, mode=mode)

    def health_report(self, *, strict: bool = False, owner=None) -> dict:
        """`memvault health` as JSON: every check (indexer/maintenance/health.py), plus, asked
        through an owner (`owner`), whether its intake worker is running."""
        from memvault.indexer.maintenance.health import check_health, owner_findings

        extra = () if owner is None else owner_findings(owner.identity()["pid"], owner.worker_snapshot())
        self._commit_acknowledged()  # health compares the files with the index: commit what is put off
        if (
            strict and self._semantic is not None
        ):  # queued vectors are work in flight, not a fault: settle them (bounded)
            self._semantic.drain()
        elif self._semantic is not None:  # health reads the vectors from disk: save what memory holds
            try:
                self._semantic.save_serving()
            except (VaultError, OSError):
                pass  # a full disk: health reports the vectors the disk holds, and why they lag
        with self._index_lock:  # not beside a commit that changes what it compares
            return check_health(self.layout, self.config, strict=strict, extra=extra).to_json()

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
        from memvault.indexer.maintenance.consolidate import consolidate

        index = self._readable_index(create_missing=True)
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
        from memvault.indexer.engine.bulk import RememberItem, remember_batch

        items = [RememberItem(text, at) for text, at in facts]
        return remember_batch(self, items, self._clock, defer_index=self.defers_index_commits)

    def _catch_up_vectors(self, paths: set[str] | None) -> None:
        """Embed every vector the serving generation misses or holds stale in these notes (None:
        in any note); the semantic queue's thread calls this after an overflow. The embedding
        runs outside the vault lock."""
        self._semantic.catch_up_beside_writers(self._locked_writable_index, self.time_zone, paths)

    @contextmanager
    def _locked_writable_index(self) -> Iterator[DerivedIndex]:
        with VaultLock(self.layout.root, timeout=60.0):  # VaultLocked: the queue retries shortly
            yield self._writable_index()

    #: set by the owner: index commits of memvault's own writes (and the watcher's) run on its
    #: commit timer, and reads search the pending rows beside the index (indexer/engine/deferred.py)
    defers_index_commits = False

    @translates_storage_errors
    def index_notes(self, relpaths: Iterable[str]) -> None:
        """Index these notes now, under the vault lock (re-entrant for a caller that holds it);
        in an owner, on its commit timer."""
        with self._lock:
            if self.defers_index_commits:  # their rows searchable at once (capture's next candidate lookup)
                self._defer_edits(list(relpaths))
                return
            self._apply(self._writable_index(), list(relpaths))

    def flush_deferred(self) -> None:
        """Commit to the index the notes the owner acknowledged meanwhile (indexer/engine/deferred.py).
        A failure leaves them pending; raises it.

        The notes are read under the vault lock (an append is never seen half-written); the
        commit itself, the costly part, runs under the index lock alone, so writers go on
        appending to notes meanwhile. What they add after the read stays pending for the next."""
        if not self._deferred.pending:
            return
        self._lock.acquire()
        try:
            with self._deferred.lock:
                paths, through, read_at = self._deferred.read_point()
            paths = sorted(set(paths))
            if not paths:
                return
            self._index_lock.acquire()  # before the vault lock is let go: no other index write between
            try:
                indexed = self._read_repaired(paths)
                index = self._writable_index()
            except BaseException:
                self._index_lock.release()
                raise
        finally:
            self._lock.release()
        try:
            self._apply(index, paths, self._intake_hook, indexed=indexed, through=through, read_at=read_at)
        finally:
            self._index_lock.release()

    def _read_repaired(self, paths: list[str]) -> list:
        """The notes as a commit reads them, with every line memvault wrote lately: a save that
        dropped one is repaired first, and a save landing between that repair and the read
        (an editor saving many times a second) is repaired and read again, a few times at most.
        Committed without its line, a memory would leave the pending rows before the index
        had it, and for the moment until the watcher's repair no read would find it."""
        for _ in range(_REPAIRED_READ_ATTEMPTS):
            repair_lost_lines(self.layout, paths)
            indexed = [read_note_records(self.layout, path, self.time_zone) for path in paths]
            if not lines_lost_from(self.layout, {item.path: [r.id for r in item.records] for item in indexed}):
                break
        return indexed

    def _index_written(self, index: DerivedIndex, relpaths: list[str], receipts: dict, records=()) -> None:
        """Index notes that now durably hold new lines. The note is the commit point: in an owner
        the commit is put off (its rows are searchable at once meanwhile); elsewhere, if the index
        cannot take them (a full disk), the write still stands: the notes wait in the deferred
        set, the next write or open retries the commit, and recall says in `degraded` why it lags."""
        if self.defers_index_commits:
            with self._deferred.lock:
                self._deferred.add(relpaths, receipts, records)
            return
        try:
            self._apply(index, relpaths)
        except (OSError, StorageError) as exc:
            reason = getattr(exc, "strerror", None) or _LAG_REASONS.get(getattr(exc, "code", None), str(exc))
            with self._deferred.lock:
                self._deferred.add(relpaths, receipts, records)
                self._deferred.problem = (f"written to {', '.join(relpaths)} but not indexed yet ({reason}): "
                                          "free space or fix the index folder's mode; every read retries")  # fmt: skip

    def _commit_acknowledged(self) -> None:
        """Before a read: commit what the owner acknowledged and put off. Never raises: the read
        is served, and says in recall's `degraded` what it may miss (until a commit succeeds)."""
        if not self._deferred.pending:
            return
        try:
            self.flush_deferred()
        except (VaultError, OSError) as exc:
            self._deferred.problem = f"acknowledged writes not yet indexed: {exc}"

    # --- index plumbing ----------------------------------------------------------------------

    def _apply(self, index: DerivedIndex, relpaths: list[str], hook: BoundaryHook | None = None, *, indexed=None,
               through: int | None = None, read_at: float | None = None) -> IndexDelta:  # fmt: skip
        """Make `index` hold these notes as they are (`indexed`: as they were read, under the
        vault lock, `through` that version of the deferred set). Vault lock held, or the index
        lock taken while it was and `indexed` given: reading the serving index's notes here
        repairs them first (`_read_repaired`), which writes."""
        with self._index_lock:
            if indexed is None and index is self._index and self._deferred.pending:
                indexed = self._read_repaired(relpaths)  # its commit drops pending rows (an owner's)
            elif indexed is None:
                indexed = [read_note_records(self.layout, path, self.time_zone) for path in relpaths]
            if self._intake_hook is not None and index is self._index and self._deferred.pending:
                if not set(self._deferred.paths()).isdisjoint(relpaths):
                    # crash tests: acknowledged, not committed (whichever commit takes them: the
                    # committer's timer, or a rescan of the watcher's that came first)
                    self._intake_hook("deferred.committing")
            delta = index.apply(indexed, hook)
            if index is self._index:
                self._manifest_stamp = self._stamp(index)
                if self._deferred.pending:  # committed now: what waited for these notes steps aside
                    with self._deferred.lock:
                        self._deferred.committed(relpaths, through, read_at)
        return delta

    def _writable_index(self) -> DerivedIndex:
        """The serving generation, current with other processes' commits; created if missing.

        Caller holds the vault lock.
        """
        index = self._readable_index(create_missing=True)
        stamp = self._stamp(index)
        # another process committed: reload its manifest (never beside this process's own commit
        # in flight: the manifest it is writing is the newer one)
        if stamp != self._manifest_stamp and self._index_lock.acquire(blocking=False):
            try:
                if self._stamp(index) != self._manifest_stamp:
                    index.manifest = Manifest.load(index.generation / MANIFEST)
                    index.bm25.refresh()
                    self._manifest_stamp = self._stamp(index)
            finally:
                self._index_lock.release()
        return index

    def _readable_index(self, create_missing: bool = False, *, flush: bool = False) -> DerivedIndex:
        """The serving generation for a read. Reads never wait for an index commit: recall
        searches the acknowledged, uncommitted rows beside it (`self._deferred.view`). With
        `flush` (health, which compares files with the index) they are committed first."""
        if flush:
            self._commit_acknowledged()
        try:
            return self._serving_index(create_missing)
        except IndexUnavailable:
            # a rebuild may have swapped CURRENT and dropped the generation we were opening
            # between our reading the pointer and opening the folder: look once more
            if self._index is not None and current_generation(self.layout.index_dir) == self._index.generation:
                raise
            self._index = None
            return self._serving_index(create_missing)

    def _serving_index(self, create_missing: bool) -> DerivedIndex:
        generation = current_generation(self.layout.index_dir)
        if generation is None:
            if not create_missing:
                raise IndexUnavailable("the vault has no index yet: run `memvault rebuild`")
            # first write to a vault: build inline under the vault lock (taking the rebuild
            # lock here, after the vault lock, could deadlock against a running rebuild)
            self._swap_in(self._build_generation(PhaseLog()))
            return self._index
        if self._index is None or self._index.generation != generation:
            self._index = DerivedIndex.open_generation(generation)
            self._manifest_stamp = self._stamp(self._index)
            if self._semantic is not None:
                self._semantic.attach_serving(self._index)
        else:
            self._index.bm25.refresh()
        return self._index

    @staticmethod
    def _stamp(index: DerivedIndex) -> tuple[str, int]:
        try:
            info = os.stat(index.generation / MANIFEST)
        except OSError as exc:
            raise IndexUnavailable(f"index generation {index.generation} vanished ({exc.strerror}): retry") from exc
        return (str(info.st_ino), info.st_mtime_ns)


def _note_holds(indexed, row) -> bool:
    """True when the note, as read (`read_note_records`), holds the row's memory: the same id and text."""
    return any(
        record.id == row.id and record.content_hash == row.content_hash and record.kind == row.kind
        for record in indexed.records
    )


def _projection(receipt: RememberReceipt):
    from memvault.vault.intake.projection import Projection

    relpath, _, block_id = receipt.source.partition("#^")
    return Projection(relpath, block_id, written=receipt.status == "added")


class ServerIndexedStore(ServerIndexing, MemoryStore):
    """A MemoryStore whose derived index lives on an index server (`server_store.py`)."""


def _store_class(cls: type, config: Config) -> type:
    """The engine for the vault's index block: `.index/` (this class), or an index server."""
    if config.index.backend == "local":
        return cls
    return ServerIndexedStore


def _semantic_service(layout: VaultLayout, config: Config):
    if config.memory.mode == "lite" or config.memory.embeddings is None:
        return None
    from memvault.indexer.maintenance.semantic_service import SemanticService  # numpy/hnswlib only for tiers that embed

    return SemanticService(layout, config)
