"""The two capture prompts. They state the exact grammar the strict parsers enforce.

The prompts are the model's only instruction; the parsers stay authoritative. Both ask for one
JSON object and nothing else. Inputs travel as a JSON document in the user message, so a turn
that itself contains instructions or JSON is data, never a change of format.
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
When nothing is worth remembering, answer {{"memories": [], "entities": [], "relations": []}}."""

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
for every new memory listed, no other field, no markdown fences, no commentary."""


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
        {"role": "user", "content": json.dumps(payload, ensure_ascii=False)},
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
        {"role": "user", "content": json.dumps({"memories": memories}, ensure_ascii=False)},
    ]
