"""Temp files an interrupted memvault write left behind, for `memvault health`.

Every durable write goes temp file → fsync → rename (`vault/fsio.py`); the temp file has a unique
`mkstemp` name, `.NAME.XXXXXXXX.tmp`, and is removed on every failure the process lives through.
A process killed between the write and the rename (SIGKILL, OOM, power) cannot remove it: the
file then sits beside the note, document or record, harmless (every reader skips such names) but
taking space and puzzling people. Health names each one older than a few minutes (a younger one
may belong to a write in progress, such as the vector file of a large vault) with the fix.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

#: the names `tempfile.mkstemp(prefix=".NAME.", suffix=".tmp")` makes: 8 characters from its alphabet
TEMP_NAME = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp")
#: a temp file untouched this long belongs to no write in progress
STALE_TEMP_SECONDS = 600.0
#: folders never walked: another tool's state, or a snapshot the person keeps
_SKIPPED_DIRS = frozenset({".git", ".obsidian", ".trash", "node_modules"})
#: at most this many are named (a vault with more has one problem, said once)
MAX_LISTED = 50


def stray_temp_files(root: Path) -> Iterator[tuple[str, str]]:
    """(vault-relative path, the file it was to replace) of each stale temp file, sorted, bounded."""
    root = Path(root)
    now = time.time()
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not os.path.islink(os.path.join(folder, d)))
        for name in files:
            match = TEMP_NAME.fullmatch(name)
            if match is None:
                continue
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue  # renamed or removed meanwhile: a write that finished
            if now - info.st_mtime >= STALE_TEMP_SECONDS:
                found.append((os.path.relpath(path, root), os.path.relpath(os.path.join(folder, match["name"]), root)))
        if len(found) > MAX_LISTED:
            break
    yield from sorted(found)[:MAX_LISTED]
