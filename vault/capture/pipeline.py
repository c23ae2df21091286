"""Planning one capture: exactly one extraction call, at most one batched reconciliation call.

    extraction = parse_extraction(model.complete(extraction prompt))         # call 1, always
    for each memory: an exact current duplicate → NOOP (no model needed)
                     close existing memories     → offered for reconciliation
                     none                        → ADD (clearly novel: skips call 2)
    decisions = parse_reconciliation(model.complete(reconciliation prompt))  # call 2, only if offered
    plan = build_plan(...)

Entity extraction is part of call 1; there is never a third call. The model and the candidate
lookup come in through `ChatModel` and `CandidateFinder`, so this runs without HTTP or an index.
An invalid answer raises `ModelOutputInvalid` and nothing is planned: the intake retries the
whole run later (a plan is only ever built from two valid answers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from memvault.vault.capture.extraction import parse_extraction
from memvault.vault.capture.plan import SemanticPlan, build_plan
from memvault.vault.capture.prompt import Candidate, extraction_messages, reconciliation_messages
from memvault.vault.capture.reconcile import parse_reconciliation
from memvault.vault.clock import local_day_and_time, zone
from memvault.vault.intake.files import CrashHook, hit
from memvault.vault.intake.record import IntakeRecord, format_ts

#: called between steps; raises to abandon the attempt (the intake worker's shutdown)
Checkpoint = Callable[[], None]


class ChatModel(Protocol):
    def complete(self, messages: Sequence[Mapping[str, str]], *, response_format_json: bool) -> str: ...


class CandidateFinder(Protocol):
    def exact_duplicate(self, text: str) -> str | None:
        """The id of a current curated fact with exactly this (normalised) content, or None."""

    def candidates(self, text: str) -> Sequence[Candidate]:
        """Close existing memories for a new one (empty when it is clearly novel)."""


def turn_text(record: IntakeRecord) -> str:
    """What the extraction reads: the host-approved capture text, else the host summary."""
    return record.payload.capture_text if record.payload.capture_text is not None else record.payload.summary


def plan_capture(
    record: IntakeRecord,
    *,
    model: ChatModel,
    finder: CandidateFinder,
    vault_zone: str,
    now: datetime,
    hook: CrashHook | None = None,
    checkpoint: Checkpoint | None = None,
) -> SemanticPlan:
    """The semantic plan for one admitted capture turn (not yet durable: see plan.write_plan)."""
    messages = extraction_messages(turn_text(record), format_ts(record.completed_at))
    extraction = parse_extraction(model.complete(messages, response_format_json=True))
    hit(hook, "capture.extracted")
    duplicates: dict[int, str] = {}
    offered: dict[int, Sequence[Candidate]] = {}
    for memory in extraction.memories:
        duplicate = finder.exact_duplicate(memory.text)
        if duplicate is not None:
            duplicates[memory.index] = duplicate
            continue
        close = list(finder.candidates(memory.text))
        if close:
            offered[memory.index] = close
    decisions, calls = {}, 1
    if offered:
        if checkpoint is not None:
            checkpoint()
        answer = model.complete(reconciliation_messages(extraction, offered), response_format_json=True)
        decisions = parse_reconciliation(answer, {i: [c.id for c in cands] for i, cands in offered.items()})
        calls = 2
        hit(hook, "capture.reconciled")
    day, wall_time = local_day_and_time(record.completed_at, zone(vault_zone))
    return build_plan(
        intake_id=record.id, payload_sha256=record.payload_sha256, created_at=now, day=day.isoformat(),
        time=wall_time, extraction=extraction, decisions=decisions, duplicates=duplicates, model_calls=calls,
    )  # fmt: skip
