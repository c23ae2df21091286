"""The retained semantic plan: what one capture run will commit, decided once, kept until resolution.

After the model calls, everything the commit needs is fixed in a plan and fsynced before the
first canonical byte is written:

    .capture-intake/plans/<intake id>.json      0600, canonical JSON (sorted keys, no spaces, LF)

The commit then only *applies* the plan (facts into `daily/`, `graph.jsonl`, the replay
sidecar, the index), and each step finds what an interrupted earlier attempt already wrote. A
crash anywhere after the plan is durable therefore replays without a second model call and
without a duplicate fact. The plan is removed after the run's receipt and ledger entry exist;
`memvault resolve` refuses a run whose plan is still retained (it is recoverable: start the
BuJo agent), and a rebuild into Lite or Journal is refused while one exists.

Ids are derived, never random:
- a fact: `f-` + the first 10 hex digits of SHA-256(intake id, NUL, memory index);
- an entity: `e-` + the first 10 hex digits of SHA-256(type, NUL, casefolded name), so the same
  person or project extracted in different turns is one node.
The plan also fixes the note day and wall time (from the turn's completion instant in the
vault's zone at planning time), so a replay writes to the same note even if the zone changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from memvault.vault.capture.extraction import ENTITY_TYPES, RELATION_RE, Extraction
from memvault.vault.capture.fields import ModelOutputInvalid
from memvault.vault.capture.reconcile import NOOP, SUPERSEDE, UPDATE, Decision
from memvault.vault.errors import InvalidRecord
from memvault.vault.fsio import atomic_write, ensure_private_dir, fsync_dir
from memvault.vault.intake.files import INTAKE_DIR, is_intake_id, read_private
from memvault.vault.intake.record import format_ts
from memvault.vault.paths import resolve_inside

PLAN_FORMAT = 1
PLANS_DIR = "plans"
FACT_PREFIX, ENTITY_PREFIX = "f-", "e-"
ADD_FACT, UPDATE_FACT, SUPERSEDE_FACT = "add", "update", "supersede"
FACT_ACTIONS = (ADD_FACT, UPDATE_FACT, SUPERSEDE_FACT)
_DAY_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME_RE = re.compile(r"(?:[01]\d|2[0-3]):[0-5]\d(?:[+-](?:[01]\d|2[0-3]):[0-5]\d)?")
_TS_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
_PLAN_NAME_RE = re.compile(r"(?P<id>[0-9a-f]{64})\.json")


def fact_id(intake_id: str, index: int) -> str:
    return FACT_PREFIX + hashlib.sha256(f"{intake_id}\0{index}".encode()).hexdigest()[:10]


def entity_id(name: str, kind: str) -> str:
    return ENTITY_PREFIX + hashlib.sha256(f"{kind}\0{name.casefold()}".encode()).hexdigest()[:10]


@dataclass(frozen=True)
class PlannedFact:
    id: str
    index: int
    text: str
    action: str  # add | update | supersede
    target: str | None  # the superseded/updated memory's id
    salience: float
    entities: tuple[str, ...]  # entity ids extracted for THIS memory only

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "entities": list(self.entities), "id": self.id, "index": self.index,
                "salience": self.salience, "target": self.target, "text": self.text}  # fmt: skip


@dataclass(frozen=True)
class SemanticPlan:
    id: str  # intake id
    payload_sha256: str
    created_at: datetime
    day: str
    time: str
    model_calls: int
    facts: tuple[PlannedFact, ...]
    noops: tuple[tuple[int, str], ...]  # (memory index, existing id it duplicates)
    entities: tuple[tuple[str, str, str], ...]  # (id, name, type), sorted by id
    relations: tuple[tuple[str, str, str], ...]  # (from id, relation, to id), sorted

    def note_in(self, layout) -> str:
        """The daily note the facts go to: where the vault keeps that day (flat or `YYYY/MM/`)."""
        return layout.note_relpath("daily", date.fromisoformat(self.day))

    def to_json(self) -> dict[str, Any]:
        return {
            "createdAt": format_ts(self.created_at),
            "day": self.day,
            "entities": [{"id": i, "name": n, "type": t} for i, n, t in self.entities],
            "facts": [fact.to_json() for fact in self.facts],
            "id": self.id,
            "modelCalls": self.model_calls,
            "noops": [{"index": i, "target": t} for i, t in self.noops],
            "payloadSha256": self.payload_sha256,
            "relations": [{"from": a, "relation": r, "to": b} for a, r, b in self.relations],
            "time": self.time,
            "v": PLAN_FORMAT,
        }


def build_plan(
    *, intake_id: str, payload_sha256: str, created_at: datetime, day: str, time: str, extraction: Extraction,
    decisions: dict[int, Decision], duplicates: dict[int, str], model_calls: int,
) -> SemanticPlan:  # fmt: skip
    """The plan for one run. `duplicates` are memories whose exact text is already a current fact."""
    ids = {entity.ref: entity_id(entity.name, entity.type) for entity in extraction.entities}
    facts, noops, texts = [], [], set()
    for memory in extraction.memories:
        decision = decisions.get(memory.index)
        if memory.index in duplicates:
            noops.append((memory.index, duplicates[memory.index]))
            continue
        if decision is not None and decision.action == NOOP:
            noops.append((memory.index, decision.target))
            continue
        action, target, text = ADD_FACT, None, memory.text
        if decision is not None and decision.action in (UPDATE, SUPERSEDE):
            action = UPDATE_FACT if decision.action == UPDATE else SUPERSEDE_FACT
            target, text = decision.target, decision.text
        if text.casefold() in texts:
            raise ModelOutputInvalid(
                f"reconciliation answer: index {memory.index} yields the same fact text as an earlier one"
            )
        texts.add(text.casefold())
        entities = tuple(dict.fromkeys(ids[ref] for ref in memory.refs))
        facts.append(
            PlannedFact(fact_id(intake_id, memory.index), memory.index, text, action, target, memory.salience, entities)
        )
    entity_rows = sorted({(ids[e.ref], e.name, e.type) for e in extraction.entities})
    relation_rows = sorted({(ids[r.source], r.relation, ids[r.target]) for r in extraction.relations})
    return SemanticPlan(intake_id, payload_sha256, created_at, day, time, model_calls, tuple(facts),
                        tuple(noops), tuple(entity_rows), tuple(relation_rows))  # fmt: skip


# --- canonical bytes and the strict parser ----------------------------------------------------


def render_plan(plan: SemanticPlan) -> bytes:
    return (
        json.dumps(plan.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        + b"\n"
    )


def parse_plan(data: bytes, expected_id: str, where: str) -> SemanticPlan:
    """Exactly what `render_plan` writes for `expected_id`, or InvalidRecord naming the file."""

    def fail(problem: str) -> InvalidRecord:
        return InvalidRecord(
            f"{where}: {problem}. Fix: move the plan aside and run `memvault inspect`; "
            "the run is then captured again from its intake record (one more model call)."
        )

    try:
        body = json.loads(data.decode("utf-8"))
        plan = _plan_from_json(body)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise fail(f"not a valid semantic plan ({str(exc)[:120]})") from None
    if plan.id != expected_id:
        raise fail("its id does not match its file name")
    if render_plan(plan) != data:
        raise fail("bytes are not in canonical form (hand-edited?)")
    return plan


def _plan_from_json(body: dict) -> SemanticPlan:
    if set(body) != _PLAN_KEYS:
        raise ValueError(f"fields {sorted(body)}")
    if body["v"] != PLAN_FORMAT or not is_intake_id(body["id"]) or not _TS_RE.fullmatch(body["createdAt"]):
        raise ValueError("version, id or createdAt")
    if not _DAY_RE.fullmatch(body["day"]) or not _TIME_RE.fullmatch(body["time"]):
        raise ValueError("day or time")
    if type(body["modelCalls"]) is not int or body["modelCalls"] not in (1, 2, 3, 4):  # each call may need one repair
        raise ValueError("modelCalls")
    facts = tuple(_fact_from_json(item) for item in body["facts"])
    noops = tuple(
        (_int(item["index"]), _id(item["target"])) for item in body["noops"] if set(item) == {"index", "target"}
    )
    if len(noops) != len(body["noops"]):
        raise ValueError("noops")
    entities = tuple(
        (_id(e["id"]), _str(e["name"]), _choice(e["type"], ENTITY_TYPES))
        for e in body["entities"]
        if set(e) == {"id", "name", "type"}
    )
    relations = tuple(
        (_id(r["from"]), _relation(r["relation"]), _id(r["to"]))
        for r in body["relations"]
        if set(r) == {"from", "relation", "to"}
    )
    if len(entities) != len(body["entities"]) or len(relations) != len(body["relations"]):
        raise ValueError("entities or relations")
    created = datetime.strptime(body["createdAt"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=_utc())
    return SemanticPlan(body["id"], _str(body["payloadSha256"]), created, body["day"], body["time"],
                        body["modelCalls"], facts, noops, entities, relations)  # fmt: skip


_PLAN_KEYS = {
    "createdAt",
    "day",
    "entities",
    "facts",
    "id",
    "modelCalls",
    "noops",
    "payloadSha256",
    "relations",
    "time",
    "v",
}
_FACT_KEYS = {"action", "entities", "id", "index", "salience", "target", "text"}


def _fact_from_json(item: dict) -> PlannedFact:
    if set(item) != _FACT_KEYS:
        raise ValueError("fact fields")
    salience = item["salience"]
    if type(salience) is not float or not 0 <= salience <= 1:
        raise ValueError("salience")
    target = None if item["target"] is None else _id(item["target"])
    return PlannedFact(_id(item["id"]), _int(item["index"]), _str(item["text"]), _choice(item["action"], FACT_ACTIONS),
                       target, salience, tuple(_id(e) for e in item["entities"]))  # fmt: skip


def _utc():

    return UTC


def _int(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ValueError("index")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("text")
    return value


def _id(value: Any) -> str:
    if not isinstance(value, str) or not _ID_RE.fullmatch(value):
        raise ValueError(f"id {value!r}")
    return value


def _choice(value: Any, options: tuple[str, ...]) -> str:
    if value not in options:
        raise ValueError(f"{value!r}")
    return value


def _relation(value: Any) -> str:
    if not isinstance(value, str) or not RELATION_RE.fullmatch(value):
        raise ValueError("relation")
    return value


# --- the retained plan on disk ------------------------------------------------------------------


def plans_dir(root: Path) -> Path:
    return resolve_inside(Path(root), f"{INTAKE_DIR}/{PLANS_DIR}")


def plan_path(root: Path, intake_id: str) -> Path:
    if not is_intake_id(intake_id):
        raise InvalidRecord(f"{intake_id!r} is not an intake id")
    return plans_dir(root) / f"{intake_id}.json"


def write_plan(root: Path, plan: SemanticPlan) -> None:
    """Make the plan durable (0600, fsynced) before the commit writes anything."""
    ensure_private_dir(plans_dir(root))
    atomic_write(plan_path(root, plan.id), render_plan(plan), mode=0o600)


def read_plan(root: Path, intake_id: str) -> SemanticPlan | None:
    """The retained plan of a run, None if there is none; a damaged plan fails closed."""
    path = plan_path(root, intake_id)
    try:
        data = read_private(path)
    except FileNotFoundError:
        return None
    return parse_plan(data, intake_id, str(path))


def retire_plan(root: Path, intake_id: str) -> bool:
    """Remove a plan once its run is resolved; False if it was already gone."""
    path = plan_path(root, intake_id)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def retained_plan_ids(root: Path) -> list[str]:
    """Intake ids with a retained plan on disk (sorted)."""
    directory = plans_dir(root)
    if not directory.is_dir() or directory.is_symlink():
        return []
    return sorted(m["id"] for name in os.listdir(directory) if (m := _PLAN_NAME_RE.fullmatch(name)))
