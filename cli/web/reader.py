"""`VaultReader`: everything the web pages read, through the library's read API only.

The pages never touch the store directly: they call this object, which serialises the calls (the
store is not thread-safe) and bounds what is read. Nothing here writes a canonical file; the
only writes are the derived index's own catch-up (recall and journal bring the serving
generation up to date with the files, as they do for the CLI).

An owner process (`memvault serve`) builds one from the store it already holds:
`VaultReader(store)`. `memvault web` opens the store itself, or, while another process owns the
vault, reads through that owner (a `RemoteStore`: recall and journal go to the owner; health,
intake counts and the files are read here, read-only).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memvault.cli.web.snapshots import StaleWhileRevalidate
from memvault.indexer.services.chat import chat_model_from_config
from memvault.vault.documents import DocumentStore
from memvault.vault.documents.format import ARCHIVED_DIR, ID_RE, parse_document
from memvault.vault.errors import InvalidRecord, ProviderUnavailable, UnsafePath, VaultError
from memvault.vault.fsio import read_bytes_nofollow
from memvault.vault.graph import GRAPH_FILE, MAX_GRAPH_BYTES, Graph, graph_path, graph_too_big, parse_graph_skipping
from memvault.vault.intake.files import IntakeDirs
from memvault.vault.intake.snapshot import list_entries, runtime_snapshot
from memvault.vault.layout import AUDIT, DAILY, VaultLayout, note_relpath_candidates, parse_note_relpath
from memvault.vault.locks import LivenessFence
from memvault.vault.paths import resolve_inside
from memvault.vault.runtime.memory import RuntimeMemory
from memvault.vault.spaces import SpaceCatalog

#: a note bigger than this is listed but not rendered (the index stops at 16 MiB; a page must stay light)
MAX_RENDERED_NOTE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class NoteFile:
    relpath: str
    text: str
    size: int
    #: why the text shown is not the file's exact text (not UTF-8), or None
    problem: str | None = None


@dataclass(frozen=True)
class ChatAvailability:
    model: object | None  # a ChatModel, or None when agent search is off
    reason: str | None  # why it is off
    description: str | None = None  # "ollama llama3.2 at http://…" (for the control plane only)


class VaultReader:
    def __init__(self, store, *, env: Mapping[str, str] | None = None, clock: Callable[[], datetime] | None = None):
        self.store = store
        self.root: Path = store.layout.root
        self.config = store.config
        self.env = dict(env if env is not None else getattr(store, "env", {}))
        self._clock = clock or (lambda: datetime.now(UTC))
        self._calls = threading.Lock()
        self._meta_cache: dict[Path, tuple[tuple[int, int], int | None]] = {}
        self._status: StaleWhileRevalidate | None = None
        self._graph_cache: tuple[tuple[int, int, int], object] | None = None

    @property
    def time_zone(self) -> str:
        return self.config.memory.time_zone

    @property
    def mode(self) -> str:
        return self.config.memory.mode

    def now(self) -> datetime:
        return self._clock()

    # --- recall and journal ---------------------------------------------------------------------

    def recall(self, query: str, *, limit: int, mode: str):
        with self._calls:
            return self.store.recall(query, limit=limit, mode=mode)

    def journal(self, *, from_date=None, through_date=None, time_zone=None, limit=None, cursor=None):
        with self._calls:
            return self.store.journal(
                from_date=from_date, through_date=through_date, time_zone=time_zone, limit=limit, cursor=cursor
            )

    def chat(self) -> ChatAvailability:
        """The configured `memory.llm` chat model, or why agent search is off."""

        try:
            model = chat_model_from_config(self.config, self.env)
        except ProviderUnavailable as exc:
            return ChatAvailability(None, str(exc))
        if model is None:
            return ChatAvailability(
                None, "no chat model is configured: add a memory.llm block to memvault.json (docs/configuration.md)"
            )
        return ChatAvailability(model, None, f"{model.provider} {model.model} at {model.url}")

    # --- the files ------------------------------------------------------------------------------

    def note_paths(self) -> list[str]:
        return self.store.layout.note_relpaths()

    def indexed_rows(self) -> dict[str, int]:
        """Rows per note path, from the serving generation's manifest ({} without an index)."""
        index = self._index_or_none()
        if index is None:
            return {}
        return {path: state.rows for path, state in index.manifest.files.items()}

    def note(self, relpath: str) -> NoteFile:
        """The note at `relpath`, or where the vault keeps that day (a link by date finds a nested note)."""
        return self._text_file(_existing_note(self.root, relpath))

    def index_md(self) -> NoteFile | None:
        """The living index.md (regenerated by consolidation), or None when there is none yet."""
        try:
            return self._text_file("index.md")
        except NotFound:
            return None

    def _text_file(self, relpath: str, root: Path | None = None) -> NoteFile:

        path = resolve_inside(root or self.root, relpath)
        try:
            size = os.lstat(path).st_size
        except FileNotFoundError:
            raise NotFound(f"{relpath} does not exist in this vault: see the Content page for what does") from None
        if size > MAX_RENDERED_NOTE_BYTES:
            return NoteFile(
                relpath, "", size, f"{relpath} is {size:,} bytes: too big to show here; open it in your editor"
            )
        try:
            data = read_bytes_nofollow(path)
        except FileNotFoundError:
            raise NotFound(f"{relpath} does not exist in this vault: see the Content page for what does") from None
        except OSError as exc:
            raise UnsafePath(f"{relpath} cannot be read ({exc.strerror}): check its permissions") from None
        try:
            return NoteFile(relpath, data.decode("utf-8"), size)
        except UnicodeDecodeError as exc:
            problem = (
                f"{relpath} is not valid UTF-8 (byte {exc.start}); shown with replacement characters:"
                " re-save it as UTF-8"
            )
            return NoteFile(relpath, data.decode("utf-8", errors="replace"), size, problem)

    def graph(self):
        """graph.jsonl's good lines (an empty Graph when there is none); see `graph_problems`."""
        return self._graph_read()[0]

    def graph_problems(self) -> list[str]:
        """Each line of graph.jsonl the pages left out, named with its line number and fix."""
        return self._graph_read()[1]

    def _graph_read(self):
        """Parsed again only when the file's stat changed: it can be tens of megabytes, and the
        Entities pages read it on every load. A bad line is left out and named, not fatal: the
        page shows the rest (capture, a writer, still refuses the file until it is fixed)."""

        path = graph_path(self.root)
        try:
            info = os.lstat(path)
            stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
        except OSError:
            return Graph(), []
        cached = self._graph_cache
        if cached is not None and cached[0] == stamp:
            return cached[1]
        if info.st_size > MAX_GRAPH_BYTES:  # refused by its size, never read whole
            raise graph_too_big(GRAPH_FILE, info.st_size)
        try:
            data = read_bytes_nofollow(path)
        except FileNotFoundError:
            return Graph(), []
        except OSError as exc:
            raise UnsafePath(
                f"{GRAPH_FILE} cannot be read ({exc.strerror}): check it is a plain file memvault may read"
            ) from None
        parsed = parse_graph_skipping(data)
        self._graph_cache = (stamp, parsed)
        return parsed

    def graph_exists(self) -> bool:

        return (self.root / GRAPH_FILE).is_file()

    # --- the runtime layer ----------------------------------------------------------------------

    def documents(self):
        return self._document_store().list()

    def archived_documents(self) -> list[str]:
        return self._document_store().list_archived()

    def document(self, doc_id: str):
        return self._document_store().read(doc_id)

    def archived_document(self, name: str):

        stem = name.removesuffix(".md")
        if ID_RE.fullmatch(stem) is None:
            raise InvalidRecord(f"{name!r} is not an archived document name: see the Content page for the list")
        note = self._text_file(f"{ARCHIVED_DIR}/{stem}.md")
        return parse_document(stem, note.text.encode("utf-8"), "")

    def documents_limit(self) -> int:
        return self._document_store().limit

    def runtime(self):

        return RuntimeMemory.for_vault(self.root, self.config).load()

    def spaces(self):
        return self._space_catalog().list()

    def space_note_count(self, space_id: str) -> int:
        return len(self.space_notes(space_id))

    def space(self, space_id: str):
        """A catalogued memory space, or NotFound."""
        try:
            return self._space_catalog().get(space_id)
        except InvalidRecord as exc:
            raise NotFound(str(exc)) from None

    def space_notes(self, space_id: str) -> list[str]:

        return VaultLayout(self._space_catalog().path_of(space_id)).note_relpaths()

    def space_note(self, space_id: str, relpath: str) -> NoteFile:
        """A note of a memory space (itself a vault), read as `note` reads the vault's own."""
        self.space(space_id)
        root = self._space_catalog().path_of(space_id)
        return self._text_file(_existing_note(root, relpath), root)

    def _space_catalog(self):

        return SpaceCatalog(self.root / "spaces", time_zone=self.time_zone)

    def _document_store(self):

        return DocumentStore(self.root)

    # --- status ---------------------------------------------------------------------------------

    def status_snapshot(self, *, fresh: bool = False) -> tuple[dict, float]:
        """(health + intake + index facts, age in seconds): see cli/web/snapshots.py."""
        if self._status is None:
            from memvault.cli.web.views.status import slow_status

            self._status = StaleWhileRevalidate(lambda: slow_status(self))
        return self._status.get(fresh=fresh)

    def health(self):
        with self._calls:
            return _HealthJson(self.store.health_report(strict=False))  # the engine's own report

    def intake(self) -> dict:
        """Content-free, as `memvault inspect` is: counts, ledger health, the oldest pending age."""

        dirs = IntakeDirs(self.root)
        now = self.now()
        local = getattr(self.store, "intake_snapshot", None)  # a live owner's RemoteStore has none
        if local is None:
            snapshot = {**runtime_snapshot(dirs, now), "worker": None}
        else:
            with self._calls:
                snapshot = local()
        active = [e for e in list_entries(dirs, now) if e["state"] != "resolved"] if dirs.exists() else []
        oldest = min((e["admittedAt"] for e in active if e.get("admittedAt")), default=None)
        snapshot["oldestPendingAt"] = oldest
        snapshot["oldestPendingSeconds"] = (
            None if oldest is None else max(0, int((now - _parse_ts(oldest)).total_seconds()))
        )
        worker = snapshot.pop("worker", None)  # its error text and capture warnings are not content-free
        snapshot["worker"] = (
            None if worker is None else {"running": worker["running"], "transitions": worker["transitions"]}
        )
        snapshot["drainedHere"] = worker is not None
        return snapshot

    def index_facts(self) -> dict:
        """Serving generation, row counts, sizes on disk, embedding identity and vector count."""
        from memvault.indexer.maintenance.semantic import FOLDER

        index = self._index_or_none()
        notes = self.note_paths()
        facts: dict = {"generation": None, "rows": None, "deletedRows": None, "bytes": None, "notes": len(notes),
                       "noteBytes": sum(_size(self.root / p) for p in notes), "embedding": None, "vectors": None,
                       "curatedRows": None, "configuredEmbedding": self._configured_embedding()}  # fmt: skip
        if index is None:
            return facts
        if not getattr(index, "has_local_vectors", True):  # a server's generation: no folder here
            counts = index.backend.counts(index.number)
            curated = counts.by_kind.get("curated", 0)
            built = index.manifest.embedding
            facts.update(generation=index.generation.name, rows=counts.rows, deletedRows=index.deleted_rows(),
                         embedding=built, curatedRows=curated,
                         vectors=None if built is None else curated - counts.without_vector)  # fmt: skip
            return facts
        facts.update(
            generation=index.generation.name, rows=index.bm25.count(), deletedRows=index.deleted_rows(),
            bytes=_folder_bytes(index.generation), embedding=index.manifest.embedding,
            curatedRows=index.bm25.count_kind("curated"),
        )  # fmt: skip
        vectors = index.generation / FOLDER
        if vectors.is_dir():
            facts["vectors"] = self._vector_count(vectors)
        return facts

    def vector_lag_reason(self) -> str | None:
        # the store has no public accessor for its vector queue's state yet; absent in lite
        semantic = getattr(self.store, "_semantic", None)
        return None if semantic is None else semantic.lag_reason

    def owner(self) -> dict:
        """Who owns the vault (the liveness fence), from this process's point of view."""

        fence = LivenessFence(self.root)
        info = fence.holder_info() or {}
        here = info.get("pid") == os.getpid()
        held = here or fence.is_held_elsewhere()
        return {"held": held, "thisProcess": here, "pid": info.get("pid"), "startedAt": info.get("started_at")}

    def _configured_embedding(self) -> dict | None:
        embeddings = self.config.memory.embeddings
        if embeddings is None or self.mode == "lite":
            return None
        return {"provider": embeddings.provider, "model": embeddings.model, "dim": embeddings.dim}

    def _vector_count(self, folder: Path) -> int | None:
        """The vector meta's count, re-read only when the meta file changed (it names every label)."""

        from memvault.indexer.search.vectors import META_FILE

        try:
            info = os.stat(folder / META_FILE)
        except OSError:
            return None
        stamp = (info.st_ino, info.st_mtime_ns)
        cached = self._meta_cache.get(folder)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            count = json.loads((folder / META_FILE).read_bytes()).get("count")
        except (OSError, ValueError, AttributeError):
            count = None
        count = count if type(count) is int else None
        self._meta_cache = {folder: (stamp, count)}
        return count

    def _index_or_none(self):
        from memvault.indexer.maintenance.index_engines import index_for_reader  # tantivy: only pages that count rows

        try:
            return index_for_reader(self.store)
        except (VaultError, OSError, ValueError):
            return None


def _existing_note(root: Path, relpath: str) -> str:
    """`relpath` if it is a note that exists; else the same day's note under its other name
    (flat or `YYYY/MM/`), so a link by date (a wikilink, an old bookmark) finds the note where
    the vault keeps it. The layout (vault/layout.py) says what a note's name is."""
    parsed = parse_note_relpath(relpath)
    if parsed is None:
        raise InvalidRecord(f"{relpath!r} is not a note: notes are {DAILY}/YYYY-MM-DD.md, "
                            f"{DAILY}/YYYY/MM/YYYY-MM-DD.md or the same under {AUDIT}/")  # fmt: skip
    if os.path.lexists(root / relpath):
        return relpath
    return next((c for c in note_relpath_candidates(*parsed) if os.path.lexists(root / c)), relpath)


class NotFound(VaultError):
    """A page names a note, document or entity the vault does not hold."""

    code = "not_found"


def _parse_ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


class _HealthJson:
    """A health report the store already turned into JSON."""

    def __init__(self, report: dict):
        self._report = report

    def to_json(self) -> dict:
        return self._report


def _folder_bytes(folder: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(folder):
        for name in files:
            total += _size(Path(base) / name)
    return total
