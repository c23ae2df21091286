"""Prompts for the two no-tool maintenance workers, and strict parsers for what they answer.

The compactor (USER over budget) returns compacted entries with the source indexes each one
covers; the planner (MEMORY archival with several destinations) returns one route per source
index. The host trusts neither: every rule the spec lists is checked here, and any violation
raises before anything is written, so the original entries are preserved. Nothing is
clamped, coerced or repaired: an invalid plan is refused whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memvault.vault.errors import Conflict, InvalidRecord
from memvault.vault.limits import MAX_COMPLETION_UTF16, completion_overflow
from memvault.vault.runtime.entries import IMPORTANCE_MAX, IMPORTANCE_MIN, RuntimeEntry, normalize_entry

_THINK_RE = re.compile(r"\A\s*<think>.*?</think>", re.DOTALL)
_FENCE_RE = re.compile(r"\A\s*```(?:json)?[ \t]*\n(?P<body>.*)\n```\s*\Z", re.DOTALL)


@dataclass(frozen=True)
class CompactedEntry:
    content: str
    importance: int
    source_indexes: tuple[int, ...]


def _refused(worker: str, problem: str) -> InvalidRecord:
    return InvalidRecord(f"the {worker}'s plan was refused: {problem}; the original entries are kept unchanged")


def parse_json_object(text: object, worker: str) -> dict:
    """The one JSON object a worker answered: an optional <think> block and a ```json fence are
    tolerated around it (local models add them), nothing else."""
    if not isinstance(text, str):
        raise _refused(worker, "the answer is not text")
    length = completion_overflow(text)  # the same cap, counted the same way, as capture
    if length is not None:
        raise _refused(worker, f"the answer is {length} characters, over {MAX_COMPLETION_UTF16}")
    body = _THINK_RE.sub("", text, count=1)
    fenced = _FENCE_RE.match(body)
    if fenced is not None:
        body = fenced["body"]
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise _refused(worker, "the answer is not one JSON object") from None
    if not isinstance(data, dict):
        raise _refused(worker, "the answer is not a JSON object")
    return data


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_revision(data: dict, revision: int, worker: str) -> None:
    if "revision" in data and data["revision"] != revision:
        raise Conflict(
            f"the {worker} answered for revision {data['revision']!r}, but the snapshot is revision {revision};"
            " the original entries are kept unchanged. Fix: retry the write"
        )


def _check_coverage(seen: list[int], expected: Sequence[int], worker: str) -> None:
    allowed = set(expected)
    counted: set[int] = set()
    for index in seen:
        if index not in allowed:
            raise _refused(worker, f"source index {index} is out of range")
        if index in counted:
            raise _refused(worker, f"source index {index} appears more than once")
        counted.add(index)
    missing = sorted(allowed - counted)
    if missing:
        raise _refused(worker, f"source index {missing[0]} is missing (every index must appear exactly once)")


# --- the compactor ------------------------------------------------------------------------------


def compactor_messages(sources: Sequence[RuntimeEntry], revision: int, budget: int) -> list[dict]:
    """A no-tool conversation asking for a compacted profile within `budget` bytes."""
    listed = [{"index": i, "content": e.content, "importance": e.importance} for i, e in enumerate(sources)]
    system = (
        "You compact a user profile. You have no tools. Merge overlapping or redundant entries and"
        " shorten wording, keeping every fact that still matters. Answer with one JSON object only:"
        ' {"revision": <the revision given>, "entries": [{"content": "<one line>", "importance": <1-5>,'
        ' "sourceIndexes": [<indexes of the input entries this entry replaces>]}]}.'
        " Rules: every input index appears in exactly one entry's sourceIndexes; an entry's importance"
        " is at least the highest importance among its sources; the contents joined by newlines must"
        f" take at most {budget} UTF-8 bytes."
    )
    user = json.dumps({"revision": revision, "budgetBytes": budget, "entries": listed}, ensure_ascii=False)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_compaction(
    text: object,
    sources: Sequence[RuntimeEntry],
    *,
    revision: int,
    fits: Callable[[list[CompactedEntry]], bool],
    budget: int,
) -> list[CompactedEntry]:
    """The validated plan, or InvalidRecord (Conflict for a stale revision); `fits` measures the
    candidate exactly as it would be committed."""
    worker = "compactor"
    data = parse_json_object(text, worker)
    _check_revision(data, revision, worker)
    items = data.get("entries")
    if not isinstance(items, list) or not items:
        raise _refused(worker, '"entries" is not a non-empty list')
    if len(items) > len(sources):
        raise _refused(worker, f"it returned {len(items)} entries for {len(sources)} sources")
    planned = [_compacted(item, number, worker) for number, item in enumerate(items)]
    contents = [entry.content for entry in planned]
    if len(set(contents)) != len(contents):
        raise _refused(worker, "two compacted entries have the same content")
    _check_coverage([i for entry in planned for i in entry.source_indexes], range(len(sources)), worker)
    for entry in planned:
        highest = max(sources[i].importance for i in entry.source_indexes)
        if entry.importance < highest:
            raise _refused(
                worker,
                f"an entry lowers importance from {highest} to {entry.importance} "
                f"(sources {list(entry.source_indexes)})",
            )
    if not fits(planned):
        raise _refused(worker, f"the compacted entries do not fit the {budget}-byte budget")
    return planned


def _compacted(item: object, number: int, worker: str) -> CompactedEntry:
    if not isinstance(item, dict) or set(item) != {"content", "importance", "sourceIndexes"}:
        raise _refused(worker, f"entry {number} does not have exactly content, importance and sourceIndexes")
    importance, indexes = item["importance"], item["sourceIndexes"]
    if not _whole(importance) or not IMPORTANCE_MIN <= importance <= IMPORTANCE_MAX:
        raise _refused(worker, f"entry {number} importance is not a whole number {IMPORTANCE_MIN}..{IMPORTANCE_MAX}")
    if not isinstance(indexes, list) or not indexes or not all(_whole(i) for i in indexes):
        raise _refused(worker, f"entry {number} sourceIndexes is not a non-empty list of whole numbers")
    try:
        content = normalize_entry(item["content"], f"entry {number} content")
    except InvalidRecord as exc:
        raise _refused(worker, str(exc)) from None
    return CompactedEntry(content, importance, tuple(indexes))


# --- the archival planner -----------------------------------------------------------------------


def planner_messages(
    sources: Sequence[tuple[int, RuntimeEntry]], destinations: Sequence[dict], revision: int
) -> list[dict]:
    """A no-tool conversation asking only for routes: which existing space takes which entry."""
    system = (
        "You route working-memory entries to long-term memory spaces. You have no tools and cannot"
        " create spaces. Answer with one JSON object only:"
        ' {"revision": <the revision given>, "routes": [{"sourceIndex": <index>, "space": "<space id>"}]}.'
        " Every given sourceIndex appears exactly once; space is one of the given space ids."
    )
    user = json.dumps(
        {
            "revision": revision,
            "spaces": list(destinations),
            "entries": [{"sourceIndex": i, "content": e.content} for i, e in sources],
        },
        ensure_ascii=False,
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_routes(text: object, indexes: Sequence[int], destinations: set[str], *, revision: int) -> dict[int, str]:
    worker = "archival planner"
    data = parse_json_object(text, worker)
    _check_revision(data, revision, worker)
    routes = data.get("routes")
    if not isinstance(routes, list):
        raise _refused(worker, '"routes" is not a list')
    planned: dict[int, str] = {}
    seen: list[int] = []
    for number, route in enumerate(routes):
        if not isinstance(route, dict) or set(route) != {"sourceIndex", "space"} or not _whole(route["sourceIndex"]):
            raise _refused(worker, f'route {number} is not {{"sourceIndex": <index>, "space": "<id>"}}')
        if route["space"] not in destinations:
            raise _refused(worker, f"route {number} names {str(route['space'])[:64]!r}, not an eligible space")
        seen.append(route["sourceIndex"])
        planned[route["sourceIndex"]] = route["space"]
    _check_coverage(seen, indexes, worker)
    return planned
