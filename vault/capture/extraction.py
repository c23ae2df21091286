"""The extraction answer: up to eight atomic memories with their entities and relations.

Grammar (declared once as `EXTRACTION_SHAPE`, which also yields the JSON Schema sent to the
model; the prompt in `vault/capture/prompt.py` states the same in words):

    {"memories":  [ {"text": SAFE(500), "salience": 0..1, "entities": [REF, ...0..8]} ...0..8 ],
     "entities":  [ {"ref": REF, "name": SAFE(80), "type": TYPE} ...0..24 ],
     "relations": [ {"from": REF, "relation": RELATION, "to": REF} ...0..24 ]}

    REF       e1 … e99                       (^e[1-9][0-9]?$), unique among entities
    TYPE      person | project | organization | concept | place | tool | event | time
    RELATION  lowercase snake case            (^[a-z][a-z0-9_]{0,39}$)

Every answer is complete or refused: a ninth memory, an undeclared or unused ref, a duplicate
ref, two entities with the same name and type, two memories with the same text, a relation
from an entity to itself or repeated, a salience outside 0..1, any unknown or missing field:
each makes the whole answer invalid. Nothing is dropped to make the rest fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memvault.vault.capture.fields import Fields, load_exact
from memvault.vault.capture.schema import ArrayOf, Choice, Pattern, Record, SafeText, UnitNumber, output_spec
from memvault.vault.capture.schema import check as check_shape

MAX_MEMORIES = 8
MAX_ENTITIES = 24
MAX_RELATIONS = 24
MAX_ENTITIES_PER_MEMORY = 8
MAX_MEMORY_CHARS = 500
MAX_NAME_CHARS = 80
ENTITY_TYPES = ("person", "project", "organization", "concept", "place", "tool", "event", "time")
REF_RE = re.compile(r"e[1-9][0-9]?")
RELATION_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")


@dataclass(frozen=True)
class ExtractedEntity:
    ref: str
    name: str
    type: str


@dataclass(frozen=True)
class ExtractedMemory:
    index: int  # position in the answer: the fact id derives from it
    text: str
    salience: float
    refs: tuple[str, ...]  # the entities extracted for this memory, in the model's order


@dataclass(frozen=True)
class ExtractedRelation:
    source: str  # a ref
    relation: str
    target: str  # a ref


@dataclass(frozen=True)
class Extraction:
    memories: tuple[ExtractedMemory, ...]
    entities: tuple[ExtractedEntity, ...]
    relations: tuple[ExtractedRelation, ...]

    def entity(self, ref: str) -> ExtractedEntity:
        return next(entity for entity in self.entities if entity.ref == ref)


#: the answer's shape: the structural half of the parser and the JSON Schema sent to the model
EXTRACTION_SHAPE = Record((
    ("memories", ArrayOf(Record((
        ("text", SafeText(MAX_MEMORY_CHARS)),
        ("salience", UnitNumber()),
        ("entities", ArrayOf(Pattern(REF_RE, "e1 … e99", 3), 0, MAX_ENTITIES_PER_MEMORY, unique=True)),
    )), 0, MAX_MEMORIES)),
    ("entities", ArrayOf(Record((
        ("ref", Pattern(REF_RE, "e1 … e99", 3)),
        ("name", SafeText(MAX_NAME_CHARS)),
        ("type", Choice(ENTITY_TYPES)),
    )), 0, MAX_ENTITIES)),
    ("relations", ArrayOf(Record((
        ("from", Pattern(REF_RE, "e1 … e99", 3)),
        ("relation", Pattern(RELATION_RE, "lowercase snake_case (^[a-z][a-z0-9_]{0,39}$)", 40)),
        ("to", Pattern(REF_RE, "e1 … e99", 3)),
    )), 0, MAX_RELATIONS)),
))  # fmt: skip
EXTRACTION_OUTPUT = output_spec("memvault_extraction", EXTRACTION_SHAPE)


def parse_extraction(text: object) -> Extraction:
    """The extraction in a completion, or ModelOutputInvalid (see the module docstring)."""
    check = Fields("extraction answer")
    top = load_exact(text, "extraction")
    check_shape(EXTRACTION_SHAPE, top, "the answer", check)
    entities = _entities(check, top["entities"])
    declared = {entity.ref for entity in entities}
    memories = _memories(check, top["memories"], declared)
    relations = _relations(check, top["relations"], declared)
    used = (
        {ref for memory in memories for ref in memory.refs}
        | {r.source for r in relations}
        | {r.target for r in relations}
    )
    unused = sorted(declared - used, key=_ref_order)
    if unused:
        raise check.fail(f"entities {unused} are used by no memory and no relation")
    return Extraction(tuple(memories), tuple(entities), tuple(relations))


def _ref_order(ref: str) -> int:
    return int(ref[1:])


# The shape is already checked: what follows are the rules a JSON Schema cannot state.


def _entities(check: Fields, items: list) -> list[ExtractedEntity]:
    entities, refs, names = [], set(), set()
    for position, item in enumerate(items):
        where = f"entities[{position}]"
        ref, name, kind = item["ref"], item["name"], item["type"]
        if ref in refs:
            raise check.fail(f"{where}.ref {ref} is declared twice")
        identity = (name.casefold(), kind)
        if identity in names:
            raise check.fail(f"{where} repeats the {kind} {name!r} under another ref (ambiguous)")
        refs.add(ref)
        names.add(identity)
        entities.append(ExtractedEntity(ref, name, kind))
    return entities


def _memories(check: Fields, items: list, declared: set[str]) -> list[ExtractedMemory]:
    memories, texts = [], set()
    for index, item in enumerate(items):
        where = f"memories[{index}]"
        text, refs = item["text"], item["entities"]
        for ref in refs:
            if ref not in declared:
                raise check.fail(f"{where}.entities names {ref}, which is not declared in entities")
        if text.casefold() in texts:
            raise check.fail(f"{where}.text repeats an earlier memory (ambiguous)")
        texts.add(text.casefold())
        memories.append(ExtractedMemory(index, text, float(item["salience"]), tuple(refs)))
    return memories


def _relations(check: Fields, items: list, declared: set[str]) -> list[ExtractedRelation]:
    relations, seen = [], set()
    for position, item in enumerate(items):
        where = f"relations[{position}]"
        source, relation, target = item["from"], item["relation"], item["to"]
        for ref in (source, target):
            if ref not in declared:
                raise check.fail(f"{where} names {ref}, which is not declared in entities")
        if source == target:
            raise check.fail(f"{where} relates {source} to itself")
        if (source, relation, target) in seen:
            raise check.fail(f"{where} repeats an earlier relation")
        seen.add((source, relation, target))
        relations.append(ExtractedRelation(source, relation, target))
    return relations
