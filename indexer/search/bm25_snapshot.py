"""Reading a BM25 index that cannot be written: a private copy of its files.

Tantivy takes a lock file inside the index folder even to read it (its reader holds the meta
lock while it loads segments), so on a read-only mount `tantivy.Index(path=...)` fails with
"Failed to acquire Lockfile". tantivy-py exposes no read-only directory, so a reader of a
read-only vault opens a copy of the generation's files in a private temp folder (0700) instead;
the copy is removed when the index object goes away. Segment files are immutable once
committed, so a copy taken between commits is a consistent index; if a writer elsewhere (the
read-only mount may be a view of a writable folder) commits meanwhile, `meta.json` names files
the copy may miss, and the copy is simply retaken.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path

#: Tantivy's own lock files: never copied (the copy takes its own)
_LOCK_FILES = frozenset({".tantivy-meta.lock", ".tantivy-writer.lock"})
_ATTEMPTS = 3


def needs_snapshot(folder: Path) -> bool:
    """True when this process cannot create Tantivy's lock files in `folder`."""
    return folder.is_dir() and not os.access(folder, os.W_OK)


def meta_stamp(folder: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(folder / "meta.json")
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns


def take_snapshot(folder: Path, owner: object) -> Path:
    """A private copy of the index files in `folder`, deleted with `owner`."""
    copy = Path(tempfile.mkdtemp(prefix="memvault-readonly-bm25-"))
    weakref.finalize(owner, shutil.rmtree, copy, True)
    for _ in range(_ATTEMPTS):
        before = meta_stamp(folder)
        _copy_files(folder, copy)
        if meta_stamp(folder) == before:
            break
    return copy


def _copy_files(source: Path, target: Path) -> None:
    for entry in os.scandir(source):
        if entry.name in _LOCK_FILES or not entry.is_file(follow_symlinks=False):
            continue
        shutil.copyfile(entry.path, target / entry.name)
