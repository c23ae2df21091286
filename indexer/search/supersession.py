"""The supersession filter: which memory ids a generation's replay projection retires.

    .index/gen-000007/replay/projection.json     derived: the replay sidecar's exact bytes

Recall and graph expansion exclude retired ids; MemoryJournal reports their state. The
projection is written and verified by `maintenance/replay_index.py`; this module only reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

from memvault.vault.fsio import read_bytes_nofollow
from memvault.vault.replay import MAX_SIDECAR_BYTES, ReplayState, SidecarInvalid, parse_state

PROJECTION_DIR = "replay"
PROJECTION_FILE = "projection.json"
_lifecycle_cache: dict[Path, tuple[tuple[int, int, int], dict[str, dict]]] = {}


def projection_path(generation: Path) -> Path:
    return Path(generation) / PROJECTION_DIR / PROJECTION_FILE


def read_projection(generation: Path) -> tuple[ReplayState, bytes] | None:
    """A generation's replay projection, None if it has none; SidecarInvalid if it is damaged."""
    path = projection_path(generation)
    try:
        data = read_bytes_nofollow(path)
    except FileNotFoundError:
        return None
    if len(data) > MAX_SIDECAR_BYTES:
        raise SidecarInvalid(f"{path} is over {MAX_SIDECAR_BYTES} bytes: run `memvault rebuild`")
    return parse_state(data, str(path)), data


def lifecycle_entries(generation: Path) -> dict[str, dict]:
    """Lifecycle entries (by retired memory id) of a generation's projection, cached by its stat."""
    path = projection_path(generation)
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return {}
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    cached = _lifecycle_cache.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    found = read_projection(generation)
    lifecycle = {} if found is None else found[0].superseded()
    _lifecycle_cache[path] = (key, lifecycle)
    return lifecycle


def superseded_ids(generation: Path) -> frozenset[str]:
    """Ids a generation's projection retires (superseded or updated): recall excludes them."""
    return frozenset(lifecycle_entries(generation))
