"""`ConnectedStore`: what `MemoryStore.connect(name)` returns on a machine that holds no files.

It has the store's everyday API (recall/search, journal, persist_completed_turn, remember,
intake_snapshot, health_report) over the index server alone (docs/team.md):

* recall runs the same pipeline as the owner (the server's lexical and vector candidates, question
  coverage, weighted fusion, the modes), with facts remembered from any machine and not yet in
  the rows searched beside them (the owner's near-real-time overlay, `overlay.py`);
* a completed turn is prepared by local admission's own checks and admitted by one statement on
  the server's permanent run ledger behind the spec's fingerprint LRU (`indexer/team/ledger.py`);
  the vault's owner drains it into its files;
* a remembered fact is acknowledged by one statement on the server, with the id a local
  remember gives it (`vault.ids.memory_id`), recallable from every machine at once;
* of a BuJo vault, recall excludes superseded memories and MemoryJournal reports their state as
  on the owner, from the serving generation's replay projection on the server (its digest comes
  with the serving pointer). One-hop graph expansion does not run here: graph.jsonl stays with
  the files, and an explicit recall says so in `degraded` (NO_GRAPH_EXPANSION).

The DSN is passed in by the entry point (MEMVAULT_INDEX_DSN, or libpq's own files): this module
never reads the environment. Messages never carry the DSN's password (backend/postgres/connection.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from memvault.indexer.backend import check_read_replica, check_server, open_backend, open_team_server, server_label
from memvault.indexer.engine.overlay import PendingRow, overlay_of, pending_record
from memvault.indexer.maintenance.server_index import ServerIndex, ServerVectors
from memvault.indexer.results import RecallResult, RememberReceipt
from memvault.indexer.search.recall import recall_auto, recall_tool, routed_away
from memvault.indexer.search.recall_request import check_recall_request
from memvault.indexer.search.supersession import kept_lifecycle
from memvault.vault.clock import local_day_and_time, utc_now, zone
from memvault.vault.config import IndexConfig, server_bounds
from memvault.vault.errors import IndexUnavailable, InvalidRecord, VaultError
from memvault.vault.ids import content_hash, memory_id
from memvault.vault.layout import DAILY, VaultLayout, note_relpath_candidates

if TYPE_CHECKING:
    from memvault.vault.intake.admission import AdmissionResult

#: a connected store has no vault folder: only rows on the server are read, never files
_NO_FOLDER = Path("/nonexistent-memvault-vault")
#: how often `admit --wait` asks the server whether the owner has projected the turn
_WAIT_POLL_SECONDS = 0.05
#: what an explicit recall of a BuJo vault from here leaves out (docs/team.md)
NO_GRAPH_EXPANSION = (
    "no graph expansion from a connected client: graph.jsonl stays with the vault's files, so "
    "explicit recall here returns direct hits only (superseded memories excluded as on the owner); "
    "the owner's recall (`memvault search` on its machine) adds the one-hop graph neighbours"
)


class ConnectedStore:
    """One vault on the index server, reached by its name (see the module docstring)."""

    def __init__(self, name: str, dsn: str = "", *, clock=utc_now, env: Mapping[str, str] | None = None):
        self.name = name
        self.dsn = dsn
        self.env = dict(env or {})
        self._clock = clock
        #: the server's bounds come from the environment here: a connected client has no vault config
        self.index = IndexConfig.server(name, dsn, like=server_bounds(self.env))
        self.server = open_team_server(dsn, name, index=self.index)  # connects on first use
        self._admission = None
        self._admission_lock = threading.Lock()
        self._backend = None
        self._settings: dict | None = None
        self._journal = None
        self._embedders: dict = {}
        self._last_index: ServerIndex | None = None

    @classmethod
    def connect(cls, name: str, dsn: str | None = None, *, env: Mapping[str, str] | None = None) -> ConnectedStore:
        """`dsn` defaults to `env["MEMVAULT_INDEX_DSN"]` (the entry point passes its environment),
        else "" (libpq's defaults, PGSERVICE, ~/.pg_service.conf, ~/.pgpass)."""
        env = dict(env or {})
        if dsn is None:
            dsn = env.get("MEMVAULT_INDEX_DSN", "")
        store = cls(name, dsn, env=env)
        store.server.ping()  # a clear error naming the host now, not at the first call
        return store

    def close(self) -> None:
        self.server.close()
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def __enter__(self) -> ConnectedStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the vault's settings (registered by its owner) ---------------------------------------

    @property
    def backend(self):
        if self._backend is None:
            self._backend = open_backend(self.index, create=False)
        return self._backend

    def settings(self) -> dict:
        """{"writeMode", "tier", "timeZone"} of the vault, as its owner registered them, else as the
        last build of its index recorded them (a vault whose owner never started here)."""
        if self._settings is None:
            settings = self.server.vault_settings()  # its owner's, else those its last build recorded
            if settings is None:
                raise IndexUnavailable(f"vault {self.name!r} has no owner registered on the index server and no "
                                       "build of its index recorded its settings (or this role may not read it): "
                                       "run `memvault rebuild` (or start its owner, `memvault serve`) once on its "
                                       f"home machine, or ask the server's admin to GRANT memvault_write_{self.name} "
                                       "TO your role")  # fmt: skip
            self._settings = settings
        return self._settings

    def forget_settings(self) -> None:
        """Read the vault's settings again at the next call (a long-lived store: its owner may have
        registered another zone or tier since)."""
        self._settings = None

    @property
    def time_zone(self) -> str:
        return self.settings()["timeZone"]

    # --- writes ---------------------------------------------------------------------------------

    def persist_completed_turn(
        self,
        run_id: str,
        answer: str,
        *,
        capture_text: str | None = None,
        trigger: str = "user",
        completed_at: datetime | None = None,
    ) -> AdmissionResult:
        """As MemoryStore.persist_completed_turn: never raises for expected failures."""
        # admission and the run ledger load here, never for a search (the remote search's start-up)
        from memvault.vault.intake.admission import FAILED, AdmissionResult, prepare_turn

        try:
            settings = self.settings()
        except VaultError as exc:
            return AdmissionResult(FAILED, None, getattr(exc, "code", "vault_error"), f"the turn was NOT saved: {exc}")
        record, answered = prepare_turn(run_id=run_id, answer=answer, capture_text=capture_text, trigger=trigger,
                                        completed_at=completed_at, write_mode=settings["writeMode"],
                                        tier=settings["tier"], now=self._clock())  # fmt: skip
        if answered is not None:
            return answered
        return self.admission.admit(record)

    @property
    def admission(self):
        """The run ledger behind this store's fingerprint LRU (one per store: concurrent exact
        retries share one request)."""
        with self._admission_lock:
            if self._admission is None:
                from memvault.indexer.team.ledger import NetworkAdmission

                self._admission = NetworkAdmission(self.server)
            return self._admission

    def remember(self, text: str, at: datetime | None = None) -> RememberReceipt:
        """Acknowledge one fact on the server (recallable everywhere at once); the owner writes it
        into its daily note. Idempotent by content, like a local remember."""
        from memvault.vault.curated import prepare_fact  # its credential scan: a remember only

        fact = prepare_fact(text)
        if at is not None and (at.tzinfo is None or at.utcoffset() is None):
            raise InvalidRecord("at must be a timezone-aware instant")
        when = at if at is not None else self._clock()
        digest = content_hash(fact)
        existing = self._in_rows([digest])
        if digest in existing:
            row = existing[digest]
            return RememberReceipt(row.id, f"{row.path}#^{row.id}", "duplicate", row.text)
        day, _ = local_day_and_time(when, zone(self.time_zone))
        relpath = self._daily_relpath(day)
        inserted, block_id, path, stored = self.server.remember(digest, memory_id(fact), fact, when, relpath)
        return RememberReceipt(block_id, f"{path}#^{block_id}", "added" if inserted else "duplicate", stored)

    def _daily_relpath(self, day) -> str:
        """Where the owner writes `day`'s daily note, by its own rule (VaultLayout.note_relpath):
        the note the server's rows hold for that day (flat or nested), else nested when the
        owner's `daily/` keeps that year or the one before in a `YYYY/` folder, else flat."""
        flat, nested = note_relpath_candidates(DAILY, day)
        generation = self.backend.serving_generation()
        if generation is not None:
            held = {row.path for row in self.backend.journal_rows(generation, [flat, nested])}
            for relpath in (flat, nested):
                if relpath in held:
                    return relpath
        owner = self.server.owner()  # fresh: a person may have made daily/YYYY/ since
        years = set((owner or {}).get("settings", {}).get("nestedYears", ()))
        return nested if {day.year, day.year - 1} & years else flat

    def wait_projected(self, intake_id: str, timeout: float) -> bool:
        """Wait (bounded) until the vault's owner holds this admitted turn in its files; whether it does."""
        deadline = time.monotonic() + timeout
        while True:
            if self.server.projected(intake_id):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(_WAIT_POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    def remember_many(self, items, *, progress=None, total: int | None = None) -> list:
        """Remember each item (text, {"text", "at"} or RememberItem), one statement each; a refused
        item is reported and nothing is sent for it. One BulkOutcome per item, in order."""
        from memvault.indexer.engine.bulk import BulkOutcome, as_item  # bulk remember only

        outcomes = []
        for position, value in enumerate(items):
            try:
                item = as_item(value)
                outcomes.append(BulkOutcome(position, self.remember(item.text, at=item.at)))
            except (InvalidRecord, VaultError) as exc:
                outcomes.append(BulkOutcome(position, None, exc))
            if progress is not None:
                progress(len(outcomes), total if total is not None else len(outcomes))
        return outcomes

    def _in_rows(self, hashes: list[str]) -> dict:
        """content hash → a serving row holding it (none before the vault's first build)."""
        generation = self.backend.serving_generation()
        if generation is None:
            return {}
        return {row.content_hash: row for row in self.backend.rows_by_content_hash(generation, hashes)}

    # --- reads ----------------------------------------------------------------------------------

    def recall(self, query: str, limit: int = 10, mode: str = "tool") -> RecallResult:
        check_recall_request(query, limit, mode)
        routed = routed_away(query, mode, None)
        if routed is not None:
            return routed
        try:
            tz = zone(self.time_zone)
            index, vectors = self._serving()
        except IndexUnavailable as exc:
            return RecallResult(query, mode, (), degraded=str(exc))
        bm25 = overlay_of(index.bm25, self._waiting_rows())  # the rows carry their replay projection
        today = self._clock().astimezone(tz).date()
        if mode == "auto":
            result = recall_auto(bm25, vectors, query, today=today)
        else:
            result = recall_tool(bm25, vectors, query, limit, today=today)
            if self.settings().get("tier") == "bujo":  # superseded memories are excluded as on the owner
                said = "; ".join(filter(None, [result.degraded, NO_GRAPH_EXPANSION]))
                result = dataclasses.replace(result, degraded=said)
        replica = getattr(self.backend, "read_degraded", None)  # the read replica failed: the primary answered
        if replica is not None:
            result = dataclasses.replace(result, degraded="; ".join(filter(None, [result.degraded, replica])))
        return result.in_zone(tz)

    def search(self, query: str, limit: int = 10, mode: str = "tool") -> RecallResult:
        return self.recall(query, limit=limit, mode=mode)

    def _serving(self):
        number, replay = self.backend.serving_replay()  # and its replay projection's digest (BuJo)
        if number is None:
            raise IndexUnavailable(f"vault {self.name!r} has no index on the server yet: its owner builds it "
                                   "(`memvault rebuild` on its home machine)")  # fmt: skip
        embedding = self.backend.generation_embedding(number)
        embedder = None if embedding is None else self._embedder_for(embedding)
        index = ServerIndex(self.backend, number, VaultLayout(_NO_FOLDER), embedder, file_states=False)
        index.replay.seen(replay)
        self._last_index = index
        vectors = None
        if embedder is not None:
            vectors = ServerVectors(embedder)
            vectors.attach_serving(index)
        return index, vectors

    def supersession_state(self, entry_id: str) -> str:
        """MemoryJournal's state of a memory: "superseded" when the serving generation's replay
        projection (a BuJo vault's, on the server) retires it, else "valid". Read with the page's
        rows (`_journal_scan`): no round trip per entry while the projection is unchanged."""
        index = self._last_index if self._last_index is not None else self._serving()[0]
        return "superseded" if entry_id in kept_lifecycle(index.replay) else "valid"

    def _embedder_for(self, embedding: dict):
        key = (embedding["provider"], embedding["model"], int(embedding["dim"]))

        def embedder():
            if key not in self._embedders:
                from memvault.indexer.search.embeddings import make_provider

                self._embedders[key] = make_provider(*key, None)
            return self._embedders[key]

        return embedder

    def _waiting_rows(self) -> dict[str, PendingRow]:
        """Facts acknowledged on the server that the rows do not hold yet, as overlay rows."""
        waiting = self.server.waiting_facts()
        if not waiting:
            return {}
        held = self._in_rows([digest for digest, *_ in waiting])
        rows = {}
        for digest, block_id, fact, at, relpath, _projected in waiting:
            if digest in held:
                continue
            _, wall = local_day_and_time(at, zone(self.time_zone))
            record = pending_record(relpath, block_id, fact, wall, self.time_zone)
            if record is not None:
                row = PendingRow.of(record)
                rows[row.key] = row
        return rows

    def journal(self, *, from_date=None, through_date=None, time_zone=None, limit=None, cursor=None):
        """One MemoryJournal page, read from the server's rows (cursors live in this object)."""
        return self.journal_service().query({"fromDate": from_date, "throughDate": through_date, "timeZone": time_zone,
                                             "limit": limit, "cursor": cursor})  # fmt: skip

    def journal_service(self, *, persistent: bool = False):
        """`persistent` (the CLI, a process per call): snapshots and cursor key kept owner-only on
        this machine (`cursor_folder`), so a cursor one `memvault --remote NAME journal` printed
        works in the next call; else in this object."""
        from memvault.indexer.journal.cursor import snapshot_store_for  # its file locks: journal pages only
        from memvault.indexer.journal.query import JournalService

        if self._journal is None or (persistent and not self._journal.snapshots.persistent):
            snapshots = None
            if persistent:
                folder = self.cursor_folder()
                snapshots = snapshot_store_for(folder, True) if folder is not None else None
            self._journal = JournalService(
                self._journal_scan, snapshots=snapshots, supersession_state=self.supersession_state
            )
        return self._journal

    def cursor_folder(self) -> Path | None:
        """This user's folder for the vault's journal cursors on this machine (0700), one per
        server and vault name: $XDG_STATE_HOME/memvault/remote/NAME-HASH (else ~/.local/state/…);
        None when it cannot be made (the cursors then live in this process only)."""
        base = self.env.get("XDG_STATE_HOME") or (
            os.path.join(self.env["HOME"], ".local", "state") if self.env.get("HOME") else None
        )
        if not base:
            return None
        server = hashlib.sha256(server_label(self.dsn).encode()).hexdigest()[:12]
        folder = Path(base) / "memvault" / "remote" / f"{self.name}-{server}"
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            folder.chmod(0o700)
        except OSError:
            return None
        return folder

    def _journal_scan(self, relpaths: list[str]):
        from memvault.indexer.journal.query import JournalScan

        index, _ = self._serving()
        rows = [row for path in relpaths for row in index.rows_of(path).values()]
        return JournalScan(rows, [])

    # --- inspection -----------------------------------------------------------------------------

    def intake_snapshot(self) -> dict:
        """Content-free counts of what waits on the server for the vault's owner, and who that is."""
        owner = self.server.owner()
        return {"vault": self.name, "remote": self.server.counts(),
                "owner": None if owner is None else {key: owner[key] for key in ("host", "pid", "startedAt")},
                "ownerRunning": self.server.owner_alive()}  # fmt: skip

    def health_report(self, *, strict: bool = False) -> dict:
        """`memvault health` for a vault reached by name: the server, its index, the owner, the backlog."""
        findings = [_finding("error", "server", problem, "see docs/team.md") for problem in check_server(self.index)]
        replica = [_finding("warning", "server", problem, "see docs/team.md, Reads from a standby")
                   for problem in check_read_replica(self.index)]  # fmt: skip
        details: dict = {}
        if not findings:
            try:
                snapshot = self.intake_snapshot()
                details = {"team": snapshot}
                if self.backend.serving_generation() is None:
                    findings.append(_finding("error", "index", f"vault {self.name!r} has no index on the server yet",
                                             "run `memvault rebuild` on its home machine"))  # fmt: skip
                if not snapshot["ownerRunning"]:
                    waiting = snapshot["remote"]["turnsWaiting"] + snapshot["remote"]["factsWaiting"]
                    findings.append(_finding("warning", "owner", f"no owner runs for vault {self.name!r}: {waiting} "
                                             "turn(s)/fact(s) wait on the server",
                                             "start `memvault serve` on the vault's home machine"))  # fmt: skip
            except VaultError as exc:
                findings.append(_finding("error", "server", str(exc), "see docs/team.md"))
        findings += replica
        errors = [f for f in findings if f["severity"] == "error"]
        warnings = [f for f in findings if f["severity"] == "warning"]
        return {"healthy": not errors and not (strict and warnings), "strict": strict,
                "checks": ["server", "index", "owner"], "errors": len(errors), "warnings": len(warnings),
                "findings": findings, "fixes": list(dict.fromkeys(f["fix"] for f in errors + warnings)),
                "details": details}  # fmt: skip


def _finding(severity: str, check: str, message: str, fix: str) -> dict:
    """A finding in health's own shape (indexer/maintenance/health.py's Finding)."""
    return {
        "check": check,
        "severity": severity,
        "code": f"team_{check}",
        "subject": check,
        "message": message,
        "fix": fix,
    }
