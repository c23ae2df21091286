"""Admission over the network: one run-id-keyed statement on the team server, behind the
specification's fingerprint LRU (`lru.py`).

The record is prepared on the client by the same checks local admission runs
(`vault.intake.admission.prepare_turn`: skip rules, cron hygiene, size caps, credential refusal),
so nothing is sent that a local vault would refuse. The server's ledger is permanent, so unlike
the specification's service it tells a duplicate and a conflicting payload from a new turn after
any eviction or restart. Every answer is an `AdmissionResult`, as locally; a server that cannot be
reached is `failed("index_server_unavailable", …)` (the host's degradation warning), and neither
it nor any other failure takes a place in the LRU.
"""

from __future__ import annotations

from memvault.indexer.backend.base import IndexServerUnavailable
from memvault.indexer.team.lru import FingerprintLRU
from memvault.vault.errors import VaultError
from memvault.vault.intake.admission import ADMITTED, DUPLICATE, FAILED, AdmissionResult
from memvault.vault.intake.record import IntakeRecord, render_record

#: the state a turn reports while it waits on the server for the vault's owner, and once the
#: owner holds it in its files (or, for a turn its batch could not take, in its durable intake)
WAITING, CLAIMED = "waiting_for_owner", "claimed_by_owner"


def conflict(record_id: str) -> AdmissionResult:
    return AdmissionResult(FAILED, record_id, "conflict",
                           f"run {record_id} was already admitted with a different payload; the turn was NOT saved "
                           "(a run id is admitted once). Use a new run id for a new turn.")  # fmt: skip


class NetworkAdmission:
    """Admits prepared records to one vault's ledger; thread-safe (one LRU per store process)."""

    def __init__(self, server):
        self.server = server
        self.lru = FingerprintLRU()
        #: requests actually sent (tests count them: retained retries and coalesced ones send none)
        self.requests = 0

    def admit(self, record: IntakeRecord) -> AdmissionResult:
        digest = record.payload_sha256  # canonical JSON + SHA-256: computed once per call
        run, payload = bytes.fromhex(record.id), bytes.fromhex(digest)
        decision = self.lru.decide(run, payload)
        if decision.kind == "retained":
            return AdmissionResult(DUPLICATE, record.id, None, "already admitted with the same payload")
        if decision.kind == "conflict":
            return conflict(record.id)
        if decision.kind == "wait":
            decision.flight.done.wait()
            return decision.flight.outcome
        result = AdmissionResult(
            FAILED, record.id, "internal_error", "the admission did not finish; the turn was NOT saved"
        )
        try:
            result = self._send(record, digest)
        finally:
            self.lru.finish(run, decision.flight, result, completed=result.ok)
        return result

    def _send(self, record: IntakeRecord, digest: str) -> AdmissionResult:
        self.requests += 1
        try:
            inserted, stored, projected = self.server.admit(record.id, digest, render_record(record))
        except IndexServerUnavailable as exc:
            return AdmissionResult(FAILED, record.id, exc.code, f"the turn was NOT saved: {exc}")
        except VaultError as exc:
            return AdmissionResult(
                FAILED, record.id, getattr(exc, "code", "vault_error"), f"the turn was NOT saved: {exc}"
            )
        if inserted:
            return AdmissionResult(ADMITTED, record.id, None, None, WAITING)
        if stored != digest:
            return conflict(record.id)
        return AdmissionResult(DUPLICATE, record.id, None, "already admitted with the same payload",
                               CLAIMED if projected else WAITING)  # fmt: skip
