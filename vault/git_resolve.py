"""`memvault git resolve`: a note git left in conflict, resolved as memvault's merge driver would.

Asked for by a person (health names the command), so the note's bytes change on their say:
every hunk becomes the union of its two sides (vault/note_conflicts.py), a memory both sides
hold once, and memvault's own bullets in time order; no block id changes and no line of either
side is dropped. A hunk where one block id holds two different texts is left as it is and named:
that one is the person's to decide. The write is a compare-and-swap under the vault lock, so an
editor's save or a running owner's append in between is never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

from memvault.vault.errors import InvalidRecord, VaultError
from memvault.vault.fsio import read_bytes_nofollow
from memvault.vault.layout import VaultLayout, parse_note_relpath
from memvault.vault.locks import VaultLock, replace_if_unchanged
from memvault.vault.note import parse
from memvault.vault.note_blocks import MAX_NOTE_BYTES
from memvault.vault.note_conflicts import conflicted_ids, dedupe_bullets, has_markers, order_bullets, resolve_hunks
from memvault.vault.paths import resolve_inside


@dataclass(frozen=True)
class Resolved:
    relpath: str
    #: the note had markers and now has none of memvault's making
    resolved: bool
    #: each hunk left for a person, with why
    unresolved: tuple[str, ...] = ()
    changed: bool = False

    def to_json(self) -> dict:
        return {"path": self.relpath, "resolved": self.resolved, "changed": self.changed,
                "unresolved": list(self.unresolved)}  # fmt: skip


def conflicted_notes(layout: VaultLayout) -> list[str]:
    """Every canonical note that holds conflict markers now."""
    found = []
    for relpath in layout.note_relpaths():
        try:
            data = read_bytes_nofollow(layout.root / relpath)
        except OSError:
            continue
        if len(data) <= MAX_NOTE_BYTES and has_markers(data.decode("utf-8", errors="replace")):
            found.append(relpath)
    return found


def resolve_note(layout: VaultLayout, relpath: str, tz: ZoneInfo | None = None) -> Resolved:
    """Resolve one note's conflict hunks (see the module docstring); with the vault's zone `tz`,
    its bullets are ordered by instant. Raises InvalidRecord for a path that is not a note, or a
    note that cannot be read as UTF-8."""
    relpath = relpath.replace("\\", "/").removeprefix("./")
    parsed = parse_note_relpath(relpath)
    if parsed is None:
        raise InvalidRecord(f"{relpath} is not a daily/ or audit/ note. Fix: name a note, e.g. daily/2026-11-30.md")
    path = resolve_inside(layout.root, relpath)
    with VaultLock(layout.root):
        try:
            data = read_bytes_nofollow(path)
        except FileNotFoundError:
            raise InvalidRecord(f"{relpath} does not exist. Fix: name a note that git left in conflict") from None
        if len(data) > MAX_NOTE_BYTES:
            raise InvalidRecord(f"{relpath} is over {MAX_NOTE_BYTES} bytes. Fix: resolve it by hand in an editor")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRecord(f"{relpath} is not UTF-8 (byte {exc.start}). Fix: resolve it by hand") from None
        if not has_markers(text):
            return Resolved(relpath, resolved=True)
        resolution = resolve_hunks(text.splitlines(keepends=True))
        if resolution.unresolved:
            lines = resolution.lines
        else:
            lines = order_bullets(dedupe_bullets(resolution.lines, parsed[1], tz), parsed[1], tz)
        new = "".join(lines).encode("utf-8")
        if new != data:
            replace_if_unchanged(path, data, new, mode=Path(path).stat().st_mode & 0o777)
        return Resolved(relpath, not resolution.unresolved, resolution.unresolved, new != data)


def sources_in_conflict(layout: VaultLayout, sources: list[str]) -> frozenset[str]:
    """Which of these hit sources (`daily/2026-11-30.md#^m-…`) stand inside a conflict hunk of
    their note now: a search marks them, so a person knows the memory awaits a resolution."""
    marked = set()
    by_note: dict[str, list[str]] = {}
    for source in sources:
        relpath, _, block_id = source.partition("#^")
        by_note.setdefault(relpath, []).append(block_id)
    for relpath, ids in by_note.items():
        if parse_note_relpath(relpath) is None:
            continue
        try:
            data = read_bytes_nofollow(resolve_inside(layout.root, relpath))
        except (OSError, VaultError):
            continue
        if len(data) > MAX_NOTE_BYTES or b"<<<<<<<" not in data:
            continue
        inside = conflicted_ids(parse(data.decode("utf-8", errors="replace")))
        marked.update(f"{relpath}#^{block_id}" for block_id in ids if block_id in inside)
    return frozenset(marked)
