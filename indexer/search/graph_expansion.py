"""One-hop graph expansion for explicit MemoryRecall (BuJo only; auto recall stays direct-only).

    direct hits (BM25 + vectors, fused)                       ← the answer so far
      └─ the first SEEDS hits are seeds; each contributes its associated entities (graph.jsonl)
           ├─ hop 0: other facts associated with a seed entity
           └─ hop 1: for each seed entity, ONE directly related entity (the first by id of its
                     relation neighbours) may pull in the facts associated with it
    expansions take at most RESERVED = min(3, limit // 3) slots, always after the direct hits

Deterministic: seeds in rank order, entities in the seed's association order, facts by
salience (high first) then id; a tie never depends on dict order or time. Nothing is
synthesised: an expansion is a stored curated row (looked up by its key), not superseded, not
already a direct hit, and it carries its route in `explain["graph"]` (seed, entity, related
entity, hop). An unreadable graph leaves the direct answer intact and says so in `degraded`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from memvault.indexer.results import RecallHit, RecallResult
from memvault.indexer.search.recall import to_recall_hit
from memvault.indexer.search.supersession import superseded_ids
from memvault.vault.errors import VaultError
from memvault.vault.graph import Graph, graph_path, read_graph

SEEDS = 5
MAX_RESERVED = 3
HOP_WEIGHT = {0: 0.5, 1: 0.25}  # an expansion's score: its seed's score times this
_graph_cache: dict[Path, tuple[tuple[int, int, int], Graph]] = {}


def load_graph(root: Path) -> Graph:
    """graph.jsonl parsed, cached by its stat; an empty graph when there is none."""
    path = graph_path(root)
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return Graph()
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    cached = _graph_cache.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    graph, _ = read_graph(root)
    _graph_cache[path] = (key, graph)
    return graph


def reserved_slots(limit: int) -> int:
    return min(MAX_RESERVED, limit // 3)


def routes(graph: Graph, seeds: tuple[RecallHit, ...]) -> list[tuple[str, RecallHit, str, str | None, int]]:
    """Candidate (fact id, seed, entity, related entity, hop), in the deterministic order."""
    seed_entities: list[tuple[str, RecallHit]] = []
    for seed in seeds:
        for entity in graph.entities_of(seed.id):
            if entity not in {e for e, _ in seed_entities}:
                seed_entities.append((entity, seed))
    found: list[tuple[str, RecallHit, str, str | None, int]] = []
    for entity, seed in seed_entities:
        found += [(link.id, seed, entity, None, 0) for link in _ranked(graph, entity)]
    for entity, seed in seed_entities:
        related = graph.neighbours(entity)[:1]  # one directly related entity per seed entity
        for other in related:
            found += [(link.id, seed, entity, other, 1) for link in _ranked(graph, other)]
    return found


def _ranked(graph: Graph, entity: str):
    return sorted(graph.facts_of(entity), key=lambda link: (-link.salience, link.id))


def expand_recall(root: Path, bm25, result: RecallResult, limit: int) -> RecallResult:
    """`result` with up to `reserved_slots(limit)` graph neighbours in its last slots."""
    reserve = reserved_slots(limit)
    if not result.hits or reserve == 0:
        return result
    try:
        graph = load_graph(root)
        retired = superseded_ids(bm25.folder.parent)
    except (VaultError, OSError) as exc:
        return replace(result, degraded=result.degraded or f"graph expansion skipped ({exc})")
    if not graph.facts:
        return result
    head = result.hits[: limit - reserve]
    taken = {hit.id for hit in head}
    expansions = _expansions(graph, bm25, result.hits[:SEEDS], taken, retired, reserve)
    chosen = {hit.id for hit in expansions}
    tail = [hit for hit in result.hits[len(head):] if hit.id not in chosen][: limit - len(head) - len(expansions)]
    return replace(result, hits=tuple(head) + tuple(tail) + tuple(expansions))


def _expansions(graph: Graph, bm25, seeds, taken: set[str], retired, reserve: int) -> list[RecallHit]:
    candidates = routes(graph, seeds)
    keys = {fact: f"{graph.facts[fact].source}#{fact}" for fact, *_ in candidates}
    rows = bm25.get_by_keys(sorted(set(keys.values())))
    out: list[RecallHit] = []
    for fact, seed, entity, related, hop in candidates:
        row = rows.get(keys[fact])
        if fact in taken or fact in retired or row is None or row.kind != "curated":
            continue
        taken.add(fact)
        explain = {"graph": {"seed": seed.id, "entity": entity, "related": related, "hop": hop}}
        out.append(to_recall_hit(row, seed.score * HOP_WEIGHT[hop], explain))
        if len(out) == reserve:
            break
    return out
