"""The runtime commit: temp files for everything, rename the projections, rename memories.json last.

    write temp USER.md, temp MEMORY.md, temp memories.json (each fsynced)
    rename the projections            -> fsync runtime/
    rename memories.json (the marker) -> fsync runtime/

A SIGKILL anywhere leaves memories.json old or new, whole. Projections renamed before a crash
carry the next revision in their header and an intact digest, so the loader recognises them
as memvault's own uncommitted bytes and regenerates them from memories.json (projection.py).
Temp files use unique `mkstemp` names starting with "." and ending in ".tmp", which every
reader ignores; a failure before the marker rename removes them.

`boundary(name)` is a test hook passed in by the entry layer (never read from the
environment here): it is called at each named commit boundary so a crash test can SIGKILL
the process exactly there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from memvault.vault.fsio import PUBLIC_DIR_MODE, fsync_dir, make_dir, remove_quietly, write_temp
from memvault.vault.paths import resolve_inside

Boundary = Callable[[str], None]
TEMPS_WRITTEN = "runtime:temps-written"
COMMITTED = "runtime:committed"


def renamed(target: str) -> str:
    return f"runtime:renamed-{target}"


def ensure_folder(root: Path, relpath: str) -> Path:
    """`root/relpath` as a real folder (created, and its entry fsynced, if missing)."""
    path = resolve_inside(root, relpath)
    if not path.is_dir():
        make_dir(path, PUBLIC_DIR_MODE, parents=True)  # canonical: readable, never group/world-writable
        fsync_dir(path.parent)
    return path


def commit(
    root: Path,
    projections: list[tuple[str, str, bytes]],
    state_relpath: str,
    state_bytes: bytes,
    boundary: Boundary | None = None,
) -> None:
    """Write `projections` ((target, relpath, bytes)) and then the state file, in that order."""
    hook = boundary or (lambda _name: None)
    # resolve_inside refuses a symlink at any existing component, the files themselves included
    paths = [(target, resolve_inside(root, rel), data) for target, rel, data in projections]
    state_path = resolve_inside(root, state_relpath)
    folder = state_path.parent
    temps: list[Path | None] = []
    try:
        for _target, path, data in paths:
            temps.append(write_temp(folder, path.name, data, mode=0o644))
        temps.append(write_temp(folder, state_path.name, state_bytes, mode=0o644))
        hook(TEMPS_WRITTEN)
        for (target, path, _data), tmp in zip(paths, temps, strict=False):  # temps ends with the state file's
            os.replace(tmp, path)
            temps[temps.index(tmp)] = None
            hook(renamed(target))
        fsync_dir(folder)
        os.replace(temps[-1], state_path)
        temps[-1] = None
    except BaseException:
        for tmp in temps:
            if tmp is not None:
                remove_quietly(tmp)
        raise
    fsync_dir(folder)
    hook(COMMITTED)
