"""The supersession filter: which memory ids a generation's replay projection retires.

    .index/gen-000007/replay/projection.json     derived: the replay sidecar's exact bytes
    memvault_generations.replay                  the same bytes, for a generation on an index server

Recall and graph expansion exclude retired ids; MemoryJournal reports their state. The
projection is written and verified by `maintenance/replay_index.py`; this module only reads it.

A generation on an index server has no folder: its projection is a `KeptProjection` (kept with
the generation's own row, `maintenance/server_index.py`). Readers find it two ways:

* recall reads it from the rows it searches (`bm25.kept_projection`: the owner's, a connected
  client's and a search across vaults' alike);
* callers that name a generation by its path (capture, consolidation, health, graph expansion)
  find it through what keeps that vault's generations: a store's server engine
  (`maintenance/server_generations.py`) registers itself for its vault's `.index/` folder
  (`keep_elsewhere`), and a path under that folder is asked of it. A path nobody keeps is read
  from its folder, as before.

Parsed projections are cached by their SHA-256, so a reader that knows the digest (read with the
serving pointer, one round trip) never fetches the bytes again until they change.
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

from memvault.vault.fsio import read_bytes_nofollow
from memvault.vault.replay import MAX_SIDECAR_BYTES, ReplayState, SidecarInvalid, parse_state

PROJECTION_DIR = "replay"
PROJECTION_FILE = "projection.json"
_lifecycle_cache: dict[Path, tuple[tuple[int, int, int], dict[str, dict]]] = {}


class KeptProjection(Protocol):
    """A generation's projection kept outside any folder (an index server's generation row)."""

    where: str  # for messages: "generation 7 of vault 'notes' on the index server"

    def sha256(self) -> str | None:
        """The SHA-256 of the projection's bytes (None: it holds none); cheap when already seen."""

    def read(self) -> bytes | None:
        """The projection's exact bytes, asked afresh."""

    def held_sha256(self) -> str | None:
        """The SHA-256 of the bytes really held, computed where they are kept (None: none held)."""

    def write(self, data: bytes | None) -> bool:
        """Make it hold exactly `data` (None: no projection); True if that changed it."""


class ProjectionKeeper(Protocol):
    """What keeps a vault's generations elsewhere (a store's server engine): asked by path."""

    def kept_projection(self, generation: Path) -> KeptProjection | None:
        """The projection of the generation this path stands for, None if it is not one of ours."""

    def serving_generation_path(self) -> Path | None:
        """The path standing for the serving generation, None before the first build."""


_keepers: dict[Path, list[weakref.ref]] = {}
_keepers_lock = threading.Lock()
#: SHA-256 → (lifecycle entries, retired ids) of kept projections read lately
_by_digest: OrderedDict[str, tuple[dict[str, dict], frozenset[str]]] = OrderedDict()
_DIGESTS_KEPT = 4


def keep_elsewhere(index_dir: Path, keeper: ProjectionKeeper) -> None:
    """`keeper` answers for the generations of the vault whose `.index/` folder is `index_dir`."""
    with _keepers_lock:
        refs = [ref for ref in _keepers.get(Path(index_dir), []) if ref() is not None and ref() is not keeper]
        _keepers[Path(index_dir)] = [*refs, weakref.ref(keeper)]


def stop_keeping(index_dir: Path, keeper: ProjectionKeeper) -> None:
    with _keepers_lock:
        refs = [ref for ref in _keepers.get(Path(index_dir), []) if ref() is not None and ref() is not keeper]
        if refs:
            _keepers[Path(index_dir)] = refs
        else:
            _keepers.pop(Path(index_dir), None)


def keeper_of(index_dir: Path) -> ProjectionKeeper | None:
    """The live keeper registered for a vault's `.index/` folder, if any."""
    with _keepers_lock:
        refs = list(_keepers.get(Path(index_dir), ()))
    for ref in refs:
        keeper = ref()
        if keeper is not None:
            return keeper
    return None


def kept_projection(generation: Path) -> KeptProjection | None:
    """The projection a keeper holds for the generation this path names, None for a folder's."""
    generation = Path(generation)
    keeper = keeper_of(generation.parent)
    return None if keeper is None else keeper.kept_projection(generation)


def projection_path(generation: Path) -> Path:
    return Path(generation) / PROJECTION_DIR / PROJECTION_FILE


def read_projection(generation: Path) -> tuple[ReplayState, bytes] | None:
    """A generation's replay projection, None if it has none; SidecarInvalid if it is damaged."""
    kept = kept_projection(generation)
    if kept is not None:  # afresh, and parsed anew: health and capture's read-back prove what is held,
        data = kept.read()  # and a caller may change the state it gets (never the cache's)
        if data is None:
            return None
        _check_size(data, kept)
        return parse_state(data, f"the replay projection of {kept.where}"), data
    path = projection_path(generation)
    try:
        data = read_bytes_nofollow(path)
    except FileNotFoundError:
        return None
    if len(data) > MAX_SIDECAR_BYTES:
        raise SidecarInvalid(f"{path} is over {MAX_SIDECAR_BYTES} bytes: run `memvault rebuild`")
    return parse_state(data, str(path)), data


def lifecycle_entries(generation: Path) -> dict[str, dict]:
    """Lifecycle entries (by retired memory id) of a generation's projection, cached by its stat
    (a kept projection: by its SHA-256)."""
    kept = kept_projection(generation)
    if kept is not None:
        return kept_lifecycle(kept)
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
    kept = kept_projection(generation)
    if kept is not None:
        return kept_superseded(kept)
    return frozenset(lifecycle_entries(generation))


def retired_ids(bm25) -> frozenset[str]:
    """Ids the projection of the generation `bm25` searches retires: its own kept projection (an
    index server's rows carry theirs), else the one beside its folder."""
    kept = getattr(bm25, "kept_projection", None)
    if kept is not None:
        return kept_superseded(kept)
    return superseded_ids(bm25.folder.parent)


def kept_lifecycle(kept: KeptProjection) -> dict[str, dict]:
    found = _known(kept)
    return {} if found is None else found[0]


def kept_superseded(kept: KeptProjection) -> frozenset[str]:
    found = _known(kept)
    return frozenset() if found is None else found[1]


def _known(kept: KeptProjection):
    """A kept projection by its digest (cached), None when it holds none: no bytes are fetched
    while the digest is unchanged."""
    digest = kept.sha256()
    return None if digest is None else _parse_kept(kept, digest)


def _check_size(data: bytes, kept: KeptProjection) -> None:
    if len(data) > MAX_SIDECAR_BYTES:
        raise SidecarInvalid(f"the replay projection of {kept.where} is over {MAX_SIDECAR_BYTES} bytes: "
                             "run `memvault rebuild`")  # fmt: skip


def _parse_kept(kept: KeptProjection, digest: str):
    """(lifecycle entries, retired ids) for recall's and the journal's reads: from
    the cache for a known `digest`, else read afresh (None when it holds none). Shared: read only."""
    if digest is not None:
        with _keepers_lock:
            cached = _by_digest.get(digest)
            if cached is not None:
                _by_digest.move_to_end(digest)
                return cached
    data = kept.read()
    if data is None:
        return None
    _check_size(data, kept)
    actual = hashlib.sha256(data).hexdigest()
    with _keepers_lock:
        cached = _by_digest.get(actual)
    if cached is not None:
        return cached
    state = parse_state(data, f"the replay projection of {kept.where}")
    lifecycle = state.superseded()
    entry = (lifecycle, frozenset(lifecycle))
    with _keepers_lock:
        _by_digest[actual] = entry
        while len(_by_digest) > _DIGESTS_KEPT:
            _by_digest.popitem(last=False)
    return entry
