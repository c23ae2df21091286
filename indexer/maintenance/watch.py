"""`memvault watch`: keep the serving index in step with the files while people edit them.

    file events (watchdog, inotify here) → VaultEventHandler → ChangeQueue (debounce, bounded)
        → MemoryStore.sync(paths) → one BatchReport per batch (the CLI logs one line each)

Editors save in many ways; all of them end in one of a few events on the note's own path, and
the handler only ever *names* paths: what changed is decided by reading the file (`sync`).

* vim: renames the note to `note.md~`, writes a new inode, deletes the backup, and probes the
  folder with a file called `4913`. The `~` and `4913` names are ignored; the rename away and
  the new file both name the note.
* VS Code, Obsidian, JetBrains, atomic-save tools: write a temp file and rename it over the
  note. Temp names are ignored; a `moved` event acts on its destination (and its source, if
  that was a note: it has gone).
* appends and in-place writes: `modified` events, many per save, collapsed by the debounce.
* `git checkout`, `rsync`, folder deletes or moves: many events, or folder events that hide
  their contents. A folder event under `daily/` or `audit/` turns the batch into a rescan (the
  stat fast path makes that cheap), as does overflowing the bounded queue.

Only the note folders are watched below the vault's top (indexer/maintenance/note_watches.py):
the intake, the index and `.git/` never cost an event. Editor temp/backup names never reach the
queue (`vault.paths.is_ignored_name`).

BuJo's replay sidecar (`.replay-projection-v1.json`, at the top) is not a note: an event on it
names it, and after the batch's sync the serving generation's projection follows it when its stat
stamp changed (`replay_index.SidecarFollower`): a pull that brings another machine's captures
leaves health and recall in step without a rebuild.

Writes made by memvault itself index the note inline, under the vault lock, and record its
new stat and hash; when their events arrive the watcher reads the file, finds every row
already right, and commits nothing.
"""

import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)

from memvault.indexer.maintenance.collector import collect_while_idle
from memvault.indexer.maintenance.derived import BoundaryHook
from memvault.indexer.maintenance.note_watches import NoteWatches
from memvault.indexer.maintenance.replay_index import SidecarFollower
from memvault.indexer.maintenance.sync import SyncOutcome
from memvault.vault.errors import IndexUnavailable, UnsafePath, VaultError
from memvault.vault.layout import NOTE_KINDS, parse_note_relpath
from memvault.vault.locks import LivenessFence
from memvault.vault.paths import is_ignored_name, vault_relative
from memvault.vault.replay import SIDECAR_NAME

#: more distinct paths than this in one quiet period (a huge checkout) become one rescan
MAX_PENDING_PATHS = 4096
#: an idle watcher looks at its stop event at least this often (`Watcher._idle_wait`)
STOP_LOOK_SECONDS = 1.0
WATCHED_EVENTS = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]
_FILE_EVENT_TYPES = {"created", "modified", "closed", "moved", "deleted"}
_DIR_EVENT_TYPES = {"created", "deleted", "moved"}
_MAX_BACKOFF_SECONDS = 10.0


@dataclass(frozen=True)
class Batch:
    paths: tuple[str, ...]
    rescan: bool


class ChangeQueue:
    """Paths named by file events, waiting for a quiet moment. Thread-safe and bounded.

    A batch is ready `debounce` seconds after the last event, or `max_delay` seconds after the
    first one, whichever comes first: bursts collapse, and a steady stream still flows.
    """

    def __init__(
        self,
        debounce: float = 0.2,
        max_delay: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_paths: int = MAX_PENDING_PATHS,
    ):
        self.debounce, self.max_delay, self.max_paths = debounce, max_delay, max_paths
        self._clock = clock
        self._cond = threading.Condition()
        self._paths: set[str] = set()
        self._rescan = False
        self._first: float | None = None
        self._last: float | None = None

    def add(self, relpath: str) -> None:
        with self._cond:
            if not self._rescan and len(self._paths) >= self.max_paths:
                self._rescan = True  # bounded: too many names to keep, so look at everything
                self._paths.clear()
            if not self._rescan:
                self._paths.add(relpath)
            self._touch()

    def request_rescan(self) -> None:
        with self._cond:
            self._rescan = True
            self._paths.clear()
            self._touch()

    def requeue(self, batch: Batch) -> None:
        """Put a batch that could not be applied back (it is retried after a backoff)."""
        if batch.rescan:
            self.request_rescan()
        for path in batch.paths:
            self.add(path)

    def ready_in(self) -> float | None:
        """Seconds until the pending batch is due (0: now), or None when nothing is pending."""
        with self._cond:
            if self._first is None:
                return None
            due = min(self._last + self.debounce, self._first + self.max_delay)
            return max(0.0, due - self._clock())

    def take(self) -> Batch | None:
        with self._cond:
            if self._first is None:
                return None
            batch = Batch(tuple(sorted(self._paths)), self._rescan)
            self._paths, self._rescan, self._first, self._last = set(), False, None, None
            return batch

    def wait(self, stop: threading.Event, timeout: float) -> Batch | None:
        """Block until a batch is due (and return it), `stop` is set, or `timeout` passes.

        The check and the wait happen under one lock (the Condition's RLock), and add() / wake()
        notify it, so an idle watcher sleeps without polling and never misses an event."""
        deadline = self._clock() + timeout
        with self._cond:
            while not stop.is_set():
                due = self.ready_in()
                if due == 0.0:
                    return self.take()
                remaining = deadline - self._clock()
                if due is None and remaining <= 0:
                    return None
                self._cond.wait(due if due is not None else remaining)
        return None

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _touch(self) -> None:
        now = self._clock()
        self._first = now if self._first is None else self._first
        self._last = now
        self._cond.notify_all()


class VaultEventHandler(FileSystemEventHandler):
    """Turns watchdog events into note paths (or rescans) on a ChangeQueue. Never raises."""

    def __init__(self, root: Path, queue: ChangeQueue):
        self.root = Path(root)
        self.queue = queue

    def dispatch(self, event: FileSystemEvent) -> None:
        paths = [event.src_path] + ([event.dest_path] if event.event_type == "moved" else [])
        if event.is_directory:
            if event.event_type in _DIR_EVENT_TYPES and any(self._holds_notes(p) for p in paths):
                self.queue.request_rescan()
            return
        if event.event_type not in _FILE_EVENT_TYPES:
            return
        for path in paths:
            relpath = self._relpath(path)
            if relpath is not None and parse_note_relpath(relpath) is not None:
                self.queue.add(relpath)
            elif self._names_sidecar(path):
                self.queue.add(SIDECAR_NAME)  # not synced: the batch's projection follows it

    def _names_sidecar(self, path: str | bytes) -> bool:
        try:
            return bool(path) and vault_relative(self.root, Path(os.fsdecode(path))) == SIDECAR_NAME
        except (UnsafePath, ValueError):
            return False

    def _relpath(self, path: str | bytes) -> str | None:
        """The vault-relative name of an event path, or None if outside or ignored."""
        if not path:
            return None
        try:
            relpath = vault_relative(self.root, Path(os.fsdecode(path)))
        except (UnsafePath, ValueError):
            return None
        parts = relpath.split("/")
        if relpath in ("", ".") or any(is_ignored_name(part) for part in parts):
            return None
        return relpath

    def _holds_notes(self, path: str | bytes) -> bool:
        relpath = self._relpath(path)
        return relpath is not None and relpath.split("/")[0] in NOTE_KINDS


@dataclass(frozen=True)
class BatchReport:
    """What one batch did; `line()` is the one log line the CLI prints for it."""

    at: datetime
    named: int  # paths the events named (0 for a rescan)
    rescan: bool
    outcome: SyncOutcome | None = None
    error: str | None = None
    action: str | None = None  # "rebuilt", "compacted": index-wide work this batch triggered

    @property
    def changed(self) -> bool:
        return bool(self.outcome and self.outcome.files) or self.action is not None

    def line(self) -> str:
        stamp = self.at.astimezone().strftime("%H:%M:%S")
        what = "rescan" if self.rescan else f"{self.named} named"
        if self.error and self.action:
            return f"[{stamp}] {self.action}: {self.error}"
        if self.error:
            return f"[{stamp}] {what}: not indexed yet ({self.error}); retrying"
        if self.action:
            return f"[{stamp}] {self.action} the index"
        o = self.outcome
        if o is None:
            return f"[{stamp}] nothing to index ({what})"
        return (
            f"[{stamp}] indexed {len(o.files)} file(s) of {o.checked} read ({what}): "
            f"+{o.added} ~{o.updated} -{o.removed} memories in {o.seconds:.3f}s"
        )

    def to_json(self) -> dict:
        body = {
            "at": self.at.isoformat(),
            "named": self.named,
            "rescan": self.rescan,
            "error": self.error,
            "action": self.action,
        }
        body["sync"] = self.outcome.to_json() if self.outcome else None
        return body


@dataclass
class Watcher:
    """Runs the observer and applies batches until `stop` is set. One per vault (LivenessFence).

    `compact_after`: seconds of quiet after which an index with deleted rows is compacted (BM25
    statistics then match a rebuild's exactly again); None disables it.
    """

    store: object  # memvault.indexer.engine.store.MemoryStore (not imported: watch is loaded by the CLI lazily)
    debounce: float = 0.2
    max_delay: float = 1.0
    rescan_interval: float = 300.0
    compact_after: float | None = 60.0
    on_batch: Callable[[BatchReport], None] | None = None
    #: called once the fence is held and the observer runs (events from then on are seen)
    on_ready: Callable[[], None] | None = None
    hook: BoundaryHook | None = None
    #: seconds between scheduled consolidations (index.md, `indexer/maintenance/consolidate.py`); None: never
    consolidate_every: float | None = None
    queue: ChangeQueue = field(init=False)
    _stop: threading.Event = field(init=False, default_factory=threading.Event)
    #: the kernel watches, while `run` runs (indexer/maintenance/note_watches.py)
    _watches: NoteWatches | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.queue = ChangeQueue(self.debounce, self.max_delay)
        self.handler = VaultEventHandler(self.store.layout.root, self.queue)
        self._backoff = 0.0
        self._follower = SidecarFollower(self.store.layout, self.store.config)

    def stop(self) -> None:
        """Ask `run` to return after the batch in hand (safe from a signal handler)."""
        self._stop.set()
        self.queue.wake()

    def run(self, stop: threading.Event | None = None) -> None:
        """Watch until `stop` (or `self.stop()`); every batch is applied whole or not at all."""
        from watchdog.observers import Observer

        stop = stop or self._stop
        self._stop = stop
        _quiet_watchdog_rewatch_warning()
        with LivenessFence(self.store.layout.root):
            observer = Observer()
            self._watches = NoteWatches(observer, self.handler, self.store.layout.root, WATCHED_EVENTS)
            observer.start()
            try:
                self._watches.refresh()
                if self.on_ready is not None:
                    self.on_ready()
                self.queue.request_rescan()  # catch up with what changed while nobody watched
                self._loop(stop)
            finally:
                self._watches = None
                observer.stop()
                observer.join(timeout=10)

    def _loop(self, stop: threading.Event) -> None:
        last_event = last_rescan = time.monotonic()
        compact_due = self.compact_after is not None
        while not stop.is_set():
            batch = self.queue.wait(stop, timeout=self._idle_wait(last_event, last_rescan, compact_due))
            now = time.monotonic()
            if batch is None and stop.is_set():
                break  # stopping: no timed duty (a compaction) starts now
            if batch is not None:
                self.process(batch)
                last_event, compact_due = now, self.compact_after is not None
                last_rescan = now if batch.rescan else last_rescan
            elif now - last_rescan >= self.rescan_interval:
                self.queue.request_rescan()  # inotify can drop events (queue overflow): look anyway
                last_rescan = now
            elif compact_due and now - last_event >= self.compact_after:
                compact_due = False
                self._compact()
                collect_while_idle()  # the cycles an owner's spaced-out collections left (maintenance/collector.py)
            elif self._consolidation_due(now):
                self._consolidate(now)
            if self._backoff and not stop.is_set():
                stop.wait(self._backoff)

    def _idle_wait(self, last_event: float, last_rescan: float, compact_due: bool) -> float:
        """Seconds until the next timed duty (rescan, compaction, consolidation), at least 0.05 s,
        and at most `STOP_LOOK_SECONDS`: a stop asked by a signal is seen within that. CPython
        runs a signal's handler (which sets `stop` and wakes the queue) on the main thread only,
        once it runs again, and a signal the kernel hands to another of the owner's threads does
        not cut the main thread's wait short: a SIGTERM waited up to a minute."""
        now = time.monotonic()
        due = [last_rescan + self.rescan_interval]
        if compact_due and self.compact_after is not None:
            due.append(last_event + self.compact_after)
        if self.consolidate_every is not None:
            last = self._last_consolidation
            due.append(now if last is None else last + self.consolidate_every)
        if self._backoff:
            due.append(now + self._backoff)
        return min(STOP_LOOK_SECONDS, max(0.05, min(due) - now))

    def process(self, batch: Batch) -> BatchReport:
        """Apply one batch; on failure requeue it and back off. Never raises for vault state."""
        if batch.rescan and self._watches is not None:
            self._watches.refresh()  # a note folder that came (or came back) is watched before it is read
        report = self._apply(batch)
        if report.error:
            self.queue.requeue(batch)
            self._backoff = min(_MAX_BACKOFF_SECONDS, max(0.5, self._backoff * 2))
        else:
            self._backoff = 0.0
        if self.on_batch is not None:
            self.on_batch(report)
        return report

    def _apply(self, batch: Batch) -> BatchReport:
        at = datetime.now(UTC)
        notes = tuple(path for path in batch.paths if path != SIDECAR_NAME)
        named = len(notes)
        if not notes and not batch.rescan:
            return self._follow_sidecar(BatchReport(at, 0, False))
        try:
            # in an owner, named notes join its timed index commit (one bounded repair per save)
            outcome = self.store.sync(None if batch.rescan else notes, hook=self.hook, defer=True)
        except IndexUnavailable as exc:
            return self._rebuild_instead(batch, at, exc)
        except (VaultError, OSError) as exc:
            return BatchReport(at, named, batch.rescan, error=f"{type(exc).__name__}: {exc}")
        if outcome.skipped:
            return BatchReport(at, named, batch.rescan, outcome, error=outcome.skipped)
        return self._follow_sidecar(BatchReport(at, named, batch.rescan, outcome))

    def _follow_sidecar(self, report: BatchReport) -> BatchReport:
        """The batch's report, with the replay projection brought in step with the sidecar."""
        changed, problem = self._follower.follow()
        if problem is not None:
            return replace(report, action="could not project the replay sidecar", error=problem)
        if changed:
            return replace(report, action="re-projected the replay sidecar into")
        return report

    def _rebuild_instead(self, batch: Batch, at: datetime, cause: IndexUnavailable) -> BatchReport:
        """The serving index is unreadable (deleted, corrupt, old schema): it is derived, so rebuild."""
        try:
            self.store.rebuild()
        except (VaultError, OSError) as exc:
            return BatchReport(at, len(batch.paths), batch.rescan, error=f"{cause}; rebuild failed: {exc}")
        return BatchReport(at, len(batch.paths), batch.rescan, action="rebuilt")

    def _compact(self) -> None:
        compact = getattr(self.store, "compact", None)
        if compact is None:
            return
        try:
            done = compact()
        except (VaultError, OSError) as exc:
            report = BatchReport(datetime.now(UTC), 0, False, error=str(exc), action="could not compact")
        else:
            if not done:
                return
            report = BatchReport(datetime.now(UTC), 0, False, action="compacted")
        if self.on_batch is not None:
            self.on_batch(report)

    # --- scheduled consolidation (the logic is `MemoryStore.consolidate`) ------------------------

    _last_consolidation = None  # monotonic time of the last run (class default: never)

    def _consolidation_due(self, now: float) -> bool:
        """Idle moments only: first right after start-up, then every `consolidate_every` seconds."""
        if self.consolidate_every is None:
            return False
        return self._last_consolidation is None or now - self._last_consolidation >= self.consolidate_every

    def _consolidate(self, now: float) -> None:
        self._last_consolidation = now
        try:
            report = self.store.consolidate(scheduled=True)
        except (VaultError, OSError) as exc:
            result = BatchReport(datetime.now(UTC), 0, False, error=f"consolidation failed: {exc}")
        else:
            if not report.changed:
                return
            result = BatchReport(datetime.now(UTC), 0, False, action="consolidated")
        if self.on_batch is not None:
            self.on_batch(result)


def _quiet_watchdog_rewatch_warning() -> None:
    """Silence watchdog's "Callback with id … already exists for watch …" RuntimeWarning.

    A directory that appears while the recursive watch is being set up (an index generation under
    `.index/`, say) is registered twice: once by the walk, once by its creation event. inotify
    hands back the same watch descriptor, and watchdog warns on stderr that it replaces the
    callback, which is the same callback. Nothing is lost, but the warning would land between
    `watch`'s log lines.
    """
    warnings.filterwarnings(
        "ignore",
        message=r"Callback with id .* already exists for watch",
        category=RuntimeWarning,
        module=r"watchdog\.observers\.inotify",
    )
