"""Pure parse/render of `daily/` and `audit/` notes.

A note is kept as its exact lines, so `render(parse(text)) == text` for every file, whoever
wrote it: memvault edits notes by appending whole lines and never reflows a person's prose or
frontmatter. Parsing finds the memories a person sees (docs/format.md, "What is indexed"):

* list items (top-level and nested), with their indented and lazy continuation lines;
* prose paragraphs, and the text of block quotes and callouts (`> [!note]`);

and skips what a person does not see in reading view or has not settled: code fences,
Obsidian comments (`%% … %%`), HTML comments and merge-conflict hunks.

A bullet line written by memvault looks like this:

    - 14:03 Morgan chose blue as the deployment color. ^m-1f3a9c0d2e

mistune has no source positions, so structure is found line by line here and mistune turns
each memory's inline markdown into the plain text that is indexed (see `plain_text`).
"""

import bisect
import re
import threading
from collections import Counter
from collections.abc import Container
from dataclasses import dataclass, field, replace
from functools import cached_property

from memvault.vault.clock import TIME_PATTERN
from memvault.vault.ids import BLOCK_ID_PATTERN, derived_id, is_valid_block_id
from memvault.vault.layered_set import LayeredSet

#: a daily note is prose; a bigger file is not indexed (health says so) and memvault refuses to
#: append to it, since a line written there would not be searchable
MAX_NOTE_BYTES = 16 * 1024 * 1024

_BULLET_RE = re.compile(r"(?P<indent>[ \t]*)(?P<marker>[-*+]|\d{1,9}[.)])(?:[ \t]+(?P<rest>.*?))?[ \t]*")
_TIME_PREFIX_RE = re.compile(rf"(?P<time>{TIME_PATTERN})[ \t]+(?P<body>.*)")
_BLOCK_ID_SUFFIX_RE = re.compile(rf"(?P<body>.*?)[ \t]+\^(?P<id>{BLOCK_ID_PATTERN})")
_FENCE_RE = re.compile(r" {0,3}(?P<fence>`{3,}|~{3,})")
_HEADING_RE = re.compile(r" {0,3}#{1,6}(?:[ \t]+(?P<title>.*?))?[ \t#]*")
_RULE_RE = re.compile(r" {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})")
_QUOTE_RE = re.compile(r" {0,3}>[ \t]?(?P<rest>.*)")
_CALLOUT_RE = re.compile(r"\[![^\]]*\][+-]?[ \t]*(?P<title>.*)")
_CONFLICT_START, _CONFLICT_END = "<<<<<<<", ">>>>>>>"
_COMMENT_CLOSE = {"%%": "%%", "<!--": "-->"}
_FRONTMATTER_SCAN_LIMIT = 500
BOM = "\ufeff"


@dataclass(frozen=True)
class Bullet:
    """One memory: a list item, a paragraph or a quote/callout. Lines are 0-based, end exclusive."""

    first_line: int
    end_line: int
    indent: str
    time: str | None
    text: str
    block_id: str | None
    id: str
    heading: str | None = None
    kind: str = "bullet"  # "bullet" | "paragraph" | "quote"

    @property
    def has_explicit_id(self) -> bool:
        return self.block_id is not None


@dataclass(frozen=True)
class Note:
    lines: tuple[str, ...]
    body_start: int = 0
    frontmatter: dict[str, str] = field(default_factory=dict)
    bullets: tuple[Bullet, ...] = ()
    conflicts: tuple[tuple[int, int], ...] = ()
    duplicate_ids: tuple[str, ...] = ()
    #: why a line appended at the end would not be searchable ("an unclosed code fence opened on
    #: line 7"), or None
    open_at_end: str | None = None
    #: 0-based indexes of lines hidden from a reader (fences, comments, conflict hunks)
    hidden_lines: frozenset[int] = frozenset()
    #: for a note parsed from earlier versions of it: runs of their memories it holds, moved but
    #: otherwise the same (`Moved`), the newest version's first, a few at most
    moved: "tuple[Moved, ...]" = field(default=(), compare=False, repr=False)

    @property
    def has_conflicts(self) -> bool:
        return bool(self.conflicts)

    @cached_property
    def by_block_id(self) -> dict[str, Bullet]:
        """Each memory with an explicit block id, by that id (the first, where a person repeated
        one). Made once per parsed note: a batch of appends to a day's note of thousands of
        memories asks it for every item."""
        found: dict[str, Bullet] = {}
        for memory in self.bullets:
            if memory.block_id:
                found.setdefault(memory.block_id, memory)
        return found

    @cached_property
    def marked_ids(self) -> LayeredSet:
        """Every block id the note carries as `^id` anywhere, searchable or not (`marked_ids`).
        Made once per parsed note, and carried on to a note parsed from this one (`_reparse`):
        an append checks that no hidden copy of its id is there, on every append, and the repair
        after a person's save of the day's note asks which of memvault's lines it dropped."""
        found = _ID_MARK_RE.findall("".join(self.lines))
        marks = frozenset(found)
        self.__dict__["_marked_twice"] = frozenset() if len(marks) == len(found) else _repeated(found)
        return LayeredSet(marks)

    @property
    def newline(self) -> str:
        """The note's line ending (its first line's), so an appended line matches the person's."""
        for line in self.lines:
            if line.endswith("\r\n"):
                return "\r\n"
            if line.endswith("\n"):
                return "\n"
        return "\n"


@dataclass(frozen=True)
class Moved:
    """`count` of a note's memories from its `to`-th on are an earlier version's from its
    `first`-th on (`before`: that version's memories), each `by` lines further down (up when
    negative), otherwise the same."""

    before: tuple[Bullet, ...]
    first: int
    to: int
    by: int
    count: int

    def within(self, kept: int) -> "Moved | None":
        """This run, for a note that keeps only the first `kept` memories of this one's."""
        count = min(self.count, kept - self.to)
        return None if count <= 0 else Moved(self.before, self.first, self.to, self.by, count)

    def then(self, later: "Moved") -> "Moved | None":
        """The run of this one's earlier memories in a later version (`later`: run of this
        note's memories there), or None when none is in both."""
        start, end = max(self.to, later.first), min(self.to + self.count, later.first + later.count)
        if start >= end:
            return None
        return Moved(self.before, self.first + start - self.to, later.to + start - later.first, self.by + later.by,
                     end - start)  # fmt: skip


#: how many earlier versions a note keeps runs of (`Note.moved`)
_MOVED_VERSIONS = 3


def _runs_kept(runs) -> tuple[Moved, ...]:
    return tuple(run for run in runs if run is not None)[:_MOVED_VERSIONS]


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


@dataclass(frozen=True)
class _Tail:
    """What parsing the lines after a note's end needs to know of it: the heading in force and
    the ids given so far (explicit and derived, and how often each id-less text was seen)."""

    heading: str | None
    seen: LayeredSet  # extended by a parse of appended lines without being copied
    occurrences: dict[str, int]
    #: whether a derived id anywhere in the note was taken already and the next one given instead
    #: (astronomically rare, and then its memories below an edit are never taken up again as
    #: they were: `_reparse_between`)
    bumped: bool = False


@dataclass(frozen=True)
class _Parsed:
    note: Note
    tail: _Tail
    #: region_open[i] is 1 where a fence, comment or conflict hunk is open as line i starts
    region_open: bytes


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


_cache = _ParseCache(_PARSE_CACHE_NOTES)


def parse(text: str) -> Note:
    """Parse a note. Never raises: odd markdown is still a note, just with fewer memories."""
    if len(text) <= _PARSE_CACHE_CHARS:
        return _cache.parse(text)
    return _parse_lines(tuple(text.splitlines(keepends=True))).note


def parse_ahead(text: str) -> None:
    """Parse the text of a note memvault just wrote, when a text of its size is cached, so that a
    later version of it (a person's save) is parsed from this one: a note bigger than the cache
    takes would be parsed whole, and a small one costs little either way."""
    if _cache.smallest <= len(text) <= _PARSE_CACHE_CHARS:
        parse(text)


def _parse_lines(lines: tuple[str, ...]) -> _Parsed:
    body_start, frontmatter = _parse_frontmatter(lines)
    conflicts = _conflict_hunks(lines, body_start)
    hidden, open_at_end, region_open = _hidden_lines(lines, body_start, conflicts)
    bullets, duplicates, tail = _parse_blocks(lines, body_start, hidden)
    note = Note(lines, body_start, frontmatter, tuple(bullets), conflicts, tuple(duplicates), open_at_end,
                frozenset(i for i, masked in enumerate(hidden) if masked))  # fmt: skip
    return _Parsed(note, tail, bytes(region_open))


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
            added = text[len(base_text):]
            if base_rare or _has_rare_break(added):
                return None, True
            lines = base.note.lines + tuple(added.splitlines(keepends=True))
            return _reparse(base, lines, len(base.note.lines)), False
    if _has_rare_break(text):
        return None, True
    lines = tuple(text.splitlines(keepends=True))
    best, shared, suffix = None, 0, 0
    for _, base, _ in bases[:_PREFIX_BASES]:  # newest first: an editor saves over a version just read
        common = common_prefix(base.note.lines, lines)
        if common == 0:
            continue
        common_end = common_suffix(base.note.lines, lines, common)
        if common + common_end > shared + suffix:
            best, shared, suffix = base, common, common_end
        if len(lines) - shared - suffix <= _CLOSE_ENOUGH_LINES:
            break  # no older version can save more than parsing these few lines
    return (None if best is None else _reparse(best, lines, shared, suffix)), False


def _has_rare_break(text: str) -> bool:
    return any(rare in text for rare in _RARE_BREAKS)  # a C scan each, not a regular expression's loop


def common_prefix(old: tuple, new: tuple) -> int:
    """How many leading items two tuples share, by halving: each step is one C comparison of
    slices (an item identical in both compares equal without a call)."""
    limit = min(len(old), len(new))
    if old[:limit] == new[:limit]:
        return limit
    low, high = 0, limit  # old[:low] == new[:low] and old[:high] != new[:high]: halve (tuple == is C)
    while high - low > 1:
        middle = (low + high) // 2
        if old[low:middle] == new[low:middle]:
            low = middle
        else:
            high = middle
    return low


def common_suffix(old: tuple, new: tuple, prefix: int = 0) -> int:
    """How many trailing items two tuples share beyond the `prefix` leading ones they share, by
    halving as `common_prefix` does."""
    limit, old_end, new_end = min(len(old), len(new)) - prefix, len(old), len(new)
    if limit <= 0:
        return 0
    if old[old_end - limit:] == new[new_end - limit:]:
        return limit
    low, high = 0, limit  # the last `low` items are shared, the last `high` are not
    while high - low > 1:
        middle = (low + high) // 2
        if old[old_end - middle:old_end - low] == new[new_end - middle:new_end - low]:
            low = middle
        else:
            high = middle
    return low


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
    bullets, duplicates, new_tail = _parse_blocks(lines, line, hidden, tail)
    kept_bullets = note.bullets[:kept]
    # the repeated ids are in their memories' order: those of the memories left behind are the last
    left_behind = sum(1 for b in note.bullets[kept:] if b.block_id is not None and b.id != b.block_id)
    kept_duplicates = note.duplicate_ids[: len(note.duplicate_ids) - left_behind]
    kept_hidden = note.hidden_lines if line == len(note.lines) else frozenset(i for i in note.hidden_lines if i < line)
    reparsed = Note(lines, note.body_start, note.frontmatter, kept_bullets + tuple(bullets),
                    prefix_conflicts + conflicts, kept_duplicates + tuple(duplicates), open_at_end,
                    kept_hidden | frozenset(i for i in range(line, len(lines)) if hidden[i]),
                    _runs_kept(run.within(kept) for run in note.moved))  # fmt: skip
    _carry_ids_on(note, reparsed, note.bullets[kept:], bullets)
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
    again, moved by the lines gained or lost above them, or None when they would not parse the
    same there: a person who adds a line above a day's 20,000 memories costs the lines changed.

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
    first = bisect.bisect_left(note.bullets, len(note.lines) - suffix, key=lambda bullet: bullet.first_line)
    if first == len(note.bullets) or base.region_open[note.bullets[first].first_line]:
        return None
    old_stop = note.bullets[first].first_line
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
    bullets, duplicates, bumped = _assign_ids(found, seen, occurrences)
    left = note.bullets[kept:first]
    gone = {memory.id for memory in left}
    counted = _ids_below_stand(base, tail, left, bullets, gone, seen.added)
    if counted is None:
        return None
    moved = note.bullets[first:] if by == 0 else tuple(_moved(memory, by) for memory in note.bullets[first:])
    duplicates_left = duplicates_below = 0
    if note.duplicate_ids:
        duplicates_left = sum(1 for memory in left if memory.block_id is not None and memory.id != memory.block_id)
        duplicates_below = sum(1 for memory in moved if memory.block_id is not None and memory.id != memory.block_id)
    above = len(note.duplicate_ids) - duplicates_left - duplicates_below
    reparsed = Note(
        lines, note.body_start, note.frontmatter, note.bullets[:kept] + tuple(bullets) + moved,
        tuple(hunk for hunk in note.conflicts if hunk[0] < line) + conflicts
        + tuple((start + by, end + by) for start, end in note.conflicts if start >= old_stop),
        note.duplicate_ids[:above] + tuple(duplicates) + note.duplicate_ids[len(note.duplicate_ids) - duplicates_below:],
        None,
        frozenset(i for i in note.hidden_lines if i < line) | frozenset(i for i in range(line, stop) if hidden[i])
        | frozenset(i + by for i in note.hidden_lines if i >= old_stop),
        _runs_kept(_runs_on(note, Moved(note.bullets, first, kept + len(bullets), by, len(note.bullets) - first),
                            kept)),
    )  # fmt: skip
    if by == 0:  # the memories below are base's own: they keep their places in by_block_id
        _carry_ids_on(note, reparsed, left, bullets)
    if "marked_ids" in note.__dict__:
        reparsed.__dict__["marked_ids"], reparsed.__dict__["_marked_twice"] = _marks_carried_on(
            note, lines, line, old_stop, stop)
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


def _runs_on(note: Note, below: Moved, kept: int):
    """The runs of earlier versions' memories in a note parsed from `note`, which keeps `note`'s
    first `kept` memories as they are and takes those of run `below` up again, moved."""
    yield below
    for run in note.moved:
        yield run.within(kept)
        yield run.then(below)


def _moved(memory: Bullet, by: int) -> Bullet:
    return Bullet(memory.first_line + by, memory.end_line + by, memory.indent, memory.time, memory.text,
                  memory.block_id, memory.id, memory.heading, memory.kind)  # fmt: skip


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
    starting_inside = bisect.bisect_right(note.bullets, shared, key=lambda bullet: bullet.first_line)
    for kept in range(starting_inside - 1, max(starting_inside - 8, 0) - 1, -1):  # a few memories back at most
        line = note.bullets[kept].first_line
        if line >= note.body_start and not base.region_open[line] and ends_the_block_above(line):
            return line, kept, _tail_at(base, kept, note.bullets[kept].heading)
    return None


def _tail_at(base: _Parsed, kept: int, heading: str | None) -> _Tail:
    """The state after base's first `kept` memories: the state at its end less what its later
    memories added, which is little when an editor rewrote the note's last lines. Every assigned
    id is unique within a note (`_assign_ids`), and an id differing from the memory's own
    (absent or repeated) was derived from its text's occurrence count."""
    later = base.note.bullets[kept:]
    occurrences = dict(base.tail.occurrences)
    for bullet in later:
        if bullet.id != bullet.block_id:
            occurrences[bullet.text] -= 1
            if not occurrences[bullet.text]:
                del occurrences[bullet.text]
    return _Tail(heading, base.tail.seen.difference(bullet.id for bullet in later), occurrences, base.tail.bumped)


def render(note: Note) -> str:
    return "".join(note.lines)


def format_bullet(text: str, block_id: str, wall_time: str | None = None, newline: str = "\n") -> str:
    """The one line memvault writes for a memory (text must already be a single line)."""
    prefix = f"{wall_time} " if wall_time else ""
    return f"- {prefix}{text} ^{block_id}{newline}"


def new_note_text(title: str) -> str:
    return f"# {title}\n\n"


def append_line(note: Note, line: str) -> Note:
    """The note with `line` appended; a missing final newline is added first, nothing else moves."""
    return append_lines(note, [line])


def append_lines(note: Note, new_lines: list[str]) -> Note:
    """`append_line` for many lines at once, parsed once (a bulk write to one note stays linear)."""
    lines = list(note.lines)
    if lines and new_lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += note.newline
    lines.extend(new_lines)
    return parse("".join(lines))


def _parse_frontmatter(lines: tuple[str, ...]) -> tuple[int, dict[str, str]]:
    # a UTF-8 BOM (Windows editors write one) sits before the `---`; it is kept in the bytes
    if not lines or lines[0].removeprefix(BOM).rstrip("\r\n") != "---":
        return 0, {}
    for index in range(1, min(len(lines), _FRONTMATTER_SCAN_LIMIT)):
        if lines[index].rstrip("\r\n") in ("---", "..."):
            return index + 1, _simple_yaml(lines[1:index])
    return 0, {}


def _simple_yaml(lines: tuple[str, ...]) -> dict[str, str]:
    """Top-level `key: scalar` pairs only; memvault reads a few keys and never rewrites frontmatter."""
    values: dict[str, str] = {}
    for line in lines:
        if line[:1].isspace() or ":" not in line:
            continue
        key, _, value = line.partition(":")
        values[key.strip()] = value.strip().strip("'\"")
    return values


def _conflict_hunks(lines: tuple[str, ...], start: int) -> tuple[tuple[int, int], ...]:
    hunks, open_at = [], None
    for index in range(start, len(lines)):
        line = lines[index]
        if line.startswith(_CONFLICT_START):
            open_at = index if open_at is None else open_at
        elif line.startswith(_CONFLICT_END) and open_at is not None:
            hunks.append((open_at, index + 1))
            open_at = None
    if open_at is not None:
        hunks.append((open_at, len(lines)))
    return tuple(hunks)


def _hidden_lines(lines, start: int, conflicts) -> tuple[list[bool], str | None, bytearray]:
    """Mark fence, comment and conflict lines; say which region (if any) is still open at the end,
    and where one is open as a line starts (from `start` on)."""
    start = min(start, len(lines))
    hidden = [True] * start + [False] * (len(lines) - start)
    region_open = bytearray(len(lines))
    for first, end in conflicts:
        for index in range(first, end):
            hidden[index] = True
            region_open[index] = 1
    fence, fence_line = None, 0
    comment, comment_line = None, 0
    for index in range(start, len(lines)):
        if hidden[index]:
            continue
        if fence is not None or comment is not None:
            region_open[index] = 1
        line = lines[index].rstrip("\r\n")
        if comment is None:
            fence, is_fence_line = _track_fence(line, fence)
            if is_fence_line and fence is not None:
                fence_line = index
            if is_fence_line or fence is not None:
                hidden[index] = True
                continue
        was_open = comment
        comment, visible = _scan_comments(line, comment)
        if comment is not None and was_open is None:
            comment_line = index
        hidden[index] = not visible and (was_open is not None or comment is not None or _only_comment(line))
    return hidden, _open_region(lines, conflicts, fence, fence_line, comment, comment_line), region_open


def _open_region(lines, conflicts, fence, fence_line: int, comment, comment_line: int) -> str | None:
    if conflicts and conflicts[-1][1] == len(lines) and not lines[-1].startswith(_CONFLICT_END):
        return f"an unterminated merge-conflict hunk (<<<<<<< on line {conflicts[-1][0] + 1})"
    if fence is not None:
        return f"an unclosed code fence ({fence} on line {fence_line + 1})"
    if comment is not None:
        kind = "Obsidian comment (%%" if comment == "%%" else "HTML comment (<!--"
        return f"an unclosed {kind} on line {comment_line + 1})"
    return None


def _scan_comments(line: str, state: str | None) -> tuple[str | None, bool]:
    """Follow `%% … %%` and `<!-- … -->` through one line: (state after it, any visible text?)."""
    position, visible = 0, False
    while position <= len(line):
        if state is None:
            found = [(at, token) for token in _COMMENT_CLOSE if (at := line.find(token, position)) >= 0]
            if not found:
                visible |= bool(line[position:].strip())
                break
            at, token = min(found)
            visible |= bool(line[position:at].strip())
            state, position = token, at + len(token)
        else:
            close = _COMMENT_CLOSE[state]
            at = line.find(close, position)
            if at < 0:
                break
            state, position = None, at + len(close)
    return state, visible


def _only_comment(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and any(stripped.startswith(token) for token in _COMMENT_CLOSE)


def _track_fence(line: str, fence: str | None) -> tuple[str | None, bool]:
    match = _FENCE_RE.match(line)
    if match is None:
        return fence, False
    marker = match["fence"]
    if fence is None:
        return marker, True
    if marker[0] == fence[0] and len(marker) >= len(fence) and not line.strip()[len(marker):].strip():
        return None, True
    return fence, False


def _is_block_start(line: str) -> bool:
    """A line that starts a new block, so it cannot lazily continue the one above."""
    return bool(
        _BULLET_RE.fullmatch(line) or _HEADING_RE.fullmatch(line) or _FENCE_RE.match(line)
        or _RULE_RE.fullmatch(line) or _QUOTE_RE.fullmatch(line) or line.lstrip().startswith("|")
    )  # fmt: skip


def _parse_blocks(lines, start: int, hidden: list[bool],
                  tail: "_Tail | None" = None) -> tuple[list[Bullet], list[str], _Tail]:  # fmt: skip
    """The memories from line `start` on (after `tail`: the note's lines before `start`)."""
    bullets, heading, _ = _find_blocks(lines, start, len(lines), hidden, None if tail is None else tail.heading)
    seen = _Growing(LayeredSet() if tail is None else tail.seen)
    occurrences = {} if tail is None else dict(tail.occurrences)
    bullets, duplicates, bumped = _assign_ids(bullets, seen, occurrences)
    return bullets, duplicates, _Tail(heading, seen.base | seen.added, occurrences,
                                      bumped or (tail is not None and tail.bumped))  # fmt: skip


def _find_blocks(lines, start: int, stop: int, hidden: list[bool],
                 heading: str | None) -> tuple[list[Bullet], str | None, int]:  # fmt: skip
    """The memories that start from line `start` up to `stop`, without ids yet, the heading in
    force after them, and the line the next block would start on (`stop`, or past it when the
    last block runs on over `stop`)."""
    bullets: list[Bullet] = []
    index = start
    while index < stop:
        line = lines[index].rstrip("\r\n")
        if hidden[index] or not line.strip():
            index += 1
            continue
        if (match := _HEADING_RE.fullmatch(line)) is not None:
            heading = match["title"] or heading
            index += 1
            continue
        bullet_match = _BULLET_RE.fullmatch(line)
        if bullet_match is not None:
            end = _continuation_end(lines, index, len(bullet_match["indent"]), hidden)
            if bullet_match["rest"]:
                bullets.append(_make_bullet(lines, index, end, bullet_match, heading))
            index = end  # a nested item ends the continuation range, so it is found next
            continue
        if _RULE_RE.fullmatch(line) or line.lstrip().startswith("|"):
            index += 1  # thematic breaks and tables are layout, not memories
            continue
        kind = "quote" if _QUOTE_RE.fullmatch(line) else "paragraph"
        end = _block_end(lines, index, hidden, kind)
        block = _make_block(lines, index, end, kind, heading)
        if block is not None:
            bullets.append(block)
        index = end
    return bullets, heading, index


class _Growing:
    """The ids given before (`base`) and those given since (`added`), as one set to `_assign_ids`."""

    __slots__ = ("base", "added")

    def __init__(self, base: LayeredSet):
        self.base, self.added = base, set()

    def __contains__(self, item: str) -> bool:
        return item in self.added or item in self.base

    def add(self, item: str) -> None:
        self.added.add(item)


def _continuation_end(lines, index: int, indent: int, hidden) -> int:
    """Deeper-indented lines that are not list items continue a bullet, and so do lazy ones."""
    end = index + 1
    while end < len(lines) and not hidden[end]:
        line = lines[end].rstrip("\r\n")
        stripped = line.lstrip(" \t")
        if not stripped or _BULLET_RE.fullmatch(line) or _FENCE_RE.match(line):
            break
        deeper = len(line) - len(stripped) > indent
        if not deeper and _is_block_start(line):
            break
        end += 1
    return end


def _block_end(lines, index: int, hidden, kind: str) -> int:
    end = index + 1
    while end < len(lines) and not hidden[end]:
        line = lines[end].rstrip("\r\n")
        if not line.strip():
            break
        is_quote = _QUOTE_RE.fullmatch(line) is not None
        if kind == "quote" and not is_quote:
            break
        if kind == "paragraph" and _is_block_start(line):
            break
        end += 1
    return end


def _split_block_id(rest: str, continuation: list[str]) -> tuple[str, list[str], str | None]:
    tail_source = continuation[-1] if continuation else rest
    with_id = _BLOCK_ID_SUFFIX_RE.fullmatch(tail_source)
    if with_id is None or not is_valid_block_id(with_id["id"]):
        return rest, continuation, None
    if continuation:
        return rest, [*continuation[:-1], with_id["body"]], with_id["id"]
    return with_id["body"], continuation, with_id["id"]


def _make_bullet(lines, index: int, end: int, match, heading: str | None) -> Bullet:
    rest = match["rest"]
    wall_time = None
    if (timed := _TIME_PREFIX_RE.fullmatch(rest)) is not None:
        wall_time, rest = timed["time"], timed["body"]
    continuation = [lines[i].strip() for i in range(index + 1, end)]
    rest, continuation, block_id = _split_block_id(rest, continuation)
    text = "\n".join([rest, *continuation]).strip()
    return Bullet(index, end, match["indent"], wall_time, text, block_id, id="", heading=heading)


def _make_block(lines, index: int, end: int, kind: str, heading: str | None) -> Bullet | None:
    texts = [lines[i].rstrip("\r\n").strip() for i in range(index, end)]
    if kind == "quote":
        texts = [_QUOTE_RE.fullmatch(text)["rest"].strip() if _QUOTE_RE.fullmatch(text) else text for text in texts]
        if texts and (callout := _CALLOUT_RE.fullmatch(texts[0])) is not None:
            texts[0] = callout["title"]  # the `[!type]` marker is layout; its title is text
    texts = [text for text in texts if text]
    if not texts:
        return None
    first, rest, block_id = _split_block_id(texts[0], texts[1:])
    text = "\n".join([first, *rest]).strip()
    if not text:
        return None
    return Bullet(index, end, "", None, text, block_id, id="", heading=heading, kind=kind)


def _assign_ids(bullets: list[Bullet], seen: _Growing,
                occurrences: dict[str, int]) -> tuple[list[Bullet], list[str], bool]:  # fmt: skip
    """Explicit ids stay; a repeated explicit id and id-less memories get derived ids. `seen` and
    `occurrences` (the ids given so far, how often each id-less text came) are updated. Also says
    whether a derived id was taken already, so that the next one was given instead."""
    duplicates: list[str] = []
    result = []
    bumped = False
    for bullet in bullets:
        chosen = bullet.block_id
        if chosen is not None and chosen in seen:
            duplicates.append(chosen)
            chosen = None
        if chosen is None:
            count = occurrences.get(bullet.text, 0)
            occurrences[bullet.text] = count + 1
            chosen = derived_id(bullet.text, count)
            while chosen in seen:  # astronomically rare; keeps ids unique within the file
                count += 1
                chosen = derived_id(bullet.text, count)
                bumped = True
        seen.add(chosen)
        result.append(replace(bullet, id=chosen))
    return result, duplicates, bumped


_ID_MARK_RE = re.compile(rf"\^({BLOCK_ID_PATTERN})(?![A-Za-z0-9-])")


def _repeated(found: list[str], known: Container[str] = ()) -> frozenset[str]:
    """The ids `found` holds more than once, or holds and `known` holds too."""
    seen, repeated = set(), set()
    for block_id in found:
        if block_id in seen or block_id in known:
            repeated.add(block_id)
        seen.add(block_id)
    return frozenset(repeated)


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


def marked_ids(text: str) -> frozenset[str]:
    """Every block id the text carries as `^id` (whole ids: `^m-1` is not in `^m-12`), searchable or not."""
    return frozenset(_ID_MARK_RE.findall(text))


def region_left_open(text: str) -> str | None:
    """What a memvault bullet holding `text` would leave open at its end, or None. A fact such as
    "<!--" parses as its own bullet, but opens an HTML comment that hides every line after it, so
    memvault never writes one (Remember refuses it; capture's parser refuses it)."""
    if len(text.splitlines()) <= 1 and not any(opener in text for opener in _COMMENT_CLOSE):
        return None  # one line starting "- " opens no fence or conflict hunk: only a comment could
    return bullet_region_left_open(text)


def bullet_region_left_open(text: str) -> str | None:
    """`region_left_open` found by parsing the bullet in a note (what the shortcut above stands for)."""
    left_open = parse(new_note_text("t") + format_bullet(text, "m-0000000000", "00:00")).open_at_end
    return None if left_open is None else re.sub(r" on line \d+", "", left_open)
