"""A stored row as the hit recall answers with: the direct hits (`recall.py`) and the graph's
expansions (`graph_expansion.py`) are made the same way."""

from memvault.indexer.results import RecallHit


def to_recall_hit(hit, score: float, explain: dict) -> RecallHit:
    """`hit`: a stored row (bm25.Bm25Hit, or a backend's row of the same shape)."""
    return RecallHit(hit.id, hit.text, hit.source, score, hit.at, hit.kind, explain)
