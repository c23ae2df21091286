"""`graph.jsonl`: the BuJo entity graph beside the curated notes. Pure parse/render plus one CAS write.

One JSON object per line, three kinds, written in this order and each sorted, so two vaults
with the same graph hold the same bytes and a capture changes only the lines it adds:

    {"id":"e-3f1a09c2b4","kind":"entity","name":"Morgan","type":"person"}
    {"entities":["e-3f1a09c2b4","e-91c0d2e4aa"],"id":"f-0a1b2c3d4e","kind":"fact","salience":0.8,"source":"daily/2026-11-30.md"}
    {"from":"e-3f1a09c2b4","kind":"relation","relation":"works_on","to":"e-91c0d2e4aa"}

A `fact` line is the association of one curated fact (its bullet id and note) with exactly the
entities extracted *for that fact*, and its salience (0..1). There is never a turn-wide
fact × entity product. Relations are directed and lowercase (`^[a-z][a-z0-9_]{0,39}$`).

Hand edits are tolerated where they are unambiguous: blank lines, other key order or spacing,
lines in another order, a renamed entity (its id stays; a later capture keeps the person's
name), deleted lines, a fact or relation naming an entity that is no longer declared (ignored
by readers). A person's change is never overwritten: merging only adds what is missing. What
cannot be read safely is refused with `GraphInvalid` naming the line and the fix (and capture
waits, retrying, until it is fixed): a line that is not a JSON object, an unknown kind or field,
a duplicate key, an uppercase relation, a salience outside 0..1, or one id declared twice with
different content.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memvault.vault.errors import InvalidRecord
from memvault.vault.fsio import read_bytes_nofollow
from memvault.vault.layout import DAILY, note_day
from memvault.vault.locks import replace_if_unchanged
from memvault.vault.paths import resolve_inside
from memvault.vault.strict_json import loads_strict

GRAPH_FILE = "graph.jsonl"
MAX_GRAPH_BYTES = 64 * 1024 * 1024
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
_TYPE_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
RELATION_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
_KEYS = {
    "entity": {"id", "kind", "name", "type"},
    "fact": {"entities", "id", "kind", "salience", "source"},
    "relation": {"from", "kind", "relation", "to"},
}


class GraphInvalid(InvalidRecord):
    """graph.jsonl holds something memvault will not guess about."""


@dataclass(frozen=True)
class Entity:
    id: str
    name: str
    type: str


@dataclass(frozen=True)
class FactLink:
    id: str
    entities: tuple[str, ...]
    salience: float
    source: str  # the daily note holding the fact's bullet


@dataclass
class Graph:
    entities: dict[str, Entity] = field(default_factory=dict)
    facts: dict[str, FactLink] = field(default_factory=dict)
    relations: set[tuple[str, str, str]] = field(default_factory=set)

    def add_entity(self, entity: Entity) -> bool:
        if entity.id in self.entities:
            return False  # the existing (possibly hand-renamed) entity wins
        self.entities[entity.id] = entity
        return True

    def add_fact(self, link: FactLink) -> bool:
        if link.id in self.facts:
            return False
        self.facts[link.id] = link
        return True

    def add_relation(self, source: str, relation: str, target: str) -> bool:
        before = len(self.relations)
        self.relations.add((source, relation, target))
        return len(self.relations) != before

    def entities_of(self, fact: str) -> tuple[str, ...]:
        link = self.facts.get(fact)
        return () if link is None else tuple(e for e in link.entities if e in self.entities)

    def neighbours(self, entity: str) -> list[str]:
        """Entities one relation away (either direction), sorted."""
        out = {b for a, _, b in self.relations if a == entity} | {a for a, _, b in self.relations if b == entity}
        return sorted(e for e in out if e in self.entities and e != entity)

    def facts_of(self, entity: str) -> list[FactLink]:
        return sorted((f for f in self.facts.values() if entity in f.entities), key=lambda f: f.id)


# --- rendering ---------------------------------------------------------------------------------


def _line(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False) + "\n"


def render_graph(graph: Graph) -> bytes:
    lines = [
        _line({"id": e.id, "kind": "entity", "name": e.name, "type": e.type})
        for e in sorted(graph.entities.values(), key=lambda e: e.id)
    ]
    lines += [
        _line({"entities": list(f.entities), "id": f.id, "kind": "fact", "salience": f.salience, "source": f.source})
        for f in sorted(graph.facts.values(), key=lambda f: f.id)
    ]
    lines += [_line({"from": a, "kind": "relation", "relation": r, "to": b}) for a, r, b in sorted(graph.relations)]
    return "".join(lines).encode("utf-8")


# --- tolerant, fail-closed parsing ---------------------------------------------------------------


def graph_too_big(where: str, size: int) -> GraphInvalid:
    return GraphInvalid(f"{where} is {size} bytes; the limit is {MAX_GRAPH_BYTES}. Fix: archive old lines elsewhere.")


def parse_graph(data: bytes, where: str = GRAPH_FILE) -> Graph:
    """The graph in `data`, or GraphInvalid naming the first line memvault will not guess about."""
    if len(data) > MAX_GRAPH_BYTES:
        raise graph_too_big(where, len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GraphInvalid(f"{where}: invalid UTF-8 at byte {exc.start}. Fix: re-save the file as UTF-8.") from None
    graph = Graph()
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.strip():
            _parse_line(graph, raw, f"{where} line {number}")
    return graph


def parse_graph_skipping(data: bytes, where: str = GRAPH_FILE) -> tuple[Graph, list[str]]:
    """For pages that show the graph: every good line, and the GraphInvalid message of each bad
    one (its line number and fix). Writers keep `parse_graph`: capture never rewrites a file it
    could not read whole, but one bad line must not hide every entity from a person."""
    if len(data) > MAX_GRAPH_BYTES:
        raise graph_too_big(where, len(data))
    graph, problems = Graph(), []
    for number, raw_bytes in enumerate(data.splitlines(), 1):
        try:
            raw = raw_bytes.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(
                f"{where} line {number}: invalid UTF-8 at byte {exc.start}. Fix: re-save the file as UTF-8."
            )
            continue
        if raw.strip():
            try:
                _parse_line(graph, raw, f"{where} line {number}")
            except GraphInvalid as exc:
                problems.append(str(exc))
    return graph, problems


def _parse_line(graph: Graph, raw: str, where: str) -> None:
    def fail(problem: str) -> GraphInvalid:
        return GraphInvalid(
            f"{where}: {problem}. Fix: correct or delete that line (capture retries until it is fixed)."
        )

    try:
        body = loads_strict(raw)
    except (ValueError, RecursionError) as exc:
        raise fail(f"not a JSON object ({str(exc)[:80]})") from None
    if not isinstance(body, dict) or body.get("kind") not in _KEYS:
        raise fail('each line must be an object with "kind" entity, fact or relation')
    kind = body["kind"]
    if set(body) != _KEYS[kind]:
        raise fail(f"a {kind} line has exactly the fields {sorted(_KEYS[kind])}")
    if kind == "entity":
        entity = Entity(
            _check(body["id"], _ID_RE, "id", fail),
            _name(body["name"], fail),
            _check(body["type"], _TYPE_RE, "type", fail),
        )
        if graph.entities.get(entity.id, entity) != entity:
            raise fail(f"entity {entity.id} is declared twice with different content")
        graph.entities[entity.id] = entity
    elif kind == "fact":
        link = _fact(body, fail)
        if graph.facts.get(link.id, link) != link:
            raise fail(f"fact {link.id} has two different association lines")
        graph.facts[link.id] = link
    else:
        relation = _check(body["relation"], RELATION_RE, "relation (lowercase snake_case)", fail)
        graph.relations.add(
            (_check(body["from"], _ID_RE, "from", fail), relation, _check(body["to"], _ID_RE, "to", fail))
        )


def _check(value: Any, regex: re.Pattern[str], what: str, fail) -> str:
    if not isinstance(value, str) or regex.fullmatch(value) is None:
        raise fail(f"{what} {str(value)[:40]!r} is not valid")
    return value


def _name(value: Any, fail) -> str:
    if not isinstance(value, str) or not value.strip() or "\n" in value or len(value) > 200:
        raise fail("name must be one line of 1 to 200 characters")
    return value


def _fact(body: dict[str, Any], fail) -> FactLink:
    salience = body["salience"]
    if type(salience) not in (int, float) or not 0 <= salience <= 1:
        raise fail("salience must be a number from 0 to 1")
    entities = body["entities"]
    if not isinstance(entities, list) or len(entities) > 64:
        raise fail("entities must be a list of at most 64 entity ids")
    ids = tuple(_check(e, _ID_RE, "entity id", fail) for e in entities)
    if len(set(ids)) != len(ids):
        raise fail("entities names an entity twice")
    source = body["source"]
    if not isinstance(source, str) or note_day(source, DAILY) is None:  # flat or YYYY/MM/ (vault/layout.py)
        raise fail(
            f"source {str(source)[:60]!r} is not a daily note (daily/YYYY-MM-DD.md or daily/YYYY/MM/YYYY-MM-DD.md)"
        )
    return FactLink(_check(body["id"], _ID_RE, "id", fail), ids, float(salience), source)


# --- the file --------------------------------------------------------------------------------------


def graph_path(root: Path) -> Path:
    return resolve_inside(Path(root), GRAPH_FILE)


def read_graph(root: Path) -> tuple[Graph, bytes | None]:
    """The graph and the exact bytes read (None when there is no file yet), for a CAS write."""
    path = graph_path(root)
    try:
        size = os.lstat(path).st_size
    except FileNotFoundError:
        return Graph(), None
    if size > MAX_GRAPH_BYTES:  # refused by its size, never read whole
        raise graph_too_big(GRAPH_FILE, size)
    try:
        data = read_bytes_nofollow(path)
    except FileNotFoundError:
        return Graph(), None
    return parse_graph(data), data


def write_graph(root: Path, old: bytes | None, graph: Graph) -> bool:
    """Replace graph.jsonl if its canonical bytes changed. Caller holds the vault lock."""
    new = render_graph(graph)
    if new == old:
        return False
    replace_if_unchanged(graph_path(root), old, new, mode=0o644)
    return True
