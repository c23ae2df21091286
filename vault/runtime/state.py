"""`runtime/memories.json`: the committed runtime state and its strict codec. Pure: no I/O.

memories.json is the commit marker: whatever it says is the runtime memory, and the two
Markdown projections are regenerated from it. Besides the entries it records, for each
projection, the revision at which memvault last wrote that file and the SHA-256 of the bytes it
wrote, so a projection that differs from what memvault wrote is recognised as a hand edit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from memvault.vault.errors import InvalidRecord
from memvault.vault.runtime.entries import (
    IMPORTANCE_MAX,
    IMPORTANCE_MIN,
    MAX_ENTRY_BYTES,
    TARGETS,
    RuntimeEntry,
    target_entries,
)

FORMAT = "memvault-runtime-v1"
#: far above any valid state (two targets of at most 1 MiB each); refuse before parsing
MAX_STATE_BYTES = 8 * 1024 * 1024
STATE_FILE = "runtime/memories.json"
_ENTRY_KEYS = {"target", "content", "importance", "created", "updated"}
_STAMP_LEN = len("2026-01-01T00:00:00Z")


@dataclass(frozen=True)
class ProjectionStamp:
    revision: int  # the state revision at which memvault last wrote this projection
    sha256: str  # of the exact bytes it wrote


@dataclass(frozen=True)
class RuntimeState:
    revision: int = 0
    entries: tuple[RuntimeEntry, ...] = ()
    projections: dict[str, ProjectionStamp] = field(default_factory=dict)

    def of(self, target: str) -> list[RuntimeEntry]:
        return target_entries(self.entries, target)


def encode_state(state: RuntimeState) -> bytes:
    """Deterministic bytes: fixed key order, two-space indent, UTF-8, LF, one final newline."""
    data = {
        "format": FORMAT,
        "revision": state.revision,
        "entries": [entry.to_json() for entry in state.entries],
        "projections": {
            target: {"revision": stamp.revision, "sha256": stamp.sha256}
            for target, stamp in sorted(state.projections.items())
        },
    }
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _bad(problem: str) -> InvalidRecord:
    return InvalidRecord(
        f"{STATE_FILE} is not a valid runtime state: {problem}. Fix: restore it from git"
        f" (`git checkout -- {STATE_FILE}`), or move it aside to start empty; memvault then adopts"
        " runtime/USER.md and runtime/MEMORY.md as hand edits"
    )


def decode_state(raw: bytes) -> RuntimeState:
    if len(raw) > MAX_STATE_BYTES:
        raise _bad(f"it is {len(raw)} bytes, over the {MAX_STATE_BYTES}-byte limit")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _bad(f"not UTF-8 JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _bad(f'"format" is not "{FORMAT}"')
    revision = data.get("revision")
    if not _whole(revision):
        raise _bad('"revision" is not a whole number')
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, list):
        raise _bad('"entries" is not a list')
    entries = tuple(_decode_entry(item, index) for index, item in enumerate(raw_entries))
    projections = _decode_projections(data.get("projections", {}), revision)
    return RuntimeState(revision, _targets_in_order(entries), projections)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53


def _decode_entry(item: object, index: int) -> RuntimeEntry:
    where = f"entry {index}"
    if not isinstance(item, dict) or set(item) != _ENTRY_KEYS:
        raise _bad(f"{where} does not have exactly the keys {', '.join(sorted(_ENTRY_KEYS))}")
    if item["target"] not in TARGETS:
        raise _bad(f"{where} has target {item['target']!r}, not USER or MEMORY")
    content = item["content"]
    if not isinstance(content, str) or not content or "\n" in content or len(content.encode()) > MAX_ENTRY_BYTES:
        raise _bad(f"{where} content is not one non-empty line of at most {MAX_ENTRY_BYTES} bytes")
    importance = item["importance"]
    if not _whole(importance) or not IMPORTANCE_MIN <= importance <= IMPORTANCE_MAX:
        raise _bad(f"{where} importance is not {IMPORTANCE_MIN}..{IMPORTANCE_MAX}")
    for key in ("created", "updated"):
        if not isinstance(item[key], str) or len(item[key]) != _STAMP_LEN or not item[key].endswith("Z"):
            raise _bad(f"{where} {key} is not a UTC timestamp like 2026-01-01T00:00:00Z")
    return RuntimeEntry(item["target"], content, importance, item["created"], item["updated"])


def _decode_projections(value: object, revision: int) -> dict[str, ProjectionStamp]:
    if not isinstance(value, dict) or not set(value) <= set(TARGETS):
        raise _bad('"projections" is not an object keyed by USER / MEMORY')
    stamps = {}
    for target, stamp in value.items():
        if (
            not isinstance(stamp, dict)
            or set(stamp) != {"revision", "sha256"}
            or not _whole(stamp["revision"])
            or stamp["revision"] > revision
            or not isinstance(stamp["sha256"], str)
            or len(stamp["sha256"]) != 64
        ):
            raise _bad(f'"projections.{target}" is not {{"revision": N <= {revision}, "sha256": <64 hex>}}')
        stamps[target] = ProjectionStamp(stamp["revision"], stamp["sha256"])
    return stamps


def _targets_in_order(entries: tuple[RuntimeEntry, ...]) -> tuple[RuntimeEntry, ...]:
    """USER entries before MEMORY entries, each in file order (the order every writer keeps)."""
    return tuple(target_entries(entries, TARGETS[0]) + target_entries(entries, TARGETS[1]))
