"""The lines memvault appended in the last minute, so a person's save that drops one is repaired.

An editor that read a note just before memvault appended to it and saves just after writes its
older copy back, without memvault's line: neither side did anything wrong, and the person's
save must stay. memvault notes every line it appends here (`.index/recent-writes.jsonl`, one JSON
object a line, appended under the vault lock, so a write costs what it adds, not what the ledger
holds) and every sync looks again: a line written less than REPAIR_WINDOW_SECONDS ago
that is gone from its note (neither its `^id` nor its text is there) is appended again, once
per sync, through the same protocol (`vault/note_append.py`).

A line a git command dropped (stash, checkout of a branch, revert) is left alone when git
wrote the note's new version and keeps the line elsewhere (`vault/git_state.py`): putting it
back would make `git stash pop` abort on a dirty note.

After the window, a missing line is taken as the person's decision (they deleted it) and is
left alone. Expired entries are dropped by copying the ledger's live tail, as bytes, to a new
file once its oldest entry is two windows old: under a steady stream of writes that happens
once a window, not on every write (the oldest entry expires a moment after any compaction, and
rewriting a minute of a busy owner's entries on each append cost it two thirds of its time).
Past MAX_BYTES (a long burst) it is rewritten with its newest live entries. The ledger is
derived state: deleting it (or a crash tearing its last line, which is skipped) only gives up
repairs for the last minute, so it is not fsynced.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterable

from memvault.vault.errors import VaultError
from memvault.vault.fsio import MACHINE_DIR_MODE, MACHINE_FILE_MODE, atomic_write, make_dir, read_bytes_nofollow
from memvault.vault.git_state import judge
from memvault.vault.note import marked_ids, parse
from memvault.vault.note_append import NewBullet, append_bullets_once
from memvault.vault.paths import resolve_inside
from memvault.vault.strict_json import loads_strict

#: how long after memvault wrote a line it puts the line back if a save dropped it
REPAIR_WINDOW_SECONDS = 60.0
MAX_ENTRIES = 10_000
#: the ledger drops its expired entries when its oldest is COMPACT_AFTER_SECONDS old and it holds
#: more than MIN_COMPACT_BYTES, or whenever it passes MAX_BYTES (a long burst of writes)
COMPACT_AFTER_SECONDS = 2 * REPAIR_WINDOW_SECONDS
MIN_COMPACT_BYTES = 64 * 1024
MAX_BYTES = 16 * 1024 * 1024
LEDGER_NAME = "recent-writes.jsonl"


def _ledger_path(layout):
    return layout.index_dir / LEDGER_NAME


class _Parsed:
    """The ledger as last read by this process: the file's inode, how many bytes were read, the
    last whole line read (to see the file was not cut and written again since), the entries, and
    the same entries by note and block id (`by_path`), kept up as entries come and expire."""

    def __init__(self, inode: int, size: int, last_line: bytes, entries: list[dict], by_path: dict):
        self.inode, self.size, self.last_line, self.entries = inode, size, last_line, entries
        self.by_path: dict[str, dict[str, dict]] = by_path


def _index_by_path(by_path: dict, added: Iterable[dict], gone: Iterable[dict]) -> dict:
    """`by_path` (note -> block id -> its newest live entry) with `added`, less the entries `gone`
    (an entry gone whose id was written again since leaves the newer one)."""
    for entry in added:
        by_path.setdefault(str(entry.get("path")), {})[str(entry.get("id"))] = entry
    for entry in gone:
        ids = by_path.get(str(entry.get("path")))
        if ids is not None and ids.get(str(entry.get("id"))) is entry:
            del ids[str(entry.get("id"))]
            if not ids:
                del by_path[str(entry.get("path"))]
    return by_path


#: ledger path -> what was read of it: the ledger only grows by appends between rewrites (a new
#: inode) and take-backs (a cut, seen by the last line read), so a sync parses only the entries
#: appended since the last one instead of the minute's thousands
_read_so_far: dict[str, _Parsed] = {}


def _load(layout, now: float) -> list[dict]:
    """The live entries (written less than REPAIR_WINDOW_SECONDS ago), oldest first."""
    return list(_live_state(layout, now).entries)


def _live_state(layout, now: float) -> _Parsed:
    """The ledger's live entries as this process last read them, read on from where that stopped."""
    path = _ledger_path(layout)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        _read_so_far.pop(str(path), None)
        return _Parsed(0, 0, b"", [], {})  # absent: only the last minute's repairs are given up
    try:
        info = os.fstat(fd)
        known = _read_so_far.get(str(path))
        if known is not None and not _still_a_prefix(fd, info, known):
            known = None
        start = 0 if known is None else known.size
        data = os.pread(fd, info.st_size - start, start) if info.st_size > start else b""
    finally:
        os.close(fd)
    whole = data[: data.rfind(b"\n") + 1]  # a line still being appended is read next time
    expired = 0 if known is None else _expired(known.entries, now)
    entries = [] if known is None else known.entries[expired:]
    added = []
    for line in whole.splitlines():
        try:
            entry = loads_strict(line)
            if isinstance(entry, dict) and now - float(entry.get("at", 0)) < REPAIR_WINDOW_SECONDS:
                added.append(entry)
        except (ValueError, TypeError):
            continue  # a torn or hand-damaged line: that one repair is given up
    entries += added
    over = max(0, len(entries) - MAX_ENTRIES)
    gone = ([] if known is None else known.entries[:expired]) + entries[:over]
    entries = entries[over:]
    by_path = _index_by_path({} if known is None else known.by_path, entries if known is None else added, gone)
    if whole:
        last = whole[whole.rfind(b"\n", 0, len(whole) - 1) + 1 :]
        state = _Parsed(info.st_ino, start + len(whole), last, entries, by_path)
        _read_so_far[str(path)] = state
        return state
    if known is not None:
        known.entries, known.by_path = entries, by_path
        return known
    return _Parsed(info.st_ino, 0, b"", entries, by_path)


def _expired(entries: list[dict], now: float) -> int:
    """How many of `entries` (appended oldest first) have left the window: a prefix, so a sync
    costs what expired since the last one, not the minute's thousands of entries. An entry out
    of order (another process's clock a moment behind) leaves with the ones after it."""
    first = 0
    while first < len(entries) and now - float(entries[first].get("at", 0)) >= REPAIR_WINDOW_SECONDS:
        first += 1
    return first


def _still_a_prefix(fd: int, info: os.stat_result, known: _Parsed) -> bool:
    if info.st_ino != known.inode or info.st_size < known.size:
        return False
    at = known.size - len(known.last_line)
    return os.pread(fd, len(known.last_line), at) == known.last_line


def _lines(entries: list[dict]) -> bytes:
    return b"".join(json.dumps(e, sort_keys=True, separators=(",", ":")).encode("utf-8") + b"\n" for e in entries)


def _rewrite(layout, entries: list[dict]) -> None:
    make_dir(layout.index_dir, MACHINE_DIR_MODE, parents=True)
    atomic_write(_ledger_path(layout), _lines(entries[-MAX_ENTRIES:]), mode=MACHINE_FILE_MODE)


def note_written(
    layout, relpath: str, title: str, bullets: Iterable[NewBullet], now: float | None = None
) -> int | None:
    """Remember that these lines were just appended to `relpath`. Caller holds the vault lock.

    Returns the ledger's size before them (for `take_back_noted`), or None when the ledger was
    rewritten meanwhile (compaction) and only `forget_written` can drop them."""
    now = time.time() if now is None else now
    added = [{"at": now, "path": relpath, "title": title, "id": bullet.block_id, "text": bullet.text,
              "time": bullet.wall_time} for bullet in bullets]  # fmt: skip
    path = _ledger_path(layout)
    fd, existed = _open_for_append(layout, path)
    try:
        info = os.fstat(fd)
        if stat.S_IMODE(info.st_mode) != MACHINE_FILE_MODE:
            os.fchmod(fd, MACHINE_FILE_MODE)  # machine state: owner-only, whoever made the file
        size = info.st_size
        data = _lines(added)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError:
            os.ftruncate(fd, size)  # a full disk: no torn line (and no new empty file) is left behind
            if not existed:
                os.unlink(path)
            raise
        before = size
        size += len(data)
    finally:
        os.close(fd)
    if size > MAX_BYTES:
        _rewrite(layout, _load(layout, now))
        return None
    if size > MIN_COMPACT_BYTES and _oldest_older_than(path, now, COMPACT_AFTER_SECONDS):
        _keep_live_tail(layout, now)
        return None
    return before


def _open_for_append(layout, path) -> tuple[int, bool]:
    """The ledger opened for appending, and whether it existed (its folder is made if missing)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags), True
    except FileNotFoundError:
        pass
    make_dir(layout.index_dir, MACHINE_DIR_MODE, parents=True)
    return os.open(path, flags | os.O_CREAT, MACHINE_FILE_MODE), False


def take_back_noted(layout, before: int) -> None:
    """Drop the entries `note_written` just appended (it returned `before`), for lines whose append
    failed and was taken back. A truncation needs no free space, unlike a rewrite: on the full disk
    that refused the note it still works. Lock held (no other entry was appended since)."""
    os.truncate(_ledger_path(layout), before)


def _oldest_older_than(path, now: float, seconds: float) -> bool:
    """Whether the ledger's first entry is `seconds` old (read from its first line alone)."""
    try:
        with open(path, "rb") as handle:
            first = loads_strict(handle.readline(64 * 1024))
        return now - float(first.get("at", 0)) >= seconds
    except (OSError, ValueError, TypeError, AttributeError):
        return True  # unreadable: compacting it keeps only what follows the damage


def _keep_live_tail(layout, now: float) -> None:
    """A new ledger holding the bytes from the first entry still inside the window on (entries
    are appended in time order under the vault lock); the lines before it are parsed, the rest
    copied. A damaged line before it is dropped, one after it stays and is skipped when read."""
    path = _ledger_path(layout)
    data = read_bytes_nofollow(path)
    start = 0
    for line in data.splitlines(keepends=True):
        try:
            if now - float(loads_strict(line).get("at", 0)) < REPAIR_WINDOW_SECONDS:
                break
        except (ValueError, TypeError, AttributeError):
            pass
        start += len(line)
    atomic_write(path, data[start:], mode=MACHINE_FILE_MODE)


def forget_written(layout, relpath: str, block_ids: list[str]) -> None:
    """Drop entries for lines that were refused, so no repair writes them later. Lock held."""
    dropped = set(block_ids)
    entries = _load(layout, time.time())
    _rewrite(layout, [e for e in entries if not (e.get("path") == relpath and e.get("id") in dropped)])


def repair_lost_lines(layout, relpaths: Iterable[str] | None = None, now: float | None = None) -> list[str]:
    """Append again the recent lines a save dropped; the notes repaired. Caller holds the vault lock.

    `relpaths` limits the look to those notes (the watcher names what changed). A note that
    cannot take the line right now (an open fence, a folder in its place) is left for the next
    sync; the ledger keeps the entry until its window ends.
    """
    now = time.time() if now is None else now
    by_path = _live_state(layout, now).by_path
    wanted = by_path.keys() if relpaths is None else set(relpaths) & by_path.keys()
    notes = {relpath: dict(by_path[relpath]) for relpath in wanted}  # a repair's own writes change the ledger
    return [relpath for relpath in sorted(notes) if _restore(layout, relpath, notes[relpath])]


def lines_lost_from(layout, read: dict[str, Iterable[str]]) -> bool:
    """Whether a line memvault wrote within the window to one of these notes is not among the
    ids a read of that note found (`read`: note -> ids): a save landed between a repair and
    that read."""
    by_path = _live_state(layout, time.time()).by_path
    return any(by_path.get(relpath, {}).keys() - set(ids) for relpath, ids in read.items())


def _marked_ids(data: bytes) -> Iterable[str]:
    """The ids a note's bytes mark. Parsed (`parse`), since the append that follows parses the
    same text and the parse of a day's note is carried on from its last version, marks too: a
    person's save costs the lines it changed, not the note's thousands."""
    try:
        return parse(data.decode("utf-8")).marked_ids
    except UnicodeDecodeError:
        return marked_ids(data.decode("utf-8", errors="replace"))  # the append names the bad byte


def _restore(layout, relpath: str, entries: dict[str, dict]) -> bool:
    """Append again the lines of `entries` (block id -> entry) the note lacks; True if it did."""
    try:
        data = read_bytes_nofollow(resolve_inside(layout.root, relpath))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return False  # the note itself was deleted or renamed: that is a person's decision
    except (OSError, ValueError, VaultError):
        return False  # unreadable or a symlink now: health names it; nothing is written there
    marked = _marked_ids(data)
    missing = [block_id for block_id in entries if block_id not in marked]
    if not missing:
        return False
    lost_entries = sorted((entries[block_id] for block_id in missing), key=lambda entry: float(entry.get("at", 0)))
    lost = [NewBullet(e["text"], e["id"], e.get("time")) for e in lost_entries]
    verdict = judge(layout.root, relpath, data, [bullet.block_id for bullet in lost])
    if verdict.busy:
        return False  # a git command is writing or waits on a conflict: the next sync looks again
    if verdict.kept_by_git:
        # git put this version here and keeps the line (the stash, the commit before): putting it
        # back would leave the note dirty under git (`git stash pop` would abort); the ledger
        # forgets it, so a later edit of the note does not bring it back either
        forget_written(layout, relpath, sorted(verdict.kept_by_git))
        lost = [bullet for bullet in lost if bullet.block_id not in verdict.kept_by_git]
        if not lost:
            return False
    try:
        return bool(append_bullets_once(layout, relpath, str(lost_entries[0].get("title", "")), lost, match_text=True))
    except (VaultError, OSError, ValueError):
        return False  # cannot take the line right now (an open fence, bad bytes): the next sync
