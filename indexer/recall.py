"""Recall over the derived index. This is the BM25 (Lite tier) path; hybrid fusion builds on it."""

from indexer.bm25 import Bm25Hit, Bm25Index
from indexer.results import RecallHit, RecallResult


def to_recall_hit(hit: Bm25Hit, score: float, explain: dict) -> RecallHit:
    return RecallHit(hit.id, hit.text, hit.source, score, hit.at, hit.kind, explain)


def recall_bm25(bm25: Bm25Index, query: str, limit: int, mode: str) -> RecallResult:
    hits = bm25.search(query, limit)
    return RecallResult(
        query,
        mode,
        tuple(to_recall_hit(hit, hit.score, {"bm25": {"rank": rank, "score": hit.score}}) for rank, hit in enumerate(hits, 1)),
    )
