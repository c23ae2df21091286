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

mistune has no source positions, so structure is found line by line (`vault/note_blocks.py`) and
mistune turns each memory's inline markdown into the plain text that is indexed (see
`plain_text`). A note is parsed from an earlier parse of it where one is at hand
(`vault/note_reparse.py`): a day's note of thousands of lines costs what changed in it.
"""

import re

from memvault.vault.note_blocks import (
    _COMMENT_CLOSE,
    BOM,
    MAX_NOTE_BYTES,
    Bullet,
    Note,
    _parse_lines,
    _track_fence,
    marked_ids,
)
from memvault.vault.note_reparse import _PARSE_CACHE_CHARS, _PARSE_CACHE_NOTES, _ParseCache

#: what other modules take from here: the note's types and the helpers on its text (the parse's
#: steps live in vault/note_blocks.py and vault/note_reparse.py)
__all__ = [
    "BOM",
    "MAX_NOTE_BYTES",
    "Bullet",
    "Note",
    "append_line",
    "append_lines",
    "bullet_region_left_open",
    "format_bullet",
    "marked_ids",
    "new_note_text",
    "parse",
    "parse_ahead",
    "region_left_open",
    "render",
    "_COMMENT_CLOSE",
    "_track_fence",
]


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
