"""The whole parse of a note: where its memories are, what hides them, and their ids.

`vault/note.py` is the entry point (`parse`, which reuses earlier parses through
`vault/note_reparse.py`, with these same steps). Structure is found line by line: a note's
lines, its frontmatter, the lines a reader does not see (fences, comments, conflict hunks), its
blocks (list items, paragraphs, quotes) and the ids they get.
"""

import re
from collections.abc import Container
from dataclasses import dataclass, field, replace
from functools import cached_property

from memvault.vault.clock import TIME_PATTERN
from memvault.vault.ids import BLOCK_ID_PATTERN, derived_id, is_valid_block_id
from memvault.vault.layered_set import LayeredSet
from memvault.vault.note_conflicts import hidden_in_hunk

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
    """One memory: a list item, a paragraph or a quote/callout. It holds no line number: where it
    stands is its note's (`Note.starts`, `Note.ends`), so the memories below a changed line are
    the same objects in the next parse of the note, and whatever was made of them stands."""

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
    #: where each memory stands in this version: its first line and the line past its last (0-based)
    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()

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


def _parse_lines(lines: tuple[str, ...]) -> _Parsed:
    body_start, frontmatter = _parse_frontmatter(lines)
    conflicts = _conflict_hunks(lines, body_start)
    hidden, open_at_end, region_open = _hidden_lines(lines, body_start, conflicts)
    found, duplicates, tail = _parse_blocks(lines, body_start, hidden)
    note = Note(lines, body_start, frontmatter, tuple(found.bullets), conflicts, tuple(duplicates), open_at_end,
                frozenset(i for i, masked in enumerate(hidden) if masked), tuple(found.starts),
                tuple(found.ends))  # fmt: skip
    return _Parsed(note, tail, bytes(region_open))


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
        region_open[first:end] = b"\x01" * (end - first)
        for index in hidden_in_hunk(lines, first, end):  # both sides stay memories (vault/note_conflicts.py)
            hidden[index] = True
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
    if marker[0] == fence[0] and len(marker) >= len(fence) and not line.strip()[len(marker) :].strip():
        return None, True
    return fence, False


def _is_block_start(line: str) -> bool:
    """A line that starts a new block, so it cannot lazily continue the one above."""
    return bool(
        _BULLET_RE.fullmatch(line) or _HEADING_RE.fullmatch(line) or _FENCE_RE.match(line)
        or _RULE_RE.fullmatch(line) or _QUOTE_RE.fullmatch(line) or line.lstrip().startswith("|")
    )  # fmt: skip


@dataclass
class _Found:
    """Memories found in a run of a note's lines, and where each stands (`Note.starts`, `Note.ends`)."""

    bullets: list[Bullet] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)

    def add(self, bullet: Bullet, start: int, end: int) -> None:
        self.bullets.append(bullet)
        self.starts.append(start)
        self.ends.append(end)


def _parse_blocks(lines, start: int, hidden: list[bool],
                  tail: "_Tail | None" = None) -> tuple[_Found, list[str], _Tail]:  # fmt: skip
    """The memories from line `start` on (after `tail`: the note's lines before `start`)."""
    found, heading, _ = _find_blocks(lines, start, len(lines), hidden, None if tail is None else tail.heading)
    seen = _Growing(LayeredSet() if tail is None else tail.seen)
    occurrences = {} if tail is None else dict(tail.occurrences)
    found.bullets, duplicates, bumped = _assign_ids(found.bullets, seen, occurrences)
    return found, duplicates, _Tail(heading, seen.base | seen.added, occurrences,
                                      bumped or (tail is not None and tail.bumped))  # fmt: skip


def _find_blocks(lines, start: int, stop: int, hidden: list[bool],
                 heading: str | None) -> tuple[_Found, str | None, int]:  # fmt: skip
    """The memories that start from line `start` up to `stop`, without ids yet, the heading in
    force after them, and the line the next block would start on (`stop`, or past it when the
    last block runs on over `stop`)."""
    found = _Found()
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
                found.add(_make_bullet(lines, index, end, bullet_match, heading), index, end)
            index = end  # a nested item ends the continuation range, so it is found next
            continue
        if _RULE_RE.fullmatch(line) or line.lstrip().startswith("|"):
            index += 1  # thematic breaks and tables are layout, not memories
            continue
        kind = "quote" if _QUOTE_RE.fullmatch(line) else "paragraph"
        end = _block_end(lines, index, hidden, kind)
        block = _make_block(lines, index, end, kind, heading)
        if block is not None:
            found.add(block, index, end)
        index = end
    return found, heading, index


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
    return Bullet(match["indent"], wall_time, text, block_id, id="", heading=heading)


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
    return Bullet("", None, text, block_id, id="", heading=heading, kind=kind)


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


def marked_ids(text: str) -> frozenset[str]:
    """Every block id the text carries as `^id` (whole ids: `^m-1` is not in `^m-12`), searchable or not."""
    return frozenset(_ID_MARK_RE.findall(text))
