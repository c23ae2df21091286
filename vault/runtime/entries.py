"""Runtime memory entries: what one USER/MEMORY line is, how its text is normalised, how much room
it takes, and how a set of entries is packed into a byte budget. Pure: no I/O.

Size is measured the way the limits are stated (bytes, not characters): the UTF-8 bytes of a
target's entries joined by one newline each (`packed_bytes`). That is exactly the body of the
projection without its `- ` markers, so a person can check a limit with `wc -c`-like reasoning
and a model can be told one number.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from memvault.vault.credentials import refuse_credentials
from memvault.vault.errors import InvalidRecord, VaultError
from memvault.vault.ids import normalize_text

USER, MEMORY = "USER", "MEMORY"
TARGETS = (USER, MEMORY)
IMPORTANCE_MIN, IMPORTANCE_MAX, DEFAULT_IMPORTANCE = 1, 5, 3
#: one entry is one fact: at most what Remember accepts, so an archived entry always fits a space
MAX_ENTRY_BYTES = 4096


class CapacityExceeded(VaultError):
    """A runtime write does not fit its target's byte limit and was not (or could not be) maintained.

    `overflow` carries the committed snapshot and the pending mutation when the normal path
    raises it, so the Layered strategy can run capacity maintenance on exactly that snapshot.
    """

    code = "capacity_exceeded"

    def __init__(self, message: str, overflow: object | None = None) -> None:
        super().__init__(message)
        self.overflow = overflow


@dataclass(frozen=True)
class RuntimeEntry:
    target: str
    content: str
    importance: int
    created: str  # ISO-8601 UTC, second precision, "Z"
    updated: str

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "content": self.content,
            "importance": self.importance,
            "created": self.created,
            "updated": self.updated,
        }


def iso_utc(moment: datetime) -> str:
    """The one timestamp spelling memories.json uses (sortable as text)."""
    if moment.tzinfo is None:
        raise InvalidRecord("runtime timestamps must be timezone-aware: pass an aware datetime")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_target(target: object) -> str:
    if target not in TARGETS:
        raise InvalidRecord(f"runtime target {target!r} is not one of {', '.join(TARGETS)}: pass USER or MEMORY")
    return target  # type: ignore[return-value]


def check_importance(importance: object) -> int:
    if (
        isinstance(importance, bool)
        or not isinstance(importance, int)
        or not (IMPORTANCE_MIN <= importance <= IMPORTANCE_MAX)
    ):
        raise InvalidRecord(
            f"importance {importance!r} is not a whole number from {IMPORTANCE_MIN} to {IMPORTANCE_MAX}:"
            f" pass e.g. {DEFAULT_IMPORTANCE}"
        )
    return importance


def normalize_entry(text: object, what: str = "the entry") -> str:
    """The text a runtime entry stores, or InvalidRecord / CredentialRefused saying why not.

    NFKC and collapsed whitespace (the same normalisation Remember uses), so an entry archived
    to a memory space is stored byte-for-byte as it was held here. One entry is one line of the
    projection, hence no newlines survive; control characters are refused rather than dropped.
    """
    if not isinstance(text, str):
        raise InvalidRecord(f"{what} must be text, not {type(text).__name__}")
    if any(unicodedata.category(ch) in ("Cc", "Cs") and ch not in "\t\n\r" for ch in text):
        raise InvalidRecord(f"{what} contains control characters: remove them and try again")
    content = normalize_text(text)
    if not content:
        raise InvalidRecord(f"{what} is empty: pass the fact to keep")
    size = len(content.encode("utf-8"))
    if size > MAX_ENTRY_BYTES:
        raise InvalidRecord(
            f"{what} is {size} bytes; one runtime entry holds at most {MAX_ENTRY_BYTES}: store long text as a document"
        )
    refuse_credentials(content, what)
    return content


def entry_bytes(content: str) -> int:
    return len(content.encode("utf-8"))


def packed_bytes(contents: Iterable[str]) -> int:
    """UTF-8 bytes of the contents joined by newlines: the measure every runtime limit uses."""
    total, count = 0, 0
    for content in contents:
        total += entry_bytes(content)
        count += 1
    return total + max(count - 1, 0)


def target_entries(entries: Sequence[RuntimeEntry], target: str) -> list[RuntimeEntry]:
    return [entry for entry in entries if entry.target == target]


def replace_target(
    entries: Sequence[RuntimeEntry], target: str, new: Sequence[RuntimeEntry]
) -> tuple[RuntimeEntry, ...]:
    """All entries with `target`'s replaced by `new`; the other target keeps its order (USER first)."""
    others = [entry for entry in entries if entry.target != target]
    ordered = {USER: [], MEMORY: []}
    for entry in others:
        ordered[entry.target].append(entry)
    ordered[target] = list(new)
    return tuple(ordered[USER] + ordered[MEMORY])


@dataclass(frozen=True)
class Keyed:
    """An entry with the position that orders it when a set is repacked (its first source index)."""

    key: int
    entry: RuntimeEntry


def pack(items: Iterable[Keyed], limit: int) -> tuple[RuntimeEntry, ...]:
    """Deterministic UTF-8 packing: order by key (original position), then content; refuse overflow.

    Ordering by the first source index keeps a compacted profile reading in the order the
    person built it, and the content tie-break makes the bytes independent of model output order.
    """
    ordered = sorted(items, key=lambda item: (item.key, item.entry.content.encode("utf-8")))
    entries = tuple(item.entry for item in ordered)
    used = packed_bytes(entry.content for entry in entries)
    if used > limit:
        raise CapacityExceeded(f"the packed entries take {used} bytes, over the {limit}-byte budget")
    return entries


def retain_by_importance(
    candidates: Sequence[Keyed], fixed: Sequence[Keyed], limit: int
) -> tuple[list[Keyed], list[Keyed]]:
    """(kept, left out): keep `fixed` always, then candidates by importance while they fit `limit`.

    Greedy over (importance high first, most recently updated first, original position), so the
    choice is deterministic and never prefers a less important entry over a more important one
    that fits. Used for MEMORY archival, where hot entries are kept exactly, never rewritten.
    """
    used = packed_bytes(item.entry.content for item in fixed)
    count = len(fixed)
    kept: list[Keyed] = []
    left: list[Keyed] = []
    order = sorted(candidates, key=lambda item: (-item.entry.importance, _neg_time(item.entry.updated), item.key))
    for item in order:
        extra = entry_bytes(item.entry.content) + (1 if count else 0)
        if used + extra <= limit:
            kept.append(item)
            used += extra
            count += 1
        else:
            left.append(item)
    return sorted(kept, key=lambda item: item.key), sorted(left, key=lambda item: item.key)


def _neg_time(stamp: str) -> tuple[int, ...]:
    # newest first without parsing: invert each character of the fixed-width ISO text
    return tuple(-ord(ch) for ch in stamp)


def touched(
    entry: RuntimeEntry, *, content: str | None = None, importance: int | None = None, now: str
) -> RuntimeEntry:
    return replace(
        entry,
        content=entry.content if content is None else content,
        importance=entry.importance if importance is None else importance,
        updated=now,
    )
