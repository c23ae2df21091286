"""Pure parse/render of `daily/` and `audit/` notes.

A note is kept as its exact lines, so `render(parse(text)) == text` for every file, whoever
wrote it: memvault edits notes by whole lines and never reflows a person's prose or frontmatter.
Parsing finds the bullets (top-level and nested list items outside code fences and outside
merge-conflict hunks), their optional wall time, text and block id.

A bullet line written by memvault looks like this:

    - 14:03 Morgan chose blue as the deployment color. ^m-1f3a9c0d2e

mistune has no source positions, so structure is found line by line here and mistune turns
each bullet's inline markdown into the plain text that is indexed (see `plain_text`).
"""

import re
from dataclasses import dataclass, field, replace

from memvault.vault.clock import TIME_PATTERN
from memvault.vault.ids import BLOCK_ID_PATTERN, derived_id, is_valid_block_id

_BULLET_RE = re.compile(r"(?P<indent>[ \t]*)(?P<marker>[-*+]|\d{1,9}[.)])(?:[ \t]+(?P<rest>.*?))?[ \t]*")
_TIME_PREFIX_RE = re.compile(rf"(?P<time>{TIME_PATTERN})[ \t]+(?P<body>.*)")
_BLOCK_ID_SUFFIX_RE = re.compile(rf"(?P<body>.*?)[ \t]+\^(?P<id>{BLOCK_ID_PATTERN})")
_FENCE_RE = re.compile(r" {0,3}(?P<fence>`{3,}|~{3,})")
_HEADING_RE = re.compile(r" {0,3}#{1,6}[ \t]+(?P<title>.*?)[ \t#]*")
_CONFLICT_START, _CONFLICT_MID, _CONFLICT_END = "<<<<<<<", "=======", ">>>>>>>"
_FRONTMATTER_SCAN_LIMIT = 500


@dataclass(frozen=True)
class Bullet:
    """One list item: a memory. `first_line`/`end_line` are 0-based line indexes, end exclusive."""

    first_line: int
    end_line: int
    indent: str
    time: str | None
    text: str
    block_id: str | None
    id: str
    heading: str | None = None

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

    @property
    def has_conflicts(self) -> bool:
        return bool(self.conflicts)


def parse(text: str) -> Note:
    """Parse a note. Never raises: odd markdown is still a note, just with fewer bullets."""
    lines = tuple(text.splitlines(keepends=True))
    body_start, frontmatter = _parse_frontmatter(lines)
    conflicts = _conflict_hunks(lines, body_start)
    bullets, duplicates = _parse_bullets(lines, body_start, conflicts)
    return Note(lines, body_start, frontmatter, tuple(bullets), conflicts, tuple(duplicates))


def render(note: Note) -> str:
    return "".join(note.lines)


def format_bullet(text: str, block_id: str, wall_time: str | None = None) -> str:
    """The one line memvault writes for a memory (text must already be a single line)."""
    prefix = f"{wall_time} " if wall_time else ""
    return f"- {prefix}{text} ^{block_id}\n"


def new_note_text(title: str) -> str:
    return f"# {title}\n\n"


def append_line(note: Note, line: str) -> Note:
    """The note with `line` appended; a missing final newline is added first, nothing else moves."""
    return append_lines(note, [line])


def append_lines(note: Note, new_lines: list[str]) -> Note:
    """`append_line` for many lines at once, parsed once (a bulk write to one note stays linear)."""
    lines = list(note.lines)
    if lines and new_lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    lines.extend(new_lines)
    return parse("".join(lines))


def _parse_frontmatter(lines: tuple[str, ...]) -> tuple[int, dict[str, str]]:
    if not lines or lines[0].rstrip("\r\n") != "---":
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


def _parse_bullets(lines, start, conflicts) -> tuple[list[Bullet], list[str]]:
    in_conflict = _line_mask(len(lines), conflicts)
    bullets: list[Bullet] = []
    fence: str | None = None
    heading: str | None = None
    index = start
    while index < len(lines):
        line = lines[index].rstrip("\r\n")
        fence, is_fence_line = _track_fence(line, fence)
        if is_fence_line or fence is not None or in_conflict[index]:
            index += 1
            continue
        if (match := _HEADING_RE.fullmatch(line)) is not None:
            heading = match["title"] or heading
        bullet_match = _BULLET_RE.fullmatch(line)
        if bullet_match is None or not bullet_match["rest"]:
            index += 1
            continue
        end = _continuation_end(lines, index, len(bullet_match["indent"]), in_conflict)
        bullets.append(_make_bullet(lines, index, end, bullet_match, heading))
        index += 1
    return _assign_ids(bullets)


def _line_mask(count: int, hunks) -> list[bool]:
    mask = [False] * count
    for first, end in hunks:
        for index in range(first, end):
            mask[index] = True
    return mask


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


def _continuation_end(lines, index: int, indent: int, in_conflict) -> int:
    """Lines indented deeper than the bullet that are not list items themselves continue it."""
    end = index + 1
    while end < len(lines) and not in_conflict[end]:
        line = lines[end].rstrip("\r\n")
        stripped = line.lstrip(" \t")
        if not stripped or len(line) - len(stripped) <= indent or _BULLET_RE.fullmatch(line):
            break
        if _FENCE_RE.match(line):
            break
        end += 1
    return end


def _make_bullet(lines, index: int, end: int, match, heading: str | None) -> Bullet:
    rest = match["rest"]
    wall_time = None
    if (timed := _TIME_PREFIX_RE.fullmatch(rest)) is not None:
        wall_time, rest = timed["time"], timed["body"]
    continuation = [lines[i].strip() for i in range(index + 1, end)]
    block_id = None
    tail_source = continuation[-1] if continuation else rest
    if (with_id := _BLOCK_ID_SUFFIX_RE.fullmatch(tail_source)) is not None and is_valid_block_id(with_id["id"]):
        block_id = with_id["id"]
        if continuation:
            continuation[-1] = with_id["body"]
        else:
            rest = with_id["body"]
    text = "\n".join([rest, *continuation]).strip()
    return Bullet(index, end, match["indent"], wall_time, text, block_id, id="", heading=heading)


def _assign_ids(bullets: list[Bullet]) -> tuple[list[Bullet], list[str]]:
    """Explicit ids stay; a repeated explicit id and id-less bullets get derived ids."""
    seen: set[str] = set()
    duplicates: list[str] = []
    occurrences: dict[str, int] = {}
    result = []
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
        seen.add(chosen)
        result.append(replace(bullet, id=chosen))
    return result, duplicates
