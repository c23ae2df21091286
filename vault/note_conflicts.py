"""Merge-conflict hunks in a note: git's marker lines, each side's lines, and their union.

A note git left with a conflict (a pull on a clone without memvault's merge driver, a rebase
stopped on a note, a person half-way through resolving by hand) looks like this:

    <<<<<<< HEAD
    - 09:12 Laptop: the release train leaves on Thursday. ^m-1f3a9c0d2e
    ||||||| base             (only with merge.conflictStyle=diff3 / zdiff3)
    =======
    - 09:40 Server: Morgan picked blue. ^m-77aa01c2d3
    >>>>>>> origin/main

Both sides' bullets stay memories while the markers are there: only the marker lines and the
base section (the common ancestor, which neither side holds any more) are hidden from the parse
(`hidden_in_hunk`, called by vault/note_blocks.py). Their hits are marked as in conflict
(`conflicted_ids`) and `memvault health` names the note until the markers are gone.

`resolve_hunks` is the union git's `merge=union` would make, made safe for memories: every line
of both sides, a bullet both sides hold (same block id, same text) once, and a hunk where one
block id carries two different texts left as it is (a person decides). `order_bullets` then puts
each run of memvault's own one-line bullets back in time order without touching a line. The
merge driver (vault/git_merge.py) and `memvault git resolve` both use them. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from zoneinfo import ZoneInfo

from memvault.vault.clock import TIME_PATTERN, bullet_instant
from memvault.vault.ids import BLOCK_ID_PATTERN, normalize_text

OURS_MARK, BASE_MARK, SPLIT_MARK, THEIRS_MARK = "<<<<<<<", "|||||||", "=======", ">>>>>>>"
#: what a line written by memvault looks like: `- HH:MM text ^id`, on one line at the top level
_ONE_LINE_BULLET = re.compile(
    rf"- (?P<time>{TIME_PATTERN})[ \t]+(?P<text>.*?)[ \t]+\^(?P<id>{BLOCK_ID_PATTERN})[ \t]*(?:\r?\n)?"
)
#: a one-line top-level bullet with a time, an id or not: what `order_bullets` may move (an
#: id-less bullet's derived id is its text's, so moving it changes no id)
_TIMED_LINE = re.compile(rf"- (?P<time>{TIME_PATTERN})[ \t]+\S.*(?:\r?\n)?")
_ANY_ID = re.compile(rf"[ \t]\^(?P<id>{BLOCK_ID_PATTERN})[ \t]*(?:\r?\n)?$")


@dataclass(frozen=True)
class Hunk:
    """One conflict hunk of a note's lines (0-based, end exclusive): [first, end)."""

    first: int
    end: int
    #: the lines of each side, as ranges of the note's lines; `theirs` is None in a hunk with no
    #: `=======` (cut short), and then nothing after `<<<<<<<` is known to be whose
    ours: range
    theirs: range | None
    base: range | None
    #: the `>>>>>>>` line is there (an unterminated hunk runs to the end of the note)
    terminated: bool


def is_marker(line: str) -> bool:
    """A line git writes around and inside a conflict hunk."""
    return line.startswith((OURS_MARK, BASE_MARK, THEIRS_MARK)) or line.rstrip("\r\n") == SPLIT_MARK


def has_markers(text: str) -> bool:
    return any(line.startswith((OURS_MARK, THEIRS_MARK)) for line in text.splitlines())


def read_hunk(lines, first: int, end: int) -> Hunk:
    """The sides of the hunk that starts on `first` (a `<<<<<<<` line) and ends before `end`."""
    terminated = end - 1 > first and lines[end - 1].startswith(THEIRS_MARK)
    stop = end - 1 if terminated else end
    base_at = split_at = None
    for index in range(first + 1, stop):
        line = lines[index]
        if split_at is None and base_at is None and line.startswith(BASE_MARK):
            base_at = index
        elif split_at is None and line.rstrip("\r\n") == SPLIT_MARK:
            split_at = index
            break
    ours_end = base_at if base_at is not None else (split_at if split_at is not None else stop)
    base = None if base_at is None else range(base_at + 1, split_at if split_at is not None else stop)
    theirs = None if split_at is None else range(split_at + 1, stop)
    return Hunk(first, end, range(first + 1, ours_end), theirs, base, terminated)


def hidden_in_hunk(lines, first: int, end: int) -> Iterator[int]:
    """The lines of a hunk a reader is not shown as memories: git's markers, the base section, and
    a line of theirs that repeats a memory of ours. A hunk cut short before its `=======` hides
    nothing more than its marker: its lines are kept."""
    hunk = read_hunk(lines, first, end)
    yield first
    if hunk.base is not None:
        yield hunk.base.start - 1
        yield from hunk.base
    if hunk.theirs is not None:
        yield hunk.theirs.start - 1
        # a memory both sides hold (same id, same text) is one memory, as the union makes it
        ours = {key for key in map(_bullet_key, (lines[i] for i in hunk.ours)) if key is not None}
        if ours:
            yield from (index for index in hunk.theirs if _bullet_key(lines[index]) in ours)
    if hunk.terminated:
        yield end - 1


def conflicted_ids(note) -> frozenset[str]:
    """The ids of the note's memories that stand inside a conflict hunk (`Note.conflicts`)."""
    if not note.conflicts:
        return frozenset()
    inside = [False] * len(note.lines)
    for first, end in note.conflicts:
        for index in range(first, end):
            inside[index] = True
    return frozenset(bullet.id for bullet, start in zip(note.bullets, note.starts, strict=True) if inside[start])


@dataclass(frozen=True)
class Resolution:
    lines: list[str]
    #: why each hunk left as it was could not be resolved, with its line (1-based)
    unresolved: tuple[str, ...]


def _bullet_key(line: str) -> tuple[str, str] | None:
    """(block id, normalised text) of a one-line bullet that carries an id, else None."""
    match = _ONE_LINE_BULLET.fullmatch(line)
    if match is not None:
        return match["id"], normalize_text(match["text"])
    found = _ANY_ID.search(line)
    if found is None or not line.lstrip().startswith(("- ", "* ", "+ ")):
        return None
    body = line[: found.start()].lstrip()[2:]
    body = re.sub(rf"^{TIME_PATTERN}[ \t]+", "", body)
    return found["id"], normalize_text(body)


def union_of_sides(ours: list[str], theirs: list[str]) -> list[str] | str:
    """Ours, then each line of theirs that ours lacks; a string saying why when one block id has
    two different texts (the person edited one memory two ways: memvault does not pick one)."""
    texts = {key[0]: key[1] for key in map(_bullet_key, ours) if key is not None}
    present = {line.rstrip("\r\n").rstrip() for line in ours}
    merged = list(ours)
    for line in theirs:
        key = _bullet_key(line)
        if key is not None and key[0] in texts:
            if texts[key[0]] != key[1]:
                return f"^{key[0]} holds different text on the two sides"
            continue  # the same memory on both sides: once
        if line.strip() and line.rstrip("\r\n").rstrip() in present:
            continue  # the same line (prose, or a bullet without an id) on both sides: once
        if key is not None:
            texts[key[0]] = key[1]
        present.add(line.rstrip("\r\n").rstrip())
        merged.append(line)
    if merged and ours and not merged[len(ours) - 1].endswith("\n") and len(merged) > len(ours):
        merged[len(ours) - 1] += "\n"  # ours ended the file without a newline, theirs follows it
    return merged


def resolve_hunks(lines: list[str]) -> Resolution:
    """Every conflict hunk replaced by the union of its sides, where that is safe (see above)."""
    out: list[str] = []
    unresolved: list[str] = []
    index = 0
    while index < len(lines):
        if not lines[index].startswith(OURS_MARK):
            out.append(lines[index])
            index += 1
            continue
        end = _hunk_end(lines, index)
        hunk = read_hunk(lines, index, end)
        why = None
        if not hunk.terminated or hunk.theirs is None:
            why = "the hunk is cut short (no ======= or >>>>>>> line)"
            merged: list[str] | str = why
        else:
            merged = union_of_sides([lines[i] for i in hunk.ours], [lines[i] for i in hunk.theirs])
        if isinstance(merged, str):
            unresolved.append(f"line {index + 1}: {merged}")
            out.extend(lines[index:end])
        else:
            out.extend(merged)
        index = end
    return Resolution(out, tuple(unresolved))


def _hunk_end(lines: list[str], first: int) -> int:
    """One past the `>>>>>>>` closing the hunk opened on `first` (the note's end when none does)."""
    for index in range(first + 1, len(lines)):
        if lines[index].startswith(THEIRS_MARK):
            return index + 1
    return len(lines)


def dedupe_bullets(lines: list[str], day: date | None = None, tz: ZoneInfo | None = None) -> list[str]:
    """A memvault bullet (one line, `^id`) held twice with the same text, as both machines'
    Remember of one fact makes it (the id is the content's), kept once: its earliest copy (by
    instant with the note's `day` and the vault's zone `tz`, as `order_bullets`)."""
    key = _time_key(day, tz)
    copies: dict[tuple[str, str], list[int]] = {}
    for index, line in enumerate(lines):
        match = _ONE_LINE_BULLET.fullmatch(line)
        if match is not None:
            copies.setdefault((match["id"], normalize_text(match["text"])), []).append(index)
    dropped = set()
    for places in copies.values():
        if len(places) > 1:
            keep = min(places, key=lambda place: (key(lines[place]), place))
            dropped.update(place for place in places if place != keep)
    return [line for index, line in enumerate(lines) if index not in dropped]


def order_bullets(lines: list[str], day: date | None = None, tz: ZoneInfo | None = None) -> list[str]:
    """Each run of one-line timed bullets (no other line in between, none continued on the next
    line) in time order; a stable sort, so bullets of one instant keep their order, and no line
    changes.

    With the note's `day` and the vault's zone `tz`, the order is the instants' (vault/clock.py:
    `09:30+05:30` is 04:00 UTC and comes before a bare `06:00` in Europe/Amsterdam; the two
    `01:30`s of a DST fold by their offsets). Without them, by wall time (HH:MM), as written."""
    key = _time_key(day, tz)
    out = list(lines)
    index = 0
    while index < len(out):
        end = index
        while end < len(out) and _in_run(out, end):
            end += 1
        if end - index > 1:
            run = out[index:end]
            newline = "\r\n" if run[0].endswith("\r\n") else "\n"
            last_has_newline = run[-1].endswith("\n")
            ended = [line if line.endswith("\n") else line + newline for line in run]
            ended.sort(key=key)
            if not last_has_newline:
                ended[-1] = ended[-1].rstrip("\r\n")
            out[index:end] = ended
        index = max(end, index + 1)
    return out


def _time_key(day: date | None, tz: ZoneInfo | None):
    """What orders two timed bullet lines: their instants when the day and zone are known."""
    if day is None or tz is None:
        return lambda line: _time_of(line)[:5]
    return lambda line: bullet_instant(day, _time_of(line), tz)


def _time_of(line: str) -> str:
    return _TIMED_LINE.fullmatch(line)["time"]


def _in_run(lines: list[str], index: int) -> bool:
    if _TIMED_LINE.fullmatch(lines[index]) is None:
        return False
    following = lines[index + 1] if index + 1 < len(lines) else ""
    return not (following.strip() and following[:1] in (" ", "\t"))  # an indented line continues it
