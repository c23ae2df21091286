"""BuJo capture wired to the store: the chat model, candidate lookup, commit, index and projection.

The intake worker calls `capture_record` for a record awaiting capture (after its raw audit
was projected). Under the per-vault capture lock (so captures never race each other, in this
process or another) it

1. reuses the run's retained plan if one exists (a replay: no model call); or, when the replay
   sidecar already holds the run's capture with the same authority digest (captured on another
   machine, pulled through git), projects the sidecar and is done (no model call either); or
   plans it now:
   one extraction call, candidate lookup in the serving index, at most one reconciliation
   call (`vault/capture/pipeline.py`), and makes the plan durable;
2. under the vault lock, commits the plan (facts, graph, sidecar), indexes the note, projects
   the sidecar into the serving generation and reads it back (`verify_projection`).

The worker then resolves the run (receipt + ledger) and retires the plan. A model outage,
timeout or invalid answer raises before anything canonical is written; the worker records the
failure (backoff, then dead letter) and keeps a content-free warning. The raw audit stays in
`audit/`, which curated recall never returns.

Close candidates. A new memory is offered to the reconciler with at most
`MAX_CANDIDATES` existing memories that retrieval (`memvault.indexer.search.recall.retrieve`, the same BM25 +
vector fusion recall uses, superseded memories already excluded) returns as *close*: a curated
row with an unambiguous id, fused evidence strength of at least `CLOSE_MIN_STRENGTH`, and
either a content-word overlap coefficient of at least `CLOSE_MIN_OVERLAP` with the new memory
or a vector cosine of at least `CLOSE_MIN_COSINE`. Strength alone is relative to the best
candidate, so it cannot tell "nothing similar exists" from "this is the same fact"; the overlap
and cosine anchor it. A memory with no close candidate is clearly novel and skips the second
call. A memory whose exact normalised text is already a current fact is a NOOP without any call.
When vector search is degraded (an embedding outage or timeout, vectors built for another
model) the lookup fails with ProviderUnavailable and the turn is retried: novelty is never
judged by half the evidence.
"""

from __future__ import annotations

import hashlib
import queue
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime

from memvault.indexer.maintenance.replay_index import capture_blocked_reason, verify_projection, write_projection
from memvault.indexer.search.bm25 import STOPWORDS
from memvault.indexer.search.supersession import superseded_ids
from memvault.indexer.services.chat import chat_model_from_config
from memvault.vault.capture.commit import commit_plan
from memvault.vault.capture.fields import EmptyExtraction, ModelOutputInvalid
from memvault.vault.capture.pipeline import plan_capture, turn_text
from memvault.vault.capture.plan import ADD_FACT, SUPERSEDE_FACT, UPDATE_FACT, SemanticPlan, read_plan, write_plan
from memvault.vault.capture.prompt import Candidate
from memvault.vault.capture.stats import CaptureRun, is_substantive, now_ts, record_run
from memvault.vault.credentials import refuse_credentials
from memvault.vault.errors import Conflict, IndexUnavailable, InvalidRecord, ProviderUnavailable, VaultError
from memvault.vault.ids import content_hash
from memvault.vault.intake.admission import host_summary, intake_id_for
from memvault.vault.intake.files import CrashHook, hit
from memvault.vault.intake.record import IntakeRecord, Payload
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS
from memvault.vault.locks import VaultLock
from memvault.vault.replay import ReplayState, capture_authority, read_sidecar

CLOSE_MIN_STRENGTH = 0.35
CLOSE_MIN_OVERLAP = 0.3
CLOSE_MIN_COSINE = 0.85
MAX_CANDIDATES = 3
CAPTURE_LOCK = "capture"
CAPTURE_LOCK_TIMEOUT = 120.0
MAX_WARNINGS = 32
_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)


class CaptureDeferred(VaultError):
    """Capture may not run now (replay adoption pending); not a failed attempt."""

    code = "capture_deferred"


@dataclass(frozen=True)
class CaptureOutcome:
    intake_id: str
    facts: int
    noops: int
    retired: int  # memories this capture superseded or updated
    model_calls: int  # 0 when a retained plan was replayed
    replayed: bool


def content_words(text: str) -> set[str]:
    """Lowercased words without stopwords, a plural `s` folded: what "lexical overlap" compares."""
    words = set()
    for word in _WORD_RE.findall(text.lower()):
        if word in STOPWORDS:
            continue
        words.add(word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word)
    return words


def overlap(a: str, b: str) -> float:
    left, right = content_words(a), content_words(b)
    if not left or not right:
        return 0.0
    return len(left & right) / min(len(left), len(right))


class IndexCandidateFinder:
    """`CandidateFinder` over the serving index (see the module docstring for "close")."""

    def __init__(self, store):
        try:
            index = store.serving_index()
        except IndexUnavailable:
            index = None  # an empty vault: nothing can be close yet
        self._bm25 = None if index is None else store._deferred.view(index.bm25)  # uncommitted rows too
        self._retired = frozenset() if index is None else superseded_ids(index.generation)
        self._semantic = store._semantic

    def exact_duplicate(self, text: str) -> str | None:
        if self._bm25 is None:
            return None
        found = self._bm25.find_by_content_hash(content_hash(text))
        return None if found is None or found.id in self._retired else found.id

    def candidates(self, text: str) -> list[Candidate]:
        if self._bm25 is None:
            return []
        from memvault.indexer.search.recall import retrieve

        fused, degraded = retrieve(self._bm25, self._semantic, text, rows_for=4 * MAX_CANDIDATES)
        if degraded is not None and self._semantic is not None:
            # novelty is judged by both retrievers; an embedding outage is a retry, not a guess
            raise ProviderUnavailable(f"capture candidate lookup is degraded ({degraded}); the turn is retried")
        ids = [row.id for _, row in fused]
        close = []
        for entry, row in fused:
            if row.kind == "curated" and ids.count(row.id) == 1 and _is_close(text, entry, row):
                close.append(Candidate(row.id, row.text, row.day.isoformat()))
        return close[:MAX_CANDIDATES]


def _is_close(text: str, entry, row) -> bool:
    if entry.strength < CLOSE_MIN_STRENGTH:
        return False
    vector = entry.evidence.get("vector")  # (rank, cosine)
    return overlap(text, row.text) >= CLOSE_MIN_OVERLAP or (vector is not None and vector[1] >= CLOSE_MIN_COSINE)


class CaptureService:
    def __init__(self, store, model=None):
        self.store = store
        self._model = model
        #: content-free warnings (run id prefix, category): what a host would surface
        self.warnings: deque[str] = deque(maxlen=MAX_WARNINGS)

    def model(self):
        if self._model is None:
            memory = self.store.config.memory
            if memory.mode != "bujo" or memory.llm is None:
                raise ProviderUnavailable(
                    'capture needs memory.mode "bujo" with a memory.llm block: run `memvault validate`'
                )

            self._model = chat_model_from_config(self.store.config, self.store.env)
        return self._model

    def warn(self, intake_id: str, category: str) -> None:
        self.warnings.append(
            f"capture of {intake_id[:16]}… failed ({category}); see `memvault inspect {intake_id[:16]}…`"
        )

    # --- the strong path: an admitted intake record ----------------------------------------------

    def capture_record(
        self, record: IntakeRecord, *, now: datetime, hook: CrashHook | None = None, checkpoint=None
    ) -> CaptureOutcome:
        """Plan (or reuse the retained plan) and commit one run; the caller resolves it after."""
        layout = self.store.layout
        blocked = capture_blocked_reason(layout)
        if blocked is not None:
            raise CaptureDeferred(blocked)
        with VaultLock(layout.root, CAPTURE_LOCK, timeout=CAPTURE_LOCK_TIMEOUT):
            plan = read_plan(layout.root, record.id)
            replayed = plan is not None
            if plan is not None and plan.payload_sha256 != record.payload_sha256:
                raise InvalidRecord(
                    f"the retained plan of run {record.id} belongs to another payload: move "
                    f".capture-intake/plans/{record.id}.json aside and run `memvault inspect`"
                )
            if plan is None:
                elsewhere = self.captured_elsewhere(record)
                if elsewhere is not None:
                    return elsewhere
            model = CountingModel(self.model())
            if plan is None:
                try:
                    plan = plan_capture(record, model=model, finder=IndexCandidateFinder(self.store),
                                        vault_zone=self.store.time_zone, now=now, hook=hook,
                                        checkpoint=checkpoint)  # fmt: skip
                except EmptyExtraction:
                    record_run(layout.root, _empty_run(record, model, now))
                    raise
                write_plan(layout.root, plan)
                hit(hook, "capture.plan_written")
            if checkpoint is not None:
                checkpoint()
            self.commit(plan, hook)
            # observability only: written after the commit, so a crash here loses a row, never a fact
            record_run(layout.root, _run_row(plan, record, model, now, replayed))
        return _outcome(plan, replayed)

    def captured_elsewhere(self, record: IntakeRecord) -> CaptureOutcome | None:
        """The outcome of a run the sidecar says is already captured (None when it is not).

        `.capture-intake/` (plans included) is per machine, the sidecar travels with the notes
        (git): the same run admitted on a second machine finds its capture entry there, attested
        by the same authority digest, and its facts in the pulled notes. Planning again would call
        the model for facts that exist and publish a second capture entry for the run (a Conflict);
        instead the sidecar is projected into the serving generation and the run is resolved.
        """
        root = self.store.layout.root
        if ("capture", record.id) not in read_sidecar(root)[0].entries:
            return None  # the usual case, a run never captured: no vault lock taken for it
        with VaultLock(root):
            state, data = read_sidecar(root)  # again under the lock: the projection is of this state
            entry = state.entries.get(("capture", record.id))
            if entry is None:
                return None
            if entry["authority"] != {"digest": capture_authority(record.id, record.payload_sha256), "kind": "capture"}:
                raise Conflict(
                    f"run {record.id[:16]}… is already captured in the replay sidecar from other bytes (another "
                    "machine, or another turn under the same run id); nothing was written. Fix: compare the turn with "
                    f"`memvault inspect {record.id[:16]}…`; a run id names one turn in the whole vault."
                )
            generation = self.store.writable_index().generation
            write_projection(generation, data)
            verify_projection(generation, data)
        return _outcome_of_entry(entry, state)

    def dry_run(self, text: str, *, now: datetime) -> CaptureTest:
        """`memvault capture test`: one sample turn through the configured model; writes nothing."""
        record = direct_record(text, now, now)
        model = CountingModel(self.model())
        try:
            plan = plan_capture(record, model=model, finder=IndexCandidateFinder(self.store),
                                vault_zone=self.store.time_zone, now=now)  # fmt: skip
        except ModelOutputInvalid as exc:  # EmptyExtraction included: that IS the answer to show
            return CaptureTest(None, exc.code, str(exc), model.calls, model.repairs, is_substantive(text))
        return CaptureTest(plan, None, None, model.calls, model.repairs, is_substantive(text))

    def commit(self, plan: SemanticPlan, hook: CrashHook | None = None, authority: str = "capture") -> None:
        """Apply a plan and prove the serving index holds its replay delta. Idempotent."""
        with VaultLock(self.store.layout.root):
            published = commit_plan(self.store.layout, plan, hook, authority=authority)
            self.store.index_notes([plan.note_in(self.store.layout)])
            generation = self.store.writable_index().generation
            write_projection(generation, published)
            verify_projection(generation, published)
        hit(hook, "capture.indexed")

    # --- the legacy best-effort surface: direct capture() --------------------------------------

    def capture_text(self, text: str, *, at: datetime, now: datetime) -> CaptureOutcome:
        """Capture a text directly, without durable intake (see docs/capture.md, "Legacy surfaces")."""
        record = direct_record(text, at, now)
        if self.store.config.memory.mode != "bujo":
            raise ProviderUnavailable('direct capture needs memory.mode "bujo": run `memvault validate`')
        with VaultLock(self.store.layout.root, CAPTURE_LOCK, timeout=CAPTURE_LOCK_TIMEOUT):
            blocked = capture_blocked_reason(self.store.layout)
            if blocked is not None:
                raise CaptureDeferred(blocked)
            plan = plan_capture(record, model=self.model(), finder=IndexCandidateFinder(self.store),
                                vault_zone=self.store.time_zone, now=now)  # fmt: skip
            self.commit(plan, authority="direct")
        return _outcome(plan, False)


class CountingModel:
    """The configured model, counting calls and repair calls (content-free capture stats)."""

    def __init__(self, model):
        self._model, self.calls, self.repairs = model, 0, 0
        self._last: list | None = None

    def complete(self, messages, *, response_format_json: bool, output=None) -> str:
        self.calls += 1
        # a repair call re-sends the previous conversation and adds to it
        self.repairs += self._last is not None and list(messages[: len(self._last)]) == self._last
        self._last = list(messages)
        return self._model.complete(messages, response_format_json=response_format_json, output=output)


@dataclass(frozen=True)
class CaptureTest:
    """What `capture test` found: the plan that would be committed, or why there is none."""

    plan: SemanticPlan | None
    failure: str | None  # invalid_model_output | empty_extraction
    problem: str | None
    calls: int
    repairs: int
    substantive: bool


def _run_row(
    plan: SemanticPlan, record: IntakeRecord, model: CountingModel, now: datetime, replayed: bool
) -> CaptureRun:
    actions = [fact.action for fact in plan.facts]
    calls = plan.model_calls if replayed else model.calls  # a replay makes no call: count the plan's
    return CaptureRun(record.id, now_ts(now), actions.count(ADD_FACT), actions.count(UPDATE_FACT),
                      actions.count(SUPERSEDE_FACT), len(plan.noops), calls, model.repairs,
                      not plan.facts and not plan.noops, is_substantive(turn_text(record)))  # fmt: skip


def _empty_run(record: IntakeRecord, model: CountingModel, now: datetime) -> CaptureRun:
    return CaptureRun(record.id, now_ts(now), 0, 0, 0, 0, model.calls, model.repairs, True, True)


def direct_record(text: str, at: datetime, now: datetime) -> IntakeRecord:
    """A transient record for a direct capture: its run id derives from the text and instant."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidRecord("direct capture needs non-empty text")
    if at.tzinfo is None:
        raise InvalidRecord("direct capture needs a timezone-aware instant")
    refuse_credentials(text, "the capture text")
    digest = hashlib.sha256(f"{text}\0{at.isoformat()}".encode("utf-8", "surrogatepass")).hexdigest()
    payload = Payload("capture", "user", host_summary(text), text)
    return IntakeRecord(intake_id_for(f"direct-capture:{digest}"), payload, "bujo", at, now)


def _outcome(plan: SemanticPlan, replayed: bool) -> CaptureOutcome:
    retired = sum(1 for fact in plan.facts if fact.target is not None)
    return CaptureOutcome(
        plan.id, len(plan.facts), len(plan.noops), retired, 0 if replayed else plan.model_calls, replayed
    )


def _outcome_of_entry(entry: dict, state: ReplayState) -> CaptureOutcome:
    """A replayed outcome from the sidecar's own record of the capture (no plan on this machine)."""
    facts = set(entry["facts"])
    retired = sum(1 for e in state.superseded().values() if e["by"] in facts and e["authority"] == entry["authority"])
    return CaptureOutcome(entry["run"], len(facts), 0, retired, 0, True)


class CaptureQueue:
    """The legacy best-effort `schedule_capture` queue: bounded, in memory, lost on exit.

    Created only when a direct caller first schedules a capture; the bundled host never does
    (it uses the durable intake). A full queue refuses (returns False) instead of blocking.
    """

    MAX_ITEMS = 64

    def __init__(self, service: CaptureService, clock):
        self._service, self._clock = service, clock
        self._items: queue.Queue = queue.Queue(self.MAX_ITEMS)
        self._thread = threading.Thread(target=self._run, name="memvault-capture-queue", daemon=True)
        self._thread.start()

    def offer(self, text: str, at: datetime) -> bool:
        try:
            self._items.put_nowait((text, at))
        except queue.Full:
            return False
        return True

    def _run(self) -> None:
        while True:
            item = self._items.get()
            try:
                if item is None:
                    return
                try:
                    self._service.capture_text(item[0], at=item[1], now=self._clock())
                except Exception as exc:  # best effort by contract: keep a warning, go on
                    self._service.warnings.append(f"scheduled capture failed ({getattr(exc, 'code', 'unexpected')})")
            finally:
                self._items.task_done()

    def drain(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> bool:
        """Wait (bounded) until every scheduled capture has run; True if the queue emptied."""
        deadline = time.monotonic() + timeout
        while self._items.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self._items.unfinished_tasks

    def stop(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> bool:
        drained = self.drain(timeout)
        try:
            self._items.put_nowait(None)
        except Exception:
            pass
        return drained
