"""A note parsed from an earlier parse of it, as a whole parse would parse it.

`vault/note.py`'s `parse` keeps the last few parses (`_ParseCache`). A new text is parsed from
the one that shares the most lines with it: from the last memory they share at their start and,
where it can, only up to the first memory of the lines they share at their end, whose memories
it takes up again as they are (`_reparse_between`). Every result equals a whole parse
(`vault/note_blocks.py`): property tests in tests/test_note_format.py compare them.
"""

import bisect
import threading
from collections import Counter

from memvault.vault.layered_set import LayeredSet
from memvault.vault.note_blocks import (
    _BULLET_RE,
    _FRONTMATTER_SCAN_LIMIT,
    _ID_MARK_RE,
    BOM,
    Bullet,
    Note,
    _assign_ids,
    _conflict_hunks,
    _find_blocks,
    _Growing,
    _hidden_lines,
    _parse_blocks,
    _parse_lines,
    _Parsed,
    _repeated,
    _Tail,
    marked_ids,
)
from memvault.vault.sequences import common_prefix, common_suffix

#: notes up to this many characters are parsed once per distinct text (`parse` is pure and a Note
#: is frozen), and a text that shares its first lines with one parsed lately is parsed only from
#: the last memory that starts inside those shared lines (`_reparse`): an append reads the note
#: it plans with, writes, and reads it back, the index commit reads it once more, a person's
#: editor rewrites the note's last lines on every save, and a day's note of thousands of lines
#: costs tens of milliseconds to parse whole, which many agents appending to it paid on every write
_PARSE_CACHE_CHARS = 4 << 20
_PARSE_CACHE_NOTES = 8
#: and the cached texts hold at most this many characters in all (a few versions of a big note)
_PARSE_CACHE_TOTAL_CHARS = 16 << 20
#: smaller texts are parsed whole, in well under a millisecond, and never cached: the small texts an
#: owner parses between two saves of the day's note (new lines, one-turn notes) evicted its versions
_PARSE_CACHE_SMALLEST = 4096
#: how many of the newest cached parses a changed text is compared with, line by line, and how
#: few lines past the shared ones end the search (each comparison costs a day's note's lines)
_PREFIX_BASES = 3
_CLOSE_ENOUGH_LINES = 64


class _ParseCache:
    """The last few parses, newest first. Found by comparing texts (a length, then one C
    comparison), never by hashing them: a day's note read a few times per append would
    otherwise be hashed whole on every read."""

    def __init__(self, size: int, smallest: int = _PARSE_CACHE_SMALLEST):
        self._size = size
        self.smallest = smallest
        #: (text, its parse, whether it holds a rare line break), newest first
        self._entries: list[tuple[str, _Parsed, bool]] = []
        self._lock = threading.Lock()

    def parse(self, text: str) -> Note:
        if len(text) < self.smallest:
            return _parse_lines(tuple(text.splitlines(keepends=True))).note
        with self._lock:
            bases = list(self._entries)
        for cached, parsed, _ in bases:
            if len(cached) == len(text) and cached == text:
                if parsed is not bases[0][1]:
                    with self._lock:  # read last, first: a person's save is most likely of the version read last
                        self._entries.sort(key=lambda entry: entry[1] is not parsed)
                return parsed.note
        entry, rare = _reparse_from_best(bases, text)
        if entry is None:
            entry = _parse_lines(tuple(text.splitlines(keepends=True)))
        with self._lock:
            entries, total = [(text, entry, rare)], len(text)
            for known in self._entries:
                if len(entries) == self._size or total + len(known[0]) > _PARSE_CACHE_TOTAL_CHARS:
                    break
                if known[0] != text:
                    entries.append(known)
                    total += len(known[0])
            self._entries = entries
        return entry.note


#: line breaks other than CR and LF (str.splitlines splits at them): a note holding one is parsed
#: whole, never from an earlier parse (the block rules meet them rarely enough not to be taught
#: them: a property test found a parse from an earlier one that differed at U+2028)
_RARE_BREAKS = "\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def _reparse_from_best(bases: list[tuple[str, _Parsed, bool]], text: str) -> tuple[_Parsed | None, bool]:
    """`text` parsed from the cached parse sharing the most first lines with it (or None), and
    whether `text` holds a rare line break (such a text is never parsed from an earlier parse).
    `bases`: (text, its parse, whether it holds a rare line break), newest first."""
    for base_text, base, base_rare in bases:  # the usual case, an append of whole lines: one C comparison
        if base_text.endswith("\n") and text.startswith(base_text):
            # a line break ends the base, so its lines and the new ones' are the whole's (only
            # what was appended is split, and looked at for rare breaks: a note of thousands of
            # lines costs what it gained)
            added = text[len(base_text) :]
            if base_rare or _has_rare_break(added):
                return None, True
            lines = base.note.lines + tuple(added.splitlines(keepends=True))
            return _reparse(base, lines, len(base.note.lines)), False
    if _has_rare_break(text):
        return None, True
    lines = tuple(text.splitlines(keepends=True))
    best, shared, suffix, keep = None, 0, 0, 0
    for _, base, _ in bases[:_PREFIX_BASES]:  # newest first: an editor saves over a version just read
        common, common_end, base_keep = _shared_with(base.note.lines, lines)
        if common + common_end > shared + suffix:
            best, shared, suffix, keep = base, common, common_end, base_keep
        if len(lines) - shared - suffix <= _CLOSE_ENOUGH_LINES:
            break  # no older version can save more than parsing these few lines
    if best is not None and keep < len(best.note.lines):
        best = _reparse(best, best.note.lines[:keep], keep)  # its last few lines dropped: cheap
    return (None if best is None else _reparse(best, lines, shared, suffix)), False


def _shared_with(base: tuple[str, ...], lines: tuple[str, ...]) -> tuple[int, int, int]:
    """(the first lines `lines` shares with `base`, the last ones, how many of base's lines that
    counts from). An editor that saves from a buffer read a moment ago drops the lines memvault
    appended since, so `lines` may end with what `base` held a few lines before its own end."""
    common = common_prefix(base, lines)
    if common == 0:
        return 0, 0, len(base)
    common_end = common_suffix(base, lines, common)
    if common_end or not lines:
        return common, common_end, len(base)
    for keep in range(len(base) - 1, max(len(base) - _CLOSE_ENOUGH_LINES, common) - 1, -1):
        if base[keep - 1] == lines[-1]:  # `lines` may end where `base`'s first `keep` lines do
            shared = min(common, keep)
            return shared, common_suffix(base[:keep], lines, shared), keep
    return common, 0, len(base)


def _has_rare_break(text: str) -> bool:
    return any(rare in text for rare in _RARE_BREAKS)  # a C scan each, not a regular expression's loop


def _reparse(base: _Parsed, lines: tuple[str, ...], shared: int, suffix: int = 0) -> _Parsed | None:
    """Parse `lines`, whose first `shared` and last `suffix` lines are `base`'s, from a line where
    parsing `base` stood in the open (outside every fence, comment and conflict hunk, between two
    blocks) and whose state is known, or None when there is no such line: the result equals a
    whole parse. Where it can, the parse stops below the lines that changed and takes base's
    memories there up again (`_reparse_between`)."""
    note = base.note
    frontmatter_settled = (note.body_start > 0 or not note.lines or len(note.lines) >= _FRONTMATTER_SCAN_LIMIT
                           or note.lines[0].removeprefix(BOM).rstrip("\r\n") != "---")  # fmt: skip
    if not frontmatter_settled or shared == 0:
        return None
    cut = _cut_line(base, lines, shared)
    if cut is None:
        return None
    line, kept, tail = cut
    if suffix and (between := _reparse_between(base, lines, line, kept, tail, suffix)) is not None:
        return between
    prefix_conflicts = tuple(hunk for hunk in note.conflicts if hunk[0] < line)
    conflicts = _conflict_hunks(lines, line)
    hidden, open_at_end, region_open = _hidden_lines(lines, line, conflicts)
    found, duplicates, new_tail = _parse_blocks(lines, line, hidden, tail)
    # the repeated ids are in their memories' order: those of the memories left behind are the last
    left_behind = sum(1 for b in note.bullets[kept:] if b.block_id is not None and b.id != b.block_id)
    kept_duplicates = note.duplicate_ids[: len(note.duplicate_ids) - left_behind]
    kept_hidden = note.hidden_lines if line == len(note.lines) else frozenset(i for i in note.hidden_lines if i < line)
    reparsed = Note(lines, note.body_start, note.frontmatter, note.bullets[:kept] + tuple(found.bullets),
                    prefix_conflicts + conflicts, kept_duplicates + tuple(duplicates), open_at_end,
                    kept_hidden | frozenset(i for i in range(line, len(lines)) if hidden[i]),
                    note.starts[:kept] + tuple(found.starts), note.ends[:kept] + tuple(found.ends))  # fmt: skip
    _carry_ids_on(note, reparsed, note.bullets[kept:], found.bullets)
    if "marked_ids" in note.__dict__:
        reparsed.__dict__["marked_ids"], reparsed.__dict__["_marked_twice"] = _marks_carried_on(note, lines, line)
    return _Parsed(reparsed, new_tail, base.region_open[:line] + bytes(region_open[line:]))


def _carry_ids_on(note: Note, reparsed: Note, left: tuple[Bullet, ...], added: list[Bullet]) -> None:
    """`by_block_id` of a note parsed from `note`, when `note` has it: `note`'s but for the
    memories `left` behind (a C-speed copy, then a step each), with the `added` ones'."""
    known = note.__dict__.get("by_block_id")
    if known is None:
        return
    found = dict(known)
    for memory in left:
        if found.get(memory.block_id) is memory:
            del found[memory.block_id]
    for memory in added:
        if memory.block_id:
            found.setdefault(memory.block_id, memory)
    reparsed.__dict__["by_block_id"] = found


def _reparse_between(base: _Parsed, lines: tuple[str, ...], line: int, kept: int, tail: _Tail,
                     suffix: int) -> _Parsed | None:  # fmt: skip
    """`_reparse` of `lines` from `line` (after base's first `kept` memories, in state `tail`)
    that stops at the first of base's memories within the last `suffix` lines and takes them up
    again as they are (a memory holds no line: only `Note.starts` and `ends` shift), or None
    when they would not parse the same there: a person who adds a line above a day's 20,000
    memories costs the lines changed.

    They parse the same when both parses stand there between blocks, in the open, under the same
    heading, and their ids come out the same: no id given to the changed lines' memories is one
    base gives anywhere else, no id that base's changed lines gave (and these do not) is one a
    memory below repeats, and no id-less text counted a different number of times in the changed
    lines is counted below (each text's count, at base's end and here, says so without a walk).
    A note where a derived id was ever taken already (astronomically rare) is parsed on."""
    note = base.note
    if note.open_at_end is not None or tail.bumped:
        return None  # what is left open is named by its line
    by = len(lines) - len(note.lines)
    first = bisect.bisect_left(note.starts, len(note.lines) - suffix)
    if first == len(note.bullets) or base.region_open[note.starts[first]]:
        return None
    old_stop = note.starts[first]
    stop = old_stop + by
    conflicts = _conflict_hunks(lines[:stop], line)
    hidden, open_at_stop, region_open = _hidden_lines(lines[:stop], line, conflicts)
    if open_at_stop is not None:
        return None
    hidden.extend([False] * (len(lines) - stop))  # read below `stop` only by a block running on over it
    found, heading, end = _find_blocks(lines, line, stop, hidden, tail.heading)
    if end != stop or heading != note.bullets[first].heading:
        return None
    seen, occurrences = _Growing(tail.seen), dict(tail.occurrences)
    bullets, duplicates, bumped = _assign_ids(found.bullets, seen, occurrences)
    left = note.bullets[kept:first]
    gone = {memory.id for memory in left}
    counted = _ids_below_stand(base, tail, left, bullets, gone, seen.added)
    if counted is None:
        return None
    below = note.bullets[first:]
    duplicates_left = duplicates_below = 0
    if note.duplicate_ids:
        duplicates_left = sum(1 for memory in left if memory.block_id is not None and memory.id != memory.block_id)
        duplicates_below = sum(1 for memory in below if memory.block_id is not None and memory.id != memory.block_id)
    above = len(note.duplicate_ids) - duplicates_left - duplicates_below
    reparsed = Note(
        lines, note.body_start, note.frontmatter, note.bullets[:kept] + tuple(bullets) + below,
        tuple(hunk for hunk in note.conflicts if hunk[0] < line) + conflicts
        + tuple((start + by, end + by) for start, end in note.conflicts if start >= old_stop),
        note.duplicate_ids[:above] + tuple(duplicates)
        + note.duplicate_ids[len(note.duplicate_ids) - duplicates_below:],
        None,
        frozenset(i for i in note.hidden_lines if i < line) | frozenset(i for i in range(line, stop) if hidden[i])
        | frozenset(i + by for i in note.hidden_lines if i >= old_stop),
        note.starts[:kept] + tuple(found.starts) + _shifted(note.starts[first:], by),
        note.ends[:kept] + tuple(found.ends) + _shifted(note.ends[first:], by),
    )  # fmt: skip
    _carry_ids_on(note, reparsed, left, bullets)
    if "marked_ids" in note.__dict__:
        reparsed.__dict__["marked_ids"], reparsed.__dict__["_marked_twice"] = _marks_carried_on(
            note, lines, line, old_stop, stop
        )
    occurrences = dict(base.tail.occurrences)
    for text, more in counted.items():
        if more:
            occurrences[text] = occurrences.get(text, 0) - more
            if not occurrences[text]:
                del occurrences[text]
    new_tail = _Tail(base.tail.heading, base.tail.seen.difference(gone - seen.added) | (seen.added - gone),
                     occurrences, bumped)  # fmt: skip
    region_open = base.region_open[:line] + bytes(region_open[line:stop]) + base.region_open[old_stop:]
    return _Parsed(reparsed, new_tail, region_open)


def _ids_below_stand(base: _Parsed, tail: _Tail, left: tuple[Bullet, ...], bullets: list[Bullet], gone: set[str],
                     given: set[str]) -> Counter | None:  # fmt: skip
    """Whether base's memories below its changed memories (`left`, which gave the ids `gone`)
    keep their ids below the new lines' memories (`bullets`, which gave `given`; `tail`: the
    state above both): how many more times each id-less text came in `left` than in `bullets`,
    or None when an id below would change."""
    if any(new_id in base.tail.seen for new_id in given - gone):
        return None  # a memory below holds it (or a repeated id there was given it)
    if base.note.duplicate_ids and not (gone - given).isdisjoint(base.note.duplicate_ids):
        return None  # a memory below repeats it, and would now keep it
    counted_left = Counter(memory.text for memory in left if memory.id != memory.block_id)
    counted = Counter(counted_left)
    counted.subtract(memory.text for memory in bullets if memory.id != memory.block_id)
    for text, more in counted.items():
        below = base.tail.occurrences.get(text, 0) - tail.occurrences.get(text, 0) - counted_left[text]
        if more and below:
            return None  # a memory below derives its id from how often its text came before it
    return counted


def _shifted(places: tuple[int, ...], by: int) -> tuple[int, ...]:
    return places if by == 0 else tuple(place + by for place in places)


def _cut_line(base: _Parsed, lines: tuple[str, ...], shared: int) -> tuple[int, int, _Tail] | None:
    """Where to resume: (line, how many of base's memories come before it, the state there)."""
    note = base.note

    def ends_the_block_above(index: int) -> bool:  # a changed first line must not continue the block above
        if index < shared:
            return True
        if index >= len(lines):
            return False
        first = lines[index].rstrip("\r\n")
        return not first.strip() or _BULLET_RE.fullmatch(first) is not None

    count = len(note.lines)
    if (shared == count and note.lines[-1].endswith("\n") and note.open_at_end is None
            and ends_the_block_above(count)):  # fmt: skip
        return count, len(note.bullets), base.tail  # `lines` extends base by whole lines
    starting_inside = bisect.bisect_right(note.starts, shared)
    for kept in range(starting_inside - 1, max(starting_inside - 8, 0) - 1, -1):  # a few memories back at most
        line = note.starts[kept]
        if line >= note.body_start and not base.region_open[line] and ends_the_block_above(line):
            return line, kept, _tail_at(base, kept, note.bullets[kept].heading)
    return None


def _tail_at(base: _Parsed, kept: int, heading: str | None) -> _Tail:
    """The state after base's first `kept` memories, from whichever side is shorter: what those
    memories gave (a person's line near the top of a day's 20,000 memories), or the state at its
    end less what its later memories added (an editor rewrote the note's last lines). Every
    assigned id is unique within a note (`_assign_ids`), and an id differing from the memory's own
    (absent or repeated) was derived from its text's occurrence count."""
    bullets = base.note.bullets
    if kept <= len(bullets) - kept:
        occurrences: dict[str, int] = {}
        for bullet in bullets[:kept]:
            if bullet.id != bullet.block_id:
                occurrences[bullet.text] = occurrences.get(bullet.text, 0) + 1
        return _Tail(heading, LayeredSet(bullet.id for bullet in bullets[:kept]), occurrences, base.tail.bumped)
    later = bullets[kept:]
    occurrences = dict(base.tail.occurrences)
    for bullet in later:
        if bullet.id != bullet.block_id:
            occurrences[bullet.text] -= 1
            if not occurrences[bullet.text]:
                del occurrences[bullet.text]
    return _Tail(heading, base.tail.seen.difference(bullet.id for bullet in later), occurrences, base.tail.bumped)


def _marks_carried_on(note: Note, lines: tuple[str, ...], line: int, old_stop: int | None = None,
                      stop: int | None = None) -> tuple[LayeredSet, frozenset[str]]:  # fmt: skip
    """The marked ids of `lines`, which are `note`'s but from `line` up to `stop` (`old_stop` in
    `note`; both None: to the end), from `note`'s own marks: the marks of its changed lines leave,
    the new lines' marks join. A mark is within one line, so the marks of a text are those of its
    parts together.

    Which marks leave costs what the changed lines cost, because the note also knows which ids
    it marks more than once (`_marked_twice`, a superset: it only asks for a look): an id its
    changed lines held once is in none of the lines kept. Only an id marked more than once is
    looked for in the kept lines, and a person seldom repeats one."""
    marks, twice = note.__dict__["marked_ids"], note.__dict__["_marked_twice"]
    added = _ID_MARK_RE.findall("".join(lines[line:stop]))
    if line < (len(note.lines) if old_stop is None else old_stop):
        gone = frozenset(_ID_MARK_RE.findall("".join(note.lines[line:old_stop])))
        unsure = gone & twice
        if unsure:
            kept = marked_ids("".join(lines[:line]) + ("".join(lines[stop:]) if stop is not None else ""))
            gone = (gone - unsure) | (unsure - kept)
        if gone:
            marks = marks.difference(gone)
    return marks | added, twice | _repeated(added, marks)
