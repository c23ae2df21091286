"""Strict JSON for every document memvault reads back: one value, no duplicate keys, no NaN,
bounded nesting.

Python's `json` keeps the last of two equal keys and accepts `NaN`/`Infinity`; both would let a
hand-edited or hostile file mean something other than what it shows. It also recurses once per
nesting level, so `[[[[…` 100,000 deep raises RecursionError instead of a parse error. Intake
records, the turn on stdin, `graph.jsonl`, the replay sidecar, archive manifests and model
output all load here, and each of those refusals is a ValueError naming the problem.
"""

import json
import math
import re
from typing import Any

#: deeper than any document memvault writes or accepts; far below Python's recursion limit
MAX_NESTING = 64
#: a JSON string literal, written as an unrolled loop (runs of plain characters at C speed)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` that refuses an object naming one key twice."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def reject_constant(name: str) -> Any:
    """`parse_constant` that refuses NaN, Infinity and -Infinity."""
    raise ValueError(f"{name} is not JSON")


def finite_float(text: str) -> float:
    """`parse_float` that refuses numbers too large for a float (1e999 would become inf)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def nesting_depth(text: str) -> int:
    """How deep arrays and objects nest in `text`, brackets inside strings not counted."""
    depth = deepest = 0
    for token in _BRACKETS.findall(_STRING.sub("", text) if '"' in text else text):
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def utf16_length(text: str) -> int:
    """Length as JavaScript counts it: characters outside the BMP count twice."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def loads_strict(text: str | bytes, **options: Any) -> Any:
    """`json.loads` with the refusals above; ValueError (or UnicodeDecodeError) on anything odd."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if text.count("[") + text.count("{") > MAX_NESTING and nesting_depth(text) > MAX_NESTING:
        raise ValueError(f"JSON nested deeper than {MAX_NESTING} levels")
    return json.loads(text, object_pairs_hook=no_duplicate_keys, parse_constant=reject_constant, **options)
