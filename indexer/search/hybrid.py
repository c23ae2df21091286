"""Fusing BM25 and vector candidates: reciprocal rank fusion weighted by evidence strength.

Plain RRF throws the scores away, so a vector list of weak near-misses counts as much as a
decisive keyword match; on LoCoMo that makes plain RRF worse than BM25 alone. Here each
retriever's contribution is its RRF term scaled by how strong its own evidence is relative to
its best candidate (`1 + score / top`), and the weaker retriever (vectors, with the builtin
model) carries less weight. `bench/locomo.py` measures the choice against both single
retrievers in the same run.

Every candidate also gets a `strength` in [0, 1]: its fused score divided by the most any
candidate could score (first in every active retriever, with the top score). Automatic recall's
score band is applied to it, so the band means the same whatever the provider's score scale.
"""

from dataclasses import dataclass, field

BM25_WEIGHT = 1.0
VECTOR_WEIGHT = 0.3
COVERAGE_WEIGHT = 0.5
#: the second model's vector list (memory.extraEmbeddings, e.g. e5-small), beside the first
EXTRA_VECTOR_WEIGHT = 0.5
RRF_K = 20
#: how deep each retriever looks before fusion
CANDIDATE_DEPTH = 100


@dataclass
class Fused:
    key: str
    score: float = 0.0
    strength: float = 0.0
    #: per signal: (rank, raw score)
    evidence: dict[str, tuple[int, float]] = field(default_factory=dict)

    @property
    def explain(self) -> dict:
        """Each signal's rank and raw score, and the fused score and strength (rounded for display)."""
        shown = {name: {"rank": rank, "score": round(score, 6)} for name, (rank, score) in self.evidence.items()}
        shown["fused"] = {"score": round(self.score, 6), "strength": round(self.strength, 4)}
        return shown


def _contribute(fused: dict[str, Fused], name: str, hits: list[tuple[str, float]], weight: float) -> None:
    if not hits:
        return
    top = hits[0][1]
    scale = 1.0 / top if top > 0 else 0.0
    for rank, (key, score) in enumerate(hits, 1):
        entry = fused.get(key)
        if entry is None:
            entry = fused[key] = Fused(key)
        relative = score * scale
        entry.score += weight / (RRF_K + rank) * (1.0 + (relative if relative > 0 else 0.0))
        entry.evidence[name] = (rank, float(score))


def _ceiling(weight: float) -> float:
    """The most one retriever can give a candidate: first place with the top score."""
    return weight / (RRF_K + 1) * 2.0


def fuse(
    bm25: list[tuple[str, float]],
    vectors: list[tuple[str, float]] | None,
    coverage: list[tuple[str, float]] | None = None,
    extra: list[tuple[str, float]] | None = None,
) -> list[Fused]:
    """Candidates from every retriever, best first (ties broken by key, so answers are stable).

    `vectors` (and `coverage`, and `extra`: the second model's vectors) is None when the vault has
    no such signal (Lite; no memory.extraEmbeddings); an empty list when it has one that found
    nothing, which still counts toward the strength ceiling.
    """
    fused: dict[str, Fused] = {}
    ceiling = 0.0
    for name, hits, weight in (
        ("bm25", bm25, BM25_WEIGHT),
        ("vector", vectors, VECTOR_WEIGHT),
        ("coverage", coverage, COVERAGE_WEIGHT),
        ("extra", extra, EXTRA_VECTOR_WEIGHT),
    ):
        if hits is not None:
            _contribute(fused, name, hits, weight)
            ceiling += _ceiling(weight)
    for entry in fused.values():
        entry.strength = min(1.0, entry.score / ceiling)
    return sorted(fused.values(), key=lambda entry: (-entry.score, entry.key))
