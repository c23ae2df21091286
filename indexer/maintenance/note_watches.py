"""What the watcher asks the kernel to watch: the note folders, and nothing the notes do not need.

    <vault>/            not recursive: a note folder appearing, going away or moving in
    <vault>/daily/      recursive (the nested layout's year and month folders included)
    <vault>/audit/      recursive

One recursive watch on the vault folder would also report every file the intake, the index and
git write (`.capture-intake/` alone changes several files per admitted turn, `.index/` several
per commit), and watchdog reads, parses and dispatches each of those events in Python, in the
owner's process: with many agents writing, about a tenth of the owner's interpreter time went to
events the handler then ignored. Only notes in `daily/` and `audit/` are indexed
(`vault.layout.parse_note_relpath`), so only those folders are watched below the top.

A note folder that appears after the watcher started (a fresh vault's first memory, a `git
checkout` that brings `daily/` back) is announced by the top-level watch as a folder event,
which makes the batch a rescan; `refresh` runs first in that batch, so the folder is watched
before the rescan reads it and nothing written after the rescan can be missed. A note folder
deleted or replaced (another inode) is watched afresh the same way, and so is one whose watch
stopped; the watcher's periodic rescan refreshes too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from memvault.vault.layout import NOTE_KINDS


class NoteWatches:
    def __init__(self, observer, handler, root: Path, event_filter: list):
        self._observer = observer
        self._handler = handler
        self._root = Path(root)
        self._filter = event_filter
        observer.schedule(handler, str(self._root), recursive=False, event_filter=event_filter)
        #: note folder -> (its watch, the folder's (device, inode) when it was scheduled)
        self._folders: dict[str, tuple[object, tuple[int, int]]] = {}

    def refresh(self) -> None:
        """Watch each note folder that exists and drop the watches of folders that went (a
        folder watched afresh: its events from before the watch came are the rescan's)."""
        for kind in sorted(NOTE_KINDS):
            identity = _folder_identity(self._root / kind)
            known = self._folders.get(kind)
            if known is not None and (known[1] != identity or not self._running(known[0])):
                self._observer.unschedule(known[0])
                del self._folders[kind]
                known = None
            if known is None and identity is not None:
                watch = self._observer.schedule(self._handler, str(self._root / kind), recursive=True,
                                                event_filter=self._filter)  # fmt: skip
                self._folders[kind] = (watch, identity)

    def watched(self) -> list[str]:
        """The note folders watched now (for tests and status)."""
        return sorted(self._folders)

    def _running(self, watch) -> bool:
        return any(emitter.watch == watch and emitter.is_alive() for emitter in self._observer.emitters)


def _folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a real folder at `path`; None when absent, a link or not a folder
    (memvault never follows links inside a vault, and a file there holds no notes)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISDIR(info.st_mode) else None
