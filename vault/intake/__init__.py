"""Durable completed-turn intake: admission, projection records, permanent ledger, recovery.

The vault half of `MemoryStore.persist_completed_turn`; the background worker that projects
and indexes admitted turns lives in `indexer/services/intake_worker.py`. See docs/durability.md,
"Durable intake", for the guarantees and crash windows.
"""

import importlib

#: what this package offers, and the module each name lives in: imported on first use, so a
#: reader that only needs `intake.files` (recall's supersession check) does not load admission
_EXPORTS = {name: "memvault.vault.intake.admission"
            for name in ("AdmissionResult", "admit_turn", "host_summary", "intake_id_for", "skip_reason")}  # fmt: skip
_EXPORTS["IntakeDirs"] = "memvault.vault.intake.files"


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: every named commit boundary a crash hook is called at, in the order a turn meets them
BOUNDARIES = (
    "catalog.created",
    "admit.record_written",
    "admit.record_fsynced",
    "admit.record_renamed",
    "admit.committed",
    "project.note_written",
    "project.indexed",
    "resolve.receipts_prepared",
    "resolve.receipt_written",
    "resolve.shard_torn",
    "resolve.shard_appended",
    "resolve.catalog_committed",
    "resolve.active_removed",
    "dead.rewritten",
    "retry.rewritten",
)

__all__ = ["AdmissionResult", "BOUNDARIES", "IntakeDirs", "admit_turn", "host_summary", "intake_id_for", "skip_reason"]
