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

ADD, NOOP, UPDATE, SUPERSEDE = "ADD", "NOOP", "UPDATE", "SUPERSEDE"
ACTIONS = (ADD, NOOP, UPDATE, SUPERSEDE)
REPLACING = (UPDATE, SUPERSEDE)
_SHAPES = {
    ADD: {"index", "action"},
    NOOP: {"index", "action", "target"},
    UPDATE: {"index", "action", "target", "text"},
    SUPERSEDE: {"index", "action", "target", "text"},
}


@dataclass(frozen=True)
class Decision:
    index: int
    action: str
    target: str | None = None
    text: str | None = None


def parse_reconciliation(text: object, offered: Mapping[int, Sequence[str]]) -> dict[int, Decision]:
    """Decisions by memory index, or ModelOutputInvalid (see the module docstring)."""
    check = Fields("reconciliation answer")
    top = check.object(load_exact(text, "reconciliation"), {"decisions"}, "the answer")
    items = check.array(top["decisions"], "decisions", len(offered), len(offered))
    decisions: dict[int, Decision] = {}
    for position, raw in enumerate(items):
        decision = _decision(check, raw, f"decisions[{position}]", offered)
        if decision.index in decisions:
            raise check.fail(f"decisions[{position}] decides index {decision.index} a second time")
        decisions[decision.index] = decision
    missing = sorted(set(offered) - set(decisions))
    if missing:
        raise check.fail(f"no decision for offered indexes {missing} (every offered memory needs one)")
    _refuse_collisions(check, decisions.values())
    return decisions


def _decision(check: Fields, raw: object, where: str, offered: Mapping[int, Sequence[str]]) -> Decision:
    if not isinstance(raw, dict):
        raise check.fail(f"{where} must be an object")
    action = raw.get("action")
    if action not in ACTIONS:
        raise check.fail(f"{where}.action must be exactly one of {', '.join(ACTIONS)}")
    item = check.object(raw, _SHAPES[action], f"{where} ({action})")
    index = check.integer(item["index"], f"{where}.index")
    if index not in offered:
        raise check.fail(f"{where}.index {index} was not offered for reconciliation")
    if action == ADD:
        return Decision(index, ADD)
    target = item["target"]
    if not isinstance(target, str) or target not in offered[index]:
        raise check.fail(f"{where}.target must be one of the candidate ids supplied for index {index}")
    if action == NOOP:
        return Decision(index, NOOP, target)
    replacement = check.safe_text(item["text"], f"{where}.text", MAX_MEMORY_CHARS)
    return Decision(index, action, target, replacement)


def _refuse_collisions(check: Fields, decisions) -> None:
    named = Counter(d.target for d in decisions if d.target is not None)
    for decision in decisions:
        if decision.action in REPLACING and named[decision.target] > 1:
            raise check.fail(f"target {decision.target} is {decision.action.lower()}d by index {decision.index} "
                             "and named by another decision too (ambiguous collision)")
