"""add / replace / remove as data, and how replace/remove find their entry. Pure: no I/O.

Matching follows the spec: within the requested target, a unique *exact* full-content match
wins; only when there is no exact match is a unique substring used. Two identical entries (a
person can create them by hand) make the exact match ambiguous, and that is refused rather
than resolved by position, because either choice could edit the wrong fact.
"""

from __future__ import annotations

from dataclasses import dataclass

from memvault.vault.errors import InvalidRecord
from memvault.vault.ids import normalize_text
from memvault.vault.runtime.entries import (
    DEFAULT_IMPORTANCE,
    RuntimeEntry,
    check_importance,
    check_target,
    normalize_entry,
    touched,
)

ADD, REPLACE, REMOVE = "add", "replace", "remove"
_SHOWN_CANDIDATES = 3


class NoMatch(InvalidRecord):
    code = "no_match"


class AmbiguousMatch(InvalidRecord):
    code = "ambiguous_match"


@dataclass(frozen=True)
class Mutation:
    kind: str
    target: str
    content: str | None = None  # the new content (add, replace), normalised
    old_text: str | None = None  # what replace/remove look for, normalised
    importance: int | None = None  # add: the importance; replace: a new one, or keep

    def describe(self) -> str:
        return f"{self.kind} in {self.target}"


def make_add(target: str, content: str, importance: int = DEFAULT_IMPORTANCE) -> Mutation:
    return Mutation(ADD, check_target(target), normalize_entry(content), importance=check_importance(importance))


def make_replace(target: str, old_text: str, content: str, importance: int | None = None) -> Mutation:
    return Mutation(
        REPLACE,
        check_target(target),
        normalize_entry(content, "the new text"),
        _needle(old_text),
        None if importance is None else check_importance(importance),
    )


def make_remove(target: str, old_text: str) -> Mutation:
    return Mutation(REMOVE, check_target(target), old_text=_needle(old_text))


def _needle(old_text: object) -> str:
    if not isinstance(old_text, str):
        raise InvalidRecord(f"old_text must be text, not {type(old_text).__name__}")
    needle = normalize_text(old_text)
    if not needle:
        raise InvalidRecord("old_text is empty: pass the entry's text (or a unique part of it)")
    return needle


def find_match(entries: list[RuntimeEntry], mutation: Mutation) -> int:
    """Index of the one entry `mutation.old_text` names, or NoMatch / AmbiguousMatch."""
    needle = mutation.old_text or ""
    exact = [i for i, entry in enumerate(entries) if entry.content == needle]
    if len(exact) == 1:
        return exact[0]
    if len(exact) > 1:
        raise AmbiguousMatch(
            f"{len(exact)} {mutation.target} entries are exactly {_short(needle)}: duplicate entries are"
            f" ambiguous. Fix: edit runtime/{mutation.target}.md by hand to remove the extra copy"
        )
    partial = [i for i, entry in enumerate(entries) if needle in entry.content]
    if len(partial) == 1:
        return partial[0]
    if not partial:
        raise NoMatch(
            f"no {mutation.target} entry contains {_short(needle)}: nothing was changed."
            f" Fix: check the text with `memvault runtime show`"
        )
    shown = "; ".join(_short(entries[i].content) for i in partial[:_SHOWN_CANDIDATES])
    raise AmbiguousMatch(
        f"{len(partial)} {mutation.target} entries contain {_short(needle)} ({shown}"
        f"{'; ...' if len(partial) > _SHOWN_CANDIDATES else ''}): pass more of the text so one entry matches"
    )


def _short(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def is_duplicate(entries: list[RuntimeEntry], content: str, skip: int | None = None) -> bool:
    return any(entry.content == content for i, entry in enumerate(entries) if i != skip)


def apply(
    entries: list[RuntimeEntry], mutation: Mutation, match: int | None, now: str
) -> tuple[list[RuntimeEntry], str]:
    """(the target's new entries, receipt status). `match` is `find_match`'s answer for replace/remove."""
    if mutation.kind == ADD:
        if is_duplicate(entries, mutation.content or ""):
            return list(entries), "duplicate"
        new = RuntimeEntry(mutation.target, mutation.content or "", mutation.importance or DEFAULT_IMPORTANCE, now, now)
        return [*entries, new], "added"
    assert match is not None
    if mutation.kind == REMOVE:
        return entries[:match] + entries[match + 1 :], "removed"
    old = entries[match]
    if old.content == mutation.content and mutation.importance in (None, old.importance):
        return list(entries), "unchanged"
    if is_duplicate(entries, mutation.content or "", skip=match):
        raise InvalidRecord(
            f"another {mutation.target} entry already reads {_short(mutation.content or '')}:"
            f" remove this one instead (`memvault runtime remove`)"
        )
    updated = touched(old, content=mutation.content, importance=mutation.importance, now=now)
    return entries[:match] + [updated] + entries[match + 1 :], "replaced"
