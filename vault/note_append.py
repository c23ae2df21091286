"""Appending memvault's lines to a note that a person may be saving at the same moment.

The protocol (docs/durability.md, "Notes a person edits"):

1. Under the vault lock (the caller holds it), open the note with ``O_APPEND`` and read it
   through that descriptor. memvault never replaces a note's inode, so a person's in-place save
   (vim's ``:w`` with ``backupcopy=yes``, ``sed -i``'s target, Obsidian) can never be lost to a
   rename of ours, and a rename-save of theirs can never be undone by one of ours.
2. Decide from those bytes (read again after short pauses while they end mid-line: a save in
   place read half-way), which lines are missing, whether a line appended at the end would
   be searchable (not inside an unclosed fence, comment or conflict hunk; under 16 MiB), and
   the note's line ending.
3. Append only the missing lines in one ``write``.
4. Verify, then fsync: when the note's path still names the inode written, and it grew by our
   bytes exactly and ends with them, it holds what we read and then our lines; otherwise read
   it again *by path* and check each line is there. A person's save that landed in between (their editor read the
   note before our write and wrote after it) may have dropped our line; then the lines still
   missing are appended again, with backoff, up to ``APPEND_ATTEMPTS`` times. Nothing is ever
   handed to the agent as a Conflict.
5. What was written is noted in the recent-writes ledger (`vault/recent_writes.py`), so a save
   that drops a line *after* the verify is repaired by the next sync (the watcher runs one on
   that very save).

A new note is created without ever replacing one a person created at that moment: the content
goes to a temp file that is then hard-linked to the note's name (``link`` fails if the name
exists), so the creation is atomic and never clobbers.
"""

from __future__ import annotations

import errno
import os
import random
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from memvault.vault.errors import InvalidRecord, UnsafePath
from memvault.vault.fsio import PUBLIC_DIR_MODE, fsync_dir, make_dir, read_bytes_nofollow, remove_quietly, write_temp
from memvault.vault.ids import normalize_text
from memvault.vault.note import MAX_NOTE_BYTES, Note, format_bullet, new_note_text, parse, parse_ahead
from memvault.vault.paths import resolve_inside

#: how often a line a person's save keeps dropping is appended again before memvault gives up:
#: about 13 s of backoff in all, since on a loaded machine an editor's read-modify-write (or its
#: truncate-then-write) can stay open for a good part of every autosave cycle
APPEND_ATTEMPTS = 20
_BACKOFF_SECONDS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8) + (1.0,) * 12
#: attempts beyond those, with no pause, when a save by rename replaced the note during one (an
#: editor saving at 15 Hz lands in many attempts of a busy owner; backing off held the vault lock)
_QUICK_RETRIES = 8
_NOTE_MODE = 0o644
#: pauses after which an append reads again a note that ended mid-line (`_settled`)
_SETTLE_PAUSES = (0.005, 0.02, 0.05)


#: note path -> (inode, size, mtime) right after this process's last append to it: the watcher's
#: event for that very append is recognised (`written_last_by_us`) and costs no re-read
_own_writes: dict[str, tuple[int, int, int]] = {}


def written_last_by_us(path: Path) -> bool:
    """True when the note is exactly as this process's last append left it (no one wrote since)."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    return _own_writes.get(str(path)) == (info.st_ino, info.st_size, info.st_mtime_ns)


def _remember_own_write(path: Path, info: os.stat_result) -> None:
    if len(_own_writes) > 4096:  # bounded: a long-running owner writes a note a day
        _own_writes.clear()
    _own_writes[str(path)] = (info.st_ino, info.st_size, info.st_mtime_ns)


class NoteNotWritable(InvalidRecord):
    """A note memvault must append to cannot take a searchable line; the message names the fix."""

    code = "note_not_writable"


@dataclass(frozen=True)
class NewBullet:
    text: str
    block_id: str
    wall_time: str | None


def append_bullets_once(layout, relpath: str, title: str, bullets: list[NewBullet], *,
                        match_text: bool = False) -> list[str]:  # fmt: skip
    """Append every bullet whose block id the note lacks; the ids written (empty: all there).

    With `match_text` (repairs), a memory with the same text and no id also counts as there:
    the person removed the id and kept the line. Caller holds the vault lock. Raises
    NoteNotWritable (nothing written) when the note cannot hold a searchable line, or when a
    person's saves dropped the line on every attempt.
    """
    path = note_path_for_writing(layout.root, relpath)
    written: list[str] = []
    attempt, quick = 0, _QUICK_RETRIES
    while attempt < APPEND_ATTEMPTS:
        pause = _BACKOFF_SECONDS[attempt]
        if pause:  # (a sleep of 0 still gives up the GIL, and getting it back costs a busy owner milliseconds)
            time.sleep(pause * random.uniform(0.5, 1.5))  # jitter: never fall into step with a periodic autosave
        # an empty note is most often one an editor has just truncated to write it again in place:
        # wait for its bytes, and only on the last attempt take the emptiness at its word
        appended, missing, renamed_over = _attempt(
            path, relpath, title, bullets, wait_if_empty=attempt + 1 < APPEND_ATTEMPTS, match_text=match_text
        )
        written.extend(block_id for block_id in appended if block_id not in written)
        if not missing:
            return [bullet.block_id for bullet in bullets if bullet.block_id in written]
        if renamed_over and quick:
            quick -= 1  # a save by rename landed during the attempt: the new file is whole, go at once
            continue
        attempt += 1
    raise NoteNotWritable(
        f"{relpath} was saved over memvault's line {APPEND_ATTEMPTS} times in a row (an editor autosaving "
        "an older copy?); nothing was lost on your side. Fix: let the editor reload the note, then retry"
    )


def read_note_if_any(root: Path, relpath: str) -> Note | None:
    """The note as it is now (None if absent), for callers choosing ids before they append."""
    try:
        data = read_bytes_nofollow(resolve_inside(root, relpath))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return parse(decode_note(data, relpath))


def note_path_for_writing(root: Path, relpath: str) -> Path:
    """`root/relpath`, its folders created; a clear error for every shape that cannot hold a note."""
    path = resolve_inside(root, relpath)
    current = Path(root)
    for part in Path(relpath).parts[:-1]:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            _make_folder(current, relpath)
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise NoteNotWritable(
                f"{current.relative_to(root)} is a file, but memvault keeps notes in a folder of that name, "
                f"so {relpath} cannot be written. Fix: rename or move that file away, then retry"
            )
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return path
    if stat.S_ISDIR(info.st_mode):
        raise NoteNotWritable(
            f"{relpath} is a folder, not a note, so memvault cannot write today's memories there. "
            "Fix: rename or move that folder away, then retry"
        )
    if not stat.S_ISREG(info.st_mode):
        raise NoteNotWritable(f"{relpath} is not a regular file. Fix: replace it with a markdown file, then retry")
    return path


def _make_folder(folder: Path, relpath: str) -> None:
    try:
        if not make_dir(folder, PUBLIC_DIR_MODE):  # 0755 whatever the umask, as every vault folder
            return
    except FileExistsError:
        return
    except OSError as exc:
        raise NoteNotWritable(
            f"cannot create the folder for {relpath} ({exc.strerror}). Fix: check its parent"
        ) from exc
    fsync_dir(folder.parent)


def _attempt(path: Path, relpath: str, title: str, bullets: list[NewBullet], *,
             wait_if_empty: bool, match_text: bool) -> tuple[list[str], list[NewBullet], bool]:  # fmt: skip
    """One attempt: append what the note lacks; the ids appended, the bullets the note lacks
    afterwards, and whether another file was renamed over the one this attempt opened."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        appended = _create(path, relpath, title, bullets)
    except OSError as exc:
        raise _open_error(path, relpath, exc) from exc
    else:
        try:
            before, payload = os.fstat(fd).st_size, b""
            appended, payload, text = _append_through(fd, relpath, bullets, wait_if_empty, match_text)
            alone = _landed_alone(fd, path, before, payload) if appended else None
            if alone is not None:
                # the note as this append left it, parsed from the parse it was planned with (the
                # new lines' cost): a person's save of it next is parsed from this version
                # (vault/note.py), not from the one before, which lacks these lines at its end
                parse_ahead(text + payload.decode("utf-8"))
            missing = [] if alone is not None else _missing(_read_back(path), bullets, match_text)
            renamed_over = bool(missing) and _renamed_over(fd, path)
            if not missing:
                # fsync once the lines are seen to have landed (also when an earlier attempt wrote
                # them): a loaded disk's fsync is the slowest step, and a save landing during it
                # would otherwise cost the whole attempt
                os.fsync(fd)
                if appended:
                    _remember_own_write(path, alone or os.fstat(fd))
        except OSError:
            _take_back(fd, before, payload)  # a full disk, a failing fsync: the call fails, the note is as it was
            raise
        finally:
            os.close(fd)
        return appended, missing, renamed_over
    return appended, _missing(_read_back(path), bullets, match_text), False


def _landed_alone(fd: int, path: Path, before: int, payload: bytes) -> os.stat_result | None:
    """The note's stat when nothing but this append touched it since it was read: its path still
    names the inode written, and it grew by the payload exactly and ends with it, so it holds the
    bytes read and then ours, every line there without reading the whole note back. None
    otherwise (read it back)."""
    info = os.fstat(fd)
    if info.st_size != before + len(payload) or os.pread(fd, len(payload), before) != payload:
        return None
    try:
        return info if os.stat(path, follow_symlinks=False).st_ino == info.st_ino else None
    except OSError:
        return None


def _renamed_over(fd: int, path: Path) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_ino != os.fstat(fd).st_ino
    except OSError:
        return False


def _append_through(fd: int, relpath: str, bullets: list[NewBullet], wait_if_empty: bool,
                    match_text: bool) -> tuple[list[str], bytes, str]:  # fmt: skip
    """The ids appended, the bytes written (nothing when the note needs nothing or changed) and
    the note's text they were written after."""
    data = _settled(fd, relpath, _read_fd(fd, relpath))
    if not data and wait_if_empty:
        return [], b"", ""
    text = decode_note(data, relpath)
    note = parse(text)
    missing = _missing(note, bullets, match_text)
    if not missing:
        return [], b"", text
    refuse_unsearchable(note, relpath, missing, len(data))
    payload = _payload(note, missing)
    refuse_opening_a_region(note, relpath, missing, payload)
    if os.fstat(fd).st_size != len(data):
        return [], b"", text  # a save landed while we decided: the caller's next attempt reads it afresh
    try:
        _write_all(fd, payload)  # fsynced by the caller once the read-back shows it landed
    except OSError:
        _take_back(fd, len(data), payload)  # a partial write on a full disk: no torn line is left
        raise
    return [bullet.block_id for bullet in missing], payload, text


def _settled(fd: int, relpath: str, data: bytes) -> bytes:
    """`data`, or the note read again if it ends mid-line and a pause changes it. A person's save
    in place (truncate, then write) read halfway lacks the lines past the read: a repair, or an
    append tried again, would append memvault's lines the person's buffer holds, twice in the
    note once the save ends (and a new line would be written over). The kernel copies a write
    page by page, so a read in the middle of one most often ends mid-line; a note that really
    ends so stays the same through the pauses, and costs them once (the append ends it)."""
    for pause in _SETTLE_PAUSES:
        if not data or data.endswith((b"\n", b"\r")):
            return data  # (an empty note is waited for by the caller)
        time.sleep(pause)
        again = _read_fd(fd, relpath)
        if again == data:
            return data
        data = again
    return data


def _take_back(fd: int, before: int, payload: bytes) -> None:
    """Truncate the note back to `before` bytes if what follows is (a prefix of) our own payload:
    never a person's bytes, which a save may have put there meanwhile."""
    try:
        size = os.fstat(fd).st_size
        if before < size <= before + len(payload) and os.pread(fd, size - before, before) == payload[: size - before]:
            os.ftruncate(fd, before)
    except OSError:
        pass  # the note keeps the line; the next sync indexes what is there


def _create(path: Path, relpath: str, title: str, bullets: list[NewBullet]) -> list[str]:
    note = parse(new_note_text(title))
    payload = _payload(note, bullets)
    refuse_opening_a_region(note, relpath, bullets, payload)
    data = ("".join(note.lines) + payload.decode("utf-8")).encode("utf-8")
    temp = write_temp(path.parent, path.name, data, mode=_NOTE_MODE)
    try:
        os.link(temp, path)  # fails if a person created the note meanwhile: never clobber it
    except FileExistsError:
        return []
    finally:
        remove_quietly(temp)
    fsync_dir(path.parent)
    return [bullet.block_id for bullet in bullets]


def _payload(note: Note, bullets: list[NewBullet]) -> bytes:
    newline = note.newline
    lines = [format_bullet(b.text, b.block_id, b.wall_time, newline) for b in bullets]
    last = note.lines[-1] if note.lines else ""
    prefix = newline if last and not last.endswith(("\n", "\r")) else ""
    return (prefix + "".join(lines)).encode("utf-8")


def refuse_unsearchable(note: Note, relpath: str, bullets: list[NewBullet], size: int) -> None:
    """Raise NoteNotWritable when a line appended to `note` (`size` bytes) would not be found by search."""
    ids = ", ".join(f"^{b.block_id}" for b in bullets)
    if note.open_at_end is not None:
        raise NoteNotWritable(
            f"{relpath} ends inside {note.open_at_end}, so a line appended there ({ids}) would not be "
            "searchable; nothing was written. Fix: close or resolve that region in the note, then retry"
        )
    for bullet in bullets:  # the note's marks: made once per note, carried on across appends
        if bullet.block_id in note.marked_ids:
            raise NoteNotWritable(
                f"{relpath} already holds ^{bullet.block_id} where search does not look (a code fence, a comment "
                "or a merge-conflict hunk); writing a second copy would duplicate the id. "
                "Fix: resolve that region (keep one copy of the line), then retry"
            )
    if size + sum(len(b.text) + 32 for b in bullets) > MAX_NOTE_BYTES:
        raise NoteNotWritable(
            f"{relpath} is {size} bytes; memvault indexes notes up to {MAX_NOTE_BYTES} bytes (16 MiB), so a "
            "line appended there would not be searchable; nothing was written. Fix: split the note into smaller files"
        )


def refuse_opening_a_region(note: Note, relpath: str, bullets: list[NewBullet], payload: bytes) -> None:
    """Raise NoteNotWritable when the lines would leave the note inside a comment (a line such as
    "<!--"), which would hide every line written after them; nothing is written.

    A note that ends in the open (no fence, comment or conflict hunk left open: the appends'
    case) is in the same state after the lines as the lines are alone, so they are parsed alone
    (not the whole day's note again for every append); the whole is parsed only to name the line."""
    if note.open_at_end is None and parse(payload.decode("utf-8")).open_at_end is None:
        return
    after = parse("".join(note.lines) + payload.decode("utf-8"))
    if after.open_at_end is not None:
        ids = ", ".join(f"^{b.block_id}" for b in bullets)
        raise NoteNotWritable(
            f"the lines for {relpath} ({ids}) would leave {after.open_at_end} open, hiding every line after "
            "them; nothing was written. Fix: close the comment in the same text, or leave the marker out"
        )


def _missing(note: Note, bullets: list[NewBullet], match_text: bool) -> list[NewBullet]:
    """The bullets the note lacks, with one pass over the note (a batch of thousands stays linear)."""
    ids = note.by_block_id
    texts = {normalize_text(m.text) for m in note.bullets if m.block_id is None} if match_text else set()
    return [b for b in bullets if b.block_id not in ids and normalize_text(b.text) not in texts]


def _read_fd(fd: int, relpath: str) -> bytes:
    info = os.fstat(fd)
    if info.st_size > MAX_NOTE_BYTES:
        raise NoteNotWritable(
            f"{relpath} is {info.st_size} bytes; memvault indexes notes up to {MAX_NOTE_BYTES} bytes (16 MiB), so a "
            "line appended there would not be searchable; nothing was written. Fix: split the note into smaller files"
        )
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _read_back(path: Path) -> Note:
    try:
        data = read_bytes_nofollow(path)
    except FileNotFoundError:  # a person's rename-save is between its unlink and its rename
        return parse("")
    try:
        return parse(data.decode("utf-8"))
    except UnicodeDecodeError:
        return parse("")  # the next attempt reads it again and names the byte if it stays bad


def _write_all(fd: int, data: bytes) -> None:
    view, written = memoryview(data), 0
    while written < len(view):
        written += os.write(fd, view[written:])


def _open_error(path: Path, relpath: str, exc: OSError) -> Exception:
    if exc.errno == errno.ELOOP:
        return UnsafePath(f"{relpath} is a symlink; memvault never follows links inside a vault. "
                          "Fix: replace the link with the real file")  # fmt: skip
    if exc.errno == errno.EISDIR:
        return NoteNotWritable(f"{relpath} is a folder, not a note. Fix: rename or move that folder away, then retry")
    return NoteNotWritable(f"cannot open {relpath} for writing ({exc.strerror}). Fix: check the file's permissions")


def decode_note(data: bytes, relpath: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(
            f"{relpath} is not valid UTF-8 (byte {exc.start}); memvault will not rewrite it: "
            "fix or re-save the file as UTF-8, then try again (pending turns and captures are retried)"
        ) from exc
