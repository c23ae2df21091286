"""Recall: BM25 and (for Journal/BuJo) vector candidates, fused, mapped to hits with sources."""

from indexer.bm25 import Bm25Hit, Bm25Index
from indexer.hybrid import CANDIDATE_DEPTH, Fused, fuse
from indexer.results import RecallHit, RecallResult


def to_recall_hit(hit: Bm25Hit, score: float, explain: dict) -> RecallHit:
    return RecallHit(hit.id, hit.text, hit.source, score, hit.at, hit.kind, explain)


def retrieve(bm25: Bm25Index, semantic, query: str, depth: int = CANDIDATE_DEPTH):
    """Fused candidates with their stored rows, and why the answer is degraded (or None).

    `semantic` is the SemanticService for Journal/BuJo, None for Lite (which never embeds).
    """
    lexical = bm25.search(query, depth)
    rows = {hit.key: hit for hit in lexical}
    vectors, degraded = (None, None)
    if semantic is not None:
        vectors, degraded = semantic.search(query, depth)
        if vectors:
            missing = [key for key, _ in vectors if key not in rows]
            rows.update(bm25.get_by_keys(missing))
            # a vector whose row is gone (deleted since it was embedded) is never returned
            vectors = [(key, score) for key, score in vectors if key in rows]
    fused = fuse([(hit.key, hit.score) for hit in lexical], vectors)
    return [(entry, rows[entry.key]) for entry in fused if entry.key in rows], degraded


def recall_tool(bm25: Bm25Index, semantic, query: str, limit: int, mode: str) -> RecallResult:
    """MemoryRecall: up to `limit` hits, each with text, date, source and its fusion evidence."""
    candidates, degraded = retrieve(bm25, semantic, query)
    hits = tuple(_hit(entry, row) for entry, row in candidates[:limit])
    return RecallResult(query, mode, hits, degraded=degraded)


def _hit(entry: Fused, row: Bm25Hit) -> RecallHit:
    return to_recall_hit(row, entry.score, entry.explain)
