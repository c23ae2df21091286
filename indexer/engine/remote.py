"""`RemoteStore`: what `MemoryStore.open` returns while another process owns the vault.

It has the engine's everyday API (remember, recall/search, persist_completed_turn, journal,
health, sync) and hands each call to the owner over the channel; results come back as the same
objects (rebuilt from the same JSON the owner's objects produce) and errors as the same
`VaultError` classes. Light: standard library, vault/ and `indexer/results.py` only, until
its second recall, which opens the index here to rank in this process (client_reads.py).

It never writes notes or the index itself: owner-only work (start_intake, compact) is refused
with the owner named, so there is never a second writer beside a live owner. The one write it
makes is an admission (`persist_completed_turn`): the intake's locked, fsynced record write,
which any process may make beside the owner. A completed turn is durable when this returns,
whether or not the owner answers (stuck, dying, busy); the owner is then asked to project it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from memvault.indexer.engine.client import EngineClient
from memvault.indexer.engine.protocol import EngineRunning, error_from_wire
from memvault.indexer.results import RebuildReport, RecallHit, RecallResult, RememberReceipt
from memvault.vault.clock import aware_instant, utc_now
from memvault.vault.errors import InvalidRecord, VaultError
from memvault.vault.layout import VaultLayout
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS

#: how long a client waits for the owner to take note of a turn it admitted itself
HAND_OVER_SECONDS = 5.0
#: how long `admit --wait` waits for the projection (as the in-process drain)
ADMIT_WAIT_SECONDS = SHUTDOWN_DRAIN_SECONDS


class RemoteStore:
    def __init__(self, root: Path, client: EngineClient, env: Mapping[str, str] | None = None):
        self.layout = VaultLayout(Path(root))
        self.client = client
        self.env = dict(env or {})
        self._config = None

    # --- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        if self._reads:
            self._reads.flush()  # what this process's recalls found, for the owner's access log
        self.client.close()  # the connections kept for the next call

    def __enter__(self) -> RemoteStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def config(self):
        if self._config is None:
            from memvault.vault.config import load_config

            self._config = load_config(self.layout.root, self.env)
        return self._config

    @property
    def time_zone(self) -> str:
        return self.config.memory.time_zone

    def serving_index(self):
        """None: a client of the owner keeps no index of its own."""
        return None

    # --- calls -----------------------------------------------------------------------------------

    def remember(self, text: str, at: datetime | None = None) -> RememberReceipt:
        body = self.client.call("remember", {"text": text, "at": None if at is None else _iso(at)})
        return RememberReceipt(**body)

    def remember_many(self, items, *, progress=None, total: int | None = None) -> list:
        """Through the owner, 2,048 items per request (at most 4 KiB each: far below the 16 MiB
        message limit); each request is one batch there."""
        from memvault.indexer.engine.bulk import BulkOutcome, as_item, chunks

        outcomes = []
        for batch in chunks(items, 2048):
            wire, refused = [], {}  # refused here: position in the batch -> the error (nothing sent)
            for position, value in enumerate(batch):
                try:
                    item = as_item(value)
                    wire.append({"text": item.text, "at": None if item.at is None else _iso(item.at)})
                except InvalidRecord as exc:
                    refused[position] = exc
            answers = iter(self.client.call("remember_many", {"items": wire})["results"] if wire else ())
            for position in range(len(batch)):
                index = len(outcomes)
                if position in refused:
                    outcomes.append(BulkOutcome(index, None, refused[position]))
                    continue
                row = next(answers)
                if row["status"] == "refused":
                    outcomes.append(BulkOutcome(index, None, error_from_wire(row["error"])))
                else:
                    fields = {k: row[k] for k in ("id", "source", "status", "text")}
                    outcomes.append(BulkOutcome(index, RememberReceipt(**fields)))
            if progress is not None:
                progress(len(outcomes), total if total is not None else len(outcomes))
        return outcomes

    def recall(self, query: str, limit: int = 10, mode: str = "tool") -> RecallResult:
        """Ranked in this process from the second recall on (indexer/engine/client_reads.py): the
        owner hands over what only it holds, and its lock is not every search's pace. The first
        recall, and any the owner must answer itself, go through the owner."""
        reads = self._reads_here()
        if reads is not None:
            from memvault.indexer.engine.client_reads import ReadsThroughOwner

            try:
                return reads.recall(query, limit, mode)
            except ReadsThroughOwner as exc:
                if exc.lasting:
                    self._reads = False
        self._recalls += 1
        return recall_result_from_json(self.client.call("recall", {"query": query, "limit": limit, "mode": mode}))

    _recalls = 0
    #: ClientReads once made; False when this owner answers every recall itself
    _reads = None

    def _reads_here(self):
        if self._reads is None and self._recalls:
            from memvault.indexer.engine.client_reads import ClientReads

            self._reads = ClientReads(self.layout, self.config, self.client)
        return self._reads or None

    def search(self, query: str, limit: int = 10, mode: str = "tool") -> RecallResult:
        return self.recall(query, limit=limit, mode=mode)

    def persist_completed_turn(
        self,
        run_id: str,
        answer: str,
        *,
        capture_text: str | None = None,
        trigger: str = "user",
        completed_at: datetime | None = None,
    ):
        """Admit durably here (returns once the intake record is fsynced); the owner projects it."""
        return self.admit_turn(run_id, answer, capture_text=capture_text, trigger=trigger, completed_at=completed_at)[0]

    def admit_turn(
        self,
        run_id: str,
        answer: str,
        *,
        capture_text: str | None = None,
        trigger: str = "user",
        completed_at: datetime | None = None,
        wait: bool = False,
    ):
        """(AdmissionResult, what the owner's worker did with it) — the CLI shows both.

        The admission is this process's own durable write (`admit_here`); the owner is only told
        (and, with `wait`, asked to answer once the worker has handled the turn, at most 10 s).
        An owner that does not answer changes the second half only: the turn is saved either way."""
        result = admit_here(self.layout.root, self.config, run_id=run_id, answer=answer, capture_text=capture_text,
                            trigger=trigger, completed_at=completed_at)  # fmt: skip
        if result.status != "admitted":
            return result, "drained" if result.ok else None
        return result, self._hand_over(result.id, wait)

    def _hand_over(self, intake_id: str, wait: bool) -> str:

        try:
            if not wait:  # told, not asked: the turn is durable, and a busy owner never holds this up
                self.client.tell("admitted", {"id": intake_id})
                return f"queued: the engine (pid {self.client.pid}) projects it"
            self.client.call("admitted", {"id": intake_id}, timeout=HAND_OVER_SECONDS)
            settled = self.client.call("wait", {"id": intake_id}, timeout=HAND_OVER_SECONDS + ADMIT_WAIT_SECONDS)
        except VaultError as exc:  # stuck, gone, or an owner without these operations
            return owner_not_answering(exc)
        if settled.get("settled"):
            return "drained"
        return "the engine is still working on it; the turn stays pending"

    def journal(self, *, from_date=None, through_date=None, time_zone=None, limit=None, cursor=None):
        arguments = {"fromDate": from_date, "throughDate": through_date, "timeZone": time_zone,
                     "limit": limit, "cursor": cursor}  # fmt: skip
        return self.journal_service().query(arguments)

    def journal_service(self, *, persistent: bool = False) -> RemoteJournal:
        return RemoteJournal(self.client, persistent)

    def health_report(self, *, strict: bool = False) -> dict:
        return self.client.call("health", {"strict": strict})

    def sync(self, paths=None, **_ignored):
        """The owner keeps its index current; asking it to look now costs one request."""
        return self.client.call("sync", {})

    # --- owner-only work ---------------------------------------------------------------------------

    def _owned_elsewhere(self, what: str):
        raise EngineRunning(
            f"{what} is the owner's work, and the engine (pid {self.client.pid}) owns this vault. "
            "Fix: let it do it, or stop it first with `memvault engine stop`."
        )

    def start_intake(self, **_ignored):
        self._owned_elsewhere("draining the intake")

    def stop(self, timeout: float = SHUTDOWN_DRAIN_SECONDS):
        return None

    def rebuild(self, progress=None, *, hook=None):
        """The owner rebuilds (it holds the serving generation); progress is not streamed."""

        body = self.client.call("rebuild", {})
        return RebuildReport(
            **{**body, "problems": tuple(body.get("problems") or ()), "phases": tuple(body.get("phases") or ())}
        )

    def compact(self, *_args, **_kwargs):
        self._owned_elsewhere("compaction")


class RemoteJournal:
    """The journal service's `query` through the owner (its snapshots and cursors live there)."""

    def __init__(self, client: EngineClient, persistent: bool):
        self._client = client
        self._persistent = persistent
        self.snapshots = _Kept(persistent)

    def query(self, arguments: Mapping[str, object]) -> JournalPageView:
        body = self._client.call("journal", {"arguments": dict(arguments), "persistent": self._persistent})
        self.snapshots = _Kept(bool(body.get("kept")))
        return JournalPageView(body["page"])


class _Kept:
    def __init__(self, persistent: bool):
        self.persistent = persistent


class JournalPageView:
    """A journal page as the owner sent it, with the attributes the CLI reads from a JournalPage."""

    def __init__(self, body: dict):
        self._body = body
        self.range, self.page, self.cursor = body["range"], body["page"], body["cursor"]
        self.coverage, self.entries = body["coverage"], tuple(body["entries"])
        self.no_data = bool(body["noData"])

    def to_json(self) -> dict:
        return dict(self._body)


def recall_result_from_json(body: dict) -> RecallResult:
    hits = tuple(
        RecallHit(
            hit["id"],
            hit["text"],
            hit["source"],
            hit["score"],
            datetime.fromisoformat(hit["at"]),
            explain=hit.get("explain") or {},
            sources=_copies(hit.get("sources")),
            conflict=hit.get("conflict") is True,
        )
        for hit in body["hits"]
    )
    return RecallResult(
        body["query"],
        body["mode"],
        hits,
        degraded=body.get("degraded"),
        guidance=body.get("guidance"),
        gate=body.get("gate"),
        empty_reason=body.get("empty_reason"),
        explain=body.get("explain"),
    )


def _copies(sources) -> tuple[str, ...]:
    """A hit's `sources` as the owner's RecallHit held them: every copy when there are several."""
    return tuple(sources) if isinstance(sources, list) and len(sources) > 1 else ()


def admit_here(root: Path, config, **turn):
    """Admit one completed turn durably in this process (vault/intake/admission.py): the intake's
    own lock and an fsynced record, safe beside a live, stuck or dead owner. An AdmissionResult."""
    from memvault.vault.intake.admission import admit_turn
    from memvault.vault.intake.files import IntakeDirs

    return admit_turn(
        IntakeDirs(root), **turn, write_mode=config.memory.write_mode, tier=config.memory.mode, now=utc_now()
    )


def owner_not_answering(exc: BaseException) -> str:
    """The `worker` field of an admission the owner could not be told about."""
    return (
        f"queued: the turn is saved, and the engine did not answer ({exc}); it is projected when the "
        "engine answers again or the next owner starts"
    )


def _iso(when: datetime) -> str:
    return aware_instant(when).isoformat()
