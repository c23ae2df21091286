"""Durable completed-turn intake: admission, projection records, permanent ledger, recovery.

The vault half of `MemoryStore.persist_completed_turn`; the background worker that projects
and indexes admitted turns lives in `indexer/services/intake_worker.py`. See docs/durability.md,
"Durable intake", for the guarantees and crash windows.
"""

from memvault.vault.intake.admission import AdmissionResult, admit_turn, host_summary, intake_id_for, skip_reason
from memvault.vault.intake.files import IntakeDirs

#: every named commit boundary a crash hook is called at, in the order a turn meets them
BOUNDARIES = (
    "catalog.created",
    "admit.record_written",
    "admit.record_fsynced",
    "admit.record_renamed",
    "admit.committed",
    "project.note_written",
    "project.indexed",
    "resolve.receipt_written",
    "resolve.shard_torn",
    "resolve.shard_appended",
    "resolve.catalog_committed",
    "resolve.active_removed",
    "dead.rewritten",
    "retry.rewritten",
)

__all__ = ["AdmissionResult", "BOUNDARIES", "IntakeDirs", "admit_turn", "host_summary", "intake_id_for", "skip_reason"]
