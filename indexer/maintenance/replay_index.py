"""The index side of the replay sidecar: each generation's projection, recall's supersession
filter's source, the rebuild guards and the strict health comparison.

    .index/gen-000007/replay/projection.json     derived: the sidecar's exact canonical bytes
    memvault_generations.replay                  the same, for a generation on an index server

The sidecar (`vault/replay.py`) is the authority; the projection is what readers of one index
generation use (recall excludes ids it retires; MemoryJournal reports their state). A capture
publishes the sidecar delta, projects it into the serving generation and reads it back before
the intake run is resolved; every new generation (rebuild, compaction, first build) gets the
projection before it is activated. Lite and Journal never get one, and an index of theirs that
holds one is a health error.

BuJo never *infers* replay state from an index: a generation holding replay state while the
vault has no sidecar blocks capture and rebuild until an operator runs the metadata-only
`memvault adopt-replay --json` (indexer/maintenance/replay_adopt.py) and then `memvault rebuild`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from memvault.indexer.maintenance.generations import REBUILD_GUARDS, current_generation
from memvault.indexer.search.supersession import (
    keeper_of,
    kept_projection,
    lifecycle_entries,
    projection_path,
    read_projection,
)
from memvault.vault.capture.plan import retained_plan_ids
from memvault.vault.errors import Conflict, IndexUnavailable, InvalidConfig, VaultError, VaultLocked
from memvault.vault.fsio import atomic_write, ensure_private_dir, fsync_dir, read_bytes_nofollow
from memvault.vault.intake.files import DEAD, PENDING, IntakeDirs
from memvault.vault.intake.state import read_record
from memvault.vault.layout import VaultLayout
from memvault.vault.locks import VaultLock
from memvault.vault.replay import ReplayState, narrow_checked_out_sidecar, read_sidecar, sidecar_path

#: written by adopt-replay, removed by the rebuild that must follow it
ADOPTION_MARKER = ".replay-adoption-pending"
ADOPT_FIX = (
    "stop the agent, run `memvault adopt-replay --json`, then `memvault rebuild` (never start the agent between them)"
)


def serving_generation(layout: VaultLayout) -> Path | None:
    """The serving generation's path: the folder CURRENT names, or for a vault whose generations
    an index server keeps, the path standing for the server's serving one (supersession.py)."""
    keeper = keeper_of(layout.index_dir)
    if keeper is not None:
        return keeper.serving_generation_path()
    return current_generation(layout.index_dir)


def write_projection(generation: Path, data: bytes | None) -> bool:
    """Make the generation's projection hold exactly `data` (None: no projection). True if changed."""
    kept = kept_projection(generation)
    if kept is not None:
        return kept.write(data)
    path = projection_path(generation)
    try:
        current = read_bytes_nofollow(path)
    except FileNotFoundError:
        current = None
    if current == data:
        return False
    if data is None:
        os.unlink(path)
        fsync_dir(path.parent)
        return True
    ensure_private_dir(path.parent)
    atomic_write(path, data, mode=0o600)
    return True


def project_generation(layout: VaultLayout, config, generation: Path) -> bytes | None:
    """Project the sidecar into a generation (BuJo), or remove any projection (Lite/Journal)."""
    if config.memory.mode != "bujo":
        write_projection(generation, None)
        return None
    _, data = read_sidecar(layout.root)
    write_projection(generation, data)
    return data


def verify_projection(generation: Path, expected: bytes | None) -> None:
    """Prove the generation holds exactly the published sidecar before the durable intent goes
    (a server proves it by the digest it computes of the bytes it holds: none are sent back)."""
    kept = kept_projection(generation)
    if kept is not None:
        matches = kept.held_sha256() == (None if expected is None else hashlib.sha256(expected).hexdigest())
    else:
        found = read_projection(generation)
        matches = (None if found is None else found[1]) == expected
    if not matches:
        where = projection_path(generation) if kept is None else f"the replay projection of {kept.where}"
        raise IndexUnavailable(
            f"{where} does not match the replay sidecar just published: "
            "the capture stays pending and is retried (or run `memvault rebuild`)"
        )


class SidecarFollower:
    """The owner's serving projection follows a sidecar changed behind its back (a git pull,
    merge or rebase; another machine's captures): on each watcher batch, in BuJo, a sidecar
    whose stat stamp changed since it was last projected is read and projected into the serving
    generation, so health and recall agree with it without a rebuild.

    Never infers: a sidecar that went away leaves the projection as it is (health then asks for
    `adopt-replay`), and one that is not valid is not projected (health names it and its fix)."""

    def __init__(self, layout: VaultLayout, config, lock_timeout: float = 5.0):
        self.layout, self.config, self.lock_timeout = layout, config, lock_timeout
        self._stamp: tuple | None = None

    def follow(self) -> tuple[bool, str | None]:
        """(the projection changed, why the sidecar could not be projected or None). A busy vault
        lock is neither: the stamp stays unseen and the next call tries again."""
        if self.config.memory.mode != "bujo":
            return False, None
        path = sidecar_path(self.layout.root)
        narrow_checked_out_sidecar(path)  # before the stamp: narrowing changes its ctime
        stamp = _stamp_of(path)
        if stamp is None or stamp == self._stamp:
            return False, None
        try:
            with VaultLock(self.layout.root, timeout=self.lock_timeout):
                generation = serving_generation(self.layout)
                if generation is None:
                    return False, None  # no index yet: the first build projects it
                self._stamp = stamp
                _, data = read_sidecar(self.layout.root)
                return data is not None and write_projection(generation, data), None
        except VaultLocked:
            return False, None
        except (VaultError, OSError) as exc:
            return False, f"the replay sidecar was not projected: {exc}"


def _stamp_of(path: Path) -> tuple | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


class SupersessionSource:
    """MemoryJournal's `supersession_state` for BuJo: the serving generation's stored lifecycle."""

    def __init__(self, layout: VaultLayout):
        self.layout = layout

    def lifecycle(self, entry_id: str) -> dict | None:
        """None while the entry is current; else {"state": superseded|updated, "by": id, "at": ts}."""
        generation = serving_generation(self.layout)
        entry = None if generation is None else lifecycle_entries(generation).get(entry_id)
        return None if entry is None else {"state": entry["state"], "by": entry["by"], "at": entry["at"]}

    def supersession_state(self, entry_id: str) -> str:
        """ "valid", or "superseded" for a memory a capture superseded or updated (journal states)."""
        return "valid" if self.lifecycle(entry_id) is None else "superseded"


# --- what blocks capture and rebuild -----------------------------------------------------------


def adoption_pending(layout: VaultLayout) -> bool:
    return os.path.lexists(layout.root / ADOPTION_MARKER)


def unadopted_state(layout: VaultLayout) -> bool:
    """True when the serving index holds replay state but the vault has no sidecar."""
    if os.path.lexists(sidecar_path(layout.root)):
        return False
    try:
        generation = serving_generation(layout)
        found = None if generation is None else read_projection(generation)
    except (IndexUnavailable, VaultError):
        return False  # an unreadable index is rebuilt from the files; it carries no trusted state
    return found is not None and bool(found[0].entries)


def capture_blocked_reason(layout: VaultLayout) -> str | None:
    if adoption_pending(layout):
        return "replay adoption is pending: run `memvault rebuild` before starting the agent"
    if unadopted_state(layout):
        return f"the index holds replay state but the vault has no replay sidecar: {ADOPT_FIX}"
    return None


def finish_rebuild(layout: VaultLayout, config) -> None:
    """After a BuJo rebuild swapped in: the adoption it completed is no longer pending."""
    marker = layout.root / ADOPTION_MARKER
    if config.memory.mode == "bujo" and os.path.lexists(marker):
        os.unlink(marker)
        fsync_dir(layout.root)


def refuse_retained_plan_in_other_tier(layout: VaultLayout, config) -> None:
    """Rebuild guard: a BuJo plan cannot be rebuilt into Lite/Journal (refused before any change)."""
    if config.memory.mode == "bujo":
        return

    waiting = sorted(set(retained_plan_ids(layout.root)) | set(_awaiting_capture(layout)))
    if waiting:
        raise InvalidConfig(
            f"{len(waiting)} BuJo capture run(s) are not finished (first: {waiting[0]}): a retained BuJo semantic plan "
            f"cannot be rebuilt into memory.mode {config.memory.mode!r}, which cannot keep its run-derived ids and "
            "replay contract; nothing was changed. Fix: start the agent with the BuJo configuration until "
            "`memvault inspect` shows no capture work, then change tiers and rebuild."
        )


def refuse_unadopted_replay_state(layout: VaultLayout, config) -> None:
    """Rebuild guard: never rebuild BuJo over index-only replay state (it would be lost)."""
    if config.memory.mode == "bujo" and unadopted_state(layout):
        raise Conflict(
            f"the serving index holds replay state and the vault has no replay sidecar; nothing was "
            f"changed. Fix: {ADOPT_FIX}."
        )


def _awaiting_capture(layout: VaultLayout) -> list[str]:
    dirs = IntakeDirs(layout.root)
    if not dirs.exists():
        return []
    waiting = []
    for folder in (PENDING, DEAD):
        for intake_id in dirs.list_folder(folder).ids:
            try:
                record = read_record(dirs, folder, intake_id)
            except (VaultError, OSError):
                continue
            if record.tier == "bujo" and record.payload.write_mode == "capture":
                waiting.append(intake_id)
    return waiting


for _guard in (refuse_retained_plan_in_other_tier, refuse_unadopted_replay_state):
    if _guard not in REBUILD_GUARDS:
        REBUILD_GUARDS.append(_guard)


# --- strict health: the sidecar against the serving generation, exactly ---------------------------


def replay_findings(
    layout: VaultLayout, config, generation: Path | None, strict: bool
) -> list[tuple[str, str, str, str, str]]:
    """(severity, code, subject, message, fix) for `indexer/maintenance/health.py`'s replay check."""
    rebuild = "memvault rebuild"
    found: list[tuple[str, str, str, str, str]] = []
    try:
        projection = None if generation is None else read_projection(generation)
    except VaultError as exc:
        return [("error", "canonical_mismatch", ".index/", str(exc), rebuild)]
    held = None if projection is None else projection[0]
    if config.memory.mode != "bujo":
        if held is not None and held.entries:
            found.append(
                (
                    "error",
                    "replay_state_in_tier",
                    ".index/",
                    f"the {config.memory.mode} index holds "
                    f"{len(held.entries)} replay-owned lifecycle/edge entries, which only BuJo may hold",
                    rebuild,
                )
            )
        return found
    if adoption_pending(layout):
        found.append(
            ("error", "adoption_pending", ADOPTION_MARKER, "replay adoption was not followed by a rebuild", rebuild)
        )
    try:
        sidecar, data = read_sidecar(layout.root)
    except (VaultError, OSError) as exc:
        return found + [("error", "sidecar_invalid", ".replay-projection-v1.json", str(exc), ADOPT_FIX)]
    if data is None:
        if held is not None and held.entries:
            found.append(
                (
                    "error",
                    "unadopted_replay_state",
                    ".index/",
                    "the index holds replay state but the vault "
                    "has no replay sidecar (BuJo never trusts index-only lifecycle or edges)",
                    ADOPT_FIX,
                )
            )
        return found
    if generation is not None and (projection is None or projection[1] != data):
        found.append(("error", "canonical_mismatch", ".index/", _mismatch(sidecar, held, strict), rebuild))
    return found


def _mismatch(sidecar: ReplayState, held: ReplayState | None, strict: bool) -> str:
    if held is None:
        return "the index has no replay projection but the vault has a replay sidecar"
    if not strict:
        return (
            "the index's replay projection differs from the replay sidecar (run `memvault health --strict` for details)"
        )
    extra = [key for key in held.entries if sidecar.entries.get(key) != held.entries[key]]
    missing = [key for key in sidecar.entries if held.entries.get(key) != sidecar.entries[key]]
    return (
        f"the index's replay projection differs from the replay sidecar: {len(extra)} entries not attested by the "
        f"sidecar (first: {extra[:1]}), {len(missing)} sidecar entries missing or different (first: {missing[:1]})"
    )


__all__ = [
    "ADOPTION_MARKER", "SidecarFollower", "SupersessionSource", "capture_blocked_reason", "finish_rebuild",
    "project_generation", "replay_findings", "verify_projection",
]  # fmt: skip
