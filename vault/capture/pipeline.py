"""Planning one capture: exactly one extraction call, at most one batched reconciliation call.

    extraction = parse_extraction(model.complete(extraction prompt))         # call 1, always
    for each memory: an exact current duplicate → NOOP (no model needed)
                     close existing memories     → offered for reconciliation
                     none                        → ADD (clearly novel: skips call 2)
    decisions = parse_reconciliation(model.complete(reconciliation prompt))  # call 2, only if offered
    plan = build_plan(...)

Entity extraction is part of call 1; there is never a third *kind* of call. Each call sends the
answer's JSON Schema and token cap (`OutputSpec`). Repair, not blind retry: when an answer is
invalid (the parser refuses it, or the server cut it at the token cap), the same conversation
goes back to the model once, at once, with the parser's exact error; only if the repaired answer
is invalid too does the attempt fail with `ModelOutputInvalid`, and nothing is planned: the
intake retries the whole run later on its invalid-output budget (a plan is only ever built from
valid answers). A run therefore makes at most 4 calls: extraction (+ repair), reconciliation
(+ repair). The model and the candidate lookup come in through `ChatModel` and `CandidateFinder`,
so this runs without HTTP or an index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from memvault.vault.capture.extraction import EXTRACTION_OUTPUT, parse_extraction
from memvault.vault.capture.fields import EmptyExtraction, ModelOutputInvalid
from memvault.vault.capture.plan import SemanticPlan, build_plan
from memvault.vault.capture.prompt import (
    Candidate,
    copied_example_problem,
    extraction_messages,
    reconciliation_messages,
    repair_messages,
)
from memvault.vault.capture.reconcile import parse_reconciliation, reconciliation_output
from memvault.vault.capture.schema import OutputSpec
from memvault.vault.capture.stats import SUBSTANTIVE_MIN_WORDS, is_substantive
from memvault.vault.clock import local_day_and_time, zone
from memvault.vault.intake.files import CrashHook, hit
from memvault.vault.intake.record import IntakeRecord, format_ts

#: called between steps; raises to abandon the attempt (the intake worker's shutdown)
Checkpoint = Callable[[], None]


class ChatModel(Protocol):
    def complete(
        self, messages: Sequence[Mapping[str, str]], *, response_format_json: bool, output: OutputSpec | None = None
    ) -> str: ...


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
    source = turn_text(record)

    def parse(answer: str):
        parsed = parse_extraction(answer)
        copied = copied_example_problem([m.text for m in parsed.memories], source)
        if copied is not None:
            raise ModelOutputInvalid(f"extraction answer: {copied}")
        return parsed

    extraction, calls = ask(model, messages, EXTRACTION_OUTPUT, parse, checkpoint)
    if not extraction.memories and is_substantive(turn_text(record)):
        raise EmptyExtraction(
            f"the model extracted no memory from a substantive turn (at least {SUBSTANTIVE_MIN_WORDS} "
            "words): not counted as captured; try a larger model, then `memvault retry`"
        )
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
    decisions: dict = {}
    if offered:
        if checkpoint is not None:
            checkpoint()
        ids = {i: [c.id for c in cands] for i, cands in offered.items()}
        offered_texts = " ".join(
            [extraction.memories[i].text for i in offered] + [c.text for cs in offered.values() for c in cs]
        )

        def parse_decisions(answer: str):
            decided = parse_reconciliation(answer, ids)
            copied = copied_example_problem([d.text for d in decided.values() if d.text is not None], offered_texts)
            if copied is not None:
                raise ModelOutputInvalid(f"reconciliation answer: {copied}")
            return decided

        decisions, more = ask(model, reconciliation_messages(extraction, offered), reconciliation_output(ids),
                              parse_decisions, checkpoint)  # fmt: skip
        calls += more
        hit(hook, "capture.reconciled")
    day, wall_time = local_day_and_time(record.completed_at, zone(vault_zone))
    return build_plan(
        intake_id=record.id, payload_sha256=record.payload_sha256, created_at=now, day=day.isoformat(),
        time=wall_time, extraction=extraction, decisions=decisions, duplicates=duplicates, model_calls=calls,
    )  # fmt: skip


def ask(
    model: ChatModel,
    messages: list[dict[str, str]],
    output: OutputSpec,
    parse: Callable,
    checkpoint: Checkpoint | None = None,
):
    """(parsed answer, calls made): one call, and one repair call if the first answer is invalid."""
    answer = None
    try:
        answer = model.complete(messages, response_format_json=True, output=output)
        return parse(answer), 1
    except ModelOutputInvalid as problem:
        if checkpoint is not None:
            checkpoint()
        repaired = model.complete(
            repair_messages(messages, answer, str(problem)), response_format_json=True, output=output
        )
        return parse(repaired), 2
