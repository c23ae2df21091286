"""The lines memvault appended in the last minute, so a person's save that drops one is repaired.

An editor that read a note just before memvault appended to it and saves just after writes its
older copy back, without memvault's line: neither side did anything wrong, and the person's
save must stay. memvault notes every line it appends here (`.index/recent-writes.json`, under
the vault lock) and every sync looks again: a line written less than REPAIR_WINDOW_SECONDS ago
that is gone from its note (neither its `^id` nor its text is there) is appended again, once
per sync, through the same protocol (`vault/note_append.py`).

After the window, a missing line is taken as the person's decision (they deleted it) and is
left alone. The ledger is derived state: deleting it only gives up repairs for the last minute.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from memvault.vault.fsio import MACHINE_DIR_MODE, atomic_write, make_dir, read_bytes_nofollow
from memvault.vault.note_append import NewBullet, NoteNotWritable, append_bullets_once, read_note_if_any
from memvault.vault.strict_json import loads_strict

#: how long after memvault wrote a line it puts the line back if a save dropped it
REPAIR_WINDOW_SECONDS = 60.0
MAX_ENTRIES = 10_000
LEDGER_NAME = "recent-writes.json"


def _ledger_path(layout):
    return layout.index_dir / LEDGER_NAME


def _load(layout, now: float) -> list[dict]:
    try:
        entries = loads_strict(read_bytes_nofollow(_ledger_path(layout)))
    except (OSError, ValueError):
        return []  # absent or damaged: only the last minute's repairs are given up
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, dict) and now - float(e.get("at", 0)) < REPAIR_WINDOW_SECONDS]


def _save(layout, entries: list[dict]) -> None:
    make_dir(layout.index_dir, MACHINE_DIR_MODE, parents=True)
    data = json.dumps(entries[-MAX_ENTRIES:], sort_keys=True, separators=(",", ":")).encode("utf-8")
    atomic_write(_ledger_path(layout), data, mode=0o600)


def note_written(layout, relpath: str, title: str, bullets: Iterable[NewBullet], now: float | None = None) -> None:
    """Remember that these lines were just appended to `relpath`. Caller holds the vault lock."""
    now = time.time() if now is None else now
    entries = _load(layout, now)
    for bullet in bullets:
        entries.append({"at": now, "path": relpath, "title": title, "id": bullet.block_id,
                        "text": bullet.text, "time": bullet.wall_time})  # fmt: skip
    _save(layout, entries)


def forget_written(layout, relpath: str, block_ids: list[str], now: float | None = None) -> None:
    """Drop entries for lines that were refused, so no repair writes them later. Lock held."""
    now = time.time() if now is None else now
    dropped = set(block_ids)
    entries = _load(layout, now)
    _save(layout, [e for e in entries if not (e.get("path") == relpath and e.get("id") in dropped)])


def repair_lost_lines(layout, relpaths: Iterable[str] | None = None, now: float | None = None) -> list[str]:
    """Append again the recent lines a save dropped; the notes repaired. Caller holds the vault lock.

    `relpaths` limits the look to those notes (the watcher names what changed). A note that
    cannot take the line right now (an open fence, a folder in its place) is left for the next
    sync; the ledger keeps the entry until its window ends.
    """
    now = time.time() if now is None else now
    entries = _load(layout, now)
    wanted = None if relpaths is None else set(relpaths)
    by_note: dict[str, list[dict]] = {}
    for entry in entries:
        if wanted is None or entry.get("path") in wanted:
            by_note.setdefault(str(entry["path"]), []).append(entry)
    repaired = []
    for relpath, lost in sorted(by_note.items()):
        if _restore(layout, relpath, lost):
            repaired.append(relpath)
    return repaired


def _restore(layout, relpath: str, entries: list[dict]) -> bool:
    try:
        note = read_note_if_any(layout.root, relpath)
    except (OSError, ValueError):
        return False
    if note is None:
        return False  # the note itself was deleted or renamed: that is a person's decision
    text = "".join(note.lines)
    lost = [NewBullet(e["text"], e["id"], e.get("time")) for e in entries if f"^{e['id']}" not in text]
    if not lost:
        return False
    try:
        return bool(append_bullets_once(layout, relpath, str(entries[0].get("title", "")), lost, match_text=True))
    except (NoteNotWritable, OSError, ValueError):
        return False
