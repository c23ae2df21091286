"""The JSON form of one completed turn, as `memvault admit` reads it on stdin.

    {"runId": "...", "answer": "...", "captureText": "..." (optional),
     "trigger": "user" | "cron" | "webhook" (default "user"),
     "completedAt": ISO-8601 with an offset (optional; default: the time of admission)}

Strict, so a host's bug is reported instead of half-admitted: one JSON object, no duplicate
or unknown keys, `runId` and `answer` required, at most 16 MiB of UTF-8.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memvault.vault.strict_json import loads_strict

MAX_TURN_JSON_BYTES = 16 * 1024 * 1024
_KEYS = {"runId", "answer", "captureText", "trigger", "completedAt"}
_REQUIRED = {"runId", "answer"}


class TurnJsonError(ValueError):
    """The stdin document is not a valid turn; `category` is the admission failure category."""

    def __init__(self, category: str, message: str):
        super().__init__(message)
        self.category = category


def parse_turn_json(data: bytes) -> dict[str, Any]:
    """Keyword arguments for `persist_completed_turn` from one JSON turn, or TurnJsonError."""
    if len(data) > MAX_TURN_JSON_BYTES:
        raise TurnJsonError("turn_too_large", f"the turn is over {MAX_TURN_JSON_BYTES} bytes of JSON")
    try:
        turn = loads_strict(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise TurnJsonError("invalid_turn", f"stdin is not one JSON turn object ({exc})") from None
    if not isinstance(turn, dict):
        raise TurnJsonError("invalid_turn", "stdin must hold one JSON object")
    unknown, missing = sorted(set(turn) - _KEYS), sorted(_REQUIRED - set(turn))
    if unknown or missing:
        raise TurnJsonError("invalid_turn", f"unknown keys {unknown}, missing keys {missing}; keys are {sorted(_KEYS)}")
    return {
        "run_id": turn["runId"],
        "answer": turn["answer"],
        "capture_text": turn.get("captureText"),
        "trigger": turn.get("trigger", "user"),
        "completed_at": _instant(turn.get("completedAt")),
    }


def _instant(value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TurnJsonError("invalid_turn", "completedAt must be an ISO-8601 string")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise TurnJsonError("invalid_turn", f"completedAt {value[:64]!r} is not ISO-8601") from None
    if when.tzinfo is None:
        raise TurnJsonError("invalid_turn", "completedAt needs a UTC offset or Z (e.g. 2026-11-30T14:03:00+01:00)")
    return when
