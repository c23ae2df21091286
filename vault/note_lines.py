"""Line numbers, for people: computed from a note as it is when one is shown, never stored.

A memory's address is `path#^id` (`MemoryRecord.source`); records and index rows hold no line,
so a line added above a day's 20,000 memories changes none of them. Where a person needs a line
(a web page, a report naming where a memory sits, the order of memories written in the same
minute) it is found here, in the note's current text.
"""

from pathlib import Path

from memvault.vault.errors import VaultError
from memvault.vault.fsio import read_bytes_nofollow
from memvault.vault.note import parse
from memvault.vault.paths import resolve_inside


def lines_in(text: str) -> dict[str, int]:
    """The 1-based line each memory of a note's `text` starts on, by id (derived ids included)."""
    note = parse(text)
    return {bullet.id: start + 1 for bullet, start in zip(note.bullets, note.starts, strict=True)}


def line_in(text: str, memory_id: str) -> int | None:
    """The 1-based line where memory `memory_id` starts in `text`, or None when the note no longer holds it."""
    return lines_in(text).get(memory_id)


def note_lines(root: Path, relpath: str) -> dict[str, int]:
    """`lines_in` of the note at `relpath` as it is on disk now; empty when it cannot be read
    (gone, unsafe, not UTF-8): the caller shows the memory without a line."""
    try:
        return lines_in(read_bytes_nofollow(resolve_inside(root, relpath)).decode("utf-8"))
    except (OSError, UnicodeDecodeError, VaultError):
        return {}
