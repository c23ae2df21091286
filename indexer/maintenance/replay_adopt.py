"""`memvault adopt-replay --json`: the metadata-only trust-on-first-use flow for replay state.

For a BuJo vault whose serving index holds replay state (lifecycle, edges) but which has no
`.replay-projection-v1.json` (a vault restored without its sidecar, or written by an older
memvault): capture and rebuild refuse to run, because BuJo never infers a projection from an
index. With the agent stopped (the liveness fence is taken), adoption

1. reads the index's projection strictly (the sidecar format: metadata only, no text);
2. attests every entry before trusting any:
   - a `capture` entry names an intake run; its authority digest must equal the one recomputed
     from that run's payload hash, found in its active record (a pending capture intent), its
     resolved receipt, or its permanent ledger entry;
   - a `direct` entry (the legacy direct-capture surface has no intake record) is attested when
     every fact it names is a curated bullet in the index;
   - each lifecycle/edge entry's authority must be an attested capture entry of the projection;
   - capture entries must be disjoint: no fact is claimed by two runs.
   One unattested entry refuses the whole adoption; nothing is written;
3. writes the sidecar (0600) and a marker that makes the *next* step a `memvault rebuild`:
   capture stays paused until that rebuild has swapped in a generation projected from the
   adopted sidecar. Never start the agent between the two.

Retained semantic plans of pending runs are untouched: after the rebuild the intake worker
commits them from the plan, without another model call.
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime

from memvault.indexer.maintenance.replay_index import ADOPTION_MARKER, serving_generation
from memvault.indexer.search.supersession import read_projection
from memvault.vault.errors import Conflict, InvalidConfig, VaultError
from memvault.vault.fsio import atomic_write
from memvault.vault.intake.files import IntakeDirs
from memvault.vault.intake.ledger import Ledger
from memvault.vault.intake.state import find_active, read_receipt
from memvault.vault.layout import VaultLayout
from memvault.vault.locks import LivenessFence, VaultLock
from memvault.vault.replay import capture_authority, render_state, sidecar_path


def adopt_replay(layout: VaultLayout, config, now: datetime) -> dict:
    """Adopt the serving index's replay state as the sidecar (see the module docstring)."""
    if config.memory.mode != "bujo":
        raise InvalidConfig(
            f'adopt-replay is for memory.mode "bujo"; this vault is {config.memory.mode!r}, '
            "which never holds replay state"
        )
    with LivenessFence(layout.root), VaultLock(layout.root):
        if os.path.lexists(sidecar_path(layout.root)):
            return {"adopted": False, "reason": "sidecar_present", "next": None}
        generation = serving_generation(layout)  # a folder's, or an index server's (the store keeps it)
        found = None if generation is None else read_projection(generation)
        if found is None or not found[0].entries:
            return {"adopted": False, "reason": "no_replay_state", "next": None}
        state, _ = found
        attested = attest(layout, state)
        data = render_state(state)
        atomic_write(sidecar_path(layout.root), data, mode=0o600)
        marker = f"{hashlib.sha256(data).hexdigest()} {now.isoformat()}\n".encode()
        atomic_write(layout.root / ADOPTION_MARKER, marker, mode=0o600)
    return {
        "adopted": True,
        "reason": None,
        "entries": len(state.entries),
        "attested": attested,
        "sidecarSha256": hashlib.sha256(data).hexdigest(),
        "generation": generation.name,
        "next": "memvault rebuild",
    }


def attest(layout: VaultLayout, state) -> dict:
    """Counts of attested captures by evidence; Conflict naming the first unattested entry."""
    counts = {"pendingIntents": 0, "receipts": 0, "ledger": 0, "direct": 0}
    digests: set[str] = set()
    claimed: dict[str, str] = {}
    curated = None
    for entry in state.captures():
        authority = entry["authority"]
        if authority["kind"] == "capture":
            evidence = _capture_evidence(layout, entry["run"], authority["digest"])
        else:
            curated = _curated_ids(layout) if curated is None else curated
            evidence = "direct" if set(entry["facts"]) <= curated else None
        if evidence is None:
            raise _refuse(
                f"capture entry for run {entry['run']} cannot be attested by its intake record, receipt "
                "or ledger entry (or, for a direct capture, by its facts in the notes)"
            )
        for fact in entry["facts"]:
            if claimed.setdefault(fact, entry["run"]) != entry["run"]:
                raise _refuse(f"fact {fact} is claimed by two capture runs (authorities must be disjoint)")
        counts[evidence] += 1
        digests.add(authority["digest"])
    for key, entry in sorted(state.entries.items()):
        if entry["kind"] != "capture" and entry["authority"]["digest"] not in digests:
            raise _refuse(f"{entry['kind']} entry {key[1:]} has an authority that no attested capture holds")
    return counts


def _capture_evidence(layout: VaultLayout, intake_id: str, digest: str) -> str | None:
    dirs = IntakeDirs(layout.root)
    if not dirs.exists():
        return None
    try:
        active = find_active(dirs, intake_id)
        if active is not None:
            return "pendingIntents" if capture_authority(intake_id, active[1].payload_sha256) == digest else None
        receipt = read_receipt(dirs, intake_id)
        if receipt is not None:
            return "receipts" if capture_authority(intake_id, receipt.payload_sha256) == digest else None
        committed = Ledger(dirs, create=False).lookup(intake_id)
    except (VaultError, OSError):
        return None
    return "ledger" if committed is not None and capture_authority(intake_id, committed) == digest else None


def _curated_ids(layout: VaultLayout) -> set[str]:
    from memvault.indexer.maintenance.derived import DerivedIndex

    index = DerivedIndex.open_current(layout)
    return set() if index is None else {row.id for row in index.all_rows() if row.kind == "curated"}


def _refuse(problem: str) -> Conflict:
    return Conflict(
        f"adopt-replay refused: {problem}; nothing was written. The index's replay state is not "
        "trusted. Fix: restore the vault's .replay-projection-v1.json from a backup, or rebuild a fresh "
        "BuJo index after moving .index/ aside (replay history is then lost)."
    )
