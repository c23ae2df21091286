"""A chat model's answer: one exact, bounded JSON value, and the field checks capture's parsers share.

The model's answer is untrusted input. It is accepted only when the *whole* completion is one
JSON value (surrounding whitespace aside: no markdown fences, no prose before or after, no
second value), at most 262,144 JavaScript (UTF-16) characters, nested at most 8 levels deep,
with no duplicate keys and no NaN/Infinity. Nothing is clamped, rescaled, trimmed or coerced:
a value that is not exactly what the grammar says makes the whole answer invalid
(`ModelOutputInvalid`), and the intake retries the turn with backoff.

"Safe text" (a memory, a replacement, an entity name) is one line that is already in
normalised form (NFKC, single spaces, no leading/trailing space), with no control, format
(bidi, zero-width), private-use, surrogate or line/paragraph-separator characters, no trailing
`^block-id` token (it would forge an Obsidian block id), and nothing that looks like a
credential. It must also survive the note format: written as a bullet and parsed back, it reads
as exactly the same text.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from memvault.vault.credentials import find_credential
from memvault.vault.errors import InvalidRecord
from memvault.vault.ids import normalize_text
from memvault.vault.limits import MAX_COMPLETION_UTF16, completion_overflow
from memvault.vault.note import format_bullet, parse, region_left_open
from memvault.vault.strict_json import finite_float, loads_strict

MAX_DEPTH = 8
_UNSAFE_CATEGORIES = {"Cc", "Cf", "Co", "Cs", "Zl", "Zp", "Cn"}
_TRAILING_BLOCK_ID = re.compile(r"\^[A-Za-z0-9][A-Za-z0-9-]*$")


class ModelOutputInvalid(InvalidRecord):
    """A chat model's answer broke the capture grammar; the turn is retried, never half-used."""

    code = "invalid_model_output"


class EmptyExtraction(ModelOutputInvalid):
    """A valid but empty extraction of a substantive turn: not a success (see stats.py)."""

    code = "empty_extraction"


def _depth(value: Any, level: int = 1) -> int:
    if isinstance(value, dict):
        return max([level] + [_depth(v, level + 1) for v in value.values()])
    if isinstance(value, list):
        return max([level] + [_depth(v, level + 1) for v in value])
    return level


def load_exact(text: object, what: str) -> Any:
    """The one JSON value `text` holds, or ModelOutputInvalid naming what is wrong."""
    if not isinstance(text, str):
        raise ModelOutputInvalid(f"the {what} answer is not text")
    units = completion_overflow(text)
    if units is not None:
        raise ModelOutputInvalid(f"the {what} answer is {units} characters, over the {MAX_COMPLETION_UTF16} limit")
    try:
        value = loads_strict(text, parse_float=finite_float)
    except RecursionError:
        raise ModelOutputInvalid(f"the {what} answer nests too deeply") from None
    except ValueError as exc:  # JSONDecodeError included: fences, prose, a second value, bad numbers
        raise ModelOutputInvalid(f"the {what} answer is not exactly one JSON value ({_short(exc)})") from None
    if _depth(value) > MAX_DEPTH:
        raise ModelOutputInvalid(f"the {what} answer nests deeper than {MAX_DEPTH} levels")
    return value


def _short(exc: Exception) -> str:
    return str(exc)[:160]


class Fields:
    """Checks on one object of a model answer; every failure names where it happened."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, problem: str) -> ModelOutputInvalid:
        return ModelOutputInvalid(f"{self.where}: {problem}")

    def object(self, value: Any, keys: set[str], where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{where} must be an object")
        got = set(value)
        if got != keys:
            extra, missing = sorted(got - keys), sorted(keys - got)
            raise self.fail(f"{where} has unknown fields {extra} / missing fields {missing}")
        return value

    def array(self, value: Any, where: str, low: int, high: int) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(f"{where} must be an array")
        if not low <= len(value) <= high:
            raise self.fail(f"{where} has {len(value)} items; it must have {low} to {high}")
        return value

    def integer(self, value: Any, where: str) -> int:
        if type(value) is not int:
            raise self.fail(f"{where} must be an integer")
        return value

    def unit_number(self, value: Any, where: str) -> float:
        """A number in the canonical 0..1 range; never rescaled (80 is not 0.8)."""
        if type(value) not in (int, float):
            raise self.fail(f"{where} must be a number from 0 to 1")
        if not 0 <= value <= 1:
            raise self.fail(f"{where} is {value!r}, outside the canonical 0..1 range")
        return float(value)

    def pattern(self, value: Any, regex: re.Pattern[str], where: str, grammar: str) -> str:
        if not isinstance(value, str) or regex.fullmatch(value) is None:
            raise self.fail(f"{where} must match {grammar}")
        return value

    def safe_text(self, value: Any, where: str, max_chars: int) -> str:
        if not isinstance(value, str):
            raise self.fail(f"{where} must be text")
        problem = unsafe_text_problem(value, max_chars)
        if problem is not None:
            raise self.fail(f"{where} {problem}")
        return value


def unsafe_text_problem(text: str, max_chars: int) -> str | None:
    """Why `text` cannot be stored as one memory line, or None (see the module docstring)."""
    if not text:
        return "is empty"
    if len(text) > max_chars:
        return f"is {len(text)} characters, over {max_chars}"
    bad = next((ch for ch in text if unicodedata.category(ch) in _UNSAFE_CATEGORIES), None)
    if bad is not None:
        return f"contains the unsafe character U+{ord(bad):04X}"
    if normalize_text(text) != text:
        return "is not one normalised line (extra spaces, or characters NFKC changes)"
    if _TRAILING_BLOCK_ID.search(text):
        return "ends in a ^block-id token"
    kind = find_credential(text)
    if kind is not None:
        return f"looks like it contains {kind}"
    if not _round_trips(text):
        return "does not survive being written as a note bullet"

    left_open = region_left_open(text)
    if left_open is not None:
        return f"would start {left_open}, hiding every line after it"
    return None


def _round_trips(text: str) -> bool:
    note = parse("# t\n\n" + format_bullet(text, "f-0000000000", "00:00"))
    return len(note.bullets) == 1 and note.bullets[0].text == text and note.bullets[0].block_id == "f-0000000000"
