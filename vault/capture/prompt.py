"""The two capture prompts. They state the exact grammar the strict parsers enforce.

The prompts are the model's only instruction; the parsers stay authoritative (the JSON Schema of
`schema.py` travels beside them as a generation constraint). Both ask for one JSON object and
nothing else, and both carry a worked, non-empty example (the reconciliation example shows each
action once): a small model copies the one literal example it sees, so that example must be a
real extraction, not the empty answer. The key rules are said again at the top of the user
message, which every chat template keeps. Inputs travel as a JSON document on the user
message's last line, so a turn that itself contains instructions or JSON is data, never a
change of format.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from memvault.vault.capture.extraction import (
    ENTITY_TYPES,
    MAX_ENTITIES,
    MAX_ENTITIES_PER_MEMORY,
    MAX_MEMORIES,
    MAX_MEMORY_CHARS,
    MAX_NAME_CHARS,
    MAX_RELATIONS,
    Extraction,
)

_TYPES = ", ".join(f'"{t}"' for t in ENTITY_TYPES)

# The worked examples: tests parse each with the strict parser, so they can never teach a wrong shape.
# Their subjects are deliberately unlike an agent's usual work, and a memory that copies one verbatim
# (when the input does not say it) is refused (`copied_example_problem`): a small model can copy the
# one literal example it sees into the vault as if it were a fact of the turn.
EXTRACTION_EXAMPLE = json.dumps({
    "memories": [
        {"text": "Ilse owns the greenhouse sensor rollout.", "salience": 0.7, "entities": ["e1", "e2"]},
        {"text": "The greenhouse sensor rollout ships on 2031-06-08.", "salience": 0.8, "entities": ["e2"]},
        {"text": "Ilse prefers Zigbee radios for the greenhouse sensor rollout.", "salience": 0.5,
         "entities": ["e1", "e2", "e3"]},
    ],
    "entities": [
        {"ref": "e1", "name": "Ilse", "type": "person"},
        {"ref": "e2", "name": "greenhouse sensor rollout", "type": "project"},
        {"ref": "e3", "name": "Zigbee", "type": "tool"},
    ],
    "relations": [{"from": "e1", "relation": "owns", "to": "e2"}, {"from": "e2", "relation": "uses", "to": "e3"}],
})  # fmt: skip
RECONCILIATION_EXAMPLE_INPUT = json.dumps({"memories": [
    {"index": 0, "text": "The choir rehearsal is at 19:30.",
     "candidates": [{"id": "m-1a2b3c4d5e", "text": "The choir rehearsal is at 19:00.", "date": "2031-02-02"}]},
    {"index": 1, "text": "Kofi chose teal as the kite color.",
     "candidates": [{"id": "f-2b3c4d5e6f", "text": "Kofi picked teal for the kites.", "date": "2031-02-20"}]},
    {"index": 2, "text": "Ilse owns the greenhouse sensor rollout and its maintenance.",
     "candidates": [{"id": "f-3c4d5e6f7a", "text": "Ilse owns the greenhouse sensor rollout.", "date": "2031-02-25"}]},
    {"index": 3, "text": "The bakery is closed on Friday.",
     "candidates": [{"id": "m-4d5e6f7a8b", "text": "The bakery oven is broken.", "date": "2031-02-28"}]},
]})  # fmt: skip
RECONCILIATION_EXAMPLE = json.dumps({"decisions": [
    {"index": 0, "action": "SUPERSEDE", "target": "m-1a2b3c4d5e", "text": "The choir rehearsal is at 19:30."},
    {"index": 1, "action": "NOOP", "target": "f-2b3c4d5e6f"},
    {"index": 2, "action": "UPDATE", "target": "f-3c4d5e6f7a",
     "text": "Ilse owns the greenhouse sensor rollout and its maintenance."},
    {"index": 3, "action": "ADD"},
]})  # fmt: skip

# The key rules again, in the user message: every chat template keeps that one (some drop the system message).
EXTRACTION_REMINDER = (
    'Extract the durable memories of the turn below. Answer with one JSON object {"memories": [...], '
    '"entities": [...], "relations": [...]} and nothing else. Each decision, owner, date or preference is its own '
    f"memory (at most {MAX_MEMORIES}); salience is a number from 0 to 1; every ref a memory or relation uses is "
    'declared in "entities", and every declared entity is used. The turn, as JSON:'
)
RECONCILIATION_REMINDER = (
    'Decide ADD, NOOP, UPDATE or SUPERSEDE for every new memory below. Answer with one JSON object {"decisions": '
    '[...]} and nothing else: exactly one decision per index, "target" is a candidate id listed for that same '
    'index, UPDATE and SUPERSEDE carry the complete new "text". The memories, as JSON:'
)
#: how much of a refused answer a repair call shows the model again (the rest is cut, and said so)
MAX_ECHOED_ANSWER_CHARS = 4000

EXTRACTION_SYSTEM = f"""You curate the long-term memory of an AI agent. Read one completed turn and extract \
the durable memories in it: facts, decisions, preferences, commitments, dates and owners that will \
still matter in a later conversation. Skip greetings, small talk, questions, speculation, and anything \
about this conversation itself. Each memory is atomic (one fact), self-contained (it names who or what \
it is about; no unresolved pronouns) and written as one plain sentence.

Answer with exactly one JSON object and nothing else: no markdown fences, no commentary. The object has \
exactly three fields, "memories", "entities" and "relations", and no other field:
- "memories": an array of 0 to {MAX_MEMORIES} objects. Each has exactly the fields
  "text": the memory, one line of 1 to {MAX_MEMORY_CHARS} characters, single spaces, no control characters, \
no leading or trailing spaces, not ending in a ^block-id, never a password, key or token;
  "salience": a number from 0 to 1 inclusive on the canonical 0..1 scale (0 = trivia, 1 = critical); \
never a percentage and never a 1..10 score;
  "entities": an array of 0 to {MAX_ENTITIES_PER_MEMORY} entity refs (strings), the entities this memory is \
explicitly about, each at most once.
- "entities": an array of 0 to {MAX_ENTITIES} objects. Each has exactly the fields
  "ref": an identifier matching ^e[1-9][0-9]?$ (e1, e2, ... e99), unique in this answer;
  "name": the entity's name as people write it, one line of 1 to {MAX_NAME_CHARS} characters;
  "type": one of {_TYPES}.
  Every entity is used by at least one memory or relation. Two entities never share a name and type.
- "relations": an array of 0 to {MAX_RELATIONS} objects. Each has exactly the fields
  "from": a declared entity ref; "relation": a lowercase snake_case verb phrase matching \
^[a-z][a-z0-9_]{{0,39}}$ (for example "works_on", "owns", "depends_on"); "to": another declared entity ref, \
never the same as "from". No relation appears twice.

A worked example. For the turn
  "user: Can you note the plan? assistant: Sure. Ilse owns the greenhouse sensor rollout, it ships on \
2031-06-08, and she prefers Zigbee radios for it."
the answer is
{EXTRACTION_EXAMPLE}
Most turns with a decision, an owner, a date or a preference hold at least one memory. Only when the \
turn really holds nothing durable (a greeting, a thank-you, a question that was not answered) answer \
{{"memories": [], "entities": [], "relations": []}}."""

RECONCILIATION_SYSTEM = f"""You keep an AI agent's long-term memory free of duplicates and stale facts. \
You get new memories, each with the close existing memories (candidates) found for it. Decide exactly \
one action for every new memory:
- ADD: it is new information. Shape: {{"index": I, "action": "ADD"}} (exactly these two fields).
- NOOP: a candidate already says the same thing. Shape: {{"index": I, "action": "NOOP", "target": "ID"}}.
- UPDATE: it refines or adds detail to one candidate about the same thing. Shape: \
{{"index": I, "action": "UPDATE", "target": "ID", "text": "complete replacement memory"}}.
- SUPERSEDE: it contradicts or replaces one candidate (a changed decision, a moved date). Shape: \
{{"index": I, "action": "SUPERSEDE", "target": "ID", "text": "complete replacement memory"}}.
"index" is the new memory's index as given. "target" is the id of one candidate listed for that same \
index. "text" is the whole new memory, one line of 1 to {MAX_MEMORY_CHARS} characters that keeps what is \
still true. A candidate that is updated or superseded may be named by no other decision. The action \
names are uppercase exactly as written.

Answer with exactly one JSON object and nothing else: {{"decisions": [...]}} with exactly one decision \
for every new memory listed, no other field, no markdown fences, no commentary.

A worked example, one decision of each action. For the input
{RECONCILIATION_EXAMPLE_INPUT}
the answer is
{RECONCILIATION_EXAMPLE}"""


@dataclass(frozen=True)
class Candidate:
    """An existing memory offered to the reconciler (its id, text and local date)."""

    id: str
    text: str
    day: str


def extraction_messages(turn_text: str, completed_at: str) -> list[dict[str, str]]:
    payload = {"completedAt": completed_at, "turn": turn_text}
    return [
        {"role": "system", "content": EXTRACTION_SYSTEM},
        {"role": "user", "content": EXTRACTION_REMINDER + "\n" + json.dumps(payload, ensure_ascii=False)},
    ]


def reconciliation_messages(extraction: Extraction, offered: dict[int, Sequence[Candidate]]) -> list[dict[str, str]]:
    memories = [
        {
            "index": index,
            "text": extraction.memories[index].text,
            "candidates": [{"id": c.id, "text": c.text, "date": c.day} for c in offered[index]],
        }
        for index in sorted(offered)
    ]
    return [
        {"role": "system", "content": RECONCILIATION_SYSTEM},
        {
            "role": "user",
            "content": RECONCILIATION_REMINDER + "\n" + json.dumps({"memories": memories}, ensure_ascii=False),
        },
    ]


def user_document(content: str) -> object:
    """The JSON document a capture prompt's first user message carries (its last line)."""
    return json.loads(content.rsplit("\n", 1)[-1])


def repair_messages(messages: Sequence[dict[str, str]], answer: str | None, problem: str) -> list[dict[str, str]]:
    """The conversation again, with the refused answer and the parser's exact error (one repair call)."""
    repaired = [dict(m) for m in messages]
    if answer is not None:
        shown = answer if len(answer) <= MAX_ECHOED_ANSWER_CHARS else answer[:MAX_ECHOED_ANSWER_CHARS] + " …(cut)"
        repaired.append({"role": "assistant", "content": shown})
        request = f"That answer was refused: {problem}."
    else:
        request = f"Your answer was refused: {problem}. Give a shorter answer: fewer, shorter memories."
    repaired.append({"role": "user", "content": request + " Answer again with the complete, corrected JSON object "
                     "and nothing else, following every rule."})  # fmt: skip
    return repaired


def _example_texts() -> frozenset[str]:
    extraction = json.loads(EXTRACTION_EXAMPLE)["memories"]
    decisions = json.loads(RECONCILIATION_EXAMPLE)["decisions"]
    return frozenset(
        [m["text"].casefold() for m in extraction] + [d["text"].casefold() for d in decisions if "text" in d]
    )


EXAMPLE_TEXTS = _example_texts()


def copied_example_problem(texts: Sequence[str], source: str) -> str | None:
    """Why an answer copies a worked example instead of reading its input, or None."""
    seen = source.casefold()
    for text in texts:
        if text.casefold() in EXAMPLE_TEXTS and text.casefold() not in seen:
            return (
                f"the memory {text!r} is copied from the prompt's worked example, not taken from the turn: "
                "extract only what this turn says"
            )
    return None
