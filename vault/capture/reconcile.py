"""The reconciliation answer: one decision for every new memory that has close existing ones.

Only memories with close candidates are offered (novel ones never reach this call), each with
its candidates' ids. The answer must be

    {"decisions": [ DECISION, ... exactly one per offered index ]}

with exactly these per-action shapes (no other field, none missing):

    {"index": I, "action": "ADD"}
    {"index": I, "action": "NOOP",      "target": ID}
    {"index": I, "action": "UPDATE",    "target": ID, "text": SAFE(500)}
    {"index": I, "action": "SUPERSEDE", "target": ID, "text": SAFE(500)}

`I` is an offered index; `ID` is one of the candidate ids supplied *for that index*; the text is
the complete replacement memory. A target that an UPDATE or SUPERSEDE changes may be named by
no other decision (two decisions rewriting, or one keeping and one replacing, the same memory
is an ambiguous collision). A missing, repeated or unoffered index, a lowercase action, an
unsupplied target: the whole answer is invalid.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memvault.vault.capture.extraction import MAX_MEMORY_CHARS
from memvault.vault.capture.fields import Fields, load_exact
from memvault.vault.capture.schema import (
    ArrayOf,
    Choice,
    Integer,
    OutputSpec,
    Record,
    SafeText,
    Tagged,
    offered_choice,
    output_spec,
)
from memvault.vault.capture.schema import check as check_shape

ADD, NOOP, UPDATE, SUPERSEDE = "ADD", "NOOP", "UPDATE", "SUPERSEDE"
REPLACING = (UPDATE, SUPERSEDE)


@dataclass(frozen=True)
class Decision:
    index: int
    action: str
    target: str | None = None
    text: str | None = None


def reconciliation_shape(offered: Mapping[int, Sequence[str]]) -> Record:
    """The answer's shape for one call: its offered indexes and supplied ids are part of it."""
    index = ("index", Integer(tuple(sorted(offered)), "was not offered for reconciliation"))
    target = ("target", offered_choice([cid for ids in offered.values() for cid in ids]))
    text = ("text", SafeText(MAX_MEMORY_CHARS))
    variants = (
        (ADD, Record((index, ("action", Choice((ADD,)))))),
        (NOOP, Record((index, ("action", Choice((NOOP,))), target))),
        (UPDATE, Record((index, ("action", Choice((UPDATE,))), target, text))),
        (SUPERSEDE, Record((index, ("action", Choice((SUPERSEDE,))), target, text))),
    )
    return Record((("decisions", ArrayOf(Tagged("action", variants), len(offered), len(offered))),))


def reconciliation_output(offered: Mapping[int, Sequence[str]]) -> OutputSpec:
    return output_spec("memvault_reconciliation", reconciliation_shape(offered))


def parse_reconciliation(text: object, offered: Mapping[int, Sequence[str]]) -> dict[int, Decision]:
    """Decisions by memory index, or ModelOutputInvalid (see the module docstring)."""
    check = Fields("reconciliation answer")
    top = load_exact(text, "reconciliation")
    check_shape(reconciliation_shape(offered), top, "the answer", check)
    decisions: dict[int, Decision] = {}
    # the shape is checked; what follows are the rules a JSON Schema cannot state
    for position, item in enumerate(top["decisions"]):
        where = f"decisions[{position}]"
        decision = Decision(item["index"], item["action"], item.get("target"), item.get("text"))
        if decision.index in decisions:
            raise check.fail(f"{where} decides index {decision.index} a second time")
        if decision.target is not None and decision.target not in offered[decision.index]:
            raise check.fail(f"{where}.target must be one of the candidate ids supplied for index {decision.index}")
        decisions[decision.index] = decision
    # len(offered) decisions, each on an offered index, none twice: every offered index is decided
    _refuse_collisions(check, decisions.values())
    return decisions


def _refuse_collisions(check: Fields, decisions) -> None:
    named = Counter(d.target for d in decisions if d.target is not None)
    for decision in decisions:
        if decision.action in REPLACING and named[decision.target] > 1:
            raise check.fail(
                f"target {decision.target} is {decision.action.lower()}d by index {decision.index} "
                "and named by another decision too (ambiguous collision)"
            )
