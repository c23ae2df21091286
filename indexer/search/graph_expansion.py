"""One-hop graph expansion for explicit MemoryRecall (BuJo only; auto recall stays direct-only).

    direct hits (BM25 + vectors, fused)                       ← the answer so far
      └─ the first SEEDS hits are seeds; each contributes its associated entities (graph.jsonl)
           ├─ hop 0: other facts associated with a seed entity
           └─ hop 1: for each seed entity, ONE directly related entity (the first by id of its
                     relation neighbours) may pull in the facts associated with it
    expansions take fixed ranks (EXPANSION_RANKS: 4, 7 and 10), direct hits every other rank

The layout does not depend on the limit: seeds, exclusions and ranks are computed on at
least the first ten direct hits (`direct_depth`), and a limit only cuts the merged list, so
`limit=25` and `limit=10` agree on their first 10 hits. The three best direct hits always lead.

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
from memvault.indexer.search.hits import to_recall_hit
from memvault.indexer.search.supersession import superseded_ids
from memvault.vault.errors import VaultError
from memvault.vault.graph import Graph, graph_path, read_graph

SEEDS = 5
#: the 1-based ranks expansions take, whatever the limit (fewer expansions: direct hits fill)
EXPANSION_RANKS = (4, 7, 10)
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


def direct_depth(limit: int) -> int:
    """How many direct hits the layout needs for a list of `limit`: never fewer than the seeds
    and the ranks it places expansions among, so a small limit sees the same layout."""
    return max(limit, SEEDS, EXPANSION_RANKS[-1])


def expansion_slots(limit: int) -> int:
    """How many expansions a list of `limit` hits can hold."""
    return sum(rank <= limit for rank in EXPANSION_RANKS)


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
    """The first `limit` hits of `result` (direct hits to `direct_depth(limit)`) with graph
    neighbours at EXPANSION_RANKS."""
    direct = result.hits
    if not direct or expansion_slots(limit) == 0:
        return replace(result, hits=direct[:limit])
    try:
        graph = load_graph(root)
        retired = superseded_ids(bm25.folder.parent)
    except (VaultError, OSError) as exc:
        return replace(result, hits=direct[:limit], degraded=result.degraded or f"graph expansion skipped ({exc})")
    if not graph.facts:
        return replace(result, hits=direct[:limit])
    shown = {hit.id for hit in direct[: EXPANSION_RANKS[-1]]}  # already near the top: never repeated
    expansions = _expansions(graph, bm25, direct[:SEEDS], shown, retired, len(EXPANSION_RANKS))
    return replace(result, hits=tuple(merge(direct, expansions, limit)))


def merge(direct, expansions, limit: int) -> list[RecallHit]:
    """Direct hits in order, each expansion at its rank; an expansion also found lower among the
    direct hits moves up (listed once)."""
    moved = {hit.id for hit in expansions}
    rest = [hit for hit in direct if hit.id not in moved]
    pending = list(expansions)
    merged: list[RecallHit] = []
    while len(merged) < limit and (rest or pending):
        if pending and (len(merged) + 1 in EXPANSION_RANKS or not rest):
            merged.append(pending.pop(0))
        else:
            merged.append(rest.pop(0))
    return merged


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
