"""Which executing agent turn a call belongs to, over a transport that has no turns (MCP).

Recall budgets are per executing agent turn (`TurnRecall`), and an MCP request carries no turn.
A host names the turn in each request's `_meta`:

    {"_meta": {"memvault/turnId": "run-42/turn-7"}}

Every call with the same id shares one `TurnRecall` (parallel calls of one turn share its
budget); a new id is a new turn with a fresh budget. A child agent passes its own id, so its
turns never consume its parent's budget.

A client that passes no id gets the connection's *implicit* turn. It ends (the next call starts
a fresh one) when the client reads the Wake resource (what a host does at the start of each
turn, see docs/mcp.md) or after `implicit_idle_s` without a memory call, so a long session
without turn ids still gets a fresh budget for a later question instead of replays forever.

At most `MAX_TURNS` explicit turns are remembered; the least recently used one is forgotten
first (a turn that many turns ago has finished).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from memvault.indexer.runtime.budget import TurnRecall

TURN_META_KEY = "memvault/turnId"
MAX_TURN_ID_CHARS = 128
MAX_TURNS = 64
IMPLICIT_TURN_IDLE_S = 120.0
IMPLICIT = "(implicit)"


class InvalidTurnId(ValueError):
    """A turn id that is not a short printable string."""


def check_turn_id(value: object) -> str | None:
    """The turn id from a request's `_meta`, or None when the client passed none."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidTurnId(
            f"_meta[{TURN_META_KEY!r}] must be a string naming the agent turn, not {type(value).__name__}"
        )
    if not 1 <= len(value) <= MAX_TURN_ID_CHARS or not value.isprintable():
        raise InvalidTurnId(
            f"_meta[{TURN_META_KEY!r}] must be 1 to {MAX_TURN_ID_CHARS} printable characters: use the host's own"
            " id for the executing turn"
        )
    return value


class TurnRegistry:
    def __init__(
        self,
        begin: Callable[[], TurnRecall],
        *,
        clock: Callable[[], float] = time.monotonic,
        implicit_idle_s: float = IMPLICIT_TURN_IDLE_S,
        max_turns: int = MAX_TURNS,
    ) -> None:
        self._begin = begin
        self._clock = clock
        self._implicit_idle_s = implicit_idle_s
        self._max_turns = max_turns
        self._explicit: OrderedDict[str, TurnRecall] = OrderedDict()
        self._implicit: TurnRecall | None = None
        self._implicit_used = 0.0
        self._implicit_number = 0
        self._lock = threading.Lock()

    def turn(self, turn_id: str | None) -> tuple[str, TurnRecall]:
        """(the turn's name, its budget) for one call; a first sight of an id begins that turn."""
        with self._lock:
            if turn_id is not None:
                return turn_id, self._explicit_turn(turn_id)
            now = self._clock()
            if self._implicit is None or now - self._implicit_used >= self._implicit_idle_s:
                self._implicit = self._begin()
                self._implicit_number += 1
            self._implicit_used = now
            return f"{IMPLICIT} #{self._implicit_number}", self._implicit

    def end_implicit_turn(self) -> None:
        """The host began a new turn without naming it (it read the Wake snapshot)."""
        with self._lock:
            self._implicit = None

    def _explicit_turn(self, turn_id: str) -> TurnRecall:
        turn = self._explicit.get(turn_id)
        if turn is None:
            turn = self._explicit[turn_id] = self._begin()
            while len(self._explicit) > self._max_turns:
                self._explicit.popitem(last=False)
        self._explicit.move_to_end(turn_id)
        return turn
