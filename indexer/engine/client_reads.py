"""Recall in a client's own process: the owner hands over what only it knows, the client searches.

Through the owner, every search cost the owner 2-5 ms of its one interpreter lock (fusion,
coverage, the floor, the answer's JSON), and with many agents at once the owner's lock, not the
search, set every search's pace. A long-lived client of an owner (`RemoteStore`, from its second
recall on: a one-shot command never opens the index) now asks the owner for a *read view* and
ranks in its own process, on its own core:

* the owner answers (`read_view`) with the serving generation's name, its pending rows (the
  acknowledged memories not in the committed index yet: indexer/engine/overlay.py), the query's
  vector hits from the vectors it holds in memory (the newest are saved to disk only every few
  seconds), the vault's date and tier, and why its answers are degraded, if they are;
* the client reads the committed index itself (Tantivy allows readers in other processes) and
  refreshes its reader *after* the answer, so it sees at least every commit that took rows out of
  the pending set the owner sent: every acknowledged write is found, whichever client wrote it;
* the pending rows travel once: the owner sends the rows added after the version the client
  already holds (`since`, within the owner's `epoch`) and the keys of every row still pending;
* which memories this client found is told to the owner with its next request (`found`: the
  access log is the owner's to write).

The answer equals the owner's own: the same function ranks it (`answer_recall`) over the same
rows and the same vector hits. Anything that keeps a client from reading here (an owner without
`read_view`, a vault indexed on a server, a configured reranker, whose model the owner calls
with its own credentials, a generation swapped away by a rebuild) sends that recall through
the owner, as before.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from datetime import date, datetime
from pathlib import Path

from memvault.indexer.engine.conflict_marks import conflicted_in, mark_conflicts
from memvault.indexer.engine.overlay import PendingRow, overlay_of
from memvault.indexer.engine.protocol import ProtocolError
from memvault.indexer.results import RecallResult
from memvault.indexer.search.hybrid import CANDIDATE_DEPTH
from memvault.indexer.search.recall_request import check_recall_request
from memvault.vault.clock import zone
from memvault.vault.errors import IndexUnavailable, InvalidRecord, VaultError
from memvault.vault.records import MemoryRecord

#: the found memories a client may report with one request (more are dropped: telemetry only)
MAX_FOUND = 1000
#: the longest source a client may report
MAX_SOURCE_CHARS = 1024


class ReadsThroughOwner(VaultError):
    """This recall cannot be answered in the client: ask the owner. `lasting`: nor any later one
    (an owner without read views, a vault indexed on a server)."""

    def __init__(self, message: str, *, lasting: bool = False):
        super().__init__(message)
        self.lasting = lasting


# --- the owner's side ---------------------------------------------------------------------------


def read_view(store, args: dict) -> dict:
    """What a client needs to answer `query` in its own process (see the module's docstring)."""
    query, since, epoch = _view_args(args)
    index = store.serving_index()
    if not store.index_files_on_this_machine:
        return {"reads": "owner"}  # a vault indexed on a server: its owner answers recalls
    if store.config.memory.rerank is not None:
        return {"reads": "owner"}  # the second stage calls a model with the owner's credentials
    record_found(store, args)
    deferred = store._deferred
    rows = deferred.rows  # one snapshot: the set replaces its dict whole, never edits it
    resend = epoch != deferred.epoch
    semantic = store._semantic
    return {
        "reads": "client",
        "generation": index.generation.name,
        "epoch": deferred.epoch,
        "keys": list(rows),
        "rows": [row_to_wire(row) for row in rows.values() if resend or row.version > since],
        "vectors": None if semantic is None else _hits_to_wire(semantic.search(query, CANDIDATE_DEPTH)),
        "extra": None if semantic is None else _hits_to_wire(semantic.search_extra(query, CANDIDATE_DEPTH)),
        "today": store._clock().astimezone(zone(store.time_zone)).date().isoformat(),
        "tier": store.config.memory.mode,
        "time_zone": store.time_zone,
        "behind": store.unsynced or deferred.problem,
        "conflicted": sorted(conflicted_in(index.manifest.files)),
    }


def record_found(store, args: dict) -> dict:
    """The memories a client's recalls found (`found`: their sources), into the owner's access log."""
    found = args.get("found", [])
    if not isinstance(found, list) or len(found) > MAX_FOUND:
        raise InvalidRecord(f"found must be a list of at most {MAX_FOUND} sources")
    if not all(isinstance(source, str) and len(source) <= MAX_SOURCE_CHARS for source in found):
        raise InvalidRecord(f"each found source must be text of at most {MAX_SOURCE_CHARS} characters")
    if found:
        store.access_log.record(found, store._clock())
    return {"recorded": len(found)}


def _view_args(args: dict) -> tuple[str, int, str | None]:
    query, since, epoch = args.get("query"), args.get("since", -1), args.get("epoch")
    if not isinstance(query, str):
        raise InvalidRecord(f"read_view: query must be text, not {type(query).__name__}")
    if not isinstance(since, int) or isinstance(since, bool) or since < -1:
        raise InvalidRecord(f"read_view: since must be an integer of -1 or more (got {str(since)[:40]!r})")
    if epoch is not None and not isinstance(epoch, str):
        raise InvalidRecord("read_view: epoch must be text or null")
    return query, since, epoch


def _hits_to_wire(found: tuple) -> dict:
    hits, degraded = found
    return {"hits": None if hits is None else [[key, float(score)] for key, score in hits], "degraded": degraded}


def row_to_wire(row: PendingRow) -> dict:
    record = row.record
    return {"version": row.version, "id": record.id, "path": record.path, "kind": record.kind,
            "day": record.day.isoformat(), "at": record.at.isoformat(), "text": record.text,
            "content_hash": record.content_hash, "heading": record.heading,
            "explicit_id": record.explicit_id, "neighbours": list(record.neighbours)}  # fmt: skip


def row_from_wire(body: dict) -> PendingRow:
    try:
        record = MemoryRecord(id=body["id"], path=body["path"], kind=body["kind"], day=date.fromisoformat(body["day"]),
                              at=datetime.fromisoformat(body["at"]), text=body["text"],
                              content_hash=body["content_hash"], heading=body["heading"],
                              explicit_id=body["explicit_id"], neighbours=tuple(body["neighbours"]))  # fmt: skip
        return PendingRow.of(record, body["version"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ReadsThroughOwner(f"the owner's pending row could not be read ({exc})") from None


# --- the client's side --------------------------------------------------------------------------


class ClientReads:
    """A client's recall, answered here over the owner's read view (one per RemoteStore)."""

    def __init__(self, layout, config, client):
        self.layout = layout
        self.config = config
        self.client = client
        #: every view update and index swap happens under it; searches run outside it
        self._lock = threading.Lock()
        self._epoch: str | None = None
        self._since = -1
        self._rows: dict[str, PendingRow] = {}
        self._bm25 = None  # (generation name, Bm25Index)
        self._found: list[str] = []  # told to the owner with the next request
        self._pid = os.getpid()  # a forked child starts its own reader (Tantivy's threads stay behind)
        #: recalls answered here (the tests read it)
        self.answered = 0

    def recall(self, query: str, limit: int, mode: str) -> RecallResult:
        """Answered here, or ReadsThroughOwner (the caller asks the owner)."""
        from memvault.indexer.search.recall import answer_recall, routed_away

        check_recall_request(query, limit, mode)
        run_history = self.config.tools.host_tools.run_history
        routed = routed_away(query, mode, run_history)
        if routed is not None:
            return routed
        view = self._view(query)
        bm25, rows = self._take(view)
        vectors = None if view["vectors"] is None else OwnerVectors(query, view["vectors"], view["extra"])
        try:
            today = date.fromisoformat(view["today"])
            tz = zone(view["time_zone"])
            result = answer_recall(
                overlay_of(bm25, rows),
                vectors,
                query,
                limit,
                mode,
                tier=view["tier"],
                root=self.layout.root,
                run_history=run_history,
                today=today,
            )
        except (KeyError, TypeError, ValueError, IndexUnavailable) as exc:
            raise ReadsThroughOwner(f"this recall could not be answered here ({exc})") from None
        with self._lock:
            self._found.extend(hit.source.replace("#^", "#", 1) for hit in result.hits)
            del self._found[:-MAX_FOUND]
            self.answered += 1
        result = mark_conflicts(result, self.layout, frozenset(view.get("conflicted") or ()))
        if view["behind"] and not result.degraded:
            result = dataclasses.replace(result, degraded=view["behind"])
        return result.in_zone(tz)

    def _view(self, query: str) -> dict:
        with self._lock:
            if self._pid != os.getpid():
                self._pid, self._bm25, self._found = os.getpid(), None, []
            found, self._found = self._found, []
            since, epoch = self._since, self._epoch
        try:
            view = self.client.call("read_view", {"query": query, "since": since, "epoch": epoch, "found": found})
        except ProtocolError as exc:
            if "has no operation" in str(exc):  # an owner older than read views
                raise ReadsThroughOwner("this owner answers every recall itself", lasting=True) from None
            raise
        except IndexUnavailable as exc:  # the owner says why in a recall's answer (`degraded`)
            raise ReadsThroughOwner(str(exc)) from None
        if not isinstance(view, dict) or view.get("reads") != "client":
            raise ReadsThroughOwner("this owner answers every recall itself", lasting=True)
        return view

    def _take(self, view: dict):
        """The committed index (refreshed now: after the owner's answer) and the pending rows."""
        from memvault.indexer.search.bm25 import Bm25Index

        with self._lock:
            try:
                generation, epoch, keys, fresh = view["generation"], view["epoch"], view["keys"], view["rows"]
                named = isinstance(generation, str) and generation not in ("", ".", "..")
                if not named or Path(generation).name != generation:
                    raise ReadsThroughOwner(f"the owner named an index generation {str(generation)[:60]!r}")
                known = self._rows if epoch == self._epoch else {}
                added = {row.key: row for row in map(row_from_wire, fresh)}
                rows = {key: added.get(key) or known.get(key) for key in keys}
            except (KeyError, TypeError) as exc:
                raise ReadsThroughOwner(f"the owner's read view could not be read ({exc})") from None
            if any(row is None for row in rows.values()):
                self._epoch, self._since = None, -1  # out of step: the next view resends every row
                raise ReadsThroughOwner("a pending row was missing from the owner's read view")
            if rows.keys() == self._rows.keys() and not added:
                rows = self._rows  # unchanged: the same dict, so its postings are reused (overlay.py)
            # the version held is the newest row kept: a view answered before another thread's
            # newer one may arrive after it, and then the rows only the newer one held are asked
            # for again (rows are added in version order, so none older than that can be missing)
            self._rows, self._epoch = rows, epoch
            self._since = max((row.version for row in rows.values()), default=-1)
            if self._bm25 is None or self._bm25[0] != generation:
                try:
                    self._bm25 = (generation, Bm25Index(self.layout.index_dir / generation / "bm25"))
                except IndexUnavailable as exc:  # swapped away by a rebuild since the owner answered
                    raise ReadsThroughOwner(str(exc)) from None
            bm25 = self._bm25[1]
        try:
            bm25.refresh()
        except (ValueError, OSError) as exc:  # a segment merged away between meta.json and its files
            raise ReadsThroughOwner(f"the index could not be reloaded here ({exc})") from None
        return bm25, rows

    def flush(self) -> None:
        """Tell the owner what was found since the last request (closing)."""
        with self._lock:
            found, self._found = self._found, []
        if found:
            try:
                self.client.tell("found", {"found": found})
            except VaultError:
                pass  # telemetry: a lost count is acceptable


class OwnerVectors:
    """The vector hits the owner found for this query, in the shape recall asks a SemanticService
    for (`search`, `search_extra`)."""

    searches_beside_bm25 = False

    def __init__(self, query: str, first: dict, extra: dict | None):
        self.query = query
        self._first = first
        self._extra = extra

    def search(self, query: str, depth: int):
        return self._hits(self._first, query, depth)

    def search_extra(self, query: str, depth: int):
        return (None, None) if self._extra is None else self._hits(self._extra, query, depth)

    def _hits(self, body: dict, query: str, depth: int):
        if query != self.query or depth != CANDIDATE_DEPTH:
            return None, f"vector hits were fetched for another question (depth {CANDIDATE_DEPTH})"
        hits = body.get("hits")
        return (None if hits is None else [(key, score) for key, score in hits]), body.get("degraded")
