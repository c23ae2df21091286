"""Strict JSON for every document memvault reads back: one value, no duplicate keys, no NaN.

Python's `json` keeps the last of two equal keys and accepts `NaN`/`Infinity`; both would let a
hand-edited or hostile file mean something other than what it shows. Intake records, the turn
on stdin, `graph.jsonl`, the replay sidecar, archive manifests and model output all load here.
"""

import json
from typing import Any


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


def loads_strict(text: str | bytes, **options: Any) -> Any:
    """`json.loads` with both refusals; ValueError (or UnicodeDecodeError) on anything else odd."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return json.loads(text, object_pairs_hook=no_duplicate_keys, parse_constant=reject_constant, **options)
