"""`HostSession`: what a Python agent host calls at turn start and turn end.

    session = HostSession.open("path/to/vault", env=os.environ)
    start = session.begin_turn()                  # pins a fresh recall budget, cancels any review
    if start.wake_changed:
        messages.append({"role": "user", "content": start.wake.text})   # a complete snapshot
    answer = start.recall.recall("which color did we pick?")            # the turn's envelope
    ...
    session.end_turn(user_text=..., assistant_text=..., tool_results=3, tools_used=("Bash", "Edit"))
    session.close()

It keeps the activity score (vault/runtime/activity.py), applies the structural dirty
admission, and, when the host switches the review on (`memory.runtime.idleReview.enabled`, or
`review=True`) and a chat model is configured (`memory.llm`), runs one idle-review pass
(indexer/runtime/review.py) after `idleReviewMs` of idleness and at least
`idleReview.minIntervalMs` after the previous attempt. A new turn cancels a pending or running
pass and keeps the activity. A completed pass (a skip included) clears the activity; a failed
or aborted one keeps it.

The accumulated signals (counts and tool names, never conversation text) are kept in
`.index/host-activity/<session>.json` (0600) after every turn and pass, so a restarted host
resumes its score instead of losing it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.runtime.budget import TurnRecall
from memvault.indexer.runtime.memory_tools import JOURNAL, RECALL
from memvault.indexer.runtime.review import ReviewOutcome, run_review
from memvault.indexer.runtime.service import RuntimeService
from memvault.indexer.runtime.turn_endpoint import EndpointInfo, EndpointUnavailable, TurnEndpoint, open_turn_endpoint
from memvault.indexer.runtime.turn_memory import TurnMemory
from memvault.vault.config import RuntimeSettings
from memvault.vault.fsio import MACHINE_DIR_MODE, atomic_write, make_dir, read_bytes_nofollow
from memvault.vault.runtime.activity import ActivityTracker, TurnSignals, no_memory_intent
from memvault.vault.runtime.wake import ROUTING_GUIDANCE, RUNTIME_MEMORY_PROTOCOL, WakeSnapshot
from memvault.vault.strict_json import loads_strict

#: memvault's own tools: using only these is not "completed non-memory work"
MEMORY_TOOLS = frozenset({
    "MemoryRecall", "MemoryJournal", "Remember", "RuntimeMemory", "DocumentSearch", "DocumentCreate",
    "SpaceRecall", "SpaceRelated", "SpaceList", "MemoryStatus",
})  # fmt: skip
ACTIVITY_DIR = ".index/host-activity"
RECALL_CUE = "Memory: recall long-term memory (SpaceRecall) only when the answer depends on earlier sessions."
WRITEBACK_CUE = "Memory: keep a new durable fact the user states with RuntimeMemory, a project record as a document."


@dataclass(frozen=True)
class TurnStart:
    turn_id: str
    recall: TurnRecall  # this turn's budget: recall, refinement, Related, the document-search slot
    wake: WakeSnapshot
    wake_changed: bool  # append `wake.text` as a new message only when True
    protocol: str  # the static system-prompt section(s), byte-identical across memory writes
    cue: str | None  # at most one short recall/writeback cue per session
    memory: TurnMemory | None = None  # automatic recall and MemoryRecall/MemoryJournal, one lookup per question
    endpoint: EndpointInfo | None = None  # the turn's loopback MCP endpoint (holds_slot=True), else None
    warnings: tuple[str, ...] = ()  # for the host's log: why the turn has no endpoint, when it asked for one


@dataclass(frozen=True)
class TurnEnd:
    score: int
    eligible: bool
    admitted: bool
    reason: str
    review_scheduled: bool
    review_in_ms: int | None  # when the pass would start, if nothing else happens


class HostSession:
    def __init__(
        self,
        service: RuntimeService,
        *,
        settings: RuntimeSettings | None = None,
        review: bool | None = None,
        chat=None,
        session_id: str = "default",
        clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000,
        agent_teams: bool = False,
        store=None,
        env: Mapping[str, str] | None = None,
        endpoint_port: int = 0,
    ) -> None:
        self.service = service
        self._store, self._owns_store = store, store is None  # the vault's store, opened on first recall
        self._env = {} if env is None else dict(env)
        self._store_lock = threading.Lock()
        self.endpoint_port = endpoint_port  # 0: a port the OS picks for each turn's endpoint
        self._endpoint: TurnEndpoint | None = None
        self.settings = settings or service.config.memory.runtime
        self.chat = chat if chat is not None else service.maintenance.chat
        self.review_enabled = self.settings.idle_review_enabled if review is None else review
        self.agent_teams = agent_teams  # review pauses while Agent Teams tools are installed
        self._clock_ms = clock_ms
        self._state_path = (
            service.root / ACTIVITY_DIR / (hashlib.sha256(session_id.encode()).hexdigest()[:16] + ".json")
        )
        self.activity = _load_activity(self._state_path)
        self._lock = threading.RLock()
        self._generation = 0
        self._timer: threading.Timer | None = None
        self._cancel: threading.Event | None = None  # set to stop the running pass
        self._idle = threading.Condition(self._lock)
        self._running = False
        self._turns = 0
        self._in_turn = False
        self._ended_turn = False
        self._checkpoint = ""
        self._last_attempt_ms: float | None = None
        self._last_wake: str | None = None
        self._pinned: tuple[str, ...] | None = None  # the spaces the current root turn pinned
        self._cued = False
        self.passes = 0
        self.last_outcome: ReviewOutcome | None = None

    @classmethod
    def open(
        cls, path: str | os.PathLike | None = None, *, env: Mapping[str, str] | None = None, **kwargs
    ) -> HostSession:
        service_kwargs = {k: kwargs.pop(k) for k in ("chat", "spaces_root") if k in kwargs}
        service = RuntimeService.open(path, env=env, **service_kwargs)
        return cls(service, chat=service_kwargs.get("chat"), env=env, **kwargs)

    # --- turns ---------------------------------------------------------------------------------

    def begin_turn(self, turn_id: str | None = None, *, holds_slot: bool = False) -> TurnStart:
        """Turn start: cancel any pending or running review (the activity stays), pin a budget.

        With `holds_slot` (the turn has its provider-concurrency slot: a queued turn must not pass
        it) the turn gets its own loopback MCP endpoint serving MemoryRecall and MemoryJournal over
        `start.memory`; if it cannot start, `start.warnings` says why and the turn has no tool,
        while automatic recall (`start.memory.auto`) works as before."""
        self._close_endpoint()  # a turn the host never ended keeps no listener
        with self._lock:
            self._generation += 1
            self._stop_review()
            self._in_turn, self._ended_turn = True, False
            self._turns += 1
            name = turn_id or f"turn-{self._turns}"
            cue = None if self._cued else self._cue()
            self._cued = self._cued or cue is not None
        wake = self.service.wake_snapshot()
        changed = wake.changed_since(self._last_wake)
        self._last_wake = wake.digest
        recall = self.service.begin_turn()  # pins the spaces active now (none, if the catalog is unreadable)
        self._pinned = recall.scope(None)
        memory = TurnMemory(self.memory_store, self._tools())
        endpoint, warnings = self._open_endpoint(memory, name) if holds_slot else (None, ())
        return TurnStart(name, recall, wake, changed, self.protocol(), cue, memory, endpoint, warnings)

    def _tools(self) -> tuple[str, ...]:
        """The read tools the vault's policy offers (memory.recallTool, tools.allowed/deniedTools)."""
        config = self.service.config
        return tuple(name for name in (RECALL, JOURNAL) if config.tool_enabled(name))

    def _open_endpoint(self, memory: TurnMemory, name: str) -> tuple[EndpointInfo | None, tuple[str, ...]]:
        if RECALL not in memory.tools:
            return None, ()  # the recall tool is off: nothing to serve, nothing to warn about
        try:
            endpoint = open_turn_endpoint(memory, host_tools=self.service.config.tools.host_tools,
                                          port=self.endpoint_port, name=name)  # fmt: skip
        except EndpointUnavailable as exc:
            return None, (f"{exc}; MemoryRecall is left out of this turn, automatic recall goes on",)
        with self._lock:
            self._endpoint = endpoint
        return endpoint.info, ()

    def _close_endpoint(self) -> None:
        with self._lock:
            endpoint, self._endpoint = self._endpoint, None
        if endpoint is not None:
            endpoint.close()

    def memory_store(self):
        """The vault's store, shared by every turn's recall (opened on first use); raises VaultError."""
        with self._store_lock:
            if self._store is None:
                self._store = MemoryStore.open(self.service.root, env=self._env)
            return self._store

    def child_turn(self) -> TurnRecall:
        """A child agent's own turn: its own budget over the spaces its parent's turn pinned, with
        no cue and no effect on the idle review (children have no root-only lifecycle)."""
        with self._lock:
            pinned = self._pinned
        return self.service.begin_turn(pinned)

    def _cue(self) -> str | None:
        """recallMode=off drops the recall cue, writebackMode=off the writeback one, lifecycleEnabled=false both."""
        switches = self.service.switches
        parts = [RECALL_CUE] * switches.recall_cues + [WRITEBACK_CUE] * switches.writeback_cues
        return " ".join(parts) or None

    def protocol(self) -> str:
        routing = self.service.switches.routing_section
        return RUNTIME_MEMORY_PROTOCOL + ("\n" + ROUTING_GUIDANCE if routing else "")

    def end_turn(
        self,
        *,
        user_text: str = "",
        assistant_text: str = "",
        tool_results: int = 0,
        tools_used: Sequence[str] = (),
        no_memory: bool = False,
        persist: bool = False,
    ) -> TurnEnd:
        """Turn end: close the turn's endpoint, add the turn's signals, decide admission, and
        schedule the review if due."""
        self._close_endpoint()
        tools = tuple(dict.fromkeys(str(t) for t in tools_used))
        signals = TurnSignals(user_text, len(assistant_text), int(tool_results), tools,
                              non_memory_work=any(t not in MEMORY_TOOLS for t in tools))  # fmt: skip
        with self._lock:
            self._in_turn, self._ended_turn = False, True
            self.activity.record(signals)
            self._checkpoint = _checkpoint(user_text, assistant_text, tools, self.settings.idle_max_context_chars)
            admitted, reason = self._admit(signals, no_memory, persist)
            delay = self._schedule() if admitted else None
            _save_activity(self._state_path, self.activity)
            return TurnEnd(self.activity.score, self.activity.eligible, admitted, reason, delay is not None, delay)

    def _admit(self, signals: TurnSignals, no_memory: bool, persist: bool) -> tuple[bool, str]:
        if not self.activity.eligible:
            return self.activity.admit(signals)  # names the score and keeps the activity
        if no_memory or no_memory_intent(signals.user_text):
            return False, "explicit no-memory intent in this turn"
        if persist:
            return True, "persistence intent"
        return self.activity.admit(signals)

    # --- the idle review -----------------------------------------------------------------------

    def review_blocked(self) -> str | None:
        """Why no review may start now, or None."""
        switches = self.service.switches
        if not self.review_enabled:
            return "the idle review is off (memory.runtime.idleReview.enabled)"
        if not switches.background_review:
            return "writebackMode=off, lifecycleEnabled=false or the General strategy turns the review off"
        if not switches.write_enabled:
            return "writes are disabled (writeEnabled=false)"
        if self.chat is None:
            return "no chat model is configured (memory.llm)"
        if self.agent_teams:
            return "paused while Agent Teams tools are installed"
        if self.passes >= self.settings.idle_max_per_session:
            return f"idleReview.maxPerSession ({self.settings.idle_max_per_session}) reached"
        return None

    def _schedule(self) -> int | None:
        if self.review_blocked():
            return None
        now = self._clock_ms()
        wait = self.settings.idle_review_ms
        if self._last_attempt_ms is not None:
            wait = max(wait, self._last_attempt_ms + self.settings.idle_min_interval_ms - now)
        self._timer = threading.Timer(wait / 1000, self._fire, args=(self._generation,))
        self._timer.daemon = True
        self._timer.start()
        return int(wait)

    def _fire(self, generation: int) -> None:
        with self._lock:
            # confirm: still idle, the turn ended, nothing newer, not blocked meanwhile
            if generation != self._generation or self._in_turn or not self._ended_turn or self.review_blocked():
                return
            cancel = self._cancel = threading.Event()
            self._running = True
            self._last_attempt_ms = self._clock_ms()
            checkpoint = self._checkpoint
        outcome = run_review(self.service, self.chat, checkpoint, runtime_memory=self.settings.idle_runtime_memory,
                             cancelled=cancel)  # fmt: skip
        with self._lock:
            self.passes += 1
            self.last_outcome = outcome
            if outcome.clears_activity and generation == self._generation:
                self.activity.clear()
            _save_activity(self._state_path, self.activity)
            self._running = False
            self._cancel = None
            self._idle.notify_all()

    def _stop_review(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._cancel is not None:
            self._cancel.set()

    def wait_for_review(self, timeout: float = 60.0) -> ReviewOutcome | None:
        """Wait until no pass is pending or running; the last pass's outcome (None: none ran)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._running or (self._timer is not None and self._timer.is_alive()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(min(left, 0.1))
            return self.last_outcome

    def status(self) -> dict:
        with self._lock:
            pending = self._timer is not None and self._timer.is_alive()
            return {"score": self.activity.score, "eligible": self.activity.eligible, "passes": self.passes,
                    "reviewPending": pending, "reviewRunning": self._running, "blocked": self.review_blocked(),
                    "lastOutcome": None if self.last_outcome is None else self.last_outcome.to_json()}  # fmt: skip

    def close(self) -> None:
        self._close_endpoint()
        with self._lock:
            self._generation += 1
            self._stop_review()
            _save_activity(self._state_path, self.activity)
        with self._store_lock:
            store, self._store = self._store, None
        if store is not None and self._owns_store:
            store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _checkpoint(user_text: str, assistant_text: str, tools: tuple[str, ...], limit: int) -> str:
    """The bounded text a review pass reads: the completed turn, the user's words first."""
    parts = [f"User: {user_text}", f"Assistant: {assistant_text}", f"Tools used: {', '.join(tools) or 'none'}"]
    text = "\n\n".join(parts)
    return text if len(text) <= limit else text[: limit - 12] + "\n[truncated]"


def _load_activity(path: Path) -> ActivityTracker:
    try:
        data = loads_strict(read_bytes_nofollow(path))
        tracker = ActivityTracker(int(data["userChars"]), int(data["turns"]), int(data["toolResults"]),
                                  {str(t) for t in data["tools"]})  # fmt: skip
        return tracker if min(tracker.user_chars, tracker.turns, tracker.tool_results) >= 0 else ActivityTracker()
    except (OSError, ValueError, KeyError, TypeError):
        return ActivityTracker()  # missing or damaged: start afresh (the spec's baseline)


def _save_activity(path: Path, tracker: ActivityTracker) -> None:
    data = {"version": 1, "userChars": tracker.user_chars, "turns": tracker.turns,
            "toolResults": tracker.tool_results, "tools": sorted(tracker.tools)[:256]}  # fmt: skip
    try:
        make_dir(path.parent, MACHINE_DIR_MODE, parents=True)
        atomic_write(path, (json.dumps(data, sort_keys=True) + "\n").encode(), mode=0o600)
    except OSError:
        pass  # a read-only vault: signals stay in memory only, as the spec's baseline has it
