"""One agent turn's durable-memory reads: automatic recall, MemoryRecall and MemoryJournal.

    memory = start.memory                                  # HostSession.begin_turn()
    injected = memory.auto(user_text)                      # what the host appends (gated facts)
    memory.call("MemoryRecall", {"query": user_text})      # the tool: shares the lookup above
    memory.lookups, memory.shared                          # 1 lookup, 1 recall answered from it

Both kinds of recall read the vault's one open store (the host session's) through the turn's
`TurnLookups`, so an identical normalized question is looked up once per turn (the spec's
"How it is provisioned"); a different question may search again. A repeat of the same tool
question replays its answer. A store that cannot share a lookup (a client of the vault's owner)
counts every recall as its own lookup.

`call` is the tool side the turn's loopback endpoint serves (`turn_endpoint.py`): the same
schemas, argument checks and errors as `memvault mcp`. A backend failure is an explicit
`degraded` answer with no hits, never a crash and never invented hits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from memvault.indexer.results import RecallResult
from memvault.indexer.runtime.memory_tools import (
    JOURNAL,
    RECALL,
    ToolArgumentError,
    ToolOutcome,
    arguments_object,
    journal_answer,
    recall_answer,
    recall_request,
    tool_error,
    unknown_tool,
)
from memvault.indexer.search.turn_lookups import TurnLookups, normalized
from memvault.vault.errors import VaultError

#: automatic recall's limit: the gate caps what it injects itself (5 hits / 8 KB)
AUTO_LIMIT = 10


class TurnMemory:
    """The turn's recalls over `open_store()` (the host session's store, opened on first use).

    `open_store` returns the store or raises VaultError naming why memory is unavailable."""

    def __init__(self, open_store: Callable[[], object], tools: tuple[str, ...] = (RECALL, JOURNAL)) -> None:
        self._open_store = open_store
        self.tools = tools  # what the turn's endpoint offers, under the vault's tool policy
        self._lookups = TurnLookups()
        self._answers: dict[tuple, RecallResult] = {}
        self._unshared = 0  # recalls by a store that cannot share a lookup
        self._lock = threading.Lock()  # the store is not thread-safe; parallel calls take turns

    @property
    def lookups(self) -> int:
        """Backend lookups this turn made (a question looked up once counts once)."""
        return self._lookups.lookups + self._unshared

    @property
    def shared(self) -> int:
        """Recalls this turn answered from a lookup it had already made."""
        return self._lookups.shared

    def auto(self, query: str) -> RecallResult:
        """Automatic recall for the host to inject: only gated direct facts; degraded, never raises."""
        return self._recall(query, AUTO_LIMIT, "auto")

    def tool(self, query: str, limit: int) -> RecallResult:
        return self._recall(query, limit, "tool")

    def _recall(self, query: str, limit: int, mode: str) -> RecallResult:
        key = (normalized(query), mode, limit)
        with self._lock:
            if key in self._answers:  # the same question again: the turn's answer, no search
                self._lookups.shared += 1
                return self._answers[key]
            try:
                result = self._search(query, limit, mode)
            except Exception as exc:  # noqa: BLE001 - a failing backend is a degraded answer, never a crash
                return RecallResult(query, mode, (), degraded=_unavailable(exc))
            if not result.degraded:  # a degraded answer is not kept: the next call tries again
                self._answers[key] = result
            return result

    def _search(self, query: str, limit: int, mode: str) -> RecallResult:
        store = self._open_store()
        if getattr(store, "shares_turn_lookups", False):
            return store.recall(query, limit=limit, mode=mode, lookups=self._lookups)
        self._unshared += 1
        return store.recall(query, limit=limit, mode=mode)

    # --- the tool side -------------------------------------------------------------------------

    def call(self, name: object, arguments: object) -> ToolOutcome:
        """One MemoryRecall or MemoryJournal call; anything else is a tool error. Never raises."""
        if name not in self.tools:
            return unknown_tool(name, list(self.tools))
        try:
            arguments = arguments_object(name, arguments)
            if name == RECALL:
                query, limit = recall_request(arguments)
                return recall_answer(self.tool(query, limit))  # a degraded answer says why, with no hits
            return self._journal(arguments)
        except ToolArgumentError as exc:
            return tool_error("invalid_arguments", str(exc))

    def _journal(self, arguments: Mapping) -> ToolOutcome:
        with self._lock:
            try:
                return journal_answer(self._open_store().journal_service(), arguments)
            except VaultError as exc:
                return tool_error(exc.code, str(exc))
            except Exception as exc:  # noqa: BLE001 - the backend's own error is not passed on
                return tool_error("journal_unavailable", f"the journal could not be read ({type(exc).__name__})")


def _unavailable(exc: Exception) -> str:
    if isinstance(exc, VaultError):
        return f"memory is unavailable: {exc}"
    return f"memory could not be searched ({type(exc).__name__}); automatic recall and the answer go on without it"
