"""Host helpers that need no model: the activity score, dirty admission, and the switches.

The score and the admission are deliberately structural (counts and phrases, not an LLM
classification), so an ordinary checkpoint never starts a background model:

    score = min(floor(user_chars / 50), 3) + completed_turns
          + min(floor(tool_results / 5), 2) + diversity(unique tools: <3 -> 0, 3 -> 1, >=4 -> 2)
    eligible when score >= 5

An eligible turn is admitted only without an explicit no-memory intent, and only with a
persistence intent, >= 320 user characters, >= 600 assistant characters, or completed work
outside the memory tools.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from memvault.vault.errors import VaultError
from memvault.vault.limits import IDLE_REVIEW_MIN_INTERVAL_MS, IDLE_REVIEW_MS

SCORE_THRESHOLD = 5
ADMIT_USER_CHARS, ADMIT_ASSISTANT_CHARS = 320, 600
STRATEGIES = ("layered", "general")
MODES = ("on", "off")
_NO_MEMORY = re.compile(
    r"\b(?:don'?t|do not|never|no need to)\s+(?:remember|save|store|memori[sz]e|keep)\b|\bforget (?:this|that|it)\b"
    r"|\boff the record\b|\bno memory\b",
    re.IGNORECASE,
)
_PERSIST = re.compile(
    r"\b(?:remember|memori[sz]e|keep in mind|note that|from now on|going forward|save this|make a note)\b",
    re.IGNORECASE,
)


class WritesDisabled(VaultError):
    code = "writes_disabled"


@dataclass(frozen=True)
class Switches:
    """The configuration switches and what each one turns off (nothing else)."""

    strategy: str = "layered"
    recall_mode: str = "on"  # off: no recall cues; explicit recall stays
    writeback_mode: str = "on"  # off: no writeback cues, no scored background review
    lifecycle_enabled: bool = True  # false: no lifecycle reminders or review; tools stay
    routing_guidance: bool = True  # false: only the routing section goes; runtime context stays
    write_enabled: bool = True  # false: write commands are rejected

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise VaultError(f"strategy {self.strategy!r} is not one of {', '.join(STRATEGIES)}")
        if self.recall_mode not in MODES or self.writeback_mode not in MODES:
            raise VaultError("recallMode and writebackMode are 'on' or 'off'")

    @property
    def recall_cues(self) -> bool:
        return self.recall_mode == "on" and self.lifecycle_enabled

    @property
    def writeback_cues(self) -> bool:
        return self.writeback_mode == "on" and self.lifecycle_enabled

    @property
    def background_review(self) -> bool:
        return self.writeback_mode == "on" and self.lifecycle_enabled and self.strategy == "layered"

    @property
    def routing_section(self) -> bool:
        return self.routing_guidance

    @property
    def runtime_context(self) -> bool:
        return True  # no switch removes the runtime memory context

    @property
    def capacity_maintenance(self) -> bool:
        return self.strategy == "layered"

    def require_write(self, what: str) -> None:
        if not self.write_enabled:
            raise WritesDisabled(
                f"writes are disabled (writeEnabled=false), so {what} was rejected; nothing was written"
            )


@dataclass(frozen=True)
class TurnSignals:
    """What one completed turn contributed (the host fills it in)."""

    user_text: str = ""
    assistant_chars: int = 0
    tool_results: int = 0
    tools: tuple[str, ...] = ()
    non_memory_work: bool = False  # a completed tool call outside the memory tools


def no_memory_intent(text: str) -> bool:
    return _NO_MEMORY.search(text) is not None


def persistence_intent(text: str) -> bool:
    return _PERSIST.search(text) is not None and not no_memory_intent(text)


def diversity_score(unique_tools: int) -> int:
    return 0 if unique_tools < 3 else 1 if unique_tools == 3 else 2


def activity_score(user_chars: int, turns: int, tool_results: int, unique_tools: int) -> int:
    return min(user_chars // 50, 3) + turns + min(tool_results // 5, 2) + diversity_score(unique_tools)


@dataclass
class ActivityTracker:
    """Accumulates completed turns until a review pass clears them (or keeps them on failure)."""

    user_chars: int = 0
    turns: int = 0
    tool_results: int = 0
    tools: set[str] = field(default_factory=set)

    def record(self, turn: TurnSignals) -> None:
        self.user_chars += len(turn.user_text)
        self.turns += 1
        self.tool_results += turn.tool_results
        self.tools.update(turn.tools)

    @property
    def score(self) -> int:
        return activity_score(self.user_chars, self.turns, self.tool_results, len(self.tools))

    @property
    def eligible(self) -> bool:
        return self.score >= SCORE_THRESHOLD

    def admit(self, current: TurnSignals) -> tuple[bool, str]:
        """(admitted, why): the dirty admission for the turn that just completed."""
        if not self.eligible:
            return False, f"score {self.score} < {SCORE_THRESHOLD}: activity kept for later turns"
        if no_memory_intent(current.user_text):
            return False, "explicit no-memory intent in this turn"
        if persistence_intent(current.user_text):
            return True, "persistence intent"
        if len(current.user_text) >= ADMIT_USER_CHARS:
            return True, f">= {ADMIT_USER_CHARS} user characters"
        if current.assistant_chars >= ADMIT_ASSISTANT_CHARS:
            return True, f">= {ADMIT_ASSISTANT_CHARS} assistant characters"
        if current.non_memory_work:
            return True, "completed non-memory work"
        return False, "nothing durable in this turn"

    def clear(self) -> None:
        """A review pass completed (a skip included): start counting afresh."""
        self.user_chars = self.turns = self.tool_results = 0
        self.tools = set()


def review_due(now_ms: int, last_turn_end_ms: int, last_attempt_ms: int | None,
               idle_ms: int = IDLE_REVIEW_MS, min_interval_ms: int = IDLE_REVIEW_MIN_INTERVAL_MS) -> bool:  # fmt: skip
    """Idle long enough since the turn ended, and far enough from the previous attempt."""
    idle = now_ms - last_turn_end_ms >= idle_ms
    spaced = last_attempt_ms is None or now_ms - last_attempt_ms >= min_interval_ms
    return idle and spaced
